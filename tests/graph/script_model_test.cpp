// TorchScript nodes in the model format (issue 21): parse, validate, round trip, and what the
// partitioner makes of several inputs and outputs per node.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "graph_test_util.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/graph/render.hpp"
#include "pipewright/graph/stage_graph.hpp"

namespace pipewright::graph {
namespace {

using ::testing::HasSubstr;
using testing::message_of;

// embed -> block (2 outputs: h, skip) -> head (reads h and skip, and the model input at slot 2);
// head.weight is tied to embed.weight.
constexpr const char* kScripted = R"({
  "version": 1,
  "name": "Tiny",
  "micro_batch_size": 2,
  "input": {"dtype": "int64", "shape": [8]},
  "inputs": [{"name": "idx", "dtype": "int64", "shape": [8]}],
  "source": {"module": "examples/byo/tiny.py:tiny", "torch": "1.13.1", "init": "init.safetensors"},
  "nodes": [
    {"name": "embed", "kind": "torchscript",
     "script": {"file": "nodes/000_embed.pt",
                "inputs": [{"name": "idx", "dtype": "int64", "shape": [8]}],
                "outputs": [{"name": "h", "dtype": "float32", "shape": [8, 4]}],
                "parameters": [{"name": "embed.weight", "dtype": "float32", "shape": [10, 4]}]},
     "cost": {"forward_ms": 0.1, "backward_ms": 0.2, "input_grad_ms": 0.0, "weight_grad_ms": 0.2,
              "param_bytes": 160, "activation_bytes": 64, "output_bytes": 256}},
    {"name": "block", "kind": "torchscript",
     "script": {"file": "nodes/001_block.pt",
                "inputs": [{"name": "x", "dtype": "float32", "shape": [8, 4]}],
                "outputs": [{"name": "h", "dtype": "float32", "shape": [8, 4]},
                            {"name": "skip", "dtype": "float32", "shape": [8, 4]}],
                "parameters": [],
                "buffers": [{"name": "block.mask", "dtype": "bool", "shape": [8, 8],
                             "persistent": false}]},
     "cost": {"forward_ms": 0.3, "backward_ms": 0.6, "output_bytes": 256}},
    {"name": "head", "kind": "torchscript",
     "script": {"file": "/abs/002_head.pt",
                "inputs": [{"name": "h", "dtype": "float32", "shape": [8, 4]},
                           {"name": "skip", "dtype": "float32", "shape": [8, 4]},
                           {"name": "idx", "dtype": "int64", "shape": [8]}],
                "outputs": [{"name": "logits", "dtype": "float32", "shape": [8, 10]}],
                "parameters": [{"name": "head.weight", "dtype": "float32", "shape": [10, 4],
                                "tied_to": "embed.weight"}]},
     "cost": {"forward_ms": 0.2, "backward_ms": 0.4}}
  ],
  "edges": [
    {"from": "embed", "to": "block"},
    {"from": "block", "from_output": 0, "to": "head", "to_input": 0},
    {"from": "block", "from_output": 1, "to": "head", "to_input": 1}
  ]
})";

std::string parse_error(const std::string& text) {
  return message_of<InputError>([&] { (void)parse_model(text, "m.json"); });
}

// kScripted with `from` replaced by `to` (once).
std::string edited(const std::string& from, const std::string& to) {
  std::string text = kScripted;
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(ScriptModel, KindSpelling) {
  ASSERT_EQ(parse_node_kind("torchscript"), NodeKind::kTorchScript);
  EXPECT_EQ(to_string(NodeKind::kTorchScript), "torchscript");
}

TEST(ScriptModel, ParsesEveryField) {
  const Model m = parse_model(kScripted, "m.json");
  ASSERT_EQ(m.nodes.size(), 3u);
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].name, "idx");
  ASSERT_TRUE(m.source.has_value());
  EXPECT_EQ(m.source->module, "examples/byo/tiny.py:tiny");
  EXPECT_EQ(m.source->init, "init.safetensors");
  const Node& block = m.nodes[1];
  EXPECT_EQ(block.kind, NodeKind::kTorchScript);
  ASSERT_TRUE(block.script.has_value());
  EXPECT_EQ(block.script->file, "nodes/001_block.pt");
  EXPECT_EQ(block.script->path, "nodes/001_block.pt");  // parsed from text: as written
  ASSERT_EQ(block.script->outputs.size(), 2u);
  EXPECT_EQ(block.script->outputs[1].name, "skip");
  ASSERT_EQ(block.script->buffers.size(), 1u);
  EXPECT_EQ(block.script->buffers[0].dtype, "bool");
  EXPECT_FALSE(block.script->buffers[0].persistent);
  const ScriptSpec& head = *m.nodes[2].script;
  ASSERT_EQ(head.parameters.size(), 1u);
  EXPECT_EQ(head.parameters[0].tied_to, "embed.weight");
  EXPECT_EQ(m.nodes[0].script->parameters[0].tied_to, "");
  EXPECT_EQ(m.edges[2], (ModelEdge{1, 1, 2, 1}));
}

TEST(ScriptModel, RoundTripsExactly) {
  const Model m = parse_model(kScripted, "m.json");
  const std::string text = to_json(m);
  EXPECT_THAT(text, HasSubstr("\"tied_to\": \"embed.weight\""));
  EXPECT_THAT(text, HasSubstr("\"torch\": \"1.13.1\""));
  const Model again = parse_model(text, "again.json");
  EXPECT_EQ(again, m);
  EXPECT_EQ(to_json(again), text);
}

TEST(ScriptModel, LoadResolvesFilesAgainstTheModelFolder) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "pw_script_model";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.json").string();
  {
    std::ofstream out(path);
    out << kScripted;
  }
  const Model m = load_model(path);
  EXPECT_EQ(m.nodes[0].script->path, (dir / "nodes/000_embed.pt").lexically_normal().string());
  EXPECT_EQ(m.nodes[2].script->path, "/abs/002_head.pt");
  // to_json keeps the text of the file, so the written model can sit beside its nodes again.
  EXPECT_THAT(to_json(m), HasSubstr("\"file\": \"nodes/000_embed.pt\""));
  EXPECT_EQ(m, parse_model(kScripted, "m.json"));
}

TEST(ScriptModel, UnfedInputSlotsReadTheModelInput) {
  const Model m = parse_model(kScripted, "m.json");
  EXPECT_EQ(m.model_input_readers(), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(m.reads_model_input(2));
  // Stages {embed}, {block, head}: the second stage receives the model input and embed's output;
  // stage 0 sends one value, consumed once.
  const StageGraph g = build_stage_graph(m, {0, 1, 1}, 2);
  EXPECT_EQ(g.stages[1].inputs, (std::vector<StageValue>{{-1, 0}, {0, 0}}));
  EXPECT_EQ(g.stages[0].outputs, (std::vector<StageValue>{{0, 0}}));
  // Stages {embed, block}, {head}: both outputs of block cross the cut.
  const StageGraph h = build_stage_graph(m, {0, 0, 1}, 2);
  EXPECT_EQ(h.stages[0].outputs, (std::vector<StageValue>{{1, 0}, {1, 1}}));
  EXPECT_EQ(h.stages[1].inputs, (std::vector<StageValue>{{-1, 0}, {1, 0}, {1, 1}}));
}

TEST(ScriptModel, PartitionsAndRenders) {
  const Model m = parse_model(kScripted, "m.json");
  PartitionOptions opts;
  opts.stages = 2;
  const Partition p = partition_model(m, opts);
  EXPECT_EQ(p.num_stages(), 2);
  const std::string dot = render_model_dot(m, &p, RenderOptions{});
  EXPECT_THAT(dot, HasSubstr("torchscript"));
  EXPECT_THAT(dot, HasSubstr("-> float32 [8 x 10]"));
  EXPECT_THAT(dot, HasSubstr("input -> n2"));
  EXPECT_THAT(dot, HasSubstr("out 1 -> in 1"));
}

TEST(ScriptModelBadInput, UnknownFieldsAreRejected) {
  EXPECT_THAT(parse_error(edited("\"file\": \"nodes/001_block.pt\"",
                                 "\"file\": \"nodes/001_block.pt\", \"flie\": 1")),
              HasSubstr("at /nodes/1/script/flie: unknown field \"flie\""));
  EXPECT_THAT(parse_error(edited("\"persistent\": false", "\"persistent\": false, \"x\": 1")),
              HasSubstr("at /nodes/1/script/buffers/0/x: unknown field \"x\""));
  EXPECT_THAT(parse_error(edited("\"init\": \"init.safetensors\"", "\"seed\": 1")),
              HasSubstr("at /source/seed: unknown field \"seed\""));
}

TEST(ScriptModelBadInput, EdgeOffsetsWithinTheNodesSignature) {
  EXPECT_THAT(parse_error(edited("\"from_output\": 1", "\"from_output\": 2")),
              HasSubstr("at /edges/2/from_output: node \"block\" has 2 output(s), got 2"));
  EXPECT_THAT(parse_error(edited("\"to_input\": 1", "\"to_input\": 3")),
              HasSubstr("at /edges/2/to_input: node \"head\" has 3 input(s), got 3"));
}

TEST(ScriptModelBadInput, DtypesShapesAndStructure) {
  std::string msg = parse_error(edited("\"dtype\": \"bool\"", "\"dtype\": \"complex64\""));
  EXPECT_THAT(msg, HasSubstr("m.json:"));
  EXPECT_THAT(msg, HasSubstr("at /nodes/1/script/buffers/0/dtype: must be \"float32\""));
  EXPECT_THAT(parse_error(edited("\"shape\": [8, 8]", "\"shape\": [8, 0]")),
              HasSubstr("at /nodes/1/script/buffers/0/shape/1: "));
  EXPECT_THAT(parse_error(edited("\"kind\": \"torchscript\"", "\"kind\": \"relu\"")),
              HasSubstr("at /nodes/0/script: only torchscript nodes have \"script\""));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
    "layers": [{"name": "x", "kind": "torchscript"}]})"),
              HasSubstr("at /layers/0: a torchscript node needs \"script\""));
  EXPECT_THAT(
      parse_error(edited("\"outputs\": [{\"name\": \"logits\", \"dtype\": \"float32\", "
                         "\"shape\": [8, 10]}]",
                         "\"outputs\": []")),
      HasSubstr("at /nodes/2/script/outputs: a torchscript node needs at least one output"));
  EXPECT_THAT(parse_error(edited("\"inputs\": [{\"name\": \"idx\", \"dtype\": \"int64\", "
                                 "\"shape\": [8]}],\n  \"source\"",
                                 "\"inputs\": [{\"name\": \"idx\", \"dtype\": \"float32\", "
                                 "\"shape\": [8]}],\n  \"source\"")),
              HasSubstr("at /inputs/0: must equal \"input\""));
  EXPECT_THAT(
      parse_error(edited("\"shape\": [8]}],\n                \"outputs\"",
                         "\"shape\": [8], \"model_input\": 1}],\n                \"outputs\"")),
      HasSubstr("at /nodes/0/script/inputs/0/model_input: the model has 1 input(s)"));
}

}  // namespace
}  // namespace pipewright::graph
