// The seam between the plan interpreter (interpreter.cpp) and a data-parallel algorithm
// (DDP, SlowMo/LocalSGD). Private to exec/: it names torch types.
//
// The interpreter owns the stages and the order of actions; the algorithm owns communication
// across data-parallel replicas. With dp == 1 the interpreter uses NoDataParallel (all no-ops).
//
// Call order within one training step, per local stage s (all calls on the rank's main thread):
//   before_forward(s, mb)         before each F action of (s, mb)
//   before_backward(s, mb, last)  before each B or I action of (s, mb)
//   before_weight(s, mb)          before each W action of (s, mb)
//   after_backward(s, mb, last)   after the B or W action that completes (s, mb)'s gradients
//   await_gradients(s)            after every B or W action of s is timed (Note [Gradient waits])
//   unshard(s) / reshard(s)       the plan's UNSHARD / RESHARD actions of s (ZeRO-3 only;
//                                 Note [UNSHARD and RESHARD] in sched/action.hpp)
//   reduce_grad(s)                the plan's REDUCE_GRAD action of s: returns when s's gradients
//                                 are averaged over replicas (DDP) or immediately (LocalSGD)
//   before_optimizer_steps(step)  once per step, before the rank's first OPTIM action (the
//                                 tied-gradient exchange, tied_sync.hpp)
//   after_optimizer_step(step)    once per step, after every local stage's OPTIM action
// on_start() is called once before the first step, after every stage's parameters exist.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace pipewright::exec {

struct StageParams {
  int stage = 0;
  std::vector<torch::Tensor> params;   // registration order ("0.weight", "0.bias", "2.weight"...)
  std::vector<torch::Tensor> buffers;  // non-trainable state, broadcast from replica 0 at start
};

class DataParallelHooks {
 public:
  virtual ~DataParallelHooks() = default;
  virtual void on_start(std::vector<StageParams>& stages) = 0;
  virtual void before_forward(int /*stage*/, int /*microbatch*/) {}
  virtual void before_backward(int stage, int microbatch, bool last) = 0;
  virtual void before_weight(int /*stage*/, int /*microbatch*/) {}
  // Note [Parameter waits]: before a compute action of stage s is timed, waits for s's parameter
  // all-gathers in flight (ZeRO), so that the action's measured time is its compute alone.
  virtual void await_parameters(int /*stage*/) {}
  // ZeRO-3 (zero/zero3.hpp): UNSHARD starts gathering stage s's parameters, RESHARD frees them.
  // Below stage 3 the parameters are whole and these are no-ops.
  virtual void unshard(int /*stage*/) {}
  virtual void reshard(int /*stage*/) {}
  virtual void after_backward(int stage, int microbatch, bool last) = 0;
  // Note [Gradient waits]: after a B or W action of stage s is timed (right after it, before the
  // rank's next action), waits for the collectives its after_backward started and must finish
  // before the next backward (ZeRO-2/3: the microbatch's reduce-scatters, added into the shard
  // accumulator), so that the action's measured time is its compute alone; the wait is
  // data-parallel time (the algorithm's exposed-wait counter holds it), as the simulator models it
  // (Note [ZeRO in the simulator]). The algorithm must not rely on it: its next after_backward,
  // reduce_grad and settle finish whatever is still in flight.
  virtual void await_gradients(int /*stage*/) {}
  virtual void reduce_grad(int stage) = 0;
  virtual void before_optimizer_steps(std::int64_t /*step*/) {}
  virtual void after_optimizer_step(std::int64_t step) = 0;
  // After stage s's optimizer step: clears s's gradients for the next step and returns true, or
  // returns false and the interpreter calls the optimizer's zero_grad().
  [[nodiscard]] virtual bool clear_gradients(int /*stage*/) { return false; }
  // The loss of each microbatch is divided by (microbatches x this) before backward: DDP folds
  // its average over replicas in here (Note [DDP gradient buckets]), the others leave it at 1.
  [[nodiscard]] virtual int gradient_divisor() const { return 1; }
  // ZeRO (zero/zero.hpp): the tensors stage s's optimizer steps instead of its parameters (views
  // of this replica's shard whose .grad is the reduced shard gradient); empty: the parameters.
  // Valid after on_start.
  [[nodiscard]] virtual std::vector<torch::Tensor> optimizer_params(int /*stage*/) { return {}; }
  // The tensor stage s's optimizer steps for `param` (a parameter of s), whose .grad is what the
  // tied exchange sums (tied_sync.hpp): `param` itself, or under ZeRO the piece of its own
  // bucket (Note [ZeRO tied parameters]). Valid after on_start.
  [[nodiscard]] virtual torch::Tensor optimizer_tensor_of(int /*stage*/,
                                                          const torch::Tensor& param) {
    return param;
  }
  // Waits for communication that updates parameters in the background (ZeRO's all-gathers after
  // OPTIM), before anything outside a step reads them: evaluation, checkpoints, the weights.
  virtual void settle() {}
};

class NoDataParallel final : public DataParallelHooks {
 public:
  void on_start(std::vector<StageParams>& /*stages*/) override {}
  void before_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void reduce_grad(int /*stage*/) override {}
  void after_optimizer_step(std::int64_t /*step*/) override {}
};

}  // namespace pipewright::exec
