// Private helpers shared by validate.cpp, deadlock.cpp and plan_render.cpp.
#pragma once

#include <cstdint>
#include <string>
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
  return Action::comm(a.peer_stage, k, a.microbatch, a.stage);
}

namespace detail {

// Untimed run of a compute-only plan whose counts and placement are valid: a rank takes its next
// action when the producers' forwards (for F) or the consumers' backwards (for B / I) have run
// anywhere. Returns one diagnostic naming the cycle of waiting actions, or nothing.
std::vector<Diagnostic> compute_dry_run(const PlanShape& shape,
                                        const std::vector<std::vector<Action>>& per_rank);

}  // namespace detail
}  // namespace pipewright::sched
