#include "network/core_sharing.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pipewright::sim {
namespace {

// The busy activities of one node.
struct Node {
  // activities: rank r computing (r), sending (R + r), its data-parallel stream (2R + r)
  std::vector<std::int32_t> running;
  std::int32_t load = 0;  // busy activities, counting co-located replicas
  double extra = 0;       // Note [Compute beside a collective]: other demand, in cores
  double rate = 1.0;      // speed of each running action (work ns per ns)
  std::int64_t last = 0;  // time of the last change
};

class ProcessorSharing final : public CoreSharing {
 public:
  ProcessorSharing(const Cluster& cluster, const sched::CostTable& costs, std::int32_t ranks,
                   std::int32_t dp);

  bool active() const noexcept override { return shared_; }
  void begin(std::int32_t activity, std::int64_t work_ns, std::int64_t now_ns,
             EventQueue& queue) override;
  void end(std::int32_t activity, std::int64_t now_ns, EventQueue& queue) override;
  void add_load(std::int32_t rank, double load, std::int64_t now_ns, EventQueue& queue) override;
  bool current(std::int32_t activity, std::uint32_t version) const noexcept override {
    return version == act_version_[static_cast<std::size_t>(activity)];
  }

 private:
  Node& node_of(std::int32_t activity) {
    return nodes_[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(activity % R_)])];
  }
  void advance(Node& nd, std::int64_t now);
  void reschedule(Node& nd, std::int64_t now, EventQueue& queue);

  std::int32_t R_ = 0;
  std::int32_t cores_ = 0;
  bool shared_ = false;
  std::vector<Node> nodes_;
  std::vector<std::int32_t> node_of_;  // per rank: index into nodes_
  std::vector<std::int32_t> weight_;   // per rank: its replicas on the same node (itself included)
  // Per activity: work left in ns at full speed, and the version of its end event.
  std::vector<double> act_left_;
  std::vector<std::uint32_t> act_version_;
};

ProcessorSharing::ProcessorSharing(const Cluster& cluster, const sched::CostTable& costs,
                                   std::int32_t ranks, std::int32_t dp)
    : R_(ranks) {
  cores_ = cluster.cores_per_node > 0 ? cluster.cores_per_node : costs.cores_per_node;
  if (cores_ <= 0) return;
  node_of_.assign(static_cast<std::size_t>(R_), 0);
  weight_.assign(static_cast<std::size_t>(R_), 0);
  std::vector<std::int32_t> cluster_node;  // nodes_ index -> cluster node
  std::vector<std::int32_t> load;
  for (std::int32_t r = 0; r < R_; ++r) {
    const auto node = cluster.node_of(cluster.global_rank(r, 0, R_, dp));
    std::int32_t w = 0;
    for (std::int32_t j = 0; j < dp; ++j)
      w += cluster.node_of(cluster.global_rank(r, j, R_, dp)) == node ? 1 : 0;
    auto it = std::find(cluster_node.begin(), cluster_node.end(), node);
    if (it == cluster_node.end()) {
      cluster_node.push_back(node);
      load.push_back(0);
      it = cluster_node.end() - 1;
    }
    const auto k = static_cast<std::size_t>(it - cluster_node.begin());
    node_of_[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(k);
    weight_[static_cast<std::size_t>(r)] = w;
    load[k] += w;
  }
  for (auto l : load) shared_ = shared_ || l > cores_;
  nodes_.assign(cluster_node.size(), Node{});
  act_left_.assign(3 * static_cast<std::size_t>(R_), 0.0);
  act_version_.assign(3 * static_cast<std::size_t>(R_), 0);
}

void ProcessorSharing::begin(std::int32_t a, std::int64_t work_ns, std::int64_t now,
                             EventQueue& queue) {
  Node& nd = node_of(a);
  advance(nd, now);
  act_left_[static_cast<std::size_t>(a)] = static_cast<double>(work_ns);
  nd.load += weight_[static_cast<std::size_t>(a % R_)];
  nd.running.push_back(a);
  reschedule(nd, now, queue);
}

void ProcessorSharing::end(std::int32_t a, std::int64_t now, EventQueue& queue) {
  Node& nd = node_of(a);
  advance(nd, now);
  nd.running.erase(std::find(nd.running.begin(), nd.running.end(), a));
  nd.load -= weight_[static_cast<std::size_t>(a % R_)];
  ++act_version_[static_cast<std::size_t>(a)];
  reschedule(nd, now, queue);
}

void ProcessorSharing::add_load(std::int32_t rank, double load, std::int64_t now,
                                EventQueue& queue) {
  Node& nd = node_of(rank);
  advance(nd, now);
  nd.extra += load * weight_[static_cast<std::size_t>(rank)];
  if (nd.extra < 1e-9) nd.extra = 0;  // the last collective ended (no rounding residue)
  reschedule(nd, now, queue);
}

// Progress of the node's running actions from its last change to now at the speed they had.
void ProcessorSharing::advance(Node& nd, std::int64_t now) {
  if (!nd.running.empty() && now > nd.last) {
    const double done = static_cast<double>(now - nd.last) * nd.rate;
    for (auto a : nd.running) act_left_[static_cast<std::size_t>(a)] -= done;
  }
  nd.last = now;
}

// New speed after the set of busy activities changed; every running activity gets a new end
// event (the old ones are recognised as stale by their version).
void ProcessorSharing::reschedule(Node& nd, std::int64_t now, EventQueue& queue) {
  const double demand = nd.load + nd.extra;
  nd.rate = demand > cores_ ? static_cast<double>(cores_) / demand : 1.0;
  for (auto a : nd.running) {
    const auto k = static_cast<std::size_t>(a);
    const double left = std::max(0.0, act_left_[k]);
    queue.push(now + static_cast<std::int64_t>(std::ceil(left / nd.rate)), a,
               EventKind::kActivityDone, ++act_version_[k]);
  }
}

}  // namespace

std::unique_ptr<CoreSharing> make_processor_sharing(const Cluster& cluster,
                                                    const sched::CostTable& costs,
                                                    std::int32_t ranks, std::int32_t dp) {
  return std::make_unique<ProcessorSharing>(cluster, costs, ranks, dp);
}

}  // namespace pipewright::sim
