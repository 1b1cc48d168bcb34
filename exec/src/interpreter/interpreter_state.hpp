// The interpreter's per-(stage, microbatch) state, shared by interpreter.cpp (the step loop),
// interpreter_p2p.cpp (SEND, RECV) and interpreter_compute.cpp (F, B, I, W). Private to exec/.
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "interpreter/interpreter.hpp"
#include "model/split_backward.hpp"

namespace pipewright::exec {

struct Interpreter::MbState {
  std::vector<torch::Tensor> inputs;
  std::vector<torch::Tensor> outputs;
  torch::Tensor loss;  // scaled by 1/m (loss stage only)
  std::vector<std::pair<int, torch::Tensor>> out_grads;
  std::vector<torch::Tensor> input_grads;
  WeightBackward weight;  // after I: what W needs (Note [Split backward])
  // Note [Activation recompute]: the target (loss stage) and the CPU generator's state before F.
  torch::Tensor target;
  torch::Tensor rng_state;
  bool forward_done = false;
  bool input_grads_done = false;
  bool weight_grads_done = false;
};

}  // namespace pipewright::exec
