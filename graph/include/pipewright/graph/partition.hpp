// Partitioners: cut a Model into pipeline stages (docs/partitioning.md).
//
//   uniform   contiguous runs of a topological order with equal node counts (the first
//             n % stages stages get one node more).
//   balanced  contiguous runs of the topological order that minimise the slowest stage's
//             forward_ms + backward_ms. Exact for chains; for DAGs it is exact over the chosen
//             topological order (Model::topological_order), which keeps the stage graph acyclic.
//   memory    balanced, subject to every stage's memory estimate fitting memory_limit_bytes.
//
// Note [Stage memory]
// memory_bytes of stage s = param_bytes * (1 + gradient_bytes_per_param_byte +
//   optimizer_bytes_per_param_byte) + in_flight(s) * activation_bytes, where in_flight(s) is
//   the number of microbatches whose activations stage s holds at its peak. Default assumption:
//   1F1B, so stage s of p holds p - s microbatches (stage 0 holds p, the last stage 1). With
//   in_flight_microbatches set (e.g. GPipe with m microbatches: m), every stage holds that many.
//   With recompute (activation recompute of every stage, `--recompute full`, issue 22), a stage
//   keeps only its input per in-flight microbatch and one microbatch's full activations (the
//   backward that recomputes them), as the simulator charges it (sched/memory.hpp, Note
//   [Recompute]): param_bytes * (...) + in_flight(s) * input_bytes + activation_bytes, where
//   input_bytes is the bytes of the values the stage receives from other stages (the model
//   input is the data loader's and not counted).
//   Mixed precision (`partition --precision bf16|fp16`, sched/memory.hpp Note [Precision
//   bytes]): with activation_element_bytes = 2 a microbatch's activations are
//     kept = activation_fp32_bytes + (activation_bytes - activation_fp32_bytes) * 2 / 4
//   where activation_fp32_bytes is the stage's sum of autocast_fp32_bytes(node) (Note [Autocast
//   bytes] in model.hpp: layer norms, embeddings' token ids, the loss and a block's layer-norm
//   inputs stay fp32; model estimates are fp32, so the rest shrinks by 2 / 4), the bytes
//   sched::MemoryModel keeps for a stage (sched::activation_bytes_at_precision, integer division
//   as there). With recompute the inputs kept per microbatch are the producers' outputs as they
//   crossed the cut, which are p2p messages and so 16-bit (input_bytes * 2 / 4, as the memory
//   model's Note [Recompute] and the executor's sends), and the recomputed microbatch is `kept`.
//   Autocast's 16-bit parameter copies add param_bytes * 2 / 4; parameters, gradients and
//   optimizer state stay fp32. So for a 1F1B plan at dp 1 with plain SGD every stage's estimate
//   is its rank's sched::peak_memory, in either precision (tests/sim/precision_test.cpp); the
//   memory model adds what this estimate has no words for (the optimizer's and data
//   parallelism's transient tensors, Note [Optimizer transient] in sched/memory.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/stage_graph.hpp"

namespace pipewright::graph {

enum class PartitionMethod { kUniform, kBalanced, kMemory };

// "uniform" | "balanced" | "memory".
[[nodiscard]] std::string_view to_string(PartitionMethod method) noexcept;
[[nodiscard]] std::optional<PartitionMethod> parse_partition_method(std::string_view text) noexcept;

struct PartitionOptions {
  int stages = 1;
  PartitionMethod method = PartitionMethod::kBalanced;
  // Required for kMemory; ignored by the others (their memory is still reported).
  std::optional<std::int64_t> memory_limit_bytes;
  double gradient_bytes_per_param_byte = 1.0;   // gradients as big as the parameters
  double optimizer_bytes_per_param_byte = 2.0;  // Adam: two moments of the parameters' dtype
  // Unset: 1F1B (stage s of p holds p - s microbatches). Set: every stage holds this many.
  std::optional<int> in_flight_microbatches;
  // Every stage recomputes its activations in the backward (Note [Stage memory]).
  bool recompute = false;
  // Bytes per element of activations under the job's precision: 4 (fp32) or 2 (bf16 / fp16
  // autocast; Note [Stage memory]).
  int activation_element_bytes = 4;
};

struct Partition {
  std::string method;                   // to_string(PartitionMethod)
  std::string model_name;               // Model::name
  std::vector<std::string> node_names;  // Model node names by index (checks the model matches)
  std::vector<int> node_stage;          // stage of each model node
  StageGraph graph;
  // The options the memory estimates were computed with.
  double gradient_bytes_per_param_byte = 1.0;
  double optimizer_bytes_per_param_byte = 2.0;
  std::optional<int> in_flight_microbatches;
  std::optional<std::int64_t> memory_limit_bytes;
  bool recompute = false;
  int activation_element_bytes = 4;

  [[nodiscard]] int num_stages() const noexcept { return static_cast<int>(graph.stages.size()); }
  // The slowest stage's forward_ms + backward_ms.
  [[nodiscard]] double max_stage_ms() const noexcept;

  friend bool operator==(const Partition& a, const Partition& b) noexcept {
    return a.method == b.method && a.model_name == b.model_name && a.node_names == b.node_names &&
           a.node_stage == b.node_stage && a.graph == b.graph &&
           a.gradient_bytes_per_param_byte == b.gradient_bytes_per_param_byte &&
           a.optimizer_bytes_per_param_byte == b.optimizer_bytes_per_param_byte &&
           a.in_flight_microbatches == b.in_flight_microbatches &&
           a.memory_limit_bytes == b.memory_limit_bytes && a.recompute == b.recompute &&
           a.activation_element_bytes == b.activation_element_bytes;
  }
};

// Partitions `model`. Throws ConfigError for bad options (stages < 1, more stages than nodes,
// kMemory without a limit) and InvalidGraphError when no partition meets the memory limit (the
// message names a node that cannot fit).
[[nodiscard]] Partition partition_model(const Model& model, const PartitionOptions& options);

// A Partition for a given assignment node -> stage (e.g. hand-written), with memory estimates.
[[nodiscard]] Partition make_partition(const Model& model, const std::vector<int>& node_stage,
                                       const PartitionOptions& options, std::string method);

// Memory estimate of one stage under Note [Stage memory]: activation_fp32_bytes is the part of
// activation_bytes autocast keeps in fp32 (stage_activation_fp32_bytes; clamped to [0,
// activation_bytes]; it matters only with activation_element_bytes 2); input_bytes counts only
// with options.recompute.
[[nodiscard]] std::int64_t stage_memory_bytes(std::int64_t param_bytes,
                                              std::int64_t activation_bytes,
                                              std::int64_t activation_fp32_bytes, int in_flight,
                                              const PartitionOptions& options,
                                              std::int64_t input_bytes = 0) noexcept;
// Bytes per microbatch of the values `stage` receives from other stages (not the model input).
[[nodiscard]] std::int64_t stage_input_bytes(const Model& model, const StageInfo& stage);
// Sum of autocast_fp32_bytes over the stage's nodes (Note [Autocast bytes]): the part of its
// activation_bytes that stays fp32 under bf16 / fp16 autocast.
[[nodiscard]] std::int64_t stage_activation_fp32_bytes(const Model& model,
                                                       const StageInfo& stage) noexcept;
// in_flight(s) for stage s of `stages` under the options' assumption.
[[nodiscard]] int in_flight_microbatches(int stage, int stages,
                                         const PartitionOptions& options) noexcept;

// JSON form (docs/partitioning.md); stable and pretty, load_partition reads it back equal.
[[nodiscard]] std::string to_json(const Partition& partition);
[[nodiscard]] Partition parse_partition(std::string_view json_text, const std::string& source_name);
[[nodiscard]] Partition load_partition(const std::string& path);
// Throws InvalidGraphError unless `partition` was made for `model` (same node count and names).
void check_partition_matches(const Partition& partition, const Model& model,
                             const std::string& source_name = "partition");

}  // namespace pipewright::graph
