// Which action waits for which: the dependency rules of a plan, in one place.
//
// Every microbatch-level action of a plan produces at most one *fact* and needs a list of facts of
// the same microbatch:
//
//   action        needs                                         produces
//   F(s)          per producer q: kForward(q) when q is on s's   kForward(s)
//                 rank (or at compute level), else the RECV_F
//                 of edge q -> s (kActivationReceived(q->s))
//   B(s), I(s)    kForward(s), then per consumer c:             kInputGrad(s)
//                 kInputGrad(c) (same rank or compute level),
//                 else kGradientReceived(s->c) (the RECV_B)
//   W(s)          kInputGrad(s)                                 -
//   SEND_F(s->c)  kForward(s)                                   kActivationSent(s->c)
//   SEND_B(s->q)  kInputGrad(s)                                 kGradientSent(q->s)
//   RECV_F(s<-q)  kActivationSent(q->s)                         kActivationReceived(q->s)
//   RECV_B(s<-c)  kGradientSent(s->c)                           kGradientReceived(s->c)
//   REDUCE_GRAD, OPTIM, UNSHARD, RESHARD: no fact of a microbatch (see "Stage-level order")
//
// Message facts name the stage edge (from -> to, the direction activations flow); a SEND and the
// RECV that matches it (matching()) produce and need the same message. Producers and consumers
// come in PlanShape::edges() order. PlanRules answers per shape (no plan needed); PlanDag places
// the facts of one plan at (rank, index) positions. Validation, the deadlock dry runs, lowering,
// rendering and the simulator all ask these instead of re-deriving the rules.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

enum class FactKind : std::uint8_t {
  kForward,             // F(stage) ran: its activation exists on its rank
  kInputGrad,           // B(stage) or I(stage) ran: its input gradient exists on its rank
  kActivationSent,      // SEND_F on edge stage -> peer ran
  kActivationReceived,  // RECV_F on edge stage -> peer ran (on peer's rank)
  kGradientSent,        // SEND_B on edge stage -> peer ran (on peer's rank)
  kGradientReceived,    // RECV_B on edge stage -> peer ran (on stage's rank)
};

// A fact of one microbatch: kForward / kInputGrad of `stage` (peer -1), or a message on the stage
// edge `stage` -> `peer`.
struct Fact {
  FactKind kind = FactKind::kForward;
  std::int32_t stage = 0;
  std::int32_t peer = -1;
  [[nodiscard]] bool is_message() const noexcept {
    return kind != FactKind::kForward && kind != FactKind::kInputGrad;
  }
  friend bool operator==(const Fact& a, const Fact& b) noexcept {
    return a.kind == b.kind && a.stage == b.stage && a.peer == b.peer;
  }
  friend bool operator!=(const Fact& a, const Fact& b) noexcept { return !(a == b); }
};

// Compute level: a compute-only plan, where data moves between ranks implicitly (an F needs its
// producers' forwards wherever they run). Lowered level: a plan with SEND/RECV, where data from
// another rank is needed as the local RECV.
enum class Level : std::uint8_t { kCompute, kLowered };

// Stage-level order (no microbatch, on the stage's own rank): REDUCE_GRAD(s) and OPTIM(s) come
// after the last action that completes a weight gradient of s (DDP launches the stage's gradient
// buckets from it), and OPTIM(s) after REDUCE_GRAD(s). B and W complete weight gradients; I does
// not.
//
// Parameter residency (Note [UNSHARD and RESHARD] in action.hpp): a stage with UNSHARD / RESHARD
// actions in its rank's list runs each action that needs its parameters (needs_parameters: F, B,
// I, W) between an UNSHARD(s) and the next RESHARD(s); its OPTIM after the window closes.
// These are orders within one rank's list (no fact, no other rank): the all-gather is a
// collective of the stage's data-parallel group, whose replicas all run the same list.
[[nodiscard]] constexpr bool needs_parameters(ActionKind kind) noexcept { return is_compute(kind); }

// One unsharded window of a rank's list: the positions of an UNSHARD of `stage` and of the
// RESHARD that closes it (-1 when the list ends with the window open).
struct ShardWindow {
  std::int32_t stage = 0;
  std::int32_t unshard = -1;
  std::int32_t reshard = -1;
  friend bool operator==(const ShardWindow& a, const ShardWindow& b) noexcept {
    return a.stage == b.stage && a.unshard == b.unshard && a.reshard == b.reshard;
  }
};
// The windows of one rank's list, in UNSHARD order. A RESHARD with no open window of its stage
// and an UNSHARD of a stage already open start or close nothing (validate() reports both).
[[nodiscard]] std::vector<ShardWindow> shard_windows(const std::vector<Action>& ops);

[[nodiscard]] constexpr bool completes_weight_grad(ActionKind kind) noexcept {
  return kind == ActionKind::kFullBackward || kind == ActionKind::kBackwardWeight;
}

// The fact an action produces, or nothing (W and the stage-level actions).
[[nodiscard]] std::optional<Fact> produces(const Action& a) noexcept;
// The action on the peer's rank that completes a SEND or RECV (a SEND's RECV, a RECV's SEND).
// Precondition: is_comm(a.kind).
[[nodiscard]] Action matching(const Action& a) noexcept;

// The rules for one plan shape. Stage edges out of range are ignored and placements are taken as
// they are (validate() reports both); a stage missing from stage_to_rank shares no rank.
class PlanRules {
 public:
  PlanRules(const PlanShape& shape, Level level);

  // The facts `a` (of microbatch a.microbatch) needs, in the order of the table above. Empty for
  // REDUCE_GRAD / OPTIM, for an action on a stage outside the shape, and for a SEND/RECV on no
  // stage edge (no action can ever provide it).
  [[nodiscard]] const std::vector<Fact>& needs(const Action& a) const noexcept;
  // Lowered level: the SENDs that carry what compute action `a` produces to the stages on other
  // ranks that need it, in edge order (F: SEND_F per consumer, B/I: SEND_B per producer).
  [[nodiscard]] std::vector<Action> sends(const Action& a) const;
  // The same as facts (kActivationSent / kGradientSent, in edge order), without allocating:
  // sends(a)[k] == action_of(sent_by(a)[k], a.microbatch).
  [[nodiscard]] const std::vector<Fact>& sent_by(const Action& a) const noexcept;
  // The RECV (SEND) that produces message fact `f` of microbatch `mb`; precondition:
  // f.is_message().
  [[nodiscard]] static Action action_of(const Fact& f, std::int32_t mb) noexcept;

  // Dense fact numbering: row(f) in [0, rows()), -1 for a fact on no stage or edge of the shape:
  //   [kForward: stages][kInputGrad: stages][per message kind (in FactKind order): edges]
  // and id = row * microbatches + microbatch for one microbatch's fact.
  [[nodiscard]] std::int64_t row(const Fact& f) const noexcept;
  [[nodiscard]] std::int64_t rows() const noexcept { return 2 * stages_ + 4 * edge_count(); }
  [[nodiscard]] std::int64_t id(const Fact& f, std::int32_t mb) const noexcept;
  [[nodiscard]] std::int64_t ids() const noexcept { return rows() * microbatches_; }
  // The id of the message a SEND or RECV carries (its kActivationSent / kGradientSent fact), the
  // same for a SEND and the RECV matching it; -1 when it is on no edge or microbatch of the shape.
  [[nodiscard]] std::int64_t message_id(const Action& comm) const noexcept;
  // Index of edge from -> to among the valid edges (edges() order), or -1.
  [[nodiscard]] std::int32_t edge_index(std::int32_t from, std::int32_t to) const noexcept;
  [[nodiscard]] const std::vector<StageEdge>& edges() const noexcept { return edges_; }
  [[nodiscard]] Level level() const noexcept { return level_; }

 private:
  [[nodiscard]] std::int64_t edge_count() const noexcept {
    return static_cast<std::int64_t>(edges_.size());
  }
  [[nodiscard]] bool same_rank(std::int32_t a, std::int32_t b) const noexcept;

  Level level_;
  std::int32_t stages_ = 0;
  std::int32_t microbatches_ = 0;
  std::vector<std::int32_t> stage_to_rank_;
  std::vector<StageEdge> edges_;                                         // the valid edges
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> out_;  // per stage: (to, edge)
  // needs() tables: per stage for F, B/I and W; per edge for SEND_F, SEND_B, RECV_F, RECV_B.
  std::vector<std::vector<Fact>> forward_, backward_, weight_;
  std::vector<std::vector<Fact>> send_f_, send_b_, recv_f_, recv_b_;
  // sent_by() tables, per stage: messages after its F, after its B/I.
  std::vector<std::vector<Fact>> sent_after_f_, sent_after_b_;
};

// A position in a plan: action `index` of rank `rank`.
struct Position {
  std::int32_t rank = -1;
  std::int32_t index = -1;
  [[nodiscard]] bool valid() const noexcept { return rank >= 0; }
  friend bool operator==(const Position& a, const Position& b) noexcept {
    return a.rank == b.rank && a.index == b.index;
  }
  friend bool operator!=(const Position& a, const Position& b) noexcept { return !(a == b); }
};

// The dependency DAG of one plan: where each fact is produced, what each action waits for and
// which RECV matches which SEND. Actions outside the shape's stages or microbatches produce
// nothing. When two actions produce the same fact (an invalid plan), the later one in (rank,
// index) order counts. The DAG refers to the plan's action lists, which must outlive it.
class PlanDag {
 public:
  PlanDag(const PlanShape& shape, const std::vector<std::vector<Action>>& per_rank, Level level);
  explicit PlanDag(const ComputePlan& plan) : PlanDag(plan.shape, plan.per_rank, Level::kCompute) {}
  explicit PlanDag(const LoweredPlan& plan) : PlanDag(plan.shape, plan.per_rank, Level::kLowered) {}
  PlanDag(ComputePlan&&) = delete;
  PlanDag(LoweredPlan&&) = delete;

  [[nodiscard]] const PlanRules& rules() const noexcept { return rules_; }
  // The position of the action that produces fact `f` of microbatch `mb`, or an invalid one.
  [[nodiscard]] Position producer(const Fact& f, std::int32_t mb) const noexcept;
  // The positions the action at `p` waits for, in needs() order; a need no action of the plan
  // produces is reported as an invalid Position in its place.
  [[nodiscard]] std::vector<Position> deps(Position p) const;
  // The SEND / RECV matching the SEND / RECV at `p`, or an invalid position.
  [[nodiscard]] Position match(Position p) const noexcept;

 private:
  PlanRules rules_;
  const std::vector<std::vector<Action>>& per_rank_;
  std::vector<Position> producer_;  // by PlanRules::id
};

}  // namespace pipewright::sched
