#include "pipewright/sched/plan.hpp"

#include <algorithm>
#include <utility>

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

std::vector<std::int32_t> v_placement(std::int32_t ranks) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(2 * ranks));
  for (std::int32_t r = 0; r < ranks; ++r) {
    out[static_cast<std::size_t>(r)] = r;
    out[static_cast<std::size_t>(2 * ranks - 1 - r)] = r;
  }
  return out;
}

std::int32_t PlanShape::model_stage(std::int32_t stage) const noexcept {
  if (stage_to_model_stage.empty() || stage < 0 ||
      static_cast<std::size_t>(stage) >= stage_to_model_stage.size()) {
    return stage;
  }
  return stage_to_model_stage[static_cast<std::size_t>(stage)];
}

std::int32_t PlanShape::model_stages() const noexcept {
  if (stage_to_model_stage.empty()) return stages;
  std::int32_t n = 0;
  for (std::int32_t m : stage_to_model_stage) n = std::max(n, m + 1);
  return n;
}

std::vector<std::int32_t> PlanShape::replicas_of(std::int32_t model) const {
  std::vector<std::int32_t> out;
  for (std::int32_t s = 0; s < stages; ++s) {
    if (model_stage(s) == model) out.push_back(s);
  }
  return out;
}

namespace {
// Replica k of R of a plan stage: (k, R); (0, 1) without replicas.
std::pair<std::int64_t, std::int64_t> replica_position(const PlanShape& sh, std::int32_t stage) {
  if (sh.stage_to_model_stage.empty()) return {0, 1};
  const std::int32_t model = sh.model_stage(stage);
  std::int64_t k = 0;
  std::int64_t n = 0;
  for (std::int32_t s = 0; s < static_cast<std::int32_t>(sh.stage_to_model_stage.size()); ++s) {
    if (sh.stage_to_model_stage[static_cast<std::size_t>(s)] != model) continue;
    if (s < stage) ++k;
    ++n;
  }
  return {k, std::max<std::int64_t>(n, 1)};
}
std::int32_t ceil_share(std::int64_t k, std::int64_t m, std::int64_t r) {
  return static_cast<std::int32_t>((k * m + r - 1) / r);
}
}  // namespace

std::int32_t PlanShape::microbatch_begin(std::int32_t stage) const noexcept {
  const auto [k, r] = replica_position(*this, stage);
  return ceil_share(k, microbatches, r);
}

std::int32_t PlanShape::microbatch_end(std::int32_t stage) const noexcept {
  const auto [k, r] = replica_position(*this, stage);
  return ceil_share(k + 1, microbatches, r);
}

}  // namespace pipewright::sched
