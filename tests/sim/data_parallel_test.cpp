// DDP buckets overlapping the last backward, LocalSGD / SlowMo periodic collectives: exact
// nanosecond times derived by hand on one-stage pipelines (so only data parallelism matters).
#include <gtest/gtest.h>

#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// 1 byte per ns, no latency, 2 ranks on one node.
Cluster one_gb_per_s() {
  Cluster c;
  c.intra_node = Link{0.0, 1.0};
  c.inter_node = c.intra_node;
  return c;
}

sched::CostTable one_stage(std::vector<std::int64_t> param_sizes) {
  auto t = testing::uniform_costs(1, 1, 2);
  std::int64_t total = 0;
  for (auto b : param_sizes) total += b;
  t.stages[0].param_bytes = total;
  t.stages[0].param_sizes_bytes = std::move(param_sizes);
  return t;
}

TEST(DataParallel, RingAllReduceAfterTheLastBackward) {
  SimOptions opt;
  opt.dp.replicas = 2;
  // GPipe p=1 m=2: F0 [0,1] F1 [1,2] B0 [2,4] B1 [4,6]; one bucket of 1000 B ready at 6 ms;
  // ring all-reduce n=2: 2(n-1)/n * 1000 B / (1 B/ns) = 1000 ns.
  const auto r = simulate(testing::gpipe(1, 2), one_stage({1000}), one_gb_per_s(), opt);
  EXPECT_EQ(r.makespan_ns, 6 * kMs + 1000);
  EXPECT_EQ(r.per_rank[0].dp_comm_ns, 1000);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 1000);
}

TEST(DataParallel, BucketsLaunchDuringTheLastBackwardInReverseOrder) {
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.dp.first_bucket_bytes = 1000;
  opt.dp.bucket_cap_mb = 0.001;  // 1048 bytes
  // Reverse registration order: param 1 (1000 B) fills bucket 0, param 0 (3000 B) bucket 1.
  // B1 runs [4, 6] ms; bucket 0 is ready after 1000 of 4000 bytes: 4.5 ms, reduced by 4.501 ms
  // (overlapping B1); bucket 1 ready at 6 ms, 3000 ns -> 6.003 ms; exposed 3000 ns.
  const auto r = simulate(testing::gpipe(1, 2), one_stage({3000, 1000}), one_gb_per_s(), opt);
  EXPECT_EQ(r.makespan_ns, 6 * kMs + 3000);
  EXPECT_EQ(r.per_rank[0].dp_comm_ns, 4000);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 3000);
  std::vector<std::pair<std::int64_t, std::int64_t>> buckets;
  for (const auto& a : r.actions) {
    if (a.collective == Collective::kDdpBucket) buckets.emplace_back(a.start_ns, a.end_ns);
  }
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], std::make_pair(4 * kMs + kMs / 2, 4 * kMs + kMs / 2 + 1000));
  EXPECT_EQ(buckets[1], std::make_pair(6 * kMs, 6 * kMs + 3000));
}

TEST(DataParallel, NoOverlapStartsEveryBucketAtReduceGrad) {
  // --no-ddp-overlap: the executor launches every bucket at REDUCE_GRAD (exec/src/dp/ddp.cpp),
  // so the bucket that overlapped B1 above ([4.5, 4.501] ms) now starts at 6 ms too: the two
  // run back to back, 1000 + 3000 ns, all exposed.
  auto plan = testing::gpipe(1, 2);
  plan.per_rank[0].push_back(sched::Action::stage_only(0, sched::ActionKind::kReduceGrad));
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.dp.first_bucket_bytes = 1000;
  opt.dp.bucket_cap_mb = 0.001;
  const auto overlapped = simulate(plan, one_stage({3000, 1000}), one_gb_per_s(), opt);
  EXPECT_EQ(overlapped.makespan_ns, 6 * kMs + 3000);
  opt.dp.overlap = false;
  const auto r = simulate(plan, one_stage({3000, 1000}), one_gb_per_s(), opt);
  EXPECT_EQ(r.makespan_ns, 6 * kMs + 4000);
  EXPECT_EQ(r.per_rank[0].dp_comm_ns, 4000);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 4000);
  std::vector<std::int64_t> starts;
  for (const auto& a : r.actions) {
    if (a.collective == Collective::kDdpBucket) starts.push_back(a.start_ns);
  }
  EXPECT_EQ(starts, (std::vector<std::int64_t>{6 * kMs, 6 * kMs + 1000}));
  // sim_options reads the job's flag.
  sched::JobSpec job;
  job.data_parallel.ddp_overlap = false;
  EXPECT_FALSE(sim_options(job).dp.overlap);
}

TEST(DataParallel, ExplicitReduceGradBlocksThere) {
  auto plan = testing::gpipe(1, 2);
  plan.per_rank[0].push_back(sched::Action::stage_only(0, sched::ActionKind::kReduceGrad));
  plan.per_rank[0].push_back(sched::Action::stage_only(0, sched::ActionKind::kOptimizerStep));
  SimOptions opt;
  opt.dp.replicas = 4;
  // Ring n=4: 2*3/4 * 1000 = 1500 ns, plus 2*3 * 1 us latency = 6000 ns.
  Cluster c = one_gb_per_s();
  c.intra_node.latency_ms = 0.001;
  const auto r = simulate(plan, one_stage({1000}), c, opt);
  EXPECT_EQ(r.makespan_ns, 6 * kMs + 7500);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 7500);
}

TEST(DataParallel, LocalSgdAndSlowMoAmortised) {
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.dp.algorithm = DpAlgorithm::kLocalSgd;
  opt.dp.localsgd_frequency = 2;
  opt.steps = 4;
  // Each step is F + B = 3 ms; parameter averaging (all-reduce of 1000 B = 1000 ns) after steps
  // 2 and 4.
  const auto local = simulate(testing::gpipe(1, 1), one_stage({1000}), one_gb_per_s(), opt);
  EXPECT_EQ(local.makespan_ns, 12 * kMs + 2000);
  EXPECT_EQ(local.step_end_ns,
            (std::vector<std::int64_t>{3 * kMs, 6 * kMs + 1000, 9 * kMs + 1000, 12 * kMs + 2000}));
  // SlowMo's slow step every 4 steps, reduce-scatter + all-gather (2 x 500 ns), replaces that
  // step's averaging (memory-efficient SlowMo, the executor's default): the same time here.
  opt.dp.algorithm = DpAlgorithm::kSlowMo;
  opt.dp.slowmo_frequency = 4;
  const auto slow = simulate(testing::gpipe(1, 1), one_stage({1000}), one_gb_per_s(), opt);
  EXPECT_EQ(slow.makespan_ns, 12 * kMs + 2000);
  EXPECT_EQ(slow.per_rank[0].dp_comm_ns, 2000);
}

// Note [SlowMo in the simulator]: with one shard per replica the slow step is a reduce-scatter
// and an all-gather of the parameters on the registered sharded links; with fewer shards a
// reduce and a broadcast per shard on the point-to-point link (within a node).
TEST(DataParallel, SlowMoSlowStepIsAReduceScatterAndAnAllGather) {
  Cluster c = one_gb_per_s();
  c.sharded_links.reduce_scatter.intra_node = Link{0.001, 0.5};  // 1 us, 0.5 B/ns
  c.sharded_links.all_gather.intra_node = Link{0.0, 2.0};
  c.sharded_links.reduce_scatter_unregistered.intra_node = Link{0.0, 0.01};  // not SlowMo's
  c.sharded_links.all_gather_unregistered.intra_node = Link{0.0, 0.01};
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.dp.algorithm = DpAlgorithm::kSlowMo;
  opt.dp.localsgd_frequency = 2;
  opt.dp.slowmo_frequency = 4;
  opt.steps = 4;
  // Steps of F + B = 3 ms. After step 2 the average: a ring all-reduce of 1000 B on the
  // point-to-point link (Note [Unregistered collectives]), 1000 ns. After step 4 the slow step:
  // reduce-scatter 1 us + (1/2) 1000 B / 0.5 B/ns = 2000 ns, all-gather 500 B / 2 B/ns = 250 ns.
  const auto two = simulate(testing::gpipe(1, 1), one_stage({1000}), c, opt);
  EXPECT_EQ(two.step_end_ns,
            (std::vector<std::int64_t>{3 * kMs, 6 * kMs + 1000, 9 * kMs + 1000, 12 * kMs + 3250}));
  EXPECT_EQ(two.per_rank[0].dp_comm_ns, 3250);
  // One shard (num_shards 1 < dp): a reduce and a broadcast of 1000 B on the point-to-point
  // link, (1/2) 1000 ns each.
  opt.dp.slowmo_num_shards = 1;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), one_stage({1000}), c, opt).makespan_ns, 12 * kMs + 2000);
  // dp 4, the default shards (4): average 2 (3/4) 1000 B = 1500 ns; reduce-scatter 3 us +
  // (3/4) 1000 B / 0.5 B/ns = 4500 ns, all-gather 750 B / 2 B/ns = 375 ns.
  opt.dp.replicas = 4;
  opt.dp.slowmo_num_shards = 0;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), one_stage({1000}), c, opt).makespan_ns,
            12 * kMs + 1500 + 4875);
  // sim_options reads the job's shards (default min(dp, 32)).
  sched::JobSpec job;
  job.dp = 4;
  job.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  EXPECT_EQ(sim_options(job).dp.slowmo_num_shards, 4);
  job.data_parallel.slowmo_num_shards = 2;
  EXPECT_EQ(sim_options(job).dp.slowmo_num_shards, 2);
}

TEST(DataParallel, ReplicasAcrossNodesUseTheInterNodeLink) {
  Cluster c;
  c.nodes = 2;
  c.ranks_per_node = 2;
  c.intra_node = Link{0.0, 1.0};
  c.inter_node = Link{0.0, 0.5};
  SimOptions opt;
  opt.dp.replicas = 2;
  // pp=2, dp=2, pipeline-major: (r, j) -> g = 2r + j: each stage's replicas share a node (the
  // 1000 B all-reduce takes 1000 ns), pipeline neighbours are on different nodes.
  auto costs = testing::uniform_costs(2, 1, 2, 0, 1000, 500);
  costs.stages[0].param_sizes_bytes = {1000};
  costs.stages[1].param_sizes_bytes = {1000};
  const auto pm = simulate(testing::gpipe(2, 1), costs, c, opt);
  // F0 [0,1], send 500 B at 0.5 B/ns = 1000 ns, F1 [1.001, 2.001], B1 [2.001, 4.001], gradient
  // 1000 ns, B0 [4.002, 6.002], all-reduce 1000 ns.
  EXPECT_EQ(pm.makespan_ns, 6 * kMs + 3000);
  c.placement = Placement::kReplicaMajor;
  // g = 2j + r: pipeline neighbours share a node (500 ns), replicas are on different nodes.
  const auto rm = simulate(testing::gpipe(2, 1), costs, c, opt);
  EXPECT_EQ(rm.makespan_ns, 6 * kMs + 500 + 500 + 2000);
}

TEST(DataParallel, DiLoCoSendsOneHthOfDdpsBytes) {
  SimOptions opt;
  opt.dp.replicas = 4;
  opt.steps = 8;
  const auto costs = one_stage({1000, 3000});
  const auto ddp = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  // Ring all-reduce n = 4 of 4000 B: 2 * 3/4 * 4000 = 6000 B per replica per step.
  EXPECT_DOUBLE_EQ(ddp.dp_wire_bytes_per_step, 6000.0);
  opt.dp.algorithm = DpAlgorithm::kDiLoCo;
  for (const int h : {1, 4, 8}) {
    opt.dp.sync_every = h;
    const auto d = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
    EXPECT_DOUBLE_EQ(d.dp_wire_bytes_per_step, 6000.0 / h) << "H = " << h;
  }
  opt.dp.sync_every = 4;
  opt.dp.fragments = 2;
  opt.dp.outer_bf16 = true;
  const auto bf16 = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_DOUBLE_EQ(bf16.dp_wire_bytes_per_step, 6000.0 / 4 / 2);
}

// DiLoCo over 2 replicas, 4 steps, an outer step every `sync_every`.
SimOptions diloco(std::int32_t sync_every) {
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.steps = 4;
  opt.dp.algorithm = DpAlgorithm::kDiLoCo;
  opt.dp.sync_every = sync_every;
  return opt;
}

TEST(DataParallel, DiLoCoOuterAllReduceOverlapsTheDelayedSteps) {
  SimOptions opt = diloco(2);
  // Steps of F + B = 3 ms; 2 MB fragment all-reduce on a 1 B/ns link: 2 ms.
  const auto costs = one_stage({2'000'000});
  // tau = 0: the all-reduce starts and is waited for after steps 2 and 4 (fully exposed).
  const auto blocking = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(blocking.makespan_ns, 12 * kMs + 4 * kMs);
  EXPECT_EQ(blocking.per_rank[0].dp_exposed_ns, 4 * kMs);
  // Two fragments of 1 MB, one every step, tau = 0: 1 ms exposed per step.
  opt.dp.fragments = 2;
  const auto streaming = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(streaming.per_rank[0].dp_exposed_ns, 4 * kMs);
  // sync_every 4, two fragments (P = 2), tau = 1: each 1 ms all-reduce starts after steps 1
  // and 3 and overlaps the next step's 3 ms of compute: nothing exposed.
  opt.dp.sync_every = 4;
  opt.dp.sync_delay = 1;
  const auto overlapped = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(overlapped.per_rank[0].dp_exposed_ns, 0);
  EXPECT_EQ(overlapped.per_rank[0].dp_comm_ns, 2 * kMs);
  EXPECT_EQ(overlapped.makespan_ns, 12 * kMs);
}

// Note [Compute beside a collective] (engine.hpp), hand-derived from the case above with the
// replicas on two nodes and send_cpu_load 1: the 1 ms all-reduce after step 1 runs beside step
// 2's F, which does 0.5 ms of its 1 ms of work in [3, 4] and the rest by 4.5; B [4.5, 6.5]; the
// one after step 3 (from 9.5) the same: the four steps end at 13 ms, not 12. A profile measured
// across nodes (nodes 2), or not known (0), holds the load already: 12 ms. With shared cores the
// load is demand on the node's one core (below).
TEST(DataParallel, ComputeBesideACollectiveAcrossNodesRunsSlower) {
  SimOptions opt = diloco(4);
  opt.dp.fragments = 2;
  opt.dp.sync_delay = 1;
  auto costs = one_stage({2'000'000});
  costs.nodes = 1;
  Cluster c = one_gb_per_s();
  c.nodes = 2;
  c.ranks_per_node = 1;
  c.send_cpu_load = 1.0;
  const auto loaded = simulate(testing::gpipe(1, 1), costs, c, opt);
  EXPECT_EQ(loaded.step_end_ns,
            (std::vector<std::int64_t>{3 * kMs, 6 * kMs + kMs / 2, 9 * kMs + kMs / 2, 13 * kMs}));
  EXPECT_EQ(loaded.per_rank[0].dp_exposed_ns, 0);
  for (const std::int32_t nodes : {0, 2}) {
    costs.nodes = nodes;
    EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, c, opt).makespan_ns, 12 * kMs);
  }
  costs.nodes = 1;
  Cluster one = c;  // both replicas on one node: no inter-node link, no load
  one.nodes = 1;
  one.ranks_per_node = 2;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, one, opt).makespan_ns, 12 * kMs);
  // Shared cores: pp 2 x dp 2, each replica's pipeline on its own 1-core node (replica-major),
  // so the all-reduces cross nodes; their load takes from the node's one core.
  Cluster shared = c;
  shared.ranks_per_node = 2;
  shared.cores_per_node = 1;
  shared.placement = Placement::kReplicaMajor;
  auto two = testing::uniform_costs(2, 1, 2);
  two.stages[0].param_bytes = two.stages[1].param_bytes = 2'000'000;
  two.stages[0].param_sizes_bytes = two.stages[1].param_sizes_bytes = {2'000'000};
  two.nodes = 1;
  const auto slow = simulate(testing::gpipe(2, 2), two, shared, opt);
  two.nodes = 2;
  const auto plain = simulate(testing::gpipe(2, 2), two, shared, opt);
  EXPECT_GT(slow.makespan_ns, plain.makespan_ns);
  EXPECT_LE(slow.makespan_ns, plain.makespan_ns + 4 * kMs);  // at most the collectives' time
}

// Note [Compute beside a collective] on shared cores, every place a collective is timed: pp 2 x
// dp 2, each replica's pipeline on its own 1-core node (replica-major), 4 steps of GPipe m = 4.
// A one-node profile runs slower than the same profile measured across nodes, for DDP's buckets
// and ZeRO-1's collectives on the node's link (event by event) and timed ahead (no link
// sharing), and for the syncs of LocalSGD, SlowMo, SGP and DiLoCo.
TEST(DataParallel, EveryCollectiveAcrossNodesLoadsSharedCores) {
  Cluster c = one_gb_per_s();
  c.nodes = 2;
  c.ranks_per_node = 2;
  c.cores_per_node = 1;
  c.placement = Placement::kReplicaMajor;
  c.send_cpu_load = 1.0;
  auto costs = testing::uniform_costs(2, 1, 2);
  for (auto& s : costs.stages) {
    s.param_bytes = 2'000'000;
    s.param_sizes_bytes = {1'000'000, 1'000'000};
  }
  struct Case {
    const char* name;
    DpAlgorithm algorithm;
    std::int32_t zero_stage;
    std::int32_t links_per_node;
  };
  for (const Case& k :
       {Case{"DDP, links", DpAlgorithm::kDdp, 0, 1}, Case{"DDP, ahead", DpAlgorithm::kDdp, 0, 0},
        Case{"ZeRO-1, links", DpAlgorithm::kDdp, 1, 1},
        Case{"ZeRO-1, ahead", DpAlgorithm::kDdp, 1, 0},
        Case{"LocalSGD", DpAlgorithm::kLocalSgd, 0, 1}, Case{"SlowMo", DpAlgorithm::kSlowMo, 0, 1},
        Case{"SGP", DpAlgorithm::kSgp, 0, 1}, Case{"DiLoCo", DpAlgorithm::kDiLoCo, 0, 1}}) {
    SimOptions opt;
    opt.dp.replicas = 2;
    opt.steps = 4;
    opt.dp.algorithm = k.algorithm;
    opt.dp.zero_stage = k.zero_stage;
    opt.dp.localsgd_frequency = 2;
    opt.dp.slowmo_frequency = 4;
    opt.dp.sync_every = 2;
    c.links_per_node = k.links_per_node;
    costs.nodes = 1;
    const auto loaded = simulate(testing::gpipe(2, 4), costs, c, opt).makespan_ns;
    costs.nodes = 2;
    const auto plain = simulate(testing::gpipe(2, 4), costs, c, opt).makespan_ns;
    EXPECT_GT(loaded, plain) << k.name;
  }
}

// Issue 47 item 3 (Note [Sync work in the simulator]): a profile's dp_sync_compute_ms is charged
// on the compute stream before each sync that communicates, per algorithm; DDP has none.
TEST(DataParallel, SyncWorkIsChargedWhereEachAlgorithmCommunicates) {
  auto costs = one_stage({1000});
  costs.dp_sync_compute_ms = 0.5;
  SimOptions opt;
  opt.dp.replicas = 2;
  // DDP: no sync after OPTIM; as RingAllReduceAfterTheLastBackward.
  EXPECT_EQ(simulate(testing::gpipe(1, 2), costs, one_gb_per_s(), opt).makespan_ns, 6 * kMs + 1000);
  opt.steps = 4;
  // Steps of F + B = 3 ms. SGP: every step 0.5 ms of work, then 1004 B (parameters and the
  // push-sum weight) to one peer: 1004 ns.
  opt.dp.algorithm = DpAlgorithm::kSgp;
  const auto sgp = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(sgp.step_end_ns,
            (std::vector<std::int64_t>{3 * kMs + kMs / 2 + 1004, 7 * kMs + 2008,
                                       10 * kMs + kMs / 2 + 3012, 14 * kMs + 4016}));
  EXPECT_EQ(sgp.per_rank[0].dp_exposed_ns, 4 * 1004);
  // LocalSGD every 2 steps: work and a 1000 ns all-reduce after steps 2 and 4.
  opt.dp.algorithm = DpAlgorithm::kLocalSgd;
  opt.dp.localsgd_frequency = 2;
  const auto local = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(local.step_end_ns,
            (std::vector<std::int64_t>{3 * kMs, 6 * kMs + kMs / 2 + 1000, 9 * kMs + kMs / 2 + 1000,
                                       13 * kMs + 2000}));
  // SlowMo (slow step every 4): averaging after step 2, the slow step (500 ns reduce-scatter +
  // 500 ns all-gather) instead of
  // the averaging after step 4; work before each.
  opt.dp.algorithm = DpAlgorithm::kSlowMo;
  opt.dp.slowmo_frequency = 4;
  const auto slow = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(slow.makespan_ns, 13 * kMs + 2000);
  // DiLoCo H = 2, tau = 0: work, then the outer all-reduce (1000 ns, exposed) after steps 2, 4.
  opt.dp.algorithm = DpAlgorithm::kDiLoCo;
  opt.dp.sync_every = 2;
  const auto diloco = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(diloco.makespan_ns, 13 * kMs + 2000);
  EXPECT_EQ(diloco.per_rank[0].dp_exposed_ns, 2000);
  // Without the measured work (model costs, old profiles): communication only.
  costs.dp_sync_compute_ms = 0;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt).makespan_ns,
            12 * kMs + 2000);
}

// Note [Collectives on shared cores]: with a stage's two replicas on one core, SGP's sync (its
// 0.5 ms of work and 1004 ns of gossip, alone) and DiLoCo's share the core with the replica's as
// F and B do: every time doubles. With a core each, the dedicated result.
TEST(DataParallel, SyncsShareTheHostsCores) {
  auto costs = one_stage({1000});
  costs.dp_sync_compute_ms = 0.5;
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.steps = 4;
  opt.dp.algorithm = DpAlgorithm::kSgp;
  opt.record_actions = true;
  Cluster cores = one_gb_per_s();
  cores.cores_per_node = 1;
  const auto shared = simulate(testing::gpipe(1, 1), costs, cores, opt);
  EXPECT_EQ(shared.step_end_ns, (std::vector<std::int64_t>{7 * kMs + 2008, 14 * kMs + 4016,
                                                           21 * kMs + 6024, 28 * kMs + 8032}));
  // Exposed: the gossip's share of each doubled sync (its work counts as compute).
  EXPECT_EQ(shared.per_rank[0].dp_exposed_ns, 4 * 2008);
  EXPECT_EQ(shared.per_rank[0].dp_comm_ns, 4 * 1004);
  int syncs = 0;
  for (const auto& a : shared.actions) syncs += a.collective == Collective::kSgp ? 1 : 0;
  EXPECT_EQ(syncs, 4);
  // DiLoCo H = 2, tau = 0 (the rank waits for the outer all-reduce at once): work and the 1000
  // ns all-reduce after steps 2 and 4, doubled too.
  opt.dp.algorithm = DpAlgorithm::kDiLoCo;
  opt.dp.sync_every = 2;
  EXPECT_EQ(
      simulate(testing::gpipe(1, 1), costs, cores, opt).step_end_ns,
      (std::vector<std::int64_t>{6 * kMs, 13 * kMs + 2000, 19 * kMs + 2000, 26 * kMs + 4000}));
  // SlowMo over SGP with a slow step every step: the gossip and the slow step are one activity,
  // both collectives' time counted (as on dedicated cores).
  opt.dp.algorithm = DpAlgorithm::kSlowMo;
  opt.dp.slowmo_base = DpAlgorithm::kSgp;
  opt.dp.slowmo_frequency = 1;
  const auto own = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, cores, opt).per_rank[0].dp_comm_ns,
            own.per_rank[0].dp_comm_ns);
  EXPECT_GT(own.per_rank[0].dp_comm_ns, 4 * 1004);
  opt.dp.algorithm = DpAlgorithm::kDiLoCo;
  cores.cores_per_node = 2;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, cores, opt).step_end_ns,
            simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt).step_end_ns);
}

// Note [Between steps]: the profile's step overhead follows each rank's step; communication
// still in flight (ZeRO-1's all-gathers after OPTIM) runs on meanwhile, and the step ends at the
// later of the two.
TEST(DataParallel, StepOverheadFollowsEachStepAndOverlapsCommunicationInFlight) {
  auto costs = one_stage({1000});
  SimOptions opt;
  opt.steps = 3;
  const auto plain = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  costs.step_overhead_ms = 0.4;
  const auto with = simulate(testing::gpipe(1, 1), costs, one_gb_per_s(), opt);
  ASSERT_EQ(plain.step_end_ns.size(), 3U);
  for (std::size_t k = 0; k < 3; ++k)  // 0.4 ms more per step, accumulated
    EXPECT_EQ(with.step_end_ns[k],
              plain.step_end_ns[k] + static_cast<std::int64_t>(k + 1) * 400'000);
  // DDP: after the exposed all-reduce.
  opt.steps = 1;
  opt.dp.replicas = 2;
  EXPECT_EQ(simulate(testing::gpipe(1, 2), costs, one_gb_per_s(), opt).makespan_ns,
            6 * kMs + 1000 + 400'000);
  // ZeRO-1 with 10 MB of parameters: the all-gather after OPTIM (5 ms at 1 GB/s) outlasts a
  // 1 ms overhead, which then costs nothing; a 20 ms overhead outlasts the all-gather.
  auto plan = testing::gpipe(1, 2);
  plan.per_rank[0].push_back(sched::Action::stage_only(0, sched::ActionKind::kOptimizerStep));
  auto big = one_stage({10'000'000});
  big.stages[0].optimizer_ms = 0.5;
  opt.dp.zero_stage = 1;
  SimOptions rec = opt;
  rec.record_actions = true;
  const auto base = simulate(plan, big, one_gb_per_s(), rec);
  std::int64_t gather_end = 0, compute_end = 0;
  for (const auto& a : base.actions) {
    if (a.collective == Collective::kAllGather) gather_end = std::max(gather_end, a.end_ns);
    if (a.stream == Stream::kCompute) compute_end = std::max(compute_end, a.end_ns);
  }
  ASSERT_GT(gather_end, compute_end + kMs);  // in flight past a 1 ms overhead
  EXPECT_EQ(base.makespan_ns, gather_end);
  big.step_overhead_ms = 1;
  EXPECT_EQ(simulate(plan, big, one_gb_per_s(), opt).makespan_ns, gather_end);
  big.step_overhead_ms = 20;  // started before the all-gather ended, ends after it
  const std::int64_t longer = simulate(plan, big, one_gb_per_s(), opt).makespan_ns;
  EXPECT_GT(longer, gather_end);
  EXPECT_LT(longer - 20 * kMs, gather_end);
}

// Note [Unregistered collectives]: within a node, DDP's buckets use the collective link (shared
// memory), the other algorithms' collectives the point-to-point link; across nodes both use the
// collective link.
TEST(DataParallel, OnOneNodeOnlyDdpBucketsUseTheCollectiveLink) {
  Cluster c = one_gb_per_s();                // point-to-point: 1 B/ns
  c.collective_intra_node = Link{0.0, 4.0};  // shared-memory all-reduce: 4 B/ns
  c.collective_inter_node = Link{0.0, 0.5};
  SimOptions opt;
  opt.dp.replicas = 2;
  const auto costs = one_stage({4000});
  // DDP: ring n = 2 of 4000 B at 4 B/ns: 1000 ns after the 6 ms of GPipe m = 2.
  EXPECT_EQ(simulate(testing::gpipe(1, 2), costs, c, opt).makespan_ns, 6 * kMs + 1000);
  // SGP: 4004 B to the peer at 1 B/ns after the 3 ms step.
  opt.dp.algorithm = DpAlgorithm::kSgp;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, c, opt).makespan_ns, 3 * kMs + 4004);
  // LocalSGD every step: ring all-reduce of 4000 B at 1 B/ns: 4000 ns.
  opt.dp.algorithm = DpAlgorithm::kLocalSgd;
  opt.dp.localsgd_frequency = 1;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, c, opt).makespan_ns, 3 * kMs + 4000);
  // Replicas on two nodes: the collective inter-node link (0.5 B/ns): 8000 ns.
  c.nodes = 2;
  c.ranks_per_node = 1;
  EXPECT_EQ(simulate(testing::gpipe(1, 1), costs, c, opt).makespan_ns, 3 * kMs + 8000);
}

}  // namespace
}  // namespace pipewright::sim
