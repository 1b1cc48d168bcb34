#include "costs/data_parallel.hpp"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/buckets.hpp"

namespace pipewright::sim {
SimOptions sim_options(const sched::JobSpec& job) {
  const auto& d = job.data_parallel;
  SimOptions o;
  o.dp.replicas = job.dp;
  o.dp.algorithm = d.algorithm;
  o.dp.bucket_cap_mb = d.bucket_cap_mb;
  o.dp.overlap = d.ddp_overlap;
  o.dp.localsgd_frequency = static_cast<std::int32_t>(d.localsgd_frequency_or_default());
  o.dp.slowmo_frequency = static_cast<std::int32_t>(d.slowmo_frequency_or_default());
  o.dp.sync_every = static_cast<std::int32_t>(d.sync_every_or_default());
  o.dp.fragments = d.fragments_or_default();
  o.dp.sync_delay = static_cast<std::int32_t>(d.sync_delay_or_default());
  o.dp.outer_bf16 = d.outer_dtype_or_default() == sched::OuterDtype::kBf16;
  o.dp.slowmo_base = d.slowmo_base_or_default();
  o.dp.slowmo_num_shards = d.slowmo_num_shards_or_default(job.dp);
  o.dp.reduce_dtype = job.reduce_dtype_or_default();
  o.dp.zero_stage = job.effective_zero_stage();
  o.precision = job.precision;
  o.optimizer = job.optimizer;
  o.momentum = job.momentum;
  o.steps = static_cast<std::int32_t>(job.steps);
  o.micro_batch_size = job.micro_batch_size();
  o.recompute = job.recompute;
  return o;
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

std::int64_t gradient_wire_bytes(std::int64_t fp32_bytes, const DataParallelOptions& o) noexcept {
  return sched::bytes_at_precision(fp32_bytes, sched::Precision::kFp32, o.reduce_dtype);
}

bool outer_bf16(const DataParallelOptions& o) noexcept {
  return o.outer_bf16 || o.reduce_dtype != sched::Precision::kFp32;
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

const Link& zero_link(const Cluster& cluster, const DpGroup& group, ShardedCollective what,
                      std::int32_t zero_stage) noexcept {
  const CollectiveBuffer buffer =
      zero_stage >= 3 ? CollectiveBuffer::kPrivate : CollectiveBuffer::kRegistered;
  return cluster.sharded_link(what, buffer, group.spans_nodes);
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

double dp_wire_bytes_per_step(const sched::CostTable& costs, const DataParallelOptions& o) {
  const std::int32_t n = o.replicas;
  if (n <= 1) return 0;
  double params = 0;  // one replica's parameter bytes, all stages
  for (const auto& st : costs.stages) params += static_cast<double>(st.param_bytes);
  // Bytes a member sends: ring all-reduce 2 (n - 1) / n, reduce or broadcast (n - 1) / n (as
  // exec's DataParallelStats::wire_bytes counts them).
  const double all_reduce = 2.0 * (n - 1) / n * params;
  const double gradients = all_reduce * sched::element_bytes(o.reduce_dtype) / 4;
  switch (o.algorithm) {
    case DpAlgorithm::kDdp:
      return gradients;
    case DpAlgorithm::kLocalSgd:
      return all_reduce / o.localsgd_frequency;
    case DpAlgorithm::kSlowMo: {
      // Per lcm period: averages every localsgd_frequency steps except where the (memory-
      // efficient) slow step replaces it: a reduce + broadcast per shard, or with one shard per
      // replica a reduce-scatter + all-gather, (n - 1) / n of the parameters each either way.
      const std::int64_t a = o.localsgd_frequency, b = o.slowmo_frequency;
      const std::int64_t period = a / std::gcd(a, b) * b;
      const bool sgp = o.slowmo_base == DpAlgorithm::kSgp;
      double total = 0;
      for (std::int64_t s = 1; s <= period; ++s) {
        if (sgp) total += params;  // the gossip message, every step
        if (s % b == 0) {
          total += all_reduce;  // reduce + broadcast (scatter + gather): 2 (n - 1) / n
        } else if (!sgp && s % a == 0) {
          total += all_reduce;
        }
      }
      return total / static_cast<double>(period);
    }
    case DpAlgorithm::kDiLoCo:
      // Every fragment once per sync_every steps; bf16: scatter + gather of 2-byte elements,
      // (n - 1) / n of the fp32 bytes.
      return (outer_bf16(o) ? all_reduce / 2 : all_reduce) / o.sync_every;
    case DpAlgorithm::kSgp:
      return params;  // its parameters (and a 4-byte weight) to one peer per step
  }
  return 0;
}

std::vector<double> dp_wire_bytes_per_stage(const sched::LoweredPlan& plan,
                                            const sched::CostTable& costs,
                                            const DataParallelOptions& o) {
  const std::int32_t n = o.replicas;
  const auto& sh = plan.shape;
  if (n <= 1 || o.algorithm != DpAlgorithm::kDdp) return {};
  const double ring = static_cast<double>(n - 1) / n;
  std::vector<double> out(static_cast<std::size_t>(sh.stages), 0.0);
  std::vector<int> gathers(out.size(), 0), backwards(out.size(), 0);
  for (const auto& ops : plan.per_rank) {
    for (const sched::Action& a : ops) {
      if (a.stage < 0 || a.stage >= sh.stages) continue;
      if (a.kind == sched::ActionKind::kUnshard) ++gathers[static_cast<std::size_t>(a.stage)];
      if (sched::completes_weight_grad(a.kind)) ++backwards[static_cast<std::size_t>(a.stage)];
    }
  }
  const bool per_model_stage = costs.stages.size() != out.size();
  for (std::int32_t s = 0; s < sh.stages; ++s) {
    const auto& c = costs.stages[static_cast<std::size_t>(per_model_stage ? sh.model_stage(s) : s)];
    const auto params = static_cast<double>(c.param_bytes);
    const auto grads = static_cast<double>(gradient_wire_bytes(c.param_bytes, o));
    const auto k = static_cast<std::size_t>(s);
    switch (o.zero_stage) {
      case 0:  // all-reduce: reduce-scatter + all-gather of the gradients
        out[k] = 2 * ring * grads;
        break;
      case 1:  // one reduce-scatter of the gradients, one all-gather of the parameters
        out[k] = ring * grads + ring * params;
        break;
      case 2:  // a reduce-scatter per backward, one all-gather after OPTIM
        out[k] = backwards[k] * ring * grads + ring * params;
        break;
      default:  // a reduce-scatter per backward, an all-gather per UNSHARD
        out[k] = backwards[k] * ring * grads + gathers[k] * ring * params;
        break;
    }
  }
  return out;
}

}  // namespace pipewright::sim
