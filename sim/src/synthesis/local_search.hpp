// Private: the local search that follows Auto's candidates (Note [Local search]).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "synthesis/list_scheduler.hpp"

namespace pipewright::sim::synthesis {

// Per-rank orders timed on the list scheduler's clock (each pass at its earliest start in its
// rank's order; a message costs problem.message_ns).
struct Replay {
  std::int64_t step_ns = -1;  // the last pass's end; -1 when the orders wait on each other
  std::int64_t span_ns =
      -1;  // the longest span of a rank, its first pass's start to its last's end
};
// O(actions).
[[nodiscard]] Replay replay(const ListProblem& problem,
                            const std::vector<std::vector<sched::Action>>& orders);

// What the local search shortens first: the step (then the span), or the span (then the step).
enum class SearchObjective : std::uint8_t { kStep, kSpan };

// Note [Local search]: swaps of adjacent passes of one rank where one of them is a W (a W moved
// earlier frees activation sooner, moved later fills a gap), kept when the replay gets better
// under `objective` and every rank stays under its cap (problem.cap, activation held from F, part
// freed by I, the rest by W); first improvement, rounds until none improves, at most
// `max_evaluations` replays and never past `deadline`. Returns the improved orders (the input
// when nothing improved).
[[nodiscard]] std::vector<std::vector<sched::Action>> improve(
    const ListProblem& problem, std::vector<std::vector<sched::Action>> orders,
    SearchObjective objective, std::int64_t max_evaluations,
    std::chrono::steady_clock::time_point deadline);

}  // namespace pipewright::sim::synthesis
