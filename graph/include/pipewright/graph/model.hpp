// The model description: a DAG of nodes (layers or ops) with shape parameters and cost
// annotations, loaded from / saved to JSON (docs/model-format.md).
//
// Everything downstream starts here: partitioners cut a Model into stages (partition.hpp), the
// simulator reads the per-stage costs, and the executor builds each stage's nodes with libtorch
// from the `params` documented below.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipewright::graph {

// What a node computes. The executor can build every kind except kOpaque (simulation only).
// Required `params` per kind (all integers; the executor uses exactly these keys):
//   kLinear              in_features, out_features, bias (0/1, optional, default 1)
//   kRelu, kGelu         none
//   kLayerNorm           normalized_shape
//   kEmbedding           num_embeddings, embedding_dim; optional max_positions (> 0 adds
//                        learned positional embeddings of that many positions, as in GPT)
//   kCausalSelfAttention hidden, heads
//   kMlp                 hidden, ffn_hidden (Linear(hidden, ffn) - GELU - Linear(ffn, hidden))
//   kTransformerBlock    hidden, heads, ffn_hidden (pre-LN: x + attn(ln1(x)); x + mlp(ln2(x)))
//   kLoss                no params; attrs {"loss": "mse" | "cross_entropy"}. A model may omit the
//                        loss node: the executor then applies its --loss to the last node's output.
//   kOpaque              anything (never executed; costs only)
enum class NodeKind {
  kLinear,
  kRelu,
  kGelu,
  kLayerNorm,
  kEmbedding,
  kCausalSelfAttention,
  kMlp,
  kTransformerBlock,
  kLoss,
  kOpaque,
};

// JSON spelling: "linear", "relu", "gelu", "layernorm", "embedding", "causal_self_attention",
// "mlp", "transformer_block", "loss", "opaque".
[[nodiscard]] std::string_view to_string(NodeKind kind) noexcept;
// The kind spelled `text`, or nullopt (callers name the offending field in their error).
[[nodiscard]] std::optional<NodeKind> parse_node_kind(std::string_view text) noexcept;
// Params each kind requires (see the table above); used by validation.
[[nodiscard]] std::vector<std::string> required_params(NodeKind kind);

// Costs of one node for one microbatch. Times in milliseconds, sizes in bytes; all >= 0.
struct NodeCost {
  double forward_ms = 0.0;
  double backward_ms = 0.0;  // input gradient + weight gradient
  // Optional split of backward_ms for zero-bubble schedules; when both are set they should sum
  // to backward_ms (validation allows 1e-6 relative slack).
  std::optional<double> input_grad_ms;
  std::optional<double> weight_grad_ms;
  std::int64_t param_bytes = 0;       // parameters held by the node
  std::int64_t activation_bytes = 0;  // kept from forward until backward, per microbatch
  std::int64_t output_bytes = 0;      // one output value (what crosses a cut), per microbatch

  friend bool operator==(const NodeCost& a, const NodeCost& b) noexcept {
    return a.forward_ms == b.forward_ms && a.backward_ms == b.backward_ms &&
           a.input_grad_ms == b.input_grad_ms && a.weight_grad_ms == b.weight_grad_ms &&
           a.param_bytes == b.param_bytes && a.activation_bytes == b.activation_bytes &&
           a.output_bytes == b.output_bytes;
  }
};

struct Node {
  std::string name;  // unique within the model
  NodeKind kind = NodeKind::kOpaque;
  std::map<std::string, std::int64_t> params;
  std::map<std::string, std::string> attrs;
  NodeCost cost;

  friend bool operator==(const Node& a, const Node& b) noexcept {
    return a.name == b.name && a.kind == b.kind && a.params == b.params && a.attrs == b.attrs &&
           a.cost == b.cost;
  }
};

// Output `from_output` of node `from` feeds input `to_input` of node `to` (node indices).
// A JSON `layers` chain becomes edges i -> i+1 with both offsets 0.
struct ModelEdge {
  int from = 0;
  int from_output = 0;
  int to = 0;
  int to_input = 0;

  friend bool operator==(const ModelEdge& a, const ModelEdge& b) noexcept {
    return a.from == b.from && a.from_output == b.from_output && a.to == b.to &&
           a.to_input == b.to_input;
  }
};

// The model input, per sample. Nodes without producers read it (at their input 0).
struct ModelInput {
  std::string dtype = "float32";    // "float32" | "int64"
  std::vector<std::int64_t> shape;  // per sample, e.g. {8} or {seq}; every entry > 0

  friend bool operator==(const ModelInput& a, const ModelInput& b) noexcept {
    return a.dtype == b.dtype && a.shape == b.shape;
  }
};

struct Model {
  std::string name;
  ModelInput input;
  std::vector<Node> nodes;
  std::vector<ModelEdge> edges;
  std::int64_t micro_batch_size = 1;  // the batch the costs were computed for

  // Index of the node called `name`, or -1.
  [[nodiscard]] int node_index(std::string_view node_name) const noexcept;
  // Edges into / out of `node`, in edge-list order.
  [[nodiscard]] std::vector<ModelEdge> in_edges(int node) const;
  [[nodiscard]] std::vector<ModelEdge> out_edges(int node) const;
  // Distinct producer / consumer node indices of `node`, ascending.
  [[nodiscard]] std::vector<int> producers(int node) const;
  [[nodiscard]] std::vector<int> consumers(int node) const;
  // A topological order of the nodes; among ready nodes the lowest index comes first, so a chain
  // or an already-sorted node list keeps its order. Throws InvalidGraphError naming the nodes on
  // a cycle.
  [[nodiscard]] std::vector<int> topological_order() const;
  // Bytes of one microbatch of model input (product of shape x dtype size x micro_batch_size).
  [[nodiscard]] std::int64_t input_bytes() const;

  friend bool operator==(const Model& a, const Model& b) noexcept {
    return a.name == b.name && a.input == b.input && a.nodes == b.nodes && a.edges == b.edges &&
           a.micro_batch_size == b.micro_batch_size;
  }
};

// Limits on what load_model / parse_model accept (bigger inputs are rejected, not truncated).
inline constexpr std::size_t kMaxModelFileBytes = 256u << 20;  // 256 MiB of JSON text
inline constexpr int kMaxJsonDepth = 32;                       // nesting of objects/arrays
inline constexpr std::size_t kMaxModelNodes = 1'000'000;
inline constexpr std::size_t kMaxModelEdges = 4'000'000;

// Checks a Model built in code the same way parse_model checks a file: unique non-empty names,
// required params per kind, finite non-negative costs, edges in range, no two edges into the same
// (node, input), no cycle. `source_name` prefixes the messages. Throws InvalidGraphError.
void validate_model(const Model& model, const std::string& source_name = "model");

// Parses and validates a model. Errors are ParseError (bad JSON, duplicate keys, wrong types,
// limits) or InvalidGraphError (bad graph), with `source_name` and a JSON pointer in the message.
[[nodiscard]] Model parse_model(std::string_view json_text, const std::string& source_name);
// Reads `path` (ParseError naming it if unreadable or too big) and parses it.
[[nodiscard]] Model load_model(const std::string& path);
// Stable, pretty JSON (2-space indent, fixed key order) that parse_model reads back equal.
[[nodiscard]] std::string to_json(const Model& model);

}  // namespace pipewright::graph
