// The backward split (Note [Split backward] in exec/src/model/split_backward.hpp): I
// (backward_input) then W (backward_weight) must give the input and parameter gradients of one full
// backward, on graphs built to break a naive split (a parameter used above and below in S, a
// parameter-only subgraph shared by two layers, no differentiable input, unused inputs, a loss
// root), and on stages of the built-in GPT.
#include "model/split_backward.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "model/stage_module.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/stage_graph.hpp"

namespace pipewright::exec {
namespace {

using Tensors = std::vector<torch::Tensor>;
// Builds the graph: (inputs, params) -> (roots, root gradients; undefined for a scalar loss).
using GraphFn = std::function<std::pair<Tensors, Tensors>(const Tensors&, const Tensors&)>;

struct Grads {
  Tensors inputs;
  Tensors params;
};

Tensors leaves(const Tensors& values) {
  Tensors out;
  for (const auto& v : values) {
    auto t = v.detach().clone();
    if (t.is_floating_point()) t.requires_grad_(true);
    out.push_back(t);
  }
  return out;
}

Grads full_backward(const GraphFn& fn, const Tensors& in0, const Tensors& p0) {
  const Tensors in = leaves(in0);
  const Tensors p = leaves(p0);
  auto [roots, grads] = fn(in, p);
  torch::autograd::backward(roots, grads);
  Grads g;
  for (const auto& t : in) g.inputs.push_back(t.is_floating_point() ? t.grad() : torch::Tensor());
  for (const auto& t : p) g.params.push_back(t.grad());
  return g;
}

Grads split_backward(const GraphFn& fn, const Tensors& in0, const Tensors& p0) {
  const Tensors in = leaves(in0);
  const Tensors p = leaves(p0);
  WeightBackward pending;
  Grads g;
  {
    auto [roots, grads] = fn(in, p);
    g.inputs = backward_input(roots, grads, in, p, &pending);
  }  // the roots go, as the interpreter drops a stage's outputs after I
  for (const auto& t : p) EXPECT_FALSE(t.grad().defined()) << "I must not touch weight grads";
  backward_weight(pending);
  EXPECT_TRUE(pending.empty());
  for (const auto& t : p) g.params.push_back(t.grad());
  return g;
}

void expect_same(const Tensors& want, const Tensors& got, const char* what, double tol = 0) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].defined(), got[i].defined()) << what << " " << i;
    if (!want[i].defined()) continue;
    const double diff = (want[i] - got[i]).abs().max().item<double>();
    EXPECT_LE(diff, tol) << what << " " << i;
  }
}

void expect_split_equals_full(const GraphFn& fn, const Tensors& in, const Tensors& p,
                              double tol = 0) {
  const Grads full = full_backward(fn, in, p);
  const Grads split = split_backward(fn, in, p);
  expect_same(full.inputs, split.inputs, "input gradient", tol);
  expect_same(full.params, split.params, "parameter gradient", tol);
}

torch::Tensor rand(std::vector<std::int64_t> shape) {
  return torch::randn(shape, torch::dtype(torch::kDouble));
}

TEST(SplitBackward, LinearChainWithLossAndOutput) {
  torch::manual_seed(1);
  const GraphFn fn = [](const Tensors& in, const Tensors& p) -> std::pair<Tensors, Tensors> {
    auto h = torch::tanh(torch::linear(in[0], p[0], p[1]));
    auto y = torch::linear(torch::layer_norm(h, {6}, p[2], p[3]), p[4]);
    auto loss = y.pow(2).mean();
    return {{h, loss}, {torch::ones_like(h) * 0.5, torch::Tensor()}};
  };
  expect_split_equals_full(fn, {rand({4, 5})},
                           {rand({6, 5}), rand({6}), rand({6}), rand({6}), rand({3, 6})});
}

TEST(SplitBackward, ParameterUsedAboveAndBelowInTheInputPath) {
  // W feeds two boundary nodes, one below the other: W's gradient must count each use once.
  torch::manual_seed(2);
  const GraphFn fn = [](const Tensors& in, const Tensors& p) -> std::pair<Tensors, Tensors> {
    auto y = torch::linear(torch::relu(torch::linear(in[0], p[0])), p[0]) * p[1];
    return {{y}, {torch::ones_like(y)}};
  };
  expect_split_equals_full(fn, {rand({3, 4})}, {rand({4, 4}), rand({4})});
}

TEST(SplitBackward, SharedParameterOnlySubgraph) {
  // w2 = 2 * w, computed once (outside S) and used by two layers.
  torch::manual_seed(3);
  const GraphFn fn = [](const Tensors& in, const Tensors& p) -> std::pair<Tensors, Tensors> {
    auto w2 = p[0] * 2.0 + p[1].sum();
    auto y = torch::matmul(torch::sigmoid(torch::matmul(in[0], w2)), w2) + in[1];
    return {{y}, {torch::full_like(y, 0.3)}};
  };
  expect_split_equals_full(fn, {rand({2, 3}), rand({2, 3})}, {rand({3, 3}), rand({3})});
}

TEST(SplitBackward, NoDifferentiableInputLeavesEverythingToW) {
  torch::manual_seed(4);
  const GraphFn fn = [](const Tensors& in, const Tensors& p) -> std::pair<Tensors, Tensors> {
    auto y = torch::linear(torch::embedding(p[0], in[0]), p[1]);
    return {{y.sum()}, {torch::Tensor()}};
  };
  const Tensors in{torch::tensor({{0, 2, 1}, {3, 3, 0}}, torch::kLong)};
  expect_split_equals_full(fn, in, {rand({4, 5}), rand({2, 5})});
}

TEST(SplitBackward, UnusedInputHasNoGradientAndUnusedParameterNone) {
  torch::manual_seed(5);
  const GraphFn fn = [](const Tensors& in, const Tensors& p) -> std::pair<Tensors, Tensors> {
    auto y = torch::linear(in[0], p[0]);
    return {{y}, {torch::ones_like(y)}};
  };
  const Tensors in{rand({2, 3}), rand({2, 3})};
  const Tensors p{rand({3, 3}), rand({3})};
  expect_split_equals_full(fn, in, p);
  const Grads split = split_backward(fn, in, p);
  EXPECT_FALSE(split.inputs[1].defined());
  EXPECT_FALSE(split.params[1].defined());
}

TEST(SplitBackward, MultiOutputNodeOnTheBoundary) {
  // unbind's node has several outputs; the boundary node below it (mul by p) sees one of them.
  torch::manual_seed(6);
  const GraphFn fn = [](const Tensors& in, const Tensors& p) -> std::pair<Tensors, Tensors> {
    auto parts = torch::matmul(in[0], p[0]).unbind(1);
    auto y = parts[0] * p[1] + parts[2].exp() * p[1];
    return {{y}, {torch::ones_like(y)}};
  };
  expect_split_equals_full(fn, {rand({4, 3})}, {rand({3, 3}), rand({4})});
}

// Stages of a small built-in GPT (float32, as the executor runs it): split == full within 1e-6.
class SplitBackwardGpt : public ::testing::TestWithParam<int> {};

TEST_P(SplitBackwardGpt, StageGradientsMatchTheFullBackward) {
  graph::GptSpec spec;
  spec.layers = 2;
  spec.hidden = 32;
  spec.heads = 4;
  spec.seq = 8;
  spec.vocab = 50;
  const graph::Model model = graph::make_gpt(spec);
  // embed+block0 | block1 | ln_f+head: the first reads tokens, the last computes the loss.
  const graph::StageGraph g = graph::build_stage_graph(model, {0, 0, 1, 2, 2}, 3);
  const int s = GetParam();
  const StageModule stage(model, g.stages.at(static_cast<std::size_t>(s)), {7});
  torch::manual_seed(7);
  const torch::Tensor tokens = torch::randint(0, spec.vocab, {3, spec.seq}, torch::kLong);
  const Tensors in0 = s == 0 ? Tensors{tokens} : Tensors{torch::randn({3, spec.seq, 32})};
  const Tensors p0 = stage.parameters();
  const torch::Tensor target = torch::randint(0, spec.vocab, {3, spec.seq}, torch::kLong);
  const torch::Tensor out_grad = torch::randn({3, spec.seq, 32}) * 1e-2;
  // The stage's own tensors are the parameters: copy them in, run, read .grad.
  const auto run = [&](bool split) {
    for (const auto& p : stage.parameters()) p.mutable_grad() = torch::Tensor();
    Tensors in = leaves(in0);
    Tensors roots = stage.forward(in);
    Tensors grads;
    if (s == 2) {
      roots = {compute_loss(roots.at(0), target, LossKind::kCrossEntropy)};
      grads = {torch::Tensor()};
    } else {
      grads = {out_grad};
    }
    Grads gr;
    if (split) {
      WeightBackward pending;
      gr.inputs = backward_input(roots, grads, in, p0, &pending);
      roots.clear();
      backward_weight(pending);
    } else {
      torch::autograd::backward(roots, grads);
      for (const auto& t : in) gr.inputs.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    }
    for (const auto& p : stage.parameters()) gr.params.push_back(p.grad().clone());
    return gr;
  };
  const Grads full = run(false);
  const Grads split = run(true);
  expect_same(full.inputs, split.inputs, "input gradient", 1e-6);
  expect_same(full.params, split.params, "parameter gradient", 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Stages, SplitBackwardGpt, ::testing::Values(0, 1, 2));

}  // namespace
}  // namespace pipewright::exec
