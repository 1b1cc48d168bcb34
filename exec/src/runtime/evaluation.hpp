// Evaluation during training (issue 33, item 4; docs/executor.md, "Training recipe"). Private to
// exec/ (names torch types).
//
// Note [Evaluation]
// ~~~~~~~~~~~~~~~~~
// `--eval-every N --eval-batches K` evaluates after every N-th step and after the last: a
// forward-only pass of the job's schedule (sched::make_plan with forward_only, the plan
// `run --forward-only` runs) over K batches of --batch-size samples per replica, on a second
// interpreter that shares the training stages' modules (no optimizer, no data-parallel hooks, no
// gradients, the run's precision). Each replica reads the first K batches of its shard of the
// evaluation set (the sharding training uses, sharding.hpp), unshuffled and the same every time,
// so successive evaluations compare like with like (a small set wraps around). The loss is the mean
// over the K batches and the replicas: one all_reduce over the world. The evaluation set is
// --eval-data-x/y
// (.npy) or --eval-dataset NAME, the held-out split of a bundled dataset: its last 10% of
// windows; training on --dataset NAME then reads only the windows before them, with a gap of one
// sequence so no character is in both. The weights do not change.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.hpp"
#include "dp/dp_hooks.hpp"
#include "interpreter/interpreter.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/exec/run.hpp"

namespace pipewright::exec {

// Samples [lo, hi) of another dataset.
class SubsetDataset final : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::int64_t lo, std::int64_t hi,
                std::string what);
  [[nodiscard]] std::int64_t size() const override { return hi_ - lo_; }
  [[nodiscard]] ValueType x_type() const override { return base_->x_type(); }
  [[nodiscard]] ValueType y_type() const override { return base_->y_type(); }
  [[nodiscard]] std::optional<IntRange> x_range() const override { return base_->x_range(); }
  [[nodiscard]] std::optional<IntRange> y_range() const override { return base_->y_range(); }
  [[nodiscard]] std::string x_source() const override { return base_->x_source() + what_; }
  [[nodiscard]] std::string y_source() const override { return base_->y_source() + what_; }
  [[nodiscard]] std::pair<torch::Tensor, torch::Tensor> batch(
      const std::vector<std::int64_t>& indices) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::int64_t lo_;
  std::int64_t hi_;
  std::string what_;
};

// The training and held-out windows of a bundled dataset of `size` windows of `seq` tokens:
// [0, train_end) and [eval_begin, size) (Note [Evaluation]). Throws ConfigError naming
// --eval-dataset when either would be empty.
struct HeldOutSplit {
  std::int64_t train_end = 0;
  std::int64_t eval_begin = 0;
};
[[nodiscard]] HeldOutSplit held_out_split(std::int64_t size, std::int64_t seq);

class Evaluator {
 public:
  // `setups` are the training stages' (shared) bodies and edges, without optimizers; `plan` the
  // job's forward-only plan. `pipe` and `world` must outlive this object.
  Evaluator(const sched::LoweredPlan& plan, int pipe_rank, std::vector<StageSetup> setups,
            Communicator* pipe, Communicator* world, LossFn loss, InterpreterOptions options,
            std::unique_ptr<Dataset> data, const RunConfig& config, int dp_index);

  // Collective over the pipeline group, once before the first evaluate (Interpreter's).
  void agree_shapes(std::int64_t step_for_messages);
  // Collective over the world: the mean loss over the evaluation batches and the replicas.
  [[nodiscard]] double evaluate(std::int64_t step);

 private:
  NoDataParallel no_dp_;
  Interpreter interp_;
  Communicator* world_;
  std::unique_ptr<Dataset> data_;
  const RunConfig& config_;
  int dp_index_;
  torch::Device device_;
  std::chrono::milliseconds timeout_;
};

}  // namespace pipewright::exec
