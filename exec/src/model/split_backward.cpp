// The zero-bubble backward split (Note [Split backward] in split_backward.hpp).
#include "model/split_backward.hpp"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "compat/torch_compat.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;

// Records a boundary node's output gradients when the engine runs it during I.
class CaptureHook final : public torch::autograd::FunctionPreHook {
 public:
  explicit CaptureHook(variable_list* into) : into_(into) {}
  variable_list operator()(const variable_list& grads) override {
    *into_ = grads;
    return grads;
  }

 private:
  variable_list* into_;
};

// The gradient edge of a leaf or non-leaf tensor without creating an accumulator for a leaf the
// graph never used (function null then).
Edge edge_of(const torch::Tensor& t) {
  if (t.grad_fn()) return Edge(t.grad_fn(), t.output_nr());
  return Edge(torch::autograd::impl::try_get_grad_accumulator(t), 0);
}

torch::autograd::Engine& engine() { return torch::autograd::Engine::get_default_engine(); }

}  // namespace

struct WeightBackward::State {
  edge_list roots;
  variable_list grads;
  edge_list params;
};

WeightBackward::WeightBackward() = default;
WeightBackward::~WeightBackward() = default;
WeightBackward::WeightBackward(WeightBackward&&) noexcept = default;
WeightBackward& WeightBackward::operator=(WeightBackward&&) noexcept = default;

bool WeightBackward::empty() const noexcept {
  return !state_ || state_->roots.empty() || state_->params.empty();
}

std::vector<torch::Tensor> backward_input(const std::vector<torch::Tensor>& roots,
                                          const std::vector<torch::Tensor>& grads,
                                          const std::vector<torch::Tensor>& inputs,
                                          const std::vector<torch::Tensor>& params,
                                          WeightBackward* pending) {
  PW_ASSERT(pending != nullptr && roots.size() == grads.size(), "backward_input arguments");
  auto state = std::make_unique<WeightBackward::State>();
  std::vector<torch::Tensor> input_grads(inputs.size());

  edge_list root_edges;
  variable_list root_grads;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    PW_ASSERT(roots[i].requires_grad(), "backward_input: root " << i << " does not require grad");
    root_edges.push_back(torch::autograd::impl::gradient_edge(roots[i]));
    root_grads.push_back(grads[i].defined() ? grads[i] : torch::ones_like(roots[i]));
  }

  // The graph below the roots, with each node's parents (the nodes with an edge into it).
  std::unordered_map<Node*, std::vector<Node*>> parents;
  std::unordered_set<Node*> seen;
  std::vector<Node*> order;  // breadth-first from the roots: a deterministic order
  std::deque<Node*> queue;
  for (const Edge& e : root_edges) {
    if (seen.insert(e.function.get()).second) queue.push_back(e.function.get());
  }
  while (!queue.empty()) {
    Node* node = queue.front();
    queue.pop_front();
    order.push_back(node);
    for (const Edge& e : node->next_edges()) {
      Node* child = e.function.get();
      if (child == nullptr) continue;
      parents[child].push_back(node);
      if (seen.insert(child).second) queue.push_back(child);
    }
  }

  // S: the used inputs' nodes and every node above them.
  edge_list input_edges;
  std::vector<std::size_t> input_index;
  std::unordered_set<Node*> in_s;
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    if (!inputs[j].defined() || !inputs[j].requires_grad()) continue;
    PW_ASSERT(inputs[j].is_leaf(), "backward_input: input " << j << " is not a leaf");
    Edge e = edge_of(inputs[j]);
    if (!e.function || seen.count(e.function.get()) == 0) continue;  // unused: no gradient
    if (in_s.insert(e.function.get()).second) queue.push_back(e.function.get());
    input_edges.push_back(std::move(e));
    input_index.push_back(j);
  }
  while (!queue.empty()) {
    Node* node = queue.front();
    queue.pop_front();
    const auto it = parents.find(node);
    if (it == parents.end()) continue;
    for (Node* p : it->second) {
      if (in_s.insert(p).second) queue.push_back(p);
    }
  }

  // Boundary nodes: in S with an edge out of S. Their output gradients are recorded during I.
  std::vector<compat::NodePtr> boundary;
  std::unordered_set<Node*> boundary_seen;
  const auto collect = [&](const compat::NodePtr& node) {
    if (!node || in_s.count(node.get()) == 0 || !boundary_seen.insert(node.get()).second) return;
    for (const Edge& e : node->next_edges()) {
      if (e.function && in_s.count(e.function.get()) == 0) {
        boundary.push_back(node);
        return;
      }
    }
  };
  for (const Edge& e : root_edges) collect(e.function);
  for (Node* node : order) {
    for (const Edge& e : node->next_edges()) collect(e.function);
  }
  std::vector<variable_list> captured(boundary.size());
  std::vector<torch::autograd::FunctionPreHook*> hooks;
  for (std::size_t i = 0; i < boundary.size(); ++i) {
    auto hook = std::make_unique<CaptureHook>(&captured[i]);
    hooks.push_back(hook.get());
    boundary[i]->add_pre_hook(std::move(hook));
  }
  const auto remove_hooks = [&] {
    for (std::size_t i = 0; i < boundary.size(); ++i) {
      auto& list = boundary[i]->pre_hooks();
      list.erase(std::remove_if(list.begin(), list.end(),
                                [&](const auto& h) { return h.get() == hooks[i]; }),
                 list.end());
    }
  };

  if (!input_edges.empty()) {
    variable_list got;
    try {
      got = engine().execute(root_edges, root_grads, /*keep_graph=*/true, /*create_graph=*/false,
                             /*accumulate_grad=*/false, input_edges);
    } catch (...) {
      remove_hooks();
      throw;
    }
    for (std::size_t i = 0; i < got.size(); ++i) input_grads[input_index[i]] = got[i];
  }
  remove_hooks();

  // W's roots: every recorded output gradient of a boundary node, then the roots outside S. The
  // boundary nodes lose their edges into S (Note [Split backward]).
  for (std::size_t i = 0; i < boundary.size(); ++i) {
    for (std::size_t k = 0; k < captured[i].size(); ++k) {
      if (!captured[i][k].defined()) continue;
      state->roots.emplace_back(boundary[i], static_cast<std::uint32_t>(k));
      state->grads.push_back(std::move(captured[i][k]));
    }
    for (Edge& e : boundary[i]->next_edges()) {
      if (e.function && in_s.count(e.function.get()) != 0) e = Edge();
    }
  }
  for (std::size_t i = 0; i < root_edges.size(); ++i) {
    if (in_s.count(root_edges[i].function.get()) != 0) continue;
    state->roots.push_back(root_edges[i]);
    state->grads.push_back(root_grads[i]);
  }
  for (const torch::Tensor& p : params) {
    if (!p.requires_grad()) continue;
    Edge e = edge_of(p);
    if (e.function && seen.count(e.function.get()) != 0) state->params.push_back(std::move(e));
  }
  pending->state_ = std::move(state);
  return input_grads;
}

void backward_weight(WeightBackward& pending) {
  auto state = std::move(pending.state_);
  if (!state || state->roots.empty() || state->params.empty()) return;
  engine().execute(state->roots, state->grads, /*keep_graph=*/false, /*create_graph=*/false,
                   /*accumulate_grad=*/true, state->params);
}

}  // namespace pipewright::exec
