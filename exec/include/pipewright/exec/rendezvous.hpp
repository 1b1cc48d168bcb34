// Where this process sits in the job (WorldInfo), resolved from command-line flags and the
// variables of the launchers pipewright interoperates with, and the rendezvous barrier that
// every rank passes before building a communicator.
//
// Sources, in precedence order (a field comes from the first source that sets it):
//   1. flags            --rank, --world-size, --local-rank, --local-world-size, --master-addr/port
//   2. torchrun         RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//                       (also what `pipewright launch` sets)
//   3. Open MPI         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//                       OMPI_COMM_WORLD_LOCAL_SIZE
//   4. PMI (MPICH)      PMI_RANK, PMI_SIZE
//   5. Slurm            SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID; the master
//                       address is the first host of SLURM_JOB_NODELIST (or SLURM_NODELIST)
//                       when it lists several, local world size SLURM_TASKS_PER_NODE's count
//                       for this node
// The node rank comes from GROUP_RANK (torchrun) or SLURM_NODEID (Slurm), default 0.
// Two present sources that give different values for the same field are a ConfigError naming
// both (e.g. RANK=1 under mpirun with OMPI_COMM_WORLD_RANK=0): a job whose ranks disagree on who
// they are would deadlock or corrupt results later. Without any source the process is rank 0 of
// a world of 1. local_rank defaults to rank and local_world_size to world_size (one node);
// master_addr to 127.0.0.1 and master_port to 29500. The job id comes from --job-id, else
// PIPEWRIGHT_JOB_ID.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pipewright::exec {

class Store;

struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int node_rank = 0;
  // The job's identity at the rendezvous (Note [Store protocol]): --job-id, else
  // PIPEWRIGHT_JOB_ID (set by `pipewright launch`); empty if neither.
  std::string job_id;
  // The sources that supplied any field, in precedence order ("flags, torchrun"); empty if none.
  std::string sources;
};

// Explicit values from the command line (highest precedence); unset fields are looked up.
struct WorldFlags {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> job_id;
};

using EnvMap = std::map<std::string, std::string>;

// A copy of this process's environment (environ).
[[nodiscard]] EnvMap current_environment();

// Resolves the world from `flags` and `env` (see the top of this file). Throws ConfigError for
// disagreeing sources, non-integer values (naming the variable), rank >= world_size,
// local_rank >= local_world_size, world_size < 1 or a port outside [1, 65535].
[[nodiscard]] WorldInfo resolve_world(const WorldFlags& flags, const EnvMap& env);

// The rendezvous barrier: each rank sets "<prefix>/joined/<rank>" in `store`, then waits until
// every rank's key exists. On expiry throws TimeoutError listing the ranks that never joined
// ("rendezvous timed out after 5000 ms: ranks [2] never joined (world size 4)"). A rank whose
// store connection closes before the rendezvous completes (it died) ends it at once with a
// PeerError naming that rank.
void rendezvous(Store& store, const WorldInfo& world, std::chrono::milliseconds timeout,
                const std::string& prefix = "pipewright");

// A TCP port on 127.0.0.1 that was free a moment ago, chosen at random in 20000-32767 (below
// Linux's ephemeral range, so outgoing connections do not take it). For tests and single-host
// launches; BackendError if no port there can be bound.
[[nodiscard]] int find_free_port();

}  // namespace pipewright::exec
