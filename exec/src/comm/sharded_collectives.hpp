// What every backend's sharded collectives (Communicator::reduce_scatter / all_gather, ZeRO:
// issue 43) share: the argument checks and the local reduction of the pieces a rank received.
// Private to exec/; no torch.
//
// Note [Gloo sharded collectives]: libtorch's Gloo has no reduce_scatter, and its allgather
// gathers into a flat copy of the whole output. The Gloo backend therefore runs both itself:
// among the ranks of one host on the communicator's shared-memory buffers (Note [Shared-memory
// sharded collectives], shm_collectives.hpp), else as a ring over TCP (Note [TCP ring
// collectives], gloo/tcp_ring.hpp: d-1 steps, each rank talking only to its two neighbours,
// (d-1)/d of the input each way, two chunks of scratch, 16-bit types summed in float32 and
// rounded once). MPI and NCCL have both natively.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

// InternalError unless `in` and `out` fit a sharded collective over `size` ranks: same dtype and
// device, and out.count == size * in.count (gather) or in.count == size * out.count (scatter).
// `prefix` starts the message ("rank 1: reduce_scatter (...)").
void check_sharded(const BufferView& in, const BufferView& out, int size, bool gather,
                   const std::string& prefix);

// True when `in` is piece `rank` of `out` (the in-place all-gather).
[[nodiscard]] bool gather_in_place(const BufferView& in, const BufferView& out, int rank) noexcept;
// True when `out` is piece `rank` of `in` (the in-place reduce-scatter).
[[nodiscard]] bool scatter_in_place(const BufferView& in, const BufferView& out, int rank) noexcept;

// out[i] = op(pieces[0][i], pieces[1][i], ...) for i < count, in piece order. float16 and
// bfloat16 accumulate in float32 and are rounded once at the end; other types reduce in their own
// type. `out` may be one of the pieces.
void reduce_pieces(void* out, const std::vector<const void*>& pieces, std::size_t count,
                   DType dtype, ReduceOp op);

// A Work that runs `finish` once, on the waiting thread, when `inner` completes (e.g. rounding a
// widened 16-bit all-reduce back, Note [16-bit all-reduce over Gloo]).
class FinishingWork final : public Work {
 public:
  FinishingWork(WorkPtr inner, std::function<void()> finish)
      : inner_(std::move(inner)), finish_(std::move(finish)) {}
  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    finish();
  }
  [[nodiscard]] bool is_completed() override {
    if (!inner_->is_completed()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    finish_();
    done_ = true;
  }
  WorkPtr inner_;
  std::function<void()> finish_;
  std::mutex mu_;
  bool done_ = false;
};

}  // namespace pipewright::exec::detail
