#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph_test_util.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"

namespace pipewright::graph {
namespace {

using ::testing::HasSubstr;
using testing::message_of;

TEST(Roofline, TakesTheSlowerOfComputeAndMemory) {
  const DeviceModel dev{100.0, 1000.0};
  EXPECT_DOUBLE_EQ(roofline_ms(1e12, 0.0, dev), 10.0);  // 1e12 / 1e14 s
  EXPECT_DOUBLE_EQ(roofline_ms(0.0, 1e9, dev), 1.0);    // 1e9 / 1e12 s
  EXPECT_DOUBLE_EQ(roofline_ms(1e12, 1e9, dev), 10.0);
}

TEST(MakeMlp, SequentialOrderAndShapes) {
  MlpSpec spec;
  spec.sizes = {8, 16, 2};
  spec.micro_batch_size = 4;
  const Model m = make_mlp(spec);
  ASSERT_EQ(m.nodes.size(), 3u);
  EXPECT_EQ(m.nodes[0].name, "0");
  EXPECT_EQ(m.nodes[0].kind, NodeKind::kLinear);
  EXPECT_EQ(m.nodes[0].params, (std::map<std::string, std::int64_t>{
                                   {"bias", 1}, {"in_features", 8}, {"out_features", 16}}));
  EXPECT_EQ(m.nodes[1].name, "1");
  EXPECT_EQ(m.nodes[1].kind, NodeKind::kRelu);
  EXPECT_EQ(m.nodes[2].name, "2");
  EXPECT_EQ(m.nodes[2].params.at("in_features"), 16);
  EXPECT_EQ(m.nodes[2].params.at("out_features"), 2);
  EXPECT_EQ(m.input, (ModelInput{"float32", {8}}));
  EXPECT_EQ(m.micro_batch_size, 4);
  EXPECT_EQ(m.edges.size(), 2u);
  // Linear(8, 16): (8*16 + 16) float32 parameters; keeps its 4x8 input; emits 4x16.
  EXPECT_EQ(m.nodes[0].cost.param_bytes, (8 * 16 + 16) * 4);
  EXPECT_EQ(m.nodes[0].cost.activation_bytes, 4 * 8 * 4);
  EXPECT_EQ(m.nodes[0].cost.output_bytes, 4 * 16 * 4);
  const double bytes = (8 * 16 + 16 + 4 * 8 + 4 * 16) * 4.0;
  EXPECT_DOUBLE_EQ(m.nodes[0].cost.forward_ms, roofline_ms(2.0 * 4 * 8 * 16, bytes, spec.device));
  EXPECT_DOUBLE_EQ(m.nodes[0].cost.backward_ms,
                   *m.nodes[0].cost.input_grad_ms + *m.nodes[0].cost.weight_grad_ms);
  spec.activation = NodeKind::kGelu;
  spec.sizes = {3, 5, 5, 1};
  const Model g = make_mlp(spec);
  ASSERT_EQ(g.nodes.size(), 5u);
  EXPECT_EQ(g.nodes[3].kind, NodeKind::kGelu);
  EXPECT_EQ(g.nodes[4].kind, NodeKind::kLinear);
  EXPECT_EQ(parse_model(to_json(g), "rt"), g);
}

TEST(MakeGpt, LayersAndMegatronFlops) {
  GptSpec spec;
  spec.layers = 4;
  spec.hidden = 4096;
  spec.heads = 32;
  spec.seq = 2048;
  spec.vocab = 50257;
  spec.micro_batch_size = 1;
  const Model m = make_gpt(spec);
  ASSERT_EQ(m.nodes.size(), 4u + 3u);
  EXPECT_EQ(m.nodes.front().name, "embed");
  EXPECT_EQ(m.nodes.front().kind, NodeKind::kEmbedding);
  EXPECT_EQ(m.nodes.front().params.at("max_positions"), 2048);
  EXPECT_EQ(m.nodes[1].kind, NodeKind::kTransformerBlock);
  EXPECT_EQ(m.nodes[1].params.at("ffn_hidden"), 4 * 4096);
  EXPECT_EQ(m.nodes[5].name, "ln_f");
  EXPECT_EQ(m.nodes[5].kind, NodeKind::kLayerNorm);
  EXPECT_EQ(m.nodes[6].name, "head");
  EXPECT_EQ(m.nodes[6].params.at("out_features"), 50257);
  EXPECT_EQ(m.nodes[6].params.at("bias"), 0);
  EXPECT_EQ(m.input, (ModelInput{"int64", {2048}}));
  const double B = 1, S = 2048, H = 4096;
  const NodeCost& block = m.nodes[1].cost;
  // This block is compute-bound on the default device, so forward = FLOPs / peak exactly.
  const double fwd_flops = 24 * B * S * H * H + 4 * B * S * S * H;
  EXPECT_DOUBLE_EQ(block.forward_ms, fwd_flops / (spec.device.tflops * 1e12) * 1e3);
  EXPECT_NEAR(block.backward_ms, 2 * block.forward_ms, 1e-9);
  EXPECT_EQ(block.param_bytes, static_cast<std::int64_t>((12 * H * H + 13 * H) * 2));
  EXPECT_EQ(block.activation_bytes, static_cast<std::int64_t>(S * B * H * (34 + 5 * 32 * S / H)));
  EXPECT_EQ(block.output_bytes, static_cast<std::int64_t>(B * S * H * 2));
}

TEST(MakeGpt, BadSpecs) {
  GptSpec spec;
  spec.hidden = 100;
  spec.heads = 3;
  EXPECT_THAT(message_of<ConfigError>([&] { (void)make_gpt(spec); }),
              HasSubstr("--hidden (100) must be divisible by --heads (3)"));
  spec = GptSpec{};
  spec.layers = 0;
  EXPECT_THROW((void)make_gpt(spec), ConfigError);
  spec = GptSpec{};
  spec.device.tflops = -1;
  EXPECT_THROW((void)make_gpt(spec), ConfigError);
  MlpSpec mlp;
  mlp.sizes = {8};
  EXPECT_THROW((void)make_mlp(mlp), ConfigError);
  mlp.sizes = {8, 0};
  EXPECT_THROW((void)make_mlp(mlp), ConfigError);
  mlp.sizes = {8, 2};
  mlp.activation = NodeKind::kLayerNorm;
  EXPECT_THROW((void)make_mlp(mlp), ConfigError);
}

}  // namespace
}  // namespace pipewright::graph
