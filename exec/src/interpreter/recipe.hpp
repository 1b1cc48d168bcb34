// The training recipe at the optimizer step (issue 33; docs/executor.md, "Training recipe"): the
// learning-rate schedule, the global gradient norm and clipping, and fp16's dynamic loss scaling.
// Private to exec/ (names torch types).
//
// Note [Global gradient norm]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `--clip-grad-norm X` means torch.nn.utils.clip_grad_norm_(model.parameters(), X) on one
// process holding the whole model: the L2 norm over every parameter of every stage, each tied
// parameter once, of the gradient the optimizer will apply. In a pipeline the parameters are
// spread over the ranks of a replica's pipeline group, so at the rank's first OPTIM action (after
// REDUCE_GRAD and the tied-gradient exchange, DataParallelHooks::before_optimizer_steps) each rank
// sums the squares of its gradients, skipping a tied copy that is not its group's first, and one
// all_reduce over the world (one slot per replica, plus fp16's overflow flag) gives every rank
// its replica's norm. With DDP the replicas' gradients are equal after the reduction, so all
// slots agree; local-step algorithms (SlowMo, LocalSGD, SGP, DiLoCo) clip each replica by its
// own norm. Generated plans place every OPTIM after all of a rank's compute and messages
// (lower.cpp), which the recipe checks, so every rank reaches the all_reduce.
//
// Note [Loss scaling]
// ~~~~~~~~~~~~~~~~~~~
// fp16 follows torch.amp.GradScaler: each microbatch loss is multiplied by the scale S before
// backward (initial 65536, --initial-loss-scale); at the optimizer step the gradients are
// multiplied by 1/S, and if any gradient of any stage of any replica is Inf or NaN (the same
// all_reduce carries the flag) every rank skips its optimizer steps and S halves; after
// --loss-scale-window (2000) overflow-free steps S doubles. A scale that would fall below
// --min-loss-scale (1, DeepSpeed's min_loss_scale) stops the run: NumericalError, exit 1, naming
// the step. The scale and its growth counter are saved in checkpoints.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <vector>

#include "pipewright/exec/communicator.hpp"
#include "pipewright/sched/job.hpp"

namespace pipewright::exec {

struct LossScalerOptions {
  double initial = 65536.0;    // --initial-loss-scale (torch GradScaler's init_scale)
  double min = 1.0;            // --min-loss-scale
  std::int64_t window = 2000;  // --loss-scale-window (GradScaler's growth_interval)
  static constexpr double kGrowth = 2.0;
  static constexpr double kBackoff = 0.5;
};

// What a checkpoint keeps of the recipe.
struct RecipeState {
  double loss_scale = 1.0;
  std::int64_t growth_tracker = 0;
};

// One step's optimizer phase as every rank of a replica sees it.
struct OptimizerPhase {
  double lr = 0;
  double grad_norm = 0;   // this replica's global norm, unscaled, before clipping (NaN: unknown)
  double loss_scale = 1;  // the scale this step's losses were multiplied by
  bool skipped = false;   // fp16 overflow somewhere: no optimizer step anywhere
  bool has_norm = false;  // the norm was computed this step
};

class TrainingRecipe {
 public:
  struct Options {
    sched::Precision precision = sched::Precision::kFp32;
    double clip_grad_norm = 0;
    sched::LrSchedule lr_schedule;
    double max_lr = 0.01;
    std::int64_t steps = 1;
    LossScalerOptions scaler;
    bool always_norm = false;  // compute the norm every step (--metrics) even without clipping
    int dp = 1;
    int dp_index = 0;
    // ZeRO: the optimizers hold this replica's shard of every gradient, so the norm sums the
    // squares over every rank of the world (each element counted once).
    bool sharded = false;
    // Parameters (TensorImpl addresses) whose gradient another copy counts (Note [Global
    // gradient norm]).
    std::set<const void*> not_counted;
    // Tests: on world rank `overflow_rank`, make one gradient Inf at step `overflow_step`
    // (PIPEWRIGHT_TEST_FP16_OVERFLOW=STEP:RANK).
    std::int64_t overflow_step = -1;
    int overflow_rank = -1;
    int world_rank = 0;
    std::chrono::milliseconds timeout{300'000};
  };
  // `world` must outlive this object.
  TrainingRecipe(Options options, Communicator* world);

  // The factor each microbatch loss is multiplied by before backward (1 unless fp16).
  [[nodiscard]] double loss_scale() const noexcept { return state_.loss_scale; }

  // At the rank's first OPTIM of `step`, after the data-parallel reduction: sets the learning
  // rate of every optimizer, and with clipping, fp16 or --metrics computes the global norm (a
  // collective over the world), unscales and clips the gradients, and decides fp16's skip.
  // Throws NumericalError when the fp16 scale falls below its minimum.
  OptimizerPhase before_optimizer(std::int64_t step,
                                  const std::vector<torch::optim::Optimizer*>& optimizers);

  [[nodiscard]] const RecipeState& state() const noexcept { return state_; }
  // The live state, for checkpoints to save and load in place.
  [[nodiscard]] RecipeState* mutable_state() noexcept { return &state_; }
  [[nodiscard]] bool needs_collective() const noexcept;
  // Replaces Options::not_counted (ZeRO: the tensors the optimizers step exist after on_start).
  void set_not_counted(std::set<const void*> not_counted) {
    o_.not_counted = std::move(not_counted);
  }

 private:
  Options o_;
  Communicator* world_;
  RecipeState state_;
};

// The float type of `precision`: kFloat, kBFloat16 or kHalf.
[[nodiscard]] torch::ScalarType compute_dtype(sched::Precision precision) noexcept;

}  // namespace pipewright::exec
