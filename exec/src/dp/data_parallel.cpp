#include "pipewright/exec/data_parallel.hpp"

namespace pipewright::exec {

int replicas_per_node(int procs_per_node, int pp) noexcept {
  if (procs_per_node > 1 && pp >= 1 && procs_per_node % pp == 0) return procs_per_node / pp;
  return 1;
}

}  // namespace pipewright::exec
