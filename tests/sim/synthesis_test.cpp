// Schedule synthesis (sim::synthesize, `schedule Auto`) and ZB-H2 on the simulator: the issue's
// targets with T_F = T_I = T_W and free p2p (Auto at a cap of P matches ZB-H1's bubble rate, at
// 2P it is <= 1% for M >= 3P; ZB-H2 has none for M >= 2P - 1), the Zero Bubble paper's profiled
// settings at its memory (Auto no worse than ZB-1p and ZB-2p), Auto plans as ordinary plans
// (valid, deadlock-free under both transports, JSON round trip), uneven stages, the V placement,
// determinism, and the bad inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/synthesis.hpp"

namespace pipewright::sim {
namespace {

using sched::ScheduleKind;

// F = I = W = 1 ms per stage (B = 2), or the given per-stage forwards (I = W = F).
sched::CostTable unit_costs(int stages, std::vector<double> forward = {1.0}) {
  WhatIfCosts w;
  w.forward_ms = forward;
  for (double f : forward) {
    w.backward_ms.push_back(2 * f);
    w.weight_ms.push_back(f);
  }
  return what_if_costs(w, stages);
}

SimOptions free_p2p() {
  SimOptions o;
  o.p2p_override_ms = 0.0;
  return o;
}

SimResult run(const sched::ComputePlan& plan, const sched::CostTable& costs, const SimOptions& so) {
  sched::LowerOptions lo;
  lo.reduce_grad = lo.optimizer_step = true;
  SimOptions o = so;
  o.record_actions = true;
  return simulate(sched::lower(plan, lo), costs, Cluster{}, o);
}

AutoOptions auto_options(int p, int m, double inflight) {
  AutoOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.max_inflight = inflight;
  o.sim = free_p2p();
  return o;
}

void check_ordinary(const sched::ComputePlan& plan, const std::string& name) {
  ASSERT_TRUE(sched::validate(plan).empty()) << name;
  EXPECT_EQ(plan.shape.schedule, "Auto");
  sched::LowerOptions lo;
  lo.reduce_grad = lo.optimizer_step = true;
  const auto lowered = sched::lower(plan, lo);
  ASSERT_TRUE(sched::validate(lowered).empty()) << name;
  for (auto t : {sched::Transport::kBuffered, sched::Transport::kRendezvous}) {
    EXPECT_TRUE(sched::dry_run(lowered, t).ok) << name;
  }
  const auto back = sched::parse_json(sched::to_json(plan), "auto.json");
  ASSERT_TRUE(std::holds_alternative<sched::ComputePlan>(back)) << name;
  EXPECT_EQ(std::get<sched::ComputePlan>(back).per_rank, plan.per_rank) << name;
}

TEST(ZBH2, NoBubbleOnTheUnitGridAndTwoPMinusOneInFlight) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {2 * p - 1, 2 * p, 3 * p, 4 * p + 1}) {
      const std::string name = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      const auto plan = sched::generate({ScheduleKind::kZBH2, p, m, 1, {}});
      const SimResult r = run(plan, unit_costs(p), free_p2p());
      EXPECT_EQ(span_bubble_rate(r), 0.0) << name;
      // ZB-H1 on the same grid: (P - 1) units of bubble in a span of 3M + P - 1 (where torch's
      // rounds rule takes M).
      if (m % std::max(1, m / p) != 0) continue;
      const auto zb1 = sched::generate({ScheduleKind::kInterleavedZeroBubble, p, m, 1, {}});
      const double h1 = span_bubble_rate(run(zb1, unit_costs(p), free_p2p()));
      EXPECT_NEAR(h1, (p - 1.0) / (3.0 * m + p - 1), 1e-12) << name;
      int peak = 0;
      for (const auto& rr : r.per_rank) peak = std::max(peak, rr.peak_activation_microbatches);
      EXPECT_EQ(peak, 2 * p - 1) << name;
    }
  }
}

TEST(Auto, AtACapOfPMatchesZBH1AndAt2PHasNoBubble) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p, 4 * p}) {
      const std::string name = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      const auto costs = unit_costs(p);
      const auto zb1 = sched::generate({ScheduleKind::kInterleavedZeroBubble, p, m, 1, {}});
      const double h1 = span_bubble_rate(run(zb1, costs, free_p2p()));
      const AutoResult at_p = synthesize(costs, auto_options(p, m, p));
      check_ordinary(at_p.plan, name);
      EXPECT_LE(at_p.span_bubble, h1 + 1e-12) << name << " chose " << at_p.chosen;
      for (std::size_t r = 0; r < at_p.peak_activation.size(); ++r) {
        EXPECT_LE(at_p.peak_activation[r], p) << name;  // one unit per microbatch
      }
      const AutoResult at_2p = synthesize(costs, auto_options(p, m, 2 * p));
      check_ordinary(at_2p.plan, name);
      if (m >= 3 * p) {
        EXPECT_LE(at_2p.span_bubble, 0.01) << name << " chose " << at_2p.chosen;
      }
      EXPECT_GE(at_2p.step_ns, at_2p.lower_bound_ns) << name;
      EXPECT_LE(at_2p.step_ns, at_p.step_ns) << name;
    }
  }
}

TEST(Auto, UnevenStagesBeatTheNamedSchedulesAtTheSameMemory) {
  // The first stage holds the embedding, the last the head and the loss.
  const int p = 4;
  const int m = 16;
  const auto costs = unit_costs(p, {1.5, 1.0, 1.0, 2.5});
  const AutoResult a = synthesize(costs, auto_options(p, m, p));
  check_ordinary(a.plan, "uneven");
  for (auto kind : {ScheduleKind::k1F1B, ScheduleKind::kInterleavedZeroBubble}) {
    const auto named = sched::generate({kind, p, m, 1, {}});
    EXPECT_LE(a.step_ns, run(named, costs, free_p2p()).makespan_ns) << sched::to_string(kind);
  }
  EXPECT_GE(a.step_ns, a.lower_bound_ns);
}

TEST(Auto, VPlacementWithTwoStagesPerRank) {
  const int p = 4;
  const int m = 8;
  const auto costs = unit_costs(2 * p);
  AutoOptions o = auto_options(p, m, p);
  o.stages_per_rank = 2;
  const AutoResult a = synthesize(costs, o);
  check_ordinary(a.plan, "v=2");
  EXPECT_EQ(a.plan.shape.stages, 2 * p);
  const auto zbv = sched::generate({ScheduleKind::kZBVZeroBubble, p, m, 2, {}});
  EXPECT_LE(a.step_ns, run(zbv, costs, free_p2p()).makespan_ns);
}

// Note [Local search]: with messages that cost time and a cap below 1F1B's, the greedy's best
// order is improved by moving W passes; the simulator keeps the improvement.
TEST(Auto, LocalSearchImprovesOnTheGreedy) {
  AutoOptions o = auto_options(8, 16, 6);
  o.sim.p2p_override_ms = 0.3;
  const AutoResult a = synthesize(unit_costs(8), o);
  check_ordinary(a.plan, "local search");
  EXPECT_EQ(a.chosen.rfind("local search from greedy", 0), 0U) << a.chosen;
  for (const auto& c : a.candidates) {
    if (c.fits) {
      EXPECT_LE(a.step_ns, c.step_ns) << c.name;
    }
  }
  for (std::size_t r = 0; r < a.peak_activation.size(); ++r) EXPECT_LE(a.peak_activation[r], 6);
}

TEST(Auto, DeterministicAndBytesCap) {
  const int p = 4;
  const int m = 12;
  WhatIfCosts w;
  w.forward_ms = {1.0};
  w.backward_ms = {2.0};
  w.activation_bytes = 1000;
  w.param_bytes = 5000;
  const auto costs = what_if_costs(w, p);
  AutoOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.sim = free_p2p();
  // SGD: parameters + gradients = 10000 bytes; room for 6 microbatches.
  o.memory_limit_bytes = 10000 + 6 * 1000;
  const AutoResult a = synthesize(costs, o);
  const AutoResult b = synthesize(costs, o);
  EXPECT_EQ(a.plan, b.plan);
  EXPECT_EQ(a.chosen, b.chosen);
  for (std::size_t r = 0; r < a.peak_activation.size(); ++r) {
    EXPECT_LE(a.peak_activation[r], 6000);
  }
  sched::LowerOptions lo;
  lo.reduce_grad = lo.optimizer_step = true;
  for (const auto& rm : sched::peak_memory(sched::lower(a.plan, lo), costs, o.memory)) {
    EXPECT_LE(rm.peak_bytes, *o.memory_limit_bytes);
  }
}

TEST(Auto, BadInputs) {
  const auto costs = unit_costs(4);
  try {
    (void)synthesize(costs, auto_options(4, 8, 0.5));
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("below the minimum 1"), std::string::npos) << e.what();
  }
  try {
    (void)synthesize(unit_costs(3), auto_options(4, 8, 4));
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the costs have 3 stage(s) but the plan has P x V = 4"),
              std::string::npos)
        << e.what();
  }
  WhatIfCosts w;
  w.forward_ms = {1.0};
  w.backward_ms = {2.0};
  w.activation_bytes = 1000;
  w.param_bytes = 5000;
  AutoOptions o;
  o.ranks = 4;
  o.microbatches = 8;
  o.memory_limit_bytes = 10500;  // static 10000 + one microbatch 1000 = 11000
  try {
    (void)synthesize(what_if_costs(w, 4), o);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("below the minimum 11000 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(Auto, TimeLimitGivesTheBestPlanSoFar) {
  AutoOptions o = auto_options(4, 16, 8);
  o.time_limit_s = 1e-9;
  const AutoResult a = synthesize(unit_costs(4), o);
  EXPECT_TRUE(a.timed_out);
  EXPECT_NE(a.note.find("best plan found so far"), std::string::npos) << a.note;
  EXPECT_EQ(a.candidates.size(), 1U);
  check_ordinary(a.plan, "time limit");
}

// The Zero Bubble paper's profiled settings (Qi et al., ICLR 2024, arXiv 2401.10241; its Table of
// bubble rates): p, m, T_F, T_B (the paper's B is pipewright's I), T_W, T_comm in ms, the model's
// hidden size h and attention heads a (sequence length s = 1024), and the bubble rates its
// authors' script prints for ZB-H1, ZB-H2, ZB-1p (their automatic scheduler at p M_B) and ZB-2p
// (at 2p M_B). Source: github.com/sail-sg/zero-bubble-pipeline-parallelism,
// megatron/core/pipeline_parallel/efficiency.py at commit f68d38794764d7d937f4942dca3a1e9a07544898
// (iclr_bubble_rates(): the settings, in us, mem_f = 34h + 5as, mem_w = -32h, mem_b = -mem_w -
// mem_f, max_mem = 2p mem_f or p mem_f, and its printed table in the closing docstring; columns
// 1F1B, ZB-H1, ZB-H2, ZB-1p, ZB-2p, the first three recomputed from the closed forms the script
// asserts). Figures are rounded to 4 decimals, hence the 5e-5 slack.
struct PaperSetting {
  int p, m;
  double f, b, w, c;
  int h, a;
  double zbh1, zbh2, zb1p, zb2p;
};
constexpr PaperSetting kPaperSettings[] = {
    {8, 24, 18.522, 18.086, 9.337, 0.601, 2304, 24, 0.1585, 0.1083, 0.1585, 0.0433},
    {8, 32, 18.513, 18.086, 9.331, 0.626, 2304, 24, 0.1242, 0.0837, 0.1242, 0.0039},
    {8, 64, 18.546, 18.097, 9.321, 0.762, 2304, 24, 0.0674, 0.0444, 0.0674, 0.0026},
    {8, 24, 29.718, 29.444, 19.927, 0.527, 4096, 32, 0.1323, 0.0698, 0.1323, 0.0029},
    {8, 32, 29.802, 29.428, 19.530, 0.577, 4096, 32, 0.1045, 0.0559, 0.1045, 0.0022},
    {8, 64, 29.935, 29.621, 19.388, 0.535, 4096, 32, 0.0554, 0.0294, 0.0554, 0.0010},
    {16, 48, 11.347, 11.248, 8.132, 0.377, 5120, 40, 0.1397, 0.0672, 0.1397, 0.0066},
    {16, 64, 11.307, 11.254, 8.101, 0.379, 5120, 40, 0.1088, 0.0516, 0.1088, 0.0054},
    {16, 128, 11.325, 11.308, 8.109, 0.378, 5120, 40, 0.0576, 0.0266, 0.0576, 0.0028},
    {32, 96, 10.419, 10.207, 7.715, 0.408, 6144, 48, 0.1421, 0.0641, 0.1421, 0.0038},
    {32, 128, 10.408, 10.204, 7.703, 0.408, 6144, 48, 0.1106, 0.0490, 0.1106, 0.0029},
    {32, 256, 10.402, 10.248, 7.698, 0.460, 6144, 48, 0.0594, 0.0257, 0.0594, 0.0018},
};

// The paper's memory (Note [Weight-gradient activation]): a microbatch holds M_B = 34h + 5as
// (per token and layer) from F to I, and M_W = 32h of it from I to W.
double paper_weight_grad_keeps(const PaperSetting& s) {
  const double seq = 1024;
  return 32.0 * s.h / (34.0 * s.h + 5.0 * s.a * seq);
}

sched::CostTable paper_costs(const PaperSetting& s) {
  WhatIfCosts w;
  w.forward_ms = {s.f};
  w.backward_ms = {s.b + s.w};
  w.weight_ms = {s.w};
  w.weight_grad_keeps = {paper_weight_grad_keeps(s)};
  return what_if_costs(w, s.p);
}

// The best span bubble rate of the candidates whose name starts with `prefix` (1 when none fits).
double best_rate_of(const AutoResult& r, const std::string& prefix) {
  double best = 1;
  for (const auto& c : r.candidates) {
    if (c.fits && c.name.rfind(prefix, 0) == 0) best = std::min(best, c.span_bubble);
  }
  return best;
}

// Issue 45's target: at the paper's memory Auto's bubble rate is no worse than its automatic
// schedules', ZB-1p at p M_B and ZB-2p at 2p M_B, in all 12 settings, under either objective
// (Note [Auto objective]); the step objective also keeps the step within 0.1% of the lower bound.
// The heuristic candidates alone reproduce the authors' printed rates (their scheduler's
// initial_solution, which is what ZB-1p and ZB-2p are in that table).
TEST(Auto, ZeroBubblePaperSettings) {
  for (const auto& s : kPaperSettings) {
    const std::string name =
        "p=" + std::to_string(s.p) + " m=" + std::to_string(s.m) + " F=" + std::to_string(s.f);
    const auto costs = paper_costs(s);
    AutoOptions o = auto_options(s.p, s.m, s.p);
    o.sim.p2p_override_ms = s.c;
    const AutoResult at_p = synthesize(costs, o);
    EXPECT_LE(at_p.span_bubble, s.zb1p + 5e-5) << name << " chose " << at_p.chosen;
    EXPECT_LE(at_p.span_bubble, s.zbh1 + 5e-5) << name;
    EXPECT_NEAR(best_rate_of(at_p, "zero-bubble heuristic"), s.zb1p, 5e-5) << name;
    o.max_inflight = 2 * s.p;
    const AutoResult at_2p = synthesize(costs, o);
    EXPECT_LE(at_2p.span_bubble, s.zb2p + 5e-5) << name << " chose " << at_2p.chosen;
    EXPECT_LE(at_2p.span_bubble, s.zbh2 + 5e-5) << name;
    EXPECT_NEAR(best_rate_of(at_2p, "zero-bubble heuristic"), s.zb2p, 5e-5) << name;
    EXPECT_GE(at_2p.step_ns, at_2p.lower_bound_ns) << name;
    EXPECT_LE(static_cast<double>(at_2p.step_ns), 1.001 * static_cast<double>(at_2p.lower_bound_ns))
        << name << " chose " << at_2p.chosen;
    for (std::size_t r = 0; r < at_2p.peak_activation.size(); ++r) {
      EXPECT_LE(at_2p.peak_activation[r], 2 * s.p) << name;
    }
    check_ordinary(at_2p.plan, name);
    o.objective = AutoObjective::kSpan;
    const AutoResult by_span = synthesize(costs, o);
    EXPECT_LE(by_span.span_bubble, s.zb2p + 5e-5) << name << " chose " << by_span.chosen;
    EXPECT_LE(by_span.span_bubble, at_2p.span_bubble + 1e-12) << name;
  }
}

// Note [Weight-gradient activation] is what the paper's 2p M_B buys: with W holding the whole
// activation (weight_grad_keeps absent, pipewright's conservative default) the same cap defers
// fewer W and the first setting stays above ZB-2p's 4.33%; with the paper's share it does not.
TEST(Auto, PaperMemoryAccountingIsWhatReachesZB2p) {
  const PaperSetting& s = kPaperSettings[0];
  AutoOptions o = auto_options(s.p, s.m, 2 * s.p);
  o.sim.p2p_override_ms = s.c;
  sched::CostTable costs = paper_costs(s);
  const AutoResult paper = synthesize(costs, o);
  for (auto& st : costs.stages) st.weight_grad_keeps.reset();
  const AutoResult whole = synthesize(costs, o);
  EXPECT_LE(paper.span_bubble, s.zb2p + 5e-5);
  EXPECT_GT(whole.span_bubble, s.zb2p + 0.01) << whole.chosen;
  for (std::size_t r = 0; r < whole.peak_activation.size(); ++r) {
    EXPECT_LE(whole.peak_activation[r], 2 * s.p);
    EXPECT_LE(paper.peak_activation[r], 2 * s.p);
  }
  // Under the paper's accounting the first rank holds more than 2p microbatches' worth of F
  // passes before their W (the deferred W keep only their share).
  std::int32_t most = 0;
  std::int32_t open = 0;
  for (const auto& a : paper.plan.per_rank[0]) {
    if (a.kind == sched::ActionKind::kForward) ++open;
    if (a.kind == sched::ActionKind::kBackwardWeight) --open;
    most = std::max(most, open);
  }
  EXPECT_GT(most, 2 * s.p);
}

}  // namespace
}  // namespace pipewright::sim
