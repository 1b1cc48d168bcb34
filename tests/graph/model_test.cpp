#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "graph_test_util.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"

namespace pipewright::graph {
namespace {

using ::testing::HasSubstr;
using testing::message_of;

constexpr const char* kSkip = R"({
  "name": "skip",
  "input": {"dtype": "float32", "shape": [8]},
  "nodes": [
    {"name": "a", "kind": "linear", "params": {"in_features": 8, "out_features": 8},
     "cost": {"forward_ms": 1, "backward_ms": 2, "param_bytes": 288, "activation_bytes": 32,
              "output_bytes": 32}},
    {"name": "b", "kind": "relu", "cost": {"forward_ms": 0.5, "backward_ms": 0.5}},
    {"name": "c", "kind": "opaque", "cost": {"forward_ms": 2, "backward_ms": 4,
              "input_grad_ms": 1.5, "weight_grad_ms": 2.5}},
    {"name": "d", "kind": "loss", "attrs": {"loss": "mse"}}
  ],
  "edges": [
    {"from": "a", "to": "b"},
    {"from": "b", "to": "c"},
    {"from": "c", "to": "d"},
    {"from": "a", "to": "d", "to_input": 1}
  ]
})";

std::string parse_error(const std::string& text) {
  return message_of<InputError>([&] { (void)parse_model(text, "m.json"); });
}

TEST(NodeKind, SpellingsRoundTrip) {
  for (const char* s : {"linear", "relu", "gelu", "layernorm", "embedding", "causal_self_attention",
                        "mlp", "transformer_block", "loss", "opaque"}) {
    const auto kind = parse_node_kind(s);
    ASSERT_TRUE(kind.has_value()) << s;
    EXPECT_EQ(to_string(*kind), s);
  }
  EXPECT_FALSE(parse_node_kind("conv2d").has_value());
  EXPECT_FALSE(parse_node_kind("Linear").has_value());
}

TEST(ModelJson, LayersBecomeAChain) {
  const Model m = parse_model(R"({"name": "c", "input": {"dtype": "float32", "shape": [2]},
    "layers": [{"name": "x", "kind": "relu"}, {"name": "y", "kind": "gelu"},
               {"name": "z", "kind": "relu"}]})",
                              "c.json");
  ASSERT_EQ(m.nodes.size(), 3u);
  ASSERT_EQ(m.edges.size(), 2u);
  EXPECT_EQ(m.edges[0], (ModelEdge{0, 0, 1, 0}));
  EXPECT_EQ(m.edges[1], (ModelEdge{1, 0, 2, 0}));
  EXPECT_EQ(m.topological_order(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(m.input_bytes(), 2 * 4);
}

TEST(ModelJson, NodesAndEdgesWithASkip) {
  const Model m = parse_model(kSkip, "skip.json");
  ASSERT_EQ(m.nodes.size(), 4u);
  EXPECT_EQ(m.nodes[0].params.at("in_features"), 8);
  EXPECT_EQ(m.nodes[3].attrs.at("loss"), "mse");
  EXPECT_EQ(m.nodes[2].cost.input_grad_ms, 1.5);
  EXPECT_EQ(m.edges[3], (ModelEdge{0, 0, 3, 1}));
  EXPECT_EQ(m.producers(3), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.consumers(0), (std::vector<int>{1, 3}));
  EXPECT_EQ(m.in_edges(3).size(), 2u);
  EXPECT_EQ(m.out_edges(0).size(), 2u);
  EXPECT_EQ(m.node_index("c"), 2);
  EXPECT_EQ(m.node_index("zz"), -1);
}

TEST(ModelJson, RoundTripsExactly) {
  const Model m = parse_model(kSkip, "skip.json");
  const std::string text = to_json(m);
  const Model again = parse_model(text, "again.json");
  EXPECT_EQ(again, m);
  EXPECT_EQ(to_json(again), text);  // stable
}

TEST(ModelJson, TopologicalOrderKeepsTheListedOrderWherePossible) {
  const Model m = parse_model(R"({"input": {"dtype": "int64", "shape": [3]},
    "nodes": [{"name": "late", "kind": "relu"}, {"name": "early", "kind": "relu"},
              {"name": "free", "kind": "relu"}],
    "edges": [{"from": "early", "to": "late"}]})",
                              "o.json");
  EXPECT_EQ(m.topological_order(), (std::vector<int>{1, 0, 2}));
}

TEST(ModelJson, LoadsFromFileAndNamesMissingFiles) {
  const std::string path = ::testing::TempDir() + "/pw_model_test.json";
  {
    std::ofstream out(path);
    out << kSkip;
  }
  EXPECT_EQ(load_model(path).nodes.size(), 4u);
  const std::string msg =
      message_of<InputError>([] { (void)load_model("/nonexistent/model.json"); });
  EXPECT_THAT(msg, HasSubstr("/nonexistent/model.json"));
}

// ---- bad input: each names the file and a JSON pointer ------------------------------------

TEST(ModelJsonBadInput, InvalidJsonNamesLineAndColumn) {
  const std::string msg = parse_error("{\n  \"name\": \"x\",\n  oops\n}");
  EXPECT_THAT(msg, HasSubstr("m.json:3:3: invalid JSON"));
  EXPECT_THAT(msg, HasSubstr("line 3"));
}

TEST(ModelJsonBadInput, DuplicateKeys) {
  EXPECT_THAT(parse_error(R"({"name": "a", "name": "b"})"),
              HasSubstr("m.json:1:23: at /name: duplicate key \"name\""));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
    "layers": [{"name": "x", "kind": "relu"},
               {"name": "y", "kind": "relu", "cost": {"forward_ms": 1, "forward_ms": 2}}]})"),
              HasSubstr(":3:86: at /layers/1/cost/forward_ms: duplicate key"));
}

TEST(ModelJsonBadInput, UnknownKind) {
  const std::string msg = parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
    "layers": [{"name": "x", "kind": "relu"}, {"name": "y", "kind": "conv9d"}]})");
  EXPECT_THAT(msg, HasSubstr("at /layers/1/kind: unknown node kind \"conv9d\""));
}

TEST(ModelJsonBadInput, NegativeNaNAndInfiniteCosts) {
  const std::string head = R"({"input": {"dtype": "float32", "shape": [1]},
    "layers": [{"name": "x", "kind": "relu", "cost": )";
  EXPECT_THAT(parse_error(head + R"({"forward_ms": -1}}]})"),
              HasSubstr("at /layers/0/cost/forward_ms: must be a finite number >= 0, got -1"));
  // Out-of-range numbers never become infinities.
  EXPECT_THAT(parse_error(head + R"({"backward_ms": 1e999}}]})"),
              HasSubstr("m.json:2:70: invalid JSON: number overflow parsing '1e999'"));
  // JSON has no NaN literal: it is a syntax error with a position.
  EXPECT_THAT(parse_error(head + R"({"forward_ms": NaN}}]})"), HasSubstr("invalid JSON"));
  EXPECT_THAT(parse_error(head + R"({"param_bytes": -5}}]})"),
              HasSubstr("at /layers/0/cost/param_bytes: must be an integer in [0,"));
  EXPECT_THAT(parse_error(head + R"({"forward_ms": "1"}}]})"),
              HasSubstr("at /layers/0/cost/forward_ms: expected a number, got string"));
}

// Note [Autocast bytes]: what each kind keeps in fp32 under autocast, and the file's override.
TEST(AutocastBytes, ByKindAndFromTheFile) {
  const auto fp32 = [](NodeKind kind, std::int64_t act) {
    Node n;
    n.kind = kind;
    n.cost.activation_bytes = act;
    return autocast_fp32_bytes(n);
  };
  for (NodeKind k : {NodeKind::kLinear, NodeKind::kRelu, NodeKind::kGelu, NodeKind::kMlp,
                     NodeKind::kCausalSelfAttention, NodeKind::kOpaque, NodeKind::kTorchScript})
    EXPECT_EQ(fp32(k, 1000), 0) << to_string(k);
  for (NodeKind k : {NodeKind::kLayerNorm, NodeKind::kEmbedding, NodeKind::kLoss})
    EXPECT_EQ(fp32(k, 1000), 1000) << to_string(k);
  EXPECT_EQ(fp32(NodeKind::kTransformerBlock, 3400), 400);
  EXPECT_EQ(fp32(NodeKind::kTransformerBlock, 34), 4);
  EXPECT_EQ(fp32(NodeKind::kTransformerBlock, 9'000'000'000'000'000'000),
            1'058'823'529'411'764'705);
  const Model m = parse_model(R"({"input": {"dtype": "float32", "shape": [1]},
    "layers": [{"name": "x", "kind": "opaque", "cost": {"activation_bytes": 100,
                "activation_fp32_bytes": 30}}]})",
                              "m.json");
  EXPECT_EQ(m.nodes[0].cost.activation_fp32_bytes, 30);
  EXPECT_EQ(autocast_fp32_bytes(m.nodes[0]), 30);
  EXPECT_EQ(parse_model(to_json(m), "again.json"), m);
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
    "layers": [{"name": "x", "kind": "relu", "cost": {"activation_bytes": 10,
                "activation_fp32_bytes": 11}}]})"),
              HasSubstr("/layers/0/cost/activation_fp32_bytes: must be in [0, activation_bytes = "
                        "10], got 11"));
}

TEST(ModelJsonBadInput, DanglingEdges) {
  const std::string msg = parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
    "nodes": [{"name": "x", "kind": "relu"}], "edges": [{"from": "x", "to": "ghost"}]})");
  EXPECT_THAT(msg, HasSubstr("at /edges/0/to: dangling edge: no node named \"ghost\""));
}

TEST(ModelJsonBadInput, DuplicateNames) {
  const std::string msg = parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
    "nodes": [{"name": "x", "kind": "relu"}, {"name": "x", "kind": "gelu"}], "edges": []})");
  EXPECT_THAT(msg, HasSubstr("at /nodes/1/name: duplicate node name \"x\" (also /nodes/0)"));
}

TEST(ModelJsonBadInput, CycleNamesItsNodes) {
  const std::string msg = message_of<InvalidGraphError>([] {
    (void)parse_model(R"({"input": {"dtype": "float32", "shape": [1]},
      "nodes": [{"name": "in", "kind": "relu"}, {"name": "p", "kind": "relu"},
                {"name": "q", "kind": "relu"}, {"name": "r", "kind": "relu"}],
      "edges": [{"from": "in", "to": "p"}, {"from": "p", "to": "q"},
                {"from": "q", "to": "r"}, {"from": "r", "to": "p", "to_input": 1}]})",
                      "m.json");
  });
  EXPECT_THAT(msg, HasSubstr("m.json:4:16: at /edges: model '' has a cycle"));
  EXPECT_THAT(msg, HasSubstr("cycle: p -> q -> r -> p"));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
      "nodes": [{"name": "s", "kind": "relu"}], "edges": [{"from": "s", "to": "s"}]})"),
              HasSubstr("feeds itself"));
}

TEST(ModelJsonBadInput, TwoProducersForOneInput) {
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
      "nodes": [{"name": "a", "kind": "relu"}, {"name": "b", "kind": "relu"},
                {"name": "c", "kind": "relu"}],
      "edges": [{"from": "a", "to": "c"}, {"from": "b", "to": "c"}]})"),
              HasSubstr("at /edges/1: input 0 of node \"c\" already has a producer"));
}

TEST(ModelJsonBadInput, MissingParamsAndBadAttrs) {
  EXPECT_THAT(
      parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
      "layers": [{"name": "l", "kind": "linear", "params": {"in_features": 3}}]})"),
      HasSubstr("m.json:2:60: at /layers/0/params: a linear node needs param \"out_features\""));
  EXPECT_THAT(
      parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
      "layers": [{"name": "l", "kind": "loss", "attrs": {"loss": "hinge"}}]})"),
      HasSubstr("m.json:2:66: at /layers/0/attrs/loss: must be \"mse\" or \"cross_entropy\""));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
      "layers": [{"name": "t", "kind": "transformer_block",
                  "params": {"hidden": 10, "heads": 3, "ffn_hidden": 40}}]})"),
              HasSubstr("divisible by heads"));
}

TEST(ModelJsonBadInput, StructureAndTypes) {
  EXPECT_THAT(parse_error("[1, 2]"),
              HasSubstr("m.json:1:1: at (root): expected an object, got array"));
  EXPECT_THAT(parse_error(R"({"layers": [{"name": "x", "kind": "relu"}]})"),
              HasSubstr("at (root): missing required field \"input\""));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float16", "shape": [1]},
      "layers": [{"name": "x", "kind": "relu"}]})"),
              HasSubstr("at /input/dtype: must be \"float32\" or \"int64\""));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [0]},
      "layers": [{"name": "x", "kind": "relu"}]})"),
              HasSubstr("at /input/shape/0: must be an integer in [1,"));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]}, "layers": []})"),
              HasSubstr("at /layers: the model has no nodes"));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
      "layers": [{"name": "x", "kind": "relu", "colour": "red"}]})"),
              HasSubstr("at /layers/0/colour: unknown field \"colour\""));
  EXPECT_THAT(parse_error(R"({"input": {"dtype": "float32", "shape": [1]},
      "layers": [{"name": "x", "kind": "relu"}], "nodes": []})"),
              HasSubstr("exactly one of \"nodes\""));
}

TEST(ModelJsonBadInput, NestingBeyondTheLimit) {
  std::string deep = R"({"input": {"dtype": "float32", "shape": [1]}, "name": )";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  deep += "}";
  EXPECT_THAT(parse_error(deep), HasSubstr("nesting deeper than the limit of 32"));
}

TEST(ModelJsonBadInput, TextBeyondTheSizeLimit) {
  const std::string huge(kMaxModelFileBytes + 1, ' ');
  EXPECT_THAT(parse_error(huge),
              HasSubstr("m.json: input is 268435457 bytes, more than the limit"));
}

TEST(ModelValidate, CatchesModelsBuiltInCode) {
  Model m = testing::chain_model({1, 2});
  EXPECT_NO_THROW(validate_model(m));
  m.nodes[1].cost.forward_ms = std::nan("");
  EXPECT_THAT(message_of<InvalidGraphError>([&] { validate_model(m, "code"); }),
              HasSubstr("code at /nodes/1/cost/forward_ms: must be a finite number >= 0, got nan"));
  m = testing::chain_model({1, 2});
  m.edges.push_back(ModelEdge{1, 0, 7, 0});
  EXPECT_THAT(message_of<InvalidGraphError>([&] { validate_model(m, "code"); }),
              HasSubstr("code at /edges/1/to: dangling edge: no node with index 7"));
}

}  // namespace
}  // namespace pipewright::graph
