#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph_test_util.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/graph/render.hpp"

namespace pipewright::graph {
namespace {

using ::testing::HasSubstr;
using testing::message_of;
using ::testing::Not;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

PartitionOptions three_stages() {
  PartitionOptions options;
  options.stages = 3;
  return options;
}

Model tricky_model() {
  Model m = testing::chain_model({1, 2, 3, 4});
  m.name = "a \"quoted\" model";
  m.nodes[1].name = "evil\"name\\n<b>";
  m.nodes[2].name = "line\nbreak";
  m.edges.push_back(ModelEdge{0, 0, 3, 1});  // a skip into input 1
  validate_model(m);
  return m;
}

TEST(Render, EscapesEveryLabel) {
  EXPECT_EQ(dot_escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(dot_escape(std::string("x\x01y", 3)), "x?y");
  const std::string dot = render_model_dot(tricky_model(), nullptr);
  EXPECT_THAT(dot, HasSubstr("evil\\\"name\\\\n<b>"));
  EXPECT_THAT(dot, HasSubstr("line\\nbreak"));
  EXPECT_THAT(dot, HasSubstr("digraph \"a \\\"quoted\\\" model\""));
  EXPECT_THAT(dot, Not(HasSubstr("cluster")));
}

TEST(Render, OneClusterPerStageAndBytesOnCutEdges) {
  const Model m = tricky_model();
  const Partition p = make_partition(m, {0, 0, 1, 2}, three_stages(), "custom");
  const std::string dot = render_model_dot(m, &p);
  EXPECT_EQ(count(dot, "subgraph cluster_stage"), 3u);
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_stage0 {"));
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_stage2 {"));
  // n1 -> n2 crosses stage 0 -> 1 carrying n1's 101 output bytes; n0 -> n3 skips to stage 2.
  EXPECT_THAT(dot, HasSubstr("n1 -> n2 [label=\"101 B\""));
  EXPECT_THAT(dot, HasSubstr("n0 -> n3 [label=\"out 0 -> in 1\\n100 B\""));
  EXPECT_THAT(dot, HasSubstr("n0 -> n1;"));  // inside a stage: no label
  // Distinct fill colours per stage, and per rank when stages share a rank.
  EXPECT_THAT(dot, HasSubstr("fillcolor=\"#8dd3c7\""));
  EXPECT_THAT(dot, HasSubstr("fillcolor=\"#ffffb3\""));
  RenderOptions two_ranks;
  two_ranks.stage_to_rank = {0, 1, 0};
  const std::string looped = render_model_dot(m, &p, two_ranks);
  EXPECT_EQ(count(looped, "fillcolor=\"#8dd3c7\""), 2u);
  EXPECT_THAT(looped, HasSubstr("stage 2 (rank 0)"));
}

TEST(Render, StageViewListsCutValues) {
  const Model m = tricky_model();
  const Partition p = make_partition(m, {0, 0, 1, 2}, three_stages(), "custom");
  const std::string dot = render_stages_dot(m, p);
  EXPECT_EQ(count(dot, "subgraph cluster_stage"), 3u);
  EXPECT_THAT(dot, HasSubstr("input -> s0"));
  EXPECT_THAT(dot, HasSubstr("s0 -> s1 [label=\"evil\\\"name\\\\n<b> (out 1 -> in 0)\\n101 B\"]"));
  EXPECT_THAT(dot, HasSubstr("s0 -> s2 [label=\"n0 (out 0 -> in 0)\\n100 B\"]"));
}

// --collapse folds the 32 identical blocks of a GPT into one box; --rankdir LR reaches Graphviz.
TEST(Render, CollapseFoldsRepeatedBlocksAndRankdirIsPassed) {
  GptSpec spec;
  spec.layers = 32;
  spec.hidden = 256;
  spec.heads = 4;
  spec.seq = 64;
  spec.vocab = 1000;
  const Model m = make_gpt(spec);
  RenderOptions o;
  o.collapse = true;
  o.rankdir = "LR";
  const std::string dot = render_model_dot(m, nullptr, o);
  EXPECT_THAT(dot, ::testing::HasSubstr("block0 .. block31"));
  EXPECT_THAT(dot, ::testing::HasSubstr("transformer_block x 32"));
  EXPECT_THAT(dot, ::testing::HasSubstr("rankdir=LR"));
  EXPECT_THAT(dot, ::testing::Not(::testing::HasSubstr("n5 [")));  // block4 is folded
  EXPECT_THAT(dot, ::testing::HasSubstr("n1 -> n33"));             // the run's box -> ln_f
  o.rankdir = "sideways";
  EXPECT_THROW((void)render_model_dot(m, nullptr, o), ConfigError);
}

TEST(Render, FormatsFromExtensions) {
  EXPECT_EQ(image_format_for_path("a/b.dot"), ImageFormat::kDot);
  EXPECT_EQ(image_format_for_path("b.GV"), ImageFormat::kDot);
  EXPECT_EQ(image_format_for_path("x.svg"), ImageFormat::kSvg);
  EXPECT_EQ(image_format_for_path("x.PNG"), ImageFormat::kPng);
  EXPECT_FALSE(image_format_for_path("x.jpeg").has_value());
  EXPECT_FALSE(image_format_for_path("noext").has_value());
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
}

TEST(Render, ImagesNeedGraphviz) {
  const std::string dot = render_model_dot(tricky_model(), nullptr);
  EXPECT_EQ(render_image(dot, ImageFormat::kDot), dot);
  if (!graphviz_available()) {
    EXPECT_THAT(message_of<ConfigError>([&] { (void)render_image(dot, ImageFormat::kSvg); }),
                HasSubstr("dot -Tsvg"));
    return;
  }
  const std::string svg = render_image(dot, ImageFormat::kSvg);
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("evil&quot;name\\n&lt;b&gt;"));  // escaped into the picture intact
  const std::string png = render_image(dot, ImageFormat::kPng);
  ASSERT_GE(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_THROW((void)render_image("digraph { a -> ", ImageFormat::kSvg), InputError);
}

}  // namespace
}  // namespace pipewright::graph
