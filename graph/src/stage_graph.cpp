#include "pipewright/graph/stage_graph.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "topology.hpp"

namespace pipewright::graph {

namespace {

detail::Digraph stage_digraph(const StageGraph& graph) {
  detail::Digraph g;
  g.vertices = static_cast<int>(graph.stages.size());
  g.edges = graph.stage_dependencies();
  return g;
}

std::string describe_cycle(const std::vector<int>& cycle) {
  std::string out;
  for (int s : cycle) out += "stage " + std::to_string(s) + " -> ";
  if (!cycle.empty()) out += "stage " + std::to_string(cycle.front());
  return out;
}

}  // namespace

std::vector<std::pair<int, int>> StageGraph::stage_dependencies() const {
  std::set<std::pair<int, int>> deps;
  for (const CutValue& e : edges) {
    if (e.producer_stage >= 0) deps.emplace(e.producer_stage, e.consumer_stage);
  }
  return {deps.begin(), deps.end()};
}

bool StageGraph::has_cycle() const { return !detail::find_cycle(stage_digraph(*this)).empty(); }

std::vector<int> StageGraph::topological_order() const {
  const detail::Digraph g = stage_digraph(*this);
  std::vector<int> order = detail::ordered_topological_order(g);
  if (order.size() != stages.size()) {
    throw InvalidGraphError("the stage graph has a cycle: " +
                            describe_cycle(detail::find_cycle(g)));
  }
  return order;
}

CriticalPath StageGraph::critical_path(double link_gbps) const {
  const detail::Digraph g = stage_digraph(*this);
  PW_CHECK(detail::find_cycle(g).empty(), InvalidGraphError,
           "the stage graph has a cycle: " << describe_cycle(detail::find_cycle(g)));
  std::vector<double> vertex_weight;
  vertex_weight.reserve(stages.size());
  for (const StageInfo& s : stages) vertex_weight.push_back(s.forward_ms + s.backward_ms);
  std::map<std::pair<int, int>, std::int64_t> bytes;
  for (const CutValue& e : edges) {
    if (e.producer_stage >= 0) bytes[{e.producer_stage, e.consumer_stage}] += e.bytes;
  }
  std::vector<double> edge_weight;
  edge_weight.reserve(g.edges.size());
  for (const auto& dep : g.edges) {
    // bytes / (GB/s * 1e9) seconds = bytes / (gbps * 1e6) ms; twice: activation and gradient.
    edge_weight.push_back(
        link_gbps > 0.0 ? 2.0 * static_cast<double>(bytes[dep]) / (link_gbps * 1e6) : 0.0);
  }
  const detail::WeightedPath path = detail::longest_path(g, vertex_weight, edge_weight);
  return CriticalPath{path.vertices, path.length};
}

StageGraph build_stage_graph(const Model& model, const std::vector<int>& node_stage,
                             int num_stages) {
  const std::size_t n = model.nodes.size();
  PW_CHECK(num_stages >= 1, InvalidGraphError, "stage count must be >= 1, got " << num_stages);
  PW_CHECK(node_stage.size() == n, InvalidGraphError,
           "stage assignment has " << node_stage.size() << " entries for " << n << " nodes");
  StageGraph graph;
  graph.stages.resize(static_cast<std::size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) graph.stages[static_cast<std::size_t>(s)].index = s;

  const std::vector<int> order = model.topological_order();
  std::vector<int> position(n);
  for (std::size_t i = 0; i < order.size(); ++i) {
    position[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
  }
  for (int v : order) {
    const int s = node_stage[static_cast<std::size_t>(v)];
    PW_CHECK(s >= 0 && s < num_stages, InvalidGraphError,
             "node \"" << model.nodes[static_cast<std::size_t>(v)].name
                       << "\" is assigned to stage " << s << ", outside [0, " << num_stages << ")");
    graph.stages[static_cast<std::size_t>(s)].nodes.push_back(v);
  }
  for (StageInfo& stage : graph.stages) {
    PW_CHECK(!stage.nodes.empty(), InvalidGraphError, "stage " << stage.index << " has no nodes");
    double input_grad = 0.0;
    double weight_grad = 0.0;
    bool split = true;
    for (int v : stage.nodes) {
      const NodeCost& c = model.nodes[static_cast<std::size_t>(v)].cost;
      stage.forward_ms += c.forward_ms;
      stage.backward_ms += c.backward_ms;
      stage.param_bytes += c.param_bytes;
      stage.activation_bytes += c.activation_bytes;
      split = split && c.input_grad_ms && c.weight_grad_ms;
      if (split) {
        input_grad += *c.input_grad_ms;
        weight_grad += *c.weight_grad_ms;
      }
    }
    if (split) {
      stage.input_grad_ms = input_grad;
      stage.weight_grad_ms = weight_grad;
    }
  }

  // Values crossing cuts, keyed by (value, consumer stage) -> first reading node (topological).
  // A value is (producer node, output); node -1 is the model input.
  using Value = std::pair<int, int>;
  std::map<std::pair<Value, int>, int> crossings;
  auto note = [&](Value value, int consumer_stage, int consumer_node) {
    auto [it, fresh] = crossings.emplace(std::make_pair(value, consumer_stage), consumer_node);
    if (!fresh && position[static_cast<std::size_t>(consumer_node)] <
                      position[static_cast<std::size_t>(it->second)]) {
      it->second = consumer_node;
    }
  };
  for (const ModelEdge& e : model.edges) {
    const int p = node_stage[static_cast<std::size_t>(e.from)];
    const int c = node_stage[static_cast<std::size_t>(e.to)];
    if (p != c) note(Value{e.from, e.from_output}, c, e.to);
  }
  const std::vector<bool> readers = model.model_input_readers();
  for (std::size_t v = 0; v < n; ++v) {
    if (readers[v]) {
      note(Value{-1, 0}, node_stage[v], static_cast<int>(v));
    }
  }

  // Slot order: inputs by (producer stage, producer position, output), model input first;
  // outputs by (producer position, output).
  auto stage_of = [&](int node) {
    return node < 0 ? -1 : node_stage[static_cast<std::size_t>(node)];
  };
  auto pos_of = [&](int node) { return node < 0 ? -1 : position[static_cast<std::size_t>(node)]; };
  auto input_key = [&](const Value& v) {
    return std::make_tuple(stage_of(v.first), pos_of(v.first), v.second);
  };
  std::vector<std::vector<Value>> inputs(static_cast<std::size_t>(num_stages));
  std::vector<std::set<std::tuple<int, int, int>>> outputs(static_cast<std::size_t>(num_stages));
  for (const auto& [key, reader] : crossings) {
    const auto& [value, consumer] = key;
    inputs[static_cast<std::size_t>(consumer)].push_back(value);
    if (value.first >= 0) {
      outputs[static_cast<std::size_t>(stage_of(value.first))].emplace(pos_of(value.first),
                                                                       value.first, value.second);
    }
  }
  // Slot of each (stage, value): outputs keyed by value alone (a value has one producer stage).
  std::map<std::pair<int, Value>, int> input_slot;
  std::map<Value, int> output_slot;
  for (int s = 0; s < num_stages; ++s) {
    auto& in = inputs[static_cast<std::size_t>(s)];
    std::sort(in.begin(), in.end(),
              [&](const Value& a, const Value& b) { return input_key(a) < input_key(b); });
    StageInfo& stage = graph.stages[static_cast<std::size_t>(s)];
    for (const Value& v : in) {
      input_slot[{s, v}] = static_cast<int>(stage.inputs.size());
      stage.inputs.push_back(StageValue{v.first, v.second});
    }
    for (const auto& [pos, node, output] : outputs[static_cast<std::size_t>(s)]) {
      output_slot[Value{node, output}] = static_cast<int>(stage.outputs.size());
      stage.outputs.push_back(StageValue{node, output});
      stage.output_bytes += model.nodes[static_cast<std::size_t>(node)].cost.output_bytes;
    }
  }
  for (const auto& [key, reader] : crossings) {
    const auto& [value, consumer] = key;
    CutValue cut;
    cut.producer_stage = stage_of(value.first);
    cut.producer_output = value.first < 0 ? 0 : output_slot.at(value);
    cut.consumer_stage = consumer;
    cut.consumer_input = input_slot.at({consumer, value});
    cut.bytes = value.first < 0
                    ? model.input_bytes()
                    : model.nodes[static_cast<std::size_t>(value.first)].cost.output_bytes;
    cut.producer_node = value.first;
    cut.consumer_node = reader;
    graph.edges.push_back(cut);
  }
  std::sort(graph.edges.begin(), graph.edges.end(), [](const CutValue& a, const CutValue& b) {
    return std::tie(a.consumer_stage, a.consumer_input, a.producer_stage) <
           std::tie(b.consumer_stage, b.consumer_input, b.producer_stage);
  });
  const std::vector<int> cycle = detail::find_cycle(stage_digraph(graph));
  PW_CHECK(cycle.empty(), InvalidGraphError,
           "the stage assignment makes the stage graph cyclic: " << describe_cycle(cycle));
  return graph;
}

}  // namespace pipewright::graph
