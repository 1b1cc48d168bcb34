#include "network/link_sharing.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace pipewright::sim {

namespace {

void add_flow(std::map<std::int32_t, std::int32_t>& uses, std::int32_t node_a,
              std::int32_t node_b) {
  if (node_a == node_b) return;
  ++uses[2 * node_a];      // the sender's egress
  ++uses[2 * node_b + 1];  // the receiver's ingress
}

std::vector<LinkUse> to_vector(const std::map<std::int32_t, std::int32_t>& uses) {
  std::vector<LinkUse> out;
  for (const auto& [link, flows] : uses) out.push_back(LinkUse{link, flows});
  return out;
}

}  // namespace

std::vector<LinkUse> message_footprint(const Cluster& cluster, std::int32_t from, std::int32_t to,
                                       std::int32_t pp, std::int32_t dp) {
  std::map<std::int32_t, std::int32_t> uses;
  for (std::int32_t j = 0; j < std::max(dp, 1); ++j) {
    add_flow(uses, cluster.node_of(cluster.global_rank(from, j, pp, dp)),
             cluster.node_of(cluster.global_rank(to, j, pp, dp)));
  }
  return to_vector(uses);
}

std::vector<LinkUse> collective_footprint(const Cluster& cluster, std::int32_t rank,
                                          std::int32_t pp, std::int32_t dp) {
  std::map<std::int32_t, std::int32_t> uses;
  if (dp <= 1) return {};
  for (std::int32_t j = 0; j < dp; ++j) {
    add_flow(uses, cluster.node_of(cluster.global_rank(rank, j, pp, dp)),
             cluster.node_of(cluster.global_rank(rank, (j + 1) % dp, pp, dp)));
  }
  return to_vector(uses);
}

namespace {

class FairLinkSharing final : public LinkSharing {
 public:
  FairLinkSharing(std::int32_t links, std::int32_t activities, std::int32_t capacity)
      : capacity_(std::max(capacity, 1)),
        load_(static_cast<std::size_t>(links), 0),
        uses_(static_cast<std::size_t>(activities)),
        left_(static_cast<std::size_t>(activities), 0.0),
        rate_(static_cast<std::size_t>(activities), 1.0),
        version_(static_cast<std::size_t>(activities), 0) {}

  void begin(std::int32_t a, std::int64_t work_ns, const std::vector<LinkUse>& uses,
             std::int64_t now, EventQueue& queue) override {
    advance(now);
    const auto k = static_cast<std::size_t>(a);
    left_[k] = static_cast<double>(work_ns);
    uses_[k] = uses;
    for (const auto& u : uses) load_[static_cast<std::size_t>(u.link)] += u.flows;
    running_.push_back(a);
    reschedule(now, queue);
  }

  void end(std::int32_t a, std::int64_t now, EventQueue& queue) override {
    advance(now);
    const auto k = static_cast<std::size_t>(a);
    for (const auto& u : uses_[k]) load_[static_cast<std::size_t>(u.link)] -= u.flows;
    uses_[k].clear();
    running_.erase(std::find(running_.begin(), running_.end(), a));
    ++version_[k];
    reschedule(now, queue);
  }

  bool current(std::int32_t a, std::uint32_t version) const noexcept override {
    return version == version_[static_cast<std::size_t>(a)];
  }

 private:
  // Progress of the running activities since the last change, at the speeds they had.
  void advance(std::int64_t now) {
    if (now > last_) {
      for (auto a : running_) {
        const auto k = static_cast<std::size_t>(a);
        left_[k] -= static_cast<double>(now - last_) * rate_[k];
      }
    }
    last_ = now;
  }
  // New speeds; an activity whose speed changed (or that just started) gets a new end event. The
  // running list is in start order, so equal-time end events come out in that order.
  void reschedule(std::int64_t now, EventQueue& queue) {
    for (auto a : running_) {
      const auto k = static_cast<std::size_t>(a);
      std::int32_t most = capacity_;
      for (const auto& u : uses_[k]) most = std::max(most, load_[static_cast<std::size_t>(u.link)]);
      const double rate = static_cast<double>(capacity_) / static_cast<double>(most);
      const double left = std::max(0.0, left_[k]);
      rate_[k] = rate;
      queue.push(now + static_cast<std::int64_t>(std::ceil(left / rate)), a, EventKind::kLinkDone,
                 ++version_[k]);
    }
  }

  std::int32_t capacity_ = 1;               // flows a link carries at full speed each
  std::vector<std::int32_t> load_;          // per link: flows of the running activities
  std::vector<std::vector<LinkUse>> uses_;  // per activity: its links while running
  std::vector<double> left_;                // per activity: work left, ns at full speed
  std::vector<double> rate_;                // per activity: its current speed
  std::vector<std::uint32_t> version_;      // per activity: version of its end event
  std::vector<std::int32_t> running_;       // running activities, in start order
  std::int64_t last_ = 0;                   // time of the last change
};

}  // namespace

std::unique_ptr<LinkSharing> make_fair_link_sharing(std::int32_t links, std::int32_t activities,
                                                    std::int32_t capacity) {
  return std::make_unique<FairLinkSharing>(links, activities, capacity);
}

}  // namespace pipewright::sim
