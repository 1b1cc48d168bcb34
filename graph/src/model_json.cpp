// Model <-> JSON (format in docs/model-format.md).
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "model_check.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/graph/model.hpp"

namespace pipewright::graph {

namespace {

using json::At;
using json::Json;
using OrderedJson = nlohmann::ordered_json;

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMaxOffset = 1 << 20;  // output/input offsets of one node

Node parse_node(const At& at) {
  at.only_keys({"name", "kind", "params", "attrs", "cost"});
  Node node;
  node.name = at["name"].as_string();
  if (node.name.empty()) at["name"].fail("must not be empty");
  const At kind_at = at["kind"];
  const std::string kind = kind_at.as_string();
  const auto parsed = parse_node_kind(kind);
  if (!parsed) {
    kind_at.fail_graph("unknown node kind \"" + kind +
                       "\" (valid: linear, relu, gelu, layernorm, embedding, "
                       "causal_self_attention, mlp, transformer_block, loss, opaque)");
  }
  node.kind = *parsed;
  if (at.has("params")) {
    const At params = at["params"];
    params.expect_object();
    for (const auto& item : params.value.items()) {
      node.params[item.key()] = params[item.key()].as_int();
    }
  }
  if (at.has("attrs")) {
    const At attrs = at["attrs"];
    attrs.expect_object();
    for (const auto& item : attrs.value.items()) {
      node.attrs[item.key()] = attrs[item.key()].as_string();
    }
  }
  if (at.has("cost")) {
    const At cost = at["cost"];
    cost.only_keys({"forward_ms", "backward_ms", "input_grad_ms", "weight_grad_ms", "param_bytes",
                    "activation_bytes", "output_bytes"});
    NodeCost& c = node.cost;
    if (cost.has("forward_ms")) c.forward_ms = cost["forward_ms"].as_finite_nonnegative();
    if (cost.has("backward_ms")) c.backward_ms = cost["backward_ms"].as_finite_nonnegative();
    if (cost.has("input_grad_ms")) c.input_grad_ms = cost["input_grad_ms"].as_finite_nonnegative();
    if (cost.has("weight_grad_ms")) {
      c.weight_grad_ms = cost["weight_grad_ms"].as_finite_nonnegative();
    }
    if (cost.has("param_bytes")) c.param_bytes = cost["param_bytes"].as_int(0, kMaxInt);
    if (cost.has("activation_bytes")) {
      c.activation_bytes = cost["activation_bytes"].as_int(0, kMaxInt);
    }
    if (cost.has("output_bytes")) c.output_bytes = cost["output_bytes"].as_int(0, kMaxInt);
  }
  return node;
}

int node_ref(const Model& model, const At& at) {
  const std::string name = at.as_string();
  const int index = model.node_index(name);
  if (index < 0) at.fail_graph("dangling edge: no node named \"" + name + "\"");
  return index;
}

OrderedJson node_to_json(const Node& node) {
  OrderedJson j;
  j["name"] = node.name;
  j["kind"] = std::string(to_string(node.kind));
  if (!node.params.empty()) {
    OrderedJson params = OrderedJson::object();
    for (const auto& [k, v] : node.params) params[k] = v;
    j["params"] = params;
  }
  if (!node.attrs.empty()) {
    OrderedJson attrs = OrderedJson::object();
    for (const auto& [k, v] : node.attrs) attrs[k] = v;
    j["attrs"] = attrs;
  }
  OrderedJson cost;
  cost["forward_ms"] = node.cost.forward_ms;
  cost["backward_ms"] = node.cost.backward_ms;
  if (node.cost.input_grad_ms) cost["input_grad_ms"] = *node.cost.input_grad_ms;
  if (node.cost.weight_grad_ms) cost["weight_grad_ms"] = *node.cost.weight_grad_ms;
  cost["param_bytes"] = node.cost.param_bytes;
  cost["activation_bytes"] = node.cost.activation_bytes;
  cost["output_bytes"] = node.cost.output_bytes;
  j["cost"] = cost;
  return j;
}

bool is_plain_chain(const Model& model) {
  if (model.edges.size() + 1 != model.nodes.size()) return false;
  for (std::size_t i = 0; i < model.edges.size(); ++i) {
    const ModelEdge& e = model.edges[i];
    if (e.from != static_cast<int>(i) || e.to != static_cast<int>(i) + 1 || e.from_output != 0 ||
        e.to_input != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace

Model parse_model(std::string_view json_text, const std::string& source_name) {
  const json::Document doc =
      json::parse_strict(json_text, source_name, {kMaxModelFileBytes, kMaxJsonDepth});
  const At at{doc.root, doc.source, ""};
  at.only_keys({"version", "name", "micro_batch_size", "input", "nodes", "layers", "edges"});
  if (at.has("version")) (void)at["version"].as_int(1, 1);
  Model model;
  model.name = at.has("name") ? at["name"].as_string() : std::string();
  if (at.has("micro_batch_size"))
    model.micro_batch_size = at["micro_batch_size"].as_int(1, kMaxInt);

  const At input = at["input"];
  input.only_keys({"dtype", "shape"});
  model.input.dtype = input["dtype"].as_string();
  if (model.input.dtype != "float32" && model.input.dtype != "int64") {
    input["dtype"].fail("must be \"float32\" or \"int64\", got \"" + model.input.dtype + "\"");
  }
  const At shape = input["shape"];
  shape.expect_array();
  if (shape.value.empty()) shape.fail("must have at least one dimension");
  for (std::size_t i = 0; i < shape.value.size(); ++i) {
    model.input.shape.push_back(shape[i].as_int(1, kMaxInt));
  }

  const bool has_nodes = at.has("nodes");
  const bool has_layers = at.has("layers");
  if (has_nodes == has_layers) {
    at.fail("exactly one of \"nodes\" (with \"edges\") or \"layers\" (a chain) is required");
  }
  if (has_layers && at.has("edges")) at["edges"].fail("\"edges\" is not allowed with \"layers\"");
  const At list = at[has_nodes ? "nodes" : "layers"];
  list.expect_array();
  if (list.value.empty()) list.fail("the model has no nodes");
  if (list.value.size() > kMaxModelNodes) {
    list.fail(std::to_string(list.value.size()) + " nodes, more than the limit of " +
              std::to_string(kMaxModelNodes));
  }
  model.nodes.reserve(list.value.size());
  for (std::size_t i = 0; i < list.value.size(); ++i) {
    const At node_at = list[i];
    node_at.expect_object();
    model.nodes.push_back(parse_node(node_at));
  }
  if (has_layers) {
    for (std::size_t i = 0; i + 1 < model.nodes.size(); ++i) {
      model.edges.push_back(ModelEdge{static_cast<int>(i), 0, static_cast<int>(i) + 1, 0});
    }
  } else {
    const At edges = at["edges"];
    edges.expect_array();
    if (edges.value.size() > kMaxModelEdges) {
      edges.fail(std::to_string(edges.value.size()) + " edges, more than the limit of " +
                 std::to_string(kMaxModelEdges));
    }
    // Duplicate names must be reported before edges are resolved by name.
    detail::validate_model(Model{model.name, model.input, model.nodes, {}, model.micro_batch_size},
                           doc.source, "nodes");
    for (std::size_t i = 0; i < edges.value.size(); ++i) {
      const At e = edges[i];
      e.only_keys({"from", "from_output", "to", "to_input"});
      ModelEdge edge;
      edge.from = node_ref(model, e["from"]);
      edge.to = node_ref(model, e["to"]);
      if (e.has("from_output")) {
        edge.from_output = static_cast<int>(e["from_output"].as_int(0, kMaxOffset));
      }
      if (e.has("to_input")) edge.to_input = static_cast<int>(e["to_input"].as_int(0, kMaxOffset));
      model.edges.push_back(edge);
    }
  }
  detail::validate_model(model, doc.source, has_nodes ? "nodes" : "layers");
  return model;
}

Model load_model(const std::string& path) {
  return parse_model(json::read_text_file(path, "model file", kMaxModelFileBytes), path);
}

std::string to_json(const Model& model) {
  OrderedJson j;
  j["version"] = 1;
  j["name"] = model.name;
  j["micro_batch_size"] = model.micro_batch_size;
  j["input"]["dtype"] = model.input.dtype;
  j["input"]["shape"] = model.input.shape;
  OrderedJson nodes = OrderedJson::array();
  for (const Node& node : model.nodes) nodes.push_back(node_to_json(node));
  if (is_plain_chain(model)) {
    j["layers"] = nodes;
  } else {
    j["nodes"] = nodes;
    OrderedJson edges = OrderedJson::array();
    for (const ModelEdge& e : model.edges) {
      OrderedJson ej;
      ej["from"] = model.nodes.at(static_cast<std::size_t>(e.from)).name;
      ej["from_output"] = e.from_output;
      ej["to"] = model.nodes.at(static_cast<std::size_t>(e.to)).name;
      ej["to_input"] = e.to_input;
      edges.push_back(ej);
    }
    j["edges"] = edges;
  }
  return j.dump(2) + "\n";
}

}  // namespace pipewright::graph
