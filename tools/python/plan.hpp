// The Python module's plan object: a compute-only or lowered plan (sched::AnyPlan).
#pragma once

#include "pipewright/sched/plan_io.hpp"

namespace pipewright::python {

struct Plan {
  sched::AnyPlan plan;
};

}  // namespace pipewright::python
