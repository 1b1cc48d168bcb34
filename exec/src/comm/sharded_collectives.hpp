// What every backend's sharded collectives (Communicator::reduce_scatter / all_gather, ZeRO:
// issue 43) share: the argument checks and the local reduction of the pieces a rank received.
// Private to exec/; no torch.
//
// Note [Gloo sharded collectives]: libtorch 1.13's Gloo has no reduce_scatter; an all-to-all of
// the input's pieces (piece q to rank q: (size-1)/size of the input each way, what a ring
// reduce-scatter moves) and a local sum of the received pieces in rank order (16-bit types in
// float32, rounded once) replace it. all_gather is c10d's allgather. Both move the buffers as
// bytes, bit for bit. MPI and NCCL have both natively.
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

// A Work that runs `finish` once, on the waiting thread, when `inner` completes (the local sum
// after Gloo's all-to-all, Note [Gloo sharded collectives]).
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
