#include "pipewright/sched/stage_edges.hpp"

#include "pipewright/sched/schedule.hpp"

namespace pipewright::sched {

std::vector<StageEdge> stage_edges_from(const graph::StageGraph& graph) {
  std::vector<StageEdge> edges;
  for (const auto& [from, to] : graph.stage_dependencies()) edges.push_back({from, to});
  check_stage_edges(edges, static_cast<std::int32_t>(graph.stages.size()));
  return edges;
}

}  // namespace pipewright::sched
