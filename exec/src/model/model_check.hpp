// Static checks that a graph::Model can be executed by StageModule, and that a dataset fits it,
// without libtorch (so `pipewright run` can reject bad input before any rank allocates weights).
//
// Shapes here are per sample (no batch dimension). Every node kind's rule is the one StageModule
// applies at run time (stage_module.hpp):
//   linear            input [..., in_features] float          -> [..., out_features]
//   relu, gelu        any float                               -> same
//   layernorm         [..., normalized_shape] float           -> same
//   embedding         int64 [...]                             -> [..., embedding_dim]
//                     with max_positions > 0: int64 [seq], seq <= max_positions
//   causal_self_attention, transformer_block  [seq, hidden] float, hidden % heads == 0 -> same
//   mlp               [..., hidden] float                     -> same
//   loss              identity (the prediction passes through)
//   opaque            not executable
//   torchscript       the types its `script` declares: input slot j must receive script.inputs[j]
//                     (from its producer edge, or the model input when no edge feeds it), output
//                     k is script.outputs[k]; values are float32 or int64. A model's nodes are
//                     either all torchscript or all built-in, and it has one model input.
// A node with several input slots (edges into to_input 0, 1, ...) receives their elementwise sum
// (Note [Merging node inputs] in stage_module.cpp); the summed values must have equal shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipewright/graph/model.hpp"

namespace pipewright::exec {

enum class LossKind : std::uint8_t { kMse, kCrossEntropy };

// "mse" | "cross_entropy" (also "cross-entropy", the CLI spelling).
[[nodiscard]] std::optional<LossKind> parse_loss_kind(const std::string& text) noexcept;
[[nodiscard]] const char* to_string(LossKind kind) noexcept;

// The parameters StageModule creates for `node` (make_params in stage_module.cpp: weights and
// biases of linear layers, layer norms, embeddings), as a double so that absurd sizes in a model
// file do not overflow. Used to refuse a model whose weights cannot fit before allocating them.
[[nodiscard]] double parameter_count(const graph::Node& node);

// The per-sample type of one value flowing through the model.
struct ValueType {
  bool is_int64 = false;            // int64 token ids / class labels; float32 otherwise
  std::vector<std::int64_t> shape;  // per sample

  friend bool operator==(const ValueType& a, const ValueType& b) noexcept {
    return a.is_int64 == b.is_int64 && a.shape == b.shape;
  }
};

[[nodiscard]] std::string describe(const ValueType& type);  // "float32 [seq=16, 64]" style

// Per-sample type of each node's output (index = node index), inferred from model.input.
// Throws ConfigError naming the node (name, index, kind) and both shapes when a node cannot take
// its input, when a node is opaque, when params are out of range, or when the model has not
// exactly one final node (a node without consumers).
[[nodiscard]] std::vector<ValueType> infer_value_types(const graph::Model& model);
// The same for every output slot of every node (index = node, then output slot): built-in nodes
// have one output, torchscript nodes script.outputs.size().
[[nodiscard]] std::vector<std::vector<ValueType>> infer_output_types(const graph::Model& model);
// Whether the model's nodes are torchscript nodes (infer_output_types checks they all are).
[[nodiscard]] bool is_script_model(const graph::Model& model) noexcept;
// Every torchscript node's file (ScriptSpec::path) is a readable regular file, so that a missing
// file fails on every rank before any rank starts (ScriptNode checks the contents). Throws
// ConfigError naming the node and the file.
void check_script_files(const graph::Model& model);

// The node whose output is the model's prediction: the unique node without consumers (a loss node
// passes its input through, so it may be that node). Throws ConfigError otherwise.
[[nodiscard]] int final_node(const graph::Model& model);

// The loss a model asks for through its loss node's attrs {"loss": ...}, or nullopt without a loss
// node. Throws ConfigError for an unknown loss name or several loss nodes.
[[nodiscard]] std::optional<LossKind> model_loss_kind(const graph::Model& model);

// Checks per-sample data types against the model: x must equal model.input (dtype and shape);
// y must fit the prediction for `loss` (mse: float32 of the prediction's shape, or [] when the
// prediction is [1]; cross_entropy: int64 of the prediction's shape without its last dimension).
// `x_source` / `y_source` name the data in messages (e.g. the npy paths). Throws ConfigError
// naming both sides, e.g. "data x 'x.npy' has rows of float32 [7] but model 'mlp' input is
// float32 [8] (node '0' linear in_features 8)".
void check_data_matches_model(const ValueType& x, const ValueType& y, const graph::Model& model,
                              LossKind loss, const std::string& x_source,
                              const std::string& y_source);

// "[2, 3]": a tensor shape in error messages (every executor message writes shapes this way).
[[nodiscard]] std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace pipewright::exec
