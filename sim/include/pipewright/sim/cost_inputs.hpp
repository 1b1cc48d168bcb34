// Ways to obtain the per-stage cost table (sched::CostTable) the simulator consumes:
//   (a) what-if numbers from the command line (what_if_costs),
//   (b) a model and its partition from graph/ (costs_from_partition),
//   (c) an executor profile (sched::load_costs), which needs no conversion.
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"

namespace pipewright::sim {

// Each vector holds one value (used for every stage) or one value per stage.
struct WhatIfCosts {
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;  // the full backward B (= I + W)
  std::vector<double> weight_ms;    // optional: W; then I = backward - weight
  std::int64_t activation_bytes = 0;
  std::int64_t param_bytes = 0;
  std::int64_t output_bytes = 0;
};

// Throws ConfigError naming the flag (--forward-ms ...) for a wrong count, a negative or NaN
// value, or a weight time larger than the backward time.
[[nodiscard]] sched::CostTable what_if_costs(const WhatIfCosts& what_if, std::int32_t stages);

// Stage costs of a partition: StageInfo sums, plus per-node parameter sizes (registration order
// = node order within the stage) for DDP bucketing. Throws InvalidGraphError when the partition
// was not made for `model`.
[[nodiscard]] sched::CostTable costs_from_partition(const graph::Model& model,
                                                    const graph::Partition& partition);

}  // namespace pipewright::sim

namespace pipewright::sim {

// Note [Profile transfer]: predicts the stage costs of partition `to` from an executor profile
// measured on partition `from` of the same model, before running `to`. Each measured stage's
// F, B, I, W times are spread over its nodes in proportion to the model's cost annotations
// (graph/ FLOP formulas), which fixes the per-node scale the host actually achieves; the
// optimizer time is spread in proportion to parameter bytes, and the measured activation bytes
// (Note [Measured activation memory] in exec/) in proportion to the model's activation
// estimates. The nodes of each stage of `to` then sum these per-node values. Distributions
// (p10/p90) keep the relative spread of the source stages, weighted by their share. Other byte
// sizes come from `to` (costs_from_partition); first stages' I and W follow Note [Input
// gradients of first stages] (sim/src/cost_inputs.cpp). p2p, comm_overhead_ms,
// compute_overhead_ms, runtime_memory_bytes, cores_per_node, p2p_uses_core and the correlations
// are copied from the profile; measured peak memory is dropped (it belonged to other ranks). Throws
// InvalidGraphError when a partition does not belong to `model`, ConfigError when the profile's
// stage count differs from `from`.
[[nodiscard]] sched::CostTable transfer_profile(const graph::Model& model,
                                                const graph::Partition& from,
                                                const sched::CostTable& measured,
                                                const graph::Partition& to);

}  // namespace pipewright::sim
