// Schedule generators over the grid p in {1,2,3,4,8,16}, m in 1..32, v in {1,2,4}: shapes torch
// rejects throw ConfigError; every other plan validates, lowers, validates again and runs without
// deadlock under both transports; the per-rank orders follow the closed rules of each schedule
// (see docs/schedules.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/stage_edges.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

constexpr int kRanks[] = {1, 2, 3, 4, 8, 16};
constexpr int kStagesPerRank[] = {1, 2, 4};
constexpr int kMaxMicrobatches = 32;

std::string shape_name(ScheduleKind kind, int p, int m, int v) {
  return std::string(to_string(kind)) + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
         " v=" + std::to_string(v);
}

std::string joined(const std::vector<Diagnostic>& diags) {
  std::string out;
  for (const auto& d : diags) out += to_string(d) + "\n";
  return out;
}

bool torch_rejects(ScheduleKind kind, int p, int m, int v) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return v != 1;
    case ScheduleKind::k1F1B:
      return v != 1 || m < p;
    case ScheduleKind::kLoopedBFS:
      return false;
    case ScheduleKind::kInterleaved1F1B:
    case ScheduleKind::kInterleavedZeroBubble:
      return m % std::max(1, m / p) != 0;
    case ScheduleKind::kZBH2:  // not torch's; one stage per rank
      return v != 1;
    default:  // the V-shaped schedules: schedule_v_test.cpp
      return true;
  }
}

bool is_backward(const Action& a) {
  return a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput;
}

// Closed rules, per rank, independent of how generate() is written.
void check_closed_rules(ScheduleKind kind, int p, int m, int v, const ComputePlan& plan) {
  const std::string name = shape_name(kind, p, m, v);
  for (int r = 0; r < p; ++r) {
    const auto& ops = plan.per_rank[static_cast<std::size_t>(r)];
    SCOPED_TRACE(name + " rank " + std::to_string(r));
    std::vector<Action> fwds, bwds, weights;
    std::size_t first_backward = ops.size();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == ActionKind::kForward) fwds.push_back(ops[i]);
      if (is_backward(ops[i])) {
        first_backward = std::min(first_backward, i);
        bwds.push_back(ops[i]);
      }
      if (ops[i].kind == ActionKind::kBackwardWeight) weights.push_back(ops[i]);
    }
    switch (kind) {
      case ScheduleKind::kGPipe: {
        ASSERT_EQ(ops.size(), static_cast<std::size_t>(2 * m));
        for (int k = 0; k < m; ++k) {
          EXPECT_EQ(ops[static_cast<std::size_t>(k)], Action::compute(r, ActionKind::kForward, k));
          EXPECT_EQ(ops[static_cast<std::size_t>(m + k)],
                    Action::compute(r, ActionKind::kFullBackward, k));
        }
        break;
      }
      case ScheduleKind::k1F1B: {
        // Warm-up p - r - 1 forwards, then (F, B) pairs, then the remaining B; microbatches in
        // order. So p - r forwards precede the first backward.
        ASSERT_EQ(ops.size(), static_cast<std::size_t>(2 * m));
        const int warmup = p - r - 1;
        EXPECT_EQ(first_backward, static_cast<std::size_t>(warmup + 1));
        for (int k = 0; k < m; ++k) {
          EXPECT_EQ(fwds[static_cast<std::size_t>(k)], Action::compute(r, ActionKind::kForward, k));
          EXPECT_EQ(bwds[static_cast<std::size_t>(k)],
                    Action::compute(r, ActionKind::kFullBackward, k));
        }
        // Steady state strictly alternates F, B.
        for (int j = 0; j < m - warmup; ++j) {
          const std::size_t at = static_cast<std::size_t>(warmup + 2 * j);
          EXPECT_EQ(ops[at].kind, ActionKind::kForward) << at;
          EXPECT_EQ(ops[at + 1].kind, ActionKind::kFullBackward) << at;
        }
        break;
      }
      case ScheduleKind::kLoopedBFS: {
        ASSERT_EQ(ops.size(), static_cast<std::size_t>(2 * v * m));
        std::size_t i = 0;
        for (int l = 0; l < v; ++l) {
          for (int k = 0; k < m; ++k) {
            EXPECT_EQ(ops[i++], Action::compute(l * p + r, ActionKind::kForward, k));
          }
        }
        for (int l = v - 1; l >= 0; --l) {
          for (int k = m - 1; k >= 0; --k) {
            EXPECT_EQ(ops[i++], Action::compute(l * p + r, ActionKind::kFullBackward, k));
          }
        }
        break;
      }
      case ScheduleKind::kInterleaved1F1B:
      case ScheduleKind::kInterleavedZeroBubble: {
        const bool zb = kind == ScheduleKind::kInterleavedZeroBubble;
        const int mpr = m / std::max(1, m / p);
        const int total = v * m;
        const int warmup = std::min((v - 1) * mpr + (zb ? 1 : 2) * (p - 1 - r), total);
        ASSERT_EQ(ops.size(), static_cast<std::size_t>(total * (zb ? 3 : 2)));
        ASSERT_EQ(fwds.size(), static_cast<std::size_t>(total));
        ASSERT_EQ(bwds.size(), static_cast<std::size_t>(total));
        // Forwards before the first backward: the warm-up, plus the first 1F1B forward.
        EXPECT_EQ(static_cast<int>(std::count_if(
                      ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(first_backward),
                      [](const Action& a) { return a.kind == ActionKind::kForward; })),
                  std::min(warmup + 1, total));
        // k-th forward on local stage (k / mpr) % v, k-th backward on v - 1 - (k / mpr) % v;
        // each stage's microbatches in order.
        std::vector<int> next_f(static_cast<std::size_t>(v), 0),
            next_b(static_cast<std::size_t>(v), 0);
        for (int k = 0; k < total; ++k) {
          const int lf = (k / mpr) % v;
          const int lb = v - 1 - (k / mpr) % v;
          EXPECT_EQ(fwds[static_cast<std::size_t>(k)],
                    Action::compute(lf * p + r, ActionKind::kForward,
                                    next_f[static_cast<std::size_t>(lf)]++));
          EXPECT_EQ(bwds[static_cast<std::size_t>(k)],
                    Action::compute(lb * p + r,
                                    zb ? ActionKind::kBackwardInput : ActionKind::kFullBackward,
                                    next_b[static_cast<std::size_t>(lb)]++));
        }
        if (zb) {
          // W in the order of the I's; the j-th W comes right after the (j + r + 1)-th I, or at
          // the end once all I ran.
          ASSERT_EQ(weights.size(), static_cast<std::size_t>(total));
          int inputs_seen = 0;
          int w_seen = 0;
          for (std::size_t i = 0; i < ops.size(); ++i) {
            if (ops[i].kind == ActionKind::kBackwardInput) ++inputs_seen;
            if (ops[i].kind != ActionKind::kBackwardWeight) continue;
            const Action& in = bwds[static_cast<std::size_t>(w_seen)];
            EXPECT_EQ(ops[i].stage, in.stage);
            EXPECT_EQ(ops[i].microbatch, in.microbatch);
            EXPECT_EQ(inputs_seen, std::min(w_seen + r + 1, total)) << "W #" << w_seen;
            ++w_seen;
          }
        } else {
          // Steady state alternates F, B.
          const std::size_t steady = static_cast<std::size_t>(warmup);
          for (int j = 0; j < total - warmup; ++j) {
            EXPECT_EQ(ops[steady + 2 * static_cast<std::size_t>(j)].kind, ActionKind::kForward);
            EXPECT_TRUE(is_backward(ops[steady + 2 * static_cast<std::size_t>(j) + 1]));
          }
        }
        break;
      }
      case ScheduleKind::kZBH2: {
        // Note [ZB-H2 order]: every microbatch's F, I, W in microbatch order; W after its I;
        // min(M, 2(P - r) - 1) forwards before the first I; never more than 2P - 1 microbatches
        // held (F to W).
        ASSERT_EQ(ops.size(), static_cast<std::size_t>(3 * m));
        ASSERT_EQ(fwds.size(), static_cast<std::size_t>(m));
        ASSERT_EQ(weights.size(), static_cast<std::size_t>(m));
        for (int k = 0; k < m; ++k) {
          const auto uk = static_cast<std::size_t>(k);
          EXPECT_EQ(fwds[uk], Action::compute(r, ActionKind::kForward, k));
          EXPECT_EQ(bwds[uk], Action::compute(r, ActionKind::kBackwardInput, k));
          EXPECT_EQ(weights[uk], Action::compute(r, ActionKind::kBackwardWeight, k));
        }
        EXPECT_EQ(first_backward, static_cast<std::size_t>(std::min(m, 2 * (p - r) - 1)));
        int held = 0;
        int inputs = 0;
        for (const auto& a : ops) {
          if (a.kind == ActionKind::kForward) ++held;
          if (a.kind == ActionKind::kBackwardInput) ++inputs;
          if (a.kind == ActionKind::kBackwardWeight) {
            EXPECT_GT(inputs, a.microbatch) << "W before its I";
            --held;
          }
          EXPECT_LE(held, 2 * p - 1);
        }
        break;
      }
      default:  // the V-shaped schedules: schedule_v_test.cpp
        break;
    }
  }
}

void check_runs(const ComputePlan& plan, const std::string& name) {
  auto diags = validate(plan);
  ASSERT_TRUE(diags.empty()) << name << "\n" << joined(diags);
  // Just-in-time placement plain and with every optional pass; torch's placement plain.
  for (int variant : {0, 1, 2}) {
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

class ScheduleGrid : public ::testing::TestWithParam<ScheduleKind> {};

TEST_P(ScheduleGrid, AcceptedShapesAreValidDeadlockFreeAndFollowTheRules) {
  const ScheduleKind kind = GetParam();
  int accepted = 0;
  int rejected = 0;
  for (int p : kRanks) {
    for (int v : kStagesPerRank) {
      for (int m = 1; m <= kMaxMicrobatches; ++m) {
        const std::string name = shape_name(kind, p, m, v);
        ScheduleSpec spec{kind, p, m, v, {}};
        if (torch_rejects(kind, p, m, v)) {
          EXPECT_THROW((void)generate(spec), ConfigError) << name;
          ++rejected;
          continue;
        }
        ComputePlan plan;
        ASSERT_NO_THROW(plan = generate(spec)) << name;
        EXPECT_EQ(plan.shape.ranks, p);
        EXPECT_EQ(plan.shape.stages, p * v);
        EXPECT_EQ(plan.shape.microbatches, m);
        EXPECT_EQ(plan.shape.schedule, std::string(to_string(kind)));
        check_closed_rules(kind, p, m, v, plan);
        check_runs(plan, name);
        if (HasFatalFailure()) return;
        ++accepted;
      }
    }
  }
  EXPECT_GT(accepted, 0);
  RecordProperty("accepted", accepted);
  RecordProperty("rejected", rejected);
}

// The V-shaped schedules (ZBVZeroBubble, DualPipeV, Chimera) have their own grid:
// schedule_v_test.cpp.
INSTANTIATE_TEST_SUITE_P(AllKinds, ScheduleGrid,
                         ::testing::Values(ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                                           ScheduleKind::kInterleaved1F1B, ScheduleKind::kLoopedBFS,
                                           ScheduleKind::kInterleavedZeroBubble,
                                           ScheduleKind::kZBH2),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(ScheduleKind, ParsesTorchSpellingsCaseInsensitively) {
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::k1F1B);
  EXPECT_EQ(parse_schedule_kind("INTERLEAVED1F1B"), ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(parse_schedule_kind("LoopedBFS"), ScheduleKind::kLoopedBFS);
  EXPECT_EQ(parse_schedule_kind("interleavedzerobubble"), ScheduleKind::kInterleavedZeroBubble);
  for (ScheduleKind k : all_schedule_kinds()) EXPECT_EQ(parse_schedule_kind(to_string(k)), k);
  try {
    (void)parse_schedule_kind("2F2B");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Interleaved1F1B"), std::string::npos) << e.what();
  }
}

TEST(Generate, RejectsWithTorchsReason) {
  try {
    (void)generate({ScheduleKind::k1F1B, 4, 3, 1, {}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must be greater than or equal to the number of stages"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)generate({ScheduleKind::kInterleaved1F1B, 4, 10 + 1, 2, {}});  // rounds 2, 11 % 2 != 0
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the number of rounds (2)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW((void)generate({ScheduleKind::kInterleaved1F1B, 4, 10, 2, {}}));  // flexible
  EXPECT_THROW((void)generate({ScheduleKind::kGPipe, 2, 4, 2, {}}), ConfigError);
  EXPECT_THROW((void)generate({ScheduleKind::kGPipe, 0, 4, 1, {}}), ConfigError);
  EXPECT_THROW((void)generate({ScheduleKind::kGPipe, 2, 0, 1, {}}), ConfigError);
  // Two chains side by side: every edge goes up, so a looped schedule runs it (Note [Looped
  // schedules over a stage DAG]); an edge going down is refused.
  check_runs(generate({ScheduleKind::kLoopedBFS, 2, 4, 2, {{0, 2}, {1, 3}}}), "two chains");
  EXPECT_THROW((void)generate({ScheduleKind::kLoopedBFS, 2, 4, 2, {{0, 1}, {2, 1}, {1, 3}}}),
               ConfigError);
  EXPECT_THROW((void)generate({ScheduleKind::kGPipe, 3, 4, 1, {{0, 1}, {1, 2}, {2, 0}}}),
               ConfigError);
  EXPECT_THROW((void)generate({ScheduleKind::kGPipe, 3, 4, 1, {{0, 3}}}), ConfigError);
}

// Known orders, written out by hand from torch's schedules.py for small shapes.
TEST(Generate, SmallShapesMatchTorch) {
  auto row = [](const ComputePlan& plan, int r) {
    std::string out;
    for (const auto& a : plan.per_rank[static_cast<std::size_t>(r)]) {
      out += (out.empty() ? "" : ",") + to_string(a);
    }
    return out;
  };
  const auto one = generate({ScheduleKind::k1F1B, 2, 4, 1, {}});
  EXPECT_EQ(row(one, 0), "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3");
  EXPECT_EQ(row(one, 1), "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3");
  // Interleaved p=2 v=2 m=4: rounds 2, mpr 2; rank 0 warm-up (1*2 + 2*1) = 4.
  const auto il = generate({ScheduleKind::kInterleaved1F1B, 2, 4, 2, {}});
  EXPECT_EQ(row(il, 0), "0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,0B2,0B3");
  EXPECT_EQ(row(il, 1), "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,1B2,1B3");
  // Zero bubble p=2 v=2 m=4: rank 0 warm-up 2 + 1 = 3, W after I once op - warmup >= 0.
  const auto zb = generate({ScheduleKind::kInterleavedZeroBubble, 2, 4, 2, {}});
  EXPECT_EQ(row(zb, 0),
            "0F0,0F1,2F0,2F1,2I0,2W0,0F2,2I1,2W1,0F3,0I0,0W0,2F2,0I1,0W1,2F3,2I2,2W2,2I3,2W3,0I2,"
            "0W2,0I3,0W3");
}

// Note [ZB-H2 order], written out on the unit grid for P = 4, M = 8:
// rank r starts at unit r and runs 24 passes back to back, its last W at unit 24 + r.
TEST(Generate, ZBH2UnitGrid) {
  auto row = [](const ComputePlan& plan, int r) {
    std::string out;
    for (const auto& a : plan.per_rank[static_cast<std::size_t>(r)]) {
      out += (out.empty() ? "" : ",") + to_string(a);
    }
    return out;
  };
  const auto h2 = generate({ScheduleKind::kZBH2, 4, 8, 1, {}});
  EXPECT_EQ(h2.shape.schedule, "ZBH2");
  EXPECT_EQ(row(h2, 0),
            "0F0,0F1,0F2,0F3,0F4,0F5,0F6,0I0,0W0,0I1,0F7,0I2,0W1,0I3,0W2,0I4,0W3,0I5,0W4,0I6,0W5,"
            "0W6,0I7,0W7");
  EXPECT_EQ(row(h2, 3),
            "3F0,3I0,3F1,3I1,3F2,3I2,3F3,3I3,3F4,3I4,3F5,3I5,3F6,3I6,3W0,3F7,3I7,3W1,3W2,3W3,3W4,"
            "3W5,3W6,3W7");
  EXPECT_THROW((void)generate({ScheduleKind::kZBH2, 4, 8, 2, {}}), ConfigError);
  EXPECT_THROW((void)generate({ScheduleKind::kZBH2, 3, 4, 1, {{0, 1}, {0, 2}, {1, 2}}}),
               ConfigError);
  EXPECT_EQ(parse_schedule_kind("zbh2"), ScheduleKind::kZBH2);
}

TEST(Generate, StageDagFollowsDependencies) {
  // Diamond: 0 -> {1, 2} -> 3. 1F1B warm-up = longest path to the sink: 2, 1, 1, 0.
  const std::vector<StageEdge> diamond = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int m = 4; m <= 9; ++m) {
      const ComputePlan plan = generate({kind, 4, m, 1, diamond});
      EXPECT_EQ(plan.shape.stage_edges, diamond);
      check_runs(plan, std::string(to_string(kind)) + " diamond m=" + std::to_string(m));
      if (kind == ScheduleKind::k1F1B) {
        const int expected_first_b[] = {3, 2, 2, 1};
        for (int r = 0; r < 4; ++r) {
          const auto& ops = plan.per_rank[static_cast<std::size_t>(r)];
          const auto it = std::find_if(ops.begin(), ops.end(), is_backward);
          EXPECT_EQ(it - ops.begin(), expected_first_b[r]) << "rank " << r;
        }
      }
    }
  }
  // A chain given explicitly is the chain.
  EXPECT_TRUE(generate({ScheduleKind::k1F1B, 3, 3, 1, {{0, 1}, {1, 2}}}).shape.is_chain());
}

// Note [Looped schedules over a stage DAG]: a chain plus skip edges (every edge from a lower to a
// higher stage, as a partition of a model with skip connections is numbered) runs under the
// looped schedules; a DAG with an edge to a lower stage is refused naming it.
TEST(Generate, LoopedSchedulesRunChainsWithSkipEdges) {
  for (ScheduleKind kind : {ScheduleKind::kInterleaved1F1B, ScheduleKind::kLoopedBFS,
                            ScheduleKind::kInterleavedZeroBubble}) {
    for (int p : {2, 3}) {
      for (int v : {2, 3}) {
        const int stages = p * v;
        std::vector<StageEdge> edges;
        for (int s = 0; s + 1 < stages; ++s) edges.push_back({s, s + 1});
        edges.push_back({0, stages - 1});  // a long skip
        edges.push_back({1, 3});           // a short one, across ranks
        for (int m : {p, 2 * p, 4 * p}) {
          const std::string name = std::string(to_string(kind)) + " p=" + std::to_string(p) +
                                   " v=" + std::to_string(v) + " m=" + std::to_string(m);
          const ComputePlan plan = generate({kind, p, m, v, edges});
          EXPECT_EQ(plan.shape.stage_edges, edges) << name;
          check_runs(plan, name + " with skip edges");
        }
      }
    }
  }
  // 0 -> 2 -> 1 -> 3 is a DAG, but stage 1 runs after stage 2 in it.
  try {
    (void)generate({ScheduleKind::kInterleaved1F1B, 2, 4, 2, {{0, 2}, {2, 1}, {1, 3}}});
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("got 2 -> 1"), std::string::npos) << e.what();
  }
}

TEST(StageEdges, FromGraphStageDag) {
  graph::StageGraph g;
  g.stages.resize(4);
  for (int s = 0; s < 4; ++s) g.stages[static_cast<std::size_t>(s)].index = s;
  auto cut = [](int from, int to) {
    graph::CutValue c;
    c.producer_stage = from;
    c.consumer_stage = to;
    return c;
  };
  // Model input into 0 and 2 (ignored), two values 0 -> 1 (one edge), a skip 0 -> 3.
  g.edges = {cut(-1, 0), cut(0, 1), cut(0, 1), cut(-1, 2), cut(1, 2), cut(2, 3), cut(0, 3)};
  const auto edges = stage_edges_from(g);
  EXPECT_EQ(edges, (std::vector<StageEdge>{{0, 1}, {0, 3}, {1, 2}, {2, 3}}));
  const ComputePlan plan = generate({ScheduleKind::k1F1B, 4, 6, 1, edges});
  check_runs(plan, "1F1B skip-edge DAG");
  g.edges.push_back(cut(3, 1));
  EXPECT_THROW((void)stage_edges_from(g), ConfigError);
}

// Issue 21: a stage DAG that contains the chain plus edges to later stages (a skip connection
// across stages) keeps the looped schedules' order (Note [Looped schedules over a stage DAG]).
TEST(ScheduleDag, LoopedSchedulesTakeTheChainPlusForwardSkips) {
  const std::vector<StageEdge> skips = {{0, 1}, {1, 2}, {2, 3}, {0, 2}, {1, 3}, {0, 3}};
  for (ScheduleKind kind : all_schedule_kinds()) {
    // Single-stage schedules take any DAG; the V-shaped ones take only their chain.
    if (kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B || is_v_shaped(kind)) continue;
    for (int m : {2, 4}) {
      const std::string name = std::string(to_string(kind)) + " m=" + std::to_string(m);
      ComputePlan plan;
      try {
        plan = generate({kind, 2, m, 2, skips});
      } catch (const ConfigError& e) {
        // Only the shape rules of the chain itself may refuse.
        EXPECT_THROW((void)generate({kind, 2, m, 2, {}}), ConfigError) << name << ": " << e.what();
        continue;
      }
      EXPECT_FALSE(plan.shape.is_chain()) << name;
      check_runs(plan, name);
    }
  }
  // Stage 1 does not feed stage 2: every edge still goes up, so the looped order covers it.
  check_runs(generate({ScheduleKind::kInterleaved1F1B, 2, 4, 2, {{0, 1}, {0, 2}, {2, 3}}}),
             "Interleaved1F1B without 1 -> 2");
}

}  // namespace
}  // namespace pipewright::sched
