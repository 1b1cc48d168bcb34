// Issue 22 in the simulator: the V-shaped schedules (ZB-V's unit-time grid), OVERLAP_F_B units,
// Chimera's replicas (costs per model stage, the replica all-reduce), forward-only plans and
// activation recompute (step time and peak memory against closed forms).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {
namespace {

using sched::ScheduleKind;
constexpr std::int64_t kMs = 1000000;

sched::LoweredPlan make(ScheduleKind kind, int p, int m, bool forward_only = false) {
  sched::ScheduleSpec spec;
  spec.kind = kind;
  spec.ranks = p;
  spec.microbatches = m;
  const int v = sched::required_stages_per_rank(kind);
  spec.stages_per_rank = v == 0 ? 1 : v;
  spec.forward_only = forward_only;
  return sched::lower(sched::generate(spec), {false, true, true, {}});
}

// Uniform stages: F, I and W (B = I + W) in ms, activation / output / parameter bytes.
sched::CostTable costs(int stages, double f, double i, double w, std::int64_t act = 0,
                       std::int64_t out = 0, std::int64_t params = 0) {
  sched::CostTable t;
  for (int s = 0; s < stages; ++s) {
    sched::StageCost c;
    c.stage = s;
    c.forward_ms = f;
    c.backward_ms = i + w;
    c.input_grad_ms = i;
    c.weight_grad_ms = w;
    c.activation_bytes = act;
    c.output_bytes = out;
    c.param_bytes = params;
    t.stages.push_back(c);
  }
  return t;
}

SimOptions free_comm() {
  SimOptions o;
  o.p2p_override_ms = 0.0;
  return o;
}

// ZB-V (Qi et al., ICLR'24, section 6; torch's ScheduleZBVZeroBubble): with F = I = W = 1 unit
// every rank does 6m units of work (two stages, three ops each) and, for m >= 2p - 1, fill and
// drain add p - 1 units: makespan 6m + p - 1 units.
TEST(ZBV, UnitTimeGrid) {
  for (int p : {2, 3, 4}) {
    for (int m = 2 * p - 1; m <= 2 * p + 5; ++m) {
      const auto plan = make(ScheduleKind::kZBVZeroBubble, p, m);
      const auto r = simulate(plan, costs(2 * p, 1, 1, 1), Cluster{}, free_comm());
      EXPECT_EQ(r.makespan_ns, (6 * m + p - 1) * kMs) << "p=" << p << " m=" << m;
      for (const auto& rr : r.per_rank) EXPECT_EQ(rr.busy_ns, 6 * m * kMs);
    }
  }
}

TEST(DualPipeV, SimulatesUnitsBackToBack) {
  // OVERLAP_F_B sub-actions run back to back (torch's runtime without an overlap function): the
  // busy time of every rank is its plain sum of F and B.
  const int p = 2, m = 4;
  const auto plan = make(ScheduleKind::kDualPipeV, p, m);
  const auto r = simulate(plan, costs(2 * p, 1, 1, 1), Cluster{}, free_comm());
  for (const auto& rr : r.per_rank) EXPECT_EQ(rr.busy_ns, 2 * m * 3 * kMs) << rr.rank;
  EXPECT_GE(r.makespan_ns, 2 * m * 3 * kMs);
}

TEST(Chimera, CostsPerModelStageAndReplicaAllReduce) {
  const int p = 4, m = 8;
  const auto plan = make(ScheduleKind::kChimera, p, m);
  // Costs per model stage (4) are expanded to the 8 plan stages.
  const auto per_model = costs(p, 1, 1, 1, 0, 0, 4 * 1000 * 1000);
  SimOptions o = free_comm();
  const auto r = simulate(plan, per_model, Cluster{}, o);
  EXPECT_EQ(r.stages, 2 * p);
  // Every rank runs m/2 microbatches of each of its two stages: 3 units each.
  for (const auto& rr : r.per_rank) EXPECT_EQ(rr.busy_ns, m * 3 * kMs) << rr.rank;
  // The replica all-reduce costs time at REDUCE_GRAD once messages cost time.
  SimOptions slow = o;
  slow.p2p_override_ms = 0.5;
  const auto r2 = simulate(plan, per_model, Cluster{}, slow);
  EXPECT_GT(r2.makespan_ns, r.makespan_ns);
}

TEST(ForwardOnly, LatencyNoGradientsNoOptimizerState) {
  const int p = 4, m = 8;
  const auto plan = make(ScheduleKind::k1F1B, p, m, /*forward_only=*/true);
  auto c = costs(p, 1, 1, 1, 1000, 10, 5000);
  SimOptions o = free_comm();
  o.optimizer = Optimizer::kAdam;
  const auto r = simulate(plan, c, Cluster{}, o);
  EXPECT_EQ(r.makespan_ns, (m + p - 1) * kMs);  // a pipeline of forwards
  for (const auto& rr : r.per_rank) {
    EXPECT_EQ(rr.static_memory_bytes, 5000);    // parameters only
    EXPECT_EQ(rr.peak_activation_bytes, 1000);  // one forward's activations at a time
  }
}

// Recompute of every stage of 1F1B with uniform stages: each B re-runs its forward, so the step
// is (m + p - 1) (2F + B) instead of (m + p - 1) (F + B), and each stage keeps only its input
// (the producer's output bytes) per in-flight microbatch plus one microbatch's activations.
TEST(Recompute, StepTimeAndPeakMemory) {
  const int p = 4, m = 8;
  const auto plan = make(ScheduleKind::k1F1B, p, m);
  const std::int64_t act = 1000000, out = 1000;
  const auto c = costs(p, 1, 1, 1, act, out);
  SimOptions o = free_comm();
  const auto base = simulate(plan, c, Cluster{}, o);
  EXPECT_EQ(base.makespan_ns, (m + p - 1) * 3 * kMs);
  o.recompute = sched::parse_recompute("full");
  const auto re = simulate(plan, c, Cluster{}, o);
  EXPECT_EQ(re.makespan_ns, (m + p - 1) * 4 * kMs);
  for (int r = 0; r < p; ++r) {
    const auto& b = base.per_rank[static_cast<std::size_t>(r)];
    const auto& x = re.per_rank[static_cast<std::size_t>(r)];
    const std::int64_t inflight = p - r;  // 1F1B: p - r microbatches between F and B
    EXPECT_EQ(b.peak_activation_bytes, inflight * act) << r;
    const std::int64_t kept = r == 0 ? 0 : out;  // stage 0's input is the data batch
    EXPECT_EQ(x.peak_activation_bytes, inflight * kept + act) << r;
    if (inflight > 1) {
      EXPECT_LT(x.peak_activation_bytes, b.peak_activation_bytes) << r;
    }
  }
  // A stage list recomputes only those stages: here the first, the critical path's B's of stage 0
  // are 1 ms longer each.
  o.recompute = sched::parse_recompute("0");
  const auto one = simulate(plan, c, Cluster{}, o);
  EXPECT_GT(one.makespan_ns, base.makespan_ns);
  EXPECT_LT(one.makespan_ns, re.makespan_ns);
  EXPECT_EQ(one.per_rank[0].busy_ns, base.per_rank[0].busy_ns + m * kMs);
  EXPECT_EQ(one.per_rank[1].busy_ns, base.per_rank[1].busy_ns);
}

// One memory model (issue 34): the simulator reports sched::peak_memory's numbers, and its
// memory timeline, which places the same changes on the clock, reaches exactly that peak.
TEST(Memory, ReportsSchedPeakMemoryAndTheTimelineReachesIt) {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
                    ScheduleKind::kInterleavedZeroBubble, ScheduleKind::kZBVZeroBubble,
                    ScheduleKind::kDualPipeV, ScheduleKind::kChimera}) {
    for (const char* recompute : {"none", "full", "forward-only"}) {
      const bool forward_only = std::string(recompute) == "forward-only";
      const int p = 4;
      sched::ScheduleSpec spec;
      spec.kind = kind;
      spec.ranks = p;
      spec.microbatches = 8;
      const int v = sched::required_stages_per_rank(kind);
      spec.stages_per_rank = v == 0 ? (kind == ScheduleKind::kInterleaved1F1B ||
                                               kind == ScheduleKind::kInterleavedZeroBubble
                                           ? 2
                                           : 1)
                                    : v;
      spec.forward_only = forward_only;
      if (forward_only && kind != ScheduleKind::kGPipe && kind != ScheduleKind::k1F1B) continue;
      const auto plan = sched::lower(sched::generate(spec), {false, true, true, {}});
      auto c = costs(plan.shape.stages, 1, 1, 1, /*act=*/1000, /*out=*/30, /*params=*/500);
      c.runtime_memory_bytes = 77;
      SimOptions o = free_comm();
      o.steps = 2;
      o.optimizer = sched::Optimizer::kAdam;
      o.record_memory_timeline = true;
      if (!forward_only) o.recompute = sched::parse_recompute(recompute);
      const SimResult r = simulate(plan, c, Cluster{}, o);
      const auto want =
          sched::peak_memory(plan, c, sched::MemoryOptions{o.optimizer, o.momentum, o.recompute});
      const std::string what = std::string(sched::to_string(kind)) + " " + recompute;
      ASSERT_EQ(r.per_rank.size(), want.size()) << what;
      for (std::size_t k = 0; k < want.size(); ++k) {
        const auto& rr = r.per_rank[k];
        EXPECT_EQ(rr.static_memory_bytes, want[k].static_bytes) << what;
        EXPECT_EQ(rr.peak_activation_bytes, want[k].peak_activation_bytes) << what;
        EXPECT_EQ(rr.peak_activation_microbatches, want[k].peak_activation_microbatches) << what;
        EXPECT_EQ(rr.peak_memory_bytes, want[k].peak_bytes) << what;
        EXPECT_GT(want[k].peak_activation_bytes, 0) << what;
        std::int64_t top = 0;
        for (const auto& pt : rr.memory_timeline) top = std::max(top, pt.bytes);
        EXPECT_EQ(top, want[k].static_bytes + want[k].peak_activation_bytes)
            << what << " rank " << k;
        EXPECT_EQ(rr.memory_timeline.back().bytes, want[k].static_bytes) << what;  // all freed
      }
    }
  }
}

}  // namespace
}  // namespace pipewright::sim
