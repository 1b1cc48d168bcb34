// Closed forms on plans from sched's generators and lowering (the plans users simulate).
#include <gtest/gtest.h>

#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

using sched::ScheduleKind;
using testing::uniform_costs;

constexpr std::int64_t kMs = 1'000'000;

sched::LoweredPlan make(ScheduleKind kind, int p, int m, int v = 1) {
  sched::ScheduleSpec spec;
  spec.kind = kind;
  spec.ranks = p;
  spec.microbatches = m;
  spec.stages_per_rank = v;
  return sched::lower(sched::generate(spec));
}

TEST(Generated, GPipeAnd1F1BClosedForm) {
  for (int p : {1, 2, 4, 7}) {
    for (int m : {1, 2, 4, 8, 9}) {
      const auto costs = uniform_costs(p, 2, 3);
      const auto g = simulate(make(ScheduleKind::kGPipe, p, m), costs, Cluster{}, {});
      EXPECT_EQ(g.makespan_ns, (m + p - 1) * 5 * kMs) << p << " " << m;
      EXPECT_DOUBLE_EQ(g.bubble_fraction(), static_cast<double>(p - 1) / (m + p - 1));
      for (int r = 0; r < p; ++r) EXPECT_EQ(g.per_rank[r].peak_activation_microbatches, m);
      if (m < p) continue;  // torch's 1F1B needs m >= p
      const auto o = simulate(make(ScheduleKind::k1F1B, p, m), costs, Cluster{}, {});
      EXPECT_EQ(o.makespan_ns, (m + p - 1) * 5 * kMs) << p << " " << m;
      EXPECT_DOUBLE_EQ(o.bubble_fraction(), static_cast<double>(p - 1) / (m + p - 1));
      for (int r = 0; r < p; ++r)
        EXPECT_EQ(o.per_rank[r].peak_activation_microbatches, std::min(p - r, m)) << p << m << r;
    }
  }
}

TEST(Generated, Interleaved1F1BClosedForm) {
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int mult : {1, 2, 3}) {
        const int m = p * mult;
        const auto costs = uniform_costs(p * v, 1, 2);
        const auto r =
            simulate(make(ScheduleKind::kInterleaved1F1B, p, m, v), costs, Cluster{}, {});
        EXPECT_EQ(r.makespan_ns, (m * v + p - 1) * 3 * kMs)
            << "p=" << p << " v=" << v << " m=" << m;
      }
    }
  }
}

TEST(Generated, EverySchedulesRunsWithCommunicationAndDp) {
  for (auto kind : sched::all_schedule_kinds()) {
    // Chimera's costs are per model stage (p of them) and expanded to its 2p plan stages.
    const int required = sched::required_stages_per_rank(kind);
    const int v = required == 0 ? 2 : required;
    const auto plan = make(kind, 4, 8, v);
    auto costs = uniform_costs(4 * v, 1, 2, 1 << 20, 64 << 20, 1 << 20);
    Cluster c;
    c.ranks_per_node = 4;
    c.nodes = 2;
    c.intra_node = Link{0.005, 100};
    c.inter_node = Link{0.02, 10};
    SimOptions opt;
    opt.dp.replicas = 2;
    opt.micro_batch_size = 4;
    const auto r = simulate(plan, costs, c, opt);
    EXPECT_GT(r.makespan_ns, 8 * v * 3 * kMs) << sched::to_string(kind);
    for (const auto& rr : r.per_rank) {
      EXPECT_GT(rr.dp_comm_ns, 0);
      EXPECT_GT(rr.send_ns, 0);
    }
    EXPECT_GT(r.throughput_samples_per_s(), 0);
  }
}

}  // namespace
}  // namespace pipewright::sim
