#include "data_parallel.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/buckets.hpp"

namespace pipewright::sim {
namespace {

struct OptimizerName {
  Optimizer opt;
  std::string_view name;
  double state_factor;
};
constexpr std::array<OptimizerName, 4> kOptimizers = {{
    {Optimizer::kSgd, "sgd", 0.0},
    {Optimizer::kSgdMomentum, "sgd-momentum", 1.0},
    {Optimizer::kAdam, "adam", 2.0},
    {Optimizer::kAdamW, "adamw", 2.0},
}};

struct DpName {
  DpAlgorithm algo;
  std::string_view name;
};
constexpr std::array<DpName, 3> kDpAlgorithms = {{
    {DpAlgorithm::kDdp, "ddp"},
    {DpAlgorithm::kLocalSgd, "localsgd"},
    {DpAlgorithm::kSlowMo, "slowmo"},
}};

}  // namespace

Optimizer parse_optimizer(std::string_view name) {
  for (const auto& o : kOptimizers) {
    if (o.name == name) return o.opt;
  }
  throw ConfigError("--optimizer: unknown optimizer '" + std::string(name) +
                    "'; valid: sgd, sgd-momentum, adam, adamw");
}
std::string_view to_string(Optimizer opt) noexcept {
  for (const auto& o : kOptimizers) {
    if (o.opt == opt) return o.name;
  }
  return "?";
}
double optimizer_state_factor(Optimizer opt) noexcept {
  for (const auto& o : kOptimizers) {
    if (o.opt == opt) return o.state_factor;
  }
  return 0.0;
}

DpAlgorithm parse_dp_algorithm(std::string_view name) {
  for (const auto& d : kDpAlgorithms) {
    if (d.name == name) return d.algo;
  }
  throw ConfigError("--dp-algorithm: unknown algorithm '" + std::string(name) +
                    "'; valid: ddp, localsgd, slowmo");
}
std::string_view to_string(DpAlgorithm algo) noexcept {
  for (const auto& d : kDpAlgorithms) {
    if (d.algo == algo) return d.name;
  }
  return "?";
}

std::int64_t p2p_message_ns(const sched::PlanShape& shape, const sched::CostTable& costs,
                            const Cluster& cluster, const SimOptions& options,
                            const sched::StageEdge& edge, std::int64_t bytes) {
  if (options.p2p_override_ms) return ms_to_ns(*options.p2p_override_ms);
  if (costs.p2p) {
    if (costs.p2p->per_message_ms) return ms_to_ns(*costs.p2p->per_message_ms);
    return p2p_ns(Link{costs.p2p->latency_ms, costs.p2p->bandwidth_gb_per_s}, bytes);
  }
  const auto a = shape.stage_to_rank[static_cast<std::size_t>(edge.from)];
  const auto b = shape.stage_to_rank[static_cast<std::size_t>(edge.to)];
  const auto dp = std::max(options.dp.replicas, 1);
  std::int64_t worst = 0;
  for (std::int32_t j = 0; j < dp; ++j) {
    const auto ga = cluster.global_rank(a, j, shape.ranks, dp);
    const auto gb = cluster.global_rank(b, j, shape.ranks, dp);
    worst = std::max(worst, p2p_ns(cluster.link(ga, gb), bytes));
  }
  return worst;
}

DpGroup dp_group(const Cluster& cluster, std::int32_t r, std::int32_t pp, std::int32_t dp) {
  DpGroup g;
  const auto node0 = cluster.node_of(cluster.global_rank(r, 0, pp, dp));
  for (std::int32_t j = 1; j < dp; ++j) {
    if (cluster.node_of(cluster.global_rank(r, j, pp, dp)) != node0) g.spans_nodes = true;
  }
  g.link = cluster.collective_link(g.spans_nodes);
  return g;
}

DdpBucketPlan ddp_buckets(const sched::StageCost& stage, const DataParallelOptions& options) {
  std::vector<std::int64_t> sizes = stage.param_sizes_bytes;
  if (sizes.empty() && stage.param_bytes > 0) sizes.push_back(stage.param_bytes);
  const auto assignment = sched::assign_buckets(
      sizes, sched::bucket_cap_bytes_from_mb(options.bucket_cap_mb), options.first_bucket_bytes);
  DdpBucketPlan plan;
  std::int64_t cum = 0;
  for (const auto& b : assignment.buckets) {
    plan.bytes.push_back(b.bytes);
    cum += b.bytes;
    plan.cumulative_bytes.push_back(cum);
  }
  return plan;
}

}  // namespace pipewright::sim
