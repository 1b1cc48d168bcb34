// ScriptNode: one torchscript node of a graph::Model (issue 21), loaded with torch::jit::load.
// Private to exec/; the only file that includes TorchScript's headers is script_node.cpp.
//
// The node's module is the exporter's torch.fx GraphModule of one top-level child, saved with
// torch.jit.save: its attribute paths are the original module's state_dict names, so a parameter
// is found by the name model.json lists ("transformer.h.0.ln_1.weight" is attribute `weight` of
// submodule `transformer` -> `h` -> `0` -> `ln_1`).
//
// Note [TorchScript autograd]: the graph executor's optimisations are turned off for the process
// (torch::jit::setGraphExecutorOptimize(false)) before the first module is loaded. Each op then
// records its own autograd node exactly as eager PyTorch does, so the gradients equal those of
// the user's nn.Module trained in Python, and the executor's input/weight backward split
// (autograd::grad on the inputs, then backward on the parameters) works as for built-in nodes;
// the profiling executor would instead fold ops into differentiable subgraphs with symbolic
// gradients after two calls.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

#include "pipewright/graph/model.hpp"

namespace pipewright::exec {

class ScriptNode {
 public:
  // Loads node.script->path on the CPU, moves it to `device` (and floating-point tensors to
  // `dtype`), sets training mode, and checks the module against node.script: every listed
  // parameter and buffer exists with the listed shape, and the module has no parameter the list
  // leaves out (a second attribute of a listed parameter, as a tied weight used twice inside one
  // node, is made to refer to the listed tensor). Listed parameters get requires_grad. Throws
  // ConfigError naming the node and the file for a missing file, a file that is not TorchScript
  // or that this libtorch cannot load, or a parameter or buffer that is missing or misshapen.
  ScriptNode(const graph::Node& node, torch::Device device, torch::Dtype dtype);
  ~ScriptNode();
  ScriptNode(const ScriptNode&) = delete;
  ScriptNode& operator=(const ScriptNode&) = delete;

  // forward(*inputs), one tensor per script output (a Tensor result for one output, a tuple or
  // list for several). Throws ConfigError naming the node and the file when the module fails
  // (with the module's own message) or returns something else.
  [[nodiscard]] std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& inputs) const;

  // The tensor at attribute path `name` (a listed parameter or buffer).
  [[nodiscard]] torch::Tensor get(const std::string& name) const;
  // Makes attribute `name` refer to `tensor` from now on (ties a parameter to another node's).
  void set(const std::string& name, const torch::Tensor& tensor);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws ConfigError when `model`'s TorchScript nodes were exported by a newer torch (MAJOR.MINOR)
// than this executor's libtorch (Note [Node files from a newer torch] in script_node.cpp).
void check_node_files_torch(const graph::Model& model);

}  // namespace pipewright::exec
