// Private: the Zero Bubble paper's heuristic scheduler, one more source of Auto's candidates
// (Note [Zero Bubble heuristic]).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "synthesis/list_scheduler.hpp"

namespace pipewright::sim::synthesis {

// The heuristic's three switches (the paper's scheduler tries all eight and keeps the best).
struct ZbPolicy {
  // Warm-up: admit a forward that would end after the first backward arrives (true) or only
  // forwards that start before it arrives (false).
  bool bubble_before_first_b = false;
  // Steady state: skip a rank's forward when the next rank is two or more microbatches behind and
  // the forward would delay the backward that comes back from it.
  bool prioritize_b = false;
  // Fill a wait that the other ranks' bubbles already cover with a W (true) or leave it idle.
  bool fill_small_waits = true;
};

// Note [Zero Bubble heuristic]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The heuristic of Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024, section 3.1; its
// authors' scheduler: github.com/sail-sg/zero-bubble-pipeline-parallelism, megatron/core/
// pipeline_parallel/auto_schedule.py at 6229e79062d9cedc19da9127648b43e6d68ca504, manual_order
// and initial_solution, which is what its efficiency.py prints as ZB-1p and ZB-2p; the paper's
// ILP that may follow it is not done here), for one stage per rank, written for
// pipewright's problem (per-stage costs and message times, activation that I partly frees). It
// places passes rank by rank on its own clock, microbatch by microbatch:
//   - microbatch 0: every rank's first forward, then, from the last rank back, as many more
//     forwards as fit under the cap and (by the policy) before microbatch 0's backward can come
//     back, trimmed so that every rank warms up strictly fewer than the one before; then
//     microbatch 0's I on every rank from the last back;
//   - each later microbatch: one forward per rank (by the policy, a rank two microbatches ahead
//     of the next may skip it; a rank that skips makes every rank before it skip too), then its
//     I from the last rank back; before each pass, W passes fill the time until the pass's input
//     arrives (all of them that end in time, and one more if the wait is within the largest idle
//     time another rank already has, by the policy), and W passes run first when the pass does
//     not fit under the cap;
//   - at the end, every rank's remaining W.
// Its cost is the longest per-rank span; here the caller keeps the best of the eight policies by
// simulation. O(S M) passes, each O(1) but the bubble maximum O(S): O(S^2 M) for S stages.
// Returns the per-rank orders, or nothing when a pass would wait for one not yet placed or a
// forward cannot fit under the cap (the caller then has the other candidates).
[[nodiscard]] std::optional<std::vector<std::vector<sched::Action>>> zb_heuristic(
    const ListProblem& problem, const ZbPolicy& policy);

}  // namespace pipewright::sim::synthesis
