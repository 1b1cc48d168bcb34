// Note [Data-parallel comparison] (compare.hpp): each world rank's data-parallel communication
// per step, predicted over one period of the algorithm and measured by the executor's profile.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "compare/trace_steps.hpp"
#include "costs/data_parallel.hpp"
#include "pipewright/sim/compare.hpp"

namespace pipewright::sim {

namespace {

// Steps after which the algorithm's communication repeats (capped: a SlowMo lcm of thousands of
// steps is averaged over its first kMaxPeriod steps).
constexpr std::int32_t kMaxPeriod = 512;

std::int32_t period_of(const DataParallelOptions& o) {
  std::int64_t p = 1;
  switch (o.algorithm) {
    case DpAlgorithm::kDdp:
    case DpAlgorithm::kSgp:
      p = 1;
      break;
    case DpAlgorithm::kLocalSgd:
      p = o.localsgd_frequency;
      break;
    case DpAlgorithm::kSlowMo: {
      const std::int64_t a = o.slowmo_base == DpAlgorithm::kSgp ? 1 : o.localsgd_frequency;
      p = std::lcm<std::int64_t>(std::max<std::int64_t>(a, 1), std::max(o.slowmo_frequency, 1));
      break;
    }
    case DpAlgorithm::kDiLoCo:
      p = o.sync_every;
      break;
  }
  return static_cast<std::int32_t>(std::clamp<std::int64_t>(p, 1, kMaxPeriod));
}

std::string algorithm_name(const DataParallelOptions& o) {
  std::string name(sched::to_string(o.algorithm));
  if (o.zero_stage > 0) name += " zero-" + std::to_string(o.zero_stage);
  return name;
}

// Note [Periodic syncs in compare]: LocalSGD, SlowMo and DiLoCo sync after some steps only, so
// a run's step times alternate (e.g. 38 and 228 ms at --localsgd-frequency 2 on a shaped link),
// and neither their median nor one simulated step says what the job costs per step. With a
// period P > 1 (and at least P measured steps) the headline compares means over whole periods:
// measured, the mean of the last floor(n / P) P steps used; predicted, the headline's simulated
// step (median or sampled, the run's step `first_step`) plus the mean over the period's steps of
// what each adds to it, each step simulated alone with median costs as training step
// first_step + k (SimOptions::first_step), the way the executor's loss all-reduce keeps steps
// apart. DiLoCo with a --fragment-sync-delay overlaps its all-reduce with later steps, which
// steps simulated alone cannot show: there the period is simulated back to back instead.
// Trace-driven replay simulates each measured step as itself already (its step number).
void period_mean_step(CompareReport& report, const sched::LoweredPlan& plan,
                      const sched::CostTable& costs, const Cluster& cluster,
                      const SimOptions& options) {
  const std::int32_t p = report.dp_period_steps;
  const std::size_t n = report.per_step_measured_ms.size();
  if (p <= 1 || report.prediction == "trace" || n < static_cast<std::size_t>(p)) return;
  report.predicted_step_ms += periodic_sync_ms(plan, costs, cluster, options);
  report.measured_step_ms =
      detail::mean_of_whole_periods(report.per_step_measured_ms, static_cast<std::size_t>(p));
  report.prediction += ", period mean";
}

}  // namespace

std::int32_t dp_period_steps(const DataParallelOptions& options) { return period_of(options); }

double periodic_sync_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                        const Cluster& cluster, const SimOptions& options) {
  const std::int32_t p = options.dp.replicas > 1 ? period_of(options.dp) : 1;
  if (p <= 1) return 0.0;
  SimOptions one = options;
  one.record_actions = false;
  one.record_memory_timeline = false;
  one.sample_durations_seed.reset();
  one.replay_durations_ns.clear();
  one.steps = 1;
  auto step_ms = [](const SimResult& r) {
    return static_cast<double>(r.step_end_ns.empty() ? r.makespan_ns : r.step_end_ns.back()) / 1e6;
  };
  const double base = step_ms(simulate(plan, costs, cluster, one));
  if (options.dp.algorithm == DpAlgorithm::kDiLoCo && options.dp.sync_delay > 0) {
    one.steps = p;
    return static_cast<double>(simulate(plan, costs, cluster, one).makespan_ns) / 1e6 / p - base;
  }
  double extra = 0;
  for (std::int32_t k = 0; k < p; ++k) {
    SimOptions at = one;
    at.first_step = options.first_step + k;
    extra += step_ms(simulate(plan, costs, cluster, at)) - base;
  }
  return extra / p;
}

void add_data_parallel(CompareReport& report, const sched::LoweredPlan& plan,
                       const sched::CostTable& costs, const Cluster& cluster,
                       const SimOptions& options) {
  if (options.dp.replicas <= 1) return;
  const std::int32_t pp = plan.shape.ranks;
  SimOptions so = options;
  so.steps = period_of(options.dp);
  so.record_actions = false;
  so.record_memory_timeline = false;
  so.sample_durations_seed.reset();  // median costs: the period's mean is what is compared
  so.replay_durations_ns.clear();
  const SimResult period = simulate(plan, costs, cluster, so);
  report.dp_algorithm = algorithm_name(options.dp);
  report.dp_period_steps = so.steps;
  period_mean_step(report, plan, costs, cluster, options);
  const double steps = static_cast<double>(so.steps);
  for (std::int32_t w = 0; w < pp * options.dp.replicas; ++w) {
    const std::int32_t r = w % pp;
    DpComparison d;
    d.rank = w;
    d.replica = w / pp;
    d.stages = plan.shape.stages_of_rank(r);
    if (!period.dp_wire_bytes_per_stage.empty()) {  // DDP and ZeRO: per plan stage
      for (std::int32_t s : d.stages)
        d.predicted_wire_bytes += period.dp_wire_bytes_per_stage.at(static_cast<std::size_t>(s));
    } else {  // the parameter-averaging algorithms: over the rank's parameters
      sched::CostTable mine;
      for (std::int32_t s : d.stages) {
        if (s >= 0 && static_cast<std::size_t>(s) < costs.stages.size())
          mine.stages.push_back(costs.stages[static_cast<std::size_t>(s)]);
      }
      d.predicted_wire_bytes = dp_wire_bytes_per_step(mine, options.dp);
    }
    const auto& pr = period.per_rank.at(static_cast<std::size_t>(r));
    d.predicted_comm_ms = static_cast<double>(pr.dp_comm_ns) / 1e6 / steps;
    d.predicted_exposed_ms = static_cast<double>(pr.dp_exposed_ns) / 1e6 / steps;
    for (const auto& m : costs.data_parallel) {
      if (m.rank != w) continue;
      d.measured_wire_bytes = m.wire_bytes_per_step;
      d.measured_exposed_ms = m.exposed_ms_per_step;
      d.measured_collectives = m.collectives_per_step;
    }
    report.data_parallel.push_back(std::move(d));
  }
}

}  // namespace pipewright::sim
