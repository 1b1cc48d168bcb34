// What `pipewright launch` cleans up after its ranks (cmd_launch.cpp): the POSIX shared memory a
// rank killed inside a shared-memory handshake left in /dev/shm (issue 44).
#pragma once

#include <string>
#include <vector>

namespace pipewright::cli {

// Note [Shared-memory names] (exec/src/gloo/shm_collectives.hpp): pipewright names its POSIX
// shared memory "/pipewright-<job>-r<world rank>-..."; removes those of `ranks` of job `job_id`
// in /dev/shm (nothing of another job or node). Returns how many it removed.
int remove_job_shared_memory(const std::string& job_id, const std::vector<int>& ranks);

}  // namespace pipewright::cli
