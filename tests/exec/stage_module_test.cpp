// StageModule and compute_loss against hand-built libtorch references, split vs whole models,
// partition-independent initialisation, and the model/data checks.
#include "model/stage_module.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/stage_graph.hpp"

namespace pipewright::exec {
namespace {

using graph::Model;
using graph::Node;
using graph::NodeKind;

Node node(std::string name, NodeKind kind, std::map<std::string, std::int64_t> params = {}) {
  Node n;
  n.name = std::move(name);
  n.kind = kind;
  n.params = std::move(params);
  return n;
}

Node linear(std::string name, std::int64_t in, std::int64_t out, bool bias = true) {
  return node(std::move(name), NodeKind::kLinear,
              {{"in_features", in}, {"out_features", out}, {"bias", bias ? 1 : 0}});
}

// Nodes in a chain (edges i -> i + 1), float32 input of `in_shape` per sample.
Model chain(std::vector<Node> nodes, std::vector<std::int64_t> in_shape,
            std::string dtype = "float32") {
  Model m;
  m.name = "test";
  m.input.dtype = std::move(dtype);
  m.input.shape = std::move(in_shape);
  m.nodes = std::move(nodes);
  for (int i = 0; i + 1 < static_cast<int>(m.nodes.size()); ++i) {
    m.edges.push_back(graph::ModelEdge{i, 0, i + 1, 0});
  }
  return m;
}

Model mlp_model(const std::vector<std::int64_t>& sizes) {
  std::vector<Node> nodes;
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) nodes.push_back(node(std::to_string(nodes.size()), NodeKind::kRelu));
    nodes.push_back(linear(std::to_string(nodes.size()), sizes[i], sizes[i + 1]));
  }
  return chain(std::move(nodes), {sizes.front()});
}

// embed, block0..block{layers-1}, ln_f, head, loss(cross_entropy): a small GPT.
Model gpt_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t seq,
                std::int64_t vocab) {
  std::vector<Node> nodes;
  nodes.push_back(
      node("embed", NodeKind::kEmbedding,
           {{"num_embeddings", vocab}, {"embedding_dim", hidden}, {"max_positions", seq}}));
  for (std::int64_t l = 0; l < layers; ++l) {
    nodes.push_back(node("block" + std::to_string(l), NodeKind::kTransformerBlock,
                         {{"hidden", hidden}, {"heads", heads}, {"ffn_hidden", 4 * hidden}}));
  }
  nodes.push_back(node("ln_f", NodeKind::kLayerNorm, {{"normalized_shape", hidden}}));
  nodes.push_back(linear("head", hidden, vocab, false));
  Node loss = node("loss", NodeKind::kLoss);
  loss.attrs["loss"] = "cross_entropy";
  nodes.push_back(loss);
  return chain(std::move(nodes), {seq}, "int64");
}

std::vector<int> contiguous_assignment(int nodes, int stages) {
  std::vector<int> out;
  for (int i = 0; i < nodes; ++i) out.push_back(i * stages / nodes);
  return out;
}

struct RunResult {
  torch::Tensor output;
  std::map<std::string, torch::Tensor> params;
  std::map<std::string, torch::Tensor> grads;
};

// Runs `model` split by `assignment` the way a pipeline does: each stage receives detached
// copies of its inputs, and backward passes the gradients of received values back to their
// producer stage. Returns the prediction and every parameter's value and gradient by name.
RunResult run_split(const Model& model, const std::vector<int>& assignment, int stages,
                    const torch::Tensor& x, const torch::Tensor& y, LossKind loss,
                    torch::Dtype dtype = torch::kFloat32) {
  const graph::StageGraph sg = graph::build_stage_graph(model, assignment, stages);
  std::vector<StageModule> mods;
  for (const auto& info : sg.stages)
    mods.emplace_back(model, info, StageBuildOptions{7, torch::kCPU, dtype});
  std::map<std::pair<int, int>, torch::Tensor> produced;  // value -> tensor in producer's graph
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> received;  // value -> leaf copies
  std::vector<std::vector<torch::Tensor>> outs(mods.size());
  torch::Tensor prediction;
  for (const int s : sg.topological_order()) {
    const StageModule& m = mods[static_cast<std::size_t>(s)];
    std::vector<torch::Tensor> in;
    for (const auto& v : m.inputs()) {
      if (v.node < 0) {
        in.push_back(x);
        continue;
      }
      torch::Tensor leaf = produced.at({v.node, v.output}).detach().requires_grad_(true);
      received[{v.node, v.output}].push_back(leaf);
      in.push_back(leaf);
    }
    outs[static_cast<std::size_t>(s)] = m.forward(in);
    for (std::size_t i = 0; i < m.outputs().size(); ++i) {
      produced[{m.outputs()[i].node, m.outputs()[i].output}] = outs[static_cast<std::size_t>(s)][i];
    }
    if (m.prediction_output()) {
      prediction =
          outs[static_cast<std::size_t>(s)][static_cast<std::size_t>(*m.prediction_output())];
    }
  }
  compute_loss(prediction, y, loss).backward();
  const auto order = sg.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const StageModule& m = mods[static_cast<std::size_t>(*it)];
    std::vector<torch::Tensor> tensors;
    std::vector<torch::Tensor> grads;
    for (std::size_t i = 0; i < m.outputs().size(); ++i) {
      if (m.prediction_output() && static_cast<int>(i) == *m.prediction_output()) continue;
      torch::Tensor g;
      for (const auto& leaf : received.at({m.outputs()[i].node, m.outputs()[i].output})) {
        g = g.defined() ? g + leaf.grad() : leaf.grad();
      }
      tensors.push_back(outs[static_cast<std::size_t>(*it)][i]);
      grads.push_back(g);
    }
    if (!tensors.empty()) torch::autograd::backward(tensors, grads);
  }
  RunResult r;
  r.output = prediction.detach();
  for (const auto& m : mods) {
    for (const auto& [name, p] : m.named_parameters()) {
      EXPECT_EQ(r.params.count(name), 0u) << name;
      r.params[name] = p.detach().clone();
      r.grads[name] = p.grad().clone();
    }
  }
  return r;
}

void expect_same(const RunResult& a, const RunResult& b, double tol) {
  EXPECT_TRUE(torch::allclose(a.output, b.output, 0, tol))
      << (a.output - b.output).abs().max().item<double>();
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, p] : a.params) {
    ASSERT_EQ(b.params.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(p, b.params.at(name))) << name;  // identical init
    const double diff = (a.grads.at(name) - b.grads.at(name)).abs().max().item<double>();
    EXPECT_LE(diff, tol) << name;
  }
}

TEST(StageModule, MlpMatchesTorchSequentialWithSameWeights) {
  const Model model = mlp_model({8, 16, 16, 4});
  const StageModule stage = StageModule::whole_model(model, StageBuildOptions{3});
  torch::nn::Sequential ref(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 16),
                            torch::nn::ReLU(), torch::nn::Linear(16, 4));
  const auto ours = stage.named_parameters();
  const auto theirs = ref->named_parameters();
  ASSERT_EQ(ours.size(), theirs.size());
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ(ours[i].first, theirs[i].key());  // "0.weight", "0.bias", "2.weight", ...
      ASSERT_EQ(ours[i].second.sizes(), theirs[i].value().sizes()) << ours[i].first;
      theirs[i].value().copy_(ours[i].second);
    }
  }
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({5, 8});
  const auto out = stage.forward({x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(torch::allclose(out[0], ref->forward(x), 0, 1e-6));
}

TEST(StageModule, DefaultInitFollowsPyTorchBounds) {
  const StageModule lin = StageModule::whole_model(mlp_model({64, 32}), StageBuildOptions{1});
  const auto& p = lin.named_parameters();
  const double bound = 1.0 / std::sqrt(64.0);
  EXPECT_LE(p[0].second.abs().max().item<double>(), bound);
  EXPECT_GT(p[0].second.abs().max().item<double>(), 0.9 * bound);  // uniform over the range
  EXPECT_LE(p[1].second.abs().max().item<double>(), bound);
  const StageModule ln = StageModule::whole_model(
      chain({node("ln", NodeKind::kLayerNorm, {{"normalized_shape", 6}})}, {6}),
      StageBuildOptions{});
  EXPECT_TRUE(torch::equal(ln.named_parameters()[0].second, torch::ones({6})));
  EXPECT_TRUE(torch::equal(ln.named_parameters()[1].second, torch::zeros({6})));
  const StageModule emb = StageModule::whole_model(
      chain({node("e", NodeKind::kEmbedding, {{"num_embeddings", 400}, {"embedding_dim", 50}})},
            {3}, "int64"),
      StageBuildOptions{});
  const torch::Tensor w = emb.named_parameters()[0].second;
  EXPECT_EQ(emb.named_parameters()[0].first, "0.weight");
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.02);  // N(0, 1) over 20000 samples
  EXPECT_NEAR(w.std().item<double>(), 1.0, 0.02);
}

TEST(StageModule, SeedDeterminesWeights) {
  const Model model = mlp_model({8, 8, 8});
  const auto a = StageModule::whole_model(model, StageBuildOptions{5}).named_parameters();
  const auto b = StageModule::whole_model(model, StageBuildOptions{5}).named_parameters();
  const auto c = StageModule::whole_model(model, StageBuildOptions{6}).named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second));
    EXPECT_FALSE(torch::equal(a[i].second, c[i].second));
  }
  // Two equal layers at different node indices get different weights.
  EXPECT_EQ(a[0].second.sizes(), a[2].second.sizes());
  EXPECT_FALSE(torch::equal(a[0].second, a[2].second));
}

TEST(StageModule, MlpSplitIntoTwoAndFourStagesMatchesOneStage) {
  const Model model = mlp_model({6, 12, 12, 12, 12, 3});  // 9 nodes
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({4, 6});
  const torch::Tensor y = torch::randn({4, 3});
  const int n = static_cast<int>(model.nodes.size());
  const RunResult whole =
      run_split(model, std::vector<int>(static_cast<std::size_t>(n), 0), 1, x, y, LossKind::kMse);
  for (const int p : {2, 4}) {
    SCOPED_TRACE(p);
    expect_same(whole, run_split(model, contiguous_assignment(n, p), p, x, y, LossKind::kMse),
                1e-6);
  }
}

TEST(StageModule, SkipEdgesAcrossStagesAreSummedIntoTheReader) {
  // 0 linear -> 1 relu -> 2 linear -> 3 gelu(2 + 0) -> 4 linear; node 0's output skips to stage 2.
  Model model = chain({linear("a", 8, 8), node("r", NodeKind::kRelu), linear("b", 8, 8),
                       node("g", NodeKind::kGelu), linear("c", 8, 2)},
                      {8});
  model.edges.push_back(graph::ModelEdge{0, 0, 3, 1});
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({3, 8});
  const torch::Tensor y = torch::randn({3, 2});
  const RunResult whole = run_split(model, {0, 0, 0, 0, 0}, 1, x, y, LossKind::kMse);
  expect_same(whole, run_split(model, {0, 1, 1, 2, 2}, 3, x, y, LossKind::kMse), 1e-6);

  // The reference computation by hand.
  const auto& p = whole.params;
  const torch::Tensor h0 = torch::linear(x, p.at("0.weight"), p.at("0.bias"));
  const torch::Tensor h2 = torch::linear(torch::relu(h0), p.at("2.weight"), p.at("2.bias"));
  const torch::Tensor ref = torch::linear(torch::gelu(h2 + h0), p.at("4.weight"), p.at("4.bias"));
  EXPECT_TRUE(torch::allclose(whole.output, ref, 0, 1e-6));
}

TEST(StageModule, GptShapesNamesAndSplitEquality) {
  const Model model = gpt_model(2, 16, 4, 8, 11);
  const StageModule whole = StageModule::whole_model(model, StageBuildOptions{1});
  std::vector<std::string> names;
  for (const auto& [name, t] : whole.named_parameters()) names.push_back(name);
  const std::vector<std::string> block1 = {
      "1.ln1.weight",       "1.ln1.bias",       "1.attn.qkv.weight", "1.attn.qkv.bias",
      "1.attn.proj.weight", "1.attn.proj.bias", "1.ln2.weight",      "1.ln2.bias",
      "1.mlp.fc1.weight",   "1.mlp.fc1.bias",   "1.mlp.fc2.weight",  "1.mlp.fc2.bias"};
  ASSERT_EQ(names.size(), 2u + 2 * 12 + 2 + 1);
  EXPECT_EQ(names[0], "0.tok.weight");
  EXPECT_EQ(names[1], "0.pos.weight");
  EXPECT_EQ(std::vector<std::string>(names.begin() + 2, names.begin() + 14), block1);
  EXPECT_EQ(names[26], "3.weight");  // ln_f
  EXPECT_EQ(names[28], "4.weight");  // head, no bias
  EXPECT_EQ(whole.named_parameters()[4].second.sizes(), (std::vector<std::int64_t>{48, 16}));
  EXPECT_EQ(model_loss_kind(model), LossKind::kCrossEntropy);

  torch::manual_seed(4);
  const torch::Tensor x = torch::randint(0, 11, {3, 8}, torch::kLong);
  const torch::Tensor y = torch::randint(0, 11, {3, 8}, torch::kLong);
  const auto out = whole.forward({x});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes(), (std::vector<std::int64_t>{3, 8, 11}));

  const int n = static_cast<int>(model.nodes.size());  // 6 nodes
  const RunResult one =
      run_split(model, std::vector<int>(6, 0), 1, x, y, LossKind::kCrossEntropy, torch::kDouble);
  for (const int p : {2, 4}) {
    SCOPED_TRACE(p);
    expect_same(one,
                run_split(model, contiguous_assignment(n, p), p, x, y, LossKind::kCrossEntropy,
                          torch::kDouble),
                1e-10);
  }
}

TEST(StageModule, CausalAttentionMatchesTorchMultiheadAttention) {
  const std::int64_t e = 12;
  const std::int64_t h = 3;
  const std::int64_t s = 5;
  const Model model =
      chain({node("attn", NodeKind::kCausalSelfAttention, {{"hidden", e}, {"heads", h}})}, {s, e});
  const StageModule stage = StageModule::whole_model(model, StageBuildOptions{9});
  const auto& p = stage.named_parameters();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].first, "0.qkv.weight");
  EXPECT_EQ(p[2].first, "0.proj.weight");
  torch::nn::MultiheadAttention ref(torch::nn::MultiheadAttentionOptions(e, h));
  {
    torch::NoGradGuard no_grad;
    ref->in_proj_weight.copy_(p[0].second);  // q, k, v stacked like our qkv
    ref->in_proj_bias.copy_(p[1].second);
    ref->out_proj->weight.copy_(p[2].second);
    ref->out_proj->bias.copy_(p[3].second);
  }
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({2, s, e});
  // Additive float mask: the C++ frontend's MultiheadAttention adds attn_mask to the scores.
  const torch::Tensor mask = torch::zeros({s, s}).masked_fill(
      torch::ones({s, s}, torch::kBool).triu(1), -std::numeric_limits<float>::infinity());
  const torch::Tensor xt = x.transpose(0, 1);  // [S, B, E]
  const auto expected = std::get<0>(ref->forward(xt, xt, xt, {}, false, mask)).transpose(0, 1);
  const torch::Tensor got = stage.forward({x})[0];
  EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-6))
      << (got - expected).abs().max().item<double>();

  // Causality: changing the last position changes only the last output.
  torch::Tensor x2 = x.clone();
  x2.select(1, s - 1).add_(1.0);
  const torch::Tensor got2 = stage.forward({x2})[0];
  EXPECT_TRUE(torch::equal(got.slice(1, 0, s - 1), got2.slice(1, 0, s - 1)));
  EXPECT_FALSE(torch::allclose(got.select(1, s - 1), got2.select(1, s - 1)));
}

TEST(StageModule, TransformerBlockIsPreLnResidual) {
  const Model model = chain(
      {node("blk", NodeKind::kTransformerBlock, {{"hidden", 8}, {"heads", 2}, {"ffn_hidden", 32}})},
      {4, 8});
  const StageModule blk = StageModule::whole_model(model, StageBuildOptions{2});
  StageModule a2 = StageModule::whole_model(
      chain({node("a", NodeKind::kCausalSelfAttention, {{"hidden", 8}, {"heads", 2}})}, {4, 8}),
      StageBuildOptions{});
  StageModule m2 = StageModule::whole_model(
      chain({node("m", NodeKind::kMlp, {{"hidden", 8}, {"ffn_hidden", 32}})}, {4, 8}),
      StageBuildOptions{});
  std::map<std::string, torch::Tensor> w;
  for (const auto& [name, t] : blk.named_parameters()) w[name] = t.detach();
  torch::manual_seed(6);
  // Copy the block's attention and MLP weights into the standalone modules.
  a2.load_parameters({{"0.qkv.weight", w.at("0.attn.qkv.weight")},
                      {"0.qkv.bias", w.at("0.attn.qkv.bias")},
                      {"0.proj.weight", w.at("0.attn.proj.weight")},
                      {"0.proj.bias", w.at("0.attn.proj.bias")}},
                     "block");
  m2.load_parameters({{"0.fc1.weight", w.at("0.mlp.fc1.weight")},
                      {"0.fc1.bias", w.at("0.mlp.fc1.bias")},
                      {"0.fc2.weight", w.at("0.mlp.fc2.weight")},
                      {"0.fc2.bias", w.at("0.mlp.fc2.bias")}},
                     "block");
  const torch::Tensor x = torch::randn({3, 4, 8});
  const torch::Tensor h = x + a2.forward({torch::layer_norm(x, {8})})[0];
  const torch::Tensor ref = h + m2.forward({torch::layer_norm(h, {8})})[0];
  EXPECT_TRUE(torch::allclose(blk.forward({x})[0], ref, 1e-5, 1e-6));
  // fc1 -> GELU -> fc2.
  const torch::Tensor mref =
      torch::linear(torch::gelu(torch::linear(x, w.at("0.mlp.fc1.weight"), w.at("0.mlp.fc1.bias"))),
                    w.at("0.mlp.fc2.weight"), w.at("0.mlp.fc2.bias"));
  EXPECT_TRUE(torch::allclose(m2.forward({x})[0], mref, 1e-5, 1e-6));
}

TEST(StageModule, OpaqueNodeIsRejected) {
  Model model = mlp_model({4, 4});
  model.nodes.push_back(node("mystery", NodeKind::kOpaque));
  model.edges.push_back(graph::ModelEdge{0, 0, 1, 0});
  try {
    static_cast<void>(StageModule::whole_model(model, StageBuildOptions{}));
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("node 'mystery' is opaque: simulation only, cannot execute"),
        std::string::npos)
        << e.what();
  }
}

TEST(StageModule, BadStageInputsAndShapesAreConfigErrors) {
  const Model model = mlp_model({8, 4, 2});  // 0 linear, 1 relu, 2 linear
  // Stage {2} must receive node 1's output.
  EXPECT_THROW(StageModule(model, {2}, {graph::StageValue{-1, 0}}, {}, StageBuildOptions{}),
               ConfigError);
  const StageModule tail(model, {2}, {graph::StageValue{1, 0}}, {}, StageBuildOptions{});
  EXPECT_EQ(tail.prediction_output(), 0);
  EXPECT_EQ(tail.input_types()[0].shape, (std::vector<std::int64_t>{4}));
  const StageModule whole = StageModule::whole_model(model, StageBuildOptions{});
  try {
    static_cast<void>(whole.forward({torch::randn({3, 7})}));
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[8]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 7]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(static_cast<void>(whole.forward({})), ConfigError);
  EXPECT_THROW(static_cast<void>(whole.forward({torch::zeros({3, 8}, torch::kLong)})), ConfigError);

  // A model whose declared input does not fit its first layer.
  Model bad = model;
  bad.input.shape = {7};
  try {
    static_cast<void>(StageModule::whole_model(bad, StageBuildOptions{}));
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("node '0'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in_features 8"), std::string::npos) << e.what();
  }
}

TEST(StageModule, TokenIdsOutOfRangeAreConfigErrors) {
  const Model model = gpt_model(1, 8, 2, 4, 5);
  const StageModule m = StageModule::whole_model(model, StageBuildOptions{});
  EXPECT_NO_THROW(static_cast<void>(m.forward({torch::full({1, 4}, 4, torch::kLong)})));
  EXPECT_THROW(static_cast<void>(m.forward({torch::full({1, 4}, 5, torch::kLong)})), ConfigError);
  EXPECT_THROW(static_cast<void>(m.forward({torch::full({1, 4}, -1, torch::kLong)})), ConfigError);
}

TEST(StageModule, LoadParametersChecksNamesAndShapes) {
  const Model model = mlp_model({3, 2});
  StageModule a = StageModule::whole_model(model, StageBuildOptions{1});
  const StageModule b = StageModule::whole_model(model, StageBuildOptions{2});
  std::map<std::string, torch::Tensor> w;
  for (const auto& [name, t] : b.named_parameters()) w[name] = t.detach().to(torch::kDouble);
  w["9.weight"] = torch::zeros({1});  // another stage's tensor: ignored
  a.load_parameters(w, "init.safetensors");
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(torch::equal(a.named_parameters()[i].second, b.named_parameters()[i].second));
    EXPECT_TRUE(a.named_parameters()[i].second.requires_grad());
  }
  w["0.bias"] = torch::zeros({3});
  try {
    a.load_parameters(w, "init.safetensors");
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("init.safetensors: tensor '0.bias' has shape [3]"),
              std::string::npos)
        << e.what();
  }
  w.erase("0.bias");
  EXPECT_THROW(a.load_parameters(w, "init.safetensors"), ConfigError);
}

TEST(ComputeLoss, MseAndCrossEntropyMatchTorch) {
  torch::manual_seed(7);
  const torch::Tensor out = torch::randn({4, 3});
  const torch::Tensor tgt = torch::randn({4, 3});
  EXPECT_NEAR(compute_loss(out, tgt, LossKind::kMse).item<double>(),
              (out - tgt).pow(2).mean().item<double>(), 1e-6);
  const torch::Tensor col = torch::randn({4, 1});
  EXPECT_NEAR(compute_loss(col, col.squeeze(1) + 1, LossKind::kMse).item<double>(), 1.0, 1e-6);
  EXPECT_THROW(static_cast<void>(compute_loss(out, torch::randn({4, 2}), LossKind::kMse)),
               ConfigError);

  const torch::Tensor logits = torch::randn({2, 5, 7});
  const torch::Tensor labels = torch::randint(0, 7, {2, 5}, torch::kLong);
  const torch::Tensor logp = torch::log_softmax(logits, -1);
  const double manual = -logp.gather(-1, labels.unsqueeze(-1)).mean().item<double>();
  EXPECT_NEAR(compute_loss(logits, labels, LossKind::kCrossEntropy).item<double>(), manual, 1e-6);
  EXPECT_THROW(
      static_cast<void>(compute_loss(logits, labels.to(torch::kFloat), LossKind::kCrossEntropy)),
      ConfigError);
  EXPECT_THROW(
      static_cast<void>(compute_loss(logits, labels.slice(1, 0, 4), LossKind::kCrossEntropy)),
      ConfigError);
  EXPECT_THROW(static_cast<void>(compute_loss(logits, labels + 7, LossKind::kCrossEntropy)),
               ConfigError);
}

TEST(ModelCheck, DataShapeMismatchNamesBothSides) {
  const Model model = mlp_model({8, 4, 2});
  try {
    check_data_matches_model(ValueType{false, {7}}, ValueType{false, {2}}, model, LossKind::kMse,
                             "'x.npy'", "'y.npy'");
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'x.npy' has samples of float32 [7]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input is float32 [8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("node '0'"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(check_data_matches_model(ValueType{false, {8}}, ValueType{false, {2}}, model,
                                           LossKind::kMse, "x", "y"));
  EXPECT_THROW(check_data_matches_model(ValueType{false, {8}}, ValueType{false, {3}}, model,
                                        LossKind::kMse, "x", "y"),
               ConfigError);
  EXPECT_NO_THROW(check_data_matches_model(ValueType{false, {8}}, ValueType{true, {}}, model,
                                           LossKind::kCrossEntropy, "x", "y"));
  EXPECT_THROW(check_data_matches_model(ValueType{false, {8}}, ValueType{false, {}}, model,
                                        LossKind::kCrossEntropy, "x", "y"),
               ConfigError);
  const Model gpt = gpt_model(1, 8, 2, 4, 5);
  EXPECT_NO_THROW(check_data_matches_model(ValueType{true, {4}}, ValueType{true, {4}}, gpt,
                                           LossKind::kCrossEntropy, "x", "y"));
  EXPECT_THROW(check_data_matches_model(ValueType{true, {5}}, ValueType{true, {5}}, gpt,
                                        LossKind::kCrossEntropy, "x", "y"),
               ConfigError);
}

TEST(ModelCheck, ParamAndStructureErrors) {
  Model heads = gpt_model(1, 8, 3, 4, 5);  // 8 % 3 != 0
  EXPECT_THROW(static_cast<void>(infer_value_types(heads)), ConfigError);
  Model two_sinks = mlp_model({4, 4, 4});
  two_sinks.edges.pop_back();  // node 2 no longer reads node 1: nodes 1 and 2 are both final
  EXPECT_THROW(static_cast<void>(final_node(two_sinks)), ConfigError);
  Model bad_loss = gpt_model(1, 8, 2, 4, 5);
  bad_loss.nodes.back().attrs["loss"] = "hinge";
  EXPECT_THROW(static_cast<void>(model_loss_kind(bad_loss)), ConfigError);
  EXPECT_EQ(parse_loss_kind("cross-entropy"), LossKind::kCrossEntropy);
  EXPECT_EQ(parse_loss_kind("l1"), std::nullopt);
}

}  // namespace
}  // namespace pipewright::exec
