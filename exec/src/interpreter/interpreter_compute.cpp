// The interpreter's compute actions F, B, I, W (interpreter.hpp, Note [Interpreter actions]),
// with activation recompute (Note [Activation recompute]) and the backward split
// (split_backward.hpp, Note [Split backward]).
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <string>
#include <utility>

#include "compat/torch_compat.hpp"
#include "interpreter/interpreter.hpp"
#include "interpreter/interpreter_state.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/action.hpp"

namespace pipewright::exec {

using sched::Action;

namespace {

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();  // a handle: copies share the generator
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

}  // namespace

void Interpreter::do_forward(const Action& a, std::int64_t step,
                             const std::vector<torch::Tensor>& x_mbs,
                             const std::vector<torch::Tensor>& y_mbs) {
  hooks_->before_forward(a.stage, a.microbatch);
  auto& st = local(a.stage);
  auto& ms = state(a.stage, a.microbatch);
  PW_CHECK(
      !ms.forward_done, InvalidPlanError,
      "rank " << pipe_rank_ << " step " << step << ": " << sched::to_string(a) << " runs twice");
  for (std::size_t j = 0; j < st.inputs.size(); ++j) {
    if (st.inputs[j].producer_stage == -1) {
      ms.inputs[j] = x_mbs.at(static_cast<std::size_t>(a.microbatch));
    }
    PW_CHECK(ms.inputs[j].defined(), InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": " << sched::to_string(a)
                     << " needs input " << j << " from stage " << st.inputs[j].producer_stage
                     << ", which has not been received yet (plan order)");
  }
  if (st.loss_output >= 0 && static_cast<std::size_t>(a.microbatch) < y_mbs.size()) {
    ms.target = y_mbs[static_cast<std::size_t>(a.microbatch)];
  }
  torch::Tensor l;
  if (plan_.shape.forward_only) {
    // Inference: no graph, nothing to differentiate; the loss stage keeps its prediction.
    torch::NoGradGuard no_grad;
    l = ms.target.defined() ? forward_stage(st, ms) : torch::Tensor();
    if (!ms.target.defined()) ms.outputs = run_body(st, ms.inputs);
    if (st.loss_output >= 0) {
      auto pred = ms.outputs.at(static_cast<std::size_t>(st.loss_output));
      if (pred.is_floating_point()) pred = pred.to(torch::kFloat);
      predictions_.at(static_cast<std::size_t>(a.microbatch)) = pred;
    }
  } else if (st.recompute) {
    // Note [Activation recompute]: no graph now; B (or I) runs the forward again.
    ms.rng_state = cpu_rng_state();
    torch::NoGradGuard no_grad;
    l = forward_stage(st, ms);
  } else {
    l = forward_stage(st, ms);
  }
  ms.forward_done = true;
  if (l.defined()) {
    loss_sum_ += l.detach().to(torch::kDouble).item<double>();
    ++loss_count_;
    loss_stage_ = a.stage;
  }
  // Hand the outputs to consumers on this rank now; remote consumers get them with SEND_F.
  for (std::size_t k = 0; k < st.consumers.size(); ++k) {
    for (const auto& [c, slot] : st.consumers[k]) {
      if (rank_of(c) != pipe_rank_) continue;
      auto t = ms.outputs[k].detach();
      if (t.is_floating_point()) t.requires_grad_(true);
      auto& cs = state(c, a.microbatch);
      cs.inputs[static_cast<std::size_t>(slot)] = t;
    }
  }
}

// Note [Mixed precision]
// ~~~~~~~~~~~~~~~~~~~~~~
// --precision bf16 / fp16 (Megatron's --bf16 / --fp16 with torch autocast): a stage's forward runs
// under autocast to that type on its device (CPU or CUDA), so matmuls compute in 16 bits while
// parameters, their gradients and the optimizer state stay float32 (the master weights). Every
// floating output of a stage is cast to the 16-bit type inside the graph, so activations cross
// stage boundaries, and their gradients come back, in 16 bits (half the bytes of fp32, as in
// Megatron's pipeline); the receiving stage's input leaves are 16-bit and its autocast handles
// the mix (they enter as float32). The loss is computed in float32 outside autocast, on the
// prediction cast up, and forward-only predictions are returned in float32. fp16 multiplies each
// microbatch's loss by the loss scale (Note [Loss scaling] in recipe.hpp). The start-up shape
// agreement runs the same function, so receive buffers have the 16-bit type.
std::vector<torch::Tensor> Interpreter::run_body(const StageSetup& st,
                                                 const std::vector<torch::Tensor>& inputs) {
  if (options_.precision == sched::Precision::kFp32) return st.body->forward(inputs);
  const auto low = compute_dtype(options_.precision);
  // 16-bit inputs enter as float32 (inside the graph: their gradients leave in 16 bits): ops
  // outside autocast's lists, such as 1.13's CPU layer_norm, need their input in the dtype of
  // their float32 weights.
  std::vector<torch::Tensor> in = inputs;
  for (auto& t : in) {
    if (t.defined() && t.is_floating_point() && t.scalar_type() != torch::kFloat) {
      t = t.to(torch::kFloat);
    }
  }
  std::vector<torch::Tensor> outs;
  {
    compat::AutocastGuard autocast(options_.device.type(), low, true);
    outs = st.body->forward(in);
  }
  for (auto& t : outs) {
    if (t.is_floating_point() && t.scalar_type() != low) t = t.to(low);
  }
  return outs;
}

torch::Tensor Interpreter::forward_stage(const StageSetup& st, MbState& ms) {
  ms.outputs = run_body(st, ms.inputs);
  PW_ASSERT(static_cast<int>(ms.outputs.size()) == st.num_outputs,
            "stage " << st.stage << " produced " << ms.outputs.size() << " outputs");
  if (st.loss_output < 0) return {};
  auto pred = ms.outputs[static_cast<std::size_t>(st.loss_output)];
  if (pred.is_floating_point() && pred.scalar_type() != torch::kFloat)
    pred = pred.to(torch::kFloat);
  auto l = loss_(pred, ms.target);
  const double scale = options_.recipe != nullptr ? options_.recipe->loss_scale() : 1.0;
  ms.loss = l / (static_cast<double>(plan_.shape.microbatches) *
                 static_cast<double>(hooks_->gradient_divisor()));
  if (scale != 1.0) ms.loss = ms.loss * scale;
  return l;
}

// Note [Activation recompute]
// A stage with StageSetup::recompute runs its F under no_grad: it keeps its inputs (the received
// tensors or the microbatch rows, kept anyway) and its outputs (sent or handed on), but none of
// the activations its autograd graph would save. Its B, or its I, first runs the forward again
// with the graph on the same input leaves, then differentiates as usual; W uses what I kept.
// The CPU generator's state is saved before F and restored around the recomputation, as
// torch.utils.checkpoint does, so a stage that draws random numbers (dropout in a torchscript
// node) computes the same values twice. Gradients equal those without recompute: the same ops
// on the same values.
void Interpreter::recompute_forward(const StageSetup& st, MbState& ms) {
  auto gen = at::detail::getDefaultCPUGenerator();
  at::Tensor now;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    now = gen.get_state();
    gen.set_state(ms.rng_state);
  }
  try {
    (void)forward_stage(st, ms);
  } catch (...) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(now);
    throw;
  }
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(now);
  ms.rng_state = at::Tensor();
}

void Interpreter::do_backward(const Action& a, std::int64_t step, bool input, bool weight) {
  auto& st = local(a.stage);
  auto& ms = state(a.stage, a.microbatch);
  const std::string text = sched::to_string(a);
  PW_CHECK(ms.forward_done, InvalidPlanError,
           "rank " << pipe_rank_ << " step " << step << ": " << text << " before its forward");
  const int last_mb = last_backward_mb_.count(a.stage) ? last_backward_mb_[a.stage] : -1;
  const bool last = a.microbatch == last_mb;
  if (input) {
    PW_CHECK(!ms.input_grads_done, InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": " << text << " runs twice");
    hooks_->before_backward(a.stage, a.microbatch, last);
  } else {
    PW_CHECK(ms.input_grads_done && !ms.weight_grads_done, InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": " << text
                     << " without a preceding I (or twice)");
    hooks_->before_weight(a.stage, a.microbatch);
  }
  if (!input) {
    // W: the weight gradients from what I kept (Note [Split backward]).
    backward_weight(ms.weight);
  } else {
    if (st.recompute) recompute_forward(st, ms);
    std::size_t expected = 0;
    for (const auto& list : st.consumers) expected += list.size();
    PW_CHECK(ms.out_grads.size() == expected, InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": " << text << " has "
                     << ms.out_grads.size() << " of the " << expected
                     << " output gradient(s) it needs (plan order)");
    std::vector<torch::Tensor> roots;
    std::vector<torch::Tensor> grads;
    for (const auto& [k, g] : ms.out_grads) {
      const auto& out = ms.outputs[static_cast<std::size_t>(k)];
      if (!out.requires_grad()) continue;
      roots.push_back(out);
      grads.push_back(g);
    }
    if (ms.loss.defined()) {
      roots.push_back(ms.loss);
      grads.emplace_back();
    }
    if (weight) {
      if (!roots.empty()) torch::autograd::backward(roots, grads);
      for (std::size_t j = 0; j < ms.inputs.size(); ++j) {
        if (ms.inputs[j].requires_grad()) ms.input_grads[j] = ms.inputs[j].grad();
      }
    } else if (!roots.empty()) {
      std::vector<torch::Tensor> params;
      for (auto& p : st.body->parameters()) {
        if (p.requires_grad()) params.push_back(p);
      }
      ms.input_grads = backward_input(roots, grads, ms.inputs, params, &ms.weight);
    }
    // What W needs is in ms.weight: the outputs' graph above it can go now.
    ms.outputs.clear();
    ms.loss = torch::Tensor();
    ms.out_grads.clear();
  }
  if (input) {
    for (std::size_t j = 0; j < ms.inputs.size(); ++j) {
      if (ms.inputs[j].requires_grad() && !ms.input_grads[j].defined()) {
        ms.input_grads[j] = torch::zeros_like(ms.inputs[j]);
      }
    }
    ms.input_grads_done = true;
    deliver_input_grads(a.stage, a.microbatch, ms);
  }
  if (weight) {
    ms.weight_grads_done = true;
    hooks_->after_backward(a.stage, a.microbatch, last);
  }
}

void Interpreter::deliver_input_grads(int stage, int mb, MbState& ms) {
  const auto& st = local(stage);
  for (std::size_t j = 0; j < st.inputs.size(); ++j) {
    const int p = st.inputs[j].producer_stage;
    if (p < 0 || rank_of(p) != pipe_rank_) continue;
    if (!ms.input_grads[j].defined()) continue;
    state(p, mb).out_grads.emplace_back(st.inputs[j].producer_output, ms.input_grads[j]);
  }
}

}  // namespace pipewright::exec
