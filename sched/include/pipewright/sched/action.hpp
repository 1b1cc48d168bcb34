// The plan IR's atom: an action = (stage, kind, microbatch), with torch.distributed.pipelining's
// text form: "2F0" (stage 2, forward, microbatch 0), "1SEND_F3", "0RECV_B1", "3I2", "3W2",
// "2REDUCE_GRAD". pipewright adds "2OPTIM" (the optimizer step of stage 2's parameters).
//
// Communication actions name the stage at the other end. For the neighbours of a chain
// (SEND_F / RECV_B to or from stage+1, RECV_F / SEND_B from or to stage-1) the text form omits
// it, exactly as torch does; for any other peer (stage DAGs with skip edges) the text form
// appends "@<peer stage>", e.g. "1SEND_F3@4".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

namespace pipewright::sched {

enum class ActionKind : std::uint8_t {
  kForward,         // "F"
  kFullBackward,    // "B"  (input and weight gradients together)
  kBackwardInput,   // "I"  (gradient w.r.t. the stage's inputs)
  kBackwardWeight,  // "W"  (gradient w.r.t. the stage's weights)
  kSendF,           // "SEND_F"  activation to a consumer stage
  kRecvF,           // "RECV_F"  activation from a producer stage
  kSendB,           // "SEND_B"  gradient to a producer stage
  kRecvB,           // "RECV_B"  gradient from a consumer stage
  kReduceGrad,      // "REDUCE_GRAD"  data-parallel gradient reduction of one stage (no microbatch)
  kOptimizerStep,   // "OPTIM"  optimizer step of one stage's parameters (no microbatch)
};

[[nodiscard]] std::string_view to_string(ActionKind kind) noexcept;
// Inline: plan passes call these once per action on plans with millions of actions.
[[nodiscard]] constexpr bool is_compute(ActionKind kind) noexcept {  // F, B, I, W
  return kind == ActionKind::kForward || kind == ActionKind::kFullBackward ||
         kind == ActionKind::kBackwardInput || kind == ActionKind::kBackwardWeight;
}
[[nodiscard]] constexpr bool is_send(ActionKind kind) noexcept {
  return kind == ActionKind::kSendF || kind == ActionKind::kSendB;
}
[[nodiscard]] constexpr bool is_recv(ActionKind kind) noexcept {
  return kind == ActionKind::kRecvF || kind == ActionKind::kRecvB;
}
[[nodiscard]] constexpr bool is_comm(ActionKind kind) noexcept {  // SEND_*, RECV_*
  return is_send(kind) || is_recv(kind);
}
// False for REDUCE_GRAD and OPTIM.
[[nodiscard]] constexpr bool has_microbatch(ActionKind kind) noexcept {
  return kind != ActionKind::kReduceGrad && kind != ActionKind::kOptimizerStep;
}

struct Action {
  std::int32_t stage = 0;
  ActionKind kind = ActionKind::kForward;
  std::int32_t microbatch = -1;  // -1 exactly when !has_microbatch(kind)
  std::int32_t peer_stage = -1;  // comm actions: the other stage (always explicit); else -1

  // Builders that fill the defaults (peer = chain neighbour for comm actions).
  [[nodiscard]] static Action compute(std::int32_t stage, ActionKind kind, std::int32_t mb);
  [[nodiscard]] static Action comm(std::int32_t stage, ActionKind kind, std::int32_t mb,
                                   std::int32_t peer_stage);
  [[nodiscard]] static Action stage_only(std::int32_t stage, ActionKind kind);

  // The chain neighbour a comm action talks to when no "@peer" is given.
  [[nodiscard]] static std::int32_t default_peer(std::int32_t stage, ActionKind kind) noexcept;

  friend bool operator==(const Action& a, const Action& b) noexcept {
    return a.stage == b.stage && a.kind == b.kind && a.microbatch == b.microbatch &&
           a.peer_stage == b.peer_stage;
  }
  friend bool operator!=(const Action& a, const Action& b) noexcept { return !(a == b); }
  friend bool operator<(const Action& a, const Action& b) noexcept;
};

// "2F0", "1SEND_F3", "1SEND_F3@4", "2REDUCE_GRAD".
[[nodiscard]] std::string to_string(const Action& action);
std::ostream& operator<<(std::ostream& os, const Action& action);

// Parses the text form; surrounding whitespace is ignored. Throws ParseError naming the text
// and the character column (1-based) where parsing failed.
[[nodiscard]] Action parse_action(std::string_view text);
// Same, returning nullopt and filling *error instead of throwing.
[[nodiscard]] std::optional<Action> try_parse_action(std::string_view text,
                                                     std::string* error = nullptr);
// Same; on failure also stores the 1-based column of `text` where parsing failed (for CSV / JSON
// readers that report line and column).
[[nodiscard]] std::optional<Action> try_parse_action(std::string_view text, std::string* error,
                                                     std::size_t* error_column);

}  // namespace pipewright::sched

template <>
struct std::hash<pipewright::sched::Action> {
  std::size_t operator()(const pipewright::sched::Action& a) const noexcept {
    std::size_t h = static_cast<std::size_t>(a.stage) * 0x9E3779B97F4A7C15ULL;
    h ^= (static_cast<std::size_t>(a.kind) + 0x7F4A7C15ULL) + (h << 6) + (h >> 2);
    h ^= (static_cast<std::size_t>(static_cast<std::uint32_t>(a.microbatch)) + 0x9E37ULL) +
         (h << 6) + (h >> 2);
    h ^= (static_cast<std::size_t>(static_cast<std::uint32_t>(a.peer_stage)) + 0x79B9ULL) +
         (h << 6) + (h >> 2);
    return h;
  }
};
