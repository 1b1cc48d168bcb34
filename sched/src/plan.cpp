#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

std::vector<StageEdge> PlanShape::edges() const {
  if (!stage_edges.empty()) return stage_edges;
  std::vector<StageEdge> chain;
  for (std::int32_t s = 0; s + 1 < stages; ++s) chain.push_back({s, s + 1});
  return chain;
}

std::vector<std::int32_t> PlanShape::producers(std::int32_t stage) const {
  std::vector<std::int32_t> out;
  for (const auto& e : edges()) {
    if (e.to == stage) out.push_back(e.from);
  }
  return out;
}

std::vector<std::int32_t> PlanShape::consumers(std::int32_t stage) const {
  std::vector<std::int32_t> out;
  for (const auto& e : edges()) {
    if (e.from == stage) out.push_back(e.to);
  }
  return out;
}

std::vector<std::int32_t> PlanShape::stages_of_rank(std::int32_t rank) const {
  std::vector<std::int32_t> out;
  for (std::int32_t s = 0; s < static_cast<std::int32_t>(stage_to_rank.size()); ++s) {
    if (stage_to_rank[static_cast<std::size_t>(s)] == rank) out.push_back(s);
  }
  return out;
}

std::vector<std::int32_t> looping_placement(std::int32_t ranks, std::int32_t stages) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(stages));
  for (std::int32_t s = 0; s < stages; ++s) out[static_cast<std::size_t>(s)] = s % ranks;
  return out;
}

}  // namespace pipewright::sched
