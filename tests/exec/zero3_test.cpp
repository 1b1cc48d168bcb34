// ZeRO stage 3 (zero/zero3.hpp, Note [ZeRO-3 sharded parameters]) with replicas as threads over
// the fake backend: the parameters exist only inside UNSHARD..RESHARD windows (their storage is
// given back at RESHARD; the TensorImpls and version counters stay), a backward after a
// RESHARD..UNSHARD pair reads the re-gathered values, the shard optimizer trains to the weights
// of one process on the concatenated batch (full and split I/W backward, padded buckets), compute
// outside a window is refused naming the rank, stage and action, the bytes per step are
// (m G + u P)(d-1)/d (half the reduce-scatters' under --reduce-dtype bf16), and a tied parameter
// is a bucket of its own whose piece the optimizer steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "dp_test_util.hpp"
#include "pipewright/exec/data_parallel.hpp"
#include "pipewright/graph/error.hpp"
#include "zero/zero3.hpp"

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
// --reduce-dtype bf16 against the fp32 reference after 3 AdamW steps: measured max |diff|
// 3.18e-4 (dp 2, step windows) and 2.16e-4 (dp 3, padded buckets, I/W): each microbatch's
// gradient sum is rounded to bfloat16 once.
constexpr double kBf16Tolerance = 1e-3;

struct Case {
  int dp = 2;
  int microbatches = 2;
  std::int64_t cap_bytes = 1 << 20;
  bool split_iw = false;
  bool per_compute = true;  // a window per compute action (compute), else one a step (step)
  int steps = 3;
  bool bf16 = false;       // --reduce-dtype bf16
  bool tie_first = false;  // W1 tied (a bucket of its own: Note [ZeRO tied parameters])
};

torch::optim::AdamWOptions adamw() { return torch::optim::AdamWOptions(kLr).weight_decay(0.01); }

std::vector<torch::Tensor> reference(const Case& c, const Mlp& init) {
  return testing::reference(init, c.dp, c.steps,
                            [](auto& p) { return torch::optim::AdamW(p, adamw()); });
}

struct Result {
  std::vector<torch::Tensor> params;
  DataParallelStats stats;
  bool freed_outside_windows = true;  // P's storage had 0 bytes after every RESHARD
  bool same_impls = true;             // the parameters' TensorImpls and versions never changed
  std::int64_t tied_piece = 0;        // elements of what the optimizer steps for W1
  bool untied_is_param = false;       // optimizer_tensor_of(b1) is b1 itself
};

std::vector<Result> run_zero3(const Case& c, const Mlp& init) {
  std::vector<Result> results(static_cast<std::size_t>(c.dp));
  run_replicas(c.dp, [&](int r, Communicator& comm) {
    Mlp m = testing::replica_model(init, r);
    ZeroOptions o = testing::zero_options(3, c.microbatches, c.cap_bytes);
    o.bf16_reduce = c.bf16;
    if (c.tie_first) o.dedicated.insert(m.params[0].unsafeGetTensorImpl());
    Zero3 zero(&comm, o, 10 + r);
    std::vector<StageParams> sp{m.stage_params()};
    zero.on_start(sp);
    auto& out = results[static_cast<std::size_t>(r)];
    std::vector<const void*> impls;
    std::vector<std::int64_t> versions;
    for (auto& p : m.params) {
      impls.push_back(p.unsafeGetTensorImpl());
      versions.push_back(p._version());
    }
    auto reshard = [&] {
      zero.reshard(0);
      out.freed_outside_windows = out.freed_outside_windows && zero.gathered_bytes(0) == 0;
    };
    auto open = [&] {
      if (c.per_compute) zero.unshard(0);
    };
    auto close = [&] {
      if (c.per_compute) reshard();
    };
    out.freed_outside_windows = zero.gathered_bytes(0) == 0;
    torch::optim::AdamW opt(zero.optimizer_params(0), adamw());
    const std::int64_t mb_rows = kRowsPerReplica / c.microbatches;
    const int last = c.microbatches - 1;
    for (int step = 0; step < c.steps; ++step) {
      auto [x, y] = testing::replica_batch(step, r, c.dp);
      if (!c.per_compute) zero.unshard(0);
      std::vector<torch::Tensor> losses, inputs;
      for (int mb = 0; mb < c.microbatches; ++mb) {
        open();
        zero.before_forward(0, mb);
        auto xi = x.narrow(0, mb * mb_rows, mb_rows).clone().requires_grad_(true);
        inputs.push_back(xi);
        losses.push_back(torch::mse_loss(m.forward(xi), y.narrow(0, mb * mb_rows, mb_rows)) /
                         (static_cast<double>(c.microbatches) * zero.gradient_divisor()));
        close();  // the graph keeps the parameters (TensorImpls) whose memory goes now
      }
      if (!c.split_iw) {
        for (int mb = 0; mb < c.microbatches; ++mb) {
          open();
          zero.before_backward(0, mb, mb == last);
          losses[static_cast<std::size_t>(mb)].backward();
          zero.after_backward(0, mb, mb == last);
          close();
        }
      } else {  // I0, I1, W0, I2, W1, ..., W(m-1), each in its own window under per_compute
        auto do_i = [&](int mb) {
          open();
          zero.before_backward(0, mb, mb == last);
          (void)torch::autograd::grad({losses[static_cast<std::size_t>(mb)]},
                                      {inputs[static_cast<std::size_t>(mb)]}, {}, true);
          close();
        };
        auto do_w = [&](int mb) {
          open();
          zero.before_weight(0, mb);
          torch::autograd::backward({losses[static_cast<std::size_t>(mb)]}, {}, false, false,
                                    m.params);
          zero.after_backward(0, mb, mb == last);
          close();
        };
        do_i(0);
        for (int mb = 1; mb < c.microbatches; ++mb) {
          do_i(mb);
          do_w(mb - 1);
        }
        do_w(last);
      }
      if (!c.per_compute) reshard();
      zero.reduce_grad(0);
      opt.step();
      ASSERT_TRUE(zero.clear_gradients(0));
      zero.after_optimizer_step(step);
    }
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      out.same_impls = out.same_impls && impls[i] == m.params[i].unsafeGetTensorImpl() &&
                       versions[i] == m.params[i]._version();
    }
    out.stats = zero.stats();
    out.tied_piece = zero.optimizer_tensor_of(0, m.params[0]).numel();
    out.untied_is_param = zero.optimizer_tensor_of(0, m.params[1]).is_same(m.params[1]);
    zero.settle();  // the final weights: gathered (outside any window)
    for (const auto& p : m.params) out.params.push_back(p.detach().clone());
  });
  return results;
}

void expect_matches(const Case& c, double tolerance = 1e-5) {
  SCOPED_TRACE("dp " + std::to_string(c.dp) + " m " + std::to_string(c.microbatches) + " cap " +
               std::to_string(c.cap_bytes) + (c.split_iw ? " I/W" : " B") +
               (c.per_compute ? " compute windows" : " step windows"));
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  const auto ref = reference(c, init);
  const auto res = run_zero3(c, init);
  for (std::size_t r = 0; r < res.size(); ++r) {
    EXPECT_LE(max_abs_diff(res[r].params, ref), tolerance) << "replica " << r;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      EXPECT_TRUE(torch::equal(res[r].params[i], res[0].params[i])) << "replica " << r;
    }
    EXPECT_TRUE(res[r].freed_outside_windows) << "replica " << r;
    EXPECT_TRUE(res[r].same_impls) << "replica " << r;
  }
}

TEST(Zero3, ShardedParametersTrainToOneProcessOverAGrid) {
  for (int dp : {2, 3, 4}) {
    for (std::int64_t cap : {std::int64_t{1} << 20, std::int64_t{44}}) {
      for (bool per_compute : {true, false}) {
        expect_matches(Case{dp, 2, cap, false, per_compute, 3});
      }
    }
  }
}

TEST(Zero3, SplitBackwardReduceScattersAfterW) {
  for (bool per_compute : {true, false}) expect_matches(Case{2, 3, 44, true, per_compute, 3});
}

TEST(Zero3, TiedParameterIsABucketOfItsOwnWhosePieceTheOptimizerSteps) {
  // W1 (60 elements) alone in its bucket: piece ceil(60/d); the other parameters are stepped in
  // their buckets' pieces, so optimizer_tensor_of names them themselves. Training still matches.
  for (int dp : {2, 4}) {
    const Case c{dp, 2, 1 << 20, false, true, 3, false, true};
    expect_matches(c);
    const auto res = run_zero3(c, Mlp::init(kIn, kHidden, kOut, 7));
    for (const auto& r : res) {
      EXPECT_EQ(r.tied_piece, (60 + dp - 1) / dp);
      EXPECT_TRUE(r.untied_is_param);
    }
  }
}

TEST(Zero3, Bf16ReduceScatterMovesHalfTheGradientBytes) {
  // Note [ZeRO bf16 reduce-scatter]: 104 padded elements at dp 2, m = 2, step windows: two
  // reduce-scatters of 104 bfloat16 + one all-gather of 104 float32, (d-1)/d each. Measured max
  // |diff| to the fp32 one-process reference after 3 AdamW steps: kBf16Tolerance's comment.
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  const auto step = run_zero3(Case{2, 2, 1 << 20, false, false, 2, true}, init);
  EXPECT_DOUBLE_EQ(step[0].stats.wire_bytes / 2, (2 * 104 * 2.0 + 104 * 4.0) / 2);
  expect_matches(Case{2, 2, 1 << 20, false, false, 3, true}, kBf16Tolerance);
  expect_matches(Case{3, 2, 44, true, true, 3, true}, kBf16Tolerance);
}

TEST(Zero3, CommunicationPerStepIsTheModel) {
  // One bucket of 103 floats padded to 104 at dp 2; m = 2; (d-1)/d = 1/2 of each collective.
  const double padded = 104 * 4.0;
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  // compute windows: m reduce-scatters + 2m all-gathers; step windows: m + 1.
  const auto compute = run_zero3(Case{2, 2, 1 << 20, false, true, 2}, init);
  EXPECT_DOUBLE_EQ(compute[0].stats.wire_bytes / 2, (2 + 4) * padded / 2);
  const auto step = run_zero3(Case{2, 2, 1 << 20, false, false, 2}, init);
  EXPECT_DOUBLE_EQ(step[0].stats.wire_bytes / 2, (2 + 1) * padded / 2);
}

TEST(Zero3, ComputeOutsideAWindowIsAPlanErrorNamingRankStageAndAction) {
  std::vector<std::string> errors(2);
  run_replicas(2, [&](int r, Communicator& comm) {
    Mlp m = Mlp::init(kIn, kHidden, kOut, 7);
    Zero3 zero(&comm, testing::zero_options(3, 1, 25 << 20), 4 + r);
    std::vector<StageParams> sp{m.stage_params()};
    zero.on_start(sp);
    auto& e = errors[static_cast<std::size_t>(r)];
    try {
      zero.before_forward(0, 3);  // no UNSHARD yet
    } catch (const InvalidPlanError& x) {
      e += std::string(x.what()) + "\n";
    }
    try {
      zero.reshard(0);  // nothing to free
    } catch (const InvalidPlanError& x) {
      e += std::string(x.what()) + "\n";
    }
    zero.unshard(0);
    try {
      zero.unshard(0);  // windows do not nest
    } catch (const InvalidPlanError& x) {
      e += std::string(x.what()) + "\n";
    }
    zero.before_weight(0, 1);  // inside the window: fine
    zero.reshard(0);
    try {
      zero.before_weight(0, 1);
    } catch (const InvalidPlanError& x) {
      e += std::string(x.what()) + "\n";
    }
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<std::size_t>(r)];
    const std::string rank = "rank " + std::to_string(4 + r) + ": ";
    EXPECT_NE(e.find(rank + "0F3 (stage 0 microbatch 3 step 0) runs outside stage 0's "
                            "UNSHARD..RESHARD window"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find(rank + "0RESHARD (step 0): stage 0 is not unsharded"), std::string::npos) << e;
    EXPECT_NE(e.find(rank + "0UNSHARD (step 0): stage 0 is unsharded already"), std::string::npos)
        << e;
    EXPECT_NE(e.find(rank + "0W1 (stage 0 microbatch 1 step 0) runs outside"), std::string::npos)
        << e;
  }
}

}  // namespace
}  // namespace pipewright::exec
