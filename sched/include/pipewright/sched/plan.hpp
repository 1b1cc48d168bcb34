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

  [[nodiscard]] bool is_chain() const noexcept { return stage_edges.empty(); }
  // Edges with the chain filled in when stage_edges is empty.
  [[nodiscard]] std::vector<StageEdge> edges() const;
  [[nodiscard]] std::vector<std::int32_t> producers(std::int32_t stage) const;
  [[nodiscard]] std::vector<std::int32_t> consumers(std::int32_t stage) const;
  [[nodiscard]] std::vector<std::int32_t> stages_of_rank(std::int32_t rank) const;

  friend bool operator==(const PlanShape& a, const PlanShape& b) noexcept {
    return a.ranks == b.ranks && a.stages == b.stages && a.microbatches == b.microbatches &&
           a.stage_to_rank == b.stage_to_rank && a.stage_edges == b.stage_edges &&
           a.schedule == b.schedule;
  }
};

// Looping placement (torch's interleaved schedules): stage s on rank s mod ranks.
[[nodiscard]] std::vector<std::int32_t> looping_placement(std::int32_t ranks, std::int32_t stages);

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
