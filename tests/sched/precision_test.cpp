// Mixed precision in the memory model and the profile format (Note [Precision bytes] in
// sched/memory.hpp): exact bytes of fp32 and bf16 on a small job; a profile's precision round
// trips, defaults to fp32 and is checked against the job's.
#include <gtest/gtest.h>

#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/memory.hpp"

namespace pipewright::sched {
namespace {

constexpr std::int64_t kParams = 1000;
constexpr std::int64_t kActivations = 100;
constexpr std::int64_t kOutput = 8;

CostTable costs(int stages, Precision precision = Precision::kFp32) {
  CostTable t;
  t.source = "test";
  t.precision = precision;
  for (int s = 0; s < stages; ++s) {
    StageCost c;
    c.stage = s;
    c.forward_ms = 1;
    c.backward_ms = 2;
    c.param_bytes = kParams;
    c.activation_bytes = kActivations;
    c.output_bytes = kOutput;
    t.stages.push_back(c);
  }
  return t;
}

JobSpec job_1f1b(Precision precision) {
  JobSpec j;
  j.pp = 2;
  j.microbatches = 4;
  // SGD with momentum steps in place: no Note [Optimizer transient] outgrows the activations.
  j.optimizer = Optimizer::kSgd;
  j.momentum = 0.9;
  j.precision = precision;
  return j;
}

TEST(Precision, BytesAtPrecision) {
  EXPECT_EQ(bytes_at_precision(100, Precision::kFp32, Precision::kBf16), 50);
  EXPECT_EQ(bytes_at_precision(100, Precision::kFp32, Precision::kFp16), 50);
  EXPECT_EQ(bytes_at_precision(100, Precision::kBf16, Precision::kBf16), 100);
  EXPECT_EQ(bytes_at_precision(100, Precision::kBf16, Precision::kFp32), 200);
}

// 1F1B p = 2, m = 4, Adam: rank r holds 2 - r microbatches. bf16 keeps parameters, gradients
// and both moments in fp32 (4 x params), halves the activations and adds the autocast copy of
// the parameters (params / 2).
TEST(Precision, Bf16HalvesActivationsAndAddsTheAutocastCopy) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    const JobSpec job = job_1f1b(p);
    const auto mem = peak_memory(make_plan(job, nullptr), costs(2), memory_options(job));
    ASSERT_EQ(mem.size(), 2u);
    const bool half = p != Precision::kFp32;
    for (int r = 0; r < 2; ++r) {
      const auto& m = mem[static_cast<std::size_t>(r)];
      EXPECT_EQ(m.static_bytes, 3 * kParams) << to_string(p);
      EXPECT_EQ(m.autocast_cache_bytes, half ? kParams / 2 : 0) << to_string(p);
      EXPECT_EQ(m.peak_activation_microbatches, 2 - r);
      EXPECT_EQ(m.peak_activation_bytes, (2 - r) * (half ? kActivations / 2 : kActivations));
      EXPECT_EQ(m.peak_bytes, m.static_bytes + m.autocast_cache_bytes + m.peak_activation_bytes);
    }
  }
}

// A table measured at bf16 (an executor profile of a bf16 run) is already 16-bit.
TEST(Precision, ProfileAtTheJobsPrecisionIsNotScaledAgain) {
  const JobSpec job = job_1f1b(Precision::kBf16);
  const auto mem =
      peak_memory(make_plan(job, nullptr), costs(2, Precision::kBf16), memory_options(job));
  EXPECT_EQ(mem[0].peak_activation_bytes, 2 * kActivations);
  EXPECT_EQ(mem[0].autocast_cache_bytes, kParams / 2);  // parameters are fp32 in every profile
}

// Recompute keeps the producer's output, 16-bit under bf16.
TEST(Precision, RecomputeKeepsSixteenBitInputs) {
  JobSpec job = job_1f1b(Precision::kBf16);
  job.recompute = parse_recompute("full");
  const auto mem = peak_memory(make_plan(job, nullptr), costs(2), memory_options(job));
  EXPECT_EQ(mem[1].peak_activation_bytes, kOutput / 2 + kActivations / 2);
}

// Note [Autocast bytes]: the fp32 part of the kept activations does not shrink under bf16.
TEST(Precision, ActivationBytesKeepTheirFp32Part) {
  EXPECT_EQ(activation_bytes_at_precision(100, 20, Precision::kFp32, Precision::kBf16), 60);
  EXPECT_EQ(activation_bytes_at_precision(100, 0, Precision::kFp32, Precision::kBf16), 50);
  EXPECT_EQ(activation_bytes_at_precision(100, 100, Precision::kFp32, Precision::kFp16), 100);
  EXPECT_EQ(activation_bytes_at_precision(100, 20, Precision::kBf16, Precision::kBf16), 100);
  EXPECT_EQ(activation_bytes_at_precision(60, 20, Precision::kBf16, Precision::kFp32), 100);
  EXPECT_EQ(activation_bytes_at_precision(100, 500, Precision::kFp32, Precision::kBf16), 100);
  CostTable t = costs(2);
  t.stages[0].activation_fp32_bytes = 40;
  const JobSpec job = job_1f1b(Precision::kBf16);
  const auto mem = peak_memory(make_plan(job, nullptr), t, memory_options(job));
  EXPECT_EQ(mem[0].peak_activation_bytes, 2 * (40 + (kActivations - 40) / 2));  // 2 in flight
  EXPECT_EQ(mem[1].peak_activation_bytes, kActivations / 2);
  // A table that says so round-trips the field; more fp32 bytes than bytes is a ParseError.
  EXPECT_EQ(parse_costs(to_json(t), "t.json"), t);
  t.stages[1].activation_fp32_bytes = kActivations + 1;
  EXPECT_THROW((void)parse_costs(to_json(t), "t.json"), ParseError);
}

// The bytes pinned on the bundled generators' models (graph::autocast_fp32_bytes by kind): an
// MLP's linears and ReLUs keep everything 16-bit; a GPT's embedding (token ids), final layer
// norm and 4/34 of each block stay fp32.
TEST(Precision, ModelTablesCarryWhatAutocastKeepsInFp32) {
  graph::MlpSpec mlp;
  mlp.sizes = {256, 1024, 1024, 256};
  mlp.micro_batch_size = 4;
  mlp.bytes_per_element = 4;
  const graph::Model m = graph::make_mlp(mlp);
  graph::PartitionOptions po;
  po.stages = 2;
  const CostTable tm = costs_from_partition(m, graph::partition_model(m, po));
  for (const StageCost& c : tm.stages) {
    EXPECT_GT(c.activation_bytes, 0);
    EXPECT_EQ(c.activation_fp32_bytes, 0);
  }
  graph::GptSpec gpt;
  gpt.layers = 2;
  gpt.hidden = 64;
  gpt.heads = 4;
  gpt.seq = 32;
  gpt.vocab = 128;
  gpt.micro_batch_size = 4;
  gpt.bytes_per_element = 4;
  const graph::Model g = graph::make_gpt(gpt);
  po.stages = 1;
  const CostTable tg = costs_from_partition(g, graph::partition_model(g, po));
  // embed 128 tokens x 8 bytes; 2 blocks of 128 x 64 x 44 x 2 bytes (Korthikanti, 4-byte
  // elements), 4/34 of each; ln_f 128 x 64 x 4; the head (a linear) none.
  const std::int64_t block = 128 * 64 * 44 * 2;
  const std::int64_t fp32 = 128 * 8 + 2 * (block / 34 * 4 + block % 34 * 4 / 34) + 128 * 64 * 4;
  ASSERT_EQ(tg.stages.size(), 1u);
  EXPECT_EQ(tg.stages[0].activation_fp32_bytes, fp32);
  JobSpec job = job_1f1b(Precision::kBf16);
  job.pp = 1;
  const auto mem = peak_memory(make_plan(job, nullptr), tg, memory_options(job));
  const std::int64_t all = tg.stages[0].activation_bytes;
  ASSERT_EQ(mem[0].peak_activation_microbatches, 1);  // 1F1B at pp 1: F, B, F, B, ...
  EXPECT_EQ(mem[0].peak_activation_bytes, fp32 + (all - fp32) / 2);
}

TEST(Precision, ProfileRecordsItsPrecision) {
  CostTable t = costs(1, Precision::kBf16);
  t.source = "executor";
  const std::string text = to_json(t);
  EXPECT_NE(text.find("\"precision\": \"bf16\""), std::string::npos) << text;
  EXPECT_EQ(parse_costs(text, "p.json"), t);
  // Files written before the field existed were measured in fp32.
  std::string old = text;
  old.erase(old.find("  \"precision\": \"bf16\",\n"),
            std::string("  \"precision\": \"bf16\",\n").size());
  EXPECT_EQ(parse_costs(old, "old.json").precision, Precision::kFp32);
  std::string bad = text;
  bad.replace(bad.find("\"bf16\""), 6, "\"int8\"");
  try {
    (void)parse_costs(bad, "bad.json");
    ADD_FAILURE();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("/precision"), std::string::npos) << e.what();
  }
}

TEST(Precision, ProfileOfAnotherPrecisionIsRefused) {
  const CostTable t = costs(1, Precision::kBf16);
  check_profile_precision(t, "p.json", Precision::kBf16);
  try {
    check_profile_precision(t, "p.json", Precision::kFp32);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("profile p.json was measured at precision bf16 but the job runs at fp32"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace pipewright::sched
