// Private helpers shared by validate.cpp, deadlock.cpp and plan_render.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {

// Identifies one point-to-point message: direction, sending stage, receiving stage, microbatch.
// A SEND and the RECV that matches it have the same key.
struct MessageKey {
  std::int32_t forward = 1;  // 1: activation (SEND_F/RECV_F), 0: gradient (SEND_B/RECV_B)
  std::int32_t from = 0;
  std::int32_t to = 0;
  std::int32_t mb = 0;
  friend bool operator==(const MessageKey& a, const MessageKey& b) noexcept {
    return a.forward == b.forward && a.from == b.from && a.to == b.to && a.mb == b.mb;
  }
};
struct MessageKeyHash {
  std::size_t operator()(const MessageKey& k) const noexcept {
    std::uint64_t h = static_cast<std::uint32_t>(k.from);
    h = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint32_t>(k.to);
    h = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint32_t>(k.mb);
    h = h * 0x9E3779B97F4A7C15ULL + static_cast<std::uint32_t>(k.forward);
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

// Precondition: is_comm(a.kind).
inline MessageKey message_key(const Action& a) {
  switch (a.kind) {
    case ActionKind::kSendF:
      return {1, a.stage, a.peer_stage, a.microbatch};
    case ActionKind::kRecvF:
      return {1, a.peer_stage, a.stage, a.microbatch};
    case ActionKind::kSendB:
      return {0, a.stage, a.peer_stage, a.microbatch};
    default:
      return {0, a.peer_stage, a.stage, a.microbatch};  // kRecvB
  }
}

// The action on the peer's rank that completes `a` (a SEND's RECV, a RECV's SEND).
inline Action matching(const Action& a) {
  ActionKind k = ActionKind::kRecvF;
  switch (a.kind) {
    case ActionKind::kSendF:
      k = ActionKind::kRecvF;
      break;
    case ActionKind::kRecvF:
      k = ActionKind::kSendF;
      break;
    case ActionKind::kSendB:
      k = ActionKind::kRecvB;
      break;
    default:
      k = ActionKind::kSendB;
      break;
  }
  return Action{a.peer_stage, k, a.microbatch, a.stage};
}

// Dense ids for the messages of a plan: (edge, direction, microbatch) -> [0, size()). Faster
// than hashing MessageKey on plans with millions of actions.
class MessageIndex {
 public:
  explicit MessageIndex(const PlanShape& shape)
      : microbatches_(shape.microbatches), out_(static_cast<std::size_t>(shape.stages)) {
    std::int64_t e = 0;
    for (const auto& edge : shape.edges()) {
      if (edge.from < 0 || edge.from >= shape.stages) continue;
      out_[static_cast<std::size_t>(edge.from)].push_back({edge.to, e++});
    }
    edges_ = e;
  }
  [[nodiscard]] std::int64_t size() const { return edges_ * 2 * microbatches_; }
  // -1 when the edge does not exist or the microbatch is out of range.
  [[nodiscard]] std::int64_t id(const MessageKey& k) const {
    // Gradients travel against the edge: a backward message from -> to rides edge to -> from.
    const std::int32_t head = k.forward != 0 ? k.from : k.to;
    const std::int32_t tail = k.forward != 0 ? k.to : k.from;
    if (head < 0 || head >= static_cast<std::int32_t>(out_.size())) return -1;
    if (k.mb < 0 || k.mb >= microbatches_) return -1;
    for (const auto& [to, e] : out_[static_cast<std::size_t>(head)]) {
      if (to == tail) return (e * 2 + k.forward) * microbatches_ + k.mb;
    }
    return -1;
  }
  [[nodiscard]] std::int64_t id(const Action& comm) const { return id(message_key(comm)); }

 private:
  std::int64_t microbatches_;
  std::int64_t edges_ = 0;
  std::vector<std::vector<std::pair<std::int32_t, std::int64_t>>> out_;
};

namespace detail {

// Untimed run of a compute-only plan whose counts and placement are valid: a rank takes its next
// action when the producers' forwards (for F) or the consumers' backwards (for B / I) have run
// anywhere. Returns one diagnostic naming the cycle of waiting actions, or nothing.
std::vector<Diagnostic> compute_dry_run(const PlanShape& shape,
                                        const std::vector<std::vector<Action>>& per_rank);

}  // namespace detail
}  // namespace pipewright::sched
