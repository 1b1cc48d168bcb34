// Replays driven by the measured trace (compare.hpp): costs taken from the trace
// (costs_from_trace), Note [Trace-driven replay] (replay_from_trace, compare_trace_replay) and
// Note [One prediction] (compare_sampled). The comparison itself is in compare.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "compare/trace_steps.hpp"
#include "costs/median.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sim/compare.hpp"

namespace pipewright::sim {

using detail::is_compute_category;
using detail::kind_slot;
using detail::steps_of;
using detail::StepView;
using detail::trace_ranks;
using sched::ActionKind;
using sched::TraceSlice;
using sched::TraceStream;

sched::CostTable costs_from_trace(const sched::Trace& measured, std::int32_t stages,
                                  const CompareOptions& options) {
  std::vector<StepView> steps = steps_of(measured);
  if (static_cast<std::int64_t>(steps.size()) > options.skip_steps) {
    steps.erase(steps.begin(), steps.begin() + options.skip_steps);
  }
  std::set<std::int64_t> kept;
  for (const auto& st : steps) kept.insert(st.step);
  // samples[stage][kind F, B, I, W]
  std::vector<std::array<std::vector<double>, 4>> samples(static_cast<std::size_t>(stages));
  for (const auto& s : measured.slices) {
    if (kept.count(s.step) == 0 || s.stream != TraceStream::kCompute) continue;
    const int k = kind_slot(s.category);
    if (k < 0 || k > 3) continue;
    PW_CHECK(s.stage >= 0 && s.stage < stages, ConfigError,
             "plan/trace mismatch: the measured trace has stage "
                 << s.stage << " (" << s.name << ") but the plan has " << stages << " stages");
    samples[static_cast<std::size_t>(s.stage)][static_cast<std::size_t>(k)].push_back(
        s.duration_us / 1e3);
  }
  sched::CostTable t;
  t.source = "trace";
  for (std::int32_t st = 0; st < stages; ++st) {
    const auto& sm = samples[static_cast<std::size_t>(st)];
    PW_CHECK(!sm[0].empty(), ConfigError,
             "plan/trace mismatch: stage " << st << " never ran a forward in the measured trace");
    sched::StageCost c;
    c.stage = st;
    c.forward_ms = median(sm[0]);
    if (!sm[1].empty()) {
      c.backward_ms = median(sm[1]);
    } else {
      c.input_grad_ms = median(sm[2]);
      c.weight_grad_ms = median(sm[3]);
      c.backward_ms = *c.input_grad_ms + *c.weight_grad_ms;
    }
    if (!sm[1].empty() && (!sm[2].empty() || !sm[3].empty())) {
      c.input_grad_ms = median(sm[2]);
      c.weight_grad_ms = median(sm[3]);
    }
    t.stages.push_back(c);
  }
  return t;
}

TraceReplay replay_from_trace(const sched::Trace& measured, std::int32_t stages,
                              std::int32_t microbatches, std::int32_t cores,
                              const std::vector<std::int32_t>& node_of_rank,
                              const CompareOptions& options, std::int32_t replicas) {
  PW_CHECK(replicas >= 1, ConfigError, "replicas must be >= 1, got " << replicas);
  std::vector<StepView> steps = steps_of(measured);
  PW_CHECK(!steps.empty(), ConfigError, "the measured trace has no slices");
  if (static_cast<std::int64_t>(steps.size()) > options.skip_steps) {
    steps.erase(steps.begin(), steps.begin() + options.skip_steps);
  }
  auto node_of = [&](std::int32_t rank) {
    return rank >= 0 && static_cast<std::size_t>(rank) < node_of_rank.size()
               ? node_of_rank[static_cast<std::size_t>(rank)]
               : 0;
  };
  const auto world = static_cast<std::int32_t>(node_of_rank.size());
  PW_CHECK(node_of_rank.empty() || world == trace_ranks(measured), ConfigError,
           "plan/trace mismatch: the plan has "
               << detail::plan_ranks_text(world / replicas, replicas)
               << " but the measured trace has " << trace_ranks(measured));
  // World rank -> replica (the executor's replica-major order).
  const std::int32_t pp = std::max(1, (world > 0 ? world : trace_ranks(measured)) / replicas);
  auto replica_of = [&](std::int32_t rank) { return std::min(rank / pp, replicas - 1); };
  std::map<std::int32_t, std::int32_t> per_node;
  for (std::int32_t r = 0; r < trace_ranks(measured); ++r) ++per_node[node_of(r)];
  bool shared = false;
  for (const auto& [node, n] : per_node) shared = shared || (cores > 0 && n > cores);

  TraceReplay out;
  out.replicas = replicas;
  std::map<std::int64_t, std::size_t> index;  // step -> position in out
  for (const auto& st : steps) {
    index[st.step] = out.steps.size();
    out.steps.push_back(st.step);
    out.measured_step_ms.push_back(st.period_ms());
    for (std::int32_t j = 0; j < replicas; ++j) {
      out.durations_ns.emplace_back(
          static_cast<std::size_t>(stages) * kReplaySlots * static_cast<std::size_t>(microbatches),
          -1);
    }
  }
  // Per (step, node): the compute slices, for the number of computing ranks over time.
  std::map<std::pair<std::int64_t, std::int32_t>, std::vector<std::pair<double, int>>> edges;
  std::vector<const TraceSlice*> used;
  for (const auto& s : measured.slices) {
    if (s.stream != TraceStream::kCompute || index.count(s.step) == 0) continue;
    if (kind_slot(s.category) < 0) continue;
    PW_CHECK(s.stage >= 0 && s.stage < stages, ConfigError,
             "plan/trace mismatch: the measured trace has stage "
                 << s.stage << " (" << s.name << ", step " << s.step << ") but the plan has "
                 << stages << " stages");
    PW_CHECK(s.category == "OPTIM" || (s.microbatch >= 0 && s.microbatch < microbatches),
             ConfigError,
             "plan/trace mismatch: the measured trace has microbatch "
                 << s.microbatch << " (" << s.name << ", step " << s.step << ") but the plan has "
                 << microbatches << " microbatches");
    used.push_back(&s);
    if (shared) {
      auto& e = edges[{s.step, node_of(s.rank)}];
      e.emplace_back(s.start_us, +1);
      e.emplace_back(s.start_us + s.duration_us, -1);
    }
  }
  for (auto& [key, e] : edges) std::sort(e.begin(), e.end());
  for (const TraceSlice* s : used) {
    double us = s->duration_us;
    if (shared) {
      // Work at full speed: the integral of min(1, C / n(t)) over the slice, n(t) the node's
      // ranks inside a compute slice (this one included).
      const auto& e = edges[{s->step, node_of(s->rank)}];
      const double a = s->start_us, b = s->start_us + s->duration_us;
      double work = 0, t = a;
      int n = 0;
      for (const auto& [x, d] : e) {
        if (x > a) {
          const double hi = std::min(x, b);
          if (hi > t) work += (hi - t) * std::min(1.0, static_cast<double>(cores) / std::max(n, 1));
          t = std::max(t, hi);
        }
        if (x >= b) break;
        n += d;
      }
      if (b > t) work += (b - t) * std::min(1.0, static_cast<double>(cores) / std::max(n, 1));
      us = work;
    }
    const int slot = kind_slot(s->category);
    auto& table = out.durations_ns[index[s->step] * static_cast<std::size_t>(replicas) +
                                   static_cast<std::size_t>(replica_of(s->rank))];
    table[replay_index(s->stage, slot, slot == 4 ? 0 : s->microbatch, microbatches)] =
        std::llround(us * 1e3);
  }
  return out;
}

TraceReplayComparison compare_trace_replay(const sched::LoweredPlan& plan,
                                           const sched::CostTable& costs, const Cluster& cluster,
                                           const SimOptions& options, const sched::Trace& measured,
                                           const CompareOptions& compare_options) {
  const std::int32_t cores =
      cluster.cores_per_node > 0 ? cluster.cores_per_node : costs.cores_per_node;
  // Every world rank's node: rank = replica x pp + pipeline rank (the executor's order), placed
  // on the cluster as its placement says.
  const std::int32_t pp = plan.shape.ranks;
  const std::int32_t replicas = std::max(options.dp.replicas, 1);
  std::vector<std::int32_t> node_of_rank;
  for (std::int32_t j = 0; j < replicas; ++j) {
    for (std::int32_t r = 0; r < pp; ++r)
      node_of_rank.push_back(cluster.node_of(cluster.global_rank(r, j, pp, replicas)));
  }
  const TraceReplay replay = replay_from_trace(measured, plan.shape.stages, plan.shape.microbatches,
                                               cores, node_of_rank, compare_options, replicas);
  SimOptions step_options = options;
  step_options.steps = 1;
  step_options.record_actions = false;
  // Per kept step: the slowest replica's replay (the replicas meet in their collectives), and
  // which replica that was.
  std::vector<double> per_step;
  std::vector<std::size_t> slowest;
  for (std::size_t k = 0; k < replay.steps.size(); ++k) {
    double worst = -1;
    std::size_t at = 0;
    // Note [Periodic syncs in compare]: the measured step's number decides its syncs.
    step_options.first_step = replay.steps[k];
    for (std::int32_t j = 0; j < replicas; ++j) {
      const std::size_t i = k * static_cast<std::size_t>(replicas) + static_cast<std::size_t>(j);
      step_options.replay_durations_ns = replay.durations_ns[i];
      const SimResult r = simulate(plan, costs, cluster, step_options);
      const double ms =
          static_cast<double>(r.step_end_ns.empty() ? r.makespan_ns : r.step_end_ns[0]) / 1e6;
      if (ms > worst) {
        worst = ms;
        at = i;
      }
    }
    per_step.push_back(worst);
    slowest.push_back(at);
  }
  // Note [One prediction]: the headline, the lines per rank and action and the SVG all show one
  // simulated step, the median predicted one (the lower middle one for an even count).
  std::vector<std::size_t> order(per_step.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return per_step[a] < per_step[b]; });
  const std::size_t chosen = order.at((order.size() - 1) / 2);
  step_options.record_actions = true;
  step_options.first_step = replay.steps.at(chosen);
  step_options.replay_durations_ns = replay.durations_ns.at(slowest.at(chosen));
  TraceReplayComparison out;
  out.predicted = simulate(plan, costs, cluster, step_options);
  out.report = compare(out.predicted, measured, &costs, compare_options);
  auto& report = out.report;
  report.prediction = "trace";  // before add_data_parallel (Note [Periodic syncs in compare])
  add_data_parallel(out.report, plan, costs, cluster, options);
  report.step_numbers = replay.steps;
  report.per_step_measured_ms = replay.measured_step_ms;
  report.per_step_predicted_ms = per_step;
  // Note [Periodic syncs in compare]: with a period P > 1, means over the last whole periods of
  // the steps, each predicted as itself.
  const auto p = static_cast<std::size_t>(std::max(report.dp_period_steps, 1));
  const std::size_t n = per_step.size();
  if (p > 1 && n >= p && replay.measured_step_ms.size() == n) {
    report.predicted_step_ms = detail::mean_of_whole_periods(per_step, p);
    report.measured_step_ms = detail::mean_of_whole_periods(replay.measured_step_ms, p);
    report.prediction = "trace, period mean";
  }
  return out;
}

SampledComparison compare_sampled(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                  const Cluster& cluster, const SimOptions& options,
                                  std::int32_t sampled_steps, const sched::Trace& measured,
                                  const CompareOptions& compare_options) {
  PW_CHECK(sampled_steps >= 0, ConfigError, "--sampled-steps must be >= 0, got " << sampled_steps);
  SimOptions so = options;
  so.record_actions = true;
  SampledComparison out;
  if (sampled_steps > 0) {
    out.predicted = median_sampled_step(plan, costs, cluster, so, sampled_steps);
  } else {
    out.predicted = simulate(plan, costs, cluster, so);
  }
  out.report = compare(out.predicted, measured, &costs, compare_options);
  if (sampled_steps > 0) {
    out.report.prediction = "sampled";
    // Note [Replica skew]: a step lasts as long as its slowest replica's.
    out.report.predicted_step_ms += replica_skew_ms(plan, costs, cluster, so, sampled_steps);
  }
  add_data_parallel(out.report, plan, costs, cluster, so);
  return out;
}

}  // namespace pipewright::sim
