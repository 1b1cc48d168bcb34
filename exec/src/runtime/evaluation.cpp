// Evaluation during training (evaluation.hpp, Note [Evaluation]).
#include "runtime/evaluation.hpp"

#include <utility>

#include "data/prefetch.hpp"
#include "data/sharding.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::int64_t lo, std::int64_t hi,
                             std::string what)
    : base_(std::move(base)), lo_(lo), hi_(hi), what_(std::move(what)) {
  PW_ASSERT(0 <= lo_ && lo_ < hi_ && hi_ <= base_->size(), "subset [" << lo_ << ", " << hi_ << ")");
}

std::pair<torch::Tensor, torch::Tensor> SubsetDataset::batch(
    const std::vector<std::int64_t>& indices) const {
  std::vector<std::int64_t> shifted;
  shifted.reserve(indices.size());
  for (auto i : indices) {
    PW_CHECK(i >= 0 && i < size(), ConfigError,
             "sample " << i << " is outside " << x_source() << " (" << size() << " samples)");
    shifted.push_back(lo_ + i);
  }
  return base_->batch(shifted);
}

HeldOutSplit held_out_split(std::int64_t size, std::int64_t seq) {
  HeldOutSplit s;
  const std::int64_t held = size / 10;
  s.eval_begin = size - held;
  s.train_end = s.eval_begin - seq;  // windows before it share no character with the held-out
  PW_CHECK(held >= 1 && s.train_end >= 1, ConfigError,
           "--eval-dataset: " << size << " windows of " << seq
                              << " tokens are too few to hold out 10% and keep a training split");
  return s;
}

Evaluator::Evaluator(const sched::LoweredPlan& plan, int pipe_rank, std::vector<StageSetup> setups,
                     Communicator* pipe, Communicator* world, LossFn loss,
                     InterpreterOptions options, std::unique_ptr<Dataset> data,
                     const RunConfig& config, int dp_index)
    : interp_(plan, pipe_rank, std::move(setups), pipe, &no_dp_, std::move(loss),
              [&options] {
                InterpreterOptions o = options;
                o.record_timings = false;
                o.recipe = nullptr;
                o.split_backward_step = -1;
                return o;
              }()),
      world_(world),
      data_(std::move(data)),
      config_(config),
      dp_index_(dp_index),
      device_(options.device),
      timeout_(options.timeout) {}

void Evaluator::agree_shapes(std::int64_t step_for_messages) {
  BatchLoader loader(
      *data_,
      ShardedBatches(data_->size(), config_.dp, dp_index_, config_.seed, false, config_.batch_size),
      device_, config_.microbatches, 0, false);
  interp_.agree_shapes(loader.next(0).xs.at(0), step_for_messages);
}

double Evaluator::evaluate(std::int64_t step) {
  torch::NoGradGuard no_grad;
  BatchLoader loader(
      *data_,
      ShardedBatches(data_->size(), config_.dp, dp_index_, config_.seed, false, config_.batch_size),
      device_, config_.microbatches, 0, false);
  double sum = 0;
  for (std::int64_t k = 0; k < config_.eval_batches; ++k) {
    const StepBatch b = loader.next(k);
    const StepResult r = interp_.run_step(step, b.xs, b.ys);
    if (r.has_loss) sum += r.loss;
  }
  double buf = sum;
  world_
      ->all_reduce(BufferView{&buf, 1, DType::kFloat64, {}}, ReduceOp::kSum,
                   OpContext{step, -1, -1, "evaluation loss all_reduce"})
      ->wait(timeout_);
  return buf / static_cast<double>(config_.eval_batches * config_.dp);
}

}  // namespace pipewright::exec
