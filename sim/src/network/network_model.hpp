// The network model of the simulator: what a point-to-point message and a data-parallel
// collective cost. The engine (engine.cpp) asks it; another model (one with shared-link
// contention, a packet-level one) can be swapped in by implementing NetworkModel.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "network/link_sharing.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  // One message on stage edge `edge` (index into PlanShape::edges()), ns (before the duration
  // model's sampling).
  [[nodiscard]] virtual std::int64_t message_ns(std::int32_t edge) const noexcept = 0;
  // Note [Compute beside a send] (engine.hpp): the share of a core a message on edge `edge`
  // takes from its sender's compute while it crosses the inter-node link priced by the cluster
  // (Cluster::send_cpu_load); 0 within a node, or when the profile's p2p or --p2p-ms prices it.
  [[nodiscard]] virtual double send_cpu_load(std::int32_t edge) const noexcept = 0;
  // Note [Compute beside a collective] (engine.hpp): the share of a core each of pipeline rank
  // `rank`'s data-parallel collectives takes from its node's compute while it crosses the
  // cluster's inter-node link (Cluster::send_cpu_load); 0 where its group stays in one node, or
  // where the profile was not measured on one node (CostTable::nodes != 1: its compute times
  // hold that load already, or it is not known).
  [[nodiscard]] virtual double collective_cpu_load(std::int32_t rank) const noexcept = 0;
  // Compute-stream time of one batch of a rank's consecutive SEND/RECV actions, ns.
  [[nodiscard]] virtual std::int64_t batch_overhead_ns() const noexcept = 0;
  // DDP (dp > 1): the all-reduce time of each of stage `stage`'s gradient buckets in launch
  // order, and the cumulative bytes of buckets 0..b. Empty without DDP.
  [[nodiscard]] virtual const std::vector<std::int64_t>& bucket_ns(
      std::int32_t stage) const noexcept = 0;
  [[nodiscard]] virtual const std::vector<std::int64_t>& bucket_cumulative_bytes(
      std::int32_t stage) const noexcept = 0;
  // LocalSGD / SlowMo (dp > 1): averaging the parameters of pipeline rank `rank`, and SlowMo's
  // slow step on them (reduce-scatter + all-gather, or a reduce + broadcast per shard: Note
  // [SlowMo in the simulator] in network_model.cpp), ns.
  [[nodiscard]] virtual std::int64_t localsgd_ns(std::int32_t rank) const noexcept = 0;
  [[nodiscard]] virtual std::int64_t slowmo_ns(std::int32_t rank) const noexcept = 0;
  // DiLoCo (dp > 1): the outer all-reduce of one fragment of rank `rank`'s parameters, ns.
  [[nodiscard]] virtual std::int64_t diloco_ns(std::int32_t rank) const noexcept = 0;
  // SGP (dp > 1): one gossip exchange (send the parameters to one peer, receive from another).
  [[nodiscard]] virtual std::int64_t sgp_ns(std::int32_t rank) const noexcept = 0;
  // Note [Concurrent syncs on shared links]: how much longer pipeline rank `rank`'s
  // data-parallel collectives take because every pipeline rank's run at once over the shared
  // node links (flows on its most loaded link / links_per_node; 1 without shared links). The
  // sync times above already hold it; the engine scales ZeRO's all-gathers and per-backward
  // reduce-scatters by it where they do not move on the links event by event (Note [ZeRO in the
  // simulator]).
  [[nodiscard]] virtual double sync_link_share(std::int32_t rank) const noexcept = 0;
  // Note [Shared links]: the node links a message on edge `edge` occupies (forward: the
  // activation from edge.from to edge.to, else the gradient back), every replica's copy counted,
  // and those of pipeline rank `rank`'s data-parallel all-reduce; empty inside one node.
  [[nodiscard]] virtual const std::vector<LinkUse>& message_links(std::int32_t edge,
                                                                  bool forward) const noexcept = 0;
  [[nodiscard]] virtual const std::vector<LinkUse>& collective_links(
      std::int32_t rank) const noexcept = 0;
};

// The analytical model: latency + bytes / bandwidth per message on the cluster's links (or the
// profile's measured p2p, or --p2p-ms; p2p_message_ns in data_parallel.hpp), ring all-reduce
// per DDP bucket and per LocalSGD average on the data-parallel group's link. Preconditions:
// the plan's shape, costs and cluster were checked by the engine.
[[nodiscard]] std::unique_ptr<NetworkModel> make_analytical_network(const sched::LoweredPlan& plan,
                                                                    const sched::CostTable& costs,
                                                                    const Cluster& cluster,
                                                                    const SimOptions& options);

}  // namespace pipewright::sim
