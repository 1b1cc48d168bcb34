// Conversion from graph/'s stage DAG to the plan's stage edges (ScheduleSpec::stage_edges,
// PlanShape::stage_edges).
#pragma once

#include <vector>

#include "pipewright/graph/stage_graph.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

// The distinct producer -> consumer stage pairs of `graph` (model-input edges excluded), sorted.
// Throws ConfigError if they are cyclic (graph::build_stage_graph already refuses that).
[[nodiscard]] std::vector<StageEdge> stage_edges_from(const graph::StageGraph& graph);

}  // namespace pipewright::sched
