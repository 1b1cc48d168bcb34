// ZeRO in the simulator (Note [ZeRO in the simulator] in sim/src/engine/engine_dp.cpp): exact
// nanosecond times derived by hand on one-stage pipelines, and the data-parallel bytes per step
// per stage: ZeRO-1 moves what DDP moves, ZeRO-3 with a reshard after each compute 1.5x (m = 1).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// 1 byte per ns, no latency.
Cluster one_gb_per_s() {
  Cluster c;
  c.intra_node = Link{0.0, 1.0};
  c.inter_node = c.intra_node;
  return c;
}

// A one-rank plan (no SEND/RECV: a CSV reads it as compute-only; the simulator takes it as is).
sched::LoweredPlan plan_of(const std::string& csv) {
  const auto compute = std::get<sched::ComputePlan>(sched::parse_csv(csv, "zero.csv"));
  return sched::LoweredPlan{compute.shape, compute.per_rank};
}

SimOptions zero(int stage, int d = 2, int steps = 1) {
  SimOptions o;
  o.dp.replicas = d;
  o.dp.zero_stage = stage;
  o.steps = steps;
  return o;
}

// F 1 ms, B 2 ms, 1000 parameter bytes (one bucket).
const sched::CostTable kCosts = testing::uniform_costs(1, 1, 2, 0, 1000);

TEST(Zero, BytesPerStepZero1IsDdpZero3ReshardAfterEachComputeIs1_5x) {
  const auto step = plan_of("0F0,0B0,0REDUCE_GRAD,0OPTIM\n");
  const auto each = plan_of("0UNSHARD,0F0,0RESHARD,0UNSHARD,0B0,0RESHARD,0REDUCE_GRAD,0OPTIM\n");
  for (int d : {2, 4, 8}) {
    const double ddp = simulate(step, kCosts, one_gb_per_s(), zero(0, d)).dp_wire_bytes_per_step;
    EXPECT_DOUBLE_EQ(ddp, 2.0 * (d - 1) / d * 1000) << d;
    const auto z1 = simulate(step, kCosts, one_gb_per_s(), zero(1, d));
    EXPECT_DOUBLE_EQ(z1.dp_wire_bytes_per_step, ddp) << d;
    ASSERT_EQ(z1.dp_wire_bytes_per_stage.size(), 1u);
    EXPECT_DOUBLE_EQ(z1.dp_wire_bytes_per_stage[0], ddp);
    EXPECT_DOUBLE_EQ(simulate(each, kCosts, one_gb_per_s(), zero(3, d)).dp_wire_bytes_per_step,
                     1.5 * ddp)
        << d;
    // kStep's one window a step: what DDP moves (m = 1).
    const auto window = plan_of("0UNSHARD,0F0,0B0,0RESHARD,0REDUCE_GRAD,0OPTIM\n");
    EXPECT_DOUBLE_EQ(simulate(window, kCosts, one_gb_per_s(), zero(3, d)).dp_wire_bytes_per_step,
                     ddp);
  }
}

// ZeRO-1: REDUCE_GRAD reduce-scatters (500 ns at d = 2); the all-gather after OPTIM overlaps
// nothing in one step and delays the next step's first forward.
TEST(Zero, Zero1ReduceScatterThenAllGatherBeforeTheNextForward) {
  const auto plan = plan_of("0F0,0B0,0REDUCE_GRAD,0OPTIM\n");
  const auto one = simulate(plan, kCosts, one_gb_per_s(), zero(1));
  // F [0, 1 ms], B [1, 3 ms], reduce-scatter [3 ms, +500], all-gather [+500, +1000].
  EXPECT_EQ(one.makespan_ns, 3 * kMs + 1000);
  EXPECT_EQ(one.per_rank[0].dp_comm_ns, 1000);
  const auto two = simulate(plan, kCosts, one_gb_per_s(), zero(1, 2, 2));
  // Step 2's F waits for the all-gather: [3 ms + 1000, 4 ms + 1000], B to 6 ms + 1000, then
  // 500 + 500 again.
  EXPECT_EQ(two.makespan_ns, 6 * kMs + 2000);
  int gathers = 0, scatters = 0;
  for (const auto& a : two.actions) {
    gathers += a.collective == Collective::kAllGather ? 1 : 0;
    scatters += a.collective == Collective::kDdpBucket ? 1 : 0;
  }
  EXPECT_EQ(gathers, 2);
  EXPECT_EQ(scatters, 2);
}

// ZeRO-2: one reduce-scatter per backward (m of them, visible), and the rank's next action waits
// for it (Note [Gradient waits]), as the executor adds it into the shard accumulator at once.
TEST(Zero, Zero2ReduceScattersEveryBackward) {
  const auto plan = plan_of("0F0,0F1,0B0,0B1,0REDUCE_GRAD,0OPTIM\n");
  const auto r = simulate(plan, kCosts, one_gb_per_s(), zero(2));
  // B0 [2, 4 ms] -> RS [4 ms, +500], B1 waits for it: [4 ms + 500, 6 ms + 500] -> RS [+500];
  // all-gather [6 ms + 1000, +1500].
  EXPECT_EQ(r.makespan_ns, 6 * kMs + 1500);
  EXPECT_EQ(r.per_rank[0].dp_comm_ns, 1500);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 1000);  // the two waits (the all-gather ends the step)
  int scatters = 0;
  for (const auto& a : r.actions) scatters += a.collective == Collective::kReduceScatter ? 1 : 0;
  EXPECT_EQ(scatters, 2);
  EXPECT_DOUBLE_EQ(r.dp_wire_bytes_per_step, 2 * 500 + 500);
}

// Note [Collectives on shared cores]: on a CPU host with more computing ranks than cores, ZeRO's
// collectives within the node are activities of the rank's data-parallel stream on the cores.
// One pipeline rank whose two replicas share one core (a replica counts as a copy: two
// activities): F0 [0, 2] and F1 [2, 4] ms, B0 [4, 8]; its reduce-scatter (0.5 ms alone: 1e6
// bytes, d = 2, 1 GB/s) shares the core with the replica's, [8, 9]; B1 [9, 13], reduce-scatter
// [13, 14]; the all-gather after OPTIM [14, 15]. With two cores everything takes its time alone.
TEST(Zero, Zero2ReduceScattersShareTheHostsCores) {
  const auto plan = plan_of("0F0,0F1,0B0,0B1,0REDUCE_GRAD,0OPTIM\n");
  const auto costs = testing::uniform_costs(1, 1, 2, 0, 1'000'000);
  auto opt = zero(2);
  opt.record_actions = true;
  Cluster cores = one_gb_per_s();
  cores.cores_per_node = 1;
  const auto shared = simulate(plan, costs, cores, opt);
  EXPECT_EQ(shared.makespan_ns, 15 * kMs);
  std::vector<std::pair<std::int64_t, std::int64_t>> scatters;
  for (const auto& a : shared.actions) {
    if (a.collective == Collective::kReduceScatter) scatters.emplace_back(a.start_ns, a.end_ns);
  }
  const std::vector<std::pair<std::int64_t, std::int64_t>> want{{8 * kMs, 9 * kMs},
                                                                {13 * kMs, 14 * kMs}};
  EXPECT_EQ(scatters, want);
  EXPECT_EQ(shared.per_rank[0].dp_comm_ns, 3 * kMs / 2);  // the work alone: 0.5 ms each
  EXPECT_EQ(shared.per_rank[0].dp_exposed_ns, 2 * kMs);   // the rank waited for both
  cores.cores_per_node = 2;
  const auto alone = simulate(plan, costs, cores, opt);
  EXPECT_EQ(alone.makespan_ns, simulate(plan, costs, one_gb_per_s(), opt).makespan_ns);
  EXPECT_EQ(alone.makespan_ns, 7 * kMs + kMs / 2);
}

// ZeRO-3: each UNSHARD's all-gather delays the compute after it.
TEST(Zero, Zero3AllGathersAtUnshard) {
  const auto plan = plan_of("0UNSHARD,0F0,0RESHARD,0UNSHARD,0B0,0RESHARD,0REDUCE_GRAD,0OPTIM\n");
  const auto r = simulate(plan, kCosts, one_gb_per_s(), zero(3));
  // AG [0, 500], F [500, 1 ms + 500], AG [.., 1 ms + 1000], B [.., 3 ms + 1000], RS [.., +500].
  EXPECT_EQ(r.makespan_ns, 3 * kMs + 1500);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 1500);  // both all-gathers and the reduce-scatter
  // Below stage 3 the same plan's UNSHARD / RESHARD are no-ops: DDP's time.
  const auto ddp = simulate(plan, kCosts, one_gb_per_s(), zero(0));
  EXPECT_EQ(ddp.makespan_ns, 3 * kMs + 1000);  // the all-reduce: 2 * 500
}

// Latency: (d - 1) latencies per ring pass.
TEST(Zero, RingLatencyAndBandwidthClosedForm) {
  Cluster c = one_gb_per_s();
  c.intra_node.latency_ms = 0.001;  // 1000 ns
  const auto plan = plan_of("0UNSHARD,0F0,0B0,0RESHARD,0REDUCE_GRAD,0OPTIM\n");
  for (int d : {2, 4, 5}) {
    const std::int64_t pass = (d - 1) * 1000 + (d - 1) * 1000 / d;  // 1000 B, 1 B/ns
    const auto r = simulate(plan, kCosts, c, zero(3, d));
    EXPECT_EQ(r.makespan_ns, 3 * kMs + 2 * pass) << d;  // all-gather, then reduce-scatter
  }
}

}  // namespace
}  // namespace pipewright::sim
