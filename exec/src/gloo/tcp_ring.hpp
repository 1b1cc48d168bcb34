// Ring reduce-scatter and all-gather over point-to-point messages (the Gloo backend's TCP path,
// issue 43). No torch: the transport is an interface that gloo_communicator.cpp implements over
// c10d's send/recv. Private to exec/.
//
// Note [TCP ring collectives]: between hosts (or with shared memory turned off) the sharded
// collectives run as NCCL's ring: rank r sends only to r+1 and receives only from r-1.
//   reduce_scatter: d-1 steps. At step s rank r sends piece r-1-s (step 0: its own input; later:
//     the partial sums it computed at step s-1) and receives piece r-2-s from r-1, which it
//     reduces with its own input of that piece into the partial sums; at the last step that is
//     piece r, written into `out`. Each piece moves (d-1)/d of the input each way per rank, in
//     chunks of kRingChunkBytes, two in flight (a chunk's send completes before the chunk is
//     overwritten by the next step's partial sums). The partial sums live in `out` (out of
//     place), in `in` itself (in place: `in` is scratch, and piece r-1-s is never written while
//     it is sent), or, for float16/bfloat16, in one float32 buffer of the piece: 16-bit inputs
//     are summed in float32 and rounded once, at the last step (Note [16-bit sums]); step 0
//     sends the 16-bit input as is, later steps send float32 partial sums. Extra memory: two
//     chunks (plus that float32 piece for 16-bit types at 3 ranks or more), never the input's
//     size as the all-to-all it replaces needed.
//   Determinism: piece q is reduced in one fixed order, ((in_{q+1} + in_{q+2}) + ...) + in_q
//     (ranks mod d), by the ranks along the ring, whatever the arrival order; each piece is
//     reduced exactly once, on its way to rank q, and an all-gather copies it bit for bit, so
//     every replica sees the same bits (the order differs from the shared-memory path's rank
//     order, which float32 rounding can show in the last bit).
//   all_gather: rank r puts `in` in piece r of `out` (nothing to do in place), then d-1 steps:
//     it sends piece r-s to r+1 and receives piece r-1-s from r-1 straight into `out`. No
//     buffer besides `out` (c10d's allgather gathers into a flat copy of the output first).
// The operations run in FIFO order on one worker thread per communicator, so they are
// asynchronous (ZeRO overlaps them with backward); every transfer waits at most the
// communicator's timeout and an error names the rank, the operation and the peer. After one
// failure the later operations fail at once (a half-done ring may leave stale messages behind).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

// Bytes of one reduce-scatter message (a chunk of a piece); two are in flight per direction.
inline constexpr std::size_t kRingChunkBytes = std::size_t{1} << 20;

// One posted transfer. wait() blocks until it completed, at most the transport's timeout, and
// throws the pipewright error (TimeoutError, PeerError, BackendError) naming the peer.
class RingTransfer {
 public:
  virtual ~RingTransfer() = default;
  virtual void wait() = 0;
};

// What the ring needs from a transport: non-blocking sends and receives of raw bytes to and from
// communicator-local ranks, matched in posting order per (peer, tag). `prefix` starts error
// messages ("rank 1: reduce_scatter (step 3 ...)").
class RingTransport {
 public:
  virtual ~RingTransport() = default;
  [[nodiscard]] virtual std::unique_ptr<RingTransfer> send(const void* data, std::size_t bytes,
                                                           int peer, std::uint32_t tag,
                                                           const std::string& prefix) = 0;
  [[nodiscard]] virtual std::unique_ptr<RingTransfer> recv(void* data, std::size_t bytes, int peer,
                                                           std::uint32_t tag,
                                                           const std::string& prefix) = 0;
};

// Note [TCP ring collectives]
class TcpRing {
 public:
  // `global_ranks[r]` names communicator rank r in messages.
  TcpRing(int rank, std::vector<int> global_ranks, std::shared_ptr<RingTransport> transport,
          std::size_t chunk_bytes = kRingChunkBytes);
  TcpRing(const TcpRing&) = delete;
  TcpRing& operator=(const TcpRing&) = delete;
  // Fails the queued operations and joins the worker (the running operation fails at its next
  // transfer, or once a transfer it waits for times out), or detaches it after abandon().
  ~TcpRing();

  // Arguments as Communicator::reduce_scatter / all_gather, already checked (check_sharded).
  [[nodiscard]] WorkPtr reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp op,
                                       std::string prefix);
  [[nodiscard]] WorkPtr all_gather(const BufferView& in, const BufferView& out, std::string prefix);

  // The destructor detaches the worker instead of joining it (Note [Leaking a failed process
  // group]: after a failure a transfer may block until the transport's own timeout).
  void abandon() noexcept { abandon_ = true; }

  struct Job;     // one queued operation and its completion (the Work's shared state)
  struct Shared;  // the queue, shared with the worker thread

 private:
  [[nodiscard]] WorkPtr submit(std::shared_ptr<Job> job);

  int rank_;
  std::vector<int> global_ranks_;
  std::shared_ptr<Shared> shared_;
  std::thread worker_;
  bool abandon_ = false;
};

}  // namespace pipewright::exec::detail
