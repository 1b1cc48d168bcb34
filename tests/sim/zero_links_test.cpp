// ZeRO's collectives on a cluster's sharded_collective_links (Note [Unregistered collectives] in
// sim/src/network/network_model.cpp): ZeRO-1/2 reduce-scatter and all-gather on the registered
// links, ZeRO-3 on the unregistered ones, each a ring pass (reduce_ns), exact nanoseconds on
// one-stage pipelines at dp 2; links not given are the collective link (zero_test.cpp's times).
#include <gtest/gtest.h>

#include <string>

#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// Point-to-point and collectives at 1 byte per ns, no latency; at dp 2 a ring pass of the 1000
// parameter bytes moves 500 of them.
Cluster base() {
  Cluster c;
  c.intra_node = Link{0.0, 1.0};
  c.inter_node = c.intra_node;
  return c;
}

// Registered: reduce-scatter 500 B / 0.5 = 1000 ns, all-gather 500 B / 0.25 = 2000 ns.
void set_registered(Cluster& c) {
  c.sharded_links.reduce_scatter.intra_node = Link{0.0, 0.5};
  c.sharded_links.all_gather.intra_node = Link{0.0, 0.25};
}
// Private: reduce-scatter 1 us + 500 B / 0.1 = 6000 ns, all-gather 2 us + 500 B / 0.2 = 4500 ns.
void set_unregistered(Cluster& c) {
  c.sharded_links.reduce_scatter_unregistered.intra_node = Link{0.001, 0.1};
  c.sharded_links.all_gather_unregistered.intra_node = Link{0.002, 0.2};
}

sched::LoweredPlan plan_of(const std::string& csv) {
  const auto compute = std::get<sched::ComputePlan>(sched::parse_csv(csv, "zero.csv"));
  return sched::LoweredPlan{compute.shape, compute.per_rank};
}

SimOptions zero(int stage, int steps = 1) {
  SimOptions o;
  o.dp.replicas = 2;
  o.dp.zero_stage = stage;
  o.steps = steps;
  return o;
}

// F 1 ms, B 2 ms, 1000 parameter bytes (one bucket).
const sched::CostTable kCosts = testing::uniform_costs(1, 1, 2, 0, 1000);

TEST(ZeroLinks, Zero1UsesTheRegisteredLinks) {
  const auto plan = plan_of("0F0,0B0,0REDUCE_GRAD,0OPTIM\n");
  Cluster c = base();
  set_unregistered(c);  // not ZeRO-1's: the collective link's 500 + 500 ns
  EXPECT_EQ(simulate(plan, kCosts, c, zero(1)).makespan_ns, 3 * kMs + 1000);
  set_registered(c);
  // F [0, 1 ms], B [1, 3 ms], reduce-scatter 1000 ns, all-gather 2000 ns.
  const auto one = simulate(plan, kCosts, c, zero(1));
  EXPECT_EQ(one.makespan_ns, 3 * kMs + 3000);
  EXPECT_EQ(one.per_rank[0].dp_comm_ns, 3000);
  // The next step's forward waits for the all-gather.
  EXPECT_EQ(simulate(plan, kCosts, c, zero(1, 2)).makespan_ns, 6 * kMs + 6000);
  // Bytes do not depend on the links.
  EXPECT_DOUBLE_EQ(one.dp_wire_bytes_per_step, 1000);
}

TEST(ZeroLinks, Zero2ReduceScattersEveryBackwardOnTheRegisteredLink) {
  const auto plan = plan_of("0F0,0F1,0B0,0B1,0REDUCE_GRAD,0OPTIM\n");
  Cluster c = base();
  set_unregistered(c);
  EXPECT_EQ(simulate(plan, kCosts, c, zero(2)).per_rank[0].dp_comm_ns, 500 + 500 + 500);
  set_registered(c);
  // Two reduce-scatters of 1000 ns and the all-gather after OPTIM, 2000 ns.
  EXPECT_EQ(simulate(plan, kCosts, c, zero(2)).per_rank[0].dp_comm_ns, 1000 + 1000 + 2000);
}

TEST(ZeroLinks, Zero3UsesTheUnregisteredLinks) {
  const auto plan = plan_of("0UNSHARD,0F0,0RESHARD,0UNSHARD,0B0,0RESHARD,0REDUCE_GRAD,0OPTIM\n");
  Cluster c = base();
  set_registered(c);  // not ZeRO-3's: zero_test.cpp's 3 ms + 1500
  EXPECT_EQ(simulate(plan, kCosts, c, zero(3)).makespan_ns, 3 * kMs + 1500);
  set_unregistered(c);
  // All-gather 4500, F 1 ms, all-gather 4500, B 2 ms, reduce-scatter 6000: all exposed.
  const auto r = simulate(plan, kCosts, c, zero(3));
  EXPECT_EQ(r.makespan_ns, 3 * kMs + 15000);
  EXPECT_EQ(r.per_rank[0].dp_comm_ns, 15000);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 15000);
}

// Replicas on two nodes: the intra-node links do not apply; inter_node ones do.
TEST(ZeroLinks, AcrossNodesTheInterNodeLinksOrTheCollectiveLink) {
  const auto plan = plan_of("0UNSHARD,0F0,0RESHARD,0UNSHARD,0B0,0RESHARD,0REDUCE_GRAD,0OPTIM\n");
  Cluster c = base();
  c.nodes = 2;
  c.ranks_per_node = 1;
  set_registered(c);
  set_unregistered(c);
  EXPECT_EQ(simulate(plan, kCosts, c, zero(3)).makespan_ns, 3 * kMs + 1500);
  c.sharded_links.all_gather_unregistered.inter_node = Link{0.0, 0.5};  // 1000 ns each
  EXPECT_EQ(simulate(plan, kCosts, c, zero(3)).makespan_ns, 3 * kMs + 1000 + 1000 + 500);
  // ZeRO-1 across nodes: the registered inter_node links.
  const auto z1 = plan_of("0F0,0B0,0REDUCE_GRAD,0OPTIM\n");
  EXPECT_EQ(simulate(z1, kCosts, c, zero(1)).makespan_ns, 3 * kMs + 1000);
  c.sharded_links.reduce_scatter.inter_node = Link{0.0, 0.125};  // 4000 ns
  EXPECT_EQ(simulate(z1, kCosts, c, zero(1)).makespan_ns, 3 * kMs + 4000 + 500);
}

}  // namespace
}  // namespace pipewright::sim
