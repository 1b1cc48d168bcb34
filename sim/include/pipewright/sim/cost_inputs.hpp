// Ways to obtain the per-stage cost table (sched::CostTable) the simulator consumes:
//   (a) what-if numbers from the command line (what_if_costs),
//   (b) a model and its partition from graph/ (sched::costs_from_partition, costs.hpp),
//   (c) an executor profile (sched::load_costs), which needs no conversion;
// and the one choice among them that `pipewright simulate` and the Python package's simulate()
// both make (stage_costs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::sim {

// Each vector holds one value (used for every stage) or one value per stage.
struct WhatIfCosts {
  std::vector<double> forward_ms;
  std::vector<double> backward_ms;  // the full backward B (= I + W)
  std::vector<double> weight_ms;    // optional: W; then I = backward - weight
  std::int64_t activation_bytes = 0;
  std::int64_t param_bytes = 0;
  std::int64_t output_bytes = 0;
  // Note [Weight-gradient activation] (sched/memory.hpp): the share of the activation W keeps
  // after I, one value or one per stage; empty: absent (1).
  std::vector<double> weight_grad_keeps;
};

// Throws ConfigError naming the flag (--forward-ms ...) for a wrong count, a negative or NaN
// value, or a weight time larger than the backward time.
[[nodiscard]] sched::CostTable what_if_costs(const WhatIfCosts& what_if, std::int32_t stages);

// Sets every stage's StageCost::weight_grad_keeps from `shares` (one value or one per stage of
// `table`; empty: leaves the table as it is). Throws ConfigError naming --weight-grad-keeps for a
// wrong count or a value outside [0, 1].
void set_weight_grad_keeps(sched::CostTable& table, const std::vector<double>& shares);

// Where a simulation's stage costs come from: exactly one of what-if numbers (forward_ms or
// backward_ms given), a model with the partition the plan runs, an executor profile file, or a
// table the caller already has (`report --measured` takes it from the measured trace).
struct CostSources {
  WhatIfCosts what_if;
  const graph::Model* model = nullptr;
  const graph::Partition* partition = nullptr;  // required with `model`
  std::string profile_path;
  std::optional<sched::CostTable> table;
  std::optional<double> compute_overhead_ms;  // replaces the source's compute_overhead_ms
  // The job's precision: a profile measured at another is refused (check_profile_precision).
  std::optional<sched::Precision> precision;
  // How many of the sources are given (what-if, model, profile, table).
  [[nodiscard]] int given() const noexcept;
};

// The stage costs of a plan of `shape` from the one source given: the profile as read, the
// partition's estimates (sched::costs_from_partition), the table, or the what-if numbers for
// each model stage (Chimera's replicas share their model stage's costs: replica_costs). Throws
// ConfigError unless exactly one source is given, or a profile measured at another precision than
// `sources.precision`, and what the source's reader throws. Byte figures stay at the table's
// precision (CostTable::precision); the memory model and the simulator scale them to the job's.
[[nodiscard]] sched::CostTable stage_costs(const CostSources& sources,
                                           const sched::PlanShape& shape);

}  // namespace pipewright::sim

namespace pipewright::sim {

// Note [Profile transfer]: predicts the stage costs of partition `to` from an executor profile
// measured on partition `from` of the same model, before running `to`. Each measured stage's
// F, B, I, W times are spread over its nodes in proportion to the model's cost annotations
// (graph/ FLOP formulas), which fixes the per-node scale the host actually achieves; the
// optimizer time is spread in proportion to parameter bytes, and the measured activation bytes
// (Note [Measured activation memory] in exec/) in proportion to the model's activation
// estimates. The nodes of each stage of `to` then sum these per-node values. Distributions
// (p10/p90, quantiles, mean) keep the relative spread of the source stages, weighted by their
// share. Parameter tensors and message sizes come from the profile (Note [Measured bytes in
// transfers] in sim/src/costs/cost_inputs.cpp), other byte sizes from `to`
// (sched::costs_from_partition); first stages' I and W follow Note [Input
// gradients of first stages] (sim/src/costs/cost_inputs.cpp). p2p, comm_overhead_ms,
// compute_overhead_ms, runtime_memory_bytes, cores_per_node, p2p_uses_core, the correlations
// and the precision are copied from the profile (the model's message sizes scaled to that
// precision); measured peak memory is dropped (it belonged to other ranks). Throws
// InvalidGraphError when a partition does not belong to `model`, ConfigError when the profile's
// stage count differs from `from`.
[[nodiscard]] sched::CostTable transfer_profile(const graph::Model& model,
                                                const graph::Partition& from,
                                                const sched::CostTable& measured,
                                                const graph::Partition& to);

}  // namespace pipewright::sim
