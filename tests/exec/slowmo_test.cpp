#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "dp/ddp.hpp"
#include "dp/slowmo.hpp"
#include "dp_test_util.hpp"
#include "pipewright/exec/data_parallel.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using testing::make_data;
using testing::max_abs_diff;
using testing::Mlp;
using testing::run_replicas;

constexpr int kIn = 5;
constexpr int kHidden = 7;
constexpr int kOut = 2;
constexpr std::int64_t kRows = 4;
constexpr double kGamma = 0.1;  // the optimizer's lr

struct SlowMoCase {
  int dp = 2;
  std::int64_t localsgd = 1;
  std::int64_t slowmo = 3;
  double beta = 0.5;
  double alpha = 1.0;
  bool memory_efficient = true;
  int shards = 0;  // 0: min(32, dp)
  int per_node = 1;
  int steps = 12;
  [[nodiscard]] std::string name() const {
    return "dp " + std::to_string(dp) + " localsgd " + std::to_string(localsgd) + " slowmo " +
           std::to_string(slowmo) + " beta " + std::to_string(beta) + " alpha " +
           std::to_string(alpha) + (memory_efficient ? " mem-eff" : " full") + " shards " +
           std::to_string(shards) + " per-node " + std::to_string(per_node);
  }
};

torch::Tensor replica_loss(const Mlp& m, int replica, int step) {
  auto [x, y] =
      make_data(kRows, kIn, kOut,
                1000 * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(replica));
  return torch::mse_loss(m.forward(x), y);
}

// The recurrence of issue 7 written from its formulas, for every replica, in one thread.
std::vector<std::vector<torch::Tensor>> reference(const SlowMoCase& c, const Mlp& init) {
  torch::NoGradGuard outer;
  const int nodes = c.dp / c.per_node;
  const bool slowmo_on = c.alpha != 1.0 || c.beta != 0.0;
  std::vector<std::vector<torch::Tensor>> x(static_cast<std::size_t>(c.dp));
  for (auto& xr : x) {
    for (const auto& p : init.params) xr.push_back(p.detach().clone());
  }
  // Memory-efficient: one (sharded) x_old/u shared by the replicas; otherwise one per replica.
  std::vector<std::vector<torch::Tensor>> x_old(static_cast<std::size_t>(c.dp));
  std::vector<std::vector<torch::Tensor>> u(static_cast<std::size_t>(c.dp));
  for (int r = 0; r < c.dp; ++r) {
    for (const auto& p : init.params) {
      x_old[static_cast<std::size_t>(r)].push_back(p.detach().clone());
      u[static_cast<std::size_t>(r)].push_back(torch::zeros_like(p));
    }
  }
  auto mean_over_replicas = [&](std::size_t i) {
    torch::Tensor s = torch::zeros_like(x[0][i]);
    for (int r = 0; r < c.dp; ++r) s += x[static_cast<std::size_t>(r)][i];
    return s / static_cast<double>(c.dp);
  };
  for (int step = 0; step < c.steps; ++step) {
    // Local SGD steps (gradients averaged within a node).
    std::vector<std::vector<torch::Tensor>> grads(static_cast<std::size_t>(c.dp));
    for (int r = 0; r < c.dp; ++r) {
      torch::AutoGradMode on(true);
      Mlp m;
      for (const auto& t : x[static_cast<std::size_t>(r)]) {
        m.params.push_back(t.clone().requires_grad_(true));
      }
      replica_loss(m, r, step).backward();
      for (const auto& p : m.params) grads[static_cast<std::size_t>(r)].push_back(p.grad());
    }
    for (int r = 0; r < c.dp; ++r) {
      const int first = r / c.per_node * c.per_node;
      for (std::size_t i = 0; i < init.params.size(); ++i) {
        torch::Tensor g = torch::zeros_like(x[0][i]);
        for (int q = first; q < first + c.per_node; ++q) g += grads[static_cast<std::size_t>(q)][i];
        x[static_cast<std::size_t>(r)][i] -= kGamma * (g / static_cast<double>(c.per_node));
      }
    }
    const bool slow = slowmo_on && (step + 1) % c.slowmo == 0;
    const bool local = nodes > 1 && (step + 1) % c.localsgd == 0;
    if (local && !(c.memory_efficient && slow)) {
      for (std::size_t i = 0; i < init.params.size(); ++i) {
        const torch::Tensor avg = mean_over_replicas(i);
        for (auto& xr : x) xr[i] = avg.clone();
      }
    }
    if (slow) {
      for (std::size_t i = 0; i < init.params.size(); ++i) {
        if (c.memory_efficient) {
          const torch::Tensor xbar = mean_over_replicas(i);
          u[0][i] = c.beta * u[0][i] + (x_old[0][i] - xbar) / kGamma;
          x_old[0][i] = x_old[0][i] - c.alpha * kGamma * u[0][i];
          for (auto& xr : x) xr[i] = x_old[0][i].clone();
        } else {
          for (int r = 0; r < c.dp; ++r) {
            auto& ur = u[static_cast<std::size_t>(r)][i];
            auto& xo = x_old[static_cast<std::size_t>(r)][i];
            auto& xr = x[static_cast<std::size_t>(r)][i];
            ur = c.beta * ur + (xo - xr) / kGamma;
            xo = xo - c.alpha * kGamma * ur;
            xr = xo.clone();
          }
        }
      }
    }
  }
  return x;
}

SlowMoOptions options_of(const SlowMoCase& c) {
  SlowMoOptions o;
  o.localsgd_frequency = c.localsgd;
  o.slowmo_frequency = c.slowmo;
  o.momentum = c.beta;
  o.slowmo_lr = c.alpha;
  o.memory_efficient = c.memory_efficient;
  o.num_shards = c.shards > 0 ? c.shards : std::min(32, c.dp);
  o.replicas_per_node = c.per_node;
  o.learning_rate = kGamma;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

std::vector<std::vector<torch::Tensor>> run_slowmo(const SlowMoCase& c, const Mlp& init,
                                                   std::vector<DataParallelStats>* stats) {
  std::vector<std::vector<torch::Tensor>> out(static_cast<std::size_t>(c.dp));
  if (stats) stats->assign(static_cast<std::size_t>(c.dp), {});
  run_replicas(c.dp, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    torch::optim::SGD opt(m.params, torch::optim::SGDOptions(kGamma));
    SlowMo algo(&comm, options_of(c));
    std::vector<StageParams> sp{m.stage_params()};
    algo.on_start(sp);
    for (int step = 0; step < c.steps; ++step) {
      algo.before_backward(0, 0, true);
      replica_loss(m, r, step).backward();
      algo.after_backward(0, 0, true);
      algo.reduce_grad(0);
      opt.step();
      opt.zero_grad();
      algo.after_optimizer_step(step);
    }
    out[static_cast<std::size_t>(r)] = m.params;
    if (stats) (*stats)[static_cast<std::size_t>(r)] = algo.stats();
  });
  return out;
}

void expect_matches_recurrence(const SlowMoCase& c) {
  SCOPED_TRACE(c.name());
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 11);
  const auto ref = reference(c, init);
  const auto got = run_slowmo(c, init, nullptr);
  for (int r = 0; r < c.dp; ++r) {
    EXPECT_LE(max_abs_diff(got[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)]),
              1e-5)
        << "replica " << r;
  }
  // The replicas really train differently between averagings (the test would be vacuous
  // otherwise): without averaging on the last step they differ.
  if (c.dp > 1 && c.per_node == 1 && c.localsgd > 1 && c.steps % c.localsgd != 0) {
    EXPECT_GT(max_abs_diff(got[0], got[1]), 1e-4);
  }
}

TEST(SlowMo, MatchesTheRecurrenceOfIssue7) {
  for (int dp : {2, 4}) {
    for (bool mem : {true, false}) {
      expect_matches_recurrence({dp, 1, 3, 0.5, 1.0, mem});
      expect_matches_recurrence({dp, 2, 4, 0.2, 0.9, mem});
    }
  }
}

TEST(SlowMo, ReplicasDifferBetweenAveragings) {
  // localsgd 4 over 6 steps: the last averaging is after step index 3.
  expect_matches_recurrence({2, 4, 100, 0.5, 0.9, false, 0, 1, 6});
  expect_matches_recurrence({4, 5, 3, 0.3, 1.0, false, 0, 1, 7});
}

TEST(SlowMo, UnevenShardsAndNodes) {
  expect_matches_recurrence({4, 2, 3, 0.5, 0.8, true, 3});  // 3 shards of 4 replicas
  expect_matches_recurrence({4, 2, 3, 0.5, 0.8, true, 1});
  // Two replicas per node: gradients averaged within a node, parameters across the 2 nodes.
  expect_matches_recurrence({4, 2, 3, 0.5, 0.8, true, 0, 2});
  expect_matches_recurrence({4, 3, 4, 0.2, 1.0, false, 0, 2});
  // One node holding every replica: LocalSGD is off (gradients are averaged every step).
  expect_matches_recurrence({2, 1, 3, 0.5, 1.0, true, 0, 2});
}

TEST(SlowMo, MomentumZeroAndLrOneIsLocalSgd) {
  expect_matches_recurrence({4, 3, 6, 0.0, 1.0, true});
  expect_matches_recurrence({2, 2, 4, 0.0, 1.0, false});
}

TEST(SlowMo, StateRoundTripsForCheckpoints) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 11);
  run_replicas(2, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    SlowMoCase c{2, 1, 3, 0.5, 0.9, true};
    SlowMo algo(&comm, options_of(c));
    std::vector<StageParams> sp{m.stage_params()};
    algo.on_start(sp);
    auto st = algo.state();
    ASSERT_EQ(st.size(), 2u);
    const std::int64_t total = kHidden * kIn + kHidden + kOut * kHidden + kOut;
    EXPECT_EQ(st.at("slowmo.x_old").numel(), r == 0 ? (total + 1) / 2 : total - (total + 1) / 2);
    auto bad = st;
    bad["slowmo.u"] = torch::zeros({3});
    EXPECT_THROW(algo.load_state(bad), ConfigError);
    bad.erase("slowmo.u");
    EXPECT_THROW(algo.load_state(bad), ConfigError);
  });
}

TEST(SlowMo, CommunicatesAThirdOfDdpWithLocalSgdEvery3Steps) {
  // 48 steps = one SlowMo period with the defaults (localsgd 3, slowmo 48, memory-efficient).
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 11);
  const int steps = 48;
  const int dp = 2;
  std::vector<DataParallelStats> slow_stats;
  SlowMoCase c{dp, 3, 48, 0.5, 1.0, true};
  c.steps = steps;
  (void)run_slowmo(c, init, &slow_stats);

  std::vector<DataParallelStats> ddp_stats(dp);
  std::vector<double> ddp_start(dp);
  run_replicas(dp, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    Ddp ddp(&comm, DdpOptions{});
    std::vector<StageParams> sp{m.stage_params()};
    ddp.on_start(sp);
    ddp_start[static_cast<std::size_t>(r)] = ddp.stats().wire_bytes;
    for (int step = 0; step < steps; ++step) {
      ddp.before_backward(0, 0, true);
      replica_loss(m, r, step).backward();
      ddp.after_backward(0, 0, true);
      ddp.reduce_grad(0);
      for (auto& p : m.params) p.mutable_grad().zero_();
      ddp.after_optimizer_step(step);
    }
    ddp_stats[static_cast<std::size_t>(r)] = ddp.stats();
  });
  const double param_bytes = 4.0 * (kHidden * kIn + kHidden + kOut * kHidden + kOut);
  for (int r = 0; r < dp; ++r) {
    EXPECT_DOUBLE_EQ(ddp_start[r], 0.0);  // the start-up broadcast is counted apart
    EXPECT_DOUBLE_EQ(slow_stats[r].setup_wire_bytes, 0.5 * param_bytes);
    const double ddp_per_step = ddp_stats[r].wire_bytes / steps;
    const double slow_per_step = slow_stats[r].wire_bytes / steps;
    EXPECT_DOUBLE_EQ(ddp_per_step, param_bytes);  // 2 (n-1)/n = 1 all-reduce of everything
    EXPECT_LE(slow_per_step, ddp_per_step / 3.0 + 1e-9) << "replica " << r;
    EXPECT_GT(slow_per_step, 0.0);
  }
}

// Note [SlowMo sharded slow step]: one shard per replica runs as one reduce-scatter and one
// all-gather, moving the bytes of the per-shard reduces and broadcasts (3 shards of 4 replicas).
TEST(SlowMo, ShardedSlowStepIsOneReduceScatterAndOneAllGather) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 11);
  const std::int64_t total = kHidden * kIn + kHidden + kOut * kHidden + kOut;
  std::vector<DataParallelStats> sharded, per_shard;
  SlowMoCase c{4, 100, 2, 0.5, 0.9, true, 4};
  c.steps = 4;  // slow steps after steps 1 and 3, no averaging
  const auto a = run_slowmo(c, init, &sharded);
  c.shards = 3;
  const auto b = run_slowmo(c, init, &per_shard);
  for (int r = 0; r < c.dp; ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    const auto& s = sharded[static_cast<std::size_t>(r)];
    const auto& p = per_shard[static_cast<std::size_t>(r)];
    // The start-up broadcast, then 2 slow steps x (reduce-scatter + all-gather) or 2 slow
    // steps x 3 shards x (reduce + broadcast).
    EXPECT_EQ(s.collectives, 1 + 2 * 2);
    EXPECT_EQ(p.collectives, 1 + 2 * 2 * 3);
    EXPECT_EQ(s.payload_bytes, 2u * 2u * 4u * static_cast<std::uint64_t>(total));
    EXPECT_EQ(s.payload_bytes, p.payload_bytes);
    EXPECT_DOUBLE_EQ(s.wire_bytes, 2 * 2 * 0.75 * 4 * static_cast<double>(total));
    EXPECT_DOUBLE_EQ(s.wire_bytes, p.wire_bytes);
    // The same recurrence (sums of 4 in another order may round differently) ...
    EXPECT_LE(max_abs_diff(a[static_cast<std::size_t>(r)], b[static_cast<std::size_t>(r)]), 1e-6);
    // ... and the all-gather copies bits: every replica holds replica 0's parameters.
    EXPECT_EQ(max_abs_diff(a[static_cast<std::size_t>(r)], a[0]), 0.0);
  }
}

// The parameters live in the flat buffer the collectives work on (no copy per slow step); a
// tensor listed twice (in two local stages) is copied in and out and trains as if listed once.
TEST(SlowMo, ShardedSlowStepKeepsParametersInOneBuffer) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 11);
  const SlowMoCase c{2, 100, 2, 0.5, 0.9, true};
  const auto ref = reference(c, init);
  std::vector<std::vector<torch::Tensor>> got(2);
  run_replicas(2, [&](int r, Communicator& comm) {
    Mlp m = init.clone();
    torch::optim::SGD opt(m.params, torch::optim::SGDOptions(kGamma));
    SlowMo algo(&comm, options_of(c));
    StageParams again;
    again.stage = 1;
    again.params = {m.params[1]};
    std::vector<StageParams> sp{m.stage_params(), again};
    algo.on_start(sp);
    for (std::size_t i = 1; i < m.params.size(); ++i) {
      EXPECT_EQ(static_cast<const char*>(m.params[i].data_ptr()),
                static_cast<const char*>(m.params[i - 1].data_ptr()) +
                    m.params[i - 1].numel() * static_cast<std::int64_t>(sizeof(float)))
          << "parameter " << i;
    }
    for (int step = 0; step < c.steps; ++step) {
      replica_loss(m, r, step).backward();
      opt.step();
      opt.zero_grad();
      algo.after_optimizer_step(step);
    }
    got[static_cast<std::size_t>(r)] = m.params;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LE(max_abs_diff(got[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)]),
              1e-5)
        << "replica " << r;
  }
}

// A failed slow step names the collective and the step (OpContext::what), and the peer.
TEST(SlowMo, ShardedSlowStepErrorNamesTheStepAndTheCollective) {
  const Mlp init = Mlp::init(kIn, kHidden, kOut, 11);
  const SlowMoCase c{2, 100, 3, 0.5, 0.9, true};
  FakeWorld world(2);
  std::string error;
  try {
    run_replicas(
        2,
        [&](int r, Communicator& comm) {
          Mlp m = init.clone();
          SlowMo algo(&comm, options_of(c));
          std::vector<StageParams> sp{m.stage_params()};
          algo.on_start(sp);
          for (int step = 0; step < 3; ++step) {
            if (r == 1 && step == 2) {
              world.kill(1);
              return;
            }
            algo.after_optimizer_step(step);
          }
        },
        &world);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("SlowMo reduce-scatter of the parameters step 2"), std::string::npos)
      << error;
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
}

TEST(SlowMo, RejectsBadOptions) {
  FakeWorld world(2);
  auto comms = world.communicators();
  SlowMoOptions o;
  o.learning_rate = 0.1;
  o.num_shards = 3;
  EXPECT_THROW(SlowMo(comms[0].get(), o), ConfigError);
  o.num_shards = 2;
  o.localsgd_frequency = 0;
  EXPECT_THROW(SlowMo(comms[0].get(), o), ConfigError);
  o.localsgd_frequency = 3;
  o.slowmo_frequency = -1;
  EXPECT_THROW(SlowMo(comms[0].get(), o), ConfigError);
  o.slowmo_frequency = 48;
  o.learning_rate = 0;
  EXPECT_THROW(SlowMo(comms[0].get(), o), ConfigError);
}

// Ranks per node -> replicas of a data-parallel group per node (rank = dp_index * pp + pp_index).
TEST(SlowMo, ReplicasPerNode) {
  EXPECT_EQ(replicas_per_node(4, 2), 2);
  EXPECT_EQ(replicas_per_node(1, 2), 1);
  EXPECT_EQ(replicas_per_node(3, 2), 1);
}

}  // namespace
}  // namespace pipewright::exec
