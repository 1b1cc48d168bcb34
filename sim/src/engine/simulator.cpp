// The public API of the simulator (simulator.hpp) over the private engine (engine.hpp).
#include <algorithm>
#include <vector>

#include "engine/engine.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

double SimResult::model_tflops_per_gpu() const noexcept {
  if (model_flops_per_step <= 0 || makespan_ns <= 0 || ranks <= 0) return 0.0;
  const double step_s = static_cast<double>(makespan_ns) * 1e-9 / std::max(steps, 1);
  const double gpus = static_cast<double>(ranks) * std::max(dp, 1) * std::max(gpus_per_rank, 1);
  return model_flops_per_step / step_s / gpus / 1e12;
}

double SimResult::hardware_tflops_per_gpu() const noexcept {
  if (hardware_flops_per_step <= 0 || model_flops_per_step <= 0) return 0.0;
  return model_tflops_per_gpu() * hardware_flops_per_step / model_flops_per_step;
}

double SimResult::mfu() const noexcept {
  return device_peak_tflops > 0 ? model_tflops_per_gpu() / device_peak_tflops : 0.0;
}

double SimResult::bubble_fraction() const noexcept {
  if (makespan_ns <= 0 || per_rank.empty()) return 0.0;
  long double idle = 0;
  for (const auto& r : per_rank) idle += static_cast<long double>(r.idle_ns);
  return static_cast<double>(
      idle / (static_cast<long double>(per_rank.size()) * static_cast<long double>(makespan_ns)));
}

double SimResult::throughput_samples_per_s() const noexcept {
  if (micro_batch_size <= 0 || makespan_ns <= 0) return 0.0;
  const double samples = static_cast<double>(micro_batch_size) * microbatches * dp * steps;
  return samples / (static_cast<double>(makespan_ns) * 1e-9);
}

sched::CostTable replica_costs(const sched::CostTable& costs, const sched::PlanShape& shape) {
  if (!shape.has_replicas() ||
      costs.stages.size() != static_cast<std::size_t>(shape.model_stages()))
    return costs;
  sched::CostTable out = costs;
  out.stages.clear();
  for (std::int32_t s = 0; s < shape.stages; ++s) {
    sched::StageCost c = costs.stages[static_cast<std::size_t>(shape.model_stage(s))];
    c.stage = s;
    out.stages.push_back(std::move(c));
  }
  out.peak_memory.clear();  // measured per rank of another placement
  return out;
}

SimResult simulate(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                   const Cluster& cluster, const SimOptions& options) {
  if (plan.shape.has_replicas() &&
      costs.stages.size() == static_cast<std::size_t>(plan.shape.model_stages())) {
    const sched::CostTable expanded = replica_costs(costs, plan.shape);
    return Engine(plan, expanded, cluster, options).run();
  }
  return Engine(plan, costs, cluster, options).run();
}

namespace {

std::uint64_t sampled_seed(std::uint64_t seed, std::int32_t k) noexcept {
  return seed + static_cast<std::uint64_t>(k) * 0x632BE59BD9B4E019ULL;
}

// Step times (ms) of `steps` independent single steps with sampled durations, by draw.
std::vector<double> sampled_step_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                    const Cluster& cluster, SimOptions options, std::int32_t steps,
                                    std::uint64_t seed) {
  PW_CHECK(steps >= 1, ConfigError, "median_step_ms: steps must be >= 1, got " << steps);
  // Independent single steps: the executor ends every step with a loss all-reduce, so its steps
  // do not overlap across ranks as back-to-back simulated steps would.
  options.steps = 1;
  options.record_actions = false;
  options.record_memory_timeline = false;
  std::vector<double> ms;
  for (std::int32_t k = 0; k < steps; ++k) {
    options.sample_durations_seed = sampled_seed(seed, k);
    const SimResult r = simulate(plan, costs, cluster, options);
    ms.push_back(static_cast<double>(r.step_end_ns.empty() ? r.makespan_ns : r.step_end_ns[0]) /
                 1e6);
  }
  return ms;
}

}  // namespace

double median_step_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                      const Cluster& cluster, SimOptions options, std::int32_t steps,
                      std::uint64_t seed) {
  std::vector<double> ms = sampled_step_ms(plan, costs, cluster, options, steps, seed);
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

double replica_skew_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                       const Cluster& cluster, SimOptions options, std::int32_t draws,
                       std::uint64_t seed) {
  const std::int32_t d = options.dp.replicas;
  if (d <= 1 || draws < 1) return 0.0;
  // Dedicated cores: sampled simulation draws nothing under processor sharing.
  sched::CostTable dedicated = costs;
  dedicated.cores_per_node = 0;
  Cluster own = cluster;
  own.cores_per_node = 0;
  const std::vector<double> ms =
      sampled_step_ms(plan, dedicated, own, options, draws * d, seed ^ 0x9E3779B97F4A7C15ULL);
  double slowest = 0;
  double all = 0;
  for (std::int32_t k = 0; k < draws; ++k) {
    double m = 0;
    for (std::int32_t j = 0; j < d; ++j) {
      const double v = ms[static_cast<std::size_t>(k * d + j)];
      m = std::max(m, v);
      all += v;
    }
    slowest += m;
  }
  return std::max(0.0, slowest / draws - all / (static_cast<double>(draws) * d));
}

SimResult median_sampled_step(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                              const Cluster& cluster, SimOptions options, std::int32_t steps,
                              std::uint64_t seed) {
  const std::vector<double> ms = sampled_step_ms(plan, costs, cluster, options, steps, seed);
  std::vector<std::int32_t> order(ms.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = static_cast<std::int32_t>(k);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return ms[static_cast<std::size_t>(a)] < ms[static_cast<std::size_t>(b)];
  });
  options.steps = 1;
  options.sample_durations_seed = sampled_seed(seed, order[(order.size() - 1) / 2]);
  return simulate(plan, costs, cluster, options);
}

}  // namespace pipewright::sim
