#include "network/network_model.hpp"

#include <algorithm>
#include <cmath>

#include "costs/data_parallel.hpp"

namespace pipewright::sim {
namespace {

class AnalyticalNetwork final : public NetworkModel {
 public:
  AnalyticalNetwork(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                    const Cluster& cluster, const SimOptions& options);

  std::int64_t message_ns(std::int32_t edge) const noexcept override {
    return edge_ns_[static_cast<std::size_t>(edge)];
  }
  double send_cpu_load(std::int32_t edge) const noexcept override {
    return edge_load_[static_cast<std::size_t>(edge)];
  }
  double collective_cpu_load(std::int32_t rank) const noexcept override {
    return rank_load_[static_cast<std::size_t>(rank)];
  }
  std::int64_t batch_overhead_ns() const noexcept override { return batch_overhead_ns_; }
  const std::vector<std::int64_t>& bucket_ns(std::int32_t stage) const noexcept override {
    return bucket_ns_[static_cast<std::size_t>(stage)];
  }
  const std::vector<std::int64_t>& bucket_cumulative_bytes(
      std::int32_t stage) const noexcept override {
    return bucket_cum_[static_cast<std::size_t>(stage)];
  }
  std::int64_t localsgd_ns(std::int32_t rank) const noexcept override {
    return rank_localsgd_ns_[static_cast<std::size_t>(rank)];
  }
  std::int64_t slowmo_ns(std::int32_t rank) const noexcept override {
    return rank_slowmo_ns_[static_cast<std::size_t>(rank)];
  }
  std::int64_t diloco_ns(std::int32_t rank) const noexcept override {
    return rank_diloco_ns_[static_cast<std::size_t>(rank)];
  }
  std::int64_t sgp_ns(std::int32_t rank) const noexcept override {
    return rank_sgp_ns_[static_cast<std::size_t>(rank)];
  }
  double sync_link_share(std::int32_t rank) const noexcept override {
    return rank_share_[static_cast<std::size_t>(rank)];
  }
  const std::vector<LinkUse>& message_links(std::int32_t edge,
                                            bool forward) const noexcept override {
    return edge_links_[2 * static_cast<std::size_t>(edge) + (forward ? 0 : 1)];
  }
  const std::vector<LinkUse>& collective_links(std::int32_t rank) const noexcept override {
    return rank_links_[static_cast<std::size_t>(rank)];
  }

 private:
  std::int64_t batch_overhead_ns_ = 0;
  std::vector<std::int64_t> edge_ns_;                  // one message on the edge
  std::vector<double> edge_load_;                      // Note [Compute beside a send]
  std::vector<std::vector<std::int64_t>> bucket_ns_;   // per stage: all-reduce time per bucket
  std::vector<std::vector<std::int64_t>> bucket_cum_;  // per stage: cumulative bytes per bucket
  std::vector<std::int64_t> rank_localsgd_ns_, rank_slowmo_ns_, rank_diloco_ns_, rank_sgp_ns_;
  std::vector<double> rank_share_;                // sync_link_share per pipeline rank
  std::vector<double> rank_load_;                 // Note [Compute beside a collective]
  std::vector<std::vector<LinkUse>> edge_links_;  // per edge: forward, backward
  std::vector<std::vector<LinkUse>> rank_links_;  // per pipeline rank: its dp all-reduce
};

// Note [Unregistered collectives]: a cluster's collective_links are what `pipewright calibrate`
// measured for an all-reduce of a registered buffer (Communicator::allocate_collective_buffer),
// which replicas on one node sum in shared memory (Gloo: shm_collectives.hpp); DDP's and ZeRO's
// buckets are such buffers, and so are SlowMo's parameters when each replica owns a shard (Note
// [SlowMo in the simulator]). LocalSGD's and SlowMo's averages, SlowMo's per-shard reduces and
// broadcasts, DiLoCo's outer gradients and SGP's gossip are not: within a node they cross Gloo's
// TCP transport, as a pipeline message without shared memory does, so they are priced on the
// point-to-point link (intra_node; calibrate's ping-pong); across nodes both paths are the network,
// and the collective link stays. (On one host the collective fit was 4.1 GB/s and the
// point-to-point 2.5 GB/s.) SGP's gossip is a message, not a collective: the point-to-point link
// at any span (Note [SGP's gossip link]). ZeRO's reduce-scatters and all-gathers cost neither an
// all-reduce nor a message: on a registered buffer (ZeRO-1/2's buckets and parameters) Gloo runs
// them in shared memory in one pass with copies of their own (ShmCollectives::reduce_scatter /
// all_gather), and on private buffers (ZeRO-3's buckets and parameters, from the CPU allocator) as
// a ring over TCP (exec/src/gloo/tcp_ring.hpp), several times slower than the shared-memory
// all-reduce. So calibrate measures all four (registered and private, reduce-scatter and
// all-gather) and fits each to the ring's one pass (sim::fit_ring_one_pass), and a cluster's
// "sharded_collective_links" carries them per node span: ZeRO-1/2's bucket reduce-scatters
// (bucket_ns below) and post-OPTIM all-gathers use the registered links, ZeRO-3's per-backward
// reduce-scatters and UNSHARD all-gathers the unregistered ones (zero_link in
// costs/data_parallel.hpp). A link the file does not give is the collective link, as before, so
// old cluster files predict what they did. Across nodes a one-node calibration has measured
// nothing: calibrate writes only intra_node there, and the collective link (the network path)
// prices collectives that span nodes; `calibrate --network` measures them over every rank of
// every node and writes inter_node.
// Note [SlowMo in the simulator]: SlowMo's memory-efficient slow step as the executor runs it
// (Note [SlowMo sharded slow step] in exec/src/dp/slowmo.hpp). With one shard per replica (the
// default up to dp 32) it is one reduce-scatter and one all-gather of the rank's parameter bytes
// on a registered buffer (the parameters live in one from Communicator::
// allocate_collective_buffer), so the cluster's registered sharded_collective_links price it
// (Note [Unregistered collectives]): shared memory within a node, the TCP ring across nodes, each
// fitted to the ring's one pass (reduce_ns). With fewer shards than replicas it is a reduce and a
// broadcast per shard on private memory: (n - 1) / n of the bytes each way twice, on Gloo's TCP
// path (the point-to-point link within a node). The result is scaled for shared node links as
// the other syncs are (Note [Concurrent syncs on shared links]).
std::int64_t slowmo_step_ns(const Cluster& cluster, const DpGroup& group,
                            const DataParallelOptions& dp, std::int64_t bytes) {
  const std::int32_t n = dp.replicas;
  const std::int32_t shards = dp.slowmo_num_shards > 0 ? dp.slowmo_num_shards : std::min(n, 32);
  if (shards == n) {
    return reduce_ns(cluster.sharded_link(ShardedCollective::kReduceScatter,
                                          CollectiveBuffer::kRegistered, group.spans_nodes),
                     n, bytes) +
           reduce_ns(cluster.sharded_link(ShardedCollective::kAllGather,
                                          CollectiveBuffer::kRegistered, group.spans_nodes),
                     n, bytes);
  }
  const Link& link = group.spans_nodes ? group.link : cluster.intra_node;
  return 2 * reduce_ns(link, n, bytes);
}

// Note [SGP's gossip link]: SGP's gossip is not a collective but one Gloo send and one receive
// between two replicas (exec/src/dp/sgp.cpp, Note [Receive before send]), so it is priced on the
// point-to-point link between their nodes (calibrate's ping-pong: intra_node within a node,
// inter_node across), the slowest over the replicas and the exponential graph's peer distances
// 1, 2, 4, ... <= dp - 1. Across nodes the collective link (the ring all-reduce's fit) priced it
// before: on the shaped 100 Mbit/s link of bench/fidelity.sh that fit gave 10.2-10.9 MB/s against
// 12.0 MB/s point-to-point, and the exchange was predicted 151-164 ms a step against 121-191 ms
// measured (compare's data-parallel lines, 3 runs x 8 cells x 4 ranks: median 142 ms); it is now
// predicted 140-141 ms. The step then comes out 3-8% short there: each rank's exchange spreads
// over 113-186 ms and the step waits for the slowest (docs/simulator.md,
// "SGP's exchange on the shaped link"). The ping-pong moves one direction at a time, while every
// replica sends and receives at once, over TCP with c10d's send and receive, which is what a
// ZeRO-3 all-gather between nodes does too (Note [TCP ring collectives]) and what calibrate
// --network times as that all-gather over one rank per node (Note [Sharded calibration across
// nodes]): across nodes the gossip is therefore priced on the cluster's inter-node
// all_gather_unregistered link when it has one. On the shaped link both directions at once ran
// at 11.35 MB/s against 11.89 one way (bench/fidelity.sh, session 10), and the step waits for
// the exchange in both.
std::int64_t sgp_gossip_ns(const Cluster& cluster, std::int32_t r, std::int32_t pp, std::int32_t dp,
                           std::int64_t bytes) {
  std::int64_t worst = 0;
  for (std::int32_t d = 1; d <= dp - 1; d *= 2) {
    for (std::int32_t j = 0; j < dp; ++j) {
      const auto a = cluster.global_rank(r, j, pp, dp);
      const auto b = cluster.global_rank(r, (j + d) % dp, pp, dp);
      const auto& both_ways = cluster.sharded_links.all_gather_unregistered.inter_node;
      const bool across = cluster.node_of(a) != cluster.node_of(b);
      worst = std::max(worst, p2p_ns(across && both_ways ? *both_ways : cluster.link(a, b), bytes));
    }
  }
  return worst;
}

AnalyticalNetwork::AnalyticalNetwork(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                     const Cluster& cluster, const SimOptions& options) {
  const auto& shape = plan.shape;
  const std::int32_t R = shape.ranks, S = shape.stages, dp = options.dp.replicas;
  batch_overhead_ns_ = ms_to_ns(costs.comm_overhead_ms);
  for (const auto& ed : shape.edges()) {
    // Note [Precision bytes] (sched/memory.hpp): activations and their gradients cross in the
    // job's precision.
    const std::int64_t bytes =
        sched::bytes_at_precision(costs.stages[static_cast<std::size_t>(ed.from)].output_bytes,
                                  costs.precision, options.precision);
    edge_ns_.push_back(p2p_message_ns(shape, costs, cluster, options, ed, bytes));
    const auto a = shape.stage_to_rank[static_cast<std::size_t>(ed.from)];
    const auto b = shape.stage_to_rank[static_cast<std::size_t>(ed.to)];
    edge_links_.push_back(message_footprint(cluster, a, b, R, std::max(dp, 1)));
    edge_links_.push_back(message_footprint(cluster, b, a, R, std::max(dp, 1)));
    // Note [Compute beside a send]: only where the message crosses nodes (a footprint: some
    // replica's copy uses node links) and the cluster's inter-node link prices it.
    const bool across = !edge_links_.back().empty();
    const bool cluster_prices = !options.p2p_override_ms && !costs.p2p;
    edge_load_.push_back(across && cluster_prices ? cluster.send_cpu_load : 0.0);
  }
  for (std::int32_t r = 0; r < R; ++r)
    rank_links_.push_back(collective_footprint(cluster, r, R, dp));
  bucket_ns_.assign(static_cast<std::size_t>(S), {});
  bucket_cum_.assign(static_cast<std::size_t>(S), {});
  rank_localsgd_ns_.assign(static_cast<std::size_t>(R), 0);
  rank_slowmo_ns_.assign(static_cast<std::size_t>(R), 0);
  rank_diloco_ns_.assign(static_cast<std::size_t>(R), 0);
  rank_sgp_ns_.assign(static_cast<std::size_t>(R), 0);
  rank_share_.assign(static_cast<std::size_t>(R), 1.0);
  rank_load_.assign(static_cast<std::size_t>(R), 0.0);
  if (dp <= 1) return;
  // Note [Compute beside a collective]: only a profile measured on one node lacks the load.
  for (std::int32_t r = 0; r < R && costs.nodes == 1; ++r) {
    if (dp_group(cluster, r, R, dp).spans_nodes)
      rank_load_[static_cast<std::size_t>(r)] = cluster.send_cpu_load;
  }
  for (std::int32_t s = 0; s < S; ++s) {
    const auto r = shape.stage_to_rank[static_cast<std::size_t>(s)];
    const DpGroup group = dp_group(cluster, r, R, dp);
    if (options.dp.algorithm == DpAlgorithm::kDdp) {
      const auto buckets = ddp_buckets(costs.stages[static_cast<std::size_t>(s)], options.dp);
      for (std::size_t b = 0; b < buckets.bytes.size(); ++b) {
        // ZeRO: a bucket is reduce-scattered (one ring pass), not all-reduced.
        const std::int64_t wire = gradient_wire_bytes(buckets.bytes[b], options.dp);
        bucket_ns_[static_cast<std::size_t>(s)].push_back(
            options.dp.zero_stage > 0
                ? reduce_ns(zero_link(cluster, group, ShardedCollective::kReduceScatter,
                                      options.dp.zero_stage),
                            dp, wire)
                : allreduce_ns(cluster.collective, group.link, dp, wire));
      }
      bucket_cum_[static_cast<std::size_t>(s)] = buckets.cumulative_bytes;
    }
  }
  // Note [Concurrent syncs on shared links]: every pipeline rank's sync collective starts at the
  // end of the same step, so on shared node links (links_per_node k > 0) they contend for them:
  // L flows on a node's link move at min(1, k / L) each (Note [Shared links]). A sync takes its
  // time alone scaled by L / k over the most loaded link its ring uses, as if all ran at once.
  std::vector<std::int32_t> load;
  if (cluster.links_per_node > 0) {
    for (const auto& uses : rank_links_) {
      for (const auto& u : uses) {
        if (static_cast<std::size_t>(u.link) >= load.size())
          load.resize(static_cast<std::size_t>(u.link) + 1, 0);
        load[static_cast<std::size_t>(u.link)] += u.flows;
      }
    }
  }
  for (std::int32_t r = 0; r < R && !load.empty(); ++r) {
    double share = 1.0;
    for (const auto& u : rank_links_[static_cast<std::size_t>(r)]) {
      share = std::max(share, static_cast<double>(load[static_cast<std::size_t>(u.link)]) /
                                  cluster.links_per_node);
    }
    rank_share_[static_cast<std::size_t>(r)] = share;
  }
  auto shared = [&](std::int32_t r, std::int64_t ns) {
    return static_cast<std::int64_t>(
        std::llround(static_cast<double>(ns) * rank_share_[static_cast<std::size_t>(r)]));
  };
  for (std::int32_t r = 0; r < R; ++r) {
    std::int64_t bytes = 0;
    for (auto s : shape.stages_of_rank(r))
      bytes += costs.stages[static_cast<std::size_t>(s)].param_bytes;
    const DpGroup group = dp_group(cluster, r, R, dp);
    // Note [Unregistered collectives]: within a node these go through the point-to-point path.
    const Link& link = group.spans_nodes ? group.link : cluster.intra_node;
    rank_localsgd_ns_[static_cast<std::size_t>(r)] =
        allreduce_ns(cluster.collective, link, dp, bytes);
    rank_slowmo_ns_[static_cast<std::size_t>(r)] =
        slowmo_step_ns(cluster, group, options.dp, bytes);
    // One fragment (bytes / K; bf16: half of that on the wire, as a scatter + gather moves the
    // bytes of an all-reduce of half the size).
    const std::int64_t fragment = bytes / std::max(options.dp.fragments, 1);
    rank_diloco_ns_[static_cast<std::size_t>(r)] = allreduce_ns(
        cluster.collective, link, dp, outer_bf16(options.dp) ? fragment / 2 : fragment);
    // SGP: the parameters plus the push-sum weight to one peer (full duplex with the receive),
    // a point-to-point message (Note [SGP's gossip link]).
    rank_sgp_ns_[static_cast<std::size_t>(r)] = sgp_gossip_ns(cluster, r, R, dp, bytes + 4);
    if (!load.empty()) {
      for (auto* v : {&rank_localsgd_ns_, &rank_slowmo_ns_, &rank_diloco_ns_, &rank_sgp_ns_}) {
        (*v)[static_cast<std::size_t>(r)] = shared(r, (*v)[static_cast<std::size_t>(r)]);
      }
    }
  }
}

}  // namespace

std::unique_ptr<NetworkModel> make_analytical_network(const sched::LoweredPlan& plan,
                                                      const sched::CostTable& costs,
                                                      const Cluster& cluster,
                                                      const SimOptions& options) {
  return std::make_unique<AnalyticalNetwork>(plan, costs, cluster, options);
}

}  // namespace pipewright::sim
