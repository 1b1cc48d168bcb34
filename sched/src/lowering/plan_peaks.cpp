// Note [Plan peaks] (lower.hpp): one plan's peaks under many cost tables and memory options.
#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "lowering/slots.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"

namespace pipewright::sched {
namespace {

using lowering_detail::idx;
using lowering_detail::Ops;

// An action's (kind, stage) as one key; all stages < 0 alike, as the memory model treats them.
std::uint64_t key_of(ActionKind kind, std::int32_t stage) {
  return (static_cast<std::uint64_t>(stage < 0 ? 0 : stage + 1) << 8) |
         static_cast<std::uint64_t>(kind);
}

// The changes of the kept pairs, and whether the walk over the kept actions is exact (Note [Plan
// peaks]): dropped pairs change nothing, no change ends above zero, and (for the kCompute
// placement) none starts below zero.
struct Table {
  std::vector<std::pair<std::int64_t, std::int64_t>> changes;  // at_start, at_end per pair
  bool exact = true;
};

template <typename Pair>
Table table_of(const MemoryModel& model, const std::vector<Pair>& pairs,
               const std::vector<Pair>& dropped, bool starts_at_zero_or_more) {
  Table t;
  t.changes.reserve(pairs.size());
  for (const Pair& p : pairs) {
    const MemoryChange c = model.change(p.kind, p.stage);
    t.changes.emplace_back(c.at_start, c.at_end);
    if (c.at_end > 0 || (starts_at_zero_or_more && c.at_start < 0)) t.exact = false;
  }
  for (const Pair& p : dropped) {
    const MemoryChange c = model.change(p.kind, p.stage);
    if (c.at_start != 0 || c.at_end != 0) t.exact = false;
  }
  return t;
}

// What peak_memory adds to a rank's running peak: runtime, static and autocast cache bytes.
std::int64_t base_of(const MemoryModel& model, std::int32_t rank) {
  return model.runtime_bytes() + model.static_bytes(rank) + model.autocast_cache_bytes(rank);
}

}  // namespace

PlanPeaks::PlanPeaks(const LoweredPlan& plan) : plan_(plan) {
  std::map<std::uint64_t, std::uint32_t> kept, left;
  std::map<std::vector<std::int32_t>, std::uint32_t> sets{{{}, 0}};
  gathered_.emplace_back();
  const auto index = [&](const Action& a) {
    auto [it, added] =
        kept.emplace(key_of(a.kind, a.stage), static_cast<std::uint32_t>(kept.size()));
    if (added) pairs_.push_back(Pair{a.kind, a.stage});
    return it->second;
  };
  const auto ranks = static_cast<std::size_t>(std::max(plan.shape.ranks, 0));
  lists_.resize(ranks);
  unplaced_.resize(ranks);
  gathers_.resize(ranks);
  for (std::size_t r = 0; r < ranks && r < plan.per_rank.size(); ++r) {
    Ops ops;  // the list without shard actions, as place_shards sees it
    for (const Action& a : plan.per_rank[r]) {
      if (is_comm(a.kind)) {
        if (left.emplace(key_of(a.kind, a.stage), 0).second)
          dropped_.push_back(Pair{a.kind, a.stage});
      } else {
        lists_[r].push_back(index(a));
      }
      if (!is_shard(a.kind)) ops.push_back(a);
    }
    // Each kept action of a slot carries its slot's stages (a SEND / RECV never begins a slot).
    std::vector<std::uint32_t> set_of(ops.size(), 0);
    for (const auto& slot : lowering_detail::slots_of(ops)) {
      std::vector<std::int32_t> stages(slot.stages.begin(), slot.stages.end());
      auto [it, added] = sets.emplace(stages, static_cast<std::uint32_t>(gathered_.size()));
      if (added) gathered_.push_back(stages);
      for (std::size_t i = slot.begin; i < slot.end; ++i) set_of[i] = it->second;
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (is_comm(ops[i].kind)) continue;
      unplaced_[r].push_back(index(ops[i]));
      gathers_[r].push_back(set_of[i]);
    }
  }
}

std::int64_t PlanPeaks::peak_bytes(const CostTable& costs, const MemoryOptions& memory) const {
  const MemoryModel model(plan_.shape, costs, memory);
  const Table t = table_of(model, pairs_, dropped_, false);
  std::int64_t worst = 0;
  if (!t.exact) {
    for (const auto& m : peak_memory(plan_, costs, memory)) worst = std::max(worst, m.peak_bytes);
    return worst;
  }
  for (std::size_t r = 0; r < lists_.size(); ++r) {
    std::int64_t bytes = 0, peak = 0;
    for (const std::uint32_t p : lists_[r]) {
      const auto& c = t.changes[p];
      bytes += c.first;
      peak = std::max(peak, bytes);
      bytes += c.second;
    }
    worst = std::max(worst, base_of(model, static_cast<std::int32_t>(r)) + peak);
  }
  return worst;
}

std::int64_t PlanPeaks::compute_placement_peak_bytes(const CostTable& costs,
                                                     const MemoryOptions& memory) const {
  const MemoryModel model(plan_.shape, costs, memory);
  Table t = table_of(model, pairs_, dropped_, true);
  // Note [Incremental peak] (shard.cpp): a stage's UNSHARD / RESHARD add and remove g >= 0.
  std::vector<std::int64_t> g(gathered_.size(), 0);
  for (std::size_t k = 0; k < gathered_.size(); ++k) {
    for (const std::int32_t s : gathered_[k]) {
      const MemoryChange u = model.change(ActionKind::kUnshard, s);
      const MemoryChange d = model.change(ActionKind::kReshard, s);
      if (u.at_start < 0 || u.at_end != 0 || d.at_start != 0 || d.at_end != -u.at_start)
        t.exact = false;
      g[k] += u.at_start;
    }
  }
  std::int64_t worst = 0;
  if (!t.exact) {
    for (const auto& m : peak_memory(place_shards(plan_, ShardPlacement::kCompute), costs, memory))
      worst = std::max(worst, m.peak_bytes);
    return worst;
  }
  for (std::size_t r = 0; r < unplaced_.size(); ++r) {
    std::int64_t bytes = 0, peak = 0;
    const auto& list = unplaced_[r];
    const auto& sets = gathers_[r];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& c = t.changes[list[i]];
      peak = std::max(peak, bytes + c.first + g[sets[i]]);
      bytes += c.first + c.second;
    }
    worst = std::max(worst, base_of(model, static_cast<std::int32_t>(r)) + peak);
  }
  return worst;
}

}  // namespace pipewright::sched
