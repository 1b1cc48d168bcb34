// The V-shaped schedules of issue 22 (ZBVZeroBubble, DualPipeV, Chimera) and forward-only plans:
// torch's published DualPipeV order as a golden file, the closed rules of each generator, and the
// grid p in {1,2,3,4,8}, m in 1..16 where every accepted plan validates, lowers (both placements,
// with and without the optional passes) and runs without deadlock under both transports.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

// torch/test/distributed/pipelining/artifacts/dualpipev_4rank_10mb.csv (torch 2.11), verbatim.
constexpr const char* kDualPipeV4x10 =
    "0F0,0F1,0F2,0F3,0F4,0F5,0F6,7F0,7I0,7W0,7F1,7I1,7W1,7F2,7I2,7W2,7F3,(0F7;7B3)OVERLAP_F_B,"
    "(7F4;0B0)OVERLAP_F_B,(0F8;7B4)OVERLAP_F_B,(7F5;0B1)OVERLAP_F_B,(0F9;7B5)OVERLAP_F_B,"
    "(7F6;0B2)OVERLAP_F_B,7B6,(7F7;0B3)OVERLAP_F_B,7B7,(7F8;0B4)OVERLAP_F_B,7B8,"
    "(7F9;0B5)OVERLAP_F_B,7B9,0I6,0W6,0I7,0W7,0I8,0W8,0I9,0W9\n"
    "1F0,1F1,1F2,1F3,1F4,6F0,1F5,6F1,6I0,6W0,6F2,6I1,6W1,6F3,(1F6;6B2)OVERLAP_F_B,"
    "(6F4;1B0)OVERLAP_F_B,(1F7;6B3)OVERLAP_F_B,(6F5;1B1)OVERLAP_F_B,(1F8;6B4)OVERLAP_F_B,"
    "(6F6;1B2)OVERLAP_F_B,(1F9;6B5)OVERLAP_F_B,(6F7;1B3)OVERLAP_F_B,6B6,(6F8;1B4)OVERLAP_F_B,6B7,"
    "(6F9;1B5)OVERLAP_F_B,6B8,1B6,6I9,1I7,6W9,1I8,1W7,1I9,1W8,1W9\n"
    "2F0,2F1,2F2,5F0,2F3,5F1,2F4,5F2,5I0,5W0,5F3,(2F5;5B1)OVERLAP_F_B,(5F4;2B0)OVERLAP_F_B,"
    "(2F6;5B2)OVERLAP_F_B,(5F5;2B1)OVERLAP_F_B,(2F7;5B3)OVERLAP_F_B,(5F6;2B2)OVERLAP_F_B,"
    "(2F8;5B4)OVERLAP_F_B,(5F7;2B3)OVERLAP_F_B,(2F9;5B5)OVERLAP_F_B,(5F8;2B4)OVERLAP_F_B,5B6,"
    "(5F9;2B5)OVERLAP_F_B,5B7,2B6,5B8,2I7,5I9,2I8,2W7,2I9,5W9,2W8,2W9\n"
    "3F0,4F0,3F1,4F1,3F2,4F2,3F3,4F3,3F4,4B0,(4F4;3B0)OVERLAP_F_B,(3F5;4B1)OVERLAP_F_B,"
    "(4F5;3B1)OVERLAP_F_B,(3F6;4B2)OVERLAP_F_B,(4F6;3B2)OVERLAP_F_B,(3F7;4B3)OVERLAP_F_B,"
    "(4F7;3B3)OVERLAP_F_B,(3F8;4B4)OVERLAP_F_B,(4F8;3B4)OVERLAP_F_B,(3F9;4B5)OVERLAP_F_B,"
    "(4F9;3B5)OVERLAP_F_B,4B6,3B6,4B7,3B7,4I8,3I8,4I9,3I9,4W8,3W8,4W9,3W9\n";

std::string joined(const std::vector<Diagnostic>& diags) {
  std::string out;
  for (const auto& d : diags) out += to_string(d) + "\n";
  return out;
}

ScheduleSpec spec_of(ScheduleKind kind, int p, int m, bool forward_only = false) {
  ScheduleSpec s;
  s.kind = kind;
  s.ranks = p;
  s.microbatches = m;
  s.stages_per_rank = kind == ScheduleKind::kChimera ? 1 : 2;
  s.forward_only = forward_only;
  return s;
}

bool rejects(ScheduleKind kind, int p, int m) {
  if (kind == ScheduleKind::kDualPipeV) return m < 2 * p;
  if (kind == ScheduleKind::kChimera) return p % 2 != 0;
  return false;
}

void check_runs(const ComputePlan& plan, const std::string& name) {
  auto diags = validate(plan);
  ASSERT_TRUE(diags.empty()) << name << "\n" << joined(diags);
  for (int variant : {0, 1, 2, 3}) {
    LowerOptions opt;
    opt.merge_iw = opt.reduce_grad = opt.optimizer_step = (variant & 1) != 0;
    opt.recv_placement =
        (variant & 2) != 0 ? RecvPlacement::kTorchRounds : RecvPlacement::kJustInTime;
    const LoweredPlan lowered = lower(plan, opt);
    auto ldiags = validate(lowered);
    ASSERT_TRUE(ldiags.empty()) << name << " variant " << variant << "\n" << joined(ldiags);
    for (Transport t : {Transport::kBuffered, Transport::kRendezvous}) {
      const DeadlockReport rep = dry_run(lowered, t);
      ASSERT_TRUE(rep.ok) << name << " variant " << variant << "\n" << rep.message();
    }
  }
}

class VGrid : public ::testing::TestWithParam<ScheduleKind> {};

TEST_P(VGrid, AcceptedShapesAreValidAndDeadlockFree) {
  const ScheduleKind kind = GetParam();
  int accepted = 0;
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m = 1; m <= 16; ++m) {
      for (bool fwd_only : {false, true}) {
        const std::string name = std::string(to_string(kind)) + " p=" + std::to_string(p) +
                                 " m=" + std::to_string(m) + (fwd_only ? " forward-only" : "");
        if (rejects(kind, p, m)) {
          EXPECT_THROW((void)generate(spec_of(kind, p, m, fwd_only)), ConfigError) << name;
          continue;
        }
        ComputePlan plan;
        ASSERT_NO_THROW(plan = generate(spec_of(kind, p, m, fwd_only))) << name;
        EXPECT_EQ(plan.shape.stages, 2 * p) << name;
        EXPECT_EQ(plan.shape.stage_to_rank, v_placement(p)) << name;
        EXPECT_EQ(plan.shape.forward_only, fwd_only) << name;
        check_runs(plan, name);
        if (HasFatalFailure()) return;
        // Every action of every microbatch once (validate checks it too; this counts).
        std::size_t n = 0;
        for (const auto& ops : plan.per_rank) {
          n += static_cast<std::size_t>(std::count_if(ops.begin(), ops.end(), [](const Action& a) {
            return a.kind == ActionKind::kForward;
          }));
        }
        EXPECT_EQ(n, static_cast<std::size_t>(2 * p * m) / (kind == ScheduleKind::kChimera ? 2 : 1))
            << name;
        ++accepted;
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

INSTANTIATE_TEST_SUITE_P(VShaped, VGrid,
                         ::testing::Values(ScheduleKind::kZBVZeroBubble, ScheduleKind::kDualPipeV,
                                           ScheduleKind::kChimera),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(DualPipeV, MatchesTorchsArtifact) {
  const ComputePlan plan = generate(spec_of(ScheduleKind::kDualPipeV, 4, 10));
  EXPECT_EQ(to_csv(plan), kDualPipeV4x10);
  // And the artifact reads back as the same plan (container cells, V placement inferred).
  const AnyPlan parsed = parse_csv(kDualPipeV4x10, "dualpipev_4rank_10mb.csv");
  ASSERT_FALSE(is_lowered(parsed));
  const auto& cp = std::get<ComputePlan>(parsed);
  EXPECT_EQ(cp.per_rank, plan.per_rank);
  EXPECT_EQ(cp.shape.stage_to_rank, v_placement(4));
  EXPECT_TRUE(validate(cp).empty()) << joined(validate(cp));
}

TEST(DualPipeV, LoweringKeepsUnitsWhole) {
  const LoweredPlan lowered =
      lower(generate(spec_of(ScheduleKind::kDualPipeV, 2, 4)), {false, true, true, {}});
  for (const auto& ops : lowered.per_rank) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!is_overlap(ops[i].kind)) continue;
      ASSERT_LT(i + 2, ops.size());
      EXPECT_EQ(ops[i + 1].kind, ActionKind::kForward);
      EXPECT_TRUE(ops[i + 2].kind == ActionKind::kFullBackward ||
                  ops[i + 2].kind == ActionKind::kBackwardInput);
    }
  }
  // JSON and CSV round trips keep the units.
  EXPECT_EQ(std::get<LoweredPlan>(parse_json(to_json(lowered), "x.json")), lowered);
  EXPECT_EQ(std::get<LoweredPlan>(parse_csv(to_csv(lowered), "x.csv")).per_rank, lowered.per_rank);
}

TEST(DualPipeV, RejectsWithTorchsReason) {
  try {
    (void)generate(spec_of(ScheduleKind::kDualPipeV, 4, 7));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "DualPipeV requires at least as many microbatches as stages, but got 7 "
                  "microbatches and 8 stages"),
              std::string::npos)
        << e.what();
  }
  for (ScheduleKind kind : {ScheduleKind::kZBVZeroBubble, ScheduleKind::kDualPipeV}) {
    for (int v : {1, 3}) {
      ScheduleSpec s = spec_of(kind, 2, 8);
      s.stages_per_rank = v;
      try {
        (void)generate(s);
        FAIL();
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("ZBV requires exactly 2 stages per rank, but got " +
                                             std::to_string(v)),
                  std::string::npos)
            << e.what();
      }
    }
  }
  try {
    (void)generate(spec_of(ScheduleKind::kChimera, 3, 6));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("even number of ranks"), std::string::npos) << e.what();
  }
}

TEST(DualPipeV, UnitFormIsChecked) {
  ComputePlan plan = generate(spec_of(ScheduleKind::kDualPipeV, 2, 4));
  auto& ops = plan.per_rank[0];
  const auto at =
      std::find_if(ops.begin(), ops.end(), [](const Action& a) { return is_overlap(a.kind); });
  ASSERT_NE(at, ops.end());
  std::iter_swap(at + 1, at + 2);  // backward first: not a unit torch can express
  const auto diags = validate(plan);
  ASSERT_FALSE(diags.empty());
  EXPECT_NE(joined(diags).find("first sub-action must be a forward"), std::string::npos)
      << joined(diags);
  std::string error;
  std::vector<Action> out;
  std::size_t col = 0;
  EXPECT_FALSE(try_parse_cell("(0F1)OVERLAP_F_B", out, &error, &col));
  EXPECT_FALSE(try_parse_cell("(0F1;3B0)OVERLAP", out, &error, &col));
  EXPECT_FALSE(try_parse_cell("0OVERLAP_F_B", out, &error, &col));
  EXPECT_TRUE(try_parse_cell(" (0F1;3B0)OVERLAP_F_B ", out, &error, &col)) << error;
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], Action::overlap(0));
  EXPECT_EQ(to_cells(out), std::vector<std::string>{"(0F1;3B0)OVERLAP_F_B"});
}

// Note [ZB-V order] in schedule_v.cpp, from an independent Python transcription of torch's
// ScheduleZBVZeroBubble._calculate_single_rank_operations for p = 2, m = 4
// (n = max(3, 4) = 4; rank 0: c0 = 0, c1 = 3; rank 1: c0 = 1, c1 = 2).
TEST(ZBV, SmallShapeMatchesTorch) {
  const ComputePlan plan = generate(spec_of(ScheduleKind::kZBVZeroBubble, 2, 4));
  EXPECT_EQ(to_csv(plan),
            "0F0,0F1,0F2,3F0,3I0,3W0,3F1,3I1,3W1,0F3,0I0,0W0,3F2,3I2,3W2,0I1,0W1,3F3,3I3,3W3,0I2,"
            "0W2,0I3,0W3\n"
            "1F0,2F0,1F1,2F1,2I0,2W0,1F2,1I0,1W0,2F2,2I1,2W1,1F3,1I1,1W1,2F3,2I2,2W2,1I2,2I3,1I3,"
            "1W2,2W3,1W3\n");
}

// m < 2p - 1: torch builds the order for 2p - 1 microbatches and blanks the rest.
TEST(ZBV, FewMicrobatchesBlankTheRest) {
  const ComputePlan few = generate(spec_of(ScheduleKind::kZBVZeroBubble, 4, 3));
  const ComputePlan full = generate(spec_of(ScheduleKind::kZBVZeroBubble, 4, 7));
  for (int r = 0; r < 4; ++r) {
    std::vector<Action> kept;
    for (const Action& a : full.per_rank[static_cast<std::size_t>(r)]) {
      if (a.microbatch < 3) kept.push_back(a);
    }
    EXPECT_EQ(few.per_rank[static_cast<std::size_t>(r)], kept) << "rank " << r;
  }
}

TEST(Chimera, ShapeReplicasAndSplit) {
  const ComputePlan plan = generate(spec_of(ScheduleKind::kChimera, 4, 6));
  const PlanShape& sh = plan.shape;
  EXPECT_EQ(sh.stages, 8);
  EXPECT_EQ(sh.model_stages(), 4);
  EXPECT_EQ(sh.stage_to_model_stage, (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(sh.replicas_of(2), (std::vector<std::int32_t>{2, 6}));
  EXPECT_EQ(sh.stage_to_rank[6], 1);  // up pipeline stage 2 on rank P-1-2
  EXPECT_EQ(sh.microbatch_begin(1), 0);
  EXPECT_EQ(sh.microbatch_end(1), 3);
  EXPECT_EQ(sh.microbatch_begin(5), 3);
  EXPECT_EQ(sh.microbatch_end(5), 6);
  const std::vector<StageEdge> edges = {{0, 1}, {1, 2}, {2, 3}, {4, 5}, {5, 6}, {6, 7}};
  EXPECT_EQ(sh.stage_edges, edges);
  // Both pipelines start at once: rank 0 with the down pipeline, rank P-1 with the up one.
  EXPECT_EQ(plan.per_rank[0].front(), Action::compute(0, ActionKind::kForward, 0));
  EXPECT_EQ(plan.per_rank[3].front(), Action::compute(4, ActionKind::kForward, 3));
  // Replicas' REDUCE_GRADs at the end in model-stage order on every rank.
  const LoweredPlan lowered = lower(plan, {false, true, true, {}});
  for (int r = 0; r < 4; ++r) {
    std::vector<std::int32_t> models;
    for (const Action& a : lowered.per_rank[static_cast<std::size_t>(r)]) {
      if (a.kind == ActionKind::kReduceGrad) models.push_back(sh.model_stage(a.stage));
    }
    EXPECT_TRUE(std::is_sorted(models.begin(), models.end())) << "rank " << r;
    EXPECT_EQ(models.size(), 2u);
  }
  // A stage running a microbatch of the other pipeline is flagged.
  ComputePlan bad = plan;
  bad.per_rank[0].front().microbatch = 4;
  EXPECT_NE(joined(validate(bad)).find("runs microbatches [0, 3) only"), std::string::npos)
      << joined(validate(bad));
  // JSON keeps the replica map.
  EXPECT_EQ(std::get<ComputePlan>(parse_json(to_json(plan), "c.json")), plan);
}

TEST(ForwardOnly, SingleStageSchedulesAreTorchsForwardOnly) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    ScheduleSpec s;
    s.kind = kind;
    s.ranks = 4;
    s.microbatches = 2;  // 1F1B would reject m < p for training
    s.forward_only = true;
    const ComputePlan plan = generate(s);
    EXPECT_EQ(to_csv(plan), "0F0,0F1\n1F0,1F1\n2F0,2F1\n3F0,3F1\n");
    const LoweredPlan lowered = lower(plan, {false, true, true, {}});
    EXPECT_EQ(to_csv(lowered),
              "0F0,0SEND_F0,0F1,0SEND_F1\n1RECV_F0,1F0,1SEND_F0,1RECV_F1,1F1,1SEND_F1\n"
              "2RECV_F0,2F0,2SEND_F0,2RECV_F1,2F1,2SEND_F1\n3RECV_F0,3F0,3RECV_F1,3F1\n");
    EXPECT_TRUE(validate(lowered).empty()) << joined(validate(lowered));
    // Read back from CSV, a plan of forwards is forward-only.
    EXPECT_TRUE(shape_of(parse_csv(to_csv(plan), "f.csv")).forward_only);
  }
  // A backward in a forward-only plan is flagged.
  ScheduleSpec s;
  s.kind = ScheduleKind::kGPipe;
  s.ranks = 2;
  s.microbatches = 2;
  s.forward_only = true;
  ComputePlan plan = generate(s);
  plan.per_rank[1].push_back(Action::compute(1, ActionKind::kFullBackward, 0));
  EXPECT_NE(joined(validate(plan)).find("forward-only plan"), std::string::npos);
}

}  // namespace
}  // namespace pipewright::sched
