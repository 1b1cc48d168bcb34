#include "pipewright/graph/model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>

#include "model_check.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "topology.hpp"

namespace pipewright::graph {

namespace {

constexpr std::array<std::pair<NodeKind, std::string_view>, 11> kKindNames = {{
    {NodeKind::kLinear, "linear"},
    {NodeKind::kRelu, "relu"},
    {NodeKind::kGelu, "gelu"},
    {NodeKind::kLayerNorm, "layernorm"},
    {NodeKind::kEmbedding, "embedding"},
    {NodeKind::kCausalSelfAttention, "causal_self_attention"},
    {NodeKind::kMlp, "mlp"},
    {NodeKind::kTransformerBlock, "transformer_block"},
    {NodeKind::kLoss, "loss"},
    {NodeKind::kOpaque, "opaque"},
    {NodeKind::kTorchScript, "torchscript"},
}};

bool finite_nonnegative(double v) { return std::isfinite(v) && v >= 0.0; }

detail::Digraph node_digraph(const Model& model) {
  detail::Digraph g;
  g.vertices = static_cast<int>(model.nodes.size());
  g.edges.reserve(model.edges.size());
  for (const ModelEdge& e : model.edges) g.edges.emplace_back(e.from, e.to);
  return g;
}

using Where = std::function<std::string(const std::string&)>;

void validate_shape(const std::vector<std::int64_t>& shape, const std::string& at,
                    const Where& where) {
  for (std::size_t d = 0; d < shape.size(); ++d) {
    PW_CHECK(shape[d] > 0, InvalidGraphError,
             where(at + "/shape/" + std::to_string(d)) << ": must be > 0, got " << shape[d]);
  }
}

void validate_dtype(const std::string& dtype, const std::string& at, const Where& where) {
  PW_CHECK(
      is_script_dtype(dtype), InvalidGraphError,
      where(at + "/dtype") << ": must be \"float32\", \"int64\", \"float64\" or \"bool\", got \""
                           << dtype << "\"");
}

// The `script` of a torchscript node at `at` (e.g. "/nodes/3"); `model_inputs` is the number of
// model inputs (1 without Model::inputs).
void validate_script(const Node& node, const std::string& at, std::size_t model_inputs,
                     const Where& where) {
  const bool torchscript = node.kind == NodeKind::kTorchScript;
  PW_CHECK(torchscript == node.script.has_value(), InvalidGraphError,
           where(at + (torchscript ? "" : "/script"))
               << (torchscript ? ": a torchscript node needs \"script\""
                               : ": only torchscript nodes have \"script\""));
  if (!torchscript) return;
  const ScriptSpec& s = *node.script;
  const std::string sat = at + "/script";
  PW_CHECK(!s.file.empty(), InvalidGraphError, where(sat + "/file") << ": must not be empty");
  PW_CHECK(!s.outputs.empty(), InvalidGraphError,
           where(sat + "/outputs") << ": a torchscript node needs at least one output");
  const auto values = [&](const std::vector<ScriptValue>& list, const char* key) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string vat = sat + "/" + key + "/" + std::to_string(i);
      PW_CHECK(!list[i].name.empty(), InvalidGraphError,
               where(vat + "/name") << ": must not be empty");
      PW_CHECK(names.insert(list[i].name).second, InvalidGraphError,
               where(vat + "/name") << ": duplicate name \"" << list[i].name << "\"");
      validate_dtype(list[i].dtype, vat, where);
      validate_shape(list[i].shape, vat, where);
      PW_CHECK(
          list[i].model_input >= 0 && static_cast<std::size_t>(list[i].model_input) < model_inputs,
          InvalidGraphError,
          where(vat + "/model_input")
              << ": the model has " << model_inputs << " input(s), got " << list[i].model_input);
    }
  };
  values(s.inputs, "inputs");
  values(s.outputs, "outputs");
  // Parameters and buffers share one namespace (the module's state_dict) and the same checks.
  std::set<std::string> names;
  const auto tensors = [&](const auto& list, const char* field) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& t = list[i];
      const std::string at = sat + "/" + field + "/" + std::to_string(i);
      PW_CHECK(!t.name.empty(), InvalidGraphError, where(at + "/name") << ": must not be empty");
      PW_CHECK(names.insert(t.name).second, InvalidGraphError,
               where(at + "/name") << ": duplicate name \"" << t.name << "\"");
      validate_dtype(t.dtype, at, where);
      validate_shape(t.shape, at, where);
    }
  };
  tensors(s.parameters, "parameters");
  tensors(s.buffers, "buffers");
}

}  // namespace

std::string_view to_string(NodeKind kind) noexcept {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "opaque";
}

std::optional<NodeKind> parse_node_kind(std::string_view text) noexcept {
  for (const auto& [k, name] : kKindNames) {
    if (name == text) return k;
  }
  return std::nullopt;
}

std::int64_t autocast_fp32_bytes(const Node& node) noexcept {
  const std::int64_t all = node.cost.activation_bytes;
  if (node.cost.activation_fp32_bytes)
    return std::clamp<std::int64_t>(*node.cost.activation_fp32_bytes, 0, all);
  switch (node.kind) {  // Note [Autocast bytes]
    case NodeKind::kLayerNorm:
    case NodeKind::kEmbedding:
    case NodeKind::kLoss:
      return all;
    case NodeKind::kTransformerBlock:
      return all / 34 * 4 + all % 34 * 4 / 34;  // 4/34 of it, without overflow
    case NodeKind::kLinear:
    case NodeKind::kRelu:
    case NodeKind::kGelu:
    case NodeKind::kMlp:
    case NodeKind::kCausalSelfAttention:
    case NodeKind::kOpaque:
    case NodeKind::kTorchScript:
      return 0;
  }
  return 0;
}

std::vector<std::string> required_params(NodeKind kind) {
  switch (kind) {
    case NodeKind::kLinear:
      return {"in_features", "out_features"};
    case NodeKind::kLayerNorm:
      return {"normalized_shape"};
    case NodeKind::kEmbedding:
      return {"num_embeddings", "embedding_dim"};
    case NodeKind::kCausalSelfAttention:
      return {"hidden", "heads"};
    case NodeKind::kMlp:
      return {"hidden", "ffn_hidden"};
    case NodeKind::kTransformerBlock:
      return {"hidden", "heads", "ffn_hidden"};
    case NodeKind::kRelu:
    case NodeKind::kGelu:
    case NodeKind::kLoss:
    case NodeKind::kOpaque:
    case NodeKind::kTorchScript:
      return {};
  }
  return {};
}

bool is_script_dtype(std::string_view dtype) noexcept {
  return dtype == "float32" || dtype == "int64" || dtype == "float64" || dtype == "bool";
}

int Model::node_index(std::string_view node_name) const noexcept {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].name == node_name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<ModelEdge> Model::in_edges(int node) const {
  std::vector<ModelEdge> out;
  for (const ModelEdge& e : edges) {
    if (e.to == node) out.push_back(e);
  }
  return out;
}

std::vector<ModelEdge> Model::out_edges(int node) const {
  std::vector<ModelEdge> out;
  for (const ModelEdge& e : edges) {
    if (e.from == node) out.push_back(e);
  }
  return out;
}

std::vector<int> Model::producers(int node) const {
  std::set<int> out;
  for (const ModelEdge& e : edges) {
    if (e.to == node) out.insert(e.from);
  }
  return {out.begin(), out.end()};
}

std::vector<int> Model::consumers(int node) const {
  std::set<int> out;
  for (const ModelEdge& e : edges) {
    if (e.from == node) out.insert(e.to);
  }
  return {out.begin(), out.end()};
}

std::vector<int> Model::topological_order() const {
  const detail::Digraph g = node_digraph(*this);
  for (const auto& [from, to] : g.edges) {
    PW_CHECK(from >= 0 && from < g.vertices && to >= 0 && to < g.vertices, InvalidGraphError,
             "model '" << name << "': edge " << from << " -> " << to << " is out of range");
  }
  std::vector<int> order = detail::ordered_topological_order(g);
  if (order.size() != nodes.size()) {
    const std::vector<int> cycle = detail::find_cycle(g);
    std::string names;
    for (int v : cycle) names += nodes[static_cast<std::size_t>(v)].name + " -> ";
    if (!cycle.empty()) names += nodes[static_cast<std::size_t>(cycle.front())].name;
    throw InvalidGraphError("model '" + name + "' has a cycle: " + names);
  }
  return order;
}

bool Model::reads_model_input(int node) const {
  return model_input_readers().at(static_cast<std::size_t>(node));
}

std::vector<bool> Model::model_input_readers() const {
  // Distinct input slots fed per node; edges into one (node, slot) are unique in a valid model.
  std::vector<std::set<int>> fed(nodes.size());
  for (const ModelEdge& e : edges) {
    if (e.to >= 0 && static_cast<std::size_t>(e.to) < nodes.size()) {
      fed[static_cast<std::size_t>(e.to)].insert(e.to_input);
    }
  }
  std::vector<bool> out(nodes.size());
  for (std::size_t v = 0; v < nodes.size(); ++v) {
    const Node& n = nodes[v];
    if (!n.script) {
      out[v] = fed[v].empty();
      continue;
    }
    std::size_t within = 0;
    for (const int slot : fed[v]) {
      if (slot >= 0 && static_cast<std::size_t>(slot) < n.script->inputs.size()) ++within;
    }
    out[v] = within < n.script->inputs.size();
  }
  return out;
}

std::int64_t Model::input_bytes() const {
  std::int64_t elements = micro_batch_size;
  for (std::int64_t d : input.shape) elements *= d;
  const std::int64_t element_bytes = input.dtype == "int64" ? 8 : 4;
  return elements * element_bytes;
}

void validate_model(const Model& model, const std::string& source_name) {
  detail::validate_model(model, json::Source{source_name, ""}, "nodes");
}

void detail::validate_model(const Model& model, const json::Source& source,
                            const std::string& list) {
  const std::string& src = source.name;
  // "<file>:<line>:<col>: at <pointer>" (or "<name> at <pointer>" for a model built in code).
  const auto where = [&source](const std::string& pointer) { return json::where(source, pointer); };
  PW_CHECK(!model.nodes.empty(), InvalidGraphError, src << ": the model has no nodes");
  PW_CHECK(
      model.nodes.size() <= kMaxModelNodes, InvalidGraphError,
      src << ": " << model.nodes.size() << " nodes, more than the limit of " << kMaxModelNodes);
  PW_CHECK(
      model.edges.size() <= kMaxModelEdges, InvalidGraphError,
      src << ": " << model.edges.size() << " edges, more than the limit of " << kMaxModelEdges);
  PW_CHECK(model.micro_batch_size > 0, InvalidGraphError,
           where("/micro_batch_size") << ": must be > 0, got " << model.micro_batch_size);
  PW_CHECK(model.input.dtype == "float32" || model.input.dtype == "int64", InvalidGraphError,
           where("/input/dtype") << ": must be \"float32\" or \"int64\", got \""
                                 << model.input.dtype << "\"");
  PW_CHECK(!model.input.shape.empty(), InvalidGraphError,
           where("/input/shape") << ": must have at least one dimension");
  // The input size must fit an int64 of bytes (with margin for the micro batch).
  double elements = static_cast<double>(model.micro_batch_size) * 8.0;
  for (std::size_t i = 0; i < model.input.shape.size(); ++i) {
    PW_CHECK(model.input.shape[i] > 0, InvalidGraphError,
             where("/input/shape/" + std::to_string(i))
                 << ": must be > 0, got " << model.input.shape[i]);
    elements *= static_cast<double>(model.input.shape[i]);
  }
  PW_CHECK(elements < 9.0e18, InvalidGraphError,
           where("/input/shape") << ": the input is too large to count in bytes");
  for (std::size_t i = 0; i < model.inputs.size(); ++i) {
    const NamedModelInput& in = model.inputs[i];
    const std::string at = "/inputs/" + std::to_string(i);
    PW_CHECK(
        in.dtype == "float32" || in.dtype == "int64", InvalidGraphError,
        where(at + "/dtype") << ": must be \"float32\" or \"int64\", got \"" << in.dtype << "\"");
    PW_CHECK(!in.shape.empty(), InvalidGraphError,
             where(at + "/shape") << ": must have at least one dimension");
    validate_shape(in.shape, at, where);
  }
  PW_CHECK(model.inputs.empty() || (model.inputs[0].dtype == model.input.dtype &&
                                    model.inputs[0].shape == model.input.shape),
           InvalidGraphError, where("/inputs/0") << ": must equal \"input\" (dtype and shape)");
  const std::size_t model_inputs = std::max<std::size_t>(1, model.inputs.size());

  std::unordered_map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& node = model.nodes[i];
    const std::string at = "/" + list + "/" + std::to_string(i);
    PW_CHECK(!node.name.empty(), InvalidGraphError, where(at + "/name") << ": must not be empty");
    const auto [it, fresh] = seen.emplace(node.name, i);
    PW_CHECK(fresh, InvalidGraphError,
             where(at + "/name") << ": duplicate node name \"" << node.name << "\" (also /" << list
                                 << "/" << it->second << ")");
    for (const std::string& key : required_params(node.kind)) {
      const auto p = node.params.find(key);
      PW_CHECK(p != node.params.end(), InvalidGraphError,
               where(at + "/params")
                   << ": a " << to_string(node.kind) << " node needs param \"" << key << "\"");
      PW_CHECK(p->second > 0, InvalidGraphError,
               where(at + "/params/" + key) << ": must be > 0, got " << p->second);
    }
    if (node.kind == NodeKind::kLinear) {
      const auto bias = node.params.find("bias");
      PW_CHECK(bias == node.params.end() || bias->second == 0 || bias->second == 1,
               InvalidGraphError,
               where(at + "/params/bias") << ": must be 0 or 1, got " << bias->second);
    }
    if (node.kind == NodeKind::kEmbedding) {
      const auto pos = node.params.find("max_positions");
      PW_CHECK(pos == node.params.end() || pos->second >= 0, InvalidGraphError,
               where(at + "/params/max_positions") << ": must be >= 0, got " << pos->second);
    }
    if (node.kind == NodeKind::kCausalSelfAttention || node.kind == NodeKind::kTransformerBlock) {
      const std::int64_t hidden = node.params.at("hidden");
      const std::int64_t heads = node.params.at("heads");
      PW_CHECK(hidden % heads == 0, InvalidGraphError,
               where(at + "/params/heads")
                   << ": hidden (" << hidden << ") must be divisible by heads (" << heads << ")");
    }
    if (node.kind == NodeKind::kLoss) {
      const auto loss = node.attrs.find("loss");
      PW_CHECK(loss != node.attrs.end(), InvalidGraphError,
               where(at + "/attrs")
                   << ": a loss node needs attr \"loss\" (\"mse\" or \"cross_entropy\")");
      PW_CHECK(loss->second == "mse" || loss->second == "cross_entropy", InvalidGraphError,
               where(at + "/attrs/loss")
                   << ": must be \"mse\" or \"cross_entropy\", got \"" << loss->second << "\"");
    }
    validate_script(node, at, model_inputs, where);
    const NodeCost& c = node.cost;
    const std::string cat = at + "/cost/";
    PW_CHECK(finite_nonnegative(c.forward_ms), InvalidGraphError,
             where(cat + "forward_ms") << ": must be a finite number >= 0, got " << c.forward_ms);
    PW_CHECK(finite_nonnegative(c.backward_ms), InvalidGraphError,
             where(cat + "backward_ms") << ": must be a finite number >= 0, got " << c.backward_ms);
    PW_CHECK(!c.input_grad_ms || finite_nonnegative(*c.input_grad_ms), InvalidGraphError,
             where(cat + "input_grad_ms")
                 << ": must be a finite number >= 0, got " << *c.input_grad_ms);
    PW_CHECK(!c.weight_grad_ms || finite_nonnegative(*c.weight_grad_ms), InvalidGraphError,
             where(cat + "weight_grad_ms")
                 << ": must be a finite number >= 0, got " << *c.weight_grad_ms);
    PW_CHECK(c.input_grad_ms.has_value() == c.weight_grad_ms.has_value(), InvalidGraphError,
             where(cat + (c.input_grad_ms ? "weight_grad_ms" : "input_grad_ms"))
                 << ": input_grad_ms and weight_grad_ms must be given together");
    if (c.input_grad_ms) {
      const double sum = *c.input_grad_ms + *c.weight_grad_ms;
      PW_CHECK(std::abs(sum - c.backward_ms) <= 1e-6 * std::max(1.0, c.backward_ms),
               InvalidGraphError,
               where(cat + "backward_ms") << ": must equal input_grad_ms + weight_grad_ms (" << sum
                                          << "), got " << c.backward_ms);
    }
    PW_CHECK(c.param_bytes >= 0, InvalidGraphError,
             where(cat + "param_bytes") << ": must be >= 0, got " << c.param_bytes);
    PW_CHECK(c.activation_bytes >= 0, InvalidGraphError,
             where(cat + "activation_bytes") << ": must be >= 0, got " << c.activation_bytes);
    PW_CHECK(c.output_bytes >= 0, InvalidGraphError,
             where(cat + "output_bytes") << ": must be >= 0, got " << c.output_bytes);
    PW_CHECK(!c.activation_fp32_bytes ||
                 (*c.activation_fp32_bytes >= 0 && *c.activation_fp32_bytes <= c.activation_bytes),
             InvalidGraphError,
             where(cat + "activation_fp32_bytes")
                 << ": must be in [0, activation_bytes = " << c.activation_bytes << "], got "
                 << *c.activation_fp32_bytes);
  }

  const int n = static_cast<int>(model.nodes.size());
  std::set<std::pair<int, int>> inputs_taken;
  for (std::size_t i = 0; i < model.edges.size(); ++i) {
    const ModelEdge& e = model.edges[i];
    const std::string at = "/edges/" + std::to_string(i);
    PW_CHECK(e.from >= 0 && e.from < n, InvalidGraphError,
             where(at + "/from") << ": dangling edge: no node with index " << e.from);
    PW_CHECK(e.to >= 0 && e.to < n, InvalidGraphError,
             where(at + "/to") << ": dangling edge: no node with index " << e.to);
    PW_CHECK(e.from_output >= 0, InvalidGraphError,
             where(at + "/from_output") << ": must be >= 0, got " << e.from_output);
    PW_CHECK(e.to_input >= 0, InvalidGraphError,
             where(at + "/to_input") << ": must be >= 0, got " << e.to_input);
    PW_CHECK(e.from != e.to, InvalidGraphError,
             where(at) << ": node \"" << model.nodes[static_cast<std::size_t>(e.from)].name
                       << "\" feeds itself (a cycle)");
    const auto& from_script = model.nodes[static_cast<std::size_t>(e.from)].script;
    PW_CHECK(!from_script || static_cast<std::size_t>(e.from_output) < from_script->outputs.size(),
             InvalidGraphError,
             where(at + "/from_output")
                 << ": node \"" << model.nodes[static_cast<std::size_t>(e.from)].name << "\" has "
                 << from_script->outputs.size() << " output(s), got " << e.from_output);
    const auto& to_script = model.nodes[static_cast<std::size_t>(e.to)].script;
    PW_CHECK(!to_script || static_cast<std::size_t>(e.to_input) < to_script->inputs.size(),
             InvalidGraphError,
             where(at + "/to_input")
                 << ": node \"" << model.nodes[static_cast<std::size_t>(e.to)].name << "\" has "
                 << to_script->inputs.size() << " input(s), got " << e.to_input);
    PW_CHECK(inputs_taken.emplace(e.to, e.to_input).second, InvalidGraphError,
             where(at) << ": input " << e.to_input << " of node \""
                       << model.nodes[static_cast<std::size_t>(e.to)].name
                       << "\" already has a producer");
  }
  try {
    (void)model.topological_order();
  } catch (const InvalidGraphError& e) {
    throw InvalidGraphError(where("/edges") + ": " + e.what());
  }
}

}  // namespace pipewright::graph
