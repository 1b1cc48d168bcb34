// Common base of pipewright's data-parallel algorithms (DDP, SlowMo/LocalSGD): the interpreter
// seam (DataParallelHooks) plus what the run loop needs beyond it: communication counters and
// the algorithm state that checkpoints carry. Also the factory that builds the algorithm of a
// DataParallelSpec. Private to exec/ (names torch types).
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dp/dp_hooks.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/exec/data_parallel.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

// A data-parallel check failed: replicas that must be bit-identical are not (exit code 1).
class ReplicaDivergenceError : public Error {
 public:
  using Error::Error;
};

class DataParallelAlgorithm : public DataParallelHooks {
 public:
  [[nodiscard]] virtual DataParallelStats stats() const = 0;
  // Tensors (besides weights and optimizer state) that a checkpoint must carry, by name.
  [[nodiscard]] virtual std::map<std::string, torch::Tensor> state() const { return {}; }
  // Restores state() after on_start (resume). Throws ConfigError when a tensor is missing or has
  // the wrong shape.
  virtual void load_state(const std::map<std::string, torch::Tensor>& /*state*/) {}
  // Bytes of the model's training state (parameters, gradients) the rank holds now where that is
  // not its whole parameters, -1 where it is (Note [Runtime memory] in report/run_report.hpp:
  // the profile's runtime memory is the baseline RSS less this). ZeRO-3: its shards.
  [[nodiscard]] virtual std::int64_t resident_state_bytes() const { return -1; }
};

// What the algorithms need to know about the run besides their own options.
struct DataParallelContext {
  // The data-parallel group of this rank's pipeline position: its ranks are the replicas in
  // replica order (communicator rank == replica index). Must outlive the algorithm.
  Communicator* dp_comm = nullptr;
  int pp = 1;                // pipeline ranks per replica (for procs_per_node)
  int num_microbatches = 1;  // microbatches per step (every stage runs all of them)
  double learning_rate = 0;  // the optimizer's lr: SlowMo's gamma
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::int64_t first_step = 0;  // index of the first step run (> 0 when resuming)
  // Every N steps verify that the replicas hold bit-identical parameters (0 = never).
  std::int64_t check_replicas = 0;
  // --reduce-dtype bf16 (torch MixedPrecision's reduce_dtype): DDP all-reduces its gradient
  // buckets in bfloat16, and DiLoCo's outer all-reduce defaults to bf16.
  bool bf16_reduce = false;
};

// Builds the algorithm of `config` (validated with sched::validate_job beforehand).
[[nodiscard]] std::unique_ptr<DataParallelAlgorithm> make_data_parallel(
    const DataParallelSpec& config, const DataParallelContext& context);

// Post hook of one parameter's AccumulateGrad node: runs after autograd added the gradient to
// .grad and tells the owner (DDP, ZeRO, ZeRO-3: `owner->on_grad_accumulated(*stage, param)`),
// which counts the bucket's pending gradients (Note [DDP gradient buckets]). Owners befriend it.
template <typename Owner, typename Stage>
class GradAccumulatedHook final : public torch::autograd::FunctionPostHook {
 public:
  GradAccumulatedHook(Owner* owner, Stage* stage, std::size_t param)
      : owner_(owner), stage_(stage), param_(param) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    owner_->on_grad_accumulated(*stage_, param_);
    return outputs;
  }

 private:
  Owner* owner_;
  Stage* stage_;
  std::size_t param_;
};

// The per-stage bookkeeping of DDP, ZeRO and ZeRO-3 in one place. `Stage` has `params.stage`
// (the plan stage), `trainable` (the parameters whose gradients it buckets) and the hook
// records `accumulators` (compat::NodePtr) and `hook_keys` (std::uintptr_t).
//
// Installs a GradAccumulatedHook on the AccumulateGrad node of every parameter of
// `st.trainable` (hook i names parameter i), keeping the nodes alive until remove_grad_hooks.
template <typename Owner, typename Stage>
void install_grad_hooks(Owner* owner, Stage& st) {
  for (std::size_t i = 0; i < st.trainable.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(st.trainable[i]);
    PW_ASSERT(acc != nullptr, "a trainable parameter without a gradient accumulator");
    st.hook_keys.push_back(
        acc->add_post_hook(std::make_unique<GradAccumulatedHook<Owner, Stage>>(owner, &st, i)));
    st.accumulators.push_back(std::move(acc));
  }
}

// Removes what install_grad_hooks installed (destructors: the nodes outlive the owner).
template <typename Stage>
void remove_grad_hooks(Stage& st) noexcept {
  for (std::size_t i = 0; i < st.accumulators.size(); ++i) {
    st.accumulators[i]->del_post_hook(st.hook_keys[i]);
  }
  st.accumulators.clear();
  st.hook_keys.clear();
}

// The local stage `id` of `stages` (InternalError naming `who` when it is not local: the
// interpreter only names stages of its rank).
template <typename Stage>
[[nodiscard]] Stage& local_stage(const std::vector<std::unique_ptr<Stage>>& stages, int id,
                                 const char* who) {
  for (const auto& st : stages) {
    if (st->params.stage == id) return *st;
  }
  PW_ASSERT(false, who << ": stage " << id << " is not local to this rank");
  return *stages.front();
}

// A tensor over `base`'s storage at `offset` elements with shape `sizes` (contiguous), that
// autograd does not track as a view (optimizers may detach_() and zero_() it like any gradient):
// ZeRO's parameters and gradients as slices of the flat buffers.
inline torch::Tensor storage_alias(const torch::Tensor& base, std::int64_t offset,
                                   torch::IntArrayRef sizes) {
  std::vector<std::int64_t> strides(sizes.size(), 1);
  for (std::size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
  return torch::empty({0}, base.options())
      .set_(base.storage(), base.storage_offset() + offset, sizes, strides);
}

namespace detail {

// Collective wrappers that keep DataParallelStats up to date.
WorkPtr counted_all_reduce(Communicator& comm, const BufferView& buf, ReduceOp op,
                           const OpContext& ctx, DataParallelStats& stats);
WorkPtr counted_reduce(Communicator& comm, const BufferView& buf, int root, const OpContext& ctx,
                       DataParallelStats& stats);
WorkPtr counted_broadcast(Communicator& comm, const BufferView& buf, int root, const OpContext& ctx,
                          DataParallelStats& stats);
// View of a contiguous tensor (CPU or CUDA; float32/64/16, bfloat16, int64/32, uint8/bool) for
// the Communicator: activations between stages and data-parallel buffers.
[[nodiscard]] BufferView view_of(const torch::Tensor& t);
// Waits and adds the blocked time to stats.exposed_wait_ns.
void timed_wait(const WorkPtr& work, std::chrono::milliseconds timeout, DataParallelStats& stats);
// Broadcasts parameters and buffers from replica 0 (one flat float32 message for the float32
// tensors of each stage, one message per other tensor). Counted in stats.setup_*_bytes.
void broadcast_from_replica0(Communicator& comm, std::vector<StageParams>& stages,
                             std::chrono::milliseconds timeout, DataParallelStats& stats);
// A 64-bit hash of the bytes of `tensors` (portable, order-sensitive).
[[nodiscard]] std::uint64_t hash_tensors(const std::vector<torch::Tensor>& tensors);
// Gathers one hash per (local stage, replica) and throws ReplicaDivergenceError naming the
// replicas whose hash differs from the majority's (replica 0's on a tie).
void check_replicas_identical(Communicator& comm, const std::vector<StageParams>& stages,
                              std::int64_t step, std::chrono::milliseconds timeout,
                              DataParallelStats& stats);

}  // namespace detail
}  // namespace pipewright::exec
