// Private to lowering/: a rank's list cut into the units that need a stage's parameters, shared
// by the UNSHARD / RESHARD placement (shard.cpp) and the plan peaks (plan_peaks.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/plan_dag.hpp"

namespace pipewright::sched::lowering_detail {

using Ops = std::vector<Action>;
inline std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

// The distinct stages of a slot: one, or an OVERLAP_F_B unit's (at most kOverlapSubActions);
// held in place (kFit builds a rank's slots once per placement, and a search places many).
class SlotStages {
 public:
  void push_back(std::int32_t stage) noexcept { stages_[size_++] = stage; }
  [[nodiscard]] const std::int32_t* begin() const noexcept { return stages_.data(); }
  [[nodiscard]] const std::int32_t* end() const noexcept { return stages_.data() + size_; }

 private:
  std::array<std::int32_t, kOverlapSubActions> stages_{};
  std::size_t size_ = 0;
};

// A unit of a rank's list that needs parameters: one compute action, or an OVERLAP_F_B marker with
// its sub-actions (Note [OVERLAP_F_B units]): [begin, end) in the list and the stages it computes.
struct Slot {
  std::size_t begin = 0;
  std::size_t end = 0;
  SlotStages stages;
};

// The slots of a rank's list without UNSHARD / RESHARD, in list order.
inline std::vector<Slot> slots_of(const Ops& ops) {
  std::vector<Slot> out;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Action& a = ops[i];
    if (is_overlap(a.kind)) {
      Slot s{i, std::min(ops.size(), i + 1 + kOverlapSubActions), {}};
      for (std::size_t k = i + 1; k < s.end; ++k) {
        if (std::find(s.stages.begin(), s.stages.end(), ops[k].stage) == s.stages.end())
          s.stages.push_back(ops[k].stage);
      }
      i = s.end - 1;
      out.push_back(s);
    } else if (needs_parameters(a.kind)) {
      Slot slot{i, i + 1, {}};
      slot.stages.push_back(a.stage);
      out.push_back(slot);
    }
  }
  return out;
}

}  // namespace pipewright::sched::lowering_detail
