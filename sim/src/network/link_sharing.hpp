// The link-sharing model of the simulator: how fast transfers across nodes progress when several
// of them use the same node link at once.
//
// Note [Shared links]
// Every node has one full-duplex link to the rest of the cluster (its NIC and cable; in
// tools/netns-cluster its veth pair, shaped in both directions): resource 2k is node k's egress,
// 2k + 1 its ingress. A transfer occupies the links its bytes cross, with a number of flows on
// each (LinkUse): a message between pipeline ranks on different nodes is one flow per replica
// whose copy of the message crosses nodes (egress of the sender's node, ingress of the
// receiver's); a ring all-reduce of a pipeline rank's data-parallel group is one flow per ring
// edge that leaves a node (sim/src/network/link_sharing.cpp builds both from the cluster).
// Transfers inside a node occupy nothing. A node has Cluster::links_per_node = k such links in each
// direction (NICs; 1 for tools/netns-cluster's veth); L flows on them move at min(1, k / L) of
// the inter-node bandwidth each (fair sharing, as TCP flows through one FIFO shaper converge to),
// so a transfer progresses at min(1, k / L) over the most loaded link it uses, its work its time
// alone
// (latency included: latencies are small next to the transfers that contend). Starting or ending
// a transfer changes the speeds: progress so far at the old speed, then new end events
// (EventKind::kLinkDone; superseded ones carry an old version), as in Note [Shared cores].
// Without links_per_node (0, the default) nothing is shared. Whether a link can carry more than k
// flows at a time is known from the plan before simulating (Engine::plan_streams); only then do
// the send streams and DDP bucket all-reduces that cross nodes become
// event-driven activities of this model, so simulations without possible contention are those
// of dedicated links, bit for bit. Activities: the send stream of pipeline rank r is activity r,
// its data-parallel (DDP) stream R + r. LocalSGD / SlowMo / DiLoCo / SGP syncs are not
// activities: each is priced as if all pipeline ranks' syncs ran at once (Note [Concurrent syncs
// on shared links] in network_model.cpp). Not modelled: Chimera's replica reduce (priced as if
// alone), and sends that compete for cores instead (Note [Shared cores]; the core model rules
// those).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "network/event_queue.hpp"
#include "pipewright/sim/cluster.hpp"

namespace pipewright::sim {

// `flows` flows of one transfer on link `link` (2 * node: egress, 2 * node + 1: ingress).
struct LinkUse {
  std::int32_t link = 0;
  std::int32_t flows = 0;
  friend bool operator==(const LinkUse& a, const LinkUse& b) noexcept {
    return a.link == b.link && a.flows == b.flows;
  }
};

// The links a message from pipeline rank `from` to pipeline rank `to` uses, every replica's copy
// counted (pp pipeline ranks, dp replicas, global ranks by cluster.global_rank); sorted by link.
[[nodiscard]] std::vector<LinkUse> message_footprint(const Cluster& cluster, std::int32_t from,
                                                     std::int32_t to, std::int32_t pp,
                                                     std::int32_t dp);
// The links the ring all-reduce over pipeline rank `rank`'s dp replicas uses (replica j sends to
// replica j + 1 mod dp); empty when dp <= 1 or the ring stays inside one node.
[[nodiscard]] std::vector<LinkUse> collective_footprint(const Cluster& cluster, std::int32_t rank,
                                                        std::int32_t pp, std::int32_t dp);

class LinkSharing {
 public:
  virtual ~LinkSharing() = default;
  // Activity `activity` starts at `now_ns` with `work_ns` of work at full speed on the links
  // `uses` (not empty). The model pushes an EventKind::kLinkDone event (id = activity) for the
  // time it will end, and new ones whenever its speed changes; only the one current() accepts
  // counts.
  virtual void begin(std::int32_t activity, std::int64_t work_ns, const std::vector<LinkUse>& uses,
                     std::int64_t now_ns, EventQueue& queue) = 0;
  // The activity stops at `now_ns` (its end event came); the others may speed up.
  virtual void end(std::int32_t activity, std::int64_t now_ns, EventQueue& queue) = 0;
  [[nodiscard]] virtual bool current(std::int32_t activity,
                                     std::uint32_t version) const noexcept = 0;
};

// Fair sharing (Note [Shared links]) of `links` links, each `capacity` flows wide (the
// cluster's links_per_node, >= 1), among `activities` activities.
[[nodiscard]] std::unique_ptr<LinkSharing> make_fair_link_sharing(std::int32_t links,
                                                                  std::int32_t activities,
                                                                  std::int32_t capacity = 1);

}  // namespace pipewright::sim
