// Note [Data-parallel comparison] (compare.hpp): each world rank's data-parallel communication
// per step, predicted over one period of the algorithm and measured by the executor's profile.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

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

}  // namespace

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
