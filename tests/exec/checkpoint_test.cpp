#include "runtime/checkpoint.hpp"

#include <gtest/gtest.h>

#include <torch/torch.h>
#include <fstream>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/file_io.hpp"
#include "dp/ddp.hpp"
#include "dp/slowmo.hpp"
#include "dp_test_util.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using testing::make_data;
using testing::Mlp;
using testing::run_replicas;

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("pw_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Trains `dp` SlowMo replicas (memory-efficient, momentum SGD) from step `from` to `to`,
// optionally resuming from / saving to a checkpoint directory; returns every replica's weights.
std::vector<std::vector<torch::Tensor>> train(int dp, int from, int to, const std::string& dir,
                                              bool resume, bool save) {
  const Mlp init = Mlp::init(4, 6, 2, 5);
  std::vector<std::vector<torch::Tensor>> out(static_cast<std::size_t>(dp));
  run_replicas(dp, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    torch::optim::SGD opt(m.params, torch::optim::SGDOptions(0.05).momentum(0.9));
    SlowMoOptions o;
    o.localsgd_frequency = 2;
    o.slowmo_frequency = 3;
    o.momentum = 0.4;
    o.slowmo_lr = 0.8;
    o.num_shards = dp;
    o.learning_rate = 0.05;
    o.timeout = std::chrono::milliseconds(20000);
    SlowMo algo(&comm, o);
    std::vector<StageParams> sp{m.stage_params()};
    algo.on_start(sp);
    TrainingState st;
    st.stages = sp;
    st.optimizers = {&opt};
    st.dp_algorithm = &algo;
    const CheckpointIdentity id{r, dp, 42};
    ShardedBatches batches(37, dp, r, 3, true, 4);
    int start = from;
    if (resume) {
      const auto step = agree_resume_step(dir, r, comm, std::chrono::milliseconds(20000));
      EXPECT_EQ(step, from);
      load_checkpoint(dir, step, id, st);
      batches.seek(st.data);
      start = static_cast<int>(step);
    }
    auto [x_all, y_all] = make_data(37, 4, 2, 9);
    for (int step = start; step < to; ++step) {
      const auto idx = batches.next_batch();
      auto x = x_all.index_select(0, torch::tensor(idx));
      auto y = y_all.index_select(0, torch::tensor(idx));
      torch::mse_loss(m.forward(x), y).backward();
      algo.reduce_grad(0);
      opt.step();
      opt.zero_grad();
      algo.after_optimizer_step(step);
      if (save && (step + 1) % 2 == 0) {
        st.completed_steps = step + 1;
        st.data = batches.position();
        save_checkpoint(dir, st, id, comm, std::chrono::milliseconds(20000));
      }
    }
    out[static_cast<std::size_t>(r)] = m.params;
  });
  return out;
}

TEST(Checkpoint, ResumeIsBitIdenticalToAnUninterruptedRun) {
  const std::string dir = temp_dir("resume");
  const auto straight = train(2, 0, 7, "", false, false);
  (void)train(2, 0, 4, dir, false, true);  // checkpoints after steps 2 and 4
  EXPECT_EQ(latest_complete_checkpoint(dir, 0), 4);
  EXPECT_EQ(latest_complete_checkpoint(dir, 1), 4);
  const auto resumed = train(2, 4, 7, dir, true, false);
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t i = 0; i < straight[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(straight[r][i], resumed[r][i])) << "replica " << r << " param " << i;
    }
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, AnIncompleteSaveIsIgnored) {
  const std::string dir = temp_dir("incomplete");
  const auto straight = train(2, 0, 5, "", false, false);
  (void)train(2, 0, 4, dir, false, true);
  // A run killed during the save of step 4: one rank's file is truncated, no COMPLETE marker.
  fs::remove(fs::path(checkpoint_dir_of_step(dir, 4)) / "COMPLETE");
  fs::resize_file(checkpoint_file(dir, 4, 1), 100);
  EXPECT_EQ(latest_complete_checkpoint(dir, 1), 2);
  const auto resumed = train(2, 2, 5, dir, true, false);
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t i = 0; i < straight[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(straight[r][i], resumed[r][i])) << "replica " << r;
    }
  }
  // Only the two latest complete checkpoints are kept.
  (void)train(2, 0, 6, dir, false, true);
  EXPECT_FALSE(fs::exists(checkpoint_dir_of_step(dir, 2)));
  EXPECT_TRUE(fs::exists(checkpoint_dir_of_step(dir, 6)));
  fs::remove_all(dir);
}

TEST(Checkpoint, RejectsCorruptForeignAndMismatchedFiles) {
  Mlp m = Mlp::init(4, 6, 2, 5);
  torch::optim::SGD opt(m.params, torch::optim::SGDOptions(0.05).momentum(0.9));
  TrainingState st;
  st.stages = {m.stage_params(3)};
  st.optimizers = {&opt};
  st.completed_steps = 9;
  st.data = DataPosition{2, 5};
  const std::string bytes = serialize_checkpoint(st, {1, 4, 77});

  TrainingState back;
  Mlp m2 = Mlp::init(4, 6, 2, 6);
  torch::optim::SGD opt2(m2.params, torch::optim::SGDOptions(0.05).momentum(0.9));
  back.stages = {m2.stage_params(3)};
  back.optimizers = {&opt2};
  parse_checkpoint(bytes, "x.pt", {1, 4, 77}, back);
  EXPECT_EQ(back.completed_steps, 9);
  EXPECT_EQ(back.data, (DataPosition{2, 5}));
  for (std::size_t i = 0; i < m.params.size(); ++i)
    EXPECT_TRUE(torch::equal(m.params[i], m2.params[i]));

  EXPECT_THROW(parse_checkpoint(bytes.substr(0, bytes.size() / 2), "x.pt", {1, 4, 77}, back),
               ParseError);
  EXPECT_THROW(parse_checkpoint("garbage", "x.pt", {1, 4, 77}, back), ParseError);
  EXPECT_THROW(parse_checkpoint(bytes, "x.pt", {2, 4, 77}, back), ConfigError);  // other rank
  EXPECT_THROW(parse_checkpoint(bytes, "x.pt", {1, 8, 77}, back), ConfigError);  // world size
  EXPECT_THROW(parse_checkpoint(bytes, "x.pt", {1, 4, 78}, back), ConfigError);  // config
  Mlp wide = Mlp::init(4, 7, 2, 5);
  TrainingState other;
  other.stages = {wide.stage_params(3)};
  EXPECT_THROW(parse_checkpoint(bytes, "x.pt", {1, 4, 77}, other), ConfigError);  // shapes
}

std::string config_error_of(const std::string& bytes, const CheckpointIdentity& id,
                            TrainingState& st) {
  try {
    parse_checkpoint(bytes, "x.pt", id, st);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// Issue 43: another ZeRO stage or another model is named by stage and tensor, before the
// fingerprint's "another configuration" (the fingerprint differs too: here it is the same, 77,
// to show the named check alone refuses).
TEST(Checkpoint, NamesTheStageAndTensorOfAnotherZeroStageOrModel) {
  Mlp m = Mlp::init(4, 6, 2, 5);
  torch::optim::SGD opt(m.params, torch::optim::SGDOptions(0.05).momentum(0.9));
  TrainingState st;
  st.stages = {m.stage_params(3)};
  st.optimizers = {&opt};
  st.zero_stage = 1;
  const std::string bytes = serialize_checkpoint(st, {1, 4, 77});

  Mlp m2 = Mlp::init(4, 6, 2, 6);
  torch::optim::SGD opt2(m2.params, torch::optim::SGDOptions(0.05).momentum(0.9));
  TrainingState back;
  back.stages = {m2.stage_params(3)};
  back.optimizers = {&opt2};
  back.zero_stage = 2;
  EXPECT_NE(config_error_of(bytes, {1, 4, 78}, back)
                .find("x.pt: stage 3: optimizer state 'stage0.optimizer' is a ZeRO-1 shard "
                      "(--zero-stage 1), this run has --zero-stage 2"),
            std::string::npos);
  back.zero_stage = 0;
  EXPECT_NE(config_error_of(bytes, {1, 4, 77}, back).find("this run has --zero-stage 0"),
            std::string::npos);
  back.zero_stage = 1;
  parse_checkpoint(bytes, "x.pt", {1, 4, 77}, back);  // the same stage loads

  Mlp wide = Mlp::init(4, 7, 2, 5);
  TrainingState other;
  other.stages = {wide.stage_params(3)};
  other.zero_stage = 1;
  const std::string msg = config_error_of(bytes, {1, 4, 78}, other);
  EXPECT_NE(msg.find("x.pt: stage 3: tensor 'stage0.param0' has shape [6, 4] Float, the model "
                     "has [7, 4] Float"),
            std::string::npos)
      << msg;
}

// Issue 20 item 10: what a killed save left of its temporary files is removed on the next start;
// each rank removes only its own (ranks clean concurrently).
TEST(Checkpoint, StaleTemporariesAreRemovedByTheirOwnRank) {
  const std::string dir = (fs::temp_directory_path() / "pw_ckpt_stale_test").string();
  fs::remove_all(dir);
  const std::string step = checkpoint_dir_of_step(dir, 4);
  fs::create_directories(step);
  for (const char* name : {"rank-1.pt.tmp.a1b2c3", "rank-0.pt.tmp.d4e5f6", "COMPLETE.tmp.g7h8i9",
                           "rank-1.pt", "rank-10.pt.tmp.zzzzzz"}) {
    std::ofstream(fs::path(step) / name) << "x";
  }
  EXPECT_EQ(remove_stale_temporaries(dir, 1), 1);
  EXPECT_FALSE(fs::exists(fs::path(step) / "rank-1.pt.tmp.a1b2c3"));
  EXPECT_TRUE(fs::exists(fs::path(step) / "rank-1.pt"));
  EXPECT_TRUE(fs::exists(fs::path(step) / "rank-10.pt.tmp.zzzzzz"));  // rank 10's, not rank 1's
  EXPECT_EQ(remove_stale_temporaries(dir, 0), 2);                     // its own and the marker's
  EXPECT_FALSE(fs::exists(fs::path(step) / "COMPLETE.tmp.g7h8i9"));
  EXPECT_EQ(remove_stale_temporaries(dir + "/missing", 0), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipewright::exec
