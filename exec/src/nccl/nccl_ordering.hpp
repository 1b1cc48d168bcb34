// Stream/event bookkeeping of the NCCL backend, behind small interfaces so that its logic is
// unit-tested on the CPU with fakes (tests/exec/nccl_ordering_test.cpp).
//
// Note [NCCL stream ordering]
// Each NCCL communicator owns one communication stream; the caller's work runs on the compute
// stream (torch's current stream: the device's default stream). For every operation (or every
// p2p batch) the tracker
//   1. records an event on the compute stream and makes the comm stream wait for it, so the
//      operation sees every kernel that produced its buffer, without blocking the host;
//   2. lets the communicator enqueue the NCCL call on the comm stream; a non-blocking
//      communicator may answer ncclInProgress, in which case the tracker polls
//      ncclCommGetAsyncError until the call is enqueued (NCCL forbids touching the streams before);
//   3. records a completion event on the comm stream: the Work of the operation waits on it.
// Work::wait(timeout) polls that event and the communicator's asynchronous error until the event
// completes, then makes the compute stream wait for it (so later kernels that read or overwrite
// the buffer are ordered after the transfer). On expiry or a peer failure it aborts the
// communicator (ncclCommAbort: NCCL cannot cancel one operation) and throws TimeoutError or
// PeerError; the communicator is then dead and every later call rethrows the same error.
// Because compute and comm streams are distinct, a DDP bucket all-reduce overlaps the rest of
// backward. Callers keep buffers alive until their Work was waited on (torch's caching allocator
// would otherwise reuse the memory on the compute stream while the transfer still reads it).
//
// Operations issued between begin_batch() and end_batch() (a group of NCCL p2p calls between
// ncclGroupStart and ncclGroupEnd) share one ordering event and one completion event: NCCL
// launches them together at ncclGroupEnd, so none of them is complete before all are.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl/nccl_errors.hpp"
#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

// An event owned by a StreamOps implementation (a cudaEvent_t in the real one).
class GpuEvent {
 public:
  virtual ~GpuEvent() = default;
};
using GpuEventPtr = std::shared_ptr<GpuEvent>;

// The compute stream and the communication stream of one communicator on one device.
class StreamOps {
 public:
  virtual ~StreamOps() = default;
  [[nodiscard]] virtual GpuEventPtr record_on_compute() = 0;
  [[nodiscard]] virtual GpuEventPtr record_on_comm() = 0;
  virtual void comm_waits_for(const GpuEvent& event) = 0;     // device-side wait, host returns
  virtual void compute_waits_for(const GpuEvent& event) = 0;  // device-side wait, host returns
  [[nodiscard]] virtual bool is_complete(const GpuEvent& event) = 0;  // host-side query
};

struct CommHealth {
  GpuStatus status = GpuStatus::kOk;
  std::string detail;  // "ncclRemoteError: remote process exited ..." when not ok
};

// The communicator's asynchronous state (ncclCommGetAsyncError) and its abort (ncclCommAbort).
class CommControl {
 public:
  virtual ~CommControl() = default;
  [[nodiscard]] virtual CommHealth poll() = 0;
  virtual void abort() noexcept = 0;  // idempotent
};

// Time source and sleep, injectable so that timeout tests are exact and instant.
struct PollClock {
  std::function<std::chrono::steady_clock::time_point()> now;
  std::function<void(std::chrono::microseconds)> pause;
  [[nodiscard]] static PollClock real();
};

// What a Work is for, in messages: "send to rank 2" / "all_reduce", with the caller's context.
struct OpInfo {
  std::string op;
  int peer = -1;  // global rank of the p2p peer, -1 for collectives
  OpContext ctx;
};

namespace detail {
struct TrackerState;
struct Completion;
}  // namespace detail

class OpTracker {
 public:
  // `self` is this process's global rank and `group` the global ranks of the communicator, for
  // messages. `enqueue_timeout` bounds step 2 of the note (the communicator's default timeout).
  OpTracker(std::shared_ptr<StreamOps> streams, std::shared_ptr<CommControl> control, int self,
            std::vector<int> group, std::chrono::milliseconds enqueue_timeout,
            PollClock clock = PollClock::real());

  // Step 1, before each NCCL call; in a batch only the first call orders (once per batch).
  // Rethrows the communicator's fatal error if it was aborted.
  void before_enqueue();
  // Steps 2 and 3 after the NCCL call returned (`in_progress`: it returned ncclInProgress).
  // Inside a batch, returns a Work completed by end_batch() instead.
  [[nodiscard]] WorkPtr after_enqueue(OpInfo info, bool in_progress);

  void begin_batch();  // throws InternalError when already in a batch
  // After ncclGroupEnd returned. Works of the batch waited on before this throw InternalError.
  void end_batch(bool in_progress);
  [[nodiscard]] bool in_batch() const noexcept { return batch_ != nullptr; }

  // Aborts the communicator and makes it dead with `error` (e.g. a failed NCCL call): every
  // pending Work (including those of an open batch, which is closed) and every later operation
  // rethrows it; the first fatal error wins.
  void fail(std::exception_ptr error);
  // Rethrows the fatal error, if any.
  void check_alive() const;
  // Polls until a non-blocking call is done (step 2); public for communicator-level calls
  // (init, split, finalize) that are not Works.
  void wait_enqueued(const OpInfo& info);

  [[nodiscard]] CallSite site(int peer, const OpContext* ctx) const;

 private:
  std::shared_ptr<detail::TrackerState> state_;
  std::shared_ptr<detail::Completion> batch_;  // non-null between begin_batch and end_batch
  bool batch_ordered_ = false;
  std::vector<OpInfo> batch_ops_;
};

}  // namespace pipewright::exec
