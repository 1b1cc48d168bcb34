// Resuming a ZeRO checkpoint at another dp (Note [Resuming at another dp] in
// runtime/checkpoint.hpp, Note [ZeRO re-sharding] in zero/zero_reshard.hpp), with replicas as
// threads over the fake backend: every parameter and every optimizer-state element a loader at
// the new dp holds, gathered over its replicas, is bit-identical to what the saved run held,
// gathered; training continues close to the uninterrupted run; bad resumes name the flags.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "dp_test_util.hpp"
#include "pipewright/graph/error.hpp"
#include "runtime/checkpoint.hpp"
#include "zero/zero.hpp"
#include "zero/zero3.hpp"
#include "zero/zero_reshard.hpp"

namespace pipewright::exec {
namespace {

using testing::make_data;
using testing::max_abs_diff;
using testing::Mlp;
using testing::run_replicas;

namespace fs = std::filesystem;

constexpr std::int64_t kGlobalRows = 12;  // the global batch: 12 / dp rows a replica
constexpr std::int64_t kCap = 44;         // bytes: several buckets, each padded differently by dp
constexpr std::uint64_t kFingerprint = 77;

std::string temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("pw_zero_reshard_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// What one replica holds at the end: its parameters (gathered), its optimizer's piece states
// and layout, and (ZeRO-3) its parameter shard.
struct Held {
  std::vector<torch::Tensor> params;
  std::vector<PieceState> pieces;
  ShardLayout layout;
  torch::Tensor param_shard;
};

std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::AdamW>(
      std::move(params), torch::optim::AdamWOptions(0.05).weight_decay(0.01).amsgrad(true));
}

// ZeRO-`stage` at `dp` from step `from` (resuming from `dir` when from > 0) to `to`, saving a
// checkpoint of step `to` to `dir` when `save`.
std::vector<Held> train(int stage, int dp, int from, int to, const std::string& dir, bool save) {
  const Mlp init = Mlp::init(6, 10, 3, 7);
  std::vector<Held> out(static_cast<std::size_t>(dp));
  run_replicas(dp, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    const ZeroOptions o = testing::zero_options(stage, 1, kCap);
    std::unique_ptr<DataParallelAlgorithm> algo;
    if (stage == 3) {
      algo = std::make_unique<Zero3>(&comm, o, r);
    } else {
      algo = std::make_unique<Zero>(&comm, o);
    }
    DataParallelAlgorithm& zero = *algo;
    std::vector<StageParams> sp{m.stage_params()};
    zero.on_start(sp);
    auto opt = adamw(zero.optimizer_params(0));
    TrainingState st;
    st.stages = sp;
    st.optimizers = {opt.get()};
    st.dp_algorithm = &zero;
    st.zero_stage = stage;
    st.pp = 1;
    st.dp = dp;
    st.batch_size = kGlobalRows / dp;
    st.make_optimizer = adamw;
    const CheckpointIdentity id{r, dp, kFingerprint};
    if (from > 0) {
      const auto step = agree_resume_step(dir, r, comm, std::chrono::milliseconds(20000));
      ASSERT_EQ(step, from);
      load_checkpoint(dir, step, id, st);
    }
    const std::int64_t rows = kGlobalRows / dp;
    for (int step = from; step < to; ++step) {
      auto [x_all, y_all] = make_data(kGlobalRows, 6, 3, 100 + step);
      auto x = x_all.narrow(0, r * rows, rows);
      auto y = y_all.narrow(0, r * rows, rows);
      zero.unshard(0);  // ZeRO-3: one window a step; ZeRO-1/2: nothing
      zero.before_forward(0, 0);
      auto loss = torch::mse_loss(m.forward(x), y) / static_cast<double>(dp);
      zero.before_backward(0, 0, true);
      loss.backward();
      zero.after_backward(0, 0, true);
      zero.reshard(0);
      zero.reduce_grad(0);
      opt->step();
      ASSERT_TRUE(zero.clear_gradients(0));
      zero.after_optimizer_step(step);
    }
    zero.settle();
    if (save) {
      st.completed_steps = to;
      save_checkpoint(dir, st, id, comm, std::chrono::milliseconds(20000));
    }
    Held& h = out[static_cast<std::size_t>(r)];
    for (const auto& p : m.params) h.params.push_back(p.detach().clone());
    h.pieces = optimizer_piece_states(*opt);
    const auto state = zero.state();
    h.layout = parse_shard_layout(state.at("layout.stage0"), "test");
    if (stage == 3) h.param_shard = state.at("param_shard.stage0").clone();
  });
  return out;
}

// Every replica's pieces of bucket b's `field`, put back in order, without the padding.
torch::Tensor gathered(const std::vector<Held>& held, std::size_t b, const std::string& field) {
  std::vector<torch::Tensor> pieces;
  for (const auto& h : held) pieces.push_back(h.pieces.at(b).fields.at(field));
  return torch::cat(pieces).narrow(0, 0, held[0].layout.elements.at(b));
}

// Every replica's parameter shard's piece of bucket b, put back in order, without the padding.
torch::Tensor gathered_params(const std::vector<Held>& held, std::size_t b) {
  std::vector<torch::Tensor> pieces;
  for (const auto& h : held) {
    std::int64_t at = 0;
    for (std::size_t k = 0; k < b; ++k) at += h.layout.piece[k];
    pieces.push_back(h.param_shard.narrow(0, at, h.layout.piece[b]));
  }
  return torch::cat(pieces).narrow(0, 0, held[0].layout.elements.at(b));
}

void expect_same_state(const std::vector<Held>& saved, const std::vector<Held>& loaded) {
  ASSERT_EQ(saved[0].layout.elements, loaded[0].layout.elements);
  if (saved[0].param_shard.defined()) {  // ZeRO-3: the shards themselves, gathered
    for (std::size_t b = 0; b < saved[0].layout.elements.size(); ++b) {
      EXPECT_TRUE(torch::equal(gathered_params(saved, b), gathered_params(loaded, b)))
          << "parameter bucket " << b;
    }
  }
  for (const auto& h : loaded) {
    for (std::size_t i = 0; i < h.params.size(); ++i) {
      EXPECT_TRUE(torch::equal(h.params[i], saved[0].params[i])) << "param " << i;
    }
  }
  const auto& fields = saved[0].pieces.at(0).fields;
  ASSERT_EQ(fields.size(), 3U);  // exp_avg, exp_avg_sq, max_exp_avg_sq (AMSGrad)
  for (std::size_t b = 0; b < saved[0].layout.elements.size(); ++b) {
    for (const auto& h : loaded) EXPECT_EQ(h.pieces.at(b).step, saved[0].pieces.at(b).step);
    for (const auto& [field, t] : fields) {
      EXPECT_TRUE(torch::equal(gathered(saved, b, field), gathered(loaded, b, field)))
          << "bucket " << b << " " << field;
    }
  }
}

TEST(ZeroReshard, ALoaderAtAnotherDpHoldsTheSavedStateBitForBit) {
  // 4 -> 2 (the case), 2 -> 3 (padding grows) and 3 -> 4, ZeRO-1, ZeRO-2 and ZeRO-3
  // (whose parameters are shards too: Zero3::state's param_shard, re-sharded on load).
  for (int stage : {1, 2, 3}) {
    for (auto [from_dp, to_dp] : {std::pair{4, 2}, std::pair{2, 3}, std::pair{3, 4}}) {
      SCOPED_TRACE("zero " + std::to_string(stage) + " dp " + std::to_string(from_dp) + " -> " +
                   std::to_string(to_dp));
      const std::string dir = temp_dir("bits");
      const auto saved = train(stage, from_dp, 0, 3, dir, true);
      const auto loaded = train(stage, to_dp, 3, 3, dir, false);  // loads, trains nothing
      expect_same_state(saved, loaded);
      // Training continues close to the uninterrupted run (the sums run in another order).
      const auto straight = train(stage, from_dp, 0, 5, "", false);
      const auto resumed = train(stage, to_dp, 3, 5, dir, false);
      for (const auto& h : resumed) EXPECT_LE(max_abs_diff(h.params, straight[0].params), 1e-6);
      fs::remove_all(dir);
    }
  }
}

TEST(ZeroReshard, ResumingAtTheSameDpStillLoadsItsOwnShard) {
  const std::string dir = temp_dir("same");
  const auto saved = train(1, 2, 0, 3, dir, true);
  const auto loaded = train(1, 2, 3, 3, dir, false);
  expect_same_state(saved, loaded);
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t b = 0; b < saved[r].pieces.size(); ++b) {
      EXPECT_TRUE(torch::equal(saved[r].pieces[b].fields.at("exp_avg"),
                               loaded[r].pieces[b].fields.at("exp_avg")));
    }
  }
  fs::remove_all(dir);
}

TEST(ZeroReshard, AnotherGlobalBatchOrPipelineIsRefusedNamingTheFlags) {
  const std::string dir = temp_dir("bad");
  (void)train(1, 4, 0, 2, dir, true);
  const Mlp init = Mlp::init(6, 10, 3, 7);
  const auto load = [&](int dp, int pp, std::int64_t batch) {
    std::vector<std::string> errors(static_cast<std::size_t>(dp));
    run_replicas(dp, [&](int r, Communicator& comm) {
      Mlp m = init.clone();
      ZeroOptions o;
      o.bucket_cap_bytes = kCap;
      o.first_bucket_cap_bytes = kCap;
      Zero zero(&comm, o);
      std::vector<StageParams> sp{m.stage_params()};
      zero.on_start(sp);
      auto opt = adamw(zero.optimizer_params(0));
      TrainingState st;
      st.stages = sp;
      st.optimizers = {opt.get()};
      st.dp_algorithm = &zero;
      st.zero_stage = 1;
      st.pp = pp;
      st.dp = dp;
      st.batch_size = batch;
      st.make_optimizer = adamw;
      try {
        load_checkpoint(dir, 2, CheckpointIdentity{r, dp, kFingerprint}, st);
      } catch (const ConfigError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
    return errors[0];
  };
  EXPECT_NE(load(2, 1, 3).find("written at --dp 4 --batch-size 3 (a global batch of 12 samples), "
                               "this run has --dp 2 --batch-size 3 (6): a resume at another --dp "
                               "keeps the global batch (--batch-size 6)"),
            std::string::npos)
      << load(2, 1, 3);
  EXPECT_NE(load(2, 2, 6).find("written at --pp 1 --dp 4, this run has --pp 2 --dp 2: a resume "
                               "may change --dp only"),
            std::string::npos)
      << load(2, 2, 6);
  EXPECT_EQ(load(2, 1, 6), "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipewright::exec
