// Mixed precision in the simulator (Note [Precision bytes] in sched/memory.hpp): p2p messages in
// the job's precision, DP gradient reductions in the reduce dtype, activation memory halved under
// bf16 while parameters, gradients and optimizer state stay fp32; exact nanoseconds and bytes on
// hand-derived pipelines. A profile of another precision is refused by stage_costs.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/parallel_model.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

using sched::Precision;
constexpr std::int64_t kMs = 1'000'000;

// 1 byte per ns, no latency.
Cluster one_gb_per_s() {
  Cluster c;
  c.intra_node = Link{0.0, 1.0};
  c.inter_node = c.intra_node;
  return c;
}

SimOptions options(Precision precision, Precision reduce = Precision::kFp32, int dp = 1) {
  SimOptions o;
  o.precision = precision;
  o.dp.reduce_dtype = reduce;
  o.dp.replicas = dp;
  return o;
}

// GPipe p = 2, m = 1, F 1 ms, B 2 ms, 1000-byte messages at 1 B/ns: F0 [0, 1] ms, SEND_F, F1,
// B1, SEND_B, B0: 6 ms + two messages, 1000 ns each in fp32 and 500 ns each in bf16.
TEST(Precision, P2pMessagesAreSixteenBit) {
  const auto plan = testing::gpipe(2, 1);
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 0, 1000);
  EXPECT_EQ(simulate(plan, costs, one_gb_per_s(), options(Precision::kFp32)).makespan_ns,
            6 * kMs + 2000);
  EXPECT_EQ(simulate(plan, costs, one_gb_per_s(), options(Precision::kBf16)).makespan_ns,
            6 * kMs + 1000);
  EXPECT_EQ(simulate(plan, costs, one_gb_per_s(), options(Precision::kFp16)).makespan_ns,
            6 * kMs + 1000);
  // A profile measured at bf16 has 16-bit message sizes already.
  auto measured = costs;
  measured.precision = Precision::kBf16;
  measured.stages[0].output_bytes = 500;
  EXPECT_EQ(simulate(plan, measured, one_gb_per_s(), options(Precision::kBf16)).makespan_ns,
            6 * kMs + 1000);
}

// One stage, dp = 2, GPipe m = 2: one 1000-byte bucket ready at 6 ms; the ring all-reduce of 2
// replicas sends 2 (n - 1) / n x bytes: 1000 ns in fp32, 500 ns with a bf16 reduce dtype. The
// compute precision alone does not change it (fp32 gradients).
TEST(Precision, DpGradientsInTheReduceDtype) {
  const auto plan = testing::gpipe(1, 2);
  auto costs = testing::uniform_costs(1, 1, 2, 0, 1000, 0);
  costs.stages[0].param_sizes_bytes = {1000};
  struct Case {
    Precision precision, reduce;
    std::int64_t reduce_ns;
  };
  for (const Case& c : {Case{Precision::kFp32, Precision::kFp32, 1000},
                        Case{Precision::kBf16, Precision::kFp32, 1000},
                        Case{Precision::kBf16, Precision::kBf16, 500},
                        Case{Precision::kFp32, Precision::kBf16, 500}}) {
    const auto r = simulate(plan, costs, one_gb_per_s(), options(c.precision, c.reduce, 2));
    EXPECT_EQ(r.makespan_ns, 6 * kMs + c.reduce_ns);
    EXPECT_EQ(r.per_rank[0].dp_comm_ns, c.reduce_ns);
    EXPECT_EQ(r.dp_wire_bytes_per_step, static_cast<double>(c.reduce_ns));
  }
}

// 1F1B p = 2, m = 4, SGD with momentum: static = params + grads + momentum, all fp32; bf16 halves
// the activations and adds the autocast copy (params / 2) to the peak.
TEST(Precision, MemoryByDtype) {
  const auto plan = testing::one_f_one_b(2, 4);
  const auto costs = testing::uniform_costs(2, 1, 2, 100, 1000, 8);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    SimOptions o = options(p);
    o.momentum = 0.9;
    const auto r = simulate(plan, costs, one_gb_per_s(), o);
    const bool half = p == Precision::kBf16;
    for (std::int32_t rank = 0; rank < 2; ++rank) {
      const auto& rr = r.per_rank[static_cast<std::size_t>(rank)];
      EXPECT_EQ(rr.static_memory_bytes, 3000);
      EXPECT_EQ(rr.autocast_cache_bytes, half ? 500 : 0);
      EXPECT_EQ(rr.peak_activation_bytes, (2 - rank) * (half ? 50 : 100));
      EXPECT_EQ(rr.peak_memory_bytes, 3000 + rr.autocast_cache_bytes + rr.peak_activation_bytes);
    }
  }
}

// Issue 47 item 4: the partitioner's stage memory (Note [Stage memory]) and the memory model
// (Note [Memory model]) keep the same bytes under bf16 autocast: the nodes' fp32 part at 4 bytes,
// the rest at 2, recompute's stage inputs at 2. For a 1F1B plan at dp 1 with plain SGD (no
// optimizer state or transient) each stage's estimate is exactly its rank's peak, with and
// without recompute, for the model and for one GPU of a TP group (Note [Autocast bytes per
// GPU]); in fp32 too. Plain halving was below it wherever a stage has a norm or a block.
TEST(Precision, PartitionStageMemoryIsTheRanksPeakUnderAutocast) {
  graph::GptSpec spec;
  spec.layers = 6;
  spec.hidden = 256;
  spec.heads = 4;
  spec.seq = 256;
  spec.vocab = 1000;
  spec.bytes_per_element = 4;
  const graph::Model gpt = graph::make_gpt(spec);
  ParallelModelSpec tp2;
  tp2.tp = 2;
  tp2.recompute = LayerRecompute::kSelective;
  int checked = 0;
  for (const graph::Model& model : {gpt, parallelize_model(gpt, tp2)}) {
    for (const auto& [precision, recompute] :
         {std::pair{Precision::kBf16, "none"}, std::pair{Precision::kBf16, "full"},
          std::pair{Precision::kFp32, "none"}, std::pair{Precision::kFp32, "full"}}) {
      sched::JobSpec job;
      job.pp = 4;
      job.microbatches = 8;
      job.precision = precision;
      job.recompute = sched::parse_recompute(recompute);
      graph::PartitionOptions po;
      po.stages = job.pp;
      po.optimizer_bytes_per_param_byte = 0;  // plain SGD
      po.recompute = job.recompute.any();
      po.activation_element_bytes = sched::element_bytes(precision);
      const graph::Partition part = graph::partition_model(model, po);
      const sched::CostTable costs = sched::costs_from_partition(model, part);
      const auto peaks =
          sched::peak_memory(sched::make_plan(job, &part), costs, sched::memory_options(job));
      ASSERT_EQ(peaks.size(), 4U);
      for (std::int32_t r = 0; r < 4; ++r) {
        const graph::StageInfo& st = part.graph.stages[static_cast<std::size_t>(r)];
        EXPECT_EQ(st.memory_bytes, peaks[static_cast<std::size_t>(r)].peak_bytes)
            << sched::to_string(precision) << " " << recompute << " stage " << r;
        // What plain halving gave: below the peak wherever a norm or a block is.
        const std::int64_t fp32 = graph::stage_activation_fp32_bytes(model, st);
        if (fp32 > 0 && precision == Precision::kBf16) {
          EXPECT_LT(graph::stage_memory_bytes(st.param_bytes, st.activation_bytes, 0,
                                              st.in_flight_microbatches, po,
                                              graph::stage_input_bytes(model, st)),
                    st.memory_bytes);
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 32);
}

TEST(Precision, StageCostsRefuseAProfileOfAnotherPrecision) {
  const std::string path = ::testing::TempDir() + "/pw_precision_profile.json";
  auto table = testing::uniform_costs(2, 1, 2, 100, 1000, 8);
  table.source = "executor";
  table.precision = Precision::kBf16;
  {
    std::ofstream out(path);
    out << sched::to_json(table);
  }
  sched::PlanShape shape = testing::gpipe(2, 1).shape;
  CostSources sources;
  sources.profile_path = path;
  sources.precision = Precision::kBf16;
  EXPECT_EQ(stage_costs(sources, shape).precision, Precision::kBf16);
  sources.precision = Precision::kFp32;
  try {
    (void)stage_costs(sources, shape);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("measured at precision bf16 but the job runs at fp32"), std::string::npos)
        << what;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pipewright::sim
