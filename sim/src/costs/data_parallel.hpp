// Communication cost helpers of the engine: point-to-point messages between pipeline ranks and
// the data-parallel group of a pipeline rank (which link its collectives use).
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sched/plan_dag.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// Time of one message on a stage edge. Precedence: --p2p-ms, then the profile's measured p2p,
// then the cluster link between the two ranks' nodes. With dp > 1 replicas the slowest replica's
// link is used (replicas run in lock step through their gradient all-reduce).
[[nodiscard]] std::int64_t p2p_message_ns(const sched::PlanShape& shape,
                                          const sched::CostTable& costs, const Cluster& cluster,
                                          const SimOptions& options, const sched::StageEdge& edge,
                                          std::int64_t bytes);

// Bytes on the wire of a gradient reduction of `fp32_bytes` of fp32 gradients in the reduce dtype
// (DataParallelOptions::reduce_dtype), and whether DiLoCo's outer all-reduce sends bf16
// (--outer-dtype bf16, or a bf16 reduce dtype).
[[nodiscard]] std::int64_t gradient_wire_bytes(std::int64_t fp32_bytes,
                                               const DataParallelOptions& options) noexcept;
[[nodiscard]] bool outer_bf16(const DataParallelOptions& options) noexcept;

struct DpGroup {
  Link link;  // intra_node when all replicas of the pipeline rank share a node, else inter_node
  bool spans_nodes = false;
};
[[nodiscard]] DpGroup dp_group(const Cluster& cluster, std::int32_t pipeline_rank, std::int32_t pp,
                               std::int32_t dp);

// The link of ZeRO's reduce-scatters or all-gathers in `group` (Note [Unregistered collectives]
// in network/network_model.cpp): ZeRO-1/2 run them on registered buffers, ZeRO-3 on private
// ones; the cluster's sharded_collective_links entry, else the group's collective link.
[[nodiscard]] const Link& zero_link(const Cluster& cluster, const DpGroup& group,
                                    ShardedCollective what, std::int32_t zero_stage) noexcept;

struct DdpBucketPlan {
  std::vector<std::int64_t> bytes;             // per bucket, launch order
  std::vector<std::int64_t> cumulative_bytes;  // bytes of buckets 0..b
};
// The stage's DDP buckets (sched::assign_buckets over param_sizes_bytes, or one tensor of
// param_bytes when the sizes are unknown).
[[nodiscard]] DdpBucketPlan ddp_buckets(const sched::StageCost& stage,
                                        const DataParallelOptions& options);

// Data-parallel bytes one replica sends per step (SimResult::dp_wire_bytes_per_step): DDP's
// all-reduce of every parameter each step, LocalSGD's every localsgd_frequency steps, SlowMo's
// reduce + broadcast on slow steps, DiLoCo's all-reduce of one fragment every sync_every /
// fragments steps (1/H of DDP's in all, half that in bf16); gradient reductions (DDP, DiLoCo) in
// the reduce dtype.
[[nodiscard]] double dp_wire_bytes_per_step(const sched::CostTable& costs,
                                            const DataParallelOptions& options);
// DDP and ZeRO per plan stage (Note [ZeRO in the simulator] in engine_dp.cpp), ring collectives,
// (d - 1) / d of the bytes each: stage 0 2 G (all-reduce); 1 G + P; 2 b G + P; 3 b G + u P, with
// G the gradient bytes in the reduce dtype, P the fp32 parameter bytes, b the stage's backwards
// that complete weight gradients (B or W) per step and u its UNSHARDs per step.
[[nodiscard]] std::vector<double> dp_wire_bytes_per_stage(const sched::LoweredPlan& plan,
                                                          const sched::CostTable& costs,
                                                          const DataParallelOptions& options);

}  // namespace pipewright::sim
