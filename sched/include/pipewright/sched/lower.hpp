// Lowering: from a compute-only plan to a plan with the point-to-point communication.
//
// `lower()` is a pure function. It runs, in order:
//   1. merge_iw (optional): an I immediately followed by the W of the same (stage, microbatch)
//      becomes one B (torch's `_merge_bw`);
//   2. reduce_grad (optional): REDUCE_GRAD of a stage right after the stage's last B or W
//      (torch's `_add_reduce_grad`);
//   3. send/recv insertion (torch's `_add_send_recv`, generalised to stage DAGs), see
//      Note [Where SEND and RECV go];
//   4. optimizer_step (optional): OPTIM of each local stage, ascending, at the end of each rank.
//
// Note [Where SEND and RECV go]: the ranks' compute lists are replayed in lock-step rounds (rank
// 0, 1, ..., p-1 per round; a rank takes its next action when the action's inputs are available:
// each remote producer's RECV already placed, each local producer already computed). When a
// forward (backward: B or I) of stage s is taken, one SEND per consumer (producer) stage on
// another rank is appended right after it, and the matching RECV is appended at that moment to
// the end of the peer rank's list. So every SEND directly follows the compute that produced its
// data, and every RECV sits at or before the compute that needs it, where the peer had produced
// the data in the round-by-round replay. Stages on the same rank exchange in memory (no action).
// Because every rank's list is a sub-sequence of one global order in which each SEND is directly
// followed by its RECV, the lowered plan is deadlock-free both with buffered sends and with
// rendezvous sends (a SEND blocks until its RECV is posted), with blocking RECVs.
#pragma once

#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

struct LowerOptions {
  bool merge_iw = false;        // merge adjacent I+W of the same (stage, mb) into B
  bool reduce_grad = false;     // REDUCE_GRAD after each stage's last backward
  bool optimizer_step = false;  // OPTIM per stage at the end of each rank's list
};

// Throws InvalidPlanError if the plan's shape is inconsistent (action on a rank that does not own
// its stage, stage or microbatch out of range) or if its ranks wait for each other in a cycle
// (then no order of communication can run it; the message names the waiting actions).
[[nodiscard]] LoweredPlan lower(const ComputePlan& plan, const LowerOptions& options = {});

// The compute-only view of a lowered plan: drops SEND_*/RECV_* (keeps REDUCE_GRAD / OPTIM).
[[nodiscard]] ComputePlan compute_only(const LoweredPlan& plan);

}  // namespace pipewright::sched
