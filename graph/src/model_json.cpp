// Model <-> JSON (format in docs/model-format.md).
#include <filesystem>
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

std::vector<std::int64_t> parse_shape(const At& at, bool allow_empty) {
  at.expect_array();
  if (!allow_empty && at.value.empty()) at.fail("must have at least one dimension");
  std::vector<std::int64_t> shape;
  for (std::size_t i = 0; i < at.value.size(); ++i) shape.push_back(at[i].as_int(1, kMaxInt));
  return shape;
}

std::string parse_script_dtype(const At& at) {
  std::string dtype = at.as_string();
  if (!is_script_dtype(dtype)) {
    at.fail("must be \"float32\", \"int64\", \"float64\" or \"bool\", got \"" + dtype + "\"");
  }
  return dtype;
}

std::vector<ScriptValue> parse_script_values(const At& at, bool inputs) {
  at.expect_array();
  std::vector<ScriptValue> out;
  for (std::size_t i = 0; i < at.value.size(); ++i) {
    const At v = at[i];
    if (inputs) {
      v.only_keys({"name", "dtype", "shape", "model_input"});
    } else {
      v.only_keys({"name", "dtype", "shape"});
    }
    ScriptValue value;
    value.name = v["name"].as_string();
    value.dtype = parse_script_dtype(v["dtype"]);
    value.shape = parse_shape(v["shape"], true);
    if (inputs && v.has("model_input")) {
      value.model_input = static_cast<int>(v["model_input"].as_int(0, kMaxOffset));
    }
    out.push_back(std::move(value));
  }
  return out;
}

ScriptSpec parse_script(const At& at) {
  at.only_keys({"file", "inputs", "outputs", "parameters", "buffers"});
  ScriptSpec s;
  s.file = at["file"].as_string();
  s.path = s.file;
  s.inputs = parse_script_values(at["inputs"], true);
  s.outputs = parse_script_values(at["outputs"], false);
  if (at.has("parameters")) {
    const At list = at["parameters"];
    list.expect_array();
    for (std::size_t i = 0; i < list.value.size(); ++i) {
      const At p = list[i];
      p.only_keys({"name", "dtype", "shape", "tied_to"});
      ScriptParameter param;
      param.name = p["name"].as_string();
      param.dtype = parse_script_dtype(p["dtype"]);
      param.shape = parse_shape(p["shape"], true);
      if (p.has_value("tied_to")) param.tied_to = p["tied_to"].as_string();
      s.parameters.push_back(std::move(param));
    }
  }
  if (at.has("buffers")) {
    const At list = at["buffers"];
    list.expect_array();
    for (std::size_t i = 0; i < list.value.size(); ++i) {
      const At b = list[i];
      b.only_keys({"name", "dtype", "shape", "persistent"});
      ScriptBuffer buffer;
      buffer.name = b["name"].as_string();
      buffer.dtype = parse_script_dtype(b["dtype"]);
      buffer.shape = parse_shape(b["shape"], true);
      if (b.has("persistent")) buffer.persistent = b["persistent"].as_bool();
      s.buffers.push_back(std::move(buffer));
    }
  }
  return s;
}

NamedModelInput parse_input(const At& at, bool named) {
  if (named) {
    at.only_keys({"name", "dtype", "shape"});
  } else {
    at.only_keys({"dtype", "shape"});
  }
  NamedModelInput in;
  if (named && at.has("name")) in.name = at["name"].as_string();
  in.dtype = at["dtype"].as_string();
  if (in.dtype != "float32" && in.dtype != "int64") {
    at["dtype"].fail("must be \"float32\" or \"int64\", got \"" + in.dtype + "\"");
  }
  in.shape = parse_shape(at["shape"], false);
  return in;
}

Node parse_node(const At& at) {
  at.only_keys({"name", "kind", "params", "attrs", "cost", "script"});
  Node node;
  node.name = at["name"].as_string();
  if (node.name.empty()) at["name"].fail("must not be empty");
  const At kind_at = at["kind"];
  const std::string kind = kind_at.as_string();
  const auto parsed = parse_node_kind(kind);
  if (!parsed) {
    kind_at.fail_graph("unknown node kind \"" + kind +
                       "\" (valid: linear, relu, gelu, layernorm, embedding, "
                       "causal_self_attention, mlp, transformer_block, loss, opaque, "
                       "torchscript)");
  }
  node.kind = *parsed;
  if (at.has("script")) node.script = parse_script(at["script"]);
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
                    "activation_bytes", "output_bytes", "activation_fp32_bytes"});
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
    if (cost.has("activation_fp32_bytes")) {  // Note [Autocast bytes]
      c.activation_fp32_bytes = cost["activation_fp32_bytes"].as_int(0, kMaxInt);
    }
  }
  return node;
}

int node_ref(const Model& model, const At& at) {
  const std::string name = at.as_string();
  const int index = model.node_index(name);
  if (index < 0) at.fail_graph("dangling edge: no node named \"" + name + "\"");
  return index;
}

OrderedJson value_to_json(const ScriptValue& v, bool input) {
  OrderedJson j;
  j["name"] = v.name;
  j["dtype"] = v.dtype;
  j["shape"] = v.shape;
  if (input && v.model_input != 0) j["model_input"] = v.model_input;
  return j;
}

OrderedJson script_to_json(const ScriptSpec& s) {
  OrderedJson j;
  j["file"] = s.file;
  j["inputs"] = OrderedJson::array();
  for (const ScriptValue& v : s.inputs) j["inputs"].push_back(value_to_json(v, true));
  j["outputs"] = OrderedJson::array();
  for (const ScriptValue& v : s.outputs) j["outputs"].push_back(value_to_json(v, false));
  j["parameters"] = OrderedJson::array();
  for (const ScriptParameter& p : s.parameters) {
    OrderedJson pj;
    pj["name"] = p.name;
    pj["dtype"] = p.dtype;
    pj["shape"] = p.shape;
    if (!p.tied_to.empty()) pj["tied_to"] = p.tied_to;
    j["parameters"].push_back(pj);
  }
  j["buffers"] = OrderedJson::array();
  for (const ScriptBuffer& b : s.buffers) {
    OrderedJson bj;
    bj["name"] = b.name;
    bj["dtype"] = b.dtype;
    bj["shape"] = b.shape;
    bj["persistent"] = b.persistent;
    j["buffers"].push_back(bj);
  }
  return j;
}

OrderedJson node_to_json(const Node& node) {
  OrderedJson j;
  j["name"] = node.name;
  j["kind"] = std::string(to_string(node.kind));
  if (node.script) j["script"] = script_to_json(*node.script);
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
  if (node.cost.activation_fp32_bytes)
    cost["activation_fp32_bytes"] = *node.cost.activation_fp32_bytes;
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
  at.only_keys({"version", "name", "micro_batch_size", "input", "inputs", "source", "nodes",
                "layers", "edges"});
  if (at.has("version")) (void)at["version"].as_int(1, 1);
  Model model;
  model.name = at.has("name") ? at["name"].as_string() : std::string();
  if (at.has("micro_batch_size"))
    model.micro_batch_size = at["micro_batch_size"].as_int(1, kMaxInt);

  const NamedModelInput input = parse_input(at["input"], false);
  model.input.dtype = input.dtype;
  model.input.shape = input.shape;
  if (at.has("inputs")) {
    const At inputs = at["inputs"];
    inputs.expect_array();
    if (inputs.value.empty()) inputs.fail("must list at least one input");
    for (std::size_t i = 0; i < inputs.value.size(); ++i) {
      model.inputs.push_back(parse_input(inputs[i], true));
    }
  }
  if (at.has("source")) {
    const At source = at["source"];
    source.only_keys({"module", "torch", "init"});
    ModelSource src;
    if (source.has("module")) src.module = source["module"].as_string();
    if (source.has("torch")) src.torch = source["torch"].as_string();
    if (source.has("init")) src.init = source["init"].as_string();
    model.source = src;
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
    Model nodes_only = model;
    nodes_only.edges.clear();
    detail::validate_model(nodes_only, doc.source, "nodes");
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
  Model model = parse_model(json::read_text_file(path, "model file", kMaxModelFileBytes), path);
  // TorchScript files are named relative to the folder of the model file.
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  for (Node& node : model.nodes) {
    if (!node.script || std::filesystem::path(node.script->file).is_absolute()) continue;
    node.script->path = (folder / node.script->file).lexically_normal().string();
  }
  return model;
}

std::string to_json(const Model& model) {
  OrderedJson j;
  j["version"] = 1;
  j["name"] = model.name;
  j["micro_batch_size"] = model.micro_batch_size;
  j["input"]["dtype"] = model.input.dtype;
  j["input"]["shape"] = model.input.shape;
  if (!model.inputs.empty()) {
    OrderedJson inputs = OrderedJson::array();
    for (const NamedModelInput& in : model.inputs) {
      OrderedJson ij;
      ij["name"] = in.name;
      ij["dtype"] = in.dtype;
      ij["shape"] = in.shape;
      inputs.push_back(ij);
    }
    j["inputs"] = inputs;
  }
  if (model.source) {
    j["source"]["module"] = model.source->module;
    j["source"]["torch"] = model.source->torch;
    j["source"]["init"] = model.source->init;
  }
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
