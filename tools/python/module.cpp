// pipewright._pipewright: the compiled part of the Python module (docs/library.md).
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "pipewright/graph/version.hpp"

PYBIND11_MODULE(_pipewright, m) {
  m.doc() = "pipewright's graph, sched and sim libraries (use the `pipewright` package)";
  pipewright::python::bind_errors(m);
  pipewright::python::bind_graph(m);
  pipewright::python::bind_plan(m);
  pipewright::python::bind_sim(m);
}
