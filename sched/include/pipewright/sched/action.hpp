// The plan IR's atom: an action = (stage, kind, microbatch), with torch.distributed.pipelining's
// text form: "2F0" (stage 2, forward, microbatch 0), "1SEND_F3", "0RECV_B1", "3I2", "3W2",
// "2REDUCE_GRAD", "2UNSHARD", "2RESHARD". pipewright adds "2OPTIM" (the optimizer step of stage
// 2's parameters).
//
// Note [UNSHARD and RESHARD] (issue 43, ZeRO-3 / FSDP; docs/data-parallel.md): stage-level
// actions (no microbatch) with torch.distributed.pipelining's names. "2UNSHARD" starts the
// all-gather of stage 2's parameter shards over the stage's data-parallel group; the first compute
// of stage 2 after it waits for the gather. "2RESHARD" frees the gathered parameters. Between an
// UNSHARD and the next RESHARD of its stage (on the stage's rank) the stage is *unsharded*: its
// window. A stage that has any UNSHARD / RESHARD in a plan runs every compute action (F, B, I, W)
// inside a window, and its OPTIM outside one (validate()); windows do not nest and every UNSHARD
// is closed by a RESHARD. A plan with no UNSHARD / RESHARD of a stage keeps that stage's
// parameters whole (ZeRO stages 0-2). Under a job whose effective zero stage is below 3 the
// executor and the simulator treat them as no-ops (the parameters are whole anyway), as torch
// does for a stage that is not FSDP-wrapped.
//
// Communication actions name the stage at the other end. For the neighbours of a chain
// (SEND_F / RECV_B to or from stage+1, RECV_F / SEND_B from or to stage-1) the text form omits
// it, exactly as torch does; for any other peer (stage DAGs with skip edges) the text form
// appends "@<peer stage>", e.g. "1SEND_F3@4".
//
// Note [OVERLAP_F_B units]: torch's compound action `(0F3;3B1)OVERLAP_F_B` (DualPipeV: a forward
// of one local stage and a backward of the other, run as one unit) is three consecutive entries
// of a rank's list: a marker Action{stage of the forward, kOverlapFB, -1, -1} followed by its two
// sub-actions, the F and then the B (or I). Action stays a small value type and every pass that
// does not care about units (dependencies, dry runs) sees the sub-actions as ordinary actions and
// the marker as a no-op (it needs and produces nothing). Passes that do care: lowering puts the
// RECVs of both sub-actions before the marker and the SENDs of both after the second one (torch's
// _add_send_recv), REDUCE_GRAD never lands inside a unit, validation checks the unit's form, CSV /
// JSON read and write the container cell (to_cells / try_parse_cell), the simulator runs the two
// sub-actions back to back, the executor runs them in order (what torch's runtime does unless a
// custom OVERLAP_F_B function is registered).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  kOverlapFB,       // "OVERLAP_F_B" unit marker (no microbatch): Note [OVERLAP_F_B units]
  kUnshard,         // "UNSHARD"  all-gather one stage's parameters (no microbatch)
  kReshard,         // "RESHARD"  free one stage's gathered parameters (no microbatch)
};

// Sub-actions that follow an OVERLAP_F_B marker: the forward, then the backward (B or I).
inline constexpr int kOverlapSubActions = 2;

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
// UNSHARD, RESHARD: Note [UNSHARD and RESHARD].
[[nodiscard]] constexpr bool is_shard(ActionKind kind) noexcept {
  return kind == ActionKind::kUnshard || kind == ActionKind::kReshard;
}
// False for REDUCE_GRAD, OPTIM, UNSHARD, RESHARD and the OVERLAP_F_B marker.
[[nodiscard]] constexpr bool has_microbatch(ActionKind kind) noexcept {
  return kind != ActionKind::kReduceGrad && kind != ActionKind::kOptimizerStep &&
         kind != ActionKind::kOverlapFB && !is_shard(kind);
}
[[nodiscard]] constexpr bool is_overlap(ActionKind kind) noexcept {
  return kind == ActionKind::kOverlapFB;
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
  // The OVERLAP_F_B marker of a unit whose forward runs on `forward_stage`.
  [[nodiscard]] static Action overlap(std::int32_t forward_stage);

  // The chain neighbour a comm action talks to when no "@peer" is given.
  [[nodiscard]] static std::int32_t default_peer(std::int32_t stage, ActionKind kind) noexcept;

  friend bool operator==(const Action& a, const Action& b) noexcept {
    return a.stage == b.stage && a.kind == b.kind && a.microbatch == b.microbatch &&
           a.peer_stage == b.peer_stage;
  }
  friend bool operator!=(const Action& a, const Action& b) noexcept { return !(a == b); }
  friend bool operator<(const Action& a, const Action& b) noexcept;
};

// "2F0", "1SEND_F3", "1SEND_F3@4", "2REDUCE_GRAD"; an OVERLAP_F_B marker alone prints as
// "0OVERLAP_F_B" (diagnostics only; plan files hold the container cell, to_cells).
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

// Plan-file cells of one rank's list: one per action, except that an OVERLAP_F_B marker and the
// two actions after it make one container cell "(0F3;3B1)OVERLAP_F_B" (torch's _Action repr). A
// marker with fewer than two actions after it writes what there is ("(0F3)OVERLAP_F_B").
[[nodiscard]] std::vector<std::string> to_cells(const std::vector<Action>& ops);
// Parses one plan-file cell and appends its actions to `out`: one action, or for a container
// cell "(a;b)OVERLAP_F_B" the marker and its two sub-actions (any other number of sub-actions or
// container kind is an error; the marker takes the first sub-action's stage). Same error contract
// as try_parse_action; the column points into `text`.
[[nodiscard]] bool try_parse_cell(std::string_view text, std::vector<Action>& out,
                                  std::string* error, std::size_t* error_column);

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
