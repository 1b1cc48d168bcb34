// The NCCL backend's stream/event bookkeeping (Note [NCCL stream ordering]) against fake streams,
// a fake communicator state and a fake clock: ordering, which event a Work waits on, batches,
// non-blocking enqueue, timeout and abort decisions, and error mapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "nccl/nccl_ordering.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;

struct FakeEvent final : GpuEvent {
  explicit FakeEvent(std::string n) : name(std::move(n)) {}
  std::string name;
  bool complete = false;
  int complete_after = -1;  // >= 0: complete once queried more than this many times
  int seen = 0;
};

// Logs every stream operation as text: "compute:e1", "comm waits e1", "comm:e2", ...
class FakeStreams final : public StreamOps {
 public:
  GpuEventPtr record_on_compute() override { return record("compute"); }
  GpuEventPtr record_on_comm() override { return record("comm"); }
  void comm_waits_for(const GpuEvent& e) override { log.push_back("comm waits " + name(e)); }
  void compute_waits_for(const GpuEvent& e) override { log.push_back("compute waits " + name(e)); }
  bool is_complete(const GpuEvent& e) override {
    ++queries;
    auto& fake = const_cast<FakeEvent&>(static_cast<const FakeEvent&>(e));
    if (fake.complete_after >= 0 && ++fake.seen > fake.complete_after) fake.complete = true;
    return fake.complete;
  }

  std::shared_ptr<FakeEvent> event(const std::string& n) {
    for (auto& e : events)
      if (e->name == n) return e;
    return nullptr;
  }

  std::vector<std::string> log;
  std::vector<std::shared_ptr<FakeEvent>> events;
  int queries = 0;

 private:
  GpuEventPtr record(const std::string& stream) {
    auto e = std::make_shared<FakeEvent>("e" + std::to_string(events.size() + 1));
    events.push_back(e);
    log.push_back(stream + ":" + e->name);
    return e;
  }
  static std::string name(const GpuEvent& e) { return static_cast<const FakeEvent&>(e).name; }
};

// Returns scripted health states (then `steady`), counts aborts.
class FakeControl final : public CommControl {
 public:
  CommHealth poll() override {
    ++polls;
    if (!script.empty()) {
      CommHealth h = script.front();
      script.pop_front();
      return h;
    }
    return steady;
  }
  void abort() noexcept override { ++aborts; }
  std::deque<CommHealth> script;
  CommHealth steady{GpuStatus::kOk, ""};
  int polls = 0;
  int aborts = 0;
};

struct Harness {
  std::shared_ptr<FakeStreams> streams = std::make_shared<FakeStreams>();
  std::shared_ptr<FakeControl> control = std::make_shared<FakeControl>();
  std::chrono::steady_clock::time_point now{};
  std::chrono::microseconds slept{0};
  OpTracker tracker{streams,
                    control,
                    /*self=*/1,
                    /*group=*/{0, 1, 2},
                    milliseconds(1000),
                    PollClock{[this] { return now; },
                              [this](std::chrono::microseconds d) {
                                now += d;
                                slept += d;
                              }}};

  WorkPtr op(const std::string& name, int peer = -1, bool in_progress = false) {
    tracker.before_enqueue();
    OpContext ctx;
    ctx.step = 7;
    ctx.stage = 3;
    ctx.microbatch = 2;
    ctx.what = "SEND_F";
    return tracker.after_enqueue(OpInfo{name, peer, ctx}, in_progress);
  }
};

TEST(NcclOrdering, OperationIsOrderedAfterComputeAndWorkWaitsOnItsCommEvent) {
  Harness h;
  WorkPtr w = h.op("send to rank 2", 2);
  EXPECT_EQ(h.streams->log, (std::vector<std::string>{"compute:e1", "comm waits e1", "comm:e2"}));
  EXPECT_FALSE(w->is_completed());
  h.streams->event("e2")->complete = true;
  EXPECT_TRUE(w->is_completed());
  // Completion orders later compute after the transfer, exactly once.
  w->wait(milliseconds(10));
  EXPECT_EQ(h.streams->log.back(), "compute waits e2");
  EXPECT_EQ(std::count(h.streams->log.begin(), h.streams->log.end(), "compute waits e2"), 1);
  EXPECT_EQ(h.control->aborts, 0);
}

TEST(NcclOrdering, EachOperationHasItsOwnCompletionEvent) {
  Harness h;
  WorkPtr a = h.op("all_reduce bucket 0");
  WorkPtr b = h.op("all_reduce bucket 1");
  EXPECT_EQ(h.streams->log, (std::vector<std::string>{"compute:e1", "comm waits e1", "comm:e2",
                                                      "compute:e3", "comm waits e3", "comm:e4"}));
  h.streams->event("e4")->complete = true;  // b done, a not: streams are FIFO in reality,
  EXPECT_TRUE(b->is_completed());           // but each Work looks only at its own event
  EXPECT_FALSE(a->is_completed());
}

TEST(NcclOrdering, WaitPollsUntilCompleteWithBackoff) {
  Harness h;
  WorkPtr w = h.op("all_reduce");
  h.streams->event("e2")->complete_after = 3;  // the fourth query sees it complete
  w->wait(milliseconds(1000));
  EXPECT_EQ(h.streams->queries, 4);
  EXPECT_EQ(h.slept, std::chrono::microseconds(10 + 20 + 40));  // doubling from 10 us
  EXPECT_EQ(h.control->polls, 3);  // the async error is checked while not complete
  EXPECT_EQ(h.streams->log.back(), "compute waits e2");
}

TEST(NcclOrdering, TimeoutHappensAtTheDeadlineWithBoundedBackoff) {
  Harness h;
  WorkPtr w = h.op("all_reduce");
  EXPECT_THROW(w->wait(milliseconds(5)), TimeoutError);
  EXPECT_GE(h.now - std::chrono::steady_clock::time_point{}, milliseconds(5));
  EXPECT_LE(h.now - std::chrono::steady_clock::time_point{}, milliseconds(6));  // pause <= 1 ms
  EXPECT_EQ(h.control->aborts, 1);
}

TEST(NcclOrdering, TimeoutAbortsAndNamesPeerStageMicrobatchStep) {
  Harness h;
  WorkPtr w = h.op("recv from rank 2", 2);
  try {
    w->wait(milliseconds(5000));
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_STREQ(e.what(),
                 "rank 1: recv from rank 2 (SEND_F stage 3 microbatch 2 step 7): timed out after "
                 "5000 ms (NCCL communicator aborted)");
    EXPECT_EQ(exit_code_for(e), 4);
  }
  EXPECT_EQ(h.control->aborts, 1);
  // The communicator is dead: later operations and other Works rethrow the same error.
  EXPECT_THROW(h.op("send to rank 0", 0), TimeoutError);
  EXPECT_THROW(w->wait(milliseconds(1)), TimeoutError);
  EXPECT_EQ(h.control->aborts, 1);
}

TEST(NcclOrdering, ZeroTimeoutChecksOnce) {
  Harness h;
  WorkPtr w = h.op("all_reduce");
  h.streams->event("e2")->complete = true;
  EXPECT_NO_THROW(w->wait(milliseconds(0)));
  Harness h2;
  WorkPtr w2 = h2.op("all_reduce");
  EXPECT_THROW(w2->wait(milliseconds(0)), TimeoutError);
  EXPECT_EQ(h2.slept.count(), 0);
}

TEST(NcclOrdering, PeerFailureFromAsyncErrorIsPeerErrorAndAborts) {
  Harness h;
  WorkPtr w = h.op("recv from rank 0", 0);
  h.control->script = {{GpuStatus::kOk, ""},
                       {GpuStatus::kPeerFailure, "ncclRemoteError: remote process exited"}};
  try {
    w->wait(milliseconds(1000));
    FAIL();
  } catch (const PeerError& e) {
    EXPECT_STREQ(e.what(),
                 "rank 1: recv from rank 0 (SEND_F stage 3 microbatch 2 step 7): peer failure "
                 "reported by NCCL: ncclRemoteError: remote process exited (NCCL communicator "
                 "aborted)");
    EXPECT_EQ(exit_code_for(e), 3);
  }
  EXPECT_EQ(h.control->aborts, 1);
  EXPECT_THROW(h.op("all_reduce"), PeerError);
}

TEST(NcclOrdering, OtherAsyncErrorIsBackendError) {
  Harness h;
  WorkPtr w = h.op("all_reduce");
  h.control->steady = {GpuStatus::kError, "ncclInternalError: x"};
  try {
    (void)w->is_completed();
    FAIL();
  } catch (const PeerError&) {
    FAIL();
  } catch (const TimeoutError&) {
    FAIL();
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL error: ncclInternalError: x"), std::string::npos);
  }
  EXPECT_EQ(h.control->aborts, 1);
}

TEST(NcclOrdering, InProgressWhileWaitingIsNotAnError) {
  Harness h;
  WorkPtr w = h.op("all_reduce");
  h.control->steady = {GpuStatus::kInProgress, ""};
  EXPECT_FALSE(w->is_completed());
  h.streams->event("e2")->complete = true;
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(h.control->aborts, 0);
}

TEST(NcclOrdering, NonBlockingEnqueueIsAwaitedBeforeTheCompletionEvent) {
  Harness h;
  h.control->script = {
      {GpuStatus::kInProgress, ""}, {GpuStatus::kInProgress, ""}, {GpuStatus::kOk, ""}};
  WorkPtr w = h.op("all_reduce", -1, /*in_progress=*/true);
  EXPECT_EQ(h.control->polls, 3);
  EXPECT_EQ(h.streams->log.back(), "comm:e2");  // recorded only after the enqueue finished
  EXPECT_GT(h.slept.count(), 0);
}

TEST(NcclOrdering, EnqueueThatNeverFinishesTimesOut) {
  Harness h;
  h.control->steady = {GpuStatus::kInProgress, ""};
  try {
    (void)h.op("all_reduce over ranks [0, 1, 2]", -1, true);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 1000 ms while NCCL was enqueueing it"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(h.control->aborts, 1);
  EXPECT_EQ(h.streams->log.size(), 2u);  // no completion event was recorded
}

TEST(NcclOrdering, BatchOrdersOnceAndSharesOneCompletionEvent) {
  Harness h;
  h.tracker.begin_batch();
  WorkPtr s = h.op("send to rank 2", 2);
  WorkPtr r = h.op("recv from rank 0", 0);
  EXPECT_EQ(h.streams->log, (std::vector<std::string>{"compute:e1", "comm waits e1"}));
  EXPECT_THROW((void)s->is_completed(), InternalError);  // waited before end_p2p_batch()
  h.tracker.end_batch(false);
  EXPECT_EQ(h.streams->log.back(), "comm:e2");
  EXPECT_FALSE(s->is_completed());
  EXPECT_FALSE(r->is_completed());
  h.streams->event("e2")->complete = true;
  EXPECT_TRUE(s->is_completed());
  EXPECT_TRUE(r->is_completed());
  // Next batch orders again.
  h.tracker.begin_batch();
  WorkPtr s2 = h.op("send to rank 2", 2);
  h.tracker.end_batch(false);
  EXPECT_EQ(h.streams->log.size(), 8u);
  (void)s2;
}

TEST(NcclOrdering, EmptyBatchRecordsNothing) {
  Harness h;
  h.tracker.begin_batch();
  h.tracker.end_batch(false);
  EXPECT_TRUE(h.streams->log.empty());
  EXPECT_FALSE(h.tracker.in_batch());
}

TEST(NcclOrdering, BatchMisuseIsAnInternalError) {
  Harness h;
  EXPECT_THROW(h.tracker.end_batch(false), InternalError);
  h.tracker.begin_batch();
  EXPECT_THROW(h.tracker.begin_batch(), InternalError);
}

TEST(NcclOrdering, BatchEnqueueInProgressThenPeerFailureFailsAllWorksOfTheBatch) {
  Harness h;
  h.tracker.begin_batch();
  WorkPtr s = h.op("send to rank 2", 2);
  WorkPtr r = h.op("recv from rank 0", 0);
  h.control->script = {{GpuStatus::kInProgress, ""}, {GpuStatus::kPeerFailure, "ncclSystemError"}};
  EXPECT_THROW(h.tracker.end_batch(true), PeerError);
  EXPECT_THROW((void)s->is_completed(), PeerError);
  EXPECT_THROW(r->wait(milliseconds(10)), PeerError);
  EXPECT_EQ(h.control->aborts, 1);
  EXPECT_FALSE(h.tracker.in_batch());
}

TEST(NcclOrdering, FailedCallInsideBatchClosesItAndPoisonsItsWorks) {
  Harness h;
  h.tracker.begin_batch();
  WorkPtr s = h.op("send to rank 2", 2);
  h.tracker.fail(std::make_exception_ptr(BackendError("rank 1: NCCL call ncclRecv failed")));
  EXPECT_FALSE(h.tracker.in_batch());
  EXPECT_EQ(h.control->aborts, 1);
  try {
    s->wait(milliseconds(10));
    FAIL();
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "rank 1: NCCL call ncclRecv failed");
  }
  // The first fatal error wins.
  h.tracker.fail(std::make_exception_ptr(TimeoutError("later")));
  EXPECT_THROW(h.tracker.check_alive(), BackendError);
}

TEST(NcclOrdering, CallSiteNamesPeerOrGroup) {
  Harness h;
  OpContext ctx;
  const CallSite p2p = h.tracker.site(2, &ctx);
  EXPECT_EQ(p2p.rank, 1);
  EXPECT_EQ(p2p.peer, 2);
  EXPECT_TRUE(p2p.group.empty());
  const CallSite coll = h.tracker.site(-1, nullptr);
  EXPECT_EQ(coll.group, (std::vector<int>{0, 1, 2}));
}

TEST(NcclOrdering, WorkOutlivesTracker) {
  WorkPtr w;
  std::shared_ptr<FakeStreams> streams;
  {
    Harness h;
    streams = h.streams;
    w = h.op("all_reduce");
  }
  streams->event("e2")->complete = true;
  EXPECT_TRUE(w->is_completed());
}

}  // namespace
}  // namespace pipewright::exec
