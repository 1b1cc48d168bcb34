// Model generators for the models users study, with costs from FLOP and byte formulas and a
// roofline device model (all formulas in docs/model-format.md).
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/graph/model.hpp"

namespace pipewright::graph {

// Roofline device: an op takes max(flops / (tflops * 1e12), bytes / (gbps * 1e9)) seconds.
struct DeviceModel {
  double tflops = 100.0;  // sustained dense matmul throughput, TFLOP/s (A100-class bf16)
  double gbps = 1500.0;   // sustained memory bandwidth, GB/s (A100-class HBM2e)
};

// Roofline time in milliseconds.
[[nodiscard]] double roofline_ms(double flops, double bytes, const DeviceModel& device) noexcept;

struct GptSpec {
  std::int64_t layers = 12;
  std::int64_t hidden = 768;
  std::int64_t heads = 12;
  std::int64_t seq = 1024;
  std::int64_t vocab = 50257;
  std::int64_t micro_batch_size = 1;
  std::int64_t bytes_per_element = 2;  // parameters and activations (mixed precision: 2)
  DeviceModel device;
};

// embed (token + learned position embeddings), block0..block{L-1} (transformer_block,
// ffn_hidden = 4 * hidden), ln_f (layernorm), head (linear hidden -> vocab, no bias). Input int64
// shape {seq}. Throws ConfigError for non-positive sizes or hidden % heads != 0.
[[nodiscard]] Model make_gpt(const GptSpec& spec);

struct MlpSpec {
  std::vector<std::int64_t> sizes;        // >= 2 entries: in, hidden..., out
  NodeKind activation = NodeKind::kRelu;  // kRelu or kGelu
  std::int64_t micro_batch_size = 1;
  bool bias = true;
  std::int64_t bytes_per_element = 4;  // float32, as the executor runs it
  DeviceModel device;
};

// Nodes in torch.nn.Sequential order, named by their index: "0" Linear(sizes[0], sizes[1]),
// "1" activation, "2" Linear(sizes[1], sizes[2]), ..., last a Linear (no activation after it), so
// parameters are named "0.weight", "0.bias", "2.weight", ... Input float32 shape {sizes[0]}.
// Throws ConfigError for fewer than 2 sizes, non-positive sizes, or another activation.
[[nodiscard]] Model make_mlp(const MlpSpec& spec);

}  // namespace pipewright::graph
