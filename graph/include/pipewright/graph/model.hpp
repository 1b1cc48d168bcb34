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
//   kTorchScript         no params; Node::script says which TorchScript file the executor loads,
//                        its inputs, outputs, parameters and buffers (issue 21)
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
  kTorchScript,
};

// JSON spelling: "linear", "relu", "gelu", "layernorm", "embedding", "causal_self_attention",
// "mlp", "transformer_block", "loss", "opaque", "torchscript".
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
  // The part of activation_bytes that autocast keeps at its fp32 size (Note [Autocast bytes]);
  // unset: derived from the node's kind (autocast_fp32_bytes). At most activation_bytes.
  std::optional<std::int64_t> activation_fp32_bytes;

  friend bool operator==(const NodeCost& a, const NodeCost& b) noexcept {
    return a.forward_ms == b.forward_ms && a.backward_ms == b.backward_ms &&
           a.input_grad_ms == b.input_grad_ms && a.weight_grad_ms == b.weight_grad_ms &&
           a.param_bytes == b.param_bytes && a.activation_bytes == b.activation_bytes &&
           a.output_bytes == b.output_bytes && a.activation_fp32_bytes == b.activation_fp32_bytes;
  }
};

// Note [Autocast bytes]
// ~~~~~~~~~~~~~~~~~~~~~
// A node's activation_bytes describe an fp32 run. Under --precision bf16 / fp16 (torch autocast,
// fp32 master weights) the tensors a forward keeps for its backward are not all 16-bit: autocast
// casts the inputs of matmuls (linear, matmul, conv) to 16 bits, so what a linear keeps, and what
// the ops after it keep (GELU/ReLU inputs, attention scores on the CPU), is 16-bit; but ops on
// torch's float32 list or outside autocast run in fp32 and keep fp32 tensors (torch.amp docs,
// "Autocast Op Reference": layer_norm, log_softmax, softmax (CUDA), cross_entropy, mse_loss and
// the other losses autocast to float32), and a residual add of an fp32 stream and a 16-bit branch
// is fp32 by type promotion. autocast_fp32_bytes(node) is the part of a node's activation_bytes
// that keeps its fp32 size, from NodeCost::activation_fp32_bytes when the model file gives it,
// else by kind:
//   linear, relu, gelu, mlp,           0     (16-bit matmul inputs and what follows them)
//   causal_self_attention
//   layernorm, embedding, loss         all   (layer_norm keeps its fp32 input and fp32 mean and
//                                             rstd; embeddings keep int64 token ids, which no
//                                             precision changes; the loss runs in fp32 on the
//                                             prediction cast up, outside autocast)
//   transformer_block                  4/34  (the two layer norms' fp32 inputs of the pre-LN
//                                             residual stream: Korthikanti et al.'s 4sbh of the
//                                             block's 34sbh + 5as^2b; the executor's blocks keep
//                                             11.4% in fp32 at hidden 64, seq 32, 4 heads)
//   opaque, torchscript                0     (unknown: all 16-bit unless the file says)
// Measured with torch 1.13's CPU autocast (the executor's; saved-tensor hooks on its block): the
// block keeps 592,896 bytes in fp32 and 330,760 under bf16, of which 67,584 fp32 (both layer
// norms' inputs, means and rstds); a linear, a GELU and a ReLU keep exactly half; layer_norm and
// cross_entropy the same bytes. On CUDA softmax is on the float32 list too (its output, 2as^2b of
// the block, stays fp32): not modelled, as the executor's runs on this project's hosts are CPU;
// a CUDA user can give activation_fp32_bytes in the model file.

// Note [Autocast bytes]: the bytes of node.cost.activation_bytes that stay fp32 under autocast.
struct Node;
[[nodiscard]] std::int64_t autocast_fp32_bytes(const Node& node) noexcept;

// Element types a TorchScript node's values, parameters and buffers may have.
// JSON spelling: "float32", "int64", "float64", "bool".
[[nodiscard]] bool is_script_dtype(std::string_view dtype) noexcept;

// One argument or result of a TorchScript node's forward, per sample (no batch dimension).
struct ScriptValue {
  std::string name;
  std::string dtype = "float32";    // is_script_dtype
  std::vector<std::int64_t> shape;  // per sample; every entry > 0 (may be empty: a scalar)
  // Inputs only: which model input an unproduced input slot reads (Model::inputs index).
  int model_input = 0;

  friend bool operator==(const ScriptValue& a, const ScriptValue& b) noexcept {
    return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
           a.model_input == b.model_input;
  }
};

// A trainable parameter of a TorchScript node. `name` is both the original module's state_dict
// key and the attribute path inside the node's TorchScript module ("transformer.h.0.ln_1.weight").
// A parameter shared with other nodes (tied weights) names the canonical entry in `tied_to`
// (empty for the canonical entry and for untied parameters).
struct ScriptParameter {
  std::string name;
  std::string dtype = "float32";
  std::vector<std::int64_t> shape;
  std::string tied_to;

  friend bool operator==(const ScriptParameter& a, const ScriptParameter& b) noexcept {
    return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.tied_to == b.tied_to;
  }
};

// A buffer a TorchScript node's module holds; `persistent` = in the original state_dict.
struct ScriptBuffer {
  std::string name;
  std::string dtype = "float32";
  std::vector<std::int64_t> shape;
  bool persistent = true;

  friend bool operator==(const ScriptBuffer& a, const ScriptBuffer& b) noexcept {
    return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
           a.persistent == b.persistent;
  }
};

// What the executor needs to run a kTorchScript node (docs/model-format.md, "TorchScript nodes").
// Input slot j of the node is argument j of forward; an input slot no edge feeds reads model input
// inputs[j].model_input. Output k is result k (forward returns a tuple when there are several).
struct ScriptSpec {
  std::string file;  // as written in the model file (to_json writes it back unchanged)
  // `file` resolved against the folder of the model file (load_model); equal to `file` for a
  // model parsed from text or built in code, and for absolute paths. Not compared by ==: the same
  // model read from two places is the same model.
  std::string path;
  std::vector<ScriptValue> inputs;
  std::vector<ScriptValue> outputs;
  std::vector<ScriptParameter> parameters;  // in the module's named_parameters() order
  std::vector<ScriptBuffer> buffers;

  friend bool operator==(const ScriptSpec& a, const ScriptSpec& b) noexcept {
    return a.file == b.file && a.inputs == b.inputs && a.outputs == b.outputs &&
           a.parameters == b.parameters && a.buffers == b.buffers;
  }
};

struct Node {
  std::string name;  // unique within the model
  NodeKind kind = NodeKind::kOpaque;
  std::map<std::string, std::int64_t> params;
  std::map<std::string, std::string> attrs;
  NodeCost cost;
  std::optional<ScriptSpec> script;  // exactly for kTorchScript nodes

  friend bool operator==(const Node& a, const Node& b) noexcept {
    return a.name == b.name && a.kind == b.kind && a.params == b.params && a.attrs == b.attrs &&
           a.cost == b.cost && a.script == b.script;
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

// One of several model inputs (JSON "inputs": the forward arguments of an exported module).
struct NamedModelInput {
  std::string name;
  std::string dtype = "float32";  // "float32" | "int64"
  std::vector<std::int64_t> shape;

  friend bool operator==(const NamedModelInput& a, const NamedModelInput& b) noexcept {
    return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape;
  }
};

// Where an exported model came from (JSON "source"; informational, written back by to_json).
struct ModelSource {
  std::string module;  // "examples/byo/gpt2.py:tiny_gpt2"
  std::string torch;   // torch version that exported it
  std::string init;    // initial weights file, relative to the model file

  friend bool operator==(const ModelSource& a, const ModelSource& b) noexcept {
    return a.module == b.module && a.torch == b.torch && a.init == b.init;
  }
};

struct Model {
  std::string name;
  ModelInput input;
  std::vector<Node> nodes;
  std::vector<ModelEdge> edges;
  std::int64_t micro_batch_size = 1;  // the batch the costs were computed for
  // Several model inputs (JSON "inputs", optional; inputs[0] equals `input`). Empty: one input.
  std::vector<NamedModelInput> inputs;
  std::optional<ModelSource> source;

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
  // Whether `node` reads the model input: a node without producers, or a torchscript node with an
  // input slot that no edge feeds.
  [[nodiscard]] bool reads_model_input(int node) const;
  // reads_model_input of every node (index = node), in one pass over the edges.
  [[nodiscard]] std::vector<bool> model_input_readers() const;
  // Bytes of one microbatch of model input (product of shape x dtype size x micro_batch_size).
  [[nodiscard]] std::int64_t input_bytes() const;

  friend bool operator==(const Model& a, const Model& b) noexcept {
    return a.name == b.name && a.input == b.input && a.nodes == b.nodes && a.edges == b.edges &&
           a.micro_batch_size == b.micro_batch_size && a.inputs == b.inputs && a.source == b.source;
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
// Reads `path` (ParseError naming it if unreadable or too big) and parses it; torchscript nodes'
// ScriptSpec::path is resolved against the folder of `path`.
[[nodiscard]] Model load_model(const std::string& path);
// Stable, pretty JSON (2-space indent, fixed key order) that parse_model reads back equal.
[[nodiscard]] std::string to_json(const Model& model);

}  // namespace pipewright::graph
