// The memory model (Note [Memory model] in sched/memory.hpp) against closed forms: static bytes
// per optimizer, in-flight activations of GPipe and 1F1B, recompute, forward-only, Chimera's
// per-model-stage costs.
#include "pipewright/sched/memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/lower.hpp"

namespace pipewright::sched {
namespace {

constexpr std::int64_t kParams = 1000;
constexpr std::int64_t kActivations = 100;
constexpr std::int64_t kOutput = 7;

CostTable uniform_costs(int stages) {
  CostTable t;
  t.source = "test";
  for (int s = 0; s < stages; ++s) {
    StageCost c;
    c.stage = s;
    c.forward_ms = 1;
    c.backward_ms = 2;
    c.param_bytes = kParams;
    c.activation_bytes = kActivations;
    c.output_bytes = kOutput;
    t.stages.push_back(c);
  }
  return t;
}

JobSpec job_of(ScheduleKind kind, int pp, int m, int v = 1) {
  JobSpec j;
  j.schedule = kind;
  j.pp = pp;
  j.stages_per_rank = v;
  j.microbatches = m;
  return j;
}

TEST(Memory, OptimizerStateFactor) {
  EXPECT_EQ(optimizer_state_factor(Optimizer::kSgd, 0.0), 0.0);
  EXPECT_EQ(optimizer_state_factor(Optimizer::kSgd, 0.9), 1.0);
  EXPECT_EQ(optimizer_state_factor(Optimizer::kAdam, 0.0), 2.0);
  EXPECT_EQ(optimizer_state_factor(Optimizer::kAdamW, 0.0), 2.0);
}

// 1F1B: rank r holds min(p - r, m) microbatches at its peak; GPipe: all m.
TEST(Memory, InFlightMicrobatchesOfGPipeAnd1F1B) {
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kGPipe}) {
        JobSpec job = job_of(kind, p, m);
        // SGD with momentum steps in place (no Note [Optimizer transient] at OPTIM to outgrow
        // the activations).
        job.optimizer = Optimizer::kSgd;
        job.momentum = 0.9;
        const auto plan = make_plan(job, nullptr);
        const auto mem = peak_memory(plan, uniform_costs(p), memory_options(job));
        ASSERT_EQ(mem.size(), static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) {
          const int held = kind == ScheduleKind::kGPipe ? m : std::min(p - r, m);
          const auto& rm = mem[static_cast<std::size_t>(r)];
          EXPECT_EQ(rm.rank, r);
          EXPECT_EQ(rm.static_bytes, 3 * kParams);  // parameters, gradients, momentum
          EXPECT_EQ(rm.peak_activation_microbatches, held) << to_string(kind) << " p=" << p;
          EXPECT_EQ(rm.peak_activation_bytes, held * kActivations);
          EXPECT_EQ(rm.peak_bytes, rm.static_bytes + rm.peak_activation_bytes);
        }
      }
    }
  }
}

// Recompute: a stage keeps its producers' outputs per in-flight microbatch, plus one full set of
// activations during the backward that recomputes them; the first stage keeps nothing.
TEST(Memory, RecomputeKeepsInputsAndOneMicrobatch) {
  const int p = 4, m = 8;
  JobSpec job = job_of(ScheduleKind::k1F1B, p, m);
  job.recompute = parse_recompute("full");
  const auto plan = make_plan(job, nullptr);
  CostTable costs = uniform_costs(p);
  costs.runtime_memory_bytes = 5;
  const auto mem = peak_memory(plan, costs, memory_options(job));
  for (int r = 0; r < p; ++r) {
    const auto& rm = mem[static_cast<std::size_t>(r)];
    const std::int64_t kept = r == 0 ? 0 : kOutput;
    EXPECT_EQ(rm.peak_activation_bytes, (p - r) * kept + kActivations) << "rank " << r;
    EXPECT_EQ(rm.static_bytes, 2 * kParams);  // SGD without momentum: no state
    EXPECT_EQ(rm.peak_bytes, 5 + 2 * kParams + rm.peak_activation_bytes);
  }
}

// Zero-bubble: I keeps the recomputed activations until W frees them with the kept ones.
TEST(Memory, SplitBackwardFreesAtW) {
  const MemoryOptions none;
  JobSpec job = job_of(ScheduleKind::kInterleavedZeroBubble, 2, 4, 2);
  const auto plan = make_plan(job, nullptr);
  const MemoryModel model(plan.shape, uniform_costs(4), none);
  EXPECT_EQ(model.change(ActionKind::kBackwardInput, 1).at_end, 0);
  EXPECT_EQ(model.change(ActionKind::kBackwardWeight, 1).at_end, -kActivations);
  EXPECT_EQ(model.change(ActionKind::kBackwardWeight, 1).microbatches_at_end, -1);
  EXPECT_EQ(model.change(ActionKind::kSendF, 1).at_start, 0);
  for (const auto& rm : peak_memory(plan, uniform_costs(4), none)) {
    EXPECT_GT(rm.peak_activation_bytes, 0);
    EXPECT_EQ(rm.peak_activation_bytes % kActivations, 0);
  }
}

// Note [Weight-gradient activation]: with weight_grad_keeps k an I frees (1 - k) of the kept
// bytes and its W the rest. One rank, order F0 F1 I0 F2 I1 I2 W0 W1 W2 (activation 100): k = 1
// peaks at three microbatches (300) after F2, k = 0.25 at 100 + 100 + 25 after F2 = 225 (the
// Zero Bubble paper's accounting, where B adds M_W - M_B), k = 0 at two microbatches (200).
// Recomputed stages keep what they recompute until W whatever k says.
TEST(Memory, WeightGradKeepsIsWhatIFreesNot) {
  ComputePlan plan;
  plan.shape.ranks = 1;
  plan.shape.stages = 1;
  plan.shape.microbatches = 3;
  plan.shape.schedule = "test";
  plan.shape.stage_to_rank = {0};
  const auto f = [](int i) { return Action::compute(0, ActionKind::kForward, i); };
  const auto in = [](int i) { return Action::compute(0, ActionKind::kBackwardInput, i); };
  const auto w = [](int i) { return Action::compute(0, ActionKind::kBackwardWeight, i); };
  plan.per_rank = {{f(0), f(1), in(0), f(2), in(1), in(2), w(0), w(1), w(2)}};
  const LoweredPlan lowered = lower(plan, {});
  for (const auto& [keeps, peak] : std::vector<std::pair<std::optional<double>, std::int64_t>>{
           {std::nullopt, 300}, {1.0, 300}, {0.25, 225}, {0.0, 200}}) {
    CostTable costs = uniform_costs(1);
    costs.stages[0].weight_grad_keeps = keeps;
    const MemoryModel model(plan.shape, costs, MemoryOptions{});
    const std::int64_t kept = std::llround(keeps.value_or(1.0) * kActivations);
    EXPECT_EQ(model.change(ActionKind::kBackwardInput, 0).at_end, kept - kActivations);
    EXPECT_EQ(model.change(ActionKind::kBackwardWeight, 0).at_end, -kept);
    EXPECT_EQ(model.change(ActionKind::kForward, 0).at_start, kActivations);
    const auto mem = peak_memory(lowered, costs, MemoryOptions{});
    EXPECT_EQ(mem[0].peak_activation_bytes, peak) << keeps.value_or(-1);
    EXPECT_EQ(mem[0].peak_activation_microbatches, 3);  // held until W, whatever its bytes
  }
  MemoryOptions recompute;
  recompute.recompute = parse_recompute("full");
  CostTable costs = uniform_costs(1);
  costs.stages[0].weight_grad_keeps = 0.25;
  const MemoryModel model(plan.shape, costs, recompute);
  EXPECT_EQ(model.change(ActionKind::kBackwardInput, 0).at_end, 0);
}

// Forward-only: one microbatch's activations at a time, parameters only.
TEST(Memory, ForwardOnlyHoldsOneMicrobatchAndNoGradients) {
  JobSpec job = job_of(ScheduleKind::k1F1B, 3, 6);
  job.forward_only = true;
  job.optimizer = Optimizer::kAdam;
  const auto plan = make_plan(job, nullptr);
  for (const auto& rm : peak_memory(plan, uniform_costs(3), memory_options(job))) {
    EXPECT_EQ(rm.static_bytes, kParams);
    EXPECT_EQ(rm.peak_activation_bytes, kActivations);
    EXPECT_EQ(rm.peak_activation_microbatches, 1);
  }
}

// Chimera: costs per model stage are shared by the stage's replicas; other counts are refused.
TEST(Memory, ChimeraTakesCostsPerModelStage) {
  JobSpec job = job_of(ScheduleKind::kChimera, 2, 4);
  const auto plan = make_plan(job, nullptr);
  ASSERT_EQ(plan.shape.stages, 4);
  const auto per_model = peak_memory(plan, uniform_costs(2), memory_options(job));
  const auto per_plan = peak_memory(plan, uniform_costs(4), memory_options(job));
  EXPECT_EQ(per_model, per_plan);
  EXPECT_EQ(per_model[0].static_bytes, 2 * 2 * kParams);  // two stages per rank
  try {
    (void)peak_memory(plan, uniform_costs(3), memory_options(job));
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/stages has 3 entries but the plan has 4 stages"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipewright::sched
