#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <string>
#include <vector>

#include "dp/ddp.hpp"
#include "dp_test_util.hpp"
#include "pipewright/exec/data_parallel.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using testing::kHidden;
using testing::kIn;
using testing::kOut;
using testing::kRowsPerReplica;
using testing::make_data;
using testing::max_abs_diff;
using testing::Mlp;
using testing::run_replicas;

constexpr double kLr = 0.1;

enum class Backward { kFull, kSplitIW };

struct DdpCase {
  int dp = 2;
  int microbatches = 1;
  std::int64_t cap_bytes = 1 << 20;
  Backward backward = Backward::kFull;
  bool overlap = true;
  int steps = 3;
};

// Reference: one process, the concatenated batch of every replica, one microbatch.
std::vector<torch::Tensor> reference(const DdpCase& c, const Mlp& init) {
  return testing::reference(init, c.dp, c.steps, [](auto& p) {
    return torch::optim::SGD(p, torch::optim::SGDOptions(kLr).momentum(0.9));
  });
}

struct ReplicaResult {
  std::vector<torch::Tensor> params;
  DataParallelStats stats;
  std::vector<std::int64_t> collectives_before_last;  // per step, before the last backward
  std::size_t buckets = 0;
};

std::vector<ReplicaResult> run_ddp(const DdpCase& c, const Mlp& init) {
  std::vector<ReplicaResult> results(static_cast<std::size_t>(c.dp));
  run_replicas(c.dp, [&](int r, Communicator& comm) {
    Mlp m = testing::replica_model(init, r);  // replica 0's initial weights must win
    torch::optim::SGD opt(m.params, torch::optim::SGDOptions(kLr).momentum(0.9));
    DdpOptions o;
    o.bucket_cap_bytes = c.cap_bytes;
    o.first_bucket_cap_bytes = c.cap_bytes;
    o.num_microbatches = c.microbatches;
    o.overlap = c.overlap;
    o.timeout = std::chrono::milliseconds(20000);
    Ddp ddp(&comm, o);
    std::vector<StageParams> sp{m.stage_params()};
    ddp.on_start(sp);
    auto& out = results[static_cast<std::size_t>(r)];
    out.buckets = ddp.buckets_of(0).buckets.size();
    const std::int64_t mb_rows = kRowsPerReplica / c.microbatches;
    for (int step = 0; step < c.steps; ++step) {
      auto [x, y] = testing::replica_batch(step, r, c.dp);
      std::vector<torch::Tensor> losses;
      std::vector<torch::Tensor> inputs;
      for (int mb = 0; mb < c.microbatches; ++mb) {
        auto xi = x.narrow(0, mb * mb_rows, mb_rows).clone().requires_grad_(true);
        inputs.push_back(xi);
        // As the interpreter does: each microbatch's loss over microbatches x the divisor.
        losses.push_back(
            torch::mse_loss(m.forward(xi), y.narrow(0, mb * mb_rows, mb_rows)) /
            (static_cast<double>(c.microbatches) * static_cast<double>(ddp.gradient_divisor())));
      }
      const std::int64_t at_start = ddp.stats().collectives;
      const int last = c.microbatches - 1;
      if (c.backward == Backward::kFull) {
        for (int mb = 0; mb < c.microbatches; ++mb) {
          if (mb == last) out.collectives_before_last.push_back(ddp.stats().collectives - at_start);
          ddp.before_backward(0, mb, mb == last);
          losses[static_cast<std::size_t>(mb)].backward();
          ddp.after_backward(0, mb, mb == last);
        }
      } else {
        // Zero-bubble order: I0, I1, W0, I2, W1, ..., W(m-1): weight gradients of earlier
        // microbatches arrive after the last microbatch's I.
        auto do_i = [&](int mb) {
          ddp.before_backward(0, mb, mb == last);
          (void)torch::autograd::grad({losses[static_cast<std::size_t>(mb)]},
                                      {inputs[static_cast<std::size_t>(mb)]}, {},
                                      /*retain_graph=*/true);
        };
        auto do_w = [&](int mb) {
          if (mb == last) out.collectives_before_last.push_back(ddp.stats().collectives - at_start);
          torch::autograd::backward({losses[static_cast<std::size_t>(mb)]}, {}, false, false,
                                    m.params);
          ddp.after_backward(0, mb, mb == last);
        };
        do_i(0);
        for (int mb = 1; mb < c.microbatches; ++mb) {
          do_i(mb);
          do_w(mb - 1);
        }
        do_w(last);
      }
      ddp.reduce_grad(0);
      opt.step();
      opt.zero_grad();
      ddp.after_optimizer_step(step);
    }
    out.params = m.params;
    out.stats = ddp.stats();
  });
  return results;
}

void expect_matches_reference(const DdpCase& c) {
  SCOPED_TRACE("dp " + std::to_string(c.dp) + " m " + std::to_string(c.microbatches) + " cap " +
               std::to_string(c.cap_bytes) + (c.backward == Backward::kSplitIW ? " I/W" : " B") +
               (c.overlap ? "" : " no-overlap"));
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  const auto ref = reference(c, init);
  const auto res = run_ddp(c, init);
  for (std::size_t r = 0; r < res.size(); ++r) {
    EXPECT_LE(max_abs_diff(res[r].params, ref), 1e-5) << "replica " << r;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      EXPECT_TRUE(torch::equal(res[r].params[i], res[0].params[i]))
          << "replica " << r << " is not bit-identical to replica 0 (param " << i << ")";
    }
    // No communication before the last microbatch's gradients are final.
    for (std::int64_t before : res[r].collectives_before_last) EXPECT_EQ(before, 0);
    const auto expect_buckets = static_cast<std::int64_t>(res[r].buckets) * c.steps;
    if (c.overlap) {
      EXPECT_EQ(res[r].stats.buckets_in_backward, expect_buckets);
      EXPECT_EQ(res[r].stats.buckets_at_reduce, 0);
    } else {
      EXPECT_EQ(res[r].stats.buckets_in_backward, 0);
      EXPECT_EQ(res[r].stats.buckets_at_reduce, expect_buckets);
    }
  }
}

TEST(Ddp, MatchesSingleProcessOnConcatenatedBatchOverAGrid) {
  // Bucket caps: 0 (one bucket per parameter), 104 bytes (--bucket-cap-mb 0.0001), 200 bytes
  // (mixed), 1 MiB (one bucket).
  for (int dp : {2, 4}) {
    for (int m : {1, 3}) {
      for (std::int64_t cap :
           {std::int64_t{0}, std::int64_t{104}, std::int64_t{200}, std::int64_t{1} << 20}) {
        expect_matches_reference({dp, m, cap, Backward::kFull, true, 3});
      }
    }
  }
}

TEST(Ddp, ZeroBubbleGradientsBecomeFinalAtW) {
  for (int dp : {2, 4}) {
    for (std::int64_t cap : {std::int64_t{0}, std::int64_t{200}, std::int64_t{1} << 20}) {
      expect_matches_reference({dp, 3, cap, Backward::kSplitIW, true, 3});
    }
  }
}

TEST(Ddp, NoOverlapAblationGivesTheSameResult) {
  expect_matches_reference({2, 2, 104, Backward::kFull, false, 2});
}

// One microbatch's backward through DDP's hooks, then REDUCE_GRAD (stage 0, data from `seed`).
void one_microbatch_step(Ddp& ddp, Mlp& m, std::uint64_t seed) {
  auto [x, y] = make_data(4, kIn, kOut, seed);
  ddp.before_backward(0, 0, true);
  (torch::mse_loss(m.forward(x), y) / static_cast<double>(ddp.gradient_divisor())).backward();
  ddp.after_backward(0, 0, true);
  ddp.reduce_grad(0);
}

TEST(Ddp, BucketsFollowTheSharedAssignment) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  run_replicas(2, [&](int, Communicator& comm) {
    Mlp m = init.clone();
    DdpOptions o;
    o.bucket_cap_bytes = 200;
    o.first_bucket_cap_bytes = 200;
    Ddp ddp(&comm, o);
    std::vector<StageParams> sp{m.stage_params()};
    ddp.on_start(sp);
    const auto expect = sched::assign_buckets(
        {kHidden * kIn * 4, kHidden * 4, kOut * kHidden * 4, kOut * 4}, 200, 200);
    EXPECT_EQ(ddp.buckets_of(0), expect);
    // After a backward the gradients are aliases of the buckets' flat buffers: parameters of
    // one bucket share a storage, parameters of different buckets do not.
    one_microbatch_step(ddp, m, 9);
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      ASSERT_TRUE(m.params[i].grad().defined());
      for (std::size_t j = 0; j < m.params.size(); ++j) {
        const bool same =
            m.params[i].grad().storage().data() == m.params[j].grad().storage().data();
        EXPECT_EQ(same, expect.bucket_of_param[i] == expect.bucket_of_param[j]) << i << " " << j;
      }
    }
  });
}

// After the optimizer step DDP leaves .grad undefined (set to none) instead of letting the
// optimizer zero the buckets; the next step's gradients land in the same bucket storage.
TEST(Ddp, ClearGradientsSetsThemToNoneAndTheBucketsAreReused) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 5);
  run_replicas(2, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    Ddp ddp(&comm, DdpOptions{});
    std::vector<StageParams> sp{m.stage_params()};
    ddp.on_start(sp);
    std::vector<const void*> storage;
    for (int step = 0; step < 2; ++step) {
      one_microbatch_step(ddp, m, 60 + r + step);
      for (std::size_t i = 0; i < m.params.size(); ++i) {
        ASSERT_TRUE(m.params[i].grad().defined());
        if (step == 0) storage.push_back(m.params[i].grad().data_ptr());
        EXPECT_EQ(m.params[i].grad().data_ptr(), storage[i]) << i;
      }
      EXPECT_TRUE(ddp.clear_gradients(0));
      for (const auto& p : m.params) EXPECT_FALSE(p.grad().defined());
      ddp.after_optimizer_step(step);
    }
  });
}

TEST(Ddp, UnusedParameterIsReducedAtReduceGrad) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 3, /*with_unused=*/true);
  run_replicas(2, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    DdpOptions o;
    o.bucket_cap_bytes = 0;
    o.first_bucket_cap_bytes = 0;
    Ddp ddp(&comm, o);
    std::vector<StageParams> sp{m.stage_params()};
    ddp.on_start(sp);
    auto [x, y] = make_data(4, kIn, kOut, 50 + r);
    ddp.before_backward(0, 0, true);
    torch::mse_loss(m.forward(x), y).backward();
    ddp.after_backward(0, 0, true);
    ddp.reduce_grad(0);
    EXPECT_EQ(m.params[4].grad().abs().max().item<float>(), 0.0f);
    // The unused parameter is registered last, so it is bucket 0; buckets start in index order,
    // so every bucket waits for REDUCE_GRAD (PyTorch would hang without
    // find_unused_parameters).
    EXPECT_EQ(ddp.stats().buckets_at_reduce, 5);
    EXPECT_EQ(ddp.stats().buckets_in_backward, 0);
  });
}

TEST(Ddp, CheckReplicasNamesTheDivergedReplica) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  std::mutex mu;
  std::vector<std::string> messages;
  run_replicas(3, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    DdpOptions o;
    o.check_replicas = 2;
    o.timeout = std::chrono::milliseconds(20000);
    Ddp ddp(&comm, o);
    std::vector<StageParams> sp{m.stage_params(4)};
    ddp.on_start(sp);
    for (int step = 0; step < 4; ++step) {
      auto [x, y] = make_data(4, kIn, kOut, 10 + step + 100 * r);
      ddp.before_backward(4, 0, true);
      torch::mse_loss(m.forward(x), y).backward();
      ddp.after_backward(4, 0, true);
      ddp.reduce_grad(4);
      {
        torch::NoGradGuard g;
        for (auto& p : m.params) p.sub_(p.grad() * 0.1);
        // Replica 2 silently corrupts a weight after step 2 (index 2): detected at step 3.
        if (r == 2 && step == 2) m.params[0][0][0].add_(1e-6);
        for (auto& p : m.params) p.grad().zero_();
      }
      try {
        ddp.after_optimizer_step(step);
      } catch (const ReplicaDivergenceError& e) {
        std::lock_guard<std::mutex> lock(mu);
        messages.push_back(std::string("step ") + std::to_string(step) + ": " + e.what());
        return;
      }
    }
  });
  ASSERT_EQ(messages.size(), 3u);  // every replica fails, at the same check
  for (const auto& msg : messages) {
    EXPECT_NE(msg.find("step 3: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("replica 2 (rank 2)"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("replica 0 "), std::string::npos) << msg;
  }
}

TEST(Ddp, CommunicationVolumeIsOneAllReducePerStep) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 7);
  const DdpCase c{4, 2, 200, Backward::kFull, true, 3};
  const auto res = run_ddp(c, init);
  const std::int64_t param_bytes = (kHidden * kIn + kHidden + kOut * kHidden + kOut) * 4;
  // Initial broadcast (one flat message, setup) + one all-reduce of every gradient per step.
  EXPECT_EQ(res[1].stats.setup_payload_bytes, static_cast<std::uint64_t>(param_bytes));
  EXPECT_DOUBLE_EQ(res[1].stats.setup_wire_bytes, 0.75 * param_bytes);
  EXPECT_EQ(res[1].stats.payload_bytes, static_cast<std::uint64_t>(param_bytes * c.steps));
  EXPECT_DOUBLE_EQ(res[1].stats.wire_bytes, 1.5 * static_cast<double>(param_bytes * c.steps));
}

}  // namespace
}  // namespace pipewright::exec
