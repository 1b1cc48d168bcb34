// The plan as the engine runs it: every action decoded once into an Op (the same list is
// replayed every step), with the stage edges indexed. Part of the private event core.
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// A plan action decoded once.
struct Op {
  sched::ActionKind kind;
  std::int32_t stage;
  std::int32_t mb;
  std::int32_t edge;  // comm actions: the edge index; else -1
  bool ddp_launch;    // its stage's last sched::completes_weight_grad action: launches DDP buckets
  bool batch_head = false;  // first of a run of consecutive SEND/RECV actions (one p2p batch)
  // Filled by the engine from sched::PlanRules: the slot rows it needs are
  // Engine::deps_[deps_begin .. deps_end), the row it fills is out_row (-1: none).
  std::int32_t deps_begin = 0;
  std::int32_t deps_end = 0;
  std::int32_t out_row = -1;
};

struct Program {
  std::vector<sched::StageEdge> edges;  // PlanShape::edges(); an edge's index is its id
  std::vector<std::vector<std::int32_t>> in_edges, out_edges;  // per stage: edge indices
  std::vector<std::vector<Op>> ops;                            // per rank
  std::vector<std::vector<std::int32_t>> explicit_reduce;  // per rank and stage: has REDUCE_GRAD
};

// Checks that costs, cluster and options fit the plan's shape. Throws InvalidPlanError for a
// malformed shape, ConfigError naming the option or file field otherwise.
void check_inputs(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                  const Cluster& cluster, const SimOptions& options);

// Decodes a plan whose shape check_inputs() accepted. Throws InvalidPlanError naming the rank,
// position and action of an action on a stage that does not exist or lives on another rank, a
// microbatch out of range, or a SEND/RECV on no stage edge or between stages of one rank.
[[nodiscard]] Program decode(const sched::LoweredPlan& plan);

}  // namespace pipewright::sim
