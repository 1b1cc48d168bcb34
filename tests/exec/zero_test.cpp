// ZeRO stages 1 and 2 (zero/zero.hpp, Note [ZeRO flat buffers]) with replicas as threads over the
// fake backend: the shard optimizer (AdamW over this replica's pieces of the flat buffers) trains
// to the weights of one process on the concatenated batch, under full and split (I/W) backward,
// with buckets small enough that every one is padded; the replicas stay bit-identical; the
// communication per step is what the contract counts.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dp_test_util.hpp"
#include "pipewright/exec/data_parallel.hpp"
#include "pipewright/graph/error.hpp"
#include "zero/zero.hpp"
#include "zero/zero_buckets.hpp"

namespace pipewright::exec {
namespace {

using testing::kHidden;
using testing::kIn;
using testing::kOut;
using testing::kRowsPerReplica;
using testing::max_abs_diff;
using testing::Mlp;
using testing::run_replicas;

constexpr double kLr = 0.05;

struct ZeroCase {
  int stage = 1;
  int dp = 2;
  int microbatches = 2;
  std::int64_t cap_bytes = 1 << 20;
  bool split_iw = false;
  int steps = 3;
};

torch::optim::AdamWOptions adamw() { return torch::optim::AdamWOptions(kLr).weight_decay(0.01); }

std::vector<torch::Tensor> reference(const ZeroCase& c, const Mlp& init) {
  return testing::reference(init, c.dp, c.steps,
                            [](auto& p) { return torch::optim::AdamW(p, adamw()); });
}

struct Result {
  std::vector<torch::Tensor> params;
  DataParallelStats stats;
  std::int64_t shard = 0;
  std::vector<std::int64_t> before_last;  // stage 1: collectives issued before the last backward
  std::map<std::string, torch::Tensor> state;  // Zero::state() at the end
  std::string refused;                         // load_state of another layout: the error
};

std::vector<Result> run_zero(const ZeroCase& c, const Mlp& init) {
  std::vector<Result> results(static_cast<std::size_t>(c.dp));
  run_replicas(c.dp, [&](int r, Communicator& comm) {
    Mlp m = testing::replica_model(init, r);
    Zero zero(&comm, testing::zero_options(c.stage, c.microbatches, c.cap_bytes));
    std::vector<StageParams> sp{m.stage_params()};
    zero.on_start(sp);
    torch::optim::AdamW opt(zero.optimizer_params(0), adamw());
    auto& out = results[static_cast<std::size_t>(r)];
    out.shard = zero.shard_elements(0);
    const std::int64_t mb_rows = kRowsPerReplica / c.microbatches;
    const int last = c.microbatches - 1;
    for (int step = 0; step < c.steps; ++step) {
      auto [x, y] = testing::replica_batch(step, r, c.dp);
      std::vector<torch::Tensor> losses, inputs;
      for (int mb = 0; mb < c.microbatches; ++mb) {
        zero.before_forward(0, mb);
        auto xi = x.narrow(0, mb * mb_rows, mb_rows).clone().requires_grad_(true);
        inputs.push_back(xi);
        losses.push_back(torch::mse_loss(m.forward(xi), y.narrow(0, mb * mb_rows, mb_rows)) /
                         (static_cast<double>(c.microbatches) * zero.gradient_divisor()));
      }
      const std::int64_t at_start = zero.stats().collectives;
      if (!c.split_iw) {
        for (int mb = 0; mb < c.microbatches; ++mb) {
          if (mb == last) out.before_last.push_back(zero.stats().collectives - at_start);
          zero.before_backward(0, mb, mb == last);
          losses[static_cast<std::size_t>(mb)].backward();
          zero.after_backward(0, mb, mb == last);
          zero.await_gradients(0);  // as the interpreter does (Note [Gradient waits])
        }
      } else {  // I0, I1, W0, I2, W1, ..., W(m-1)
        auto do_i = [&](int mb) {
          zero.before_backward(0, mb, mb == last);
          (void)torch::autograd::grad({losses[static_cast<std::size_t>(mb)]},
                                      {inputs[static_cast<std::size_t>(mb)]}, {}, true);
        };
        auto do_w = [&](int mb) {  // no await_gradients: before_weight finishes the last W's
          zero.before_weight(0, mb);
          torch::autograd::backward({losses[static_cast<std::size_t>(mb)]}, {}, false, false,
                                    m.params);
          zero.after_backward(0, mb, mb == last);
        };
        do_i(0);
        for (int mb = 1; mb < c.microbatches; ++mb) {
          do_i(mb);
          do_w(mb - 1);
        }
        do_w(last);
      }
      zero.reduce_grad(0);
      opt.step();
      ASSERT_TRUE(zero.clear_gradients(0));
      zero.after_optimizer_step(step);
    }
    zero.settle();
    out.state = zero.state();
    zero.load_state(out.state);  // its own layout loads
    auto other = out.state;
    for (auto& [key, t] : other) t = t.clone().index_put_({0}, t[0] + 1);  // another dp
    try {
      zero.load_state(other);
    } catch (const ConfigError& e) {
      out.refused = e.what();
    }
    out.params = m.params;
    out.stats = zero.stats();
  });
  return results;
}

void expect_matches(const ZeroCase& c) {
  SCOPED_TRACE("zero " + std::to_string(c.stage) + " dp " + std::to_string(c.dp) + " m " +
               std::to_string(c.microbatches) + " cap " + std::to_string(c.cap_bytes) +
               (c.split_iw ? " I/W" : " B"));
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  const auto ref = reference(c, init);
  const auto res = run_zero(c, init);
  for (std::size_t r = 0; r < res.size(); ++r) {
    EXPECT_LE(max_abs_diff(res[r].params, ref), 1e-5) << "replica " << r;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      EXPECT_TRUE(torch::equal(res[r].params[i], res[0].params[i])) << "replica " << r;
    }
    if (c.stage == 1 && !c.split_iw) {
      for (std::int64_t before : res[r].before_last) EXPECT_EQ(before, 0);
    }
  }
}

TEST(Zero, ShardOptimizerMatchesOneProcessOverAGrid) {
  for (int stage : {1, 2}) {
    for (int dp : {2, 3, 4}) {
      for (std::int64_t cap : {std::int64_t{1} << 20, std::int64_t{44}}) {
        expect_matches(ZeroCase{stage, dp, 2, cap, false, 3});
      }
    }
  }
}

TEST(Zero, SplitBackwardGradientsBecomeFinalAtW) {
  for (int stage : {1, 2}) expect_matches(ZeroCase{stage, 2, 3, 44, true, 3});
}

TEST(Zero, ShardsArePiecesOfBucketsPaddedToTheReplicaCount) {
  // 10*6 + 10 + 3*10 + 3 = 103 elements in one bucket: padded to 105 at dp 3, 35 a shard.
  const auto res = run_zero(ZeroCase{1, 3, 1, 1 << 20, false, 1}, Mlp::init(kIn, kHidden, kOut, 7));
  for (std::size_t r = 0; r < res.size(); ++r) {
    EXPECT_EQ(res[r].shard, 35);
    // Checkpoints record the layout: [dp, rank, buckets, n, padded, piece]; another is refused.
    ASSERT_EQ(res[r].state.count("layout.stage0"), 1U);
    const torch::Tensor want = torch::tensor(
        std::vector<std::int64_t>{3, static_cast<std::int64_t>(r), 1, 103, 105, 35}, torch::kLong);
    EXPECT_TRUE(torch::equal(res[r].state.at("layout.stage0"), want));
    EXPECT_NE(res[r].refused.find("stage0: optimizer shard layout 'dp.layout.stage0'"),
              std::string::npos)
        << res[r].refused;
  }
}

TEST(Zero, TiedParametersGetBucketsOfTheirOwnWhereTheyBecomeReady) {
  // Note [ZeRO tied parameters]: the others keep DDP's buckets; a dedicated one sits before the
  // first regular bucket whose parameters were all registered before it.
  const std::vector<std::int64_t> bytes{40, 8, 400, 8, 12};
  const auto ddp = sched::assign_buckets({8, 400, 8}, 1 << 20, 1 << 20);  // params 1, 2, 3
  auto a = assign_zero_buckets(bytes, {true, false, false, false, true}, 1 << 20, 1 << 20);
  ASSERT_EQ(a.buckets.size(), 3U);
  EXPECT_EQ(a.buckets[0].params, (std::vector<std::size_t>{4}));  // registered last: ready first
  EXPECT_EQ(a.buckets[1].params, (std::vector<std::size_t>{3, 2, 1}));
  EXPECT_EQ(a.buckets[1].offsets_bytes, ddp.buckets[0].offsets_bytes);
  EXPECT_EQ(a.buckets[2].params, (std::vector<std::size_t>{0}));
  EXPECT_EQ(a.buckets[2].bytes, 40);
  EXPECT_EQ(a.bucket_of_param, (std::vector<std::size_t>{2, 1, 1, 1, 0}));
  EXPECT_EQ(a.slot_of_param, (std::vector<std::size_t>{0, 2, 1, 0, 0}));
  // Nothing dedicated: exactly DDP's.
  EXPECT_EQ(assign_zero_buckets(bytes, std::vector<bool>(5, false), 100, 50),
            sched::assign_buckets(bytes, 100, 50));
}

TEST(Zero, CommunicationPerStepIsWhatTheContractCounts) {
  // One bucket of 103 floats padded to 104 at dp 2; m = 2 microbatches, 2 steps.
  const double padded = 104 * 4.0;
  for (int stage : {1, 2}) {
    const auto res =
        run_zero(ZeroCase{stage, 2, 2, 1 << 20, false, 2}, Mlp::init(kIn, kHidden, kOut, 7));
    const double per_step = res[0].stats.wire_bytes / 2;
    // Stage 1: one reduce-scatter + one all-gather, (d-1)/d each: DDP's 2 (d-1)/d (+ padding).
    // Stage 2: m reduce-scatters + one all-gather.
    const double expect = stage == 1 ? padded : (2 + 1) * padded / 2;
    EXPECT_DOUBLE_EQ(per_step, expect) << "stage " << stage;
  }
}

}  // namespace
}  // namespace pipewright::exec
