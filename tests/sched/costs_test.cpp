#include "pipewright/sched/costs.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/partition.hpp"

namespace pipewright::sched {
namespace {

CostTable sample_table() {
  CostTable t;
  t.source = "executor";
  t.compute_overhead_ms = 0.05;
  StageCost s0;
  s0.stage = 0;
  s0.forward_ms = 1.25;
  s0.backward_ms = 2.5;
  s0.param_bytes = 4096;
  s0.activation_bytes = 1024;
  s0.output_bytes = 256;
  s0.param_sizes_bytes = {1024, 3072};
  s0.forward_stats = KindStats{1.25, 1.0, 1.5, 16, {}, {}};
  StageCost s1 = s0;
  s1.stage = 1;
  s1.input_grad_ms = 1.0;
  s1.weight_grad_ms = 1.5;
  s1.weight_grad_keeps = 0.375;
  s1.param_sizes_bytes.clear();
  s1.forward_stats.reset();
  s1.weight_grad_stats = KindStats{1.5, 1.4, 1.6, 8, {}, {}};
  t.stages = {s0, s1};
  t.p2p = P2PCost{0.01, 12.5, std::nullopt, std::nullopt, std::nullopt};
  t.peak_memory = {{0, 123456}, {1, 654321}};
  t.data_parallel = {{0, 4, 1.0, 3840.0, 3840.5, 0.25}, {1, 4, 2.0, 3536.0, 3536.0, 0.5}};
  return t;
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

TEST(Costs, JsonRoundTripsExactly) {
  const CostTable t = sample_table();
  const std::string text = to_json(t);
  const CostTable back = parse_costs(text, "mem.json");
  EXPECT_EQ(back, t);
  EXPECT_EQ(to_json(back), text);  // deterministic bytes
}

TEST(Costs, DefaultSplitOfBackward) {
  StageCost s;
  s.backward_ms = 3.0;
  EXPECT_DOUBLE_EQ(s.input_grad_or_default_ms(), 1.5);
  EXPECT_DOUBLE_EQ(s.weight_grad_or_default_ms(), 1.5);
  s.input_grad_ms = 1.0;
  EXPECT_DOUBLE_EQ(s.weight_grad_or_default_ms(), 2.0);
}

TEST(Costs, LoadFromFileAndMissingFile) {
  const std::string path = ::testing::TempDir() + "/pw_costs_test.json";
  {
    std::ofstream out(path);
    out << to_json(sample_table());
  }
  EXPECT_EQ(load_costs(path), sample_table());
  std::remove(path.c_str());
  EXPECT_THROW((void)load_costs(path), InputError);
}

void expect_parse_error(const std::string& text, const std::string& needle) {
  try {
    (void)parse_costs(text, "prof.json");
    FAIL() << "expected ParseError mentioning " << needle;
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prof.json"), std::string::npos) << e.what();
  }
}

TEST(Costs, BadValuesNameTheJsonPointer) {
  const std::string good = to_json(sample_table());
  expect_parse_error(replace(good, "\"forward_ms\": 1.25", "\"forward_ms\": -1.0"),
                     "/stages/0/forward_ms");
  expect_parse_error(replace(good, "\"backward_ms\": 2.5", "\"backward_ms\": \"x\""),
                     "/stages/0/backward_ms");
  expect_parse_error(replace(good, "\"weight_grad_ms\": 1.5", "\"weight_grad_ms\": -0.5"),
                     "/stages/1/weight_grad_ms");
  expect_parse_error(replace(good, "\"weight_grad_keeps\": 0.375", "\"weight_grad_keeps\": 1.5"),
                     "/stages/1/weight_grad_keeps must be in [0, 1], got 1.5");
  expect_parse_error(replace(good, "\"param_bytes\": 4096", "\"param_bytes\": -4"),
                     "/stages/0/param_bytes");
  expect_parse_error(replace(good, "\"format\": \"pipewright-profile\"", "\"format\": \"x\""),
                     "/format");
  expect_parse_error(replace(good, "\"version\": 1", "\"version\": 7"), "/version");
  expect_parse_error(replace(good, "\"stage\": 1", "\"stage\": 5"), "/stages/1/stage");
  expect_parse_error(replace(good, "\"latency_ms\": 0.01", "\"latency_ms\": -2"),
                     "/p2p/latency_ms");
  expect_parse_error(replace(good, "\"peak_bytes\": 123456", "\"peak_bytes\": -1"),
                     "/peak_memory/0/peak_bytes");
  expect_parse_error(replace(good, "\"exposed_ms_per_step\": 0.25", "\"exposed_ms_per_step\": -1"),
                     "/data_parallel/0/exposed_ms_per_step");
  expect_parse_error(
      replace(good, "\"wire_bytes_per_step\": 3840.5", "\"wire_bytes_per_step\": \"x\""),
      "/data_parallel/0/wire_bytes_per_step");
  expect_parse_error(replace(good, "\"samples\": 16", "\"samples\": 1.5"),
                     "/stages/0/stats/forward/samples");
  expect_parse_error(replace(good, "3072", "3071"), "/stages/0/param_sizes_bytes");
  expect_parse_error("{\"format\": \"pipewright-profile\"", "invalid JSON");
  expect_parse_error("{\"format\": \"pipewright-profile\", \"version\": 1}",
                     "prof.json:1:1: at (root): missing required field \"stages\"");
}

TEST(Costs, ValidateRejectsNaN) {
  CostTable t = sample_table();
  t.stages[1].forward_ms = std::numeric_limits<double>::quiet_NaN();
  try {
    validate(t, "table");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("/stages/1/forward_ms"), std::string::npos);
  }
}

// The fields executor profiles gained for the simulator's fidelity (docs/simulator.md):
// optimizer time and stats, 21 quantiles, the p2p distribution, comm overhead, runtime memory.
TEST(Costs, FidelityFieldsRoundTripAndAreChecked) {
  CostTable t = sample_table();
  t.comm_overhead_ms = 0.125;
  t.runtime_memory_bytes = 175880960;
  std::vector<double> q;
  for (int k = 0; k <= 20; ++k) q.push_back(0.5 + 0.05 * k);
  t.stages[0].optimizer_ms = 0.75;
  t.stages[0].optimizer_stats = KindStats{0.75, 0.7, 0.8, 10, q, {}};
  t.p2p = P2PCost{0, 0, 0.25, KindStats{0.25, 0.2, 0.5, 40, q, {}}, std::nullopt};
  t.cores_per_node = 2;
  t.nodes = 2;
  t.stages[0].optimizer_stats->mean_ms = 0.8125;
  const std::string text = to_json(t);
  EXPECT_NE(text.find("\"cores_per_node\": 2"), std::string::npos);
  EXPECT_NE(text.find("\"nodes\": 2"), std::string::npos);
  EXPECT_DOUBLE_EQ(t.stages[0].optimizer_stats->mean_or_estimate_ms(), 0.8125);
  EXPECT_DOUBLE_EQ(t.p2p->stats->mean_or_estimate_ms(), 1.0);  // trapezoid of 0.5..1.5
  EXPECT_EQ(parse_costs(text, "t.json"), t);
  EXPECT_EQ(to_json(parse_costs(text, "t.json")), text);
  // Quantiles must be 21 ascending numbers; overheads must be >= 0.
  auto bad = t;
  bad.stages[0].optimizer_stats->quantiles_ms[3] = 0.1;
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  bad = t;
  bad.p2p->stats->quantiles_ms.pop_back();
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  bad = t;
  bad.cores_per_node = -1;
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  bad = t;
  bad.nodes = -1;
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  // p2p_uses_core: written only when false, read back, must be a boolean.
  EXPECT_EQ(text.find("p2p_uses_core"), std::string::npos);
  auto mpi = t;
  mpi.p2p_uses_core = false;
  const std::string mpi_text = to_json(mpi);
  EXPECT_NE(mpi_text.find("\"p2p_uses_core\": false"), std::string::npos);
  EXPECT_EQ(parse_costs(mpi_text, "t.json"), mpi);
  std::string wrong = mpi_text;
  wrong.replace(wrong.find("false"), 5, "\"no\"");
  try {
    (void)parse_costs(wrong, "w.json");
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("at /p2p_uses_core: expected true or false, got \"no\""),
              std::string::npos)
        << e.what();
  }
  bad = t;
  bad.comm_overhead_ms = -1;
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  // Issue 47: the send-call time taken out of the batch overhead and the data-parallel sync's
  // work: written when not 0, read back, >= 0; profiles without them (before) read as 0.
  EXPECT_EQ(text.find("comm_send_ms"), std::string::npos);
  EXPECT_EQ(text.find("dp_sync_compute_ms"), std::string::npos);
  auto split = t;
  split.comm_send_ms = 2.5;
  split.dp_sync_compute_ms = 1.25;
  const std::string split_text = to_json(split);
  EXPECT_NE(split_text.find("\"comm_send_ms\": 2.5"), std::string::npos);
  EXPECT_NE(split_text.find("\"dp_sync_compute_ms\": 1.25"), std::string::npos);
  EXPECT_EQ(parse_costs(split_text, "t.json"), split);
  EXPECT_EQ(parse_costs(text, "t.json").comm_send_ms, 0.0);
  // The measured send calls travel inside p2p ("send_call"), checked like the other stats.
  split.p2p = P2PCost{};
  split.p2p->per_message_ms = 2.0;
  split.p2p->send_call_stats = KindStats{0.15, 0.1, 0.3, 12, {}, 0.2};
  const std::string call_text = to_json(split);
  EXPECT_NE(call_text.find("\"send_call\""), std::string::npos);
  EXPECT_EQ(parse_costs(call_text, "t.json"), split);
  bad = split;
  bad.p2p->send_call_stats->median_ms = -0.1;
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  bad = split;
  bad.comm_send_ms = -1;
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  bad = split;
  bad.dp_sync_compute_ms = -0.5;
  EXPECT_THROW((void)parse_costs(to_json(bad), "bad.json"), ParseError);
  // Correlations (Note [Correlated sampling]): written when not 0, read back, in [0, 1] with
  // rank_step_correlation >= step_correlation.
  EXPECT_EQ(text.find("correlation"), std::string::npos);
  auto corr = t;
  corr.step_correlation = 0.25;
  corr.rank_step_correlation = 0.5;
  const std::string corr_text = to_json(corr);
  EXPECT_EQ(parse_costs(corr_text, "t.json"), corr);
  const auto expect_error = [](const std::string& json_text, const std::string& what) {
    try {
      (void)parse_costs(json_text, "c.json");
      FAIL() << "no error for " << what;
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find("c.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(
      replace(corr_text, "\"rank_step_correlation\": 0.5", "\"rank_step_correlation\": 0.125"),
      "/rank_step_correlation must be in [/step_correlation, 1]");
  expect_error(
      replace(corr_text, "\"rank_step_correlation\": 0.5", "\"rank_step_correlation\": 1.5"),
      "/rank_step_correlation");
  expect_error(replace(corr_text, "\"step_correlation\": 0.25", "\"step_correlation\": -0.25"),
               "c.json:145:23: at /step_correlation: must be a finite number >= 0, got -0.25");
}

TEST(Costs, FromPartitionSumsStagesAndKeepsParameterSizes) {
  graph::GptSpec spec;
  spec.layers = 4;
  spec.hidden = 64;
  spec.heads = 4;
  spec.seq = 16;
  spec.vocab = 100;
  const auto model = graph::make_gpt(spec);
  graph::PartitionOptions po;
  po.stages = 3;
  const auto part = graph::partition_model(model, po);
  const auto t = costs_from_partition(model, part);
  ASSERT_EQ(t.stages.size(), 3u);
  std::int64_t params = 0;
  for (const auto& n : model.nodes) params += n.cost.param_bytes;
  std::int64_t total = 0;
  for (std::size_t s = 0; s < 3; ++s) {
    const auto& info = part.graph.stages[s];
    EXPECT_DOUBLE_EQ(t.stages[s].forward_ms, info.forward_ms);
    EXPECT_EQ(t.stages[s].activation_bytes, info.activation_bytes);
    std::int64_t sum = 0;
    for (auto b : t.stages[s].param_sizes_bytes) sum += b;
    EXPECT_EQ(sum, t.stages[s].param_bytes);
    total += sum;
  }
  EXPECT_EQ(total, params);
}

}  // namespace
}  // namespace pipewright::sched
