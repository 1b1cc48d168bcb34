// The stage DAG: pipeline stages plus the values that cross each cut between them.
//
// Semantics follow ColossalAI's PartitionInputVal / PartitionOutputVal: every stage has an
// ordered list of input values and an ordered list of output values. A value is one output of one
// node (or the model input). A stage's inputs may come from the model input and from several
// producer stages, including stages that are not adjacent (skip connections); a stage output
// consumed by several later stages appears once in `outputs` and once per consumer stage in
// StageGraph::edges.
//
// Graph algorithms (topological order, cycle detection, critical path) use Boost.Graph inside
// graph/src only; this header exposes standard types only.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace pipewright::graph {

struct Model;

// One value: output `output` of node `node`; node == -1 means the model input (output 0).
struct StageValue {
  int node = -1;
  int output = 0;
  friend bool operator==(const StageValue& a, const StageValue& b) noexcept {
    return a.node == b.node && a.output == b.output;
  }
};

// A value crossing a cut: output slot `producer_output` of stage `producer_stage` (an index into
// that stage's `outputs`) feeds input slot `consumer_input` of `consumer_stage` (an index into its
// `inputs`). producer_stage == -1 means the model input (producer_output 0, producer_node -1).
// producer_node / consumer_node are model node indices; consumer_node is the first node of the
// consumer stage that reads the value (the executor maps every reader via StageInfo::inputs).
struct CutValue {
  int producer_stage = -1;
  int producer_output = 0;
  int consumer_stage = 0;
  int consumer_input = 0;
  std::int64_t bytes = 0;  // per microbatch
  int producer_node = -1;
  int consumer_node = 0;

  friend bool operator==(const CutValue& a, const CutValue& b) noexcept {
    return a.producer_stage == b.producer_stage && a.producer_output == b.producer_output &&
           a.consumer_stage == b.consumer_stage && a.consumer_input == b.consumer_input &&
           a.bytes == b.bytes && a.producer_node == b.producer_node &&
           a.consumer_node == b.consumer_node;
  }
};

struct StageInfo {
  int index = 0;
  std::vector<int> nodes;  // model node indices, in topological order
  // Sums over the stage's nodes, per microbatch. input_grad_ms / weight_grad_ms are set only when
  // every node of the stage has them.
  double forward_ms = 0.0;
  double backward_ms = 0.0;
  std::optional<double> input_grad_ms;
  std::optional<double> weight_grad_ms;
  std::int64_t param_bytes = 0;
  std::int64_t activation_bytes = 0;  // kept for backward, per microbatch
  std::int64_t output_bytes = 0;      // sum of the bytes of `outputs`, per microbatch
  // Peak memory estimate (see partition.hpp, Note [Stage memory]); 0 if not computed.
  std::int64_t memory_bytes = 0;
  int in_flight_microbatches = 0;  // the assumption memory_bytes was computed with
  // Values received (slot i = CutValue::consumer_input i) and sent (CutValue::producer_output).
  std::vector<StageValue> inputs;
  std::vector<StageValue> outputs;

  friend bool operator==(const StageInfo& a, const StageInfo& b) noexcept {
    return a.index == b.index && a.nodes == b.nodes && a.forward_ms == b.forward_ms &&
           a.backward_ms == b.backward_ms && a.input_grad_ms == b.input_grad_ms &&
           a.weight_grad_ms == b.weight_grad_ms && a.param_bytes == b.param_bytes &&
           a.activation_bytes == b.activation_bytes && a.output_bytes == b.output_bytes &&
           a.memory_bytes == b.memory_bytes &&
           a.in_flight_microbatches == b.in_flight_microbatches && a.inputs == b.inputs &&
           a.outputs == b.outputs;
  }
};

struct CriticalPath {
  std::vector<int> stages;  // along the path, first to last
  double ms = 0.0;          // forward + backward of the path's stages (+ transfers, if asked)
};

struct StageGraph {
  std::vector<StageInfo> stages;  // stages[i].index == i
  // Sorted by (consumer_stage, consumer_input, producer_stage).
  std::vector<CutValue> edges;

  // Distinct (producer stage, consumer stage) pairs between real stages (model-input edges
  // excluded), sorted. This is what schedule generators need (sched::PlanShape::stage_edges).
  [[nodiscard]] std::vector<std::pair<int, int>> stage_dependencies() const;
  // True if the stage dependencies contain a directed cycle.
  [[nodiscard]] bool has_cycle() const;
  // Stages in topological order (lowest index first among ready ones). Throws InvalidGraphError
  // naming the stages on a cycle.
  [[nodiscard]] std::vector<int> topological_order() const;
  // Longest path by forward_ms + backward_ms per stage; with link_gbps > 0 each dependency also
  // costs 2 x bytes / link bandwidth (activation forward, gradient backward).
  [[nodiscard]] CriticalPath critical_path(double link_gbps = 0.0) const;

  friend bool operator==(const StageGraph& a, const StageGraph& b) noexcept {
    return a.stages == b.stages && a.edges == b.edges;
  }
};

// Builds the stage graph of `model` for the assignment node -> stage (node_stage[i] in
// [0, num_stages), every stage non-empty). Costs and values are filled in; memory_bytes is left 0
// (partition_model fills it). Throws InvalidGraphError if the assignment is out of range, leaves
// a stage empty, or makes the stage dependencies cyclic (naming the stages).
[[nodiscard]] StageGraph build_stage_graph(const Model& model, const std::vector<int>& node_stage,
                                           int num_stages);

}  // namespace pipewright::graph
