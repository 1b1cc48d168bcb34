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
//
// Note [Where UNSHARD and RESHARD go] (issue 43, ZeRO-3; Note [UNSHARD and RESHARD] in action.hpp):
// place_shards() is a pure pass over a plan's rank lists that wraps every compute action of a
// stage in an UNSHARD..RESHARD window. Every policy puts a window's RESHARD right after the last
// compute (the whole OVERLAP_F_B unit) it covers. kStep puts a window's UNSHARD one compute
// earlier than its first compute (a prefetch: the all-gather overlaps that compute; not when the
// stage is gathered there already, nor before a rank's first compute); kCompute right before its
// first compute; kTorch right before the compute whose look-ahead takes the stage in; kFit as
// kStep, or (below) prefetching where the limit allows. Per step and stage of a rank with
// m microbatches (F and B each, or F, I, W):
//   kStep     one window from the stage's first to its last compute of the step: 1 all-gather
//             (the fewest), the stage's parameters gathered most of the step;
//   kCompute  one window per compute action (FSDP's reshard_after_forward, and after each
//             backward), no prefetch: 2m all-gathers (3m with split backward), each exposed, the
//             stage gathered only while it computes: the least memory;
//   kTorch    torch's _add_unshard_reshard: before each compute, the first `lookahead` (torch: 3)
//             distinct stages of the rank's compute from here on are gathered, others resharded;
//             at the end of the list every gathered stage is resharded;
//   kFit      (default) pipewright's: kStep when it fits the memory limit (ShardFit, memory.hpp;
//             no limit or no costs: kStep); otherwise, per rank, starting from kCompute's
//             windows, the two consecutive windows of a stage with the shortest gap between them
//             are merged, one merge at a time, as long as the rank's peak (peak_memory) stays
//             within the limit, then each window prefetches where the peak still fits: the fewest
//             all-gathers this greedy search finds whose peak fits. A merge only holds more
//             (the list loses a RESHARD and an UNSHARD; every point between them holds the stage
//             too), so a merge that did not fit never fits after others: it is tried once.
//             When even kCompute's windows do not fit they are the plan (the least memory, no
//             merge tried), and the peak says by how much it is over.
// A stage's gradients are reduce-scattered after every backward (ZeRO-2's rule) whatever the
// placement; the all-gathers are the part the placement chooses. The pass drops the plan's
// UNSHARD / RESHARD before placing its own; make_plan only calls it for a plan that has none
// (a plan file with them runs as written).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

enum class ShardPlacement : std::uint8_t { kFit, kStep, kCompute, kTorch };
// "fit", "step", "compute", "torch"; anything else is a ConfigError naming --shard-placement.
[[nodiscard]] ShardPlacement parse_shard_placement(std::string_view name);
[[nodiscard]] std::string_view to_string(ShardPlacement placement) noexcept;

struct ShardFit;       // memory.hpp: the cost table, memory options and limit kFit places against
struct CostTable;      // costs.hpp
struct MemoryOptions;  // memory.hpp

// Note [Where UNSHARD and RESHARD go]. `lookahead` is kTorch's max_active_stages (>= 1, else
// ConfigError). `fit` may be null (kFit then places as kStep).
[[nodiscard]] LoweredPlan place_shards(LoweredPlan plan, ShardPlacement placement,
                                       const ShardFit* fit = nullptr, int lookahead = 3);
[[nodiscard]] ComputePlan place_shards(ComputePlan plan, ShardPlacement placement,
                                       const ShardFit* fit = nullptr, int lookahead = 3);
// Note [Plan peaks]: the peaks of one plan under many cost tables and memory options (a search
// asks for thousands). The rank lists are read once into the actions whose memory change may be
// nonzero (all but SEND / RECV), each an index into the plan's distinct (kind, stage) pairs, with
// the stages gathered around it under kCompute; a peak is then a walk over those indices with the
// changes of the few pairs computed once. Leaving SEND / RECV out is exact when their change is
// zero and no action's change ends above zero (then the check point of an action without change
// is never above the one before it); the walk checks both on each call and otherwise walks the
// plan itself. The plan must outlive this object.
class PlanPeaks {
 public:
  explicit PlanPeaks(const LoweredPlan& plan);
  // The largest rank's peak_memory(plan, costs, memory) RankMemory::peak_bytes (0 without
  // ranks). Throws what MemoryModel throws (costs that do not match the plan's stages).
  [[nodiscard]] std::int64_t peak_bytes(const CostTable& costs, const MemoryOptions& memory) const;
  // The same of place_shards(plan, kCompute) without building it: the least any placement of
  // ZeRO-3's all-gathers holds (each stage gathered only while it computes; Note [Incremental
  // peak] in shard.cpp).
  [[nodiscard]] std::int64_t compute_placement_peak_bytes(const CostTable& costs,
                                                          const MemoryOptions& memory) const;

 private:
  struct Pair {
    ActionKind kind;
    std::int32_t stage;
  };
  const LoweredPlan& plan_;
  std::vector<Pair> pairs_;    // the distinct (kind, stage) of the actions kept
  std::vector<Pair> dropped_;  // the distinct (kind, stage) of the SEND / RECV left out
  std::vector<std::vector<std::uint32_t>> lists_;     // per rank: its actions kept
  std::vector<std::vector<std::uint32_t>> unplaced_;  // per rank: the same without shard actions
  std::vector<std::vector<std::uint32_t>> gathers_;   // per unplaced_ entry: index into gathered_
  std::vector<std::vector<std::int32_t>> gathered_;   // stage sets; [0] is the empty one
};

// Whether any rank list holds an UNSHARD or RESHARD.
[[nodiscard]] bool has_shard_actions(const std::vector<std::vector<Action>>& per_rank) noexcept;

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
