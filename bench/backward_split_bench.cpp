// B vs I + W of the executor's stages (issue 22 item 6, Note [Split backward] in
// exec/src/model/split_backward.hpp), side by side in one process: a model is partitioned as
// `pipewright run` does (balanced), each stage gets realistic inputs (the previous stages'
// outputs on a random batch), and per stage the medians over the repeats are printed of
//   B                 torch::autograd::backward of the outputs (the interpreter's B)
//   I, W              backward_input / backward_weight (the interpreter's I and W)
//   naive I, naive W  the split before issue 22: autograd::grad on the inputs with the graph
//                     retained, then autograd::backward restricted to the parameters
// The three variants run interleaved in every repeat, each on a fresh forward.
//   pw_backward_split_bench MODEL.json [--stages P] [--micro-batch B] [--repeats N] [--seed S]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/model_check.hpp"
#include "model/split_backward.hpp"
#include "model/stage_module.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"

namespace {

using pipewright::exec::backward_input;
using pipewright::exec::backward_weight;
using pipewright::exec::LossKind;
using pipewright::exec::StageModule;
using pipewright::exec::WeightBackward;
using Tensors = std::vector<torch::Tensor>;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Tensors leaves(const Tensors& values) {
  Tensors out;
  for (const auto& v : values) {
    auto t = v.detach();
    if (t.is_floating_point()) t.requires_grad_(true);
    out.push_back(t);
  }
  return out;
}

// One stage with its inputs and what its backward starts from.
struct StageCase {
  const StageModule* module = nullptr;
  Tensors inputs;
  Tensors out_grads;  // per output (undefined for int64 outputs)
  torch::Tensor target;
  bool has_loss = false;
  LossKind loss = LossKind::kCrossEntropy;

  // Forward with grad: (roots, their gradients).
  std::pair<Tensors, Tensors> forward(const Tensors& in) const {
    Tensors outs = module->forward(in);
    Tensors roots;
    Tensors grads;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      if (has_loss && static_cast<int>(k) == *module->prediction_output()) {
        roots.push_back(pipewright::exec::compute_loss(outs[k], target, loss));
        grads.emplace_back();
      } else if (outs[k].requires_grad()) {
        roots.push_back(outs[k]);
        grads.push_back(out_grads[k]);
      }
    }
    return {roots, grads};
  }
};

struct Times {
  std::vector<double> b, i, w, naive_i, naive_w;
};

void zero_grads(const StageModule& m) {
  for (const auto& p : m.parameters()) p.mutable_grad() = torch::Tensor();
}

void measure(const StageCase& c, int repeats, Times& t) {
  const Tensors params = c.module->parameters();
  for (int r = -2; r < repeats; ++r) {  // two untimed warm-up rounds
    const bool keep = r >= 0;
    {  // B
      const Tensors in = leaves(c.inputs);
      auto [roots, grads] = c.forward(in);
      auto t0 = Clock::now();
      torch::autograd::backward(roots, grads);
      roots.clear();  // every variant frees its graph inside its timing, as the interpreter does
      if (keep) t.b.push_back(ms_since(t0));
    }
    zero_grads(*c.module);
    {  // I then W
      const Tensors in = leaves(c.inputs);
      auto [roots, grads] = c.forward(in);
      WeightBackward pending;
      auto t0 = Clock::now();
      const Tensors g = backward_input(roots, grads, in, params, &pending);
      roots.clear();  // as the interpreter drops the outputs after I
      if (keep) t.i.push_back(ms_since(t0));
      t0 = Clock::now();
      backward_weight(pending);
      if (keep) t.w.push_back(ms_since(t0));
    }
    zero_grads(*c.module);
    {  // the split before issue 22
      const Tensors in = leaves(c.inputs);
      auto [roots, grads] = c.forward(in);
      Tensors need;
      for (const auto& x : in) {
        if (x.requires_grad()) need.push_back(x);
      }
      auto t0 = Clock::now();
      if (!need.empty()) {
        (void)torch::autograd::grad(roots, need, grads, /*retain_graph=*/true,
                                    /*create_graph=*/false, /*allow_unused=*/true);
      }
      if (keep) t.naive_i.push_back(ms_since(t0));
      t0 = Clock::now();
      torch::autograd::backward(roots, grads, /*retain_graph=*/false, /*create_graph=*/false,
                                params);
      roots.clear();
      if (keep) t.naive_w.push_back(ms_since(t0));
    }
    zero_grads(*c.module);
  }
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL.json [--stages P] [--micro-batch B] [--repeats N] [--seed S]\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  int stages = 2;
  std::int64_t micro = 2;
  int repeats = 11;
  std::uint64_t seed = 0;
  for (int a = 2; a + 1 < argc; a += 2) {
    const std::string flag = argv[a];
    const char* value = argv[a + 1];
    if (flag == "--stages") {
      stages = std::atoi(value);
    } else if (flag == "--micro-batch") {
      micro = std::atoll(value);
    } else if (flag == "--repeats") {
      repeats = std::atoi(value);
    } else if (flag == "--seed") {
      seed = std::strtoull(value, nullptr, 10);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const pipewright::graph::Model model = pipewright::graph::load_model(path);
  pipewright::graph::PartitionOptions popts;
  popts.stages = stages;
  const pipewright::graph::Partition partition = pipewright::graph::partition_model(model, popts);
  torch::manual_seed(static_cast<std::int64_t>(seed));

  // The model input: token ids below every embedding's size, or N(0, 1) floats.
  const auto types = pipewright::exec::infer_value_types(model);
  std::int64_t vocab = 2;
  bool any_embedding = false;
  for (const auto& n : model.nodes) {
    const auto it = n.params.find("num_embeddings");
    if (it == n.params.end()) continue;
    vocab = any_embedding ? std::min(vocab, it->second) : it->second;
    any_embedding = true;
  }
  std::vector<std::int64_t> in_shape{micro};
  for (auto d : model.input.shape) in_shape.push_back(d);
  const bool int_input = model.input.dtype == "int64";
  std::map<std::pair<int, int>, torch::Tensor> values;
  values[{-1, 0}] =
      int_input ? torch::randint(0, vocab, in_shape, torch::kLong) : torch::randn(in_shape);
  const LossKind loss = pipewright::exec::model_loss_kind(model).value_or(
      int_input ? LossKind::kCrossEntropy : LossKind::kMse);

  std::vector<std::unique_ptr<StageModule>> modules;
  std::vector<StageCase> cases;
  for (const auto& info : partition.graph.stages) {
    modules.push_back(std::make_unique<StageModule>(
        model, info, pipewright::exec::StageBuildOptions{seed, torch::kCPU, torch::kFloat32}));
    StageCase c;
    c.module = modules.back().get();
    for (const auto& v : c.module->inputs()) c.inputs.push_back(values.at({v.node, v.output}));
    Tensors outs;
    {
      torch::NoGradGuard no_grad;
      outs = c.module->forward(c.inputs);
    }
    for (std::size_t k = 0; k < outs.size(); ++k) {
      const auto& v = c.module->outputs()[k];
      values[{v.node, v.output}] = outs[k];
      c.out_grads.push_back(outs[k].is_floating_point() ? torch::randn_like(outs[k]) * 1e-3
                                                        : torch::Tensor());
    }
    if (const auto pred = c.module->prediction_output()) {
      c.has_loss = true;
      c.loss = loss;
      const auto& out = outs[static_cast<std::size_t>(*pred)];
      c.target =
          loss == LossKind::kCrossEntropy
              ? torch::randint(0, out.size(-1), out.sizes().slice(0, out.dim() - 1), torch::kLong)
              : torch::randn_like(out);
    }
    cases.push_back(std::move(c));
  }

  std::printf(
      "model %s: %zu nodes, %d stages (balanced), micro batch %lld, %d repeats, "
      "median ms\n",
      model.name.c_str(), model.nodes.size(), stages, static_cast<long long>(micro), repeats);
  std::printf("%5s %9s %9s %9s %9s %8s %9s %9s %9s %8s\n", "stage", "B", "I", "W", "I+W", "(I+W)/B",
              "naive_I", "naive_W", "naive_I+W", "naive/B");
  double sum_b = 0;
  double sum_iw = 0;
  double sum_naive = 0;
  for (std::size_t s = 0; s < cases.size(); ++s) {
    Times t;
    measure(cases[s], repeats, t);
    const double b = median(t.b);
    const double i = median(t.i);
    const double w = median(t.w);
    const double ni = median(t.naive_i);
    const double nw = median(t.naive_w);
    // I + W and naive I + W: medians of the per-repeat sums.
    std::vector<double> iw;
    std::vector<double> niw;
    for (std::size_t r = 0; r < t.i.size(); ++r) {
      iw.push_back(t.i[r] + t.w[r]);
      niw.push_back(t.naive_i[r] + t.naive_w[r]);
    }
    const double siw = median(iw);
    const double sniw = median(niw);
    sum_b += b;
    sum_iw += siw;
    sum_naive += sniw;
    std::printf("%5zu %9.2f %9.2f %9.2f %9.2f %8.3f %9.2f %9.2f %9.2f %8.3f\n", s, b, i, w, siw,
                siw / b, ni, nw, sniw, sniw / b);
  }
  std::printf("%5s %9.2f %9s %9s %9.2f %8.3f %9s %9s %9.2f %8.3f\n", "all", sum_b, "", "", sum_iw,
              sum_iw / sum_b, "", "", sum_naive, sum_naive / sum_b);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pw_backward_split_bench: %s\n", e.what());
    return 2;
  }
}
