// The training recipe at the optimizer step (recipe.hpp: Note [Global gradient norm], Note [Loss
// scaling]).
#include "interpreter/recipe.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "pipewright/exec/run.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

torch::ScalarType compute_dtype(sched::Precision precision) noexcept {
  switch (precision) {
    case sched::Precision::kBf16:
      return torch::kBFloat16;
    case sched::Precision::kFp16:
      return torch::kHalf;
    case sched::Precision::kFp32:
      break;
  }
  return torch::kFloat;
}

TrainingRecipe::TrainingRecipe(Options options, Communicator* world)
    : o_(std::move(options)), world_(world) {
  if (o_.precision == sched::Precision::kFp16) state_.loss_scale = o_.scaler.initial;
}

bool TrainingRecipe::needs_collective() const noexcept {
  return o_.clip_grad_norm > 0 || o_.precision == sched::Precision::kFp16 || o_.always_norm;
}

OptimizerPhase TrainingRecipe::before_optimizer(
    std::int64_t step, const std::vector<torch::optim::Optimizer*>& optimizers) {
  OptimizerPhase phase;
  phase.lr = sched::learning_rate_at(o_.lr_schedule, o_.max_lr, o_.steps, step);
  phase.loss_scale = state_.loss_scale;
  for (auto* opt : optimizers) {
    if (opt == nullptr) continue;
    for (auto& group : opt->param_groups()) group.options().set_lr(phase.lr);
  }
  if (!needs_collective()) return phase;

  torch::NoGradGuard no_grad;
  const bool fp16 = o_.precision == sched::Precision::kFp16;
  std::vector<torch::Tensor> grads;    // every local gradient (unscaled and clipped below)
  std::vector<torch::Tensor> counted;  // those the norm counts
  for (auto* opt : optimizers) {
    if (opt == nullptr) continue;
    for (const auto& group : opt->param_groups()) {
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        grads.push_back(p.grad());
        if (o_.not_counted.count(p.unsafeGetTensorImpl()) == 0) counted.push_back(p.grad());
      }
    }
  }
  if (fp16 && step == o_.overflow_step && o_.world_rank == o_.overflow_rank && !grads.empty()) {
    grads.front().view(-1)[0] = std::numeric_limits<float>::infinity();
  }
  if (fp16) {
    const double inv = 1.0 / state_.loss_scale;
    for (auto& g : grads) g.mul_(inv);
  }
  double sum_sq = 0;
  for (const auto& g : counted) {
    const double n = g.detach().norm().to(torch::kCPU).item<double>();
    sum_sq += n * n;
  }
  // One slot per replica (its ranks' squares summed), then the overflow flag.
  std::vector<double> buf(static_cast<std::size_t>(o_.dp) + 1, 0.0);
  const auto slot = static_cast<std::size_t>(o_.sharded ? 0 : o_.dp_index);
  buf[slot] = sum_sq;
  buf.back() = std::isfinite(sum_sq) ? 0.0 : 1.0;
  world_
      ->all_reduce(BufferView{buf.data(), buf.size(), DType::kFloat64, {}}, ReduceOp::kSum,
                   OpContext{step, -1, -1, "gradient norm all_reduce"})
      ->wait(o_.timeout);
  phase.has_norm = true;
  phase.grad_norm = std::sqrt(buf[slot]);
  const bool overflow = buf.back() > 0;
  if (fp16) {
    if (overflow) {
      phase.skipped = true;
      state_.growth_tracker = 0;
      const double next = state_.loss_scale * LossScalerOptions::kBackoff;
      PW_CHECK(next >= o_.scaler.min, NumericalError,
               "step " << step + 1 << ": fp16 gradients overflowed and the loss scale "
                       << state_.loss_scale << " cannot halve below --min-loss-scale "
                       << o_.scaler.min
                       << " (the gradients are Inf/NaN at any scale: lower --lr, or use "
                          "--precision bf16)");
      state_.loss_scale = next;
      return phase;
    }
    if (++state_.growth_tracker == o_.scaler.window) {
      state_.loss_scale *= LossScalerOptions::kGrowth;
      state_.growth_tracker = 0;
    }
  }
  // torch.nn.utils.clip_grad_norm_: grads *= min(1, X / (norm + 1e-6)).
  if (o_.clip_grad_norm > 0 && std::isfinite(phase.grad_norm)) {
    const double coef = o_.clip_grad_norm / (phase.grad_norm + 1e-6);
    if (coef < 1.0) {
      for (auto& g : grads) g.mul_(coef);
    }
  }
  return phase;
}

}  // namespace pipewright::exec
