// make_profile's estimators on hand-made rank records: dedicated-core times on an oversubscribed
// host (Note [Shared cores in profiles]), the p2p filter (Note [Measured p2p time]), the batch
// overhead (Note [Comm overhead]) and the runtime memory (Note [Runtime memory]).
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/trace.hpp"
#include "report/run_report.hpp"

namespace pipewright::exec {
namespace {

using sched::Action;
using sched::ActionKind;

constexpr std::int64_t kMs = 1'000'000;  // ns

// Profiles group ranks by machine (the cores they share): network-namespace "nodes" of one
// machine (tools/netns-cluster gives each its own host name) are one machine.
TEST(MachineId, SameWhateverTheHostName) {
  const std::int64_t before = this_host_id();
  if (::geteuid() != 0 || ::unshare(CLONE_NEWUTS) != 0) {
    GTEST_SKIP() << "needs root for a UTS namespace of its own";
  }
  const char name[] = "pw-another-node-name";
  ASSERT_EQ(::sethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(this_host_id(), before);
  EXPECT_GE(before, 0);
}

sched::PlanShape two_stages(int microbatches = 1) {
  sched::PlanShape shape;
  shape.ranks = 2;
  shape.stages = 2;
  shape.microbatches = microbatches;
  shape.stage_to_rank = {0, 1};
  return shape;
}

TimedAction timed(Action a, double start_ms, double end_ms, std::int64_t step = 0,
                  std::int64_t bytes = 0) {
  TimedAction t;
  t.action = a;
  t.step = step;
  t.start_ns = static_cast<std::int64_t>(start_ms * kMs);
  t.end_ns = static_cast<std::int64_t>(end_ms * kMs);
  t.bytes = bytes;
  return t;
}

Action f(int stage, int mb) { return Action::compute(stage, ActionKind::kForward, mb); }

RankRecord rank(int r, std::int64_t cpus, std::vector<TimedAction> actions) {
  RankRecord rec;
  rec.world_rank = r;
  rec.host_id = 42;
  rec.cpus = cpus;
  rec.actions = std::move(actions);
  return rec;
}

ReportContext context() {
  ReportContext ctx;
  ctx.world_size = 2;
  ctx.warmup_steps = 0;
  return ctx;
}

// Two ranks on one 1-core host: rank 0's F over [0, 4] ms, rank 1's over [2, 6] ms. Both compute
// on [2, 4] at half speed, so each did 2 + 2 * 0.5 = 3 ms of work.
TEST(MakeProfile, OversubscribedHostGivesDedicatedCoreTimes) {
  const std::vector<RankRecord> records{rank(0, 1, {timed(f(0, 0), 0, 4)}),
                                        rank(1, 1, {timed(f(1, 0), 2, 6)})};
  const auto t = make_profile(records, two_stages(), context());
  EXPECT_EQ(t.cores_per_node, 1);
  EXPECT_NEAR(t.stages[0].forward_ms, 3.0, 1e-9);
  EXPECT_NEAR(t.stages[1].forward_ms, 3.0, 1e-9);
}

// Issue 33: the profile records the run's precision (fp32 unless the run said otherwise), which
// `simulate --profile` checks against the job's.
TEST(MakeProfile, RecordsThePrecision) {
  const std::vector<RankRecord> records{rank(0, 0, {timed(f(0, 0), 0, 4)}),
                                        rank(1, 0, {timed(f(1, 0), 2, 6)})};
  EXPECT_EQ(make_profile(records, two_stages(), context()).precision, sched::Precision::kFp32);
  ReportContext ctx = context();
  ctx.precision = sched::Precision::kBf16;
  const auto t = make_profile(records, two_stages(), ctx);
  EXPECT_EQ(t.precision, sched::Precision::kBf16);
  EXPECT_NE(sched::to_json(t).find("\"precision\": \"bf16\""), std::string::npos);
}

TEST(MakeProfile, EnoughCoresOrGpusKeepMeasuredTimes) {
  std::vector<RankRecord> records{rank(0, 2, {timed(f(0, 0), 0, 4)}),
                                  rank(1, 2, {timed(f(1, 0), 2, 6)})};
  auto t = make_profile(records, two_stages(), context());
  EXPECT_EQ(t.cores_per_node, 2);
  EXPECT_NEAR(t.stages[0].forward_ms, 4.0, 1e-9);
  EXPECT_NEAR(t.stages[1].forward_ms, 4.0, 1e-9);
  for (auto& r : records) r.cpus = 0;  // computed on GPUs: no shared cores
  t = make_profile(records, two_stages(), context());
  EXPECT_EQ(t.cores_per_node, 0);
  EXPECT_NEAR(t.stages[0].forward_ms, 4.0, 1e-9);
  // Ranks on different hosts do not share cores.
  records = {rank(0, 1, {timed(f(0, 0), 0, 4)}), rank(1, 1, {timed(f(1, 0), 2, 6)})};
  records[1].host_id = 7;
  t = make_profile(records, two_stages(), context());
  EXPECT_EQ(t.cores_per_node, 1);
  EXPECT_NEAR(t.stages[0].forward_ms, 4.0, 1e-9);
  EXPECT_NEAR(t.stages[1].forward_ms, 4.0, 1e-9);
}

// CostTable::nodes: the distinct (machine, launch node) pairs; network-namespace nodes share a
// machine (Note [Compute beside a collective] in sim/src/engine/engine.hpp).
TEST(MakeProfile, CountsTheNodesTheRunSpanned) {
  std::vector<RankRecord> records{rank(0, 2, {timed(f(0, 0), 0, 4)}),
                                  rank(1, 2, {timed(f(1, 0), 2, 6)})};
  EXPECT_EQ(make_profile(records, two_stages(), context()).nodes, 1);
  records[1].node_rank = 1;  // another namespace node of the same machine
  auto t = make_profile(records, two_stages(), context());
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.cores_per_node, 2);  // still one machine's cores
  EXPECT_NE(sched::to_json(t).find("\"nodes\": 2"), std::string::npos);
  records[1].node_rank = 0;
  records[1].host_id = 7;  // another machine
  EXPECT_EQ(make_profile(records, two_stages(), context()).nodes, 2);
}

// Messages: the p2p cost comes from transfers whose receive was posted before the send started
// (microbatch 0: 0.3 ms); a receive posted after the send started (microbatch 1) is left out. The
// batch overhead is the median of batches with a send that did not wait for data: rank 0's
// send-only batches (0.1 and 0.2 ms); rank 1's receives alone are waits at their consumer (Note
// [Receives wait at their consumer]), which post nothing.
TEST(MakeProfile, P2PFilterCommOverheadAndRuntimeMemory) {
  const auto send = [](int mb) { return Action::comm(0, ActionKind::kSendF, mb, 1); };
  const auto recv = [](int mb) { return Action::comm(1, ActionKind::kRecvF, mb, 0); };
  std::vector<RankRecord> records{
      rank(0, 2,
           {timed(f(0, 0), 0, 1), timed(send(0), 1.0, 1.1, 0, 64), timed(f(0, 1), 1.1, 2),
            timed(send(1), 2.0, 2.2, 0, 64)}),
      rank(1, 2,
           {timed(recv(0), 0.5, 1.3, 0, 64), timed(f(1, 0), 1.3, 2.3),
            timed(recv(1), 2.5, 2.65, 0, 64), timed(f(1, 1), 2.65, 3.5)})};
  records[0].baseline_rss_bytes = 100'000'000;
  records[1].baseline_rss_bytes = 120'000'000;
  records[0].stages = {LocalStageSizes{0, {1000}}};
  records[1].stages = {LocalStageSizes{1, {3000}}};
  const auto t = make_profile(records, two_stages(2), context());
  ASSERT_TRUE(t.p2p.has_value());
  ASSERT_TRUE(t.p2p->per_message_ms.has_value());
  EXPECT_NEAR(*t.p2p->per_message_ms, 0.3, 1e-9);
  EXPECT_EQ(t.p2p->stats->samples, 1);
  EXPECT_NEAR(t.comm_overhead_ms, 0.15, 1e-9);
  // The median over ranks of (baseline RSS - parameter bytes).
  EXPECT_EQ(t.runtime_memory_bytes, (100'000'000 - 1000 + 120'000'000 - 3000) / 2);
  EXPECT_EQ(t.stages[0].output_bytes, 64);
  EXPECT_EQ(t.stages[1].param_bytes, 3000);
  // ZeRO-3: the shards the ranks held at the baseline instead (Note [Runtime memory]); the cost
  // table keeps the whole parameters.
  records[0].baseline_state_bytes = 500;
  records[1].baseline_state_bytes = 1500;
  const auto z = make_profile(records, two_stages(2), context());
  EXPECT_EQ(z.runtime_memory_bytes, (100'000'000 - 500 + 120'000'000 - 1500) / 2);
  EXPECT_EQ(z.stages[1].param_bytes, 3000);
  EXPECT_EQ(decode_record(encode_record(records[1])).baseline_state_bytes, 1500);
  // Library code that became resident after the baseline (RssFile's growth) is runtime too;
  // a shrinking file-backed set (pages reclaimed) adds nothing.
  records[0].baseline_file_bytes = 50'000'000;
  records[0].file_bytes = 52'500'000;
  records[1].baseline_file_bytes = 60'000'000;
  records[1].file_bytes = 59'000'000;
  const auto code = make_profile(records, two_stages(2), context());
  EXPECT_EQ(code.runtime_memory_bytes,
            (100'000'000 - 500 + 2'500'000 + 120'000'000 - 1500 + 0) / 2);
}

// On an oversubscribed host the message time comes from the waited-for transfers during which a
// core was free, with or without a progress thread (Gloo / MPI): two ranks on one core; rank 0
// computes over [0, 1] and [10, 11]; 5 transfers during rank 0's idle time take 0.2 ms, one
// during its compute 0.9 ms (the receiver waited for the core). With fewer than 5 such
// transfers, all waited-for ones count.
TEST(MakeProfile, MessagesOnAnOversubscribedHostAreTimedWhileACoreIsFree) {
  const auto send = [](int mb) { return Action::comm(0, ActionKind::kSendF, mb, 1); };
  const auto recv = [](int mb) { return Action::comm(1, ActionKind::kRecvF, mb, 0); };
  std::vector<TimedAction> r0{timed(f(0, 0), 0, 1), timed(f(0, 1), 10, 11)};
  std::vector<TimedAction> r1;
  for (int mb = 0; mb < 5; ++mb) {
    const double t = 2 + mb;
    r0.push_back(timed(send(mb), t, t + 0.1, 0, 64));
    r1.push_back(timed(recv(mb), t - 0.5, t + 0.2, 0, 64));
  }
  r0.push_back(timed(send(5), 10.0, 10.1, 0, 64));
  r1.push_back(timed(recv(5), 9.5, 10.9, 0, 64));
  std::vector<RankRecord> records{rank(0, 1, r0), rank(1, 1, r1)};
  ReportContext ctx = context();
  ctx.p2p_uses_core = false;
  auto t = make_profile(records, two_stages(6), ctx);
  EXPECT_FALSE(t.p2p_uses_core);
  ASSERT_TRUE(t.p2p && t.p2p->per_message_ms);
  EXPECT_EQ(t.p2p->stats->samples, 5);
  EXPECT_NEAR(*t.p2p->per_message_ms, 0.2, 1e-9);
  ctx.p2p_uses_core = true;
  t = make_profile(records, two_stages(6), ctx);
  EXPECT_TRUE(t.p2p_uses_core);
  EXPECT_EQ(t.p2p->stats->samples, 5);
  EXPECT_NEAR(*t.p2p->per_message_ms, 0.2, 1e-9);
  records[0].actions.erase(records[0].actions.begin() + 2);  // 4 core-free transfers left
  t = make_profile(records, two_stages(6), ctx);
  EXPECT_EQ(t.p2p->stats->samples, 5);
  EXPECT_NEAR(t.p2p->stats->quantiles_ms.back(), 0.45, 1e-9);  // 0.9 at a half share
}

// Note [Correlated sampling]: how much of the spread of the compute times a step (all ranks) or
// a rank in a step shares. Two ranks with their own cores, 8 steps of 4 forwards each
// (durations 1 + small jitter): when every step scales all its forwards by its own factor,
// nearly all the variance is the step's; when each rank's factor is its own, the (rank, step)
// shares it but the step alone does not; with jitter only, neither.
TEST(MakeProfile, StepAndRankStepCorrelationsOfComputeTimes) {
  const auto make = [](auto factor) {
    std::vector<RankRecord> records;
    for (int r = 0; r < 2; ++r) {
      std::vector<TimedAction> acts;
      double t = 0;
      for (int step = 0; step < 8; ++step) {
        for (int mb = 0; mb < 4; ++mb) {
          const double jitter = 0.01 * ((mb * 7 + step * 3 + r * 5) % 5);
          const double d = factor(r, step) * (1 + jitter);
          acts.push_back(timed(f(r, mb), t, t + d, step));
          t += d + 0.1;
        }
      }
      records.push_back(rank(r, 2, acts));
    }
    return make_profile(records, two_stages(4), context());
  };
  const auto by_step = make([](int, int step) { return 1.0 + 0.2 * (step % 4); });
  EXPECT_GT(by_step.step_correlation, 0.9);
  EXPECT_GE(by_step.rank_step_correlation, by_step.step_correlation);
  const auto by_rank_step = make([](int r, int step) { return 1.0 + 0.2 * ((step + 2 * r) % 4); });
  EXPECT_LT(by_rank_step.step_correlation, 0.2);
  EXPECT_GT(by_rank_step.rank_step_correlation, 0.9);
  const auto none = make([](int, int) { return 1.0; });
  EXPECT_LT(none.rank_step_correlation, 0.2);
  const auto table = sched::parse_costs(sched::to_json(by_rank_step), "t");
  EXPECT_EQ(table.rank_step_correlation, by_rank_step.rank_step_correlation);
}

// Note [Measured activation memory]: a stage's activation bytes are the median of what its F
// actions left allocated plus the median size of the activation it received; a stage whose
// forwards recorded nothing keeps the model's estimate.
TEST(MakeProfile, ActivationBytesAreMeasured) {
  const auto recv = [](int mb) { return Action::comm(1, ActionKind::kRecvF, mb, 0); };
  std::vector<RankRecord> records{
      rank(0, 2, {timed(f(0, 0), 0, 1, 0, 0), timed(f(0, 1), 1, 2, 0, 0)}),
      rank(1, 2,
           {timed(recv(0), 0, 1, 0, 64), timed(f(1, 0), 1, 2, 0, 1000), timed(recv(1), 2, 3, 0, 64),
            timed(f(1, 1), 3, 4, 0, 3000), timed(f(1, 2), 4, 5, 0, 1200)})};
  ReportContext ctx = context();
  ctx.activation_bytes = {555, 777};
  const auto t = make_profile(records, two_stages(3), ctx);
  EXPECT_EQ(t.stages[0].activation_bytes, 555);  // nothing measured: the model's
  EXPECT_EQ(t.stages[1].activation_bytes, 1200 + 64);
}

// Note [Measured split backward]: warm-up step 0 ran microbatch 0's backward as I (1 ms) then
// W (3 ms) and microbatch 1's as B (2 ms); the measured step's B takes 4 ms, so I = 4 x 1/2 and
// W = 4 x 3/2, with B's spread. A stage whose warm-up ran no split keeps no I/W.
TEST(MakeProfile, SplitWarmupStepGivesInputAndWeightCosts) {
  const auto c = [](int stage, ActionKind k, int mb) { return Action::compute(stage, k, mb); };
  std::vector<RankRecord> records{
      rank(0, 2,
           {timed(f(0, 0), 0, 1, 0), timed(c(0, ActionKind::kBackwardInput, 0), 1, 2, 0),
            timed(c(0, ActionKind::kBackwardWeight, 0), 2, 5, 0),
            timed(c(0, ActionKind::kFullBackward, 1), 5, 7, 0), timed(f(0, 0), 10, 11, 1),
            timed(c(0, ActionKind::kFullBackward, 0), 11, 15, 1),
            timed(c(0, ActionKind::kFullBackward, 1), 15, 19, 1)}),
      rank(1, 2,
           {timed(f(1, 0), 0, 1, 0), timed(c(1, ActionKind::kFullBackward, 0), 1, 3, 0),
            timed(f(1, 0), 10, 11, 1), timed(c(1, ActionKind::kFullBackward, 0), 11, 13, 1)})};
  ReportContext ctx = context();
  ctx.warmup_steps = 1;
  const auto t = make_profile(records, two_stages(2), ctx);
  EXPECT_DOUBLE_EQ(t.stages[0].backward_ms, 4.0);
  ASSERT_TRUE(t.stages[0].input_grad_ms && t.stages[0].weight_grad_ms);
  EXPECT_NEAR(*t.stages[0].input_grad_ms, 2.0, 1e-9);
  EXPECT_NEAR(*t.stages[0].weight_grad_ms, 6.0, 1e-9);
  ASSERT_TRUE(t.stages[0].weight_grad_stats);
  EXPECT_NEAR(t.stages[0].weight_grad_stats->p90_ms, 6.0, 1e-9);
  EXPECT_EQ(t.stages[0].weight_grad_stats->samples, 1);
  EXPECT_FALSE(t.stages[1].input_grad_ms);
  EXPECT_FALSE(t.stages[1].weight_grad_ms);
}

// Note [Measured split backward], the split path's first use and the cores' sharing: the
// warm-up step split microbatches 0 and 2. Microbatch 0's I (5 ms) and W (6 ms) paid the first
// use and are left out; microbatch 2's I and W took 3 and 2 ms of wall time but 1 and 1.5 ms of
// CPU, B (microbatches 1, 3) 2 ms of CPU. With the measured B of 4 ms: I = 4 x 1/2, W = 4 x
// 1.5/2. (With wall times and every sample the ratios were (5+3)/2 / 2 and (6+2)/2 / 2.)
TEST(MakeProfile, SplitRatiosLeaveOutTheFirstUseAndTakeCpuTime) {
  const auto c = [](int stage, ActionKind k, int mb) { return Action::compute(stage, k, mb); };
  auto cpu = [](TimedAction a, double ms) {
    a.cpu_ns = static_cast<std::int64_t>(ms * kMs);
    return a;
  };
  std::vector<RankRecord> records{
      rank(0, 2,
           {cpu(timed(c(0, ActionKind::kBackwardInput, 0), 0, 5, 0), 5),
            cpu(timed(c(0, ActionKind::kBackwardWeight, 0), 5, 11, 0), 6),
            cpu(timed(c(0, ActionKind::kFullBackward, 1), 11, 13, 0), 2),
            cpu(timed(c(0, ActionKind::kBackwardInput, 2), 13, 16, 0), 1),
            cpu(timed(c(0, ActionKind::kBackwardWeight, 2), 16, 18, 0), 1.5),
            cpu(timed(c(0, ActionKind::kFullBackward, 3), 18, 21, 0), 2), timed(f(0, 0), 30, 31, 1),
            timed(c(0, ActionKind::kFullBackward, 0), 31, 35, 1)}),
      rank(1, 2,
           {timed(f(1, 0), 30, 31, 1), timed(c(1, ActionKind::kFullBackward, 0), 31, 33, 1)})};
  ReportContext ctx = context();
  ctx.warmup_steps = 1;
  const auto t = make_profile(records, two_stages(4), ctx);
  ASSERT_TRUE(t.stages[0].input_grad_ms && t.stages[0].weight_grad_ms);
  EXPECT_NEAR(*t.stages[0].input_grad_ms, 2.0, 1e-9);
  EXPECT_NEAR(*t.stages[0].weight_grad_ms, 3.0, 1e-9);
  EXPECT_EQ(t.stages[0].input_grad_stats->samples, 1);
}

TEST(MakeProfile, RecordRoundTripKeepsHostAndCpus) {
  RankRecord r = rank(3, 8, {timed(f(1, 2), 1, 2, 5, 7)});
  r.host_id = 123456789;
  r.node_rank = 1;
  r.peak_rss_bytes = 11;
  r.baseline_rss_bytes = 10;
  r.baseline_file_bytes = 5;
  r.file_bytes = 6;
  r.stages = {LocalStageSizes{1, {4, 8}}};
  const RankRecord d = decode_record(encode_record(r));
  EXPECT_EQ(d.world_rank, 3);
  EXPECT_EQ(d.host_id, 123456789);
  EXPECT_EQ(d.node_rank, 1);
  EXPECT_EQ(d.cpus, 8);
  EXPECT_EQ(d.peak_rss_bytes, 11);
  EXPECT_EQ(d.baseline_rss_bytes, 10);
  EXPECT_EQ(d.baseline_file_bytes, 5);
  EXPECT_EQ(d.file_bytes, 6);
  EXPECT_GT(resident_file_bytes(), 0);  // this test binary's mapped code
  ASSERT_EQ(d.stages.size(), 1U);
  EXPECT_EQ(d.stages[0].param_bytes, (std::vector<std::int64_t>{4, 8}));
  ASSERT_EQ(d.actions.size(), 1U);
  EXPECT_EQ(d.actions[0].action, f(1, 2));
  EXPECT_EQ(d.actions[0].step, 5);
  EXPECT_EQ(d.actions[0].bytes, 7);
  EXPECT_GT(usable_cpus(), 0);
  EXPECT_GE(this_host_id(), 0);
}

// Issue 47 item 1: each step's data-parallel counters travel with the record, and the profile
// keeps their means per measured step (warm-up steps left out) per world rank.
TEST(MakeProfile, DataParallelStepsBecomeMeansPerRank) {
  RankRecord r0 =
      rank(0, 1, {timed(f(0, 0), 1, 2, 0), timed(f(0, 0), 11, 12, 1), timed(f(0, 0), 21, 22, 2)});
  r0.dp_steps = {DataParallelStep{0, 9, 900, 901, 9 * kMs}, DataParallelStep{1, 2, 100, 100, kMs},
                 DataParallelStep{2, 0, 0, 0, 0}};
  RankRecord r1 = rank(1, 1, {timed(f(1, 0), 3, 4, 0)});
  const RankRecord d = decode_record(encode_record(r0));
  ASSERT_EQ(d.dp_steps.size(), 3U);
  EXPECT_EQ(d.dp_steps[0].wire_bytes, 901);
  EXPECT_EQ(d.dp_steps[1].exposed_wait_ns, kMs);
  ReportContext ctx = context();
  ctx.warmup_steps = 1;
  const auto t = make_profile({d, r1}, two_stages(), ctx);
  ASSERT_EQ(t.data_parallel.size(), 1U);  // rank 1 recorded none
  const auto& m = t.data_parallel[0];
  EXPECT_EQ(m.rank, 0);
  EXPECT_EQ(m.steps, 2);
  EXPECT_DOUBLE_EQ(m.collectives_per_step, 1.0);
  EXPECT_DOUBLE_EQ(m.payload_bytes_per_step, 50.0);
  EXPECT_DOUBLE_EQ(m.wire_bytes_per_step, 50.0);
  EXPECT_DOUBLE_EQ(m.exposed_ms_per_step, 0.5);
}

// The training thread's waits for data (issue 24, item 5) travel with the record and become one
// "data" slice per step on the compute stream, before the step's actions.
TEST(MakeProfile, DataWaitsRoundTripAndAreTraced) {
  RankRecord r = rank(1, 1, {timed(f(1, 0), 3, 4, 0)});
  r.data_waits = {DataWait{0, 1 * kMs, 3 * kMs}};
  const RankRecord d = decode_record(encode_record(r));
  ASSERT_EQ(d.data_waits.size(), 1U);
  EXPECT_EQ(d.data_waits[0].step, 0);
  EXPECT_EQ(d.data_waits[0].start_ns, 1 * kMs);
  EXPECT_EQ(d.data_waits[0].end_ns, 3 * kMs);
  const sched::Trace t = sched::parse_trace(
      make_trace_json({rank(0, 1, {timed(f(0, 0), 1, 2, 0)}), d}, context()), "t.json");
  int data = 0;
  for (const auto& s : t.slices) {
    if (s.category != "data") continue;
    ++data;
    EXPECT_EQ(s.name, "data");
    EXPECT_EQ(s.rank, 1);
    EXPECT_EQ(s.stream, sched::TraceStream::kCompute);
    EXPECT_DOUBLE_EQ(s.start_us, 0.0);  // the earliest time of the trace
    EXPECT_DOUBLE_EQ(s.duration_us, 2000.0);
  }
  EXPECT_EQ(data, 1);
}

// Issue 47 item 2 (Note [Send time], Note [Comm overhead]): the batch overhead is the batch's
// time less what its SENDs spent inside the transport's send calls, so a profile measured on a
// slow link carries the software overhead only; the send-call time is kept as comm_send_ms, and
// both fields, with the drain at the end of the step, travel with the record and the trace.
TEST(MakeProfile, CommOverheadLeavesOutTheSendCalls) {
  const auto send = [](int mb) { return Action::comm(0, ActionKind::kSendF, mb, 1); };
  const auto recv = [](int mb) { return Action::comm(1, ActionKind::kRecvF, mb, 0); };
  // Rank 0's sends: batches of 2.4 ms (2.2 ms in the send call: the wire), 0.5 ms (0.2 ms) and
  // 8.3 ms (8.0 ms); software overheads 0.2, 0.3 and 0.3 ms.
  auto s0 = timed(send(0), 1.0, 3.4, 0, 64);
  s0.send_ns = static_cast<std::int64_t>(2.2 * kMs);
  s0.drain_ns = static_cast<std::int64_t>(0.7 * kMs);
  auto s1 = timed(send(1), 4.0, 4.5, 0, 64);
  s1.send_ns = static_cast<std::int64_t>(0.2 * kMs);
  auto s2 = timed(send(2), 6.0, 14.3, 0, 64);
  s2.send_ns = static_cast<std::int64_t>(8.0 * kMs);
  std::vector<RankRecord> records{
      rank(0, 2,
           {timed(f(0, 0), 0, 1), s0, timed(f(0, 1), 3.4, 4.0), s1, timed(f(0, 2), 4.5, 6), s2}),
      rank(1, 2,
           {timed(recv(0), 0.5, 3.5, 0, 64), timed(recv(1), 3.5, 4.6, 0, 64),
            timed(recv(2), 4.6, 14.4, 0, 64)})};
  const auto t = make_profile(records, two_stages(3), context());
  EXPECT_NEAR(t.comm_overhead_ms, 0.3, 1e-9);  // median of 0.2, 0.3, 0.3
  EXPECT_NEAR(t.comm_send_ms, 2.2, 1e-9);      // median of 2.2, 0.2, 8.0
  // Note [Send calls] (sim/src/engine/engine.hpp): every SEND's call, with the p2p cost of the
  // same network.
  ASSERT_TRUE(t.p2p && t.p2p->send_call_stats);
  EXPECT_EQ(t.p2p->send_call_stats->samples, 3);
  EXPECT_NEAR(t.p2p->send_call_stats->median_ms, 2.2, 1e-9);
  EXPECT_NEAR(t.p2p->send_call_stats->quantiles_ms.back(), 8.0, 1e-9);
  // Without the split (profiles before issue 47) the overhead was the whole batch: 2.4 ms.
  for (auto& a : records[0].actions) a.send_ns = 0;
  EXPECT_NEAR(make_profile(records, two_stages(3), context()).comm_overhead_ms, 2.4, 1e-9);
  // Note [Compute CPU time]: a compute action's CPU time travels with the record too.
  auto f0 = timed(f(0, 0), 0, 1);
  f0.cpu_ns = static_cast<std::int64_t>(0.6 * kMs);
  const RankRecord d = decode_record(encode_record(rank(0, 2, {s0, f0})));
  ASSERT_EQ(d.actions.size(), 2U);
  EXPECT_EQ(d.actions[0].send_ns, s0.send_ns);
  EXPECT_EQ(d.actions[0].drain_ns, s0.drain_ns);
  EXPECT_EQ(d.actions[1].cpu_ns, f0.cpu_ns);
  const sched::Trace tr = sched::parse_trace(make_trace_json({d}, context()), "t.json");
  ASSERT_EQ(tr.slices.size(), 2U);
  const auto& sent = tr.slices[0].category == "SEND_F" ? tr.slices[0] : tr.slices[1];
  const auto& fwd = tr.slices[0].category == "F" ? tr.slices[0] : tr.slices[1];
  EXPECT_NEAR(sent.send_us, 2200.0, 1e-6);
  EXPECT_NEAR(sent.drain_us, 700.0, 1e-6);
  EXPECT_EQ(sent.cpu_us, 0.0);
  EXPECT_NEAR(fwd.cpu_us, 600.0, 1e-6);
}

// Note [Step overhead]: the gap from the latest end of anything a step recorded on any rank to
// the earliest start of the next step's, median over the measured steps with a measured
// successor. Step s: rank 0's data wait [10s, 10s + 0.5], its F [10s + 1, 10s + 6], rank 1's
// F [10s + 2, 10s + 8.5] and, in step 2 only, a sync to 10s + 9; warm-up step 0 ends at 9.9.
TEST(MakeProfile, StepOverheadIsTheMedianGapBetweenSteps) {
  RankRecord r0 = rank(0, 2, {});
  RankRecord r1 = rank(1, 2, {});
  for (int s = 0; s < 4; ++s) {
    const double t = 10.0 * s;
    r0.data_waits.push_back(
        DataWait{s, static_cast<std::int64_t>(t * kMs), static_cast<std::int64_t>((t + .5) * kMs)});
    r0.actions.push_back(timed(f(0, 0), t + 1, t + 6, s));
    r1.actions.push_back(timed(f(1, 0), t + 2, s == 0 ? t + 9.9 : t + 8.5, s));
  }
  r1.dp_syncs = {DataParallelSync{2, 28 * kMs, 29 * kMs}};
  ReportContext ctx = context();
  ctx.warmup_steps = 1;
  // Gaps: step 1 -> 2: 20 - 18.5 = 1.5 ms; step 2 -> 3: 30 - 29 = 1 ms; step 3 has no successor.
  EXPECT_NEAR(make_profile({r0, r1}, two_stages(), ctx).step_overhead_ms, 1.25, 1e-9);
  ctx.warmup_steps = 0;  // step 0 -> 1: 10 - 9.9 = 0.1 ms joins: median of 0.1, 1.5, 1
  EXPECT_NEAR(make_profile({r0, r1}, two_stages(), ctx).step_overhead_ms, 1.0, 1e-9);
  ctx.warmup_steps = 3;  // one measured step: no gap
  EXPECT_EQ(make_profile({r0, r1}, two_stages(), ctx).step_overhead_ms, 0.0);
}

// Issue 47 item 3 (Note [Data-parallel sync], Note [Data-parallel sync work]): the sync after the
// last OPTIM travels with the record, is traced as a "dp sync" slice, and its work (its duration
// less the step's data-parallel wait) is the profile's dp_sync_compute_ms, over the measured
// steps that communicated.
TEST(MakeProfile, DataParallelSyncWorkLeavesOutItsWaits) {
  RankRecord r0 = rank(0, 1,
                       {timed(f(0, 0), 1, 2, 0), timed(f(0, 0), 11, 12, 1),
                        timed(f(0, 0), 21, 22, 2), timed(f(0, 0), 31, 32, 3)});
  // Steps 1-3 measured: syncs of 5, 4 and 0.1 ms with waits of 3, 1 and 0 ms; step 3 did not
  // communicate (a LocalSGD step without averaging).
  r0.dp_steps = {DataParallelStep{0, 1, 8, 8, 9 * kMs}, DataParallelStep{1, 1, 8, 8, 3 * kMs},
                 DataParallelStep{2, 1, 8, 8, 1 * kMs}, DataParallelStep{3, 0, 0, 0, 0}};
  r0.dp_syncs = {DataParallelSync{0, 2 * kMs, 11 * kMs}, DataParallelSync{1, 12 * kMs, 17 * kMs},
                 DataParallelSync{2, 22 * kMs, 26 * kMs},
                 DataParallelSync{3, 32 * kMs, 32 * kMs + kMs / 10}};
  RankRecord r1 = r0;
  r1.world_rank = 1;
  r1.dp_syncs[1].end_ns = 14 * kMs;  // 2 ms with 3 ms of waiting: no work (clamped at 0)
  const RankRecord d = decode_record(encode_record(r0));
  ASSERT_EQ(d.dp_syncs.size(), 4U);
  EXPECT_EQ(d.dp_syncs[1].start_ns, 12 * kMs);
  EXPECT_EQ(d.dp_syncs[1].end_ns, 17 * kMs);
  ReportContext ctx = context();
  ctx.warmup_steps = 1;
  const auto t = make_profile({d, r1}, two_stages(), ctx);
  // Samples: rank 0 steps 1, 2: 2 and 3 ms; rank 1: 0 and 3 ms. Median 2.5 ms.
  EXPECT_NEAR(t.dp_sync_compute_ms, 2.5, 1e-9);
  const sched::Trace tr = sched::parse_trace(make_trace_json({d}, context()), "t.json");
  int syncs = 0;
  for (const auto& s : tr.slices) {
    if (s.category != "dp sync") continue;
    ++syncs;
    EXPECT_EQ(s.stream, sched::TraceStream::kCompute);
    if (s.step == 1) {
      EXPECT_DOUBLE_EQ(s.duration_us, 5000.0);
    }
  }
  EXPECT_EQ(syncs, 4);
}

}  // namespace
}  // namespace pipewright::exec
