// Private: the local search that follows Auto's candidates (Note [Local search]).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "synthesis/list_scheduler.hpp"

namespace pipewright::sim::synthesis {

// The step of per-rank orders on the list scheduler's clock (each pass at its earliest start in
// its rank's order; a message costs problem.message_ns), or -1 when the orders wait on each
// other in a cycle. O(actions).
[[nodiscard]] std::int64_t replay_ns(const ListProblem& problem,
                                     const std::vector<std::vector<sched::Action>>& orders);

// Note [Local search]: swaps of adjacent passes of one rank where one of them is a W (a W moved
// earlier frees activation sooner, moved later fills a gap), kept when the replayed step gets
// shorter and every rank stays under its cap (problem.cap, activation held from F to W);
// first improvement, rounds until none improves, at most `max_evaluations` replays and never past
// `deadline`. Returns the improved orders (the input when nothing improved).
[[nodiscard]] std::vector<std::vector<sched::Action>> improve(
    const ListProblem& problem, std::vector<std::vector<sched::Action>> orders,
    std::int64_t max_evaluations, std::chrono::steady_clock::time_point deadline);

}  // namespace pipewright::sim::synthesis
