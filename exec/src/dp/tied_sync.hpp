// Tied parameters across pipeline stages (issue 21; DeepSpeed TiedLayerSpec semantics).
//
// A parameter listed in several torchscript nodes (model.json tied_to, e.g. GPT-2's
// lm_head.weight = transformer.wte.weight) is one tensor inside a stage (stage_module.hpp, Note
// [Tied parameters in a stage]) but one copy per stage when its nodes lie in different stages.
// The copies start equal (the exporter writes the same values into every node file) and stay
// equal because every step, after the backward and before the optimizer, each copy's gradient is
// replaced by the sum of all copies' gradients: the gradient PyTorch computes for the single
// shared parameter.
//
// Note [Tied gradient exchange]: the exchange is one all_reduce over the pipeline group of the
// replica, of a flat buffer holding every cross-stage tied group (fixed order: by group name);
// each rank adds its local copies' gradients into its group's slice (zeros where it holds none),
// and afterwards writes the slice back into each local copy's gradient. It runs before the rank's
// first OPTIM action (DataParallelHooks::before_optimizer_steps), which every generated plan
// places after all of the rank's compute and send/recv actions (lower.cpp appends the OPTIMs), so
// every rank reaches it without waiting for anything another rank does after its own exchange:
// no deadlock for any schedule (GPipe, 1F1B, interleaved, zero bubble), any number of stages per
// rank, or data parallelism (each replica's pipeline group exchanges separately; DDP's
// REDUCE_GRAD has averaged every copy over the replicas already, and sums commute; under ZeRO
// each copy is its bucket's piece of this replica, the same elements in every stage: Note [ZeRO
// tied parameters] in zero/zero_buckets.hpp). Plans that
// compute or communicate after a rank's first OPTIM are rejected (ConfigError) when the model has
// cross-stage tied groups.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dp/dp_hooks.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::exec {

// A tied group whose copies lie in more than one stage.
struct TiedGroup {
  std::string name;  // canonical parameter name
  std::vector<std::int64_t> shape;
  std::vector<int> stages;  // stages holding a copy, ascending
};

// The cross-stage tied groups of `model` under `partition`, sorted by name.
[[nodiscard]] std::vector<TiedGroup> cross_stage_tied_groups(const graph::Model& model,
                                                             const graph::Partition& partition);

// Note [Replica gradients]: Chimera's replicas of a model stage (plan.hpp, Note [Stage replicas])
// are kept equal the same way: every parameter of a replicated model stage is a group
// replica_group_name(model stage, name) whose copies are the replicas' tensors, so the exchange
// replaces each replica's gradient by the sum over the replicas (each accumulated over its own
// microbatches, all scaled by 1/m of the whole batch): the gradient of one pipeline over the
// whole batch. Parameters of a cross-stage tied group are left to that group, whose sum covers
// every replica's copy already. The shapes come from building each replicated model stage once.
[[nodiscard]] std::string replica_group_name(int model_stage, const std::string& param);
[[nodiscard]] std::vector<TiedGroup> replica_groups(const graph::Model& model,
                                                    const graph::Partition& partition,
                                                    const sched::PlanShape& shape,
                                                    const std::set<std::string>& tied_groups);

// One local copy: a trainable tensor of a local stage and its group.
struct TiedCopy {
  std::string group;
  torch::Tensor param;
  int stage = -1;  // the plan stage holding it
};

class StageModule;
// The copies on this rank: `modules` are the rank's stages (plan stages `stages`, in that order);
// a parameter in a group of `tied_groups` belongs to it, else one of a replicated model stage to
// its replica group.
[[nodiscard]] std::vector<TiedCopy> local_tied_copies(
    const std::vector<const StageModule*>& modules, const std::vector<std::int32_t>& stages,
    const sched::PlanShape& shape, const std::set<std::string>& tied_groups);

// Forwards every hook to `inner` and sums tied gradients in before_optimizer_steps.
class TiedGradientSync final : public DataParallelHooks {
 public:
  // `pipe` is this replica's pipeline group; `groups` the same list on every rank; `local` this
  // rank's copies (float32 parameters on `device`, where the exchange buffer lives). Throws
  // ConfigError when `plan` computes or communicates after a rank's first OPTIM (Note [Tied
  // gradient exchange]). `inner` and `pipe` must outlive this object.
  TiedGradientSync(DataParallelHooks* inner, Communicator* pipe, std::vector<TiedGroup> groups,
                   std::vector<TiedCopy> local, const sched::LoweredPlan& plan,
                   torch::Device device, std::chrono::milliseconds timeout);

  void on_start(std::vector<StageParams>& stages) override { inner_->on_start(stages); }
  void before_forward(int stage, int mb) override { inner_->before_forward(stage, mb); }
  void before_backward(int stage, int mb, bool last) override {
    inner_->before_backward(stage, mb, last);
  }
  void before_weight(int stage, int mb) override { inner_->before_weight(stage, mb); }
  void await_parameters(int stage) override { inner_->await_parameters(stage); }
  void await_gradients(int stage) override { inner_->await_gradients(stage); }
  void unshard(int stage) override { inner_->unshard(stage); }
  void reshard(int stage) override { inner_->reshard(stage); }
  void after_backward(int stage, int mb, bool last) override {
    inner_->after_backward(stage, mb, last);
  }
  void reduce_grad(int stage) override { inner_->reduce_grad(stage); }
  void before_optimizer_steps(std::int64_t step) override;
  void after_optimizer_step(std::int64_t step) override { inner_->after_optimizer_step(step); }
  [[nodiscard]] bool clear_gradients(int stage) override { return inner_->clear_gradients(stage); }
  [[nodiscard]] int gradient_divisor() const override { return inner_->gradient_divisor(); }
  [[nodiscard]] std::vector<torch::Tensor> optimizer_params(int stage) override {
    return inner_->optimizer_params(stage);
  }
  [[nodiscard]] torch::Tensor optimizer_tensor_of(int stage, const torch::Tensor& param) override {
    return inner_->optimizer_tensor_of(stage, param);
  }
  void settle() override { inner_->settle(); }

 private:
  DataParallelHooks* inner_;
  Communicator* pipe_;
  std::vector<TiedGroup> groups_;
  std::vector<std::int64_t> offsets_;  // per group, into the flat buffer
  std::int64_t total_ = 0;
  std::vector<TiedCopy> local_;
  std::vector<std::size_t> local_group_;  // per local copy, index into groups_
  std::vector<torch::Tensor> stepped_;    // per local copy, what its optimizer steps (first step)
  torch::Device device_;
  std::chrono::milliseconds timeout_;
};

}  // namespace pipewright::exec
