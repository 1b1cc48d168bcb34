// StageModule: one pipeline stage of a graph::Model built with libtorch (private to exec/: it
// names torch types).
//
// A stage is a set of model nodes plus the ordered values it receives (graph::StageInfo::inputs)
// and sends (graph::StageInfo::outputs). forward() runs the stage's nodes in topological order on
// the received tensors, so skip edges inside a stage and across stages work. The stage holding
// the model's final node (model_check.hpp final_node) also returns the prediction, as its last
// output, when the partition does not list it already (a final value has no consumer stage).
//
// Parameters (names exactly as torch.nn.Sequential would name them, in model order):
//   linear                      <i>.weight [out, in], <i>.bias [out]
//   layernorm                   <i>.weight, <i>.bias [normalized_shape]  (eps 1e-5)
//   embedding                   <i>.weight [num_embeddings, dim]; with max_positions > 0
//                               <i>.tok.weight and <i>.pos.weight [max_positions, dim]
//   causal_self_attention       <i>.qkv.{weight,bias} [3h, h], <i>.proj.{weight,bias} [h, h]
//   mlp                         <i>.fc1.{weight,bias} [ffn, h], <i>.fc2.{weight,bias} [h, ffn]
//   transformer_block           <i>.ln1.*, <i>.attn.qkv.*, <i>.attn.proj.*, <i>.ln2.*,
//                               <i>.mlp.fc1.*, <i>.mlp.fc2.*  (pre-LN, as GPT-2)
// Note [Partition-independent init]: node i's parameters are drawn, in the order listed above,
// from a CPU generator seeded with mix(seed, i), using PyTorch's default schemes (Linear:
// kaiming_uniform(a=sqrt(5)) weight and U(+-1/sqrt(in)) bias; LayerNorm: ones/zeros; Embedding:
// N(0, 1)). The weights therefore depend on (seed, node index) only: pp=1 and pp=4 start equal.
//
// Torchscript nodes (issue 21, script_node.hpp): a model's nodes are all torchscript or all
// built-in (model_check.hpp). A torchscript node's input slot j is forward argument j (the value
// its edge brings, or the model input), its output k result k. Parameters carry the names
// model.json lists (the original state_dict keys) and start from the values in the .pt files;
// buffers are the listed ones. Note [Tied parameters in a stage]: a parameter listed with
// tied_to whose group already has a tensor in this stage (node index order) becomes that tensor
// (the module's attribute is replaced), so the stage has one trainable tensor per group and
// autograd sums both uses; its name is kept as an alias (state_dict). Copies of one group in
// different stages stay separate tensors; tied_sync.hpp sums their gradients every step.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/model_check.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/stage_graph.hpp"

namespace pipewright::exec {

class ScriptNode;

struct StageBuildOptions {
  std::uint64_t seed = 0;
  torch::Device device = torch::kCPU;
  torch::Dtype dtype = torch::kFloat32;  // float32 (float64 for tight numerical tests)
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class StageModule {
 public:
  // Builds the stage's nodes. `nodes` are model node indices; `inputs` / `outputs` the values the
  // stage receives / sends (graph::StageValue; node -1 is the model input). Throws ConfigError
  // naming the node for opaque nodes, bad params or shapes (model_check.hpp), or when a node
  // needs a value that is neither computed in the stage nor listed in `inputs`, or an output is
  // not computed in the stage.
  StageModule(const graph::Model& model, std::vector<int> nodes,
              std::vector<graph::StageValue> inputs, std::vector<graph::StageValue> outputs,
              const StageBuildOptions& options);
  // The stage `info` of a partition (its nodes, inputs, outputs).
  StageModule(const graph::Model& model, const graph::StageInfo& info,
              const StageBuildOptions& options);
  // The whole model as one stage: input = the model input, output = the prediction.
  [[nodiscard]] static StageModule whole_model(const graph::Model& model,
                                               const StageBuildOptions& options);

  // One tensor per input (batch first: [B, ...per-sample shape]) -> one per output, in the order
  // of outputs(). Throws ConfigError naming the node for a wrong input count, dtype or shape, or
  // for token ids out of the embedding's range.
  [[nodiscard]] std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& inputs) const;

  [[nodiscard]] const std::vector<int>& nodes() const noexcept { return nodes_; }
  [[nodiscard]] const std::vector<graph::StageValue>& inputs() const noexcept { return inputs_; }
  [[nodiscard]] const std::vector<graph::StageValue>& outputs() const noexcept { return outputs_; }
  // Index into outputs() of the model's prediction, if this stage computes it.
  [[nodiscard]] std::optional<int> prediction_output() const noexcept { return prediction_; }
  // Per-sample types of inputs() / outputs() (for allocating receive buffers at start-up).
  [[nodiscard]] const std::vector<ValueType>& input_types() const noexcept { return input_types_; }
  [[nodiscard]] const std::vector<ValueType>& output_types() const noexcept {
    return output_types_;
  }

  // Parameters in model order with their names (see the table above). The tensors are the live
  // leaves (requires_grad), shared with the module.
  [[nodiscard]] const NamedTensors& named_parameters() const noexcept { return params_; }
  [[nodiscard]] std::vector<torch::Tensor> parameters() const;
  // Non-trainable state: the buffers of torchscript nodes (built-in kinds have none; the causal
  // mask is built per call).
  [[nodiscard]] const NamedTensors& named_buffers() const noexcept { return buffers_; }
  // The buffers that belong to the original state_dict (ScriptBuffer::persistent).
  [[nodiscard]] NamedTensors persistent_buffers() const;
  // What --save writes for this stage: every parameter under every name the stage knows it by
  // (tied aliases too), then the persistent buffers.
  [[nodiscard]] NamedTensors state_dict() const;
  // Parallel to named_parameters(): the tied group of each parameter (the canonical name a
  // tied_to names, shared by every copy in every stage), or "" for an untied parameter.
  [[nodiscard]] const std::vector<std::string>& tie_groups() const noexcept { return tie_groups_; }
  [[nodiscard]] std::int64_t num_parameter_elements() const;

  // Copies every parameter of this stage from `weights` (e.g. load_safetensors of --init) under
  // no_grad, and the persistent buffers that `weights` holds. Names not belonging to this stage
  // are ignored. Throws ConfigError naming `source` and the tensor when one of this stage's
  // parameters is missing or has another shape.
  void load_parameters(const std::map<std::string, torch::Tensor>& weights,
                       const std::string& source);

 private:
  // One built node. `sources` are the values summed into its input (empty: the model input);
  // `tensors` index params_ in the order of the table above.
  struct Op {
    int node = 0;
    std::string name;
    graph::NodeKind kind = graph::NodeKind::kOpaque;
    std::map<std::string, std::int64_t> params;
    std::vector<graph::StageValue> sources;
    std::vector<std::size_t> tensors;
    std::shared_ptr<ScriptNode> script;  // torchscript nodes: one source per forward argument
  };
  // Loads a torchscript node and registers its parameters (Note [Tied parameters in a stage]:
  // `groups` maps a tied group to its tensor's index in params_; `tied` holds every tied group
  // of the model) and buffers; `tensors` receives the node's indices into params_.
  [[nodiscard]] std::shared_ptr<ScriptNode> add_script_node(
      const graph::Node& spec, const StageBuildOptions& options, const std::set<std::string>& tied,
      std::map<std::string, std::size_t>& groups, std::vector<std::size_t>& tensors);
  [[nodiscard]] torch::Tensor run_node(const Op& op, const torch::Tensor& x) const;
  [[nodiscard]] std::string label(const Op& op) const;

  std::string model_name_;
  std::vector<int> nodes_;  // topological order
  std::vector<graph::StageValue> inputs_;
  std::vector<graph::StageValue> outputs_;
  std::optional<int> prediction_;
  std::vector<ValueType> input_types_;
  std::vector<ValueType> output_types_;
  std::vector<Op> ops_;  // parallel to nodes_
  NamedTensors params_;
  std::vector<std::string> tie_groups_;                       // parallel to params_
  std::vector<std::pair<std::string, std::size_t>> aliases_;  // (name, index into params_)
  NamedTensors buffers_;
  std::vector<bool> buffer_persistent_;  // parallel to buffers_
};

// Mean loss of a batch. mse: output and target float of equal shape (a target [B] is accepted for
// an output [B, 1]). cross_entropy: output logits [..., C], target int64 [...] (LM: [B, S, V] vs
// [B, S]) with values in [0, C). Throws ConfigError naming both shapes otherwise.
[[nodiscard]] torch::Tensor compute_loss(const torch::Tensor& output, const torch::Tensor& target,
                                         LossKind kind);

}  // namespace pipewright::exec
