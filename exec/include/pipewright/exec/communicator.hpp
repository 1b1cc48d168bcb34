// The Communicator interface: the only collective and point-to-point operations pipewright uses,
// modelled on c10d's ProcessGroup/Work but narrow.
//
// Buffers are raw views (pointer, element count, dtype, device) rather than torch tensors so that
// this header, the MPI and NCCL backends, and the plan interpreter's bookkeeping compile without
// libtorch, and so that device (CUDA) buffers pass through unchanged. Every operation is
// asynchronous and returns a Work handle; Work::wait(timeout) blocks until completion and rethrows
// the error stored by the backend: TimeoutError on expiry, PeerError when a peer died,
// BackendError otherwise. Error messages name the peer rank and the OpContext (step, stage,
// microbatch, what) given with the operation.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipewright::exec {

enum class DType : std::uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8 };
[[nodiscard]] std::size_t dtype_size(DType dtype) noexcept;
[[nodiscard]] const char* to_string(DType dtype) noexcept;

struct Device {
  enum class Kind : std::uint8_t { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // CUDA ordinal; 0 for CPU
  [[nodiscard]] bool is_cuda() const noexcept { return kind == Kind::kCuda; }
};

struct BufferView {
  void* data = nullptr;
  std::size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  Device device{};
  [[nodiscard]] std::size_t bytes() const noexcept { return count * dtype_size(dtype); }
};

enum class ReduceOp : std::uint8_t { kSum, kMax, kMin };

// Who asked for an operation; used only in error messages ("rank 1 stage 3 microbatch 2 step 7").
struct OpContext {
  std::int64_t step = -1;
  std::int32_t stage = -1;
  std::int32_t microbatch = -1;
  std::string what;  // "SEND_F", "allreduce bucket 2", ...
  [[nodiscard]] std::string describe() const;
};

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until done. Throws TimeoutError after `timeout`; rethrows a stored backend error.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Non-blocking completion test; rethrows a stored error.
  [[nodiscard]] virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// A Work that is already complete (for operations that finished synchronously).
[[nodiscard]] WorkPtr completed_work();

// A point-to-point partner of this rank (Communicator::connect_p2p) and how many bytes of
// channel the messages of one step need each way: their payload plus 128 bytes per message.
struct P2PLink {
  int peer = -1;               // communicator-local rank
  std::size_t send_bytes = 0;  // this rank to `peer`, per step
  std::size_t recv_bytes = 0;  // `peer` to this rank, per step
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  [[nodiscard]] virtual int rank() const noexcept = 0;  // rank within this communicator
  [[nodiscard]] virtual int size() const noexcept = 0;
  [[nodiscard]] virtual std::string backend_name() const = 0;
  // Rank of communicator-local rank `r` in the world (for error messages).
  [[nodiscard]] virtual int global_rank(int r) const noexcept = 0;

  // Point-to-point. `tag` distinguishes concurrent messages between one pair (the interpreter
  // derives it from stage, direction and microbatch). Ranks are communicator-local.
  virtual WorkPtr send(const BufferView& buf, int dst, std::int64_t tag, const OpContext& ctx) = 0;
  virtual WorkPtr recv(const BufferView& buf, int src, std::int64_t tag, const OpContext& ctx) = 0;

  // Collectives over every rank of this communicator, in place.
  virtual WorkPtr all_reduce(const BufferView& buf, ReduceOp op, const OpContext& ctx) = 0;
  virtual WorkPtr reduce(const BufferView& buf, int root, ReduceOp op, const OpContext& ctx) = 0;
  virtual WorkPtr broadcast(const BufferView& buf, int root, const OpContext& ctx) = 0;
  virtual WorkPtr barrier(const OpContext& ctx) = 0;

  // Sharded collectives (ZeRO, issue 43) on flat buffers cut into size() equal pieces; `in` and
  // `out` have the same dtype and device. reduce_scatter: in.count == size() * out.count; `out`
  // receives piece rank() of the element-wise reduction of every rank's `in` (16-bit buffers are
  // summed in float32 and rounded once). all_gather: out.count == size() * in.count; piece r of
  // `out` receives rank r's `in`. `in` may be piece rank() of `out` itself (all_gather), and
  // `out` piece rank() of `in` (reduce_scatter; in place, as MPI_IN_PLACE and NCCL allow: `in`
  // is scratch then); otherwise they must not overlap. The defaults throw
  // BackendError naming the backend.
  virtual WorkPtr reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp op,
                                 const OpContext& ctx);
  virtual WorkPtr all_gather(const BufferView& in, const BufferView& out, const OpContext& ctx);

  // Memory for a buffer that this communicator's all_reduce() will work on, zero-filled, at
  // least 64-byte aligned. A backend that can reach its peers' copies directly (Gloo among ranks
  // of one host: shared memory, Note [Shared-memory all-reduce]) reduces such buffers in place
  // instead of sending them; all_reduce() of any other buffer is unchanged. Collective: every
  // rank calls it with the same size, in the same order relative to its other collective calls,
  // and later all-reduces the same part of it. The default is ordinary heap memory.
  [[nodiscard]] virtual std::shared_ptr<void> allocate_collective_buffer(std::size_t bytes);

  // Groups the point-to-point operations issued between begin_p2p_batch() and end_p2p_batch()
  // so that a rendezvous transport (NCCL) posts them together and paired send/recv cannot
  // deadlock. Buffered backends may ignore it.
  virtual void begin_p2p_batch() {}
  virtual void end_p2p_batch() {}

  // Prepares point-to-point messages with the peers of `links`. Every peer named must call it
  // too, naming this rank (the links of a plan are symmetric); a second call for a peer does
  // nothing. A backend may open a faster channel to such a peer (Gloo, both ranks on one host:
  // shared memory, Note [Shared-memory point-to-point]); messages to other peers, and the
  // collectives, are unchanged. Throws TimeoutError / PeerError when a peer never answers. The
  // default does nothing.
  virtual void connect_p2p(const std::vector<P2PLink>& /*links*/) {}
  // The peers (communicator-local, ascending) that connect_p2p gave a faster channel (tests,
  // diagnostics).
  [[nodiscard]] virtual std::vector<int> shared_memory_peers() const { return {}; }
  // How each peer that connect_p2p named is reached, one line each, for the run's log (issue
  // 44: no silent fallback): "rank 3: shared memory (rings of 1 MiB to it, 64 KiB from it)",
  // "rank 3: TCP (shared memory turned off)". Empty for backends with one transport.
  [[nodiscard]] virtual std::vector<std::string> p2p_transports() const { return {}; }
  // Bytes per element an all_reduce of `buf` moves on this backend's transport: the buffer's
  // element size, except where the backend widens it (Gloo's TCP path sends float16/bfloat16
  // buffers as float32, Note [16-bit sums]). The data-parallel wire statistics use it.
  [[nodiscard]] virtual std::size_t all_reduce_element_bytes(const BufferView& buf) const {
    return dtype_size(buf.dtype);
  }

  // Creates the sub-communicator of `members` (communicator-local ranks, ascending). Collective:
  // every rank of this communicator calls it with the same list, in the same order of calls;
  // returns nullptr on ranks that are not members.
  [[nodiscard]] virtual std::unique_ptr<Communicator> split(const std::vector<int>& members) = 0;
};

}  // namespace pipewright::exec
