// The C++ half of the Python module `pipewright` (module `pipewright._pipewright`; the Python
// package in pipewright/ wraps it). Each bind_* adds one area's classes and functions; every
// function calls the same library functions as the matching CLI subcommand (tools/cli/cmd_*.cpp),
// so the module and the CLI give the same results for the same inputs.
#pragma once

#include <pybind11/pybind11.h>

namespace pipewright::python {

void bind_errors(pybind11::module_& m);
void bind_graph(pybind11::module_& m);  // Model, Partition, generators, partition, render
void bind_plan(pybind11::module_& m);   // Plan, schedule, validate
void bind_sim(pybind11::module_& m);    // simulate

}  // namespace pipewright::python
