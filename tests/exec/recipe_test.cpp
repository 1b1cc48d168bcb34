// The training recipe at the optimizer step (exec/src/interpreter/recipe.hpp), the metrics line
// (metrics.hpp) and the held-out split (evaluation.hpp), in one process.
#include "interpreter/recipe.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <thread>

#include "pipewright/exec/fake_communicator.hpp"
#include "pipewright/exec/run.hpp"
#include "runtime/evaluation.hpp"
#include "runtime/metrics.hpp"

namespace pipewright::exec {
namespace {

struct OneRank {
  FakeWorld world{1};
  std::unique_ptr<Communicator> comm = world.communicator(0);
};

TEST(Recipe, SetsTheScheduledLearningRateOnEveryOptimizer) {
  OneRank r;
  TrainingRecipe::Options o;
  o.max_lr = 0.2;
  o.steps = 10;
  o.lr_schedule.warmup_steps = 4;
  TrainingRecipe recipe(o, r.comm.get());
  auto w = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.2));
  EXPECT_FALSE(recipe.needs_collective());
  EXPECT_EQ(recipe.before_optimizer(0, {&sgd}).lr, 0.0);
  EXPECT_EQ(sgd.param_groups()[0].options().get_lr(), 0.0);
  EXPECT_DOUBLE_EQ(recipe.before_optimizer(2, {&sgd}).lr, 0.1);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options().get_lr(), 0.1);
}

TEST(Recipe, ClipsByTheGlobalNormLikeClipGradNorm) {
  OneRank r;
  TrainingRecipe::Options o;
  o.clip_grad_norm = 1.0;
  auto a = torch::zeros({2}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({3.0F, 0.0F});
  b.mutable_grad() = torch::tensor({4.0F});
  torch::optim::SGD s1({a}, torch::optim::SGDOptions(0.1));
  torch::optim::SGD s2({b}, torch::optim::SGDOptions(0.1));
  TrainingRecipe recipe(o, r.comm.get());
  const auto phase = recipe.before_optimizer(0, {&s1, &s2});
  EXPECT_TRUE(phase.has_norm);
  EXPECT_DOUBLE_EQ(phase.grad_norm, 5.0);  // over both stages' optimizers
  const float coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(a.grad()[0].item<float>(), 3.0F * coef);
  EXPECT_FLOAT_EQ(b.grad()[0].item<float>(), 4.0F * coef);
  // Below the threshold nothing changes.
  a.mutable_grad() = torch::tensor({0.3F, 0.0F});
  b.mutable_grad() = torch::tensor({0.4F});
  (void)recipe.before_optimizer(1, {&s1, &s2});
  EXPECT_EQ(b.grad()[0].item<float>(), 0.4F);
}

TEST(Recipe, TiedCopiesCountOnce) {
  OneRank r;
  TrainingRecipe::Options o;
  o.always_norm = true;
  auto a = torch::zeros({1}, torch::requires_grad());
  auto copy = torch::zeros({1}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({3.0F});
  copy.mutable_grad() = torch::tensor({3.0F});
  o.not_counted.insert(copy.unsafeGetTensorImpl());
  torch::optim::SGD sgd({a, copy}, torch::optim::SGDOptions(0.1));
  TrainingRecipe recipe(o, r.comm.get());
  EXPECT_DOUBLE_EQ(recipe.before_optimizer(0, {&sgd}).grad_norm, 3.0);
}

TEST(Recipe, Fp16OverflowOnOneRankSkipsEveryRankAndHalvesTheScale) {
  FakeWorld world(2);
  auto comms = world.communicators();
  std::vector<OptimizerPhase> phases(2);
  std::vector<double> scales(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      TrainingRecipe::Options o;
      o.precision = sched::Precision::kFp16;
      o.scaler.initial = 8.0;
      o.scaler.window = 2;
      auto w = torch::zeros({2}, torch::requires_grad());
      torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.1));
      TrainingRecipe recipe(o, comms[static_cast<std::size_t>(rank)].get());
      w.mutable_grad() = torch::tensor({8.0F, 16.0F});  // scaled by 8
      (void)recipe.before_optimizer(0, {&sgd});
      EXPECT_FLOAT_EQ(w.grad()[1].item<float>(), 2.0F);  // unscaled
      w.mutable_grad() = torch::tensor({8.0F, 16.0F});
      (void)recipe.before_optimizer(1, {&sgd});  // second clean step: the scale doubles
      EXPECT_EQ(recipe.loss_scale(), 16.0);
      w.mutable_grad() =
          torch::tensor({rank == 1 ? std::numeric_limits<float>::infinity() : 1.0F, 1.0F});
      phases[static_cast<std::size_t>(rank)] = recipe.before_optimizer(2, {&sgd});
      scales[static_cast<std::size_t>(rank)] = recipe.loss_scale();
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(phases[static_cast<std::size_t>(rank)].skipped) << "rank " << rank;
    EXPECT_EQ(phases[static_cast<std::size_t>(rank)].loss_scale, 16.0);
    EXPECT_EQ(scales[static_cast<std::size_t>(rank)], 8.0);
  }
}

TEST(Recipe, Fp16ScaleBelowItsMinimumStopsNamingTheStep) {
  OneRank r;
  TrainingRecipe::Options o;
  o.precision = sched::Precision::kFp16;
  o.scaler.initial = 2.0;
  o.scaler.min = 2.0;
  auto w = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.1));
  TrainingRecipe recipe(o, r.comm.get());
  w.mutable_grad() = torch::tensor({std::nanf("")});
  try {
    (void)recipe.before_optimizer(4, {&sgd});
    FAIL() << "expected NumericalError";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("step 5"), std::string::npos) << e.what();
  }
}

TEST(Metrics, OneJsonLinePerStep) {
  StepLog log;
  log.step = 2;
  log.loss = 1.5;
  log.lr = 0.25;
  log.has_grad_norm = true;
  log.grad_norm = 0.75;
  log.step_ms = 10;
  log.samples_per_s = 100;
  log.has_eval_loss = true;
  log.eval_loss = 2.0;
  EXPECT_EQ(metrics_line(log, 16, {100, 200}),
            "{\"step\": 3, \"loss\": 1.5, \"eval_loss\": 2, \"lr\": 0.25, \"grad_norm\": 0.75, "
            "\"loss_scale\": 1, \"skipped\": false, \"step_ms\": 10, \"samples_per_s\": 100, "
            "\"tokens_per_s\": 1600, \"peak_memory_bytes\": [100, 200]}");
  log.loss = std::nan("");
  log.has_eval_loss = false;
  EXPECT_NE(metrics_line(log, 0, {}).find("\"loss\": null"), std::string::npos);
}

// Issue 44, item 8: a run resumed from the checkpoint after step 2 keeps steps 1..2 of the file
// and drops the later ones the earlier run wrote (it reached step 4 but its step-3 and step-4
// checkpoints were never written), so the file reads 1, 2, 3, 4, 5 and not 1, 2, 3, 4, 3, 4, 5.
TEST(Metrics, ResumeTruncatesToTheResumedStep) {
  const std::string path = ::testing::TempDir() + "/pw_metrics_resume.jsonl";
  StepLog log;
  {
    MetricsWriter first(path, 0);
    for (std::int64_t s = 0; s < 4; ++s) {
      log.step = s;
      first.write(log, 0, {});
    }
  }
  {
    MetricsWriter resumed(path, 2);
    for (std::int64_t s = 2; s < 5; ++s) {
      log.step = s;
      resumed.write(log, 0, {});
    }
  }
  std::ifstream in(path);
  std::vector<int> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(std::stoi(line.substr(9)));
  EXPECT_EQ(steps, (std::vector<int>{1, 2, 3, 4, 5}));
  // A fresh run (resumed step 0) replaces the file.
  {
    MetricsWriter fresh(path, 0);
    log.step = 0;
    fresh.write(log, 0, {});
  }
  std::ifstream again(path);
  int lines = 0;
  for (std::string line; std::getline(again, line);) ++lines;
  EXPECT_EQ(lines, 1);
}

TEST(Evaluation, HeldOutSplitLeavesAGapOfOneSequence) {
  const auto s = held_out_split(1000, 32);
  EXPECT_EQ(s.eval_begin, 900);
  EXPECT_EQ(s.train_end, 868);
  EXPECT_THROW((void)held_out_split(20, 32), ConfigError);
}

}  // namespace
}  // namespace pipewright::exec
