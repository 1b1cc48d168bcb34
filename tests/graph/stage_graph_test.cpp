#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "graph_test_util.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/graph/stage_graph.hpp"

namespace pipewright::graph {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::message_of;

Node opaque(const std::string& name, double ms, std::int64_t out_bytes) {
  Node n;
  n.name = name;
  n.cost.forward_ms = ms;
  n.cost.backward_ms = 2 * ms;
  n.cost.output_bytes = out_bytes;
  return n;
}

// a -> b -> c -> d, plus the skip a -> d (input 1 of d). Output bytes: a 10, b 20, c 30, d 40.
Model skip_model() {
  Model m;
  m.name = "skip";
  m.input = ModelInput{"float32", {4}};  // 16 bytes per sample
  m.micro_batch_size = 2;                // 32 bytes of model input
  m.nodes = {opaque("a", 1, 10), opaque("b", 1, 20), opaque("c", 1, 30), opaque("d", 1, 40)};
  m.edges = {{0, 0, 1, 0}, {1, 0, 2, 0}, {2, 0, 3, 0}, {0, 0, 3, 1}};
  validate_model(m);
  return m;
}

TEST(StageGraph, SkipConnectionCrossesSeveralStages) {
  const StageGraph g = build_stage_graph(skip_model(), {0, 1, 2, 3}, 4);
  // Stage 0 sends a once (output slot 0) to stage 1 and stage 3.
  ASSERT_EQ(g.stages[0].outputs, (std::vector<StageValue>{{0, 0}}));
  EXPECT_EQ(g.stages[0].output_bytes, 10);
  // Stage 3 reads a (from stage 0) in slot 0 and c (from stage 2) in slot 1.
  EXPECT_EQ(g.stages[3].inputs, (std::vector<StageValue>{{0, 0}, {2, 0}}));
  EXPECT_EQ(g.stages[3].outputs, (std::vector<StageValue>{}));
  const std::vector<CutValue> want = {
      {-1, 0, 0, 0, 32, -1, 0},  // model input -> stage 0 slot 0
      {0, 0, 1, 0, 10, 0, 1},    // a -> stage 1
      {1, 0, 2, 0, 20, 1, 2},    // b -> stage 2
      {0, 0, 3, 0, 10, 0, 3},    // a -> stage 3 slot 0 (the skip)
      {2, 0, 3, 1, 30, 2, 3},    // c -> stage 3 slot 1
  };
  EXPECT_EQ(g.edges, want);
  EXPECT_EQ(g.stage_dependencies(),
            (std::vector<std::pair<int, int>>{{0, 1}, {0, 3}, {1, 2}, {2, 3}}));
  EXPECT_FALSE(g.has_cycle());
  EXPECT_EQ(g.topological_order(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(StageGraph, AStageWithTwoOutputsAndTwoInputs) {
  // {a, b} | {c, d}: stage 1 needs a (for d) and b (for c); stage 0 sends both.
  const StageGraph g = build_stage_graph(skip_model(), {0, 0, 1, 1}, 2);
  EXPECT_EQ(g.stages[0].outputs, (std::vector<StageValue>{{0, 0}, {1, 0}}));
  EXPECT_EQ(g.stages[0].output_bytes, 30);
  EXPECT_EQ(g.stages[1].inputs, (std::vector<StageValue>{{0, 0}, {1, 0}}));
  const std::vector<CutValue> want = {
      {-1, 0, 0, 0, 32, -1, 0},
      {0, 0, 1, 0, 10, 0, 3},  // a: producer slot 0 -> consumer slot 0, read by d
      {0, 1, 1, 1, 20, 1, 2},  // b: producer slot 1 -> consumer slot 1, read by c
  };
  EXPECT_EQ(g.edges, want);
  EXPECT_DOUBLE_EQ(g.stages[1].forward_ms, 2.0);
  EXPECT_DOUBLE_EQ(g.stages[1].backward_ms, 4.0);
}

TEST(StageGraph, MultiOutputNodesAndSeveralModelInputReaders) {
  // x and y both read the model input; x has two outputs feeding z's inputs 0 and 1.
  Model m;
  m.name = "multi";
  m.input = ModelInput{"int64", {3}};
  m.nodes = {opaque("x", 1, 8), opaque("y", 1, 4), opaque("z", 1, 4)};
  m.edges = {{0, 1, 2, 0}, {0, 0, 2, 1}, {1, 0, 2, 2}};
  validate_model(m);
  const StageGraph g = build_stage_graph(m, {0, 1, 2}, 3);
  EXPECT_EQ(g.stages[0].outputs, (std::vector<StageValue>{{0, 0}, {0, 1}}));
  EXPECT_EQ(g.stages[2].inputs, (std::vector<StageValue>{{0, 0}, {0, 1}, {1, 0}}));
  const std::vector<CutValue> want = {
      {-1, 0, 0, 0, 24, -1, 0}, {-1, 0, 1, 0, 24, -1, 1}, {0, 0, 2, 0, 8, 0, 2},
      {0, 1, 2, 1, 8, 0, 2},    {1, 0, 2, 2, 4, 1, 2},
  };
  EXPECT_EQ(g.edges, want);
  EXPECT_EQ(g.stage_dependencies(), (std::vector<std::pair<int, int>>{{0, 2}, {1, 2}}));
}

TEST(StageGraph, CriticalPathOfADiamond) {
  // s0 -> {s1 (slow), s2 (fast)} -> s3.
  Model m;
  m.name = "diamond";
  m.input = ModelInput{"float32", {1}};
  m.nodes = {opaque("src", 1, 1000), opaque("slow", 5, 10), opaque("fast", 1, 10),
             opaque("sink", 1, 0)};
  m.edges = {{0, 0, 1, 0}, {0, 0, 2, 0}, {1, 0, 3, 0}, {2, 0, 3, 1}};
  validate_model(m);
  const StageGraph g = build_stage_graph(m, {0, 1, 2, 3}, 4);
  const CriticalPath path = g.critical_path();
  EXPECT_EQ(path.stages, (std::vector<int>{0, 1, 3}));
  EXPECT_DOUBLE_EQ(path.ms, 3.0 * (1 + 5 + 1));
  // 1 GB/s = 1e6 bytes per ms: each dependency adds 2 * bytes / 1e6 ms.
  const CriticalPath with_links = g.critical_path(1.0);
  EXPECT_EQ(with_links.stages, (std::vector<int>{0, 1, 3}));
  EXPECT_DOUBLE_EQ(with_links.ms, 21.0 + 2.0 * (1000 + 10) / 1e6);
}

TEST(StageGraph, PartitionOfADagKeepsSkipEdges) {
  const Model m = skip_model();
  PartitionOptions opt;
  opt.stages = 2;
  opt.method = PartitionMethod::kBalanced;
  const Partition p = partition_model(m, opt);
  EXPECT_EQ(p.node_stage, (std::vector<int>{0, 0, 1, 1}));
  const StageGraph g = build_stage_graph(m, {0, 0, 1, 1}, 2);
  EXPECT_EQ(p.graph.edges, g.edges);
  EXPECT_EQ(p.graph.stages[1].inputs, g.stages[1].inputs);
  EXPECT_EQ(p.graph.stages[0].in_flight_microbatches, 2);
  EXPECT_EQ(p.graph.stages[1].in_flight_microbatches, 1);
}

TEST(StageGraphBadInput, CyclicAssignmentNamesTheStages) {
  // a and c on stage 0, b on stage 1: 0 -> 1 -> 0.
  const std::string msg = message_of<InvalidGraphError>([] {
    (void)build_stage_graph(skip_model(), {0, 1, 0, 0}, 2);
  });
  EXPECT_THAT(msg, HasSubstr("cyclic: stage 0 -> stage 1 -> stage 0"));
  EXPECT_THAT(message_of<InvalidGraphError>([] {
                (void)build_stage_graph(skip_model(), {0, 0, 0, 0}, 2);
              }),
              HasSubstr("stage 1 has no nodes"));
  EXPECT_THAT(message_of<InvalidGraphError>([] {
                (void)build_stage_graph(skip_model(), {0, 5, 0, 0}, 2);
              }),
              HasSubstr("node \"b\" is assigned to stage 5"));
}

TEST(PartitionJson, RoundTripsAndChecksTheModel) {
  const Model m = skip_model();
  PartitionOptions opt;
  opt.stages = 3;
  opt.method = PartitionMethod::kMemory;
  opt.memory_limit_bytes = 1 << 20;
  const Partition p = partition_model(m, opt);
  const std::string text = to_json(p);
  const Partition again = parse_partition(text, "p.json");
  EXPECT_EQ(again, p);
  EXPECT_EQ(to_json(again), text);
  EXPECT_NO_THROW(check_partition_matches(again, m, "p.json"));

  Model renamed = m;
  renamed.nodes[2].name = "cc";
  EXPECT_THAT(
      message_of<InvalidGraphError>([&] { check_partition_matches(again, renamed, "p.json"); }),
      HasSubstr("p.json at /stages: node 2 is \"c\" in the partition but \"cc\""));
  Model rewired = m;
  rewired.edges.pop_back();  // drop the skip
  EXPECT_THAT(
      message_of<InvalidGraphError>([&] { check_partition_matches(again, rewired, "p.json"); }),
      HasSubstr("differ from what model 'skip' gives"));
}

TEST(PartitionJsonBadInput, NamesThePointer) {
  const Model m = skip_model();
  PartitionOptions opt;
  opt.stages = 2;
  const std::string good = to_json(partition_model(m, opt));
  auto broken = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto pos = text.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    text.replace(pos, from.size(), to);
    return message_of<InputError>([&] { (void)parse_partition(text, "p.json"); });
  };
  EXPECT_THAT(broken("\"method\": \"balanced\"", "\"method\": \"magic\""),
              ContainsRegex("p\\.json:[0-9]+:[0-9]+: at /method: must be"));
  EXPECT_THAT(
      broken("\"consumer_stage\": 1", "\"consumer_stage\": 9"),
      ContainsRegex(
          "p\\.json:[0-9]+:[0-9]+: at /cuts/1/consumer_stage: must be an integer in \\[0, 1\\]"));
  EXPECT_THAT(broken("\"index\": 1", "\"index\": 0"),
              ContainsRegex("p\\.json:[0-9]+:[0-9]+: at /stages/1/index: must be 1"));
  EXPECT_THAT(broken("\"version\": 1,", "\"version\": 1, \"version\": 1,"),
              HasSubstr("duplicate key"));
}

}  // namespace
}  // namespace pipewright::graph
