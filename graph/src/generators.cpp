// GPT and MLP generators. Every formula here is also stated in docs/model-format.md; keep them in
// sync. Notation: B micro batch, S sequence, H hidden, A heads, V vocabulary, e bytes/element.
#include "pipewright/graph/generators.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipewright/graph/error.hpp"

namespace pipewright::graph {

namespace {

void check_device(const DeviceModel& device) {
  PW_CHECK(std::isfinite(device.tflops) && device.tflops > 0.0, ConfigError,
           "--device-tflops must be a finite number > 0, got " << device.tflops);
  PW_CHECK(std::isfinite(device.gbps) && device.gbps > 0.0, ConfigError,
           "--device-gbps must be a finite number > 0, got " << device.gbps);
}

// Forward, input-gradient and weight-gradient work of one node, as FLOPs and bytes moved.
struct Work {
  double fwd_flops = 0, fwd_bytes = 0;
  double igrad_flops = 0, igrad_bytes = 0;
  double wgrad_flops = 0, wgrad_bytes = 0;
};

NodeCost cost_of(const Work& w, const DeviceModel& device, double param_bytes,
                 double activation_bytes, double output_bytes) {
  NodeCost c;
  c.forward_ms = roofline_ms(w.fwd_flops, w.fwd_bytes, device);
  c.input_grad_ms = roofline_ms(w.igrad_flops, w.igrad_bytes, device);
  c.weight_grad_ms = roofline_ms(w.wgrad_flops, w.wgrad_bytes, device);
  c.backward_ms = *c.input_grad_ms + *c.weight_grad_ms;
  c.param_bytes = static_cast<std::int64_t>(param_bytes);
  c.activation_bytes = static_cast<std::int64_t>(activation_bytes);
  c.output_bytes = static_cast<std::int64_t>(output_bytes);
  return c;
}

// Linear(in, out) on `rows` rows: y = x W^T + b.
Node linear_node(std::string name, double rows, std::int64_t in, std::int64_t out, bool bias,
                 double e, const DeviceModel& device) {
  const double i = static_cast<double>(in);
  const double o = static_cast<double>(out);
  const double params = i * o + (bias ? o : 0.0);
  Work w;
  w.fwd_flops = 2.0 * rows * i * o;
  w.fwd_bytes = (params + rows * i + rows * o) * e;
  w.igrad_flops = 2.0 * rows * i * o;
  w.igrad_bytes = (params + rows * o + rows * i) * e;
  w.wgrad_flops = 2.0 * rows * i * o;
  w.wgrad_bytes = (rows * i + rows * o + 2.0 * params) * e;
  Node node;
  node.name = std::move(name);
  node.kind = NodeKind::kLinear;
  node.params = {{"in_features", in}, {"out_features", out}, {"bias", bias ? 1 : 0}};
  node.cost = cost_of(w, device, params * e, rows * i * e, rows * o * e);
  return node;
}

// Elementwise activation on `elements` values (GELU ~8 FLOPs per element, ReLU 1).
Node activation_node(std::string name, NodeKind kind, double elements, double e,
                     const DeviceModel& device) {
  const double per = kind == NodeKind::kGelu ? 8.0 : 1.0;
  Work w;
  w.fwd_flops = per * elements;
  w.fwd_bytes = 2.0 * elements * e;
  w.igrad_flops = per * elements;
  w.igrad_bytes = 3.0 * elements * e;
  Node node;
  node.name = std::move(name);
  node.kind = kind;
  node.cost = cost_of(w, device, 0.0, elements * e, elements * e);
  return node;
}

}  // namespace

double roofline_ms(double flops, double bytes, const DeviceModel& device) noexcept {
  return std::max(flops / (device.tflops * 1e12), bytes / (device.gbps * 1e9)) * 1e3;
}

Model make_gpt(const GptSpec& spec) {
  PW_CHECK(spec.layers > 0, ConfigError, "--layers must be > 0, got " << spec.layers);
  PW_CHECK(spec.hidden > 0, ConfigError, "--hidden must be > 0, got " << spec.hidden);
  PW_CHECK(spec.heads > 0, ConfigError, "--heads must be > 0, got " << spec.heads);
  PW_CHECK(spec.seq > 0, ConfigError, "--seq must be > 0, got " << spec.seq);
  PW_CHECK(spec.vocab > 0, ConfigError, "--vocab must be > 0, got " << spec.vocab);
  PW_CHECK(spec.micro_batch_size > 0, ConfigError,
           "--micro-batch-size must be > 0, got " << spec.micro_batch_size);
  PW_CHECK(spec.bytes_per_element > 0, ConfigError,
           "--bytes-per-element must be > 0, got " << spec.bytes_per_element);
  PW_CHECK(spec.hidden % spec.heads == 0, ConfigError,
           "--hidden (" << spec.hidden << ") must be divisible by --heads (" << spec.heads << ")");
  PW_CHECK(spec.layers <= 100000 && spec.hidden <= (1 << 20) && spec.seq <= (1 << 24) &&
               spec.vocab <= (1 << 26) && spec.micro_batch_size <= (1 << 20),
           ConfigError, "GPT sizes are beyond sane limits (see docs/model-format.md)");
  check_device(spec.device);

  const double B = static_cast<double>(spec.micro_batch_size);
  const double S = static_cast<double>(spec.seq);
  const double H = static_cast<double>(spec.hidden);
  const double A = static_cast<double>(spec.heads);
  const double V = static_cast<double>(spec.vocab);
  const double e = static_cast<double>(spec.bytes_per_element);
  const double tokens = B * S;
  const DeviceModel& dev = spec.device;

  Model model;
  model.name = "gpt-l" + std::to_string(spec.layers) + "-h" + std::to_string(spec.hidden);
  model.input = ModelInput{"int64", {spec.seq}};
  model.micro_batch_size = spec.micro_batch_size;

  {  // Token + position embedding: a gather and an add; the backward scatters into the tables.
    const double params = (V + S) * H;
    Work w;
    w.fwd_flops = tokens * H;
    w.fwd_bytes = 3.0 * tokens * H * e;
    w.wgrad_flops = 2.0 * tokens * H;
    w.wgrad_bytes = 2.0 * tokens * H * e + params * e;
    Node node;
    node.name = "embed";
    node.kind = NodeKind::kEmbedding;
    node.params = {{"num_embeddings", spec.vocab},
                   {"embedding_dim", spec.hidden},
                   {"max_positions", spec.seq}};
    node.cost = cost_of(w, dev, params * e, tokens * 8.0, tokens * H * e);
    model.nodes.push_back(std::move(node));
  }
  for (std::int64_t l = 0; l < spec.layers; ++l) {
    // Megatron-LM: 24BSH^2 matmul FLOPs + 4BS^2H attention FLOPs forward; backward twice that,
    // split as input gradient = matmuls + 2x attention core, weight gradient = matmuls.
    const double params = 12.0 * H * H + 13.0 * H;
    const double matmul = 24.0 * B * S * H * H;
    const double attention = 4.0 * B * S * S * H;
    // Korthikanti et al. 2022: S*B*H*(34 + 5*A*S/H) bytes with 2-byte activations.
    const double activations = S * B * H * (34.0 + 5.0 * A * S / H) * (e / 2.0);
    Work w;
    w.fwd_flops = matmul + attention;
    w.fwd_bytes = params * e + activations + 2.0 * tokens * H * e;
    w.igrad_flops = matmul + 2.0 * attention;
    w.igrad_bytes = params * e + activations + 2.0 * tokens * H * e;
    w.wgrad_flops = matmul;
    w.wgrad_bytes = activations + 2.0 * params * e;
    Node node;
    node.name = "block" + std::to_string(l);
    node.kind = NodeKind::kTransformerBlock;
    node.params = {{"hidden", spec.hidden}, {"heads", spec.heads}, {"ffn_hidden", 4 * spec.hidden}};
    node.cost = cost_of(w, dev, params * e, activations, tokens * H * e);
    model.nodes.push_back(std::move(node));
  }
  {  // Final layernorm: ~5 FLOPs per element; keeps its input.
    Work w;
    w.fwd_flops = 5.0 * tokens * H;
    w.fwd_bytes = 2.0 * tokens * H * e;
    w.igrad_flops = 5.0 * tokens * H;
    w.igrad_bytes = 3.0 * tokens * H * e;
    w.wgrad_flops = 2.0 * tokens * H;
    w.wgrad_bytes = 2.0 * tokens * H * e + 4.0 * H * e;
    Node node;
    node.name = "ln_f";
    node.kind = NodeKind::kLayerNorm;
    node.params = {{"normalized_shape", spec.hidden}};
    node.cost = cost_of(w, dev, 2.0 * H * e, tokens * H * e, tokens * H * e);
    model.nodes.push_back(std::move(node));
  }
  model.nodes.push_back(linear_node("head", tokens, spec.hidden, spec.vocab, false, e, dev));
  for (std::size_t i = 0; i + 1 < model.nodes.size(); ++i) {
    model.edges.push_back(ModelEdge{static_cast<int>(i), 0, static_cast<int>(i) + 1, 0});
  }
  validate_model(model, "make_gpt");
  return model;
}

Model make_mlp(const MlpSpec& spec) {
  PW_CHECK(spec.sizes.size() >= 2, ConfigError,
           "--sizes needs at least 2 sizes (input and output), got " << spec.sizes.size());
  PW_CHECK(spec.sizes.size() <= 100001, ConfigError, "--sizes has more than 100001 entries");
  for (std::size_t i = 0; i < spec.sizes.size(); ++i) {
    PW_CHECK(
        spec.sizes[i] > 0 && spec.sizes[i] <= (1 << 24), ConfigError,
        "--sizes entry " << i << " must be in [1, " << (1 << 24) << "], got " << spec.sizes[i]);
  }
  PW_CHECK(spec.activation == NodeKind::kRelu || spec.activation == NodeKind::kGelu, ConfigError,
           "--activation must be relu or gelu, got " << to_string(spec.activation));
  PW_CHECK(spec.micro_batch_size > 0 && spec.micro_batch_size <= (1 << 24), ConfigError,
           "--micro-batch-size must be in [1, " << (1 << 24) << "], got " << spec.micro_batch_size);
  PW_CHECK(spec.bytes_per_element > 0, ConfigError,
           "--bytes-per-element must be > 0, got " << spec.bytes_per_element);
  check_device(spec.device);

  const double rows = static_cast<double>(spec.micro_batch_size);
  const double e = static_cast<double>(spec.bytes_per_element);
  Model model;
  model.name = "mlp";
  for (std::size_t i = 0; i < spec.sizes.size(); ++i) {
    model.name += (i == 0 ? "-" : "x") + std::to_string(spec.sizes[i]);
  }
  model.input = ModelInput{"float32", {spec.sizes.front()}};
  model.micro_batch_size = spec.micro_batch_size;
  for (std::size_t i = 0; i + 1 < spec.sizes.size(); ++i) {
    const std::string index = std::to_string(model.nodes.size());
    model.nodes.push_back(
        linear_node(index, rows, spec.sizes[i], spec.sizes[i + 1], spec.bias, e, spec.device));
    if (i + 2 < spec.sizes.size()) {
      model.nodes.push_back(activation_node(std::to_string(model.nodes.size()), spec.activation,
                                            rows * static_cast<double>(spec.sizes[i + 1]), e,
                                            spec.device));
    }
  }
  for (std::size_t i = 0; i + 1 < model.nodes.size(); ++i) {
    model.edges.push_back(ModelEdge{static_cast<int>(i), 0, static_cast<int>(i) + 1, 0});
  }
  validate_model(model, "make_mlp");
  return model;
}

}  // namespace pipewright::graph
