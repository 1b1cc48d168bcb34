// Plan validation: every problem of a plan, not just the first.
//
// Compute-only plans (ComputePlan):
//   - shape: one list per rank, placement of every stage on a rank in range, stage edges in range
//     and acyclic, microbatches >= 1;
//   - every action's stage is in range and placed on the rank whose list holds it; microbatch in
//     range; no SEND/RECV;
//   - per (stage, microbatch): exactly one F, and either exactly one B or exactly one I and one W
//     (never B together with I or W);
//   - order on the owning rank: F before B / I, I before W; REDUCE_GRAD (at most one per stage)
//     after the stage's last B / W; OPTIM (at most one per stage) after all of them;
//   - when all of the above hold: the ranks do not wait for each other in a cycle (a forward
//     needs its producers' forwards, a backward its consumers' backwards); a cycle is reported
//     with its chain of waiting actions.
// Lowered plans (LoweredPlan) additionally:
//   - SEND_F / RECV_B only towards a consumer stage, RECV_F / SEND_B only towards a producer stage,
//     and only between stages on different ranks;
//   - every SEND has exactly one matching RECV (peer's stage, same microbatch and direction) on
//     the peer's rank, and vice versa;
//   - a SEND comes after the compute that produced its data; a forward (backward) comes after the
//     RECV_F (RECV_B) of every remote producer (consumer) and after the forward (backward) of
//     every local producer (consumer).
// Deadlocks of lowered plans (which depend on the transport) are found by dry_run() (deadlock.hpp).
#pragma once

#include <string>
#include <vector>

#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

struct Diagnostic {
  std::string message;
  int rank = -1;  // -1: not tied to one rank
  int step = -1;  // index into the rank's list; -1: not tied to one step
  friend bool operator==(const Diagnostic& a, const Diagnostic& b) noexcept {
    return a.message == b.message && a.rank == b.rank && a.step == b.step;
  }
};

// "rank 1, step 4: <message>" (or just the message when rank / step are -1).
[[nodiscard]] std::string to_string(const Diagnostic& diagnostic);

// "\n  <diagnostic>" for at most `max_shown` diagnostics, then "\n  ... and N more (not shown)":
// a broken plan can have millions of problems, and a message must stay readable.
[[nodiscard]] std::string format_diagnostics(const std::vector<Diagnostic>& diagnostics,
                                             std::size_t max_shown = 20);

// All problems, ordered by (rank, step) as found; empty means valid. At most the first 1000 are
// kept, then one last diagnostic (rank and step -1) counting the others.
[[nodiscard]] std::vector<Diagnostic> validate(const ComputePlan& plan);
[[nodiscard]] std::vector<Diagnostic> validate(const LoweredPlan& plan);

// Throws InvalidPlanError listing every diagnostic (one per line) when there is any; `origin`
// (a file name or a description) starts the message.
void check_valid(const ComputePlan& plan, const std::string& origin = "plan");
void check_valid(const LoweredPlan& plan, const std::string& origin = "plan");

}  // namespace pipewright::sched
