// Private: the generators of the V-shaped schedules (schedule_v.cpp), of ZB-H2
// (schedule_zb_h2.cpp) and the forward-only filter, used by generate() in schedule.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sched/action.hpp"

namespace pipewright::sched::detail {

using Ops = std::vector<Action>;

// torch's ScheduleZBVZeroBubble._calculate_single_rank_operations (None bubbles dropped).
Ops zbv_rank(std::int32_t p, std::int32_t m, std::int32_t rank);
// torch's ScheduleDualPipeV._calculate_single_rank_operations; OVERLAP_F_B units as marker + F +
// B (Note [OVERLAP_F_B units]).
Ops dualpipev_rank(std::int32_t p, std::int32_t m, std::int32_t rank);
// Chimera's per-rank orders over 2p plan stages (Note [Chimera order] in schedule_v.cpp).
std::vector<Ops> chimera(std::int32_t p, std::int32_t m);
// ZB-H2's per-rank orders, one stage per rank (Note [ZB-H2 order] in schedule_zb_h2.cpp).
std::vector<Ops> zb_h2(std::int32_t p, std::int32_t m);
// The forward-only view of a training order: B, I, W dropped, OVERLAP_F_B units replaced by
// their forward.
Ops forward_only(const Ops& ops);

}  // namespace pipewright::sched::detail
