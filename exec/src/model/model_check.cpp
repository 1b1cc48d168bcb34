#include "model/model_check.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

std::string node_label(const graph::Model& model, int index) {
  const graph::Node& node = model.nodes[static_cast<std::size_t>(index)];
  std::ostringstream os;
  os << "node '" << node.name << "' (index " << index << ", " << graph::to_string(node.kind) << ")";
  return os.str();
}

std::int64_t param(const graph::Model& model, int index, const std::string& key,
                   std::optional<std::int64_t> fallback = std::nullopt) {
  const graph::Node& node = model.nodes[static_cast<std::size_t>(index)];
  const auto it = node.params.find(key);
  if (it == node.params.end()) {
    PW_CHECK(fallback.has_value(), ConfigError,
             model.name << ": " << node_label(model, index) << " has no param '" << key << "'");
    return *fallback;
  }
  return it->second;
}

std::int64_t positive_param(const graph::Model& model, int index, const std::string& key) {
  const std::int64_t v = param(model, index, key);
  PW_CHECK(v > 0, ConfigError,
           model.name << ": " << node_label(model, index) << " param '" << key
                      << "' must be > 0, got " << v);
  return v;
}

// The input type of `index`: the model input, or the (equal) types of its input slots.
ValueType node_input_type(const graph::Model& model, int index,
                          const std::vector<std::optional<ValueType>>& types) {
  const auto edges = model.in_edges(index);
  if (edges.empty()) {
    return ValueType{model.input.dtype == "int64", model.input.shape};
  }
  std::vector<const graph::ModelEdge*> slots(edges.size(), nullptr);
  for (const auto& e : edges) {
    PW_CHECK(e.to_input >= 0 && static_cast<std::size_t>(e.to_input) < edges.size(), ConfigError,
             model.name << ": " << node_label(model, index) << " has " << edges.size()
                        << " input edge(s) but one feeds input " << e.to_input
                        << "; input slots must be numbered 0.." << edges.size() - 1);
    PW_CHECK(e.from_output == 0, ConfigError,
             model.name << ": edge from " << node_label(model, e.from) << " output "
                        << e.from_output << ": every executable node has exactly one output (0)");
    slots[static_cast<std::size_t>(e.to_input)] = &e;
  }
  const ValueType& first = *types[static_cast<std::size_t>(slots[0]->from)];
  for (std::size_t s = 1; s < slots.size(); ++s) {
    const ValueType& other = *types[static_cast<std::size_t>(slots[s]->from)];
    PW_CHECK(other == first, ConfigError,
             model.name << ": " << node_label(model, index) << " sums its inputs, but input 0 from "
                        << node_label(model, slots[0]->from) << " is " << describe(first)
                        << " and input " << s << " from " << node_label(model, slots[s]->from)
                        << " is " << describe(other));
  }
  return first;
}

void require_float(const graph::Model& model, int index, const ValueType& in) {
  PW_CHECK(!in.is_int64, ConfigError,
           model.name << ": " << node_label(model, index)
                      << " needs a float32 input but receives int64 " << shape_text(in.shape)
                      << " (int64 token ids can only feed an embedding)");
}

void require_last_dim(const graph::Model& model, int index, const ValueType& in,
                      const std::string& key, std::int64_t expected) {
  PW_CHECK(!in.shape.empty() && in.shape.back() == expected, ConfigError,
           model.name << ": " << node_label(model, index) << " expects inputs [..., " << expected
                      << "] (" << key << " " << expected << ") but receives "
                      << shape_text(in.shape) << " per sample");
}

ValueType infer_node(const graph::Model& model, int index, const ValueType& in) {
  const graph::Node& node = model.nodes[static_cast<std::size_t>(index)];
  using K = graph::NodeKind;
  switch (node.kind) {
    case K::kLinear: {
      require_float(model, index, in);
      const auto in_f = positive_param(model, index, "in_features");
      const auto out_f = positive_param(model, index, "out_features");
      const auto bias = param(model, index, "bias", 1);
      PW_CHECK(bias == 0 || bias == 1, ConfigError,
               model.name << ": " << node_label(model, index) << " param 'bias' must be 0 or 1");
      require_last_dim(model, index, in, "in_features", in_f);
      ValueType out = in;
      out.shape.back() = out_f;
      return out;
    }
    case K::kRelu:
    case K::kGelu:
      require_float(model, index, in);
      return in;
    case K::kLayerNorm:
      require_float(model, index, in);
      require_last_dim(model, index, in, "normalized_shape",
                       positive_param(model, index, "normalized_shape"));
      return in;
    case K::kEmbedding: {
      PW_CHECK(in.is_int64, ConfigError,
               model.name << ": " << node_label(model, index)
                          << " needs int64 token ids but receives float32 "
                          << shape_text(in.shape));
      positive_param(model, index, "num_embeddings");
      const auto dim = positive_param(model, index, "embedding_dim");
      const auto positions = param(model, index, "max_positions", 0);
      PW_CHECK(
          positions >= 0, ConfigError,
          model.name << ": " << node_label(model, index) << " param 'max_positions' must be >= 0");
      if (positions > 0) {
        PW_CHECK(in.shape.size() == 1 && in.shape[0] <= positions, ConfigError,
                 model.name << ": " << node_label(model, index)
                            << " has learned positions for sequences of up to " << positions
                            << " tokens, so it needs inputs [seq <= " << positions
                            << "] per sample, but receives " << shape_text(in.shape));
      }
      ValueType out{false, in.shape};
      out.shape.push_back(dim);
      return out;
    }
    case K::kCausalSelfAttention:
    case K::kTransformerBlock: {
      require_float(model, index, in);
      const auto hidden = positive_param(model, index, "hidden");
      const auto heads = positive_param(model, index, "heads");
      PW_CHECK(hidden % heads == 0, ConfigError,
               model.name << ": " << node_label(model, index) << " hidden " << hidden
                          << " is not divisible by heads " << heads);
      if (node.kind == K::kTransformerBlock) positive_param(model, index, "ffn_hidden");
      PW_CHECK(in.shape.size() == 2 && in.shape[1] == hidden, ConfigError,
               model.name << ": " << node_label(model, index) << " expects inputs [seq, " << hidden
                          << "] per sample (hidden " << hidden << ") but receives "
                          << shape_text(in.shape));
      return in;
    }
    case K::kMlp:
      require_float(model, index, in);
      positive_param(model, index, "ffn_hidden");
      require_last_dim(model, index, in, "hidden", positive_param(model, index, "hidden"));
      return in;
    case K::kLoss:
      return in;
    case K::kOpaque:
    case K::kTorchScript:  // script_output_types
      break;
  }
  PW_CHECK(false, ConfigError,
           model.name << ": node '" << node.name << "' is opaque: simulation only, cannot execute");
  return in;
}

ValueType script_value_type(const graph::Model& model, int index, const std::string& what,
                            const graph::ScriptValue& v) {
  PW_CHECK(v.dtype == "float32" || v.dtype == "int64", ConfigError,
           model.name << ": " << node_label(model, index) << " " << what << " '" << v.name
                      << "' is " << v.dtype
                      << "; values passed between nodes must be float32 or int64");
  return ValueType{v.dtype == "int64", v.shape};
}

// Note [TorchScript node types]: the exporter declares every value's type, so nothing is inferred;
// the checks are that each edge connects equal types and that unfed slots fit the model input.
std::vector<std::vector<ValueType>> script_output_types(const graph::Model& model) {
  PW_CHECK(model.inputs.size() <= 1, ConfigError,
           model.name << ": the model has " << model.inputs.size()
                      << " inputs; pipewright run trains models with one data input");
  const ValueType input{model.input.dtype == "int64", model.input.shape};
  std::vector<std::vector<ValueType>> out(model.nodes.size());
  for (int i = 0; i < static_cast<int>(model.nodes.size()); ++i) {
    const graph::Node& node = model.nodes[static_cast<std::size_t>(i)];
    PW_CHECK(node.kind == graph::NodeKind::kTorchScript && node.script, ConfigError,
             model.name << ": " << node_label(model, i)
                        << " is not a torchscript node; models mixing torchscript and built-in "
                           "node kinds cannot be executed");
    for (const auto& v : node.script->outputs) {
      out[static_cast<std::size_t>(i)].push_back(script_value_type(model, i, "output", v));
    }
  }
  for (int i = 0; i < static_cast<int>(model.nodes.size()); ++i) {
    const graph::ScriptSpec& script = *model.nodes[static_cast<std::size_t>(i)].script;
    std::vector<const graph::ModelEdge*> slots(script.inputs.size(), nullptr);
    for (const auto& e : model.edges) {
      if (e.to != i) continue;
      PW_CHECK(e.to_input >= 0 && static_cast<std::size_t>(e.to_input) < slots.size() &&
                   e.from_output >= 0 &&
                   static_cast<std::size_t>(e.from_output) <
                       out[static_cast<std::size_t>(e.from)].size(),
               ConfigError,
               model.name << ": edge " << node_label(model, e.from) << " output " << e.from_output
                          << " -> input " << e.to_input << " of " << node_label(model, i)
                          << " is outside their signatures");
      slots[static_cast<std::size_t>(e.to_input)] = &e;
    }
    for (std::size_t j = 0; j < slots.size(); ++j) {
      const graph::ScriptValue& want_v = script.inputs[j];
      const ValueType want = script_value_type(model, i, "input", want_v);
      if (slots[j] == nullptr) {
        PW_CHECK(want_v.model_input == 0, ConfigError,
                 model.name << ": " << node_label(model, i) << " input '" << want_v.name
                            << "' reads model input " << want_v.model_input
                            << "; pipewright run trains models with one data input");
        PW_CHECK(want == input, ConfigError,
                 model.name << ": " << node_label(model, i) << " input " << j << " '" << want_v.name
                            << "' reads the model input, " << describe(input)
                            << ", but is declared " << describe(want));
        continue;
      }
      const auto& e = *slots[j];
      const ValueType& got =
          out[static_cast<std::size_t>(e.from)][static_cast<std::size_t>(e.from_output)];
      PW_CHECK(got == want, ConfigError,
               model.name << ": " << node_label(model, i) << " input " << j << " '" << want_v.name
                          << "' is declared " << describe(want) << " but receives output "
                          << e.from_output << " of " << node_label(model, e.from) << ", "
                          << describe(got));
    }
  }
  return out;
}

}  // namespace

bool is_script_model(const graph::Model& model) noexcept {
  return std::any_of(model.nodes.begin(), model.nodes.end(),
                     [](const graph::Node& n) { return n.kind == graph::NodeKind::kTorchScript; });
}

void check_script_files(const graph::Model& model) {
  for (const graph::Node& node : model.nodes) {
    if (!node.script) continue;
    std::error_code ec;
    PW_CHECK(std::filesystem::is_regular_file(node.script->path, ec), ConfigError,
             "node '" << node.name << "' (file " << node.script->path
                      << "): the TorchScript file does not exist (model.json script.file \""
                      << node.script->file << "\", resolved against the model file's folder)");
  }
}

double parameter_count(const graph::Node& node) {
  const auto p = [&](const char* key, std::int64_t fallback = 0) {
    const auto it = node.params.find(key);
    return static_cast<double>(it == node.params.end() ? fallback : it->second);
  };
  const auto linear = [](double in, double out, bool bias) { return in * out + (bias ? out : 0); };
  using K = graph::NodeKind;
  const double h = p("hidden");
  const double f = p("ffn_hidden");
  switch (node.kind) {
    case K::kLinear:
      return linear(p("in_features"), p("out_features"), p("bias", 1) != 0);
    case K::kLayerNorm:
      return 2 * p("normalized_shape");
    case K::kEmbedding:
      return (p("num_embeddings") + p("max_positions")) * p("embedding_dim");
    case K::kCausalSelfAttention:
      return linear(h, 3 * h, true) + linear(h, h, true);
    case K::kMlp:
      return linear(h, f, true) + linear(f, h, true);
    case K::kTransformerBlock:
      return 4 * h + linear(h, 3 * h, true) + linear(h, h, true) + linear(h, f, true) +
             linear(f, h, true);
    case K::kTorchScript: {
      double n = 0;  // every copy a stage holds, tied ones included (each stage stores its own)
      if (node.script) {
        for (const auto& param : node.script->parameters) {
          double e = 1;
          for (const std::int64_t d : param.shape) e *= static_cast<double>(d);
          n += e;
        }
      }
      return n;
    }
    case K::kRelu:
    case K::kGelu:
    case K::kLoss:
    case K::kOpaque:
      break;
  }
  return 0;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::optional<LossKind> parse_loss_kind(const std::string& text) noexcept {
  if (text == "mse") return LossKind::kMse;
  if (text == "cross_entropy" || text == "cross-entropy") return LossKind::kCrossEntropy;
  return std::nullopt;
}

const char* to_string(LossKind kind) noexcept {
  return kind == LossKind::kMse ? "mse" : "cross_entropy";
}

std::string describe(const ValueType& type) {
  return std::string(type.is_int64 ? "int64 " : "float32 ") + shape_text(type.shape);
}

int final_node(const graph::Model& model) {
  PW_CHECK(!model.nodes.empty(), ConfigError, model.name << ": the model has no nodes");
  int found = -1;
  for (int i = 0; i < static_cast<int>(model.nodes.size()); ++i) {
    if (!model.consumers(i).empty()) continue;
    PW_CHECK(found < 0, ConfigError,
             model.name << ": the executor needs exactly one final node (a node whose output no "
                           "other node reads), but "
                        << node_label(model, found) << " and " << node_label(model, i)
                        << " both are");
    found = i;
  }
  PW_CHECK(found >= 0, ConfigError, model.name << ": the model has no final node (a cycle?)");
  return found;
}

std::optional<LossKind> model_loss_kind(const graph::Model& model) {
  std::optional<LossKind> out;
  for (int i = 0; i < static_cast<int>(model.nodes.size()); ++i) {
    const graph::Node& node = model.nodes[static_cast<std::size_t>(i)];
    if (node.kind != graph::NodeKind::kLoss) continue;
    PW_CHECK(!out.has_value(), ConfigError,
             model.name << ": more than one loss node (" << node_label(model, i) << ")");
    const auto it = node.attrs.find("loss");
    PW_CHECK(it != node.attrs.end(), ConfigError,
             model.name << ": " << node_label(model, i)
                        << " has no attr 'loss' (\"mse\" or \"cross_entropy\")");
    out = parse_loss_kind(it->second);
    PW_CHECK(out.has_value(), ConfigError,
             model.name << ": " << node_label(model, i) << " attr 'loss' is '" << it->second
                        << "'; expected \"mse\" or \"cross_entropy\"");
  }
  return out;
}

std::vector<ValueType> infer_value_types(const graph::Model& model) {
  std::vector<ValueType> out;
  for (auto& outputs : infer_output_types(model)) out.push_back(std::move(outputs.at(0)));
  return out;
}

std::vector<std::vector<ValueType>> infer_output_types(const graph::Model& model) {
  PW_CHECK(model.input.dtype == "float32" || model.input.dtype == "int64", ConfigError,
           model.name << ": input dtype '" << model.input.dtype
                      << "' is not executable (float32 or int64)");
  static_cast<void>(final_node(model));  // rejects models without exactly one final node
  if (is_script_model(model)) return script_output_types(model);
  std::vector<std::optional<ValueType>> types(model.nodes.size());
  for (const int index : model.topological_order()) {
    const ValueType in = node_input_type(model, index, types);
    types[static_cast<std::size_t>(index)] = infer_node(model, index, in);
  }
  std::vector<std::vector<ValueType>> out;
  out.reserve(types.size());
  for (auto& t : types) out.push_back({std::move(*t)});
  return out;
}

void check_data_matches_model(const ValueType& x, const ValueType& y, const graph::Model& model,
                              LossKind loss, const std::string& x_source,
                              const std::string& y_source) {
  const ValueType input{model.input.dtype == "int64", model.input.shape};
  if (!(x == input)) {
    std::ostringstream readers;
    const std::vector<bool> reads = model.model_input_readers();
    for (int i = 0; i < static_cast<int>(model.nodes.size()); ++i) {
      if (reads[static_cast<std::size_t>(i)]) readers << " " << node_label(model, i);
    }
    PW_CHECK(false, ConfigError,
             "data x " << x_source << " has samples of " << describe(x) << " but model '"
                       << model.name << "' input is " << describe(input) << " (read by"
                       << readers.str() << ")");
  }
  const auto types = infer_value_types(model);
  const int last = final_node(model);
  const ValueType& pred = types[static_cast<std::size_t>(last)];
  const std::string pred_text =
      "the prediction of " + node_label(model, last) + " is " + describe(pred);
  if (loss == LossKind::kMse) {
    const bool same = !y.is_int64 && y.shape == pred.shape;
    const bool squeezed = !y.is_int64 && y.shape.empty() && pred.shape == std::vector<int64_t>{1};
    PW_CHECK(same || squeezed, ConfigError,
             "data y " << y_source << " has samples of " << describe(y)
                       << " but mse needs float32 targets shaped like the prediction; "
                       << model.name << ": " << pred_text);
  } else {
    std::vector<std::int64_t> expect = pred.shape;
    if (!expect.empty()) expect.pop_back();
    PW_CHECK(
        !pred.shape.empty() && !pred.is_int64, ConfigError,
        "cross_entropy needs float32 logits [..., classes]; " << model.name << ": " << pred_text);
    PW_CHECK(y.is_int64 && y.shape == expect, ConfigError,
             "data y " << y_source << " has samples of " << describe(y)
                       << " but cross_entropy needs int64 class indices " << shape_text(expect)
                       << " per sample; " << model.name << ": " << pred_text);
  }
}

}  // namespace pipewright::exec
