// Schedule generators: torch.distributed.pipelining's schedules as pure functions from a shape to
// a ComputePlan.
//
// For every name and shape torch accepts, the per-rank compute order is exactly the order torch
// executes (its `pipeline_order` with the None bubbles dropped); shapes torch rejects are rejected
// with ConfigError carrying torch's reason. docs/schedules.md lists the rules per schedule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {

enum class ScheduleKind : std::uint8_t {
  kGPipe,                  // "GPipe": fill-drain, one stage per rank
  k1F1B,                   // "1F1B": warm-up, one forward one backward, cool-down
  kInterleaved1F1B,        // "Interleaved1F1B": v stages per rank, depth first
  kLoopedBFS,              // "LoopedBFS": v stages per rank, breadth first
  kInterleavedZeroBubble,  // "InterleavedZeroBubble": ZB-H1, backward split into I and W
  kZBVZeroBubble,          // "ZBVZeroBubble": ZB-V, V placement (2 stages per rank), F I W
  kDualPipeV,              // "DualPipeV": DeepSeek's DualPipe, V variant, OVERLAP_F_B units
  kChimera,                // "Chimera": two pipelines in opposite directions (Li & Hoefler)
  kZBH2,                   // "ZBH2": the Zero Bubble paper's ZB-H2, (2P-1) microbatches in flight
};

// Case-insensitive, torch's spellings ("gpipe", "1f1b", "Interleaved1F1B", ...). Throws
// ConfigError listing the valid names.
[[nodiscard]] ScheduleKind parse_schedule_kind(std::string_view name);
// torch's spelling, e.g. "Interleaved1F1B".
[[nodiscard]] std::string_view to_string(ScheduleKind kind) noexcept;
// All kinds, in declaration order (tests and help texts iterate over it).
[[nodiscard]] const std::vector<ScheduleKind>& all_schedule_kinds();
// "GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, ...".
[[nodiscard]] std::string schedule_kind_names();

// Placement per kind: GPipe, 1F1B, ZBH2: stage s on rank s; Interleaved1F1B, LoopedBFS,
// InterleavedZeroBubble: rank s mod P (looping); ZBVZeroBubble, DualPipeV: 2P stages, rank r holds
// r and 2P-1-r (v_placement; stages_per_rank must be 2); Chimera: stages_per_rank must be 1 (the
// model has P stages), the plan has 2P stages in V placement, plan stages 0..P-1 the down pipeline
// (model stages 0..P-1), P..2P-1 the up pipeline (plan stage P+i runs model stage i), edges the
// two chains, microbatches split per Note [Stage replicas] (plan.hpp): the down pipeline runs
// microbatches [0, ceil(M/2)), the up pipeline [ceil(M/2), M).
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int ranks = 1;
  int microbatches = 1;
  int stages_per_rank = 1;
  // Stage dependency DAG over ranks * stages_per_rank stages; empty = the chain 0 -> 1 -> ...
  // GPipe and 1F1B accept any DAG; the looped schedules (torch's are written for the chain)
  // accept a DAG whose every edge goes from a lower to a higher stage (the chain plus skip
  // connections): Note [Looped schedules over a stage DAG] in schedule.cpp.
  std::vector<StageEdge> stage_edges;
  // Inference / evaluation: the schedule's order with every backward (B, I, W) dropped and each
  // OVERLAP_F_B unit replaced by its forward; GPipe and 1F1B give rF0..rF(M-1) on every rank
  // (torch's _ScheduleForwardOnly, DeepSpeed's InferenceSchedule) for any M >= 1.
  bool forward_only = false;
};

// True for the schedules with V placement and 2P plan stages (ZBVZeroBubble, DualPipeV, Chimera).
[[nodiscard]] bool is_v_shaped(ScheduleKind kind) noexcept;
// The stages_per_rank a kind requires (1 for GPipe / 1F1B / Chimera, 2 for ZBV / DualPipeV), or 0
// when any value is accepted (the looped schedules).
[[nodiscard]] int required_stages_per_rank(ScheduleKind kind) noexcept;

// Generates the plan (placement above). Throws ConfigError for shapes torch rejects (e.g. 1F1B
// with microbatches < ranks, interleaved schedules when microbatches is not a multiple of the
// number of rounds, DualPipeV with microbatches < 2 x ranks, V schedules without 2 stages per
// rank), Chimera with an odd number of ranks or a stage DAG, ZBH2 with V != 1 or a stage DAG,
// non-positive sizes, and stage_edges that are out of range or cyclic.
[[nodiscard]] ComputePlan generate(const ScheduleSpec& spec);

// Checks a stage DAG over `stages` stages: endpoints in range, no self loops, no duplicates, no
// cycle. Throws ConfigError naming the offending edge or the stages on the cycle.
void check_stage_edges(const std::vector<StageEdge>& edges, std::int32_t stages);

}  // namespace pipewright::sched
