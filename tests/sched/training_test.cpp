// The training recipe (pipewright/sched/training.hpp): Megatron's learning-rate schedule at exact
// values, its validation, and the recipe's round trip through the job JSON.
#include "pipewright/sched/training.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"

namespace pipewright::sched {
namespace {

TEST(LrSchedule, ConstantWithoutWarmupIsTheLearningRate) {
  const LrSchedule s;
  for (std::int64_t step : {0, 1, 50, 1000}) EXPECT_EQ(learning_rate_at(s, 0.1, 100, step), 0.1);
}

TEST(LrSchedule, WarmupStartsAtZeroAndReachesThePeakAtItsLastStep) {
  LrSchedule s;
  s.warmup_steps = 4;
  EXPECT_EQ(learning_rate_at(s, 0.2, 10, 0), 0.0);  // Megatron's first iteration
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.2, 10, 1), 0.05);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.2, 10, 4), 0.2);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.2, 10, 9), 0.2);  // constant after
}

TEST(LrSchedule, CosineAndLinearDecayFromPeakToMin) {
  LrSchedule s;
  s.warmup_steps = 2;
  s.decay_steps = 12;
  s.min_lr = 0.01;
  s.decay_style = LrDecayStyle::kCosine;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 100, 2), 0.1);
  // Half-way through the decay (r = 0.5): cos(pi/2) = 0, so (max + min) / 2.
  EXPECT_NEAR(learning_rate_at(s, 0.1, 100, 7), 0.055, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 100, 12), 0.01);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 100, 13), 0.01);
  s.decay_style = LrDecayStyle::kLinear;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 100, 7), 0.055);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 100, 4), 0.1 - 0.09 * 0.2);
  // Without --lr-decay-steps the decay runs over the job's steps.
  s.decay_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 0.1, 12, 12), 0.01);
}

TEST(LrSchedule, DecayShorterThanWarmupIsRefusedNamingTheFlag) {
  LrSchedule s;
  s.warmup_steps = 10;
  s.decay_style = LrDecayStyle::kCosine;
  s.decay_steps = 5;
  try {
    validate_lr_schedule(s, 0.1, 100);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--lr-decay-steps 5"), std::string::npos) << e.what();
  }
  s.decay_steps = 0;  // default: --steps 8 < warm-up 10
  EXPECT_THROW(validate_lr_schedule(s, 0.1, 8), ConfigError);
  s.decay_steps = 20;
  s.min_lr = 0.5;
  EXPECT_THROW(validate_lr_schedule(s, 0.1, 100), ConfigError);  // --lr-min above --lr
  EXPECT_THROW((void)parse_lr_decay_style("step"), ConfigError);
}

TEST(Precision, ParsesAndNamesTheFlag) {
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16);
  EXPECT_EQ(element_bytes(Precision::kFp16), 2);
  EXPECT_EQ(element_bytes(Precision::kFp32), 4);
  try {
    (void)parse_precision("fp8", "--reduce-dtype");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--reduce-dtype"), std::string::npos);
  }
}

TEST(Recipe, RoundTripsThroughTheJobJsonAndIsValidated) {
  JobSpec job;
  job.steps = 20;
  job.precision = Precision::kBf16;
  job.reduce_dtype = Precision::kBf16;
  job.clip_grad_norm = 1.5;
  job.lr_schedule.warmup_steps = 3;
  job.lr_schedule.decay_style = LrDecayStyle::kCosine;
  job.lr_schedule.min_lr = 0.001;
  const std::string text = to_json(job);
  EXPECT_NE(text.find("\"lr_decay_steps\": 20"), std::string::npos) << text;
  const JobSpec back = parse_job(text, "job.json");
  EXPECT_EQ(back.precision, Precision::kBf16);
  EXPECT_EQ(back.clip_grad_norm, 1.5);
  EXPECT_EQ(to_json(back), text);
  job.clip_grad_norm = -1;
  EXPECT_THROW(validate_job(job), ConfigError);
  job.clip_grad_norm = 0;
  job.reduce_dtype = Precision::kFp16;
  EXPECT_THROW(validate_job(job), ConfigError);
}

}  // namespace
}  // namespace pipewright::sched
