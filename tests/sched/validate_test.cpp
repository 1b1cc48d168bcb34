// validate() diagnostics and dry_run() deadlock reports on hand-written plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

LoweredPlan lowered_csv(const std::string& csv) {
  return std::get<LoweredPlan>(parse_csv(csv, "test.csv"));
}
ComputePlan compute_csv(const std::string& csv) {
  return std::get<ComputePlan>(parse_csv(csv, "test.csv"));
}
bool mentions(const std::vector<Diagnostic>& diags, const std::string& text, int rank = -2,
              int step = -2) {
  for (const auto& d : diags) {
    if (d.message.find(text) == std::string::npos) continue;
    if (rank != -2 && d.rank != rank) continue;
    if (step != -2 && d.step != step) continue;
    return true;
  }
  return false;
}
std::string all(const std::vector<Diagnostic>& diags) {
  std::string out;
  for (const auto& d : diags) out += to_string(d) + "\n";
  return out;
}

TEST(Validate, ComputePlanReportsEveryProblem) {
  // Rank 0: 0B1 before 0F1, duplicate 0F0, no 0B2 / W without I; rank 1 fine.
  const ComputePlan plan = compute_csv(
      "0F0,0F0,0B0,0B1,0F1,0F2,0W2\n"
      "1F0,1B0,1F1,1B1,1F2,1B2\n");
  const auto d = validate(plan);
  EXPECT_TRUE(mentions(d, "duplicate 0F0 (first at rank 0, step 0)", 0, 1)) << all(d);
  EXPECT_TRUE(mentions(d, "0B1 runs before its forward 0F1 (step 4)", 0, 3)) << all(d);
  EXPECT_TRUE(mentions(d, "has W without I", 0, 6)) << all(d);
  EXPECT_EQ(d.size(), 3U) << all(d);
}

// Note [UNSHARD and RESHARD]: compute inside its stage's window, OPTIM outside, windows close.
TEST(Validate, ShardWindows) {
  // Well formed: one window per stage around its compute, OPTIM after RESHARD; a stage without
  // UNSHARD / RESHARD (stage 1) keeps its parameters whole.
  EXPECT_TRUE(validate(compute_csv("0UNSHARD,0F0,0F1,0B0,0B1,0RESHARD,0OPTIM\n"
                                   "1F0,1B0,1F1,1B1\n"))
                  .empty());
  // Two windows of stage 0 (a reshard after the forwards, torch's reshard_after_forward).
  EXPECT_TRUE(validate(compute_csv("0UNSHARD,0F0,0F1,0RESHARD,0UNSHARD,0B0,0B1,0RESHARD\n"
                                   "1UNSHARD,1F0,1B0,1F1,1B1,1RESHARD\n"))
                  .empty());
  // RESHARD before a compute of its stage: the compute is named, and the RESHARD.
  auto d = validate(compute_csv("0UNSHARD,0F0,0RESHARD,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"));
  EXPECT_TRUE(mentions(d,
                       "0F1 runs outside stage 0's UNSHARD..RESHARD window: 0RESHARD at step 2 "
                       "freed its parameters before it",
                       0, 3))
      << all(d);
  EXPECT_TRUE(mentions(d, "0B1 runs outside", 0, 5)) << all(d);
  EXPECT_EQ(d.size(), 3U) << all(d);
  // Compute before the first UNSHARD; a window that never closes; an UNSHARD inside a window;
  // a RESHARD with nothing open; OPTIM inside a window.
  d =
      validate(compute_csv("0F0,0UNSHARD,0UNSHARD,0F1,0B0,0B1\n"
                           "1RESHARD,1UNSHARD,1F0,1B0,1F1,1B1,1OPTIM,1RESHARD\n"));
  EXPECT_TRUE(mentions(d, "0F0 runs before 0UNSHARD", 0, 0)) << all(d);
  EXPECT_TRUE(mentions(d, "0UNSHARD: stage 0 is already unsharded by 0UNSHARD at step 1", 0, 2))
      << all(d);
  EXPECT_TRUE(mentions(d, "0UNSHARD has no 0RESHARD after it", 0, 1)) << all(d);
  EXPECT_TRUE(mentions(d, "1RESHARD: no open 1UNSHARD before it to close", 1, 0)) << all(d);
  EXPECT_TRUE(mentions(d, "1OPTIM runs inside stage 1's window (1UNSHARD at step 1)", 1, 6))
      << all(d);
  // Lowered plans too (RECVs need no parameters).
  EXPECT_TRUE(validate(lowered_csv("0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0RESHARD\n"
                                   "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RESHARD\n"))
                  .empty());
  EXPECT_TRUE(mentions(validate(lowered_csv("0UNSHARD,0F0,0SEND_F0,0RESHARD,0RECV_B0,0B0\n"
                                            "1RECV_F0,1F0,1B0,1SEND_B0\n")),
                       "0B0 runs outside stage 0's UNSHARD..RESHARD window", 0, 5));
}

TEST(Validate, ComputePlanMissingActionsAndPlacement) {
  ComputePlan plan = generate({ScheduleKind::k1F1B, 2, 2, 1, {}});
  plan.per_rank[1].pop_back();                                              // drop 1B1
  plan.per_rank[0].push_back(Action::compute(1, ActionKind::kForward, 1));  // 1F1 on rank 0
  const auto d = validate(plan);
  EXPECT_TRUE(mentions(d, "stage 1 microbatch 1 has no backward", 1)) << all(d);
  EXPECT_TRUE(mentions(d, "stage 1 is placed on rank 1, not on rank 0", 0, 4)) << all(d);
}

TEST(Validate, ComputePlanCrossRankCycle) {
  // Rank 0 waits for 1B0 before doing 0F1; rank 1 needs 0F1 before 1B0.
  const ComputePlan plan = compute_csv(
      "0F0,0B0,0F1,0B1\n"
      "1F0,1F1,1B0,1B1\n");
  const auto d = validate(plan);
  ASSERT_EQ(d.size(), 1U) << all(d);
  EXPECT_NE(d[0].message.find("cycle: 0:0B0 -> 1:1F1 -> 0:0B0"), std::string::npos) << all(d);
  EXPECT_THROW((void)lower(plan), InvalidPlanError);
  EXPECT_THROW((void)lower(plan, {false, false, false, RecvPlacement::kTorchRounds}),
               InvalidPlanError);
}

TEST(Validate, ReduceGradAndOptimizerOrder) {
  const ComputePlan plan = compute_csv(
      "0F0,0REDUCE_GRAD,0B0,0OPTIM\n"
      "1F0,1B0,1OPTIM,1REDUCE_GRAD\n");
  const auto d = validate(plan);
  EXPECT_TRUE(mentions(d, "0REDUCE_GRAD runs before the stage's last backward 0B0", 0, 1))
      << all(d);
  EXPECT_TRUE(mentions(d, "1OPTIM runs before 1REDUCE_GRAD", 1, 2)) << all(d);
}

TEST(Validate, LoweredPlanMessagesAndOrder) {
  const LoweredPlan good = lower(generate({ScheduleKind::k1F1B, 3, 3, 1, {}}));
  ASSERT_TRUE(validate(good).empty()) << all(validate(good));
  auto find = [](const std::vector<Action>& ops, const std::string& text) {
    const Action a = parse_action(text);
    return static_cast<int>(std::find(ops.begin(), ops.end(), a) - ops.begin());
  };
  {  // Wrong peer: 0SEND_F0 goes to stage 2, which does not consume stage 0.
    LoweredPlan bad = good;
    const int at = find(bad.per_rank[0], "0SEND_F0");
    bad.per_rank[0][static_cast<std::size_t>(at)].peer_stage = 2;
    const auto d = validate(bad);
    EXPECT_TRUE(mentions(d, "0SEND_F0@2: stage 2 is not a consumer of stage 0", 0, at)) << all(d);
    EXPECT_TRUE(mentions(d, "1RECV_F0: no matching 0SEND_F0 on rank 0", 1)) << all(d);
  }
  {  // A RECV after the compute that needs it, and a SEND before the compute producing it.
    LoweredPlan bad = good;
    auto& r0 = bad.per_rank[0];
    const int recv = find(r0, "0RECV_B2");
    std::rotate(r0.begin() + recv, r0.begin() + recv + 1, r0.end());  // 0RECV_B2 to the end
    auto& r1 = bad.per_rank[1];
    const int send = find(r1, "1SEND_F0");
    std::swap(r1[static_cast<std::size_t>(send)], r1[static_cast<std::size_t>(send - 1)]);
    const auto d = validate(bad);
    EXPECT_TRUE(mentions(d, "0B2 runs before 0RECV_B2", 0)) << all(d);
    EXPECT_TRUE(mentions(d, "1SEND_F0 is sent before it is computed by 1F0", 1, send - 1))
        << all(d);
  }
  const LoweredPlan same_rank =
      lowered_csv("0F0,0SEND_F0,1RECV_F0,1F0,1B0,1SEND_B0,0RECV_B0,0B0\n");
  EXPECT_TRUE(mentions(validate(same_rank), "are both on rank 0", 0, 1))
      << all(validate(same_rank));
}

TEST(DryRun, RendezvousDeadlockIsReportedWithCycleAndGrid) {
  // Just-in-time 1F1B without the rendezvous fix-up: fine with buffered sends, deadlocks with
  // rendezvous sends (rank 0 sends F1 while rank 1 sends B0).
  const LoweredPlan plan = lowered_csv(
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n");
  ASSERT_TRUE(validate(plan).empty()) << all(validate(plan));
  EXPECT_TRUE(dry_run(plan, Transport::kBuffered).ok);
  const DeadlockReport rep = dry_run(plan, Transport::kRendezvous);
  ASSERT_FALSE(rep.ok);
  EXPECT_EQ(rep.cycle, "0:0SEND_F1 -> 1:1SEND_B0 -> 0:0SEND_F1");
  ASSERT_EQ(rep.stuck.size(), 2U);
  EXPECT_EQ(rep.stuck[0].step, 3);
  EXPECT_EQ(rep.stuck[1].step, 3);
  EXPECT_NE(rep.grid.find("[0SEND_F1]"), std::string::npos) << rep.grid;
  EXPECT_NE(rep.grid.find("[1SEND_B0]"), std::string::npos) << rep.grid;
  EXPECT_NE(rep.message().find("deadlock under rendezvous sends"), std::string::npos);
  // lower() of the same compute plan is deadlock-free under both.
  const LoweredPlan fixed = lower(compute_only(plan));
  EXPECT_TRUE(dry_run(fixed, Transport::kRendezvous).ok) << to_csv(fixed);
}

TEST(DryRun, BufferedDeadlockAndMissingSend) {
  const LoweredPlan cycle = lowered_csv(
      "0F0,0RECV_B0,0SEND_F0,0B0\n"
      "1RECV_F0,1F0,1B0,1SEND_B0\n");
  ASSERT_TRUE(validate(cycle).empty()) << all(validate(cycle));
  const DeadlockReport rep = dry_run(cycle, Transport::kBuffered);
  ASSERT_FALSE(rep.ok);
  EXPECT_EQ(rep.cycle, "0:0RECV_B0 -> 1:1RECV_F0 -> 0:0RECV_B0");
  EXPECT_NE(rep.grid.find("[0RECV_B0]"), std::string::npos) << rep.grid;
  EXPECT_NE(rep.grid.find("[1RECV_F0]"), std::string::npos) << rep.grid;

  const LoweredPlan missing = lowered_csv(
      "0F0,0SEND_F0,0RECV_B0,0B0\n"
      "1RECV_F0,1F0,1B0\n");
  EXPECT_TRUE(mentions(validate(missing), "0RECV_B0: no matching 1SEND_B0 on rank 1", 0, 2));
  const DeadlockReport mrep = dry_run(missing, Transport::kBuffered);
  ASSERT_FALSE(mrep.ok);
  EXPECT_EQ(mrep.cycle, "0:0RECV_B0 -> 1:(finished)");
}

TEST(DryRun, LongPlansShowWindowsAroundStuckCells) {
  LoweredPlan plan = lower(generate({ScheduleKind::k1F1B, 4, 32, 1, {}}));
  // Drop rank 3's last SEND_B: rank 2 waits forever at its last RECV_B.
  auto& r3 = plan.per_rank[3];
  r3.erase(
      std::find_if(r3.rbegin(), r3.rend(), [](const Action& a) { return is_send(a.kind); }).base() -
      1);
  const DeadlockReport rep = dry_run(plan, Transport::kBuffered);
  ASSERT_FALSE(rep.ok);
  EXPECT_NE(rep.grid.find("..."), std::string::npos) << rep.grid;
  EXPECT_NE(rep.grid.find("[2RECV_B31]"), std::string::npos) << rep.grid;
  EXPECT_NE(rep.cycle.find(":(finished)"), std::string::npos) << rep.cycle;
}

TEST(Transport, Names) {
  EXPECT_EQ(parse_transport("Buffered"), Transport::kBuffered);
  EXPECT_EQ(parse_transport("rendezvous"), Transport::kRendezvous);
  EXPECT_THROW((void)parse_transport("nccl"), ConfigError);
}

}  // namespace
}  // namespace pipewright::sched

namespace pipewright::sched {
namespace {

// Issue 20, item 7: a small file can imply millions of problems; validation keeps the first 1000
// and counts the rest, and messages show 20 lines and a count.
TEST(Validate, ManyProblemsAreCappedAndCounted) {
  const AnyPlan any = parse_csv("0F0,0F5000\n", "many.csv");
  const auto diags = validate(std::get<ComputePlan>(any));
  ASSERT_EQ(diags.size(), 1001u);
  EXPECT_NE(diags.back().message.find("more problems (only the first 1000 are kept)"),
            std::string::npos)
      << diags.back().message;
  const std::string text = format_diagnostics(diags);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 21);
  EXPECT_NE(text.find("... and 981 more (not shown)"), std::string::npos) << text;
  try {
    check_valid(std::get<ComputePlan>(any), "many.csv");
    FAIL() << "expected InvalidPlanError";
  } catch (const InvalidPlanError& e) {
    EXPECT_LT(std::string(e.what()).size(), 4000u);
  }
}

}  // namespace
}  // namespace pipewright::sched
