// Private helpers shared by validate.cpp, deadlock.cpp, lower.cpp and plan_render.cpp. The
// dependency rules themselves are public: pipewright/sched/plan_dag.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sched/plan_dag.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {

namespace detail {

// Untimed run of a compute-only plan whose counts and placement are valid: a rank takes its next
// action when the producers' forwards (for F) or the consumers' backwards (for B / I) have run
// anywhere. Returns one diagnostic naming the cycle of waiting actions, or nothing.
std::vector<Diagnostic> compute_dry_run(const PlanShape& shape,
                                        const std::vector<std::vector<Action>>& per_rank);

}  // namespace detail
}  // namespace pipewright::sched
