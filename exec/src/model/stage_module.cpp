#include "model/stage_module.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "model/model_check.hpp"
#include "model/script_node.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

using graph::NodeKind;
using graph::StageValue;

constexpr double kLayerNormEps = 1e-5;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string value_text(const StageValue& v) {
  if (v.node < 0) return "the model input";
  std::ostringstream os;
  os << "output " << v.output << " of node " << v.node;
  return os.str();
}

bool contains(const std::vector<StageValue>& values, const StageValue& v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

// Creates a node's parameters (Note [Partition-independent init] in the header): all drawn on
// the CPU in float32 from one generator per node, then moved to the stage's device and dtype.
class ParamMaker {
 public:
  ParamMaker(std::uint64_t seed, int node, const StageBuildOptions& options, NamedTensors& out,
             std::vector<std::size_t>& indices)
      : gen_(at::make_generator<at::CPUGeneratorImpl>(
            splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(node))))),
        prefix_(std::to_string(node) + "."),
        options_(options),
        out_(out),
        indices_(indices) {}

  // torch.nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) gives U(+-1/sqrt(fan_in)) for
  // the weight, and the bias is U(+-1/sqrt(fan_in)) too.
  void linear(const std::string& sub, std::int64_t in, std::int64_t out, bool bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    add(sub + "weight", at::empty({out, in}, at::kFloat).uniform_(-bound, bound, gen_));
    if (bias) add(sub + "bias", at::empty({out}, at::kFloat).uniform_(-bound, bound, gen_));
  }
  void layer_norm(const std::string& sub, std::int64_t n) {
    add(sub + "weight", at::ones({n}, at::kFloat));
    add(sub + "bias", at::zeros({n}, at::kFloat));
  }
  // torch.nn.Embedding.reset_parameters: N(0, 1).
  void embedding(const std::string& sub, std::int64_t num, std::int64_t dim) {
    add(sub + "weight", at::empty({num, dim}, at::kFloat).normal_(0.0, 1.0, gen_));
  }

 private:
  void add(const std::string& name, const at::Tensor& cpu) {
    at::Tensor t = cpu.to(options_.device, options_.dtype).detach();
    t.set_requires_grad(true);
    indices_.push_back(out_.size());
    out_.emplace_back(prefix_ + name, std::move(t));
  }

  at::Generator gen_;
  std::string prefix_;
  const StageBuildOptions& options_;
  NamedTensors& out_;
  std::vector<std::size_t>& indices_;
};

void make_params(const graph::Node& node, int index, const StageBuildOptions& options,
                 NamedTensors& out, std::vector<std::size_t>& indices) {
  ParamMaker make(options.seed, index, options, out, indices);
  const auto p = [&](const char* key, std::int64_t fallback = 0) {
    const auto it = node.params.find(key);
    return it == node.params.end() ? fallback : it->second;
  };
  switch (node.kind) {
    case NodeKind::kLinear:
      make.linear("", p("in_features"), p("out_features"), p("bias", 1) != 0);
      break;
    case NodeKind::kLayerNorm:
      make.layer_norm("", p("normalized_shape"));
      break;
    case NodeKind::kEmbedding:
      if (p("max_positions") > 0) {
        make.embedding("tok.", p("num_embeddings"), p("embedding_dim"));
        make.embedding("pos.", p("max_positions"), p("embedding_dim"));
      } else {
        make.embedding("", p("num_embeddings"), p("embedding_dim"));
      }
      break;
    case NodeKind::kCausalSelfAttention:
      make.linear("qkv.", p("hidden"), 3 * p("hidden"), true);
      make.linear("proj.", p("hidden"), p("hidden"), true);
      break;
    case NodeKind::kMlp:
      make.linear("fc1.", p("hidden"), p("ffn_hidden"), true);
      make.linear("fc2.", p("ffn_hidden"), p("hidden"), true);
      break;
    case NodeKind::kTransformerBlock:
      make.layer_norm("ln1.", p("hidden"));
      make.linear("attn.qkv.", p("hidden"), 3 * p("hidden"), true);
      make.linear("attn.proj.", p("hidden"), p("hidden"), true);
      make.layer_norm("ln2.", p("hidden"));
      make.linear("mlp.fc1.", p("hidden"), p("ffn_hidden"), true);
      make.linear("mlp.fc2.", p("ffn_hidden"), p("hidden"), true);
      break;
    case NodeKind::kRelu:
    case NodeKind::kGelu:
    case NodeKind::kLoss:
    case NodeKind::kOpaque:
    case NodeKind::kTorchScript:  // StageModule::add_script_node
      break;
  }
}

at::Tensor linear(const at::Tensor& x, const NamedTensors& params,
                  const std::vector<std::size_t>& idx, std::size_t first, bool bias) {
  if (!bias) return at::linear(x, params[idx[first]].second);
  return at::linear(x, params[idx[first]].second, params[idx[first + 1]].second);
}

at::Tensor layer_norm(const at::Tensor& x, const NamedTensors& params,
                      const std::vector<std::size_t>& idx, std::size_t first) {
  return at::layer_norm(x, {x.size(-1)}, params[idx[first]].second, params[idx[first + 1]].second,
                        kLayerNormEps);
}

// Multi-head causal self-attention on x [B, S, E]; tensors idx[first..first+3] are qkv weight,
// qkv bias, proj weight, proj bias.
at::Tensor attention(const at::Tensor& x, std::int64_t heads, const NamedTensors& params,
                     const std::vector<std::size_t>& idx, std::size_t first) {
  const std::int64_t b = x.size(0);
  const std::int64_t s = x.size(1);
  const std::int64_t e = x.size(2);
  const std::int64_t d = e / heads;
  const auto qkv = linear(x, params, idx, first, true).split(e, -1);
  const auto heads_first = [&](const at::Tensor& t) {
    return t.reshape({b, s, heads, d}).transpose(1, 2);  // [B, H, S, D]
  };
  const at::Tensor q = heads_first(qkv[0]);
  const at::Tensor k = heads_first(qkv[1]);
  const at::Tensor v = heads_first(qkv[2]);
  at::Tensor att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  const at::Tensor future =
      at::ones({s, s}, at::TensorOptions().dtype(at::kBool).device(x.device())).triu(1);
  att = at::softmax(att.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  const at::Tensor y = at::matmul(att, v).transpose(1, 2).reshape({b, s, e});
  return linear(y, params, idx, first + 2, true);
}

at::Tensor mlp(const at::Tensor& x, const NamedTensors& params, const std::vector<std::size_t>& idx,
               std::size_t first) {
  return linear(at::gelu(linear(x, params, idx, first, true)), params, idx, first + 2, true);
}

}  // namespace

StageModule::StageModule(const graph::Model& model, std::vector<int> nodes,
                         std::vector<StageValue> inputs, std::vector<StageValue> outputs,
                         const StageBuildOptions& options)
    : model_name_(model.name), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  const int n = static_cast<int>(model.nodes.size());
  PW_CHECK(options.dtype == at::kFloat || options.dtype == at::kDouble, ConfigError,
           "stage dtype must be float32 or float64");
  PW_CHECK(!nodes.empty(), ConfigError, model.name << ": a stage needs at least one node");
  // Shape inference over the whole model also rejects opaque nodes and bad params.
  const std::vector<std::vector<ValueType>> types = infer_output_types(model);
  const auto exists = [&](const StageValue& v) {
    return v.node < 0 ? v.node == -1 && v.output == 0
                      : v.node < n && v.output >= 0 &&
                            static_cast<std::size_t>(v.output) <
                                types[static_cast<std::size_t>(v.node)].size();
  };
  const auto type_of = [&](const StageValue& v) {
    return v.node < 0 ? ValueType{model.input.dtype == "int64", model.input.shape}
                      : types[static_cast<std::size_t>(v.node)][static_cast<std::size_t>(v.output)];
  };
  std::vector<bool> in_stage(model.nodes.size(), false);
  for (const int node : nodes) {
    PW_CHECK(node >= 0 && node < n, ConfigError,
             model.name << ": stage node index " << node << " is out of range [0, " << n << ")");
    PW_CHECK(!in_stage[static_cast<std::size_t>(node)], ConfigError,
             model.name << ": node " << node << " is listed twice in a stage");
    in_stage[static_cast<std::size_t>(node)] = true;
  }
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const StageValue& v = inputs_[i];
    PW_CHECK(exists(v), ConfigError,
             model.name << ": stage input " << i << " (" << value_text(v) << ") does not exist");
    PW_CHECK(std::find(inputs_.begin(), inputs_.begin() + static_cast<std::ptrdiff_t>(i), v) ==
                 inputs_.begin() + static_cast<std::ptrdiff_t>(i),
             ConfigError, model.name << ": stage input " << i << " repeats " << value_text(v));
    input_types_.push_back(type_of(v));
  }

  check_node_files_torch(model);
  // Parameters in model (node index) order; ops in topological order.
  std::vector<std::vector<std::size_t>> tensors(model.nodes.size());
  std::vector<std::shared_ptr<ScriptNode>> scripts(model.nodes.size());
  std::set<std::string> tied;  // every tied group of the model
  for (const graph::Node& spec : model.nodes) {
    if (!spec.script) continue;
    for (const auto& p : spec.script->parameters) {
      if (!p.tied_to.empty()) tied.insert(p.tied_to);
    }
  }
  std::map<std::string, std::size_t> groups;
  for (int node = 0; node < n; ++node) {
    const auto i = static_cast<std::size_t>(node);
    if (!in_stage[i]) continue;
    if (model.nodes[i].kind == NodeKind::kTorchScript) {
      scripts[i] = add_script_node(model.nodes[i], options, tied, groups, tensors[i]);
    } else {
      make_params(model.nodes[i], node, options, params_, tensors[i]);
    }
  }
  tie_groups_.resize(params_.size());
  std::vector<bool> computed(model.nodes.size(), false);
  for (const int node : model.topological_order()) {
    if (!in_stage[static_cast<std::size_t>(node)]) continue;
    const graph::Node& spec = model.nodes[static_cast<std::size_t>(node)];
    Op op{node,
          spec.name,
          spec.kind,
          spec.params,
          {},
          tensors[static_cast<std::size_t>(node)],
          scripts[static_cast<std::size_t>(node)]};
    auto edges = model.in_edges(node);
    std::sort(edges.begin(), edges.end(),
              [](const auto& a, const auto& b) { return a.to_input < b.to_input; });
    if (op.script) {
      // One source per forward argument; a slot no edge feeds reads the model input.
      op.sources.assign(spec.script->inputs.size(), StageValue{-1, 0});
      for (const auto& e : edges) {
        op.sources.at(static_cast<std::size_t>(e.to_input)) = StageValue{e.from, e.from_output};
      }
    } else {
      for (const auto& e : edges) op.sources.push_back(StageValue{e.from, e.from_output});
    }
    const std::vector<StageValue> needed =
        op.sources.empty() && !op.script ? std::vector<StageValue>{StageValue{-1, 0}} : op.sources;
    for (const StageValue& v : needed) {
      const bool local = v.node >= 0 && computed[static_cast<std::size_t>(v.node)];
      PW_CHECK(local || contains(inputs_, v), ConfigError,
               model.name << ": node '" << spec.name << "' (index " << node << ") reads "
                          << value_text(v)
                          << ", which its stage neither computes nor receives as an input");
    }
    computed[static_cast<std::size_t>(node)] = true;
    nodes_.push_back(node);
    ops_.push_back(std::move(op));
  }

  const int last = final_node(model);
  if (in_stage[static_cast<std::size_t>(last)]) {
    const StageValue pred{last, 0};
    const auto it = std::find(outputs_.begin(), outputs_.end(), pred);
    if (it == outputs_.end()) outputs_.push_back(pred);
    prediction_ =
        static_cast<int>(std::find(outputs_.begin(), outputs_.end(), pred) - outputs_.begin());
  }
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    const StageValue& v = outputs_[i];
    PW_CHECK(v.node >= 0 && exists(v) && computed[static_cast<std::size_t>(v.node)], ConfigError,
             model.name << ": stage output " << i << " (" << value_text(v)
                        << ") is not computed by the stage");
    output_types_.push_back(type_of(v));
  }
}

StageModule::StageModule(const graph::Model& model, const graph::StageInfo& info,
                         const StageBuildOptions& options)
    : StageModule(model, info.nodes, info.inputs, info.outputs, options) {}

StageModule StageModule::whole_model(const graph::Model& model, const StageBuildOptions& options) {
  std::vector<int> all(model.nodes.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return StageModule(model, std::move(all), {StageValue{-1, 0}}, {}, options);
}

std::string StageModule::label(const Op& op) const {
  std::ostringstream os;
  os << model_name_ << ": node '" << op.name << "' (index " << op.node << ", "
     << graph::to_string(op.kind) << ")";
  return os.str();
}

std::vector<at::Tensor> StageModule::forward(const std::vector<at::Tensor>& inputs) const {
  PW_CHECK(inputs.size() == inputs_.size(), ConfigError,
           model_name_ << ": stage of nodes starting at " << nodes_.front() << " takes "
                       << inputs_.size() << " input(s), got " << inputs.size());
  std::map<std::pair<int, int>, at::Tensor> values;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    const ValueType& want = input_types_[i];
    PW_CHECK(t.defined() && t.dim() == static_cast<std::int64_t>(want.shape.size()) + 1 &&
                 t.sizes().slice(1).vec() == want.shape &&
                 (want.is_int64 ? t.scalar_type() == at::kLong : t.is_floating_point()),
             ConfigError,
             model_name_ << ": stage input " << i << " (" << value_text(inputs_[i])
                         << ") must be a batch of " << describe(want) << ", got "
                         << (t.defined() ? std::string(c10::toString(t.scalar_type())) + " " +
                                               shape_text(t.sizes().vec())
                                         : std::string("an undefined tensor")));
    values[{inputs_[i].node, inputs_[i].output}] = t;
  }
  for (const Op& op : ops_) {
    if (op.script) {
      std::vector<at::Tensor> args;
      args.reserve(op.sources.size());
      for (const StageValue& s : op.sources) args.push_back(values.at({s.node, s.output}));
      const std::vector<at::Tensor> results = op.script->forward(args);
      for (std::size_t k = 0; k < results.size(); ++k) {
        values[{op.node, static_cast<int>(k)}] = results[k];
      }
      continue;
    }
    at::Tensor x;
    if (op.sources.empty()) {
      x = values.at({-1, 0});
    } else {
      // Note [Merging node inputs]: the model format lets several edges feed one node (input
      // slots 0, 1, ...) but every executable kind takes one tensor, so the slots are summed:
      // this is how a residual/skip edge joins the main path.
      for (const StageValue& s : op.sources) {
        const at::Tensor& v = values.at({s.node, s.output});
        x = x.defined() ? x + v : v;
      }
    }
    values[{op.node, 0}] = run_node(op, x);
  }
  std::vector<at::Tensor> out;
  out.reserve(outputs_.size());
  for (const StageValue& v : outputs_) out.push_back(values.at({v.node, v.output}));
  return out;
}

at::Tensor StageModule::run_node(const Op& op, const at::Tensor& x) const {
  const auto p = [&](const char* key, std::int64_t fallback = 0) {
    const auto it = op.params.find(key);
    return it == op.params.end() ? fallback : it->second;
  };
  const auto& idx = op.tensors;
  switch (op.kind) {
    case NodeKind::kLinear:
      return linear(x, params_, idx, 0, p("bias", 1) != 0);
    case NodeKind::kRelu:
      return at::relu(x);
    case NodeKind::kGelu:
      return at::gelu(x);
    case NodeKind::kLayerNorm:
      return layer_norm(x, params_, idx, 0);
    case NodeKind::kEmbedding: {
      const std::int64_t num = p("num_embeddings");
      if (x.numel() > 0) {
        const std::int64_t lo = x.min().item<std::int64_t>();
        const std::int64_t hi = x.max().item<std::int64_t>();
        PW_CHECK(lo >= 0 && hi < num, ConfigError,
                 label(op) << " has " << num << " embeddings but receives token ids in [" << lo
                           << ", " << hi << "]");
      }
      at::Tensor y = at::embedding(params_[idx[0]].second, x);
      if (p("max_positions") > 0) {
        const at::Tensor pos =
            at::arange(x.size(-1), at::TensorOptions().dtype(at::kLong).device(x.device()));
        y = y + at::embedding(params_[idx[1]].second, pos);
      }
      return y;
    }
    case NodeKind::kCausalSelfAttention:
      return attention(x, p("heads"), params_, idx, 0);
    case NodeKind::kMlp:
      return mlp(x, params_, idx, 0);
    case NodeKind::kTransformerBlock: {
      const at::Tensor h =
          x + attention(layer_norm(x, params_, idx, 0), p("heads"), params_, idx, 2);
      return h + mlp(layer_norm(h, params_, idx, 6), params_, idx, 8);
    }
    case NodeKind::kLoss:
      return x;
    case NodeKind::kOpaque:
    case NodeKind::kTorchScript:  // forward() runs op.script
      break;
  }
  PW_ASSERT(false, label(op) << " cannot run");
  return x;
}

std::shared_ptr<ScriptNode> StageModule::add_script_node(const graph::Node& spec,
                                                         const StageBuildOptions& options,
                                                         const std::set<std::string>& tied,
                                                         std::map<std::string, std::size_t>& groups,
                                                         std::vector<std::size_t>& tensors) {
  auto script = std::make_shared<ScriptNode>(spec, options.device, options.dtype);
  for (const graph::ScriptParameter& p : spec.script->parameters) {
    const std::string group = !p.tied_to.empty() ? p.tied_to : tied.count(p.name) ? p.name : "";
    const auto it = group.empty() ? groups.end() : groups.find(group);
    if (it != groups.end()) {
      // Note [Tied parameters in a stage]: this node now reads the group's tensor.
      script->set(p.name, params_[it->second].second);
      aliases_.emplace_back(p.name, it->second);
      tensors.push_back(it->second);
      continue;
    }
    if (!group.empty()) groups.emplace(group, params_.size());
    tensors.push_back(params_.size());
    params_.emplace_back(p.name, script->get(p.name));
    tie_groups_.push_back(group);
  }
  for (const graph::ScriptBuffer& b : spec.script->buffers) {
    buffers_.emplace_back(b.name, script->get(b.name));
    buffer_persistent_.push_back(b.persistent);
  }
  return script;
}

NamedTensors StageModule::persistent_buffers() const {
  NamedTensors out;
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    if (buffer_persistent_[i]) out.push_back(buffers_[i]);
  }
  return out;
}

NamedTensors StageModule::state_dict() const {
  NamedTensors out = params_;
  for (const auto& [name, index] : aliases_) out.emplace_back(name, params_[index].second);
  for (auto& b : persistent_buffers()) out.push_back(std::move(b));
  return out;
}

std::vector<at::Tensor> StageModule::parameters() const {
  std::vector<at::Tensor> out;
  out.reserve(params_.size());
  for (const auto& [name, t] : params_) out.push_back(t);
  return out;
}

std::int64_t StageModule::num_parameter_elements() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : params_) n += t.numel();
  return n;
}

void StageModule::load_parameters(const std::map<std::string, at::Tensor>& weights,
                                  const std::string& source) {
  for (auto& [name, param] : params_) {
    const auto it = weights.find(name);
    PW_CHECK(it != weights.end(), ConfigError,
             source << ": has no tensor '" << name << "' (model '" << model_name_ << "')");
    const at::Tensor& w = it->second;
    PW_CHECK(w.sizes() == param.sizes(), ConfigError,
             source << ": tensor '" << name << "' has shape " << shape_text(w.sizes().vec())
                    << " but model '" << model_name_ << "' needs "
                    << shape_text(param.sizes().vec()));
    PW_CHECK(w.is_floating_point(), ConfigError,
             source << ": tensor '" << name << "' has dtype " << c10::toString(w.scalar_type())
                    << "; parameters must be floating point");
    // detach() shares storage, so this writes the leaf in place without recording autograd.
    param.detach().copy_(w);
  }
  for (auto& [name, buffer] : persistent_buffers()) {
    const auto it = weights.find(name);
    if (it == weights.end()) continue;  // buffers keep the values of their .pt file
    PW_CHECK(it->second.sizes() == buffer.sizes(), ConfigError,
             source << ": tensor '" << name << "' has shape "
                    << shape_text(it->second.sizes().vec()) << " but model '" << model_name_
                    << "' needs " << shape_text(buffer.sizes().vec()));
    buffer.detach().copy_(it->second);
  }
}

at::Tensor compute_loss(const at::Tensor& output, const at::Tensor& target, LossKind kind) {
  PW_CHECK(output.defined() && target.defined() && output.is_floating_point(), ConfigError,
           "loss: the prediction must be a floating-point tensor");
  if (kind == LossKind::kMse) {
    at::Tensor t = target;
    if (t.sizes() != output.sizes() && output.dim() == t.dim() + 1 && output.size(-1) == 1 &&
        output.sizes().slice(0, t.dim()) == t.sizes()) {
      t = t.unsqueeze(-1);
    }
    PW_CHECK(t.sizes() == output.sizes() && t.is_floating_point(), ConfigError,
             "mse loss: prediction " << shape_text(output.sizes().vec()) << " vs target "
                                     << c10::toString(target.scalar_type()) << " "
                                     << shape_text(target.sizes().vec())
                                     << ": needs a floating-point target of the same shape");
    return at::mse_loss(output, t.to(output.scalar_type()));
  }
  PW_CHECK(output.dim() >= 1 && target.scalar_type() == at::kLong &&
               output.dim() == target.dim() + 1 &&
               output.sizes().slice(0, target.dim()) == target.sizes(),
           ConfigError,
           "cross_entropy loss: logits " << shape_text(output.sizes().vec()) << " vs target "
                                         << c10::toString(target.scalar_type()) << " "
                                         << shape_text(target.sizes().vec())
                                         << ": needs int64 targets shaped like the logits "
                                            "without their last (class) dimension");
  const std::int64_t classes = output.size(-1);
  if (target.numel() > 0) {
    const std::int64_t lo = target.min().item<std::int64_t>();
    const std::int64_t hi = target.max().item<std::int64_t>();
    PW_CHECK(lo >= 0 && hi < classes, ConfigError,
             "cross_entropy loss: target classes in ["
                 << lo << ", " << hi << "] but the logits have " << classes << " classes");
  }
  return at::cross_entropy_loss(output.reshape({-1, classes}), target.reshape({-1}));
}

}  // namespace pipewright::exec
