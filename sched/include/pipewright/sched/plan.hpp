// Plans: per-rank ordered action lists plus the shape they were made for.
//
// A ComputePlan holds only compute actions (F, B, I, W) and, optionally, REDUCE_GRAD / OPTIM;
// a LoweredPlan additionally holds SEND_*/RECV_* actions between ranks. They are distinct types
// so that a function that needs communication cannot be handed a plan without it; `lower()`
// (lower.hpp) is the only way from one to the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipewright/sched/action.hpp"

namespace pipewright::sched {

// Data flows from stage `from` to stage `to` (activations forward, gradients backward).
struct StageEdge {
  std::int32_t from = 0;
  std::int32_t to = 0;
  friend bool operator==(const StageEdge& a, const StageEdge& b) noexcept {
    return a.from == b.from && a.to == b.to;
  }
};

struct PlanShape {
  std::int32_t ranks = 1;
  std::int32_t stages = 1;
  std::int32_t microbatches = 1;
  std::vector<std::int32_t> stage_to_rank;  // size == stages; each value in [0, ranks)
  // Stage dependency DAG. Empty means the chain 0 -> 1 -> ... -> stages-1.
  std::vector<StageEdge> stage_edges;
  std::string schedule;  // the generator's name ("1F1B"), or "custom" for hand-written plans
  // Note [Stage replicas]: plan stage -> model stage (the partition's stage whose weights it
  // runs). Empty means the identity. Chimera maps its 2P plan stages onto P model stages: plan
  // stage s runs model stage s (down pipeline, s < P) or s - P (up pipeline). The plan stages of
  // one model stage are its replicas, numbered k = 0, 1, ... in plan-stage order; replica k of
  // R runs the microbatches [ceil(k m / R), ceil((k + 1) m / R)) (microbatch_begin/end), and
  // REDUCE_GRAD of a replicated stage sums its weight gradients with its replicas' (see
  // docs/schedules.md, "Chimera").
  std::vector<std::int32_t> stage_to_model_stage;
  // Inference / evaluation plan: forward actions only (no B, I, W, REDUCE_GRAD, OPTIM).
  bool forward_only = false;

  [[nodiscard]] bool is_chain() const noexcept { return stage_edges.empty(); }
  [[nodiscard]] bool has_replicas() const noexcept { return !stage_to_model_stage.empty(); }
  // The model stage plan stage `stage` runs (identity without replicas).
  [[nodiscard]] std::int32_t model_stage(std::int32_t stage) const noexcept;
  // Number of model stages (== stages without replicas).
  [[nodiscard]] std::int32_t model_stages() const noexcept;
  // Plan stages running model stage `model_stage`, ascending.
  [[nodiscard]] std::vector<std::int32_t> replicas_of(std::int32_t model_stage) const;
  // The microbatches plan stage `stage` runs: [microbatch_begin, microbatch_end); [0, m) without
  // replicas.
  [[nodiscard]] std::int32_t microbatch_begin(std::int32_t stage) const noexcept;
  [[nodiscard]] std::int32_t microbatch_end(std::int32_t stage) const noexcept;
  [[nodiscard]] bool runs_microbatch(std::int32_t stage, std::int32_t mb) const noexcept {
    return mb >= microbatch_begin(stage) && mb < microbatch_end(stage);
  }
  // Edges with the chain filled in when stage_edges is empty.
  [[nodiscard]] std::vector<StageEdge> edges() const;
  [[nodiscard]] std::vector<std::int32_t> producers(std::int32_t stage) const;
  [[nodiscard]] std::vector<std::int32_t> consumers(std::int32_t stage) const;
  [[nodiscard]] std::vector<std::int32_t> stages_of_rank(std::int32_t rank) const;

  friend bool operator==(const PlanShape& a, const PlanShape& b) noexcept {
    return a.ranks == b.ranks && a.stages == b.stages && a.microbatches == b.microbatches &&
           a.stage_to_rank == b.stage_to_rank && a.stage_edges == b.stage_edges &&
           a.schedule == b.schedule && a.stage_to_model_stage == b.stage_to_model_stage &&
           a.forward_only == b.forward_only;
  }
};

// Looping placement (torch's interleaved schedules): stage s on rank s mod ranks.
[[nodiscard]] std::vector<std::int32_t> looping_placement(std::int32_t ranks, std::int32_t stages);
// V placement (torch's style="v", ZBVZeroBubble, DualPipeV, and Chimera): 2 * ranks stages, rank
// r holds stages r and 2 * ranks - 1 - r.
[[nodiscard]] std::vector<std::int32_t> v_placement(std::int32_t ranks);

struct ComputePlan {
  PlanShape shape;
  std::vector<std::vector<Action>> per_rank;  // size == shape.ranks
  friend bool operator==(const ComputePlan& a, const ComputePlan& b) noexcept {
    return a.shape == b.shape && a.per_rank == b.per_rank;
  }
};

struct LoweredPlan {
  PlanShape shape;
  std::vector<std::vector<Action>> per_rank;  // size == shape.ranks
  friend bool operator==(const LoweredPlan& a, const LoweredPlan& b) noexcept {
    return a.shape == b.shape && a.per_rank == b.per_rank;
  }
};

}  // namespace pipewright::sched
