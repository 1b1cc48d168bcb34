#include "nccl/nccl_ordering.hpp"

#include <algorithm>
#include <sstream>
#include <thread>
#include <utility>

#include "comm/communicator_base.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace detail {

struct TrackerState {
  std::shared_ptr<StreamOps> streams;
  std::shared_ptr<CommControl> control;
  int self = -1;
  std::vector<int> group;
  std::chrono::milliseconds enqueue_timeout{0};
  PollClock clock;

  mutable std::mutex mutex;
  std::exception_ptr fatal;  // set once; the communicator was aborted

  std::exception_ptr fatal_error() const {
    std::lock_guard<std::mutex> lock(mutex);
    return fatal;
  }
  // Aborts the communicator and makes `error` the fatal error (the first one wins).
  std::exception_ptr abort_with(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!fatal) fatal = std::move(error);
      error = fatal;
    }
    control->abort();
    return error;
  }

  std::string prefix(const OpInfo& info) const {
    std::ostringstream os;
    os << "rank " << self << ": " << info.op << " (" << info.ctx.describe() << ")";
    return os.str();
  }

  // Maps a failed health poll to the exception of the note: PeerError or BackendError.
  std::exception_ptr health_error(const OpInfo& info, const CommHealth& health) const {
    if (health.status == GpuStatus::kPeerFailure) {
      return std::make_exception_ptr(PeerError(prefix(info) + ": peer failure reported by NCCL: " +
                                               health.detail + " (NCCL communicator aborted)"));
    }
    return std::make_exception_ptr(BackendError(prefix(info) + ": NCCL error: " + health.detail +
                                                " (NCCL communicator aborted)"));
  }

  std::exception_ptr timeout_error(const OpInfo& info, std::chrono::milliseconds timeout,
                                   const char* while_doing) const {
    std::ostringstream os;
    os << prefix(info) << ": timed out after " << timeout.count() << " ms" << while_doing
       << " (NCCL communicator aborted)";
    return std::make_exception_ptr(TimeoutError(os.str()));
  }
};

// The completion of one operation or one p2p batch: `event` is recorded on the comm stream once
// the operation is enqueued (at end_batch() for a batch).
struct Completion {
  GpuEventPtr event;
  std::exception_ptr error;  // enqueueing failed
};

}  // namespace detail

namespace {

constexpr std::chrono::microseconds kFirstPause{10};
constexpr std::chrono::microseconds kMaxPause{1000};

// Completion, stored errors and the wait loop are BasicWork's (Note [Work completion]); this
// Work looks at its comm-stream event and the communicator's asynchronous error, pauses with a
// doubling backoff on the injectable clock, and makes a timeout fatal to the communicator.
class StreamWork final : public detail::BasicWork {
 public:
  StreamWork(std::shared_ptr<detail::TrackerState> state,
             std::shared_ptr<detail::Completion> completion, OpInfo info)
      : BasicWork(state->prefix(info)),
        state_(std::move(state)),
        completion_(std::move(completion)),
        info_(std::move(info)) {}

 private:
  // One look at the operation: true when complete (and the compute stream ordered after it),
  // false when still running; throws on a stored or newly detected failure.
  bool test() override {
    if (auto fatal = state_->fatal_error()) std::rethrow_exception(fatal);
    if (completion_->error) std::rethrow_exception(completion_->error);
    if (state_->streams->is_complete(*completion_->event)) {
      state_->streams->compute_waits_for(*completion_->event);
      return true;
    }
    const CommHealth health = state_->control->poll();
    if (health.status == GpuStatus::kPeerFailure || health.status == GpuStatus::kError) {
      std::rethrow_exception(state_->abort_with(state_->health_error(info_, health)));
    }
    return false;
  }

  void check_waitable() const override {
    PW_ASSERT(completion_->event != nullptr || completion_->error || state_->fatal_error(),
              "Work of " << info_.op << " (" << info_.ctx.describe()
                         << ") waited on before end_p2p_batch()");
  }

  std::string waiting_for() const override { return "the NCCL operation"; }

  void pause(WaitState& wait, std::unique_lock<std::mutex>& /*lock*/) override {
    wait.backoff = wait.backoff.count() == 0 ? kFirstPause : std::min(wait.backoff * 2, kMaxPause);
    state_->clock.pause(wait.backoff);
  }

  detail::WorkClock::time_point now() const override { return state_->clock.now(); }

  // NCCL cannot cancel one operation: a timeout aborts the communicator.
  std::exception_ptr timeout_error(std::chrono::milliseconds timeout) override {
    return state_->abort_with(state_->timeout_error(info_, timeout, ""));
  }

  std::shared_ptr<detail::TrackerState> state_;
  std::shared_ptr<detail::Completion> completion_;
  OpInfo info_;
};

}  // namespace

PollClock PollClock::real() {
  return PollClock{[] { return std::chrono::steady_clock::now(); },
                   [](std::chrono::microseconds d) { std::this_thread::sleep_for(d); }};
}

OpTracker::OpTracker(std::shared_ptr<StreamOps> streams, std::shared_ptr<CommControl> control,
                     int self, std::vector<int> group, std::chrono::milliseconds enqueue_timeout,
                     PollClock clock)
    : state_(std::make_shared<detail::TrackerState>()) {
  PW_ASSERT(streams != nullptr && control != nullptr, "OpTracker needs streams and a control");
  state_->streams = std::move(streams);
  state_->control = std::move(control);
  state_->self = self;
  state_->group = std::move(group);
  state_->enqueue_timeout = enqueue_timeout;
  state_->clock = std::move(clock);
}

void OpTracker::check_alive() const {
  if (auto fatal = state_->fatal_error()) std::rethrow_exception(fatal);
}

void OpTracker::fail(std::exception_ptr error) {
  error = state_->abort_with(std::move(error));
  if (batch_ != nullptr) {
    batch_->error = error;
    batch_ = nullptr;
    batch_ops_.clear();
  }
}

CallSite OpTracker::site(int peer, const OpContext* ctx) const {
  CallSite s;
  s.rank = state_->self;
  s.peer = peer;
  if (peer < 0) s.group = state_->group;
  s.ctx = ctx;
  return s;
}

void OpTracker::before_enqueue() {
  check_alive();
  if (batch_ != nullptr) {
    if (batch_ordered_) return;
    batch_ordered_ = true;
  }
  const GpuEventPtr produced = state_->streams->record_on_compute();
  state_->streams->comm_waits_for(*produced);
}

void OpTracker::wait_enqueued(const OpInfo& info) {
  const auto deadline = state_->clock.now() + state_->enqueue_timeout;
  std::chrono::microseconds pause = kFirstPause;
  while (true) {
    check_alive();
    const CommHealth health = state_->control->poll();
    if (health.status == GpuStatus::kOk) return;
    if (health.status != GpuStatus::kInProgress) {
      std::rethrow_exception(state_->abort_with(state_->health_error(info, health)));
    }
    if (state_->clock.now() >= deadline) {
      std::rethrow_exception(state_->abort_with(
          state_->timeout_error(info, state_->enqueue_timeout, " while NCCL was enqueueing it")));
    }
    state_->clock.pause(pause);
    pause = std::min(pause * 2, kMaxPause);
  }
}

WorkPtr OpTracker::after_enqueue(OpInfo info, bool in_progress) {
  if (batch_ != nullptr) {
    batch_ops_.push_back(info);
    return std::make_shared<StreamWork>(state_, batch_, std::move(info));
  }
  if (in_progress) wait_enqueued(info);
  auto completion = std::make_shared<detail::Completion>();
  completion->event = state_->streams->record_on_comm();
  return std::make_shared<StreamWork>(state_, std::move(completion), std::move(info));
}

void OpTracker::begin_batch() {
  PW_ASSERT(batch_ == nullptr, "begin_p2p_batch() inside a p2p batch");
  check_alive();
  batch_ = std::make_shared<detail::Completion>();
  batch_ordered_ = false;
  batch_ops_.clear();
}

void OpTracker::end_batch(bool in_progress) {
  PW_ASSERT(batch_ != nullptr, "end_p2p_batch() without begin_p2p_batch()");
  std::shared_ptr<detail::Completion> batch = std::move(batch_);
  batch_ = nullptr;
  const std::vector<OpInfo> ops = std::move(batch_ops_);
  batch_ops_.clear();
  if (ops.empty()) return;  // an empty group enqueues nothing
  try {
    if (in_progress) wait_enqueued(ops.front());
    batch->event = state_->streams->record_on_comm();
  } catch (...) {
    batch->error = std::current_exception();
    throw;
  }
}

}  // namespace pipewright::exec
