// synthesize(): Auto's candidates, checked, simulated and ranked (Note [Auto method] in
// sim/synthesis.hpp).
#include "pipewright/sim/synthesis.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"
#include "synthesis/list_scheduler.hpp"
#include "synthesis/local_search.hpp"
#include "synthesis/zb_heuristic.hpp"

namespace pipewright::sim {
namespace {

using sched::ActionKind;
using sched::ComputePlan;
using sched::PlanShape;
using sched::ScheduleKind;

std::int64_t to_ns(double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); }

// Without activation bytes a microbatch's activation on a stage is one unit, counted in 2^20ths
// so that what an I frees (a share, Note [Weight-gradient activation]) is exact enough.
constexpr std::int64_t kUnit = std::int64_t{1} << 20;

// A stage placement of P x V stages: the looping one (stage s on rank s mod P) or the V (V = 2).
struct StagePlacement {
  std::string name;
  PlanShape shape;
  std::vector<std::int64_t> activation;        // per stage, in the cap's unit
  std::vector<std::int64_t> input_grad_frees;  // per stage: what an I frees of `activation`
  double unit_scale = 1;                       // the reported unit: bytes 1, microbatches kUnit
  std::vector<std::int64_t> cap;               // per rank
  std::vector<std::int64_t> unit;              // per rank: one microbatch over its stages
  std::string infeasible;                      // why not even one microbatch fits, or empty
  std::int64_t min_bytes = 0;                  // bytes mode: the least limit one microbatch needs
};

PlanShape shape_of(std::int32_t p, std::int32_t v, std::int32_t m, bool v_shaped) {
  PlanShape shape;
  shape.ranks = p;
  shape.stages = p * v;
  shape.microbatches = m;
  shape.schedule = "Auto";
  shape.stage_to_rank = v_shaped ? sched::v_placement(p) : sched::looping_placement(p, p * v);
  return shape;
}

StagePlacement make_placement(const std::string& name, PlanShape shape,
                              const sched::CostTable& costs, const AutoOptions& o) {
  StagePlacement pl;
  pl.name = name;
  pl.shape = std::move(shape);
  const sched::MemoryModel model(pl.shape, costs, o.memory);
  const auto S = static_cast<std::size_t>(pl.shape.stages);
  const auto P = static_cast<std::size_t>(pl.shape.ranks);
  pl.activation.resize(S);
  pl.input_grad_frees.resize(S);
  bool any_bytes = false;
  for (std::size_t s = 0; s < S; ++s) {
    const auto stage = static_cast<std::int32_t>(s);
    pl.activation[s] = model.change(ActionKind::kForward, stage).at_start;
    pl.input_grad_frees[s] = -model.change(ActionKind::kBackwardInput, stage).at_end;
    any_bytes = any_bytes || pl.activation[s] > 0;
  }
  if (!any_bytes) {  // one kUnit per stage; an I frees all but weight_grad_keeps of it
    pl.unit_scale = static_cast<double>(kUnit);
    for (std::size_t s = 0; s < S; ++s) {
      const double keeps = costs.stages[s].weight_grad_keeps.value_or(1.0);
      pl.activation[s] = kUnit;
      pl.input_grad_frees[s] = kUnit - std::llround(keeps * static_cast<double>(kUnit));
    }
  }
  pl.unit.assign(P, 0);
  for (std::size_t s = 0; s < S; ++s) {
    pl.unit[static_cast<std::size_t>(pl.shape.stage_to_rank[s])] += pl.activation[s];
  }
  const std::int64_t everything = static_cast<std::int64_t>(o.microbatches);
  pl.cap.assign(P, 0);
  for (std::size_t r = 0; r < P; ++r) {
    const auto rank = static_cast<std::int32_t>(r);
    std::int64_t cap = everything * pl.unit[r];  // no cap: every microbatch may be in flight
    if (o.max_inflight) {
      // More than M microbatches in flight is the same as M (and keeps the product in range).
      const double k = std::min(*o.max_inflight, static_cast<double>(o.microbatches));
      cap = static_cast<std::int64_t>(std::floor(k * static_cast<double>(pl.unit[r])));
    } else if (o.memory_limit_bytes) {
      const std::int64_t fixed =
          model.static_bytes(rank) + model.runtime_bytes() + model.autocast_cache_bytes(rank);
      const std::int64_t one = any_bytes ? pl.unit[r] : 0;
      pl.min_bytes = std::max(pl.min_bytes, fixed + one);
      if (*o.memory_limit_bytes < fixed + one && pl.infeasible.empty()) {
        std::ostringstream why;
        why << "rank " << r << " needs " << fixed << " bytes of parameters, gradients, optimizer "
            << "state and runtime plus " << one << " bytes for one microbatch's activations";
        pl.infeasible = why.str();
      }
      if (any_bytes) cap = std::max<std::int64_t>(0, *o.memory_limit_bytes - fixed);
    }
    pl.cap[r] = std::min(cap, everything * pl.unit[r]);
  }
  return pl;
}

synthesis::ListProblem problem_of(const StagePlacement& pl, const sched::CostTable& costs,
                                  const AutoOptions& o) {
  synthesis::ListProblem pr;
  pr.ranks = pl.shape.ranks;
  pr.stages = pl.shape.stages;
  pr.microbatches = pl.shape.microbatches;
  pr.stage_to_rank = pl.shape.stage_to_rank;
  pr.activation = pl.activation;
  pr.input_grad_frees = pl.input_grad_frees;
  pr.cap = pl.cap;
  const double overhead = costs.compute_overhead_ms;
  for (const auto& st : costs.stages) {
    pr.forward_ns.push_back(to_ns(st.forward_ms + overhead));
    pr.input_grad_ns.push_back(to_ns(st.input_grad_or_default_ms() + overhead));
    pr.weight_grad_ns.push_back(to_ns(st.weight_grad_or_default_ms() + overhead));
  }
  // The greedy's message time: --p2p-ms, else the profile's p2p, else the cluster's intra-node
  // link (the simulator has the full model; this only orders passes).
  for (std::int32_t s = 0; s + 1 < pr.stages; ++s) {
    const auto us = static_cast<std::size_t>(s);
    std::int64_t ns = 0;
    if (pr.stage_to_rank[us] != pr.stage_to_rank[us + 1]) {
      const auto bytes = static_cast<double>(costs.stages[us].output_bytes);
      if (o.sim.p2p_override_ms) {
        ns = to_ns(*o.sim.p2p_override_ms);
      } else if (costs.p2p && costs.p2p->per_message_ms) {
        ns = to_ns(*costs.p2p->per_message_ms);
      } else {
        const double lat = costs.p2p ? costs.p2p->latency_ms : o.cluster.intra_node.latency_ms;
        const double bw =
            costs.p2p ? costs.p2p->bandwidth_gb_per_s : o.cluster.intra_node.bandwidth_gb_per_s;
        ns = to_ns(lat + (bw > 0 ? bytes / (bw * 1e9) * 1e3 : 0.0));
      }
    }
    pr.message_ns.push_back(ns);
  }
  return pr;
}

// The most activation each rank holds in plan order (F adds at its start; B frees it, or I part
// of it and W the rest).
std::vector<std::int64_t> peak_activation(const ComputePlan& plan, const StagePlacement& pl) {
  std::vector<std::int64_t> peak(static_cast<std::size_t>(plan.shape.ranks), 0);
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    std::int64_t held = 0;
    for (const auto& a : plan.per_rank[r]) {
      const auto s = static_cast<std::size_t>(a.stage);
      const std::int64_t act = pl.activation[s];
      if (a.kind == ActionKind::kForward) held += act;
      if (a.kind == ActionKind::kFullBackward) held -= act;
      if (a.kind == ActionKind::kBackwardInput) held -= pl.input_grad_frees[s];
      if (a.kind == ActionKind::kBackwardWeight) held -= act - pl.input_grad_frees[s];
      peak[r] = std::max(peak[r], held);
    }
  }
  return peak;
}

// The forward chain before each rank's first stage plus its compute: no schedule is shorter.
std::int64_t lower_bound(const synthesis::ListProblem& pr) {
  std::vector<std::int64_t> head(static_cast<std::size_t>(pr.ranks), -1);
  std::vector<std::int64_t> busy(static_cast<std::size_t>(pr.ranks), 0);
  std::int64_t t = 0;
  for (std::int32_t s = 0; s < pr.stages; ++s) {
    const auto us = static_cast<std::size_t>(s);
    const auto r = static_cast<std::size_t>(pr.stage_to_rank[us]);
    if (head[r] < 0) head[r] = t;
    busy[r] += pr.microbatches * (pr.forward_ns[us] + pr.input_grad_ns[us] + pr.weight_grad_ns[us]);
    t += pr.forward_ns[us] + (s + 1 < pr.stages ? pr.message_ns[us] : 0);
  }
  std::int64_t best = 0;
  for (std::size_t r = 0; r < head.size(); ++r)
    best = std::max(best, std::max<std::int64_t>(head[r], 0) + busy[r]);
  return best;
}

struct Evaluated {
  bool ok = false;
  std::string why_not;
  std::int64_t step_ns = 0;
  double span_bubble = 0;
};

Evaluated evaluate(const ComputePlan& plan, const StagePlacement& pl, const sched::CostTable& costs,
                   const AutoOptions& o) {
  Evaluated ev;
  const auto peak = peak_activation(plan, pl);
  for (std::size_t r = 0; r < peak.size(); ++r) {
    if (peak[r] > pl.cap[r]) {
      std::ostringstream why;
      why << "rank " << r << " holds " << static_cast<double>(peak[r]) / pl.unit_scale
          << " of activation, over its cap " << static_cast<double>(pl.cap[r]) / pl.unit_scale;
      ev.why_not = why.str();
      return ev;
    }
  }
  if (!sched::validate(plan).empty()) {
    ev.why_not = "invalid plan: " + sched::to_string(sched::validate(plan).front());
    return ev;
  }
  sched::LowerOptions lo;
  lo.reduce_grad = true;
  lo.optimizer_step = true;
  const sched::LoweredPlan lowered = sched::lower(plan, lo);
  const auto diags = sched::validate(lowered);
  if (!diags.empty()) {
    ev.why_not = "invalid lowered plan: " + sched::to_string(diags.front());
    return ev;
  }
  for (auto t : {sched::Transport::kBuffered, sched::Transport::kRendezvous}) {
    const auto rep = sched::dry_run(lowered, t);
    if (!rep.ok) {
      ev.why_not = "deadlocks: " + rep.message();
      return ev;
    }
  }
  if (o.memory_limit_bytes) {
    for (const auto& rm : sched::peak_memory(lowered, costs, o.memory)) {
      if (rm.peak_bytes > *o.memory_limit_bytes) {
        std::ostringstream why;
        why << "rank " << rm.rank << " peaks at " << rm.peak_bytes << " bytes, over the limit";
        ev.why_not = why.str();
        return ev;
      }
    }
  }
  SimOptions so = o.sim;
  so.steps = 1;
  so.record_actions = true;  // span_bubble_rate reads the actions
  so.record_memory_timeline = false;
  const SimResult r = simulate(lowered, costs, o.cluster, so);
  ev.step_ns = r.makespan_ns;
  ev.span_bubble = span_bubble_rate(r);
  ev.ok = true;
  return ev;
}

// The named schedules Auto starts from, for V stages per rank.
std::vector<std::pair<ScheduleKind, bool>> named_seeds(std::int32_t v) {
  if (v == 1) {
    return {{ScheduleKind::kZBH2, false},
            {ScheduleKind::kInterleavedZeroBubble, false},
            {ScheduleKind::k1F1B, false},
            {ScheduleKind::kGPipe, false}};
  }
  std::vector<std::pair<ScheduleKind, bool>> out;
  if (v == 2) out.push_back({ScheduleKind::kZBVZeroBubble, true});
  out.push_back({ScheduleKind::kInterleavedZeroBubble, false});
  out.push_back({ScheduleKind::kInterleaved1F1B, false});
  return out;
}

}  // namespace

double span_bubble_rate(const SimResult& result) {
  std::vector<std::int64_t> first(static_cast<std::size_t>(result.ranks), -1);
  std::vector<std::int64_t> last(static_cast<std::size_t>(result.ranks), 0);
  std::vector<std::int64_t> busy(static_cast<std::size_t>(result.ranks), 0);
  for (const auto& t : result.actions) {
    if (t.step != 0 || t.stream != Stream::kCompute) continue;
    const auto k = t.action.kind;
    if (k != ActionKind::kForward && k != ActionKind::kFullBackward &&
        k != ActionKind::kBackwardInput && k != ActionKind::kBackwardWeight)
      continue;
    const auto r = static_cast<std::size_t>(t.rank);
    if (first[r] < 0 || t.start_ns < first[r]) first[r] = t.start_ns;
    last[r] = std::max(last[r], t.end_ns);
    busy[r] += t.end_ns - t.start_ns;
  }
  std::int64_t cost = 0;
  std::int64_t work = 0;
  for (std::size_t r = 0; r < first.size(); ++r) {
    if (first[r] < 0) continue;
    cost = std::max(cost, last[r] - first[r]);
    work = std::max(work, busy[r]);
  }
  return cost > 0 ? static_cast<double>(cost - work) / static_cast<double>(cost) : 0.0;
}

AutoResult synthesize(const sched::CostTable& costs, const AutoOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const std::int32_t p = o.ranks;
  const std::int32_t m = o.microbatches;
  const std::int32_t v = o.stages_per_rank;
  PW_CHECK(p >= 1, ConfigError, "--pp must be >= 1, got " << p);
  PW_CHECK(m >= 1, ConfigError, "--microbatches must be >= 1, got " << m);
  PW_CHECK(v >= 1, ConfigError, "--stages-per-rank must be >= 1, got " << v);
  PW_CHECK(std::int64_t{p} * v * m <= (std::int64_t{1} << 24), ConfigError,
           "Auto: plan too large: P x V x M = " << std::int64_t{p} * v * m << " (limit 2^24)");
  PW_CHECK(static_cast<std::int64_t>(costs.stages.size()) == std::int64_t{p} * v, ConfigError,
           "Auto: the costs have " << costs.stages.size()
                                   << " stage(s) but the plan has P x V = " << p << " x " << v
                                   << " = " << p * v << " stages (--pp, --stages-per-rank)");
  PW_CHECK(!(o.max_inflight && o.memory_limit_bytes), ConfigError,
           "Auto: give one cap, --memory-limit or --max-inflight, not both");
  PW_CHECK(!o.max_inflight || *o.max_inflight >= 1, ConfigError,
           "Auto: --max-inflight " << *o.max_inflight
                                   << " is below the minimum 1: a schedule needs at least one "
                                      "microbatch in flight on the first stage");
  PW_CHECK(!o.time_limit_s || *o.time_limit_s > 0, ConfigError,
           "Auto: --time-limit must be > 0 seconds, got " << *o.time_limit_s);

  std::vector<StagePlacement> placements;
  if (v == 2) placements.push_back(make_placement("V", shape_of(p, v, m, true), costs, o));
  placements.push_back(make_placement("looping", shape_of(p, v, m, false), costs, o));
  const bool any_feasible =
      std::any_of(placements.begin(), placements.end(),
                  [](const StagePlacement& pl) { return pl.infeasible.empty(); });
  if (!any_feasible) {
    std::int64_t minimum = std::numeric_limits<std::int64_t>::max();
    for (const auto& pl : placements) minimum = std::min(minimum, pl.min_bytes);
    throw ConfigError("Auto: --memory-limit " + std::to_string(*o.memory_limit_bytes) +
                      " bytes is below the minimum " + std::to_string(minimum) +
                      " bytes any schedule needs (one microbatch in flight on the first stage: " +
                      placements.back().infeasible + ")");
  }

  AutoResult best;
  bool have = false;
  std::size_t tried = 0;
  const std::size_t placement_of_best_unset = placements.size();
  std::size_t best_placement = placement_of_best_unset;
  auto expired = [&] {
    if (!o.time_limit_s || !have) return false;  // always finish the first candidate
    const std::chrono::duration<double> spent = Clock::now() - started;
    return spent.count() > *o.time_limit_s;
  };
  auto consider = [&](std::string name, ComputePlan plan, std::size_t placement) {
    ++tried;
    AutoCandidate cand;
    cand.name = std::move(name);
    const Evaluated ev = evaluate(plan, placements[placement], costs, o);
    cand.fits = ev.ok;
    cand.why_not = ev.why_not;
    cand.step_ns = ev.step_ns;
    cand.span_bubble = ev.span_bubble;
    best.candidates.push_back(cand);
    // Note [Auto objective]: the objective's measure, then the other one.
    const bool by_span = o.objective == AutoObjective::kSpan;
    const bool better =
        !have || (by_span ? ev.span_bubble < best.span_bubble ||
                                (ev.span_bubble == best.span_bubble && ev.step_ns < best.step_ns)
                          : ev.step_ns < best.step_ns ||
                                (ev.step_ns == best.step_ns && ev.span_bubble < best.span_bubble));
    if (ev.ok && better) {
      have = true;
      best.plan = std::move(plan);
      best.plan.shape.schedule = "Auto";
      best.chosen = cand.name;
      best.step_ns = ev.step_ns;
      best.span_bubble = ev.span_bubble;
      best_placement = placement;
    }
  };

  // 1. The greedy list schedules, per placement and policy.
  const synthesis::ListPolicy policies[] = {{false, 0}, {false, 1}, {true, 0}, {true, 1}};
  bool stop = false;
  for (std::size_t k = 0; k < placements.size() && !stop; ++k) {
    const StagePlacement& pl = placements[k];
    if (!pl.infeasible.empty()) continue;
    const auto problem = problem_of(pl, costs, o);
    for (const auto& policy : policies) {
      if ((stop = expired())) break;
      std::string name = std::string("greedy(") + (policy.forward_first ? "F>I>W" : "I>F>W") +
                         ", " + (policy.step_down != 0 ? "stepped cap" : "flat cap") + ", " +
                         pl.name + ")";
      ComputePlan plan;
      plan.shape = pl.shape;
      try {
        plan.per_rank = synthesis::list_schedule(problem, policy);
      } catch (const InvalidPlanError& e) {
        best.candidates.push_back(AutoCandidate{name, false, e.what(), 0, 0});
        continue;
      }
      consider(std::move(name), std::move(plan), k);
    }
  }
  // 2. The Zero Bubble paper's heuristic (one stage per rank), under its eight policies.
  if (v == 1) {
    const std::size_t k = placements.size() - 1;  // looping = stage s on rank s
    const StagePlacement& pl = placements[k];
    const auto problem = problem_of(pl, costs, o);
    for (int bits = 0; bits < 8 && !stop && pl.infeasible.empty(); ++bits) {
      if ((stop = expired())) break;
      const synthesis::ZbPolicy policy{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) == 0};
      std::string name = std::string("zero-bubble heuristic(") +
                         (policy.bubble_before_first_b ? "late" : "early") + " warm-up, " +
                         (policy.prioritize_b ? "I first" : "F first") + ", " +
                         (policy.fill_small_waits ? "fill" : "keep") + " small waits)";
      auto orders = synthesis::zb_heuristic(problem, policy);
      if (!orders) {
        best.candidates.push_back(AutoCandidate{
            name, false, "a pass waits for one not yet placed or does not fit the cap", 0, 0});
        continue;
      }
      ComputePlan plan;
      plan.shape = pl.shape;
      plan.per_rank = std::move(*orders);
      consider(std::move(name), std::move(plan), k);
    }
  }
  // 3. The named schedules of this shape that fit.
  for (const auto& [kind, v_shaped] : named_seeds(v)) {
    if (stop || (stop = expired())) break;
    std::size_t k = placements.size() - 1;  // looping
    if (v_shaped) k = 0;
    if (!placements[k].infeasible.empty()) continue;
    ComputePlan plan;
    try {
      plan = sched::generate({kind, p, m, v, {}});
    } catch (const ConfigError& e) {
      best.candidates.push_back(
          AutoCandidate{std::string(sched::to_string(kind)), false, e.what(), 0, 0});
      continue;
    }
    consider(std::string(sched::to_string(kind)), std::move(plan), k);
  }
  // 4. Note [Local search] from the best plan so far, on the greedy's clock; the simulator
  // decides whether it is kept.
  if (have && !stop && !(stop = expired())) {
    const bool split_only =
        std::all_of(best.plan.per_rank.begin(), best.plan.per_rank.end(), [](const auto& ops) {
          return std::all_of(ops.begin(), ops.end(), [](const sched::Action& a) {
            return a.kind == ActionKind::kForward || a.kind == ActionKind::kBackwardInput ||
                   a.kind == ActionKind::kBackwardWeight;
          });
        });
    if (split_only) {
      const auto problem = problem_of(placements[best_placement], costs, o);
      std::int64_t actions = 0;
      for (const auto& ops : best.plan.per_rank) actions += static_cast<std::int64_t>(ops.size());
      // About 2e7 replayed passes in all: every swap for small plans, a few hundred for the
      // largest.
      const std::int64_t evaluations =
          std::clamp<std::int64_t>(20'000'000 / std::max<std::int64_t>(actions, 1), 50, 20'000);
      const auto deadline = o.time_limit_s
                                ? started + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(*o.time_limit_s))
                                : Clock::time_point::max();
      ComputePlan improved = best.plan;
      improved.per_rank = synthesis::improve(problem, best.plan.per_rank,
                                             o.objective == AutoObjective::kSpan
                                                 ? synthesis::SearchObjective::kSpan
                                                 : synthesis::SearchObjective::kStep,
                                             evaluations, deadline);
      if (improved.per_rank != best.plan.per_rank) {
        consider("local search from " + best.chosen, std::move(improved), best_placement);
      }
      stop = stop || expired();
    }
  }
  PW_CHECK(have, ConfigError,
           "Auto: no candidate fits the cap (" << best.candidates.size() << " tried; the first: "
                                               << best.candidates.front().why_not << ")");
  if (stop) {
    best.timed_out = true;
    std::ostringstream note;
    note << "the time limit of " << *o.time_limit_s << " s expired after " << tried
         << " candidate(s); this is the best plan found so far";
    best.note = note.str();
  }
  // The winner's full simulation: bubble rates; its placement's bound and caps.
  const StagePlacement& pl = placements[best_placement];
  sched::LowerOptions lo;
  lo.reduce_grad = true;
  lo.optimizer_step = true;
  SimOptions so = o.sim;
  so.steps = 1;
  so.record_actions = true;
  const SimResult r = simulate(sched::lower(best.plan, lo), costs, o.cluster, so);
  best.span_bubble = span_bubble_rate(r);
  best.idle_share = r.bubble_fraction();
  best.lower_bound_ns = lower_bound(problem_of(pl, costs, o));
  for (const std::int64_t held : peak_activation(best.plan, pl))
    best.peak_activation.push_back(static_cast<double>(held) / pl.unit_scale);
  for (const std::int64_t cap : pl.cap)
    best.activation_cap.push_back(static_cast<double>(cap) / pl.unit_scale);
  return best;
}

}  // namespace pipewright::sim
