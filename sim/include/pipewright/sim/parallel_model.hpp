// The model one GPU of a (pp, dp, tp) job runs: a graph::Model whose node costs are rescaled to
// another micro-batch size and split over a tensor-parallel group of `tp` GPUs inside one node
// (Megatron-LM's tensor and sequence parallelism, Note [Tensor parallelism as costs]), so that
// everything downstream (partitioner, cost table, memory model, simulator, search) times and
// sizes one GPU of the group without knowing about tensor parallelism. The simulator's ranks are
// then (pp, dp) positions, each standing for a TP group (tp_cluster places them).
//
// Closed forms (Megatron-LM, Narayanan et al. 2021; Korthikanti et al. 2022) are public so that
// tests can assert them over grids of shapes.
#pragma once

#include <cstdint>
#include <optional>

#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sim/cluster.hpp"

namespace pipewright::sim {

// How activations of a transformer layer are kept for the backward (Korthikanti et al. 2022):
// kNone keeps all, kSelective recomputes the attention core (softmax, dropout, scores x values:
// the 5as/h term), kFull keeps the layer input only (2sbh bytes, / t with sequence parallelism).
enum class LayerRecompute : std::uint8_t { kNone, kSelective, kFull };

struct ParallelModelSpec {
  std::int64_t micro_batch_size = 0;  // samples per microbatch; 0: the model's own
  std::int32_t tp = 1;                // tensor-parallel group size (GPUs of one node)
  bool sequence_parallel = false;     // Megatron's --sequence-parallel (needs tp > 1)
  // Bytes of one activation element on the TP collectives' wire (2: bf16/fp16, 4: fp32).
  std::int64_t element_bytes = 2;
  // The TP group's link (NVLink): a ring over tp GPUs of one node. Bandwidth 0: free.
  Link tp_link;
  // kSelective: the transformer blocks' activation bytes drop the attention-core term and their
  // backward re-runs that part of the forward (Note [Tensor parallelism as costs]).
  LayerRecompute recompute = LayerRecompute::kNone;
  // The device (a cluster file's "device"): when set, transformer blocks and the output head are
  // timed op by op by transformer_layer_times' roofline instead of scaled from the model file.
  std::optional<Device> device;
};

// One transformer layer's F, I and W on one GPU of a TP group, op by op (Note [Roofline
// layer]): every GEMM (QKV, scores, scores x V, projection, fc1, fc2 and their gradients) takes
// max(FLOPs / (peak x achieved_gemm_fraction), bytes / HBM bandwidth); layer norms, softmax,
// dropout, GeLU and the residual adds are memory-bound (bytes / HBM bandwidth). 16-bit
// activations and weights. Milliseconds, without the TP collectives.
struct LayerTimes {
  double forward_ms = 0;
  double input_grad_ms = 0;
  double weight_grad_ms = 0;
  double gemm_forward_ms = 0;    // the GEMMs' share of forward_ms
  double memory_forward_ms = 0;  // the memory-bound ops' share
};
[[nodiscard]] LayerTimes transformer_layer_times(double s, double b, double h, double a, double ffn,
                                                 double t, bool sequence_parallel,
                                                 const Device& device);

// Per transformer layer, one GPU of a TP group of t, 16-bit activations, in bytes
// (Korthikanti et al. 2022, Table 2): s sequence, b micro-batch, h hidden, a heads.
//   no recompute:  sbh (10 + 24/t + 5as/(ht))      with sp: sbh/t (34 + 5as/h)
//   selective:     sbh (10 + 24/t)                 with sp: sbh/t 34
//   full:          2 sbh                           with sp: 2 sbh / t
[[nodiscard]] double layer_activation_bytes(double s, double b, double h, double a, double t,
                                            bool sequence_parallel, LayerRecompute recompute);

// Parameters of one transformer layer on one GPU of a TP group of t (elements): the column- and
// row-parallel weights and the column-parallel biases split, the row-parallel biases and the two
// layer norms replicated: 12h^2/t + 7h/t + 6h (12h^2 + 13h at t = 1).
[[nodiscard]] double layer_params_per_gpu(double h, double t);

// Megatron's TP collectives per transformer layer, bytes each GPU reduces per collective: two in
// the forward (after attention and after the MLP) and two in the backward, each over one
// activation s x b x h (all-reduce; with sequence parallelism a reduce-scatter + an all-gather
// of the same bytes). Time of one on `link` over t GPUs, ring: 2 (t-1)/t bytes / bandwidth +
// 2 (t-1) latency (an all-reduce, or RS + AG, move the same bytes). 0 at t = 1.
[[nodiscard]] std::int64_t tp_collective_ns(const Link& link, std::int32_t t, double bytes);

// Megatron-LM's model FLOPs of one training iteration of a GPT (Narayanan et al. 2021, without
// activation recompute): 72 B s l h^2 (1 + s / (6h) + V / (12 l h)), B the samples.
[[nodiscard]] double gpt_model_flops(double samples, double s, double layers, double h, double v);

// Model FLOPs of one training iteration over `samples` samples: Megatron's formula when the model
// is a GPT (transformer_block nodes with hidden/heads and an embedding with num_embeddings: layers,
// hidden, vocabulary and the input's sequence length), else 3 x the forward FLOPs of the nodes
// whose FLOPs follow from their parameters (linear: 2 in out per sample row; transformer_block:
// 24 s h^2 + 4 s^2 h per sample). 0 when a node's FLOPs are unknown (an opaque or TorchScript
// node), so that no utilisation is claimed for a model whose work is not known.
[[nodiscard]] double model_flops_per_iteration(const graph::Model& model, double samples);

// FLOPs that activation recompute adds to one training iteration over `samples` samples, counted
// as Megatron-LM counts them (transformer layers only): kFull re-runs every block's forward
// (24 s h^2 + 4 s^2 h per sample), kSelective its attention core (4 s^2 h: scores and scores x
// values); 0 for kNone or a model without shaped blocks. Model FLOPs + this = hardware FLOPs:
// for a GPT with full recompute 96 B s l h^2 (1 + s/6h + V/16lh) (Narayanan et al. 2021, whose
// published TFLOP/s count the recompute).
[[nodiscard]] double recompute_flops_per_iteration(const graph::Model& model, double samples,
                                                   LayerRecompute recompute);

// The model one GPU of the group runs (Note [Tensor parallelism as costs]). Throws ConfigError
// when tp < 1, tp does not divide a block's heads or hidden size, sequence parallelism without
// tp > 1, or micro_batch_size < 0.
[[nodiscard]] graph::Model parallelize_model(const graph::Model& model,
                                             const ParallelModelSpec& spec);

// Megatron's TP collectives of one partition stage of the per-GPU model, per forward and per
// backward (B, or I) of one microbatch (Chakra export, chakra.hpp): `per_pass` collectives
// (2 per transformer block; all-reduces, or with sequence parallelism each a reduce-scatter +
// an all-gather) over `bytes` each (s x b x h x element bytes), each taking `ns`
// (tp_collective_ns on spec.tp_link), which parallelize_model added to the stage's F and B.
struct StageTpCollectives {
  std::int32_t per_pass = 0;
  std::int64_t bytes = 0;
  std::int64_t ns = 0;
};
// One per partition stage of `partition` (a partition of `model`, the model as the file gives it;
// spec as parallelize_model takes it). All zero at tp 1.
[[nodiscard]] std::vector<StageTpCollectives> tp_collectives_per_stage(
    const graph::Model& model, const graph::Partition& partition, const ParallelModelSpec& spec);

// The cluster of TP groups: each simulated rank stands for tp GPUs of one node, so a node holds
// ranks_per_node / tp of them (explicit rank_nodes: rank g is the group of GPUs g tp .. g tp +
// tp - 1, which must share a node); links_per_node is shared by tp GPUs' transfers (divided by
// tp, at least 1). Throws ConfigError naming the cluster when tp does not divide ranks_per_node.
[[nodiscard]] Cluster tp_cluster(const Cluster& cluster, std::int32_t tp);

}  // namespace pipewright::sim
