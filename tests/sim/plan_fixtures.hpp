// Hand-built plans for the simulator tests, independent of sched's generators: GPipe and 1F1B in
// torch's per-rank order, lowered the way torch lowers them (RECV right before the compute that
// needs it, SEND right after the compute that produced it).
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::sim::testing {

using sched::Action;
using sched::ActionKind;

inline std::vector<Action> lower_rank(const std::vector<Action>& compute, std::int32_t stages) {
  std::vector<Action> out;
  for (const Action& a : compute) {
    const bool fwd = a.kind == ActionKind::kForward;
    const bool bwd = a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput;
    if (fwd && a.stage > 0)
      out.push_back(Action::comm(a.stage, ActionKind::kRecvF, a.microbatch, a.stage - 1));
    if (bwd && a.stage + 1 < stages)
      out.push_back(Action::comm(a.stage, ActionKind::kRecvB, a.microbatch, a.stage + 1));
    out.push_back(a);
    if (fwd && a.stage + 1 < stages)
      out.push_back(Action::comm(a.stage, ActionKind::kSendF, a.microbatch, a.stage + 1));
    if (bwd && a.stage > 0)
      out.push_back(Action::comm(a.stage, ActionKind::kSendB, a.microbatch, a.stage - 1));
  }
  return out;
}

inline sched::LoweredPlan make_plan(std::int32_t p, std::int32_t m, const char* name,
                                    const std::vector<std::vector<Action>>& compute) {
  sched::LoweredPlan plan;
  plan.shape.ranks = p;
  plan.shape.stages = p;
  plan.shape.microbatches = m;
  plan.shape.schedule = name;
  for (std::int32_t s = 0; s < p; ++s) plan.shape.stage_to_rank.push_back(s);
  for (const auto& c : compute) plan.per_rank.push_back(lower_rank(c, p));
  return plan;
}

inline sched::LoweredPlan gpipe(std::int32_t p, std::int32_t m) {
  std::vector<std::vector<Action>> compute(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r) {
    for (std::int32_t i = 0; i < m; ++i)
      compute[static_cast<std::size_t>(r)].push_back(Action::compute(r, ActionKind::kForward, i));
    for (std::int32_t i = 0; i < m; ++i)
      compute[static_cast<std::size_t>(r)].push_back(
          Action::compute(r, ActionKind::kFullBackward, i));
  }
  return make_plan(p, m, "GPipe", compute);
}

// 1F1B: rank r runs min(p - r - 1, m) warm-up forwards, then alternates F and B, then drains.
inline sched::LoweredPlan one_f_one_b(std::int32_t p, std::int32_t m, bool split = false) {
  std::vector<std::vector<Action>> compute(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r) {
    auto& c = compute[static_cast<std::size_t>(r)];
    const std::int32_t warm = std::min(p - r - 1, m);
    std::int32_t f = 0, b = 0;
    auto backward = [&](std::int32_t mb) {
      if (split) {
        c.push_back(Action::compute(r, ActionKind::kBackwardInput, mb));
        c.push_back(Action::compute(r, ActionKind::kBackwardWeight, mb));
      } else {
        c.push_back(Action::compute(r, ActionKind::kFullBackward, mb));
      }
    };
    for (; f < warm; ++f) c.push_back(Action::compute(r, ActionKind::kForward, f));
    while (f < m) {
      c.push_back(Action::compute(r, ActionKind::kForward, f++));
      backward(b++);
    }
    while (b < m) backward(b++);
  }
  return make_plan(p, m, split ? "1F1B-split" : "1F1B", compute);
}

inline sched::CostTable uniform_costs(std::int32_t stages, double f_ms, double b_ms,
                                      std::int64_t act_bytes = 0, std::int64_t param_bytes = 0,
                                      std::int64_t output_bytes = 0) {
  sched::CostTable t;
  t.source = "test";
  for (std::int32_t s = 0; s < stages; ++s) {
    sched::StageCost c;
    c.stage = s;
    c.forward_ms = f_ms;
    c.backward_ms = b_ms;
    c.activation_bytes = act_bytes;
    c.param_bytes = param_bytes;
    c.output_bytes = output_bytes;
    t.stages.push_back(c);
  }
  return t;
}

}  // namespace pipewright::sim::testing
