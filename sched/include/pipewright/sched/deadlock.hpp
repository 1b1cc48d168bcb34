// Deadlock detection: an untimed dry run of a lowered plan under a transport model.
//
// Every rank executes its list in order. Compute actions, REDUCE_GRAD and OPTIM never block (their
// local order is validate()'s business). A RECV blocks until its SEND has run. A SEND:
//   - kBuffered: never blocks (isend into an unbounded buffer: Gloo, MPI_Isend, torch's
//     batch_isend_irecv without waiting);
//   - kRendezvous: blocks until the peer has reached the matching RECV, and both complete together
//     (NCCL, blocking MPI_Ssend).
// When no rank can move and some have not finished, the plan deadlocks; the report names the
// waiting cycle as `rank:action -> rank:action -> ...` (or a chain ending at a rank that already
// finished, when a message is never sent) and draws the rank x step grid with the stuck cells
// marked.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

enum class Transport : std::uint8_t { kBuffered, kRendezvous };

[[nodiscard]] std::string_view to_string(Transport transport) noexcept;  // "buffered", ...
// Case-insensitive "buffered" or "rendezvous"; throws ConfigError naming the valid values.
[[nodiscard]] Transport parse_transport(std::string_view name);

struct StuckRank {
  int rank = -1;
  int step = -1;       // index of the blocking action in the rank's list
  Action action;       // the blocking SEND / RECV
  int waits_for = -1;  // the rank that must act first
};

struct DeadlockReport {
  bool ok = true;
  Transport transport = Transport::kBuffered;
  std::vector<StuckRank> stuck;  // every blocked rank, ascending; empty when ok
  std::string cycle;             // "0:1SEND_F1 -> 1:1SEND_B0 -> 0:1SEND_F1"; empty when ok
  std::string grid;              // rank x step grid, stuck cells as [action]; empty when ok
  [[nodiscard]] std::string message() const;  // one paragraph: cycle then grid
};

// Precondition: every action's stage and peer stage are in range and the placement is valid
// (validate() reports nothing about them); otherwise throws InvalidPlanError.
[[nodiscard]] DeadlockReport dry_run(const LoweredPlan& plan, Transport transport);

}  // namespace pipewright::sched
