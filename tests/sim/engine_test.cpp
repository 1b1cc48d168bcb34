#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

using sched::Action;
using sched::ActionKind;
using testing::gpipe;
using testing::one_f_one_b;
using testing::uniform_costs;

constexpr std::int64_t kMs = 1'000'000;  // ns

SimResult run(const sched::LoweredPlan& plan, const sched::CostTable& costs, SimOptions opt = {}) {
  return simulate(plan, costs, Cluster{}, opt);
}

TEST(Engine, GPipeAnd1F1BClosedFormOverAGrid) {
  for (std::int32_t p : {1, 2, 3, 4, 8}) {
    for (std::int32_t m : {1, 2, 3, 4, 8, 13}) {
      for (auto [f, b] : {std::pair{1.0, 2.0}, std::pair{1.5, 1.5}, std::pair{0.25, 3.0}}) {
        const auto costs = uniform_costs(p, f, b);
        const std::int64_t expect = (m + p - 1) * (std::llround(f * 1e6) + std::llround(b * 1e6));
        const auto g = run(gpipe(p, m), costs);
        EXPECT_EQ(g.makespan_ns, expect) << "GPipe p=" << p << " m=" << m;
        EXPECT_DOUBLE_EQ(g.bubble_fraction(), static_cast<double>(p - 1) / (m + p - 1));
        if (m >= p) {
          const auto o = run(one_f_one_b(p, m), costs);
          EXPECT_EQ(o.makespan_ns, expect) << "1F1B p=" << p << " m=" << m;
          EXPECT_DOUBLE_EQ(o.bubble_fraction(), static_cast<double>(p - 1) / (m + p - 1));
        }
      }
    }
  }
}

TEST(Engine, PeakActivationsPerRank) {
  for (std::int32_t p : {2, 4, 6}) {
    for (std::int32_t m : {1, 3, 4, 8}) {
      const auto costs = uniform_costs(p, 1, 2, /*act_bytes=*/1000);
      const auto g = run(gpipe(p, m), costs);
      for (std::int32_t r = 0; r < p; ++r) {
        EXPECT_EQ(g.per_rank[r].peak_activation_microbatches, m);
        EXPECT_EQ(g.per_rank[r].peak_activation_bytes, 1000 * m);
      }
      const auto o = run(one_f_one_b(p, m), costs);
      for (std::int32_t r = 0; r < p; ++r) {
        EXPECT_EQ(o.per_rank[r].peak_activation_microbatches, std::min(p - r, m))
            << "p=" << p << " m=" << m << " r=" << r;
      }
    }
  }
}

// Hand-derived: p=2, m=2, F=1, B=2, every message 0.5 ms.
//   rank0: F0 [0,1] F1 [1,2]; sends [1,1.5] [2,2.5]
//   rank1: F0 [1.5,2.5] F1 [2.5,3.5] B0 [3.5,5.5] B1 [5.5,7.5]; grad sends [5.5,6] [7.5,8]
//   rank0: B0 [6,8] B1 [8,10]
TEST(Engine, GPipeWithP2PCostHandDerived) {
  SimOptions opt;
  opt.p2p_override_ms = 0.5;
  const auto r = run(gpipe(2, 2), uniform_costs(2, 1, 2), opt);
  EXPECT_EQ(r.makespan_ns, 10 * kMs);
  EXPECT_EQ(r.per_rank[0].busy_ns, 6 * kMs);
  EXPECT_EQ(r.per_rank[0].idle_ns, 4 * kMs);
  EXPECT_EQ(r.per_rank[1].finish_ns, 8 * kMs);  // its last send ends at 8
  EXPECT_EQ(r.per_rank[0].send_ns, 1 * kMs);
  // Closed form for GPipe with message cost C: (m + p - 1)(F + B) + 2(p - 1)C.
  for (std::int32_t p : {2, 3, 5}) {
    for (std::int32_t m : {1, 4, 7}) {
      const auto g = run(gpipe(p, m), uniform_costs(p, 1, 2), opt);
      EXPECT_EQ(g.makespan_ns, (m + p - 1) * 3 * kMs + 2 * (p - 1) * kMs / 2) << p << " " << m;
    }
  }
}

// 1F1B with p=2, m=2, F=1, B=2, C=0.5 (hand-derived):
//   rank0: F0 [0,1] F1 [1,2] (sends [1,1.5], [2,2.5])
//   rank1: F0 [1.5,2.5] B0 [2.5,4.5] (send [4.5,5]) RECV_F1 (arrived 2.5) F1 [4.5,5.5]
//          B1 [5.5,7.5] (send [7.5,8])
//   rank0: RECV_B0 at 2 waits to 5 -> B0 [5,7]; RECV_B1 waits to 8 -> B1 [8,10].
TEST(Engine, OneFOneBWithP2PCostHandDerived) {
  SimOptions opt;
  opt.p2p_override_ms = 0.5;
  const auto r = run(one_f_one_b(2, 2), uniform_costs(2, 1, 2), opt);
  EXPECT_EQ(r.makespan_ns, 10 * kMs);
  EXPECT_EQ(r.per_rank[0].recv_wait_ns, (3 + 1) * kMs);
  EXPECT_EQ(r.per_rank[1].recv_wait_ns, kMs * 3 / 2);  // RECV_F0 waits 0 -> 1.5
}

TEST(Engine, SplitBackwardFreesActivationsAtW) {
  const auto costs = uniform_costs(3, 1, 2, 100);
  const auto r = run(one_f_one_b(3, 6, /*split=*/true), costs);
  // I and W default to half of B each. Upstream ranks only wait for I, so the drain is W shorter
  // per stage than with B: (m + p - 1)(F + B) - (p - 1) W.
  EXPECT_EQ(r.makespan_ns, (6 + 3 - 1) * 3 * kMs - 2 * kMs);
  for (std::int32_t k = 0; k < 3; ++k) EXPECT_EQ(r.per_rank[k].peak_activation_microbatches, 3 - k);
}

TEST(Engine, ByteIdenticalResultsAndCriticalPath) {
  SimOptions opt;
  opt.p2p_override_ms = 0.3;
  const auto a = run(one_f_one_b(4, 8), uniform_costs(4, 1, 2), opt);
  const auto b = run(one_f_one_b(4, 8), uniform_costs(4, 1, 2), opt);
  ASSERT_EQ(a.actions.size(), b.actions.size());
  for (std::size_t i = 0; i < a.actions.size(); ++i) {
    EXPECT_EQ(a.actions[i].start_ns, b.actions[i].start_ns);
    EXPECT_EQ(a.actions[i].end_ns, b.actions[i].end_ns);
  }
  ASSERT_FALSE(a.critical_path.empty());
  // The path is contiguous in time: each action starts when its predecessor ends (or later for
  // sends queued behind compute) and the last one ends at the makespan.
  const auto& last = a.actions[static_cast<std::size_t>(a.critical_path.back())];
  EXPECT_EQ(last.end_ns, a.makespan_ns);
  EXPECT_EQ(a.actions[static_cast<std::size_t>(a.critical_path.front())].start_ns, 0);
  for (std::size_t k = 1; k < a.critical_path.size(); ++k) {
    const auto& prev = a.actions[static_cast<std::size_t>(a.critical_path[k - 1])];
    const auto& cur = a.actions[static_cast<std::size_t>(a.critical_path[k])];
    EXPECT_LE(prev.end_ns, cur.end_ns);
  }
}

TEST(Engine, DeadlockNamesTheBlockedRanks) {
  auto plan = gpipe(2, 1);
  // Rank 1 waits for a gradient that rank 0 never gets: drop rank 1's SEND_B.
  auto& r1 = plan.per_rank[1];
  r1.erase(std::remove_if(r1.begin(), r1.end(),
                          [](const Action& a) { return a.kind == ActionKind::kSendB; }),
           r1.end());
  try {
    (void)run(plan, uniform_costs(2, 1, 1));
    FAIL();
  } catch (const InvalidPlanError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 is blocked at position"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0B0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1SEND_B0 is missing"), std::string::npos) << msg;
  }
}

TEST(Engine, MalformedPlansAndMismatchedCosts) {
  auto plan = gpipe(2, 2);
  plan.per_rank[0][0] = Action::compute(1, ActionKind::kForward, 0);
  EXPECT_THROW((void)run(plan, uniform_costs(2, 1, 1)), InvalidPlanError);
  plan = gpipe(2, 2);
  plan.per_rank[1].push_back(Action::compute(1, ActionKind::kForward, 9));
  try {
    (void)run(plan, uniform_costs(2, 1, 1));
    FAIL();
  } catch (const InvalidPlanError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1, position"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("microbatch 9"), std::string::npos);
  }
  try {
    (void)run(gpipe(2, 2), uniform_costs(3, 1, 1));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/stages"), std::string::npos);
  }
  auto neg = uniform_costs(2, 1, 1);
  neg.stages[1].backward_ms = -1;
  try {
    (void)run(gpipe(2, 2), neg);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/stages/1/backward_ms"), std::string::npos);
  }
}

TEST(Engine, StaticMemoryPerOptimizer) {
  const auto costs = uniform_costs(2, 1, 1, 0, /*param_bytes=*/1000);
  for (auto [opt, momentum, factor] :
       {std::tuple{Optimizer::kSgd, 0.0, 0}, std::tuple{Optimizer::kSgd, 0.9, 1},
        std::tuple{Optimizer::kAdam, 0.0, 2}, std::tuple{Optimizer::kAdamW, 0.0, 2}}) {
    SimOptions o;
    o.optimizer = opt;
    o.momentum = momentum;
    const auto r = run(gpipe(2, 2), costs, o);
    EXPECT_EQ(r.per_rank[0].static_memory_bytes, 1000 * (2 + factor));
  }
  Cluster small;
  small.device_memory_bytes = 3500;
  SimOptions o;
  o.optimizer = Optimizer::kAdam;
  const auto r = simulate(gpipe(2, 2), uniform_costs(2, 1, 1, 10, 1000), small, o);
  EXPECT_TRUE(r.per_rank[0].exceeds_memory);  // 4000 + 20 > 3500
}

// GPipe p=2 m=1, F=1, B=2, free messages, comm_overhead 0.25 per p2p batch, optimizer 0.5 per
// stage (hand-derived):
//   rank1: RECV_F0 (batch head) +0.25; F0 waits for the data at 1.25 -> [1.25, 2.25];
//          B0 [2.25, 4.25]; SEND_B0 (head) +0.25 -> 4.5; OPTIM [4.5, 5.0]
//   rank0: F0 [0, 1]; SEND_F0 + RECV_B0 are one batch: +0.25 once -> sends at 1.25;
//          B0 waits for the gradient at 4.5 -> [4.5, 6.5]; OPTIM [6.5, 7.0]
TEST(Engine, OptimizerTimeAndCommOverheadPerBatchHandDerived) {
  auto plan = gpipe(2, 1);
  for (std::int32_t r = 0; r < 2; ++r) {
    plan.per_rank[static_cast<std::size_t>(r)].push_back(
        Action::stage_only(r, ActionKind::kOptimizerStep));
  }
  auto costs = uniform_costs(2, 1, 2);
  costs.comm_overhead_ms = 0.25;
  for (auto& c : costs.stages) c.optimizer_ms = 0.5;
  const auto r = run(plan, costs);
  EXPECT_EQ(r.makespan_ns, 7 * kMs);
  EXPECT_EQ(r.per_rank[1].finish_ns, 5 * kMs);
  EXPECT_EQ(r.per_rank[0].busy_ns, 3 * kMs);  // F + B; OPTIM is not F/B/I/W busy time
}

// Note [Send calls] (engine.hpp), hand-derived: GPipe p=2 m=2, F=1, B=2, the profile's
// per-message cost 0.5 and send call 0.3 (median), no batch overhead.
//   rank0: F0 [0, 1]; SEND_F0 posted at 1 (its message arrives at 1.5), the call holds the
//          compute stream to 1.3; F1 [1.3, 2.3]; SEND_F1 posted at 2.3 (arrives 2.8)
//   rank1: F0 [1.5, 2.5]; F1 waits for its message: [2.8, 3.8]
// Without the measured call, or when --p2p-ms prices the messages, F1 starts at 1 on rank 0.
TEST(Engine, SendCallsHoldTheSendersComputeStreamButNotTheMessage) {
  const auto plan = gpipe(2, 2);
  auto costs = uniform_costs(2, 1, 2);
  sched::P2PCost p2p;
  p2p.per_message_ms = 0.5;
  costs.p2p = p2p;
  SimOptions opt;
  opt.record_actions = true;
  auto start_of = [](const SimResult& r, std::int32_t rank, std::int32_t mb) {
    for (const auto& t : r.actions) {
      if (t.rank == rank && t.action.kind == ActionKind::kForward && t.action.microbatch == mb)
        return t.start_ns;
    }
    return std::int64_t{-1};
  };
  const auto plain = run(plan, costs, opt);
  EXPECT_EQ(start_of(plain, 0, 1), 1 * kMs);
  costs.p2p->send_call_stats = sched::KindStats{0.3, 0.2, 0.6, 20, {}, {}};
  const auto called = run(plan, costs, opt);
  EXPECT_EQ(start_of(called, 0, 1), 1300 * kMs / 1000);
  EXPECT_EQ(start_of(called, 1, 0), 1500 * kMs / 1000);  // the message left when posted
  EXPECT_EQ(start_of(called, 1, 1), 2800 * kMs / 1000);
  opt.p2p_override_ms = 0.5;  // another network's price: its send calls are not known
  EXPECT_EQ(start_of(run(plan, costs, opt), 0, 1), 1 * kMs);
  opt.p2p_override_ms.reset();
  // Sampled: every call is a draw within the distribution's range (here [0.1, 0.9] ms).
  std::vector<double> q;
  for (int k = 0; k <= 20; ++k) q.push_back(0.1 + k * 0.04);
  costs.p2p->send_call_stats = sched::KindStats{0.5, 0.18, 0.82, 20, q, {}};
  opt.sample_durations_seed = 3;
  const auto sampled = run(plan, costs, opt);
  EXPECT_GE(start_of(sampled, 0, 1), 1100 * kMs / 1000);
  EXPECT_LE(start_of(sampled, 0, 1), 1900 * kMs / 1000);
}

// Note [Compute beside a send] (engine.hpp), hand-derived: GPipe p=2 m=2, F=1, B=2, one rank
// per node, the inter-node link 0.5 ms a message, send_cpu_load 1 (half speed beside a send).
//   rank0: F0 [0, 1]; SEND_F0 on the wire [1, 1.5]; F1 from 1: 0.25 of work by 1.5 at half
//          speed, the other 0.75 at full speed: [1, 2.25]
//   rank1: F0 from 1.5 (the message is not delayed); the activation of microbatch 1 arrives over
//          [2.25, 2.75], and the receiving end's network stack loads rank 1 too: 0.75 of work by
//          2.25, the other 0.25 at half speed: [1.5, 2.75]
// The profile's own p2p cost (the network it was measured on, whose compute times hold the
// load already) or one node: F1 [1, 2].
TEST(Engine, ComputeBesideASendOnALoadedLinkRunsSlower) {
  const auto plan = gpipe(2, 2);
  const auto costs = uniform_costs(2, 1, 2);
  Cluster cluster;
  cluster.nodes = 2;
  cluster.ranks_per_node = 1;
  cluster.inter_node = Link{0.5, 0};
  cluster.intra_node = Link{0.5, 0};
  cluster.send_cpu_load = 1.0;
  SimOptions opt;
  opt.record_actions = true;
  auto span = [](const SimResult& r, std::int32_t rank, std::int32_t mb) {
    for (const auto& t : r.actions) {
      if (t.rank == rank && t.action.kind == ActionKind::kForward && t.action.microbatch == mb)
        return std::pair{t.start_ns, t.end_ns};
    }
    return std::pair{std::int64_t{-1}, std::int64_t{-1}};
  };
  const auto loaded = simulate(plan, costs, cluster, opt);
  EXPECT_EQ(span(loaded, 0, 1), (std::pair{1 * kMs, 2250 * kMs / 1000}));
  EXPECT_EQ(span(loaded, 1, 0), (std::pair{1500 * kMs / 1000, 2750 * kMs / 1000}));
  auto measured = costs;
  measured.p2p = sched::P2PCost{};
  measured.p2p->per_message_ms = 0.5;
  EXPECT_EQ(span(simulate(plan, measured, cluster, opt), 0, 1), (std::pair{1 * kMs, 2 * kMs}));
  Cluster one = cluster;
  one.nodes = 1;
  one.ranks_per_node = 2;
  EXPECT_EQ(span(simulate(plan, costs, one, opt), 0, 1), (std::pair{1 * kMs, 2 * kMs}));
}

TEST(Engine, SampledDurationsAreDeterministicAndFollowTheQuantiles) {
  const auto plan = one_f_one_b(4, 8);
  auto costs = uniform_costs(4, 1, 2);
  // Without stats, sampling changes nothing.
  SimOptions opt;
  const auto plain = run(plan, costs, opt);
  opt.sample_durations_seed = 7;
  EXPECT_EQ(run(plan, costs, opt).makespan_ns, plain.makespan_ns);
  EXPECT_DOUBLE_EQ(median_step_ms(plan, costs, Cluster{}, SimOptions{}, 5),
                   static_cast<double>(plain.makespan_ns) / 1e6);
  // A degenerate distribution (every quantile = the median) also changes nothing.
  for (auto& c : costs.stages) {
    c.forward_stats = sched::KindStats{1, 1, 1, 10, std::vector<double>(21, 1.0), {}};
  }
  EXPECT_EQ(run(plan, costs, opt).makespan_ns, plain.makespan_ns);
  // A spread distribution: same seed, same result; another seed, another result; every F
  // within [min, max] of the quantiles; the median step is longer than the medians' step
  // (a max over noisy sums).
  for (auto& c : costs.stages) {
    std::vector<double> q;
    for (int k = 0; k <= 20; ++k) q.push_back(0.5 + k * 0.05);  // uniform on [0.5, 1.5]
    c.forward_stats = sched::KindStats{1, 0.6, 1.4, 100, q, {}};
  }
  opt.record_actions = true;
  const auto a = run(plan, costs, opt);
  const auto b = run(plan, costs, opt);
  EXPECT_EQ(a.makespan_ns, b.makespan_ns);
  opt.sample_durations_seed = 8;
  EXPECT_NE(run(plan, costs, opt).makespan_ns, a.makespan_ns);
  for (const auto& t : a.actions) {
    if (t.action.kind != ActionKind::kForward) continue;
    EXPECT_GE(t.end_ns - t.start_ns, kMs / 2);
    EXPECT_LE(t.end_ns - t.start_ns, 3 * kMs / 2);
  }
  const double med = median_step_ms(plan, costs, Cluster{}, SimOptions{}, 31);
  EXPECT_EQ(med, median_step_ms(plan, costs, Cluster{}, SimOptions{}, 31));
  EXPECT_GT(med, static_cast<double>(plain.makespan_ns) / 1e6);
}

// Note [Correlated sampling]: with the profile's correlations at 1, every forward of a step is
// drawn at one quantile (the same duration everywhere); with only the rank-step one at 1, each
// rank's forwards share theirs; a shared slowdown lengthens the median step less than
// independent draws do (no max over independent noise).
TEST(Engine, CorrelatedSamplingSharesAStepsDraws) {
  const auto plan = one_f_one_b(4, 8);
  auto costs = uniform_costs(4, 1, 2);
  for (auto& c : costs.stages) {
    std::vector<double> q;
    for (int k = 0; k <= 20; ++k) q.push_back(0.5 + k * 0.05);  // uniform on [0.5, 1.5]
    c.forward_stats = sched::KindStats{1, 0.6, 1.4, 100, q, {}};
  }
  SimOptions opt;
  opt.record_actions = true;
  opt.sample_durations_seed = 7;
  const auto forwards = [&](const sched::CostTable& t) {
    std::map<std::int32_t, std::set<std::int64_t>> per_stage;  // stage -> distinct durations
    for (const auto& a : run(plan, t, opt).actions)
      if (a.action.kind == ActionKind::kForward)
        per_stage[a.action.stage].insert(a.end_ns - a.start_ns);
    return per_stage;
  };
  const auto independent = forwards(costs);
  EXPECT_GT(independent.at(0).size(), 1u);
  auto step = costs;
  step.step_correlation = step.rank_step_correlation = 1;
  std::set<std::int64_t> all;
  for (const auto& [s, d] : forwards(step)) all.insert(d.begin(), d.end());
  EXPECT_EQ(all.size(), 1u);
  EXPECT_GE(*all.begin(), kMs / 2);
  EXPECT_LE(*all.begin(), 3 * kMs / 2);
  auto rank_step = costs;
  rank_step.rank_step_correlation = 1;
  all.clear();
  for (const auto& [s, d] : forwards(rank_step)) {
    EXPECT_EQ(d.size(), 1u) << "stage " << s;
    all.insert(d.begin(), d.end());
  }
  EXPECT_GT(all.size(), 1u);
  EXPECT_LT(median_step_ms(plan, step, Cluster{}, SimOptions{}, 31),
            median_step_ms(plan, costs, Cluster{}, SimOptions{}, 31));
}

// Shared cores (Note [Shared cores]), hand-derived: p=2, m=2 GPipe, F=1, B=2, no message cost,
// one core for both ranks:
//   rank0 F0 [0,1] alone; then rank0 F1 and rank1 F0 share the core: both [1,3];
//   rank1 F1 [3,4] alone, rank1 B0 [4,6] alone (rank0 waits for a gradient);
//   rank0 B0 and rank1 B1 share: both [6,10]; rank0 B1 [10,12] alone.
TEST(Engine, SharedCoresHandDerived) {
  Cluster one_core;
  one_core.cores_per_node = 1;
  SimOptions opt;
  opt.record_actions = true;
  const auto r = simulate(gpipe(2, 2), uniform_costs(2, 1, 2), one_core, opt);
  EXPECT_EQ(r.makespan_ns, 12 * kMs);
  std::vector<std::tuple<std::int32_t, std::string, std::int64_t, std::int64_t>> got;
  for (const auto& t : r.actions) {
    if (t.stream == Stream::kCompute)
      got.emplace_back(t.rank, sched::to_string(t.action), t.start_ns / kMs, t.end_ns / kMs);
  }
  std::sort(got.begin(), got.end());
  const decltype(got) want{{0, "0B0", 6, 10}, {0, "0B1", 10, 12}, {0, "0F0", 0, 1},
                           {0, "0F1", 1, 3},  {1, "1B0", 4, 6},   {1, "1B1", 6, 10},
                           {1, "1F0", 1, 3},  {1, "1F1", 3, 4}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(r.per_rank[0].busy_ns, 9 * kMs);  // wall time in compute, shared or not
}

// Shared cores with message cost: a send's bytes move at the speed the node leaves it, like
// compute (hand-derived; GPipe p=2 m=2, F=1, B=2, every message 1 ms of work, one core):
//   r0 F0 [0,1]; r0 F1 and SEND_F0 share: both [1,3]; r1 F0 and r0 SEND_F1 share: both [3,5];
//   r1 F1 [5,6], B0 [6,8]; r1 B1 and SEND_B0 share until the send ends at 10 (B1 has 1 ms left);
//   r1 B1 and r0 B0 share: B1 ends 12; r0 B0 (1 ms left) and SEND_B1 share: both end 14;
//   r0 B1 [14,16].
TEST(Engine, SharedCoresChargeSendsHandDerived) {
  Cluster one_core;
  one_core.cores_per_node = 1;
  SimOptions opt;
  opt.p2p_override_ms = 1.0;
  opt.record_actions = true;
  const auto r = simulate(gpipe(2, 2), uniform_costs(2, 1, 2), one_core, opt);
  EXPECT_EQ(r.makespan_ns, 16 * kMs);
  std::vector<std::tuple<std::int32_t, std::string, std::int64_t, std::int64_t>> got;
  for (const auto& t : r.actions) {
    if (t.stream == Stream::kCompute || t.stream == Stream::kSend)
      got.emplace_back(t.rank, sched::to_string(t.action), t.start_ns / kMs, t.end_ns / kMs);
  }
  std::sort(got.begin(), got.end());
  const decltype(got) want{{0, "0B0", 10, 14}, {0, "0B1", 14, 16},     {0, "0F0", 0, 1},
                           {0, "0F1", 1, 3},   {0, "0SEND_F0", 1, 3},  {0, "0SEND_F1", 3, 5},
                           {1, "1B0", 6, 8},   {1, "1B1", 8, 12},      {1, "1F0", 3, 5},
                           {1, "1F1", 5, 6},   {1, "1SEND_B0", 8, 10}, {1, "1SEND_B1", 12, 14}};
  EXPECT_EQ(got, want);
}

// Transfers without a progress thread (CostTable::p2p_uses_core false, Open MPI) are fixed
// delays that take no core: F 1, B 2, messages 1 ms, one core. Rank 1's B1 [6, ...] and rank 0's
// B0 [7, ...] share the core from 7: B1 ends at 9, B0 at 10, B1's gradient arrives at 10 and
// rank 0's B1 runs [10, 12].
TEST(Engine, SharedCoresMessagesWithoutProgressThreadAreDelays) {
  Cluster one_core;
  one_core.cores_per_node = 1;
  SimOptions opt;
  opt.p2p_override_ms = 1.0;
  opt.blocking_recv = true;
  opt.record_actions = true;
  auto costs = uniform_costs(2, 1, 2);
  costs.p2p_uses_core = false;
  const auto r = simulate(gpipe(2, 2), costs, one_core, opt);
  EXPECT_EQ(r.makespan_ns, 12 * kMs);
  std::vector<std::tuple<std::int32_t, std::string, std::int64_t, std::int64_t>> got;
  for (const auto& t : r.actions) {
    if (t.stream == Stream::kCompute || t.stream == Stream::kSend)
      got.emplace_back(t.rank, sched::to_string(t.action), t.start_ns / kMs, t.end_ns / kMs);
  }
  std::sort(got.begin(), got.end());
  const decltype(got) want{{0, "0B0", 7, 10}, {0, "0B1", 10, 12},    {0, "0F0", 0, 1},
                           {0, "0F1", 1, 2},  {0, "0SEND_F0", 1, 2}, {0, "0SEND_F1", 2, 3},
                           {1, "1B0", 4, 6},  {1, "1B1", 6, 9},      {1, "1F0", 2, 3},
                           {1, "1F1", 3, 4},  {1, "1SEND_B0", 6, 7}, {1, "1SEND_B1", 9, 10}};
  EXPECT_EQ(got, want);
}

// One core and free messages: some rank can always compute, so the step is the total work.
// Cores >= ranks: exactly the dedicated-device result. A profile's cores_per_node applies when
// the cluster has none; the cluster's wins.
TEST(Engine, SharedCoresBoundsAndSources) {
  for (std::int32_t p : {2, 3, 4}) {
    for (std::int32_t m : {1, 4, 8}) {
      const auto costs = uniform_costs(p, 1, 2);
      Cluster c;
      c.cores_per_node = 1;
      EXPECT_EQ(simulate(gpipe(p, m), costs, c, {}).makespan_ns, p * m * 3 * kMs) << p << m;
      if (m >= p) {
        EXPECT_EQ(simulate(one_f_one_b(p, m), costs, c, {}).makespan_ns, p * m * 3 * kMs);
      }
      c.cores_per_node = p;
      SimOptions opt;
      opt.p2p_override_ms = 0.3;
      opt.record_actions = true;
      const auto shared = simulate(one_f_one_b(p, m), costs, c, opt);
      const auto own = simulate(one_f_one_b(p, m), costs, Cluster{}, opt);
      EXPECT_EQ(shared.makespan_ns, own.makespan_ns);
      EXPECT_EQ(shared.actions.size(), own.actions.size());
    }
  }
  auto costs = uniform_costs(2, 1, 2);
  costs.cores_per_node = 1;
  EXPECT_EQ(run(gpipe(2, 2), costs).makespan_ns, 12 * kMs);
  Cluster two;
  two.cores_per_node = 2;
  EXPECT_EQ(simulate(gpipe(2, 2), costs, two, {}).makespan_ns, 9 * kMs);
  // Two replicas of each rank on one 2-core node: four computing ranks, like p = 4 on 2 cores.
  SimOptions dp;
  dp.dp.replicas = 2;
  EXPECT_EQ(simulate(gpipe(2, 2), uniform_costs(2, 1, 2), two, dp).makespan_ns, 12 * kMs);
}

// Shared cores: deterministic; measured distributions count with their means, never sampled
// (Note [Shared cores]).
TEST(Engine, SharedCoresUseMeansNotSamples) {
  Cluster c;
  c.cores_per_node = 2;
  SimOptions opt;
  opt.record_actions = true;
  opt.p2p_override_ms = 0.1;
  const auto plain = simulate(one_f_one_b(4, 8), uniform_costs(4, 1, 2), c, opt);
  auto costs = uniform_costs(4, 1, 2);
  for (auto& s : costs.stages) {
    std::vector<double> q;
    for (int k = 0; k <= 20; ++k) q.push_back(0.5 + k * 0.05);  // uniform on [0.5, 1.5]: mean 1
    s.forward_stats = sched::KindStats{0.9, 0.6, 1.4, 100, q, {}};
  }
  opt.sample_durations_seed = 3;
  const auto a = simulate(one_f_one_b(4, 8), costs, c, opt);
  opt.sample_durations_seed = 4;
  const auto b = simulate(one_f_one_b(4, 8), costs, c, opt);
  EXPECT_EQ(a.makespan_ns, plain.makespan_ns);
  EXPECT_EQ(b.makespan_ns, plain.makespan_ns);
  ASSERT_EQ(a.actions.size(), plain.actions.size());
  for (std::size_t i = 0; i < a.actions.size(); ++i) {
    EXPECT_EQ(a.actions[i].start_ns, plain.actions[i].start_ns);
    EXPECT_EQ(a.actions[i].end_ns, plain.actions[i].end_ns);
  }
  // An explicit mean wins over the quantiles: F = 2 ms is F = B on every stage.
  for (auto& s : costs.stages) s.forward_stats->mean_ms = 2.0;
  const auto two = simulate(one_f_one_b(4, 8), costs, c, opt);
  EXPECT_EQ(two.makespan_ns,
            simulate(one_f_one_b(4, 8), uniform_costs(4, 2, 2), c, opt).makespan_ns);
  // Never faster than dedicated devices, never faster than the work on 2 cores.
  opt.sample_durations_seed.reset();
  const auto own = simulate(one_f_one_b(4, 8), uniform_costs(4, 1, 2), Cluster{}, opt);
  EXPECT_GT(plain.makespan_ns, own.makespan_ns);
  EXPECT_GE(plain.makespan_ns, 4 * 8 * 3 * kMs / 2);
}

}  // namespace
}  // namespace pipewright::sim
