// Chakra execution traces (sim/chakra.hpp): a plan written as traces reads back as the same plan,
// over schedules, DAGs, replicas and data parallelism; malformed traces are errors that name the
// file and the node.
#include "pipewright/sim/chakra.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

std::vector<ChakraFile> files_of(const std::vector<std::string>& traces) {
  std::vector<ChakraFile> out;
  for (std::size_t g = 0; g < traces.size(); ++g) {
    out.push_back({"t/pw." + std::to_string(g) + ".et", traces[g]});
  }
  return out;
}

sched::LoweredPlan plan_of(sched::ScheduleKind kind, int p, int m, int v,
                           std::vector<sched::StageEdge> edges = {}) {
  sched::ScheduleSpec spec;
  spec.kind = kind;
  spec.ranks = p;
  spec.microbatches = m;
  spec.stages_per_rank = v;
  spec.stage_edges = std::move(edges);
  sched::LowerOptions opt;
  opt.reduce_grad = true;
  opt.optimizer_step = true;
  return sched::lower(sched::generate(spec), opt);
}

std::vector<std::string> traces_of(const sched::LoweredPlan& plan, int dp) {
  SimOptions opt;
  opt.dp.replicas = dp;
  const auto costs = testing::uniform_costs(plan.shape.model_stages(), 1.0, 2.0);
  return to_chakra(plan, costs, Cluster{}, opt);
}

TEST(Chakra, PlansRoundTrip) {
  using K = sched::ScheduleKind;
  const std::vector<sched::LoweredPlan> plans = {
      plan_of(K::kGPipe, 2, 4, 1),
      plan_of(K::k1F1B, 4, 8, 1),
      plan_of(K::kInterleaved1F1B, 2, 4, 2),
      plan_of(K::kInterleavedZeroBubble, 2, 4, 2),
      plan_of(K::kZBVZeroBubble, 2, 4, 2),
      plan_of(K::kDualPipeV, 2, 4, 2),                               // OVERLAP_F_B units
      plan_of(K::kChimera, 2, 4, 1),                                 // stage replicas
      plan_of(K::k1F1B, 4, 4, 1, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}),  // a stage DAG
      plan_of(K::k1F1B, 1, 2, 1),                                    // one rank: no SEND/RECV
  };
  for (const auto& plan : plans) {
    for (const int dp : {1, 2}) {
      const auto traces = traces_of(plan, dp);
      ASSERT_EQ(traces.size(), static_cast<std::size_t>(plan.shape.ranks * dp));
      EXPECT_EQ(from_chakra(files_of(traces)), plan) << plan.shape.schedule << " dp " << dp;
    }
  }
}

// Issue 43: ZeRO-3 plans (UNSHARD written as an ALL_GATHER collective, RESHARD as a compute
// node, REDUCE_GRAD as a REDUCE_SCATTER) read back as the same plan.
TEST(Chakra, ZeroPlansRoundTrip) {
  using K = sched::ScheduleKind;
  for (const auto& base : {plan_of(K::k1F1B, 2, 4, 1), plan_of(K::kInterleaved1F1B, 2, 4, 2),
                           plan_of(K::kDualPipeV, 2, 4, 2)}) {
    for (const auto placement : {sched::ShardPlacement::kStep, sched::ShardPlacement::kCompute,
                                 sched::ShardPlacement::kTorch}) {
      const auto plan = sched::place_shards(base, placement);
      SimOptions opt;
      opt.dp.replicas = 2;
      opt.dp.zero_stage = 3;
      const auto costs = testing::uniform_costs(plan.shape.model_stages(), 1.0, 2.0, 0, 1000);
      const auto traces = to_chakra(plan, costs, Cluster{}, opt);
      EXPECT_EQ(from_chakra(files_of(traces)), plan)
          << plan.shape.schedule << " " << sched::to_string(placement);
    }
  }
}

// Issue 46 (Note [Chakra tensor parallelism]): with tp > 1 one trace per GPU, each forward and
// backward followed by its stage's TP collectives (all-reduces; with sequence parallelism a
// reduce-scatter and an all-gather each), which the reader checks, counts and skips.
TEST(Chakra, TensorParallelCollectivesRoundTrip) {
  using K = sched::ScheduleKind;
  for (const auto& plan :
       {plan_of(K::k1F1B, 2, 4, 1), plan_of(K::kInterleavedZeroBubble, 2, 4, 2)}) {
    const std::int32_t stages = plan.shape.model_stages();
    const auto costs = testing::uniform_costs(stages, 1.0, 2.0);
    for (const bool sp : {false, true}) {
      ChakraTensorParallel tensor;
      tensor.tp = 2;
      tensor.sequence_parallel = sp;
      tensor.stages.assign(static_cast<std::size_t>(stages), StageTpCollectives{4, 1000, 200});
      SimOptions opt;
      opt.dp.replicas = 2;
      const auto traces = to_chakra(plan, costs, Cluster{}, opt, tensor);
      ASSERT_EQ(traces.size(), static_cast<std::size_t>(plan.shape.ranks * 2 * 2));
      ChakraTpSummary summary;
      EXPECT_EQ(from_chakra(files_of(traces), &summary), plan) << plan.shape.schedule;
      EXPECT_EQ(summary.tp, 2);
      // Every GPU runs each stage's F and its backward (B, or I) m times: 4 collectives each.
      std::int64_t passes = 0;
      for (const auto& ops : plan.per_rank)
        for (const auto& a : ops)
          passes += a.kind == sched::ActionKind::kForward ||
                    a.kind == sched::ActionKind::kFullBackward ||
                    a.kind == sched::ActionKind::kBackwardInput;
      const std::int64_t per_plan = passes * 4 * 2 * 2;  // x dp x tp traces
      if (sp) {
        EXPECT_EQ(summary.all_reduce, 0);
        EXPECT_EQ(summary.reduce_scatter, per_plan);
        EXPECT_EQ(summary.all_gather, per_plan);
        EXPECT_EQ(summary.bytes, 2 * per_plan * 1000);
      } else {
        EXPECT_EQ(summary.all_reduce, per_plan);
        EXPECT_EQ(summary.reduce_scatter + summary.all_gather, 0);
        EXPECT_EQ(summary.bytes, per_plan * 1000);
      }
      // Without the TP information the traces are the plan's alone.
      ChakraTpSummary none;
      EXPECT_EQ(from_chakra(files_of(traces_of(plan, 2)), &none), plan);
      EXPECT_EQ(none.all_reduce + none.reduce_scatter + none.all_gather, 0);
    }
  }
  // Data-parallel groups per (pipeline rank, k), then the TP groups.
  EXPECT_EQ(chakra_comm_groups(2, 2, 2),
            "{\"1\": [0, 4], \"2\": [1, 5], \"3\": [2, 6], \"4\": [3, 7], \"5\": [0, 1], "
            "\"6\": [2, 3], \"7\": [4, 5], \"8\": [6, 7]}\n");
  EXPECT_EQ(chakra_comm_groups(2, 2), "{\"1\": [0, 2], \"2\": [1, 3]}\n");
}

// Issue 44: message and gradient sizes follow --precision and --reduce-dtype as the simulator's
// (Note [Precision bytes]): a bf16 job over an fp32 table writes exactly the traces of an fp32
// job over the table with half the activation and parameter bytes.
TEST(Chakra, SizesFollowPrecisionAndReduceDtype) {
  const auto plan = plan_of(sched::ScheduleKind::k1F1B, 2, 4, 1);
  auto full = testing::uniform_costs(plan.shape.model_stages(), 1.0, 2.0);
  for (auto& c : full.stages) {
    c.output_bytes = 4096;
    c.param_bytes = 1 << 20;
  }
  auto half = full;
  for (auto& c : half.stages) {
    c.output_bytes /= 2;
    c.param_bytes /= 2;
  }
  SimOptions fp32, bf16;
  fp32.dp.replicas = bf16.dp.replicas = 2;
  bf16.precision = sched::Precision::kBf16;
  bf16.dp.reduce_dtype = sched::Precision::kBf16;
  EXPECT_EQ(to_chakra(plan, full, Cluster{}, bf16), to_chakra(plan, half, Cluster{}, fp32));
  EXPECT_NE(to_chakra(plan, full, Cluster{}, bf16), to_chakra(plan, full, Cluster{}, fp32));
}

TEST(Chakra, Deterministic) {
  const auto plan = plan_of(sched::ScheduleKind::k1F1B, 2, 4, 1);
  EXPECT_EQ(traces_of(plan, 2), traces_of(plan, 2));
}

void expect_error(const std::vector<ChakraFile>& files, const std::string& what) {
  try {
    (void)from_chakra(files);
    FAIL() << "no error, expected " << what;
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Chakra, MalformedTracesNameFileAndNode) {
  const auto plan = plan_of(sched::ScheduleKind::k1F1B, 2, 2, 1);
  const auto traces = traces_of(plan, 2);
  {
    auto files = files_of(traces);
    files[1].bytes.resize(files[1].bytes.size() - 3);
    expect_error(files, "t/pw.1.et: byte ");
  }
  {
    auto files = files_of(traces);
    files[0].bytes =
        "\x05"
        "abc";
    expect_error(files, "t/pw.0.et: byte 0: not a Chakra trace");
  }
  {
    // A node whose name is no action: "1F0" -> "1X0" (same length).
    auto files = files_of(traces);
    const auto at = files[1].bytes.find("1F0");
    ASSERT_NE(at, std::string::npos);
    files[1].bytes[at + 1] = 'X';
    expect_error(files, "t/pw.1.et: node 1 (id 1, byte ");
    expect_error(files, "name '1X0' is not a pipeline action");
  }
  {
    // A replica whose actions differ from its pipeline rank's.
    auto files = files_of(traces);
    files[3] = files[2];
    files[3].name = "t/pw.3.et";
    expect_error(files, "t/pw.3.et: node 0 (id 0, byte ");
  }
  {
    auto files = files_of(traces);
    files.pop_back();
    expect_error(files, "the metadata says 2 pipeline ranks, but there are 3 traces");
  }
}

}  // namespace
}  // namespace pipewright::sim
