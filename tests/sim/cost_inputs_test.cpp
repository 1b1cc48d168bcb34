#include "pipewright/sim/cost_inputs.hpp"

#include <gtest/gtest.h>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/partition.hpp"

namespace pipewright::sim {
namespace {

graph::Model small_gpt(std::int32_t layers) {
  graph::GptSpec spec;
  spec.layers = layers;
  spec.hidden = 64;
  spec.heads = 4;
  spec.seq = 16;
  spec.vocab = 100;
  return graph::make_gpt(spec);
}

TEST(CostInputs, WhatIfOneValueOrOnePerStage) {
  WhatIfCosts w;
  w.forward_ms = {1.0};
  w.backward_ms = {2.0, 3.0, 4.0};
  w.weight_ms = {0.5};
  w.activation_bytes = 10;
  const auto t = what_if_costs(w, 3);
  ASSERT_EQ(t.stages.size(), 3u);
  EXPECT_DOUBLE_EQ(t.stages[2].forward_ms, 1.0);
  EXPECT_DOUBLE_EQ(t.stages[2].backward_ms, 4.0);
  EXPECT_DOUBLE_EQ(*t.stages[2].input_grad_ms, 3.5);
  EXPECT_DOUBLE_EQ(*t.stages[2].weight_grad_ms, 0.5);
  EXPECT_EQ(t.stages[1].activation_bytes, 10);
}

TEST(CostInputs, WhatIfErrorsNameTheFlag) {
  auto expect = [](WhatIfCosts w, const std::string& needle) {
    try {
      (void)what_if_costs(w, 3);
      FAIL() << needle;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  WhatIfCosts w;
  w.forward_ms = {1.0, 2.0};
  w.backward_ms = {1.0};
  expect(w, "--forward-ms needs one value or one per stage (3), got 2");
  w.forward_ms = {-1.0};
  expect(w, "--forward-ms must be finite and >= 0");
  w.forward_ms = {1.0};
  w.weight_ms = {2.0};
  expect(w, "--weight-ms (2) exceeds --backward-ms (1)");
  w.weight_ms.clear();
  w.backward_ms.clear();
  expect(w, "--backward-ms is required");
}

graph::Partition balanced(const graph::Model& model, int stages) {
  graph::PartitionOptions po;
  po.stages = stages;
  return graph::partition_model(model, po);
}

TEST(CostInputs, TransferProfileSpreadsMeasuredTimesByTheModelsEstimates) {
  const auto model = small_gpt(6);
  const auto p2 = balanced(model, 2), p4 = balanced(model, 4);
  // A "measured" profile: every stage ran exactly 3x its estimate (F) and 2x (B), optimizer 1 ms
  // per MB of parameters, with a relative spread of +-10%.
  sched::CostTable measured = sched::costs_from_partition(model, p2);
  measured.source = "executor";
  measured.comm_overhead_ms = 0.2;
  measured.comm_send_ms = 1.5;
  measured.dp_sync_compute_ms = 0.7;
  measured.runtime_memory_bytes = 1000;
  measured.nodes = 1;
  measured.p2p = sched::P2PCost{0, 0, 0.3, std::nullopt, std::nullopt};
  for (auto& c : measured.stages) {
    c.forward_ms *= 3;
    c.backward_ms *= 2;
    c.activation_bytes *= 7;  // measured activations: 7x the model's formulas
    c.input_grad_ms.reset();
    c.weight_grad_ms.reset();
    c.optimizer_ms = static_cast<double>(c.param_bytes) / 1e6;
    c.forward_stats =
        sched::KindStats{c.forward_ms, 0.9 * c.forward_ms, 1.1 * c.forward_ms, 10, {}, {}};
    c.forward_stats->mean_ms = 1.2 * c.forward_ms;
  }
  const auto t = transfer_profile(model, p2, measured, p4);
  const auto est = sched::costs_from_partition(model, p4);
  ASSERT_EQ(t.stages.size(), 4u);
  double opt = 0, opt_measured = 0;
  for (std::size_t s = 0; s < 4; ++s) {
    // Uniform scale factors transfer exactly.
    EXPECT_NEAR(t.stages[s].forward_ms, 3 * est.stages[s].forward_ms,
                1e-9 * t.stages[s].forward_ms);
    EXPECT_NEAR(t.stages[s].backward_ms, 2 * est.stages[s].backward_ms,
                1e-9 * t.stages[s].backward_ms);
    ASSERT_TRUE(t.stages[s].forward_stats.has_value());
    EXPECT_NEAR(t.stages[s].forward_stats->p90_ms, 1.1 * t.stages[s].forward_ms, 1e-9);
    ASSERT_TRUE(t.stages[s].forward_stats->mean_ms.has_value());
    EXPECT_NEAR(*t.stages[s].forward_stats->mean_ms, 1.2 * t.stages[s].forward_ms, 1e-9);
    EXPECT_FALSE(t.stages[s].backward_stats.has_value());  // not measured
    EXPECT_EQ(t.stages[s].output_bytes, est.stages[s].output_bytes);
    EXPECT_NEAR(static_cast<double>(t.stages[s].activation_bytes),
                7.0 * static_cast<double>(est.stages[s].activation_bytes), 1.0);
    opt += *t.stages[s].optimizer_ms;
  }
  for (const auto& c : measured.stages) opt_measured += *c.optimizer_ms;
  EXPECT_NEAR(opt, opt_measured, 1e-9);  // optimizer time moves with the parameters
  EXPECT_DOUBLE_EQ(t.comm_overhead_ms, 0.2);
  EXPECT_DOUBLE_EQ(t.comm_send_ms, 1.5);
  EXPECT_DOUBLE_EQ(t.dp_sync_compute_ms, 0.7);
  EXPECT_EQ(t.runtime_memory_bytes, 1000);
  EXPECT_EQ(t.nodes, 1);  // where it was measured
  ASSERT_TRUE(t.p2p.has_value());
  EXPECT_DOUBLE_EQ(*t.p2p->per_message_ms, 0.3);
  EXPECT_TRUE(t.peak_memory.empty());
  // The profile must belong to the `from` partition.
  EXPECT_THROW((void)transfer_profile(model, p4, measured, p2), ConfigError);
}

// Note [Measured bytes in transfers]: the model says 2-byte parameters and micro batch 1; the
// "executor" ran fp32 at micro batch 4 (parameters 2x, messages 8x) and recorded each node's
// parameters as two tensors (3/4 and 1/4 of the node's bytes). The transfer to four stages
// gives every new stage its own nodes' measured tensors and 8x the model's message sizes.
TEST(CostInputs, TransferProfileTakesBytesFromTheProfile) {
  const auto model = small_gpt(6);
  const auto p2 = balanced(model, 2), p4 = balanced(model, 4);
  sched::CostTable measured = sched::costs_from_partition(model, p2);
  measured.source = "executor";
  auto tensors = [&](int node) {
    const std::int64_t b = 2 * model.nodes[static_cast<std::size_t>(node)].cost.param_bytes;
    return b > 0 ? std::vector<std::int64_t>{b - b / 4, b / 4} : std::vector<std::int64_t>{};
  };
  for (auto& c : measured.stages) {
    c.param_bytes *= 2;
    c.output_bytes *= 8;
    c.param_sizes_bytes.clear();
    for (int n : p2.graph.stages[static_cast<std::size_t>(c.stage)].nodes)
      for (auto b : tensors(n)) c.param_sizes_bytes.push_back(b);
  }
  const auto t = transfer_profile(model, p2, measured, p4);
  const auto est = sched::costs_from_partition(model, p4);
  ASSERT_EQ(t.stages.size(), 4u);
  for (std::size_t s = 0; s < 4; ++s) {
    std::vector<std::int64_t> want;
    for (int n : p4.graph.stages[s].nodes)
      for (auto b : tensors(n)) want.push_back(b);
    EXPECT_EQ(t.stages[s].param_sizes_bytes, want) << "stage " << s;
    EXPECT_EQ(t.stages[s].param_bytes, 2 * est.stages[s].param_bytes);
    EXPECT_EQ(t.stages[s].output_bytes, 8 * est.stages[s].output_bytes);
  }
  // Without tensor sizes the stage bytes are spread by the model's shares.
  for (auto& c : measured.stages) c.param_sizes_bytes.clear();
  const auto u = transfer_profile(model, p2, measured, p4);
  for (std::size_t s = 0; s < 4; ++s)
    EXPECT_NEAR(static_cast<double>(u.stages[s].param_bytes),
                2.0 * static_cast<double>(est.stages[s].param_bytes), 1.0);
}

// Note [Input gradients of first stages]: the measured first stage has I ~ 0 and W = its whole
// backward; its layers moved to a middle stage take the other stage's I / B and W / B (here
// 0.7 and 1.0), and the new first stage takes the measured first stage's ratios (0.01, 1.1).
TEST(CostInputs, TransferProfileGivesFirstStageLayersTheirOwnInputGradient) {
  const auto model = small_gpt(6);
  const auto p2 = balanced(model, 2), p4 = balanced(model, 4);
  sched::CostTable measured = sched::costs_from_partition(model, p2);
  const double ri[] = {0.01, 0.7}, rw[] = {1.1, 1.0};
  for (std::size_t s = 0; s < 2; ++s) {
    auto& c = measured.stages[s];
    c.backward_ms *= 2;
    c.input_grad_ms = ri[s] * c.backward_ms;
    c.weight_grad_ms = rw[s] * c.backward_ms;
    c.backward_stats =
        sched::KindStats{c.backward_ms, 0.9 * c.backward_ms, 1.2 * c.backward_ms, 10, {}, {}};
    c.input_grad_stats = c.backward_stats->scaled(ri[s]);
    c.weight_grad_stats = c.backward_stats->scaled(rw[s]);
  }
  const auto t = transfer_profile(model, p2, measured, p4);
  ASSERT_EQ(t.stages.size(), 4u);
  for (std::size_t s = 0; s < 4; ++s) {
    const auto& c = t.stages[s];
    const double b = c.backward_ms;
    const double want_i = s == 0 ? 0.01 : 0.7, want_w = s == 0 ? 1.1 : 1.0;
    ASSERT_TRUE(c.input_grad_ms && c.weight_grad_ms) << "stage " << s;
    // Within 2%: I, W and B are spread over a stage's layers by the model's own per-layer
    // estimates of each, whose ratios differ a little from layer to layer.
    EXPECT_NEAR(*c.input_grad_ms, want_i * b, 0.02 * want_i * b) << "stage " << s;
    EXPECT_NEAR(*c.weight_grad_ms, want_w * b, 0.02 * want_w * b) << "stage " << s;
    ASSERT_TRUE(c.input_grad_stats.has_value()) << "stage " << s;
    EXPECT_NEAR(c.input_grad_stats->p90_ms, 1.2 * *c.input_grad_ms, 1e-9 * b) << "stage " << s;
  }
}

}  // namespace
}  // namespace pipewright::sim
