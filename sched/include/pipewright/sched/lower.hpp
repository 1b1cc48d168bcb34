// Lowering: from a compute-only plan to a plan with the point-to-point communication.
//
// `lower()` is a pure function. It runs, in order:
//   1. merge_iw (optional): an I immediately followed by the W of the same (stage, microbatch)
//      becomes one B (torch's `_merge_bw`);
//   2. reduce_grad (optional): REDUCE_GRAD of a stage right after the stage's last B or W
//      (torch's `_add_reduce_grad`);
//   3. send/recv insertion, see Note [Where SEND and RECV go];
//   4. optimizer_step (optional): OPTIM of each local stage, ascending, at the end of each rank.
//
// Note [Where SEND and RECV go]: one SEND per (stage edge between different ranks, microbatch,
// direction), with the matching RECV on the peer's rank; stages on the same rank exchange in
// memory (no action). Every SEND directly follows the compute that produced its data (F for
// SEND_F, B or I for SEND_B). RECVs are placed by `recv_placement`:
//   - kJustInTime (default): each RECV right before the compute that needs it, then pulled
//     earlier only where rendezvous sends would otherwise deadlock: the plan is dry-run with
//     rendezvous sends and blocking receives, and whenever every rank is stuck, the RECV matching
//     the SEND of the lowest stuck sending rank is moved to where its rank is stuck (the classic
//     case is 1F1B's steady state, where rank r sends F(k) while rank r+1 sends B(j)). The
//     sending rank has already computed that data, so the early RECV costs no waiting with
//     buffered sends either. This is what the executor (isend + blocking recv) wants: a rank never
//     blocks on data it does not need yet.
//   - kTorchRounds: torch's `_add_send_recv`: the ranks' compute lists are replayed in lock-step
//     rounds (rank 0..p-1 per round; a rank takes its next action when the action's inputs are
//     available); when a producing compute is taken, the RECV is appended at that moment to the
//     end of the peer rank's list, which may be well before the compute that needs it (torch
//     posts RECVs as non-blocking irecv, so early placement costs it nothing).
// Both placements give plans that are deadlock-free with buffered sends and with rendezvous sends
// (blocking receives in both cases); tests/sched checks it over the whole shape grid.
#pragma once

#include <cstdint>

#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

enum class RecvPlacement : std::uint8_t { kJustInTime, kTorchRounds };

struct LowerOptions {
  bool merge_iw = false;        // merge adjacent I+W of the same (stage, mb) into B
  bool reduce_grad = false;     // REDUCE_GRAD after each stage's last backward
  bool optimizer_step = false;  // OPTIM per stage at the end of each rank's list
  RecvPlacement recv_placement = RecvPlacement::kJustInTime;
};

// Throws InvalidPlanError if the plan's shape is inconsistent (action on a rank that does not own
// its stage, stage or microbatch out of range) or if its ranks wait for each other in a cycle
// (then no order of communication can run it; the message names the waiting actions).
[[nodiscard]] LoweredPlan lower(const ComputePlan& plan, const LowerOptions& options = {});

// The compute-only view of a lowered plan: drops SEND_*/RECV_* (keeps REDUCE_GRAD / OPTIM).
[[nodiscard]] ComputePlan compute_only(const LoweredPlan& plan);

}  // namespace pipewright::sched
