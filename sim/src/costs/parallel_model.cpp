#include "pipewright/sim/parallel_model.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "pipewright/graph/error.hpp"

namespace pipewright::sim {

// Note [Tensor parallelism as costs]
// A TP group of t GPUs (inside one node) runs each transformer layer as Megatron-LM does
// (core/tensor_parallel: column-parallel QKV and fc1, row-parallel projection and fc2). One GPU
// of the group then:
//   - computes 1/t of the layer's FLOPs: F, B, I and W take 1/t of the node's times;
//   - waits, in F, for two collectives over an s x b x h activation (after the attention
//     projection and after fc2: an all-reduce, or with sequence parallelism an all-gather before
//     each column-parallel GEMM and a reduce-scatter after each row-parallel one, the same bytes),
//     and, in B (or I), for two more (the conjugates). They sit on the critical path: Megatron
//     does not overlap them with the layer's compute, so they are added to the times rather than
//     put on a stream of their own;
//   - holds layer_params_per_gpu(h, t) parameters, and the activations of
//     layer_activation_bytes (Korthikanti et al. 2022), scaled from the node's own figure so
//     that its precision (bytes per element) is kept, with the part autocast keeps in fp32 as
//     Note [Autocast bytes per GPU] says;
//   - sends 1/t of a stage's output to the next stage (Megatron's scatter-gather of pipeline
//     tensors; with sequence parallelism the tensor is sharded anyway).
// The word embedding is vocabulary-parallel (its table split over t, position embeddings
// replicated, an all-reduce of its output in F); the output head (a linear whose out_features is
// the embedding's vocabulary) is column-parallel over the vocabulary (1/t of its time and
// parameters; the all-reduce of its input gradient in B, or with sp an all-gather in F and a
// reduce-scatter in B); layer norms outside blocks are replicated, or split over the sequence
// with sp. Every other node is replicated: each GPU of the group computes all of it.
// Micro-batch size: times, activation and output bytes are proportional to it (the node costs
// describe model.micro_batch_size samples); parameters are not.
// Selective recompute drops the attention-core term of a block's activations and re-runs that
// part of the forward (its share of the FLOPs, s / (6h + s)) in the backward. Full recompute is
// the job's --recompute (sched/memory.hpp), which keeps stage inputs only.
//
// Note [Autocast bytes per GPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Under bf16 / fp16 the memory model keeps a node's autocast_fp32_bytes at 4 bytes per element
// and halves the rest (Note [Autocast bytes] in graph/model.hpp), so the per-GPU model says how
// much of one GPU's kept bytes stays fp32, from the node's own fp32 part F (the file's
// activation_fp32_bytes, else that note's rule). The rule's 4/34 of a block, read against
// Korthikanti's layer (34 + c) sbh with c = 5as/h, is 4sbh (the two layer norms' fp32 inputs,
// from the fp32 residual stream) plus 4c/34 sbh (a share of the attention core). F is split by
// those shares, 34 / (34 + c) on the norms and c / (34 + c) on the core, and each part scales as
// its term does on one GPU of a TP group of t: the norms' inputs are in the 10sbh every GPU keeps
// whole (1/t with sequence parallelism, which runs them on s/t of the sequence), the core is
// split over the heads (1/t) and selective recompute drops it. So one GPU's block keeps
//   r F (34 n + c k) / (34 + c),  n = 1 (1/t with sp),  k = 1/t (no recompute) or 0 (selective)
// (autocast_fp32_ratio): F itself at t = 1 without recompute, and the norms' 4sbh alone under
// selective recompute. LayerRecompute::kFull keeps the layer's input only, the fp32 residual
// stream: all fp32. Not kept in fp32: the norms' outputs (the next linear keeps its 16-bit
// cast) and the softmax output (16-bit under the executor's CPU autocast; CUDA's fp32 softmax
// is not modelled: give activation_fp32_bytes). Clamped to the per-GPU activation bytes. Every
// other node keeps its share: by kind when the file does not give it (a layer norm all of its
// bytes, also when sp splits it), scaled with its activations when the file does.

double layer_activation_bytes(double s, double b, double h, double a, double t,
                              bool sequence_parallel, LayerRecompute recompute) {
  const double sbh = s * b * h;
  const double core = 5.0 * a * s / h;  // attention scores, softmax, dropout mask
  switch (recompute) {
    case LayerRecompute::kFull:
      return sequence_parallel ? 2.0 * sbh / t : 2.0 * sbh;
    case LayerRecompute::kSelective:
      return sequence_parallel ? sbh * 34.0 / t : sbh * (10.0 + 24.0 / t);
    case LayerRecompute::kNone:
      break;
  }
  return sequence_parallel ? sbh / t * (34.0 + core) : sbh * (10.0 + 24.0 / t + core / t);
}

double layer_params_per_gpu(double h, double t) { return 12.0 * h * h / t + 7.0 * h / t + 6.0 * h; }

std::int64_t tp_collective_ns(const Link& link, std::int32_t t, double bytes) {
  if (t <= 1) return 0;
  return allreduce_ns(CollectiveAlgorithm::kRing, link, t, static_cast<std::int64_t>(bytes));
}

// Note [Roofline layer]
// A flat fraction of peak cannot say why larger models reach a higher fraction of it: a layer's
// GEMMs grow as h^2 while its norms, softmax, dropout, GeLU and residual adds (memory-bound)
// grow as h (and as a s^2 for the scores). Each op takes its roofline time on the device: GEMMs
// max(FLOPs / (peak x f), bytes / HBM), element-wise ops bytes / HBM, with f the one achieved-
// GEMM fraction (device.achieved_gemm_fraction, fitted on one run: simulate --gemm-fraction).
// The backward: the input gradient repeats every GEMM once (and the attention core twice) plus
// twice the element-wise traffic; the weight gradient repeats the four weight GEMMs.
LayerTimes transformer_layer_times(double s, double b, double h, double a, double ffn, double t,
                                   bool sp, const Device& device) {
  const double e = 2.0;  // bf16
  const double peak = device.peak_tflops * 1e12 * device.achieved_gemm_fraction;
  const double bw = device.hbm_gb_per_s > 0 ? device.hbm_gb_per_s * 1e9 : 0;
  const auto gemm = [&](double m, double k, double n) {  // (m x k) x (k x n)
    const double flops = 2.0 * m * k * n;
    const double bytes = (m * k + k * n + m * n) * e;
    return std::max(peak > 0 ? flops / peak : 0.0, bw > 0 ? bytes / bw : 0.0);
  };
  const auto memory = [&](double bytes) { return bw > 0 ? bytes / bw : 0.0; };
  const double tokens = s * b, heads = a / t, hd = h / a;
  // Weight GEMMs (each appears in F, in I as the data gradient and in W as the weight gradient).
  const double weights = gemm(tokens, h, 3 * h / t) + gemm(tokens, h / t, h) +
                         gemm(tokens, h, ffn / t) + gemm(tokens, ffn / t, h);
  // Attention core: scores and scores x V, per head.
  const double core = b * heads * (gemm(s, hd, s) + gemm(s, s, hd));
  // Element-wise: 2 layer norms (read, write), 2 bias-dropout-residual adds (read 2, write 1,
  // 1-byte mask), with sp over s / t; softmax + dropout on the scores (read, write, read,
  // write, mask); GeLU on the fc1 output (read, write).
  const double rows = sp ? tokens / t : tokens;
  const double elem = memory(2 * 2 * rows * h * e + 2 * (3 * e + 1) * rows * h +
                             b * heads * s * s * (4 * e + 1) + 2 * tokens * ffn / t * e);
  LayerTimes lt;
  lt.gemm_forward_ms = (weights + core) * 1e3;
  lt.memory_forward_ms = elem * 1e3;
  lt.forward_ms = lt.gemm_forward_ms + lt.memory_forward_ms;
  lt.input_grad_ms = (weights + 2 * core + 2 * elem) * 1e3;
  lt.weight_grad_ms = weights * 1e3;
  return lt;
}

double gpt_model_flops(double samples, double s, double layers, double h, double v) {
  return 72.0 * samples * s * layers * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * layers * h));
}

namespace {

std::int64_t param(const graph::Node& n, const char* key) {
  auto it = n.params.find(key);
  return it == n.params.end() ? 0 : it->second;
}

double seq_of(const graph::Model& m) {
  return m.input.shape.empty() ? 1.0 : static_cast<double>(m.input.shape.front());
}

std::int64_t vocab_of(const graph::Model& m) {
  for (const auto& n : m.nodes)
    if (n.kind == graph::NodeKind::kEmbedding && param(n, "num_embeddings") > 0)
      return param(n, "num_embeddings");
  return 0;
}

std::int64_t round_bytes(double x) { return static_cast<std::int64_t>(std::llround(x)); }

// Note [Autocast bytes per GPU]: one GPU's fp32 bytes of a block / the node's (before r).
double autocast_fp32_ratio(double s, double h, double a, double t, bool sp,
                           LayerRecompute recompute) {
  const double core = 5.0 * a * s / h;  // Korthikanti's attention core, per sbh
  const double norms = sp ? 1.0 / t : 1.0;
  const double core_kept = recompute == LayerRecompute::kNone ? 1.0 / t : 0.0;
  return (34.0 * norms + core * core_kept) / (34.0 + core);
}

}  // namespace

double model_flops_per_iteration(const graph::Model& model, double samples) {
  using graph::NodeKind;
  std::int64_t layers = 0, hidden = 0;
  bool gpt = true;
  for (const auto& n : model.nodes) {
    if (n.kind != NodeKind::kTransformerBlock) continue;
    ++layers;
    if (hidden == 0) hidden = param(n, "hidden");
    gpt = gpt && param(n, "hidden") == hidden && hidden > 0;
  }
  const std::int64_t vocab = vocab_of(model);
  const double s = seq_of(model);
  if (gpt && layers > 0 && vocab > 0)
    return gpt_model_flops(samples, s, static_cast<double>(layers), static_cast<double>(hidden),
                           static_cast<double>(vocab));
  // Rows per sample of a linear node: one per token for token inputs, one for feature vectors.
  const double rows = model.input.dtype == "int64" ? s : 1.0;
  double forward = 0;
  for (const auto& n : model.nodes) {
    switch (n.kind) {
      case NodeKind::kLinear:
        forward += 2.0 * rows * static_cast<double>(param(n, "in_features")) *
                   static_cast<double>(param(n, "out_features"));
        break;
      case NodeKind::kTransformerBlock: {
        const auto h = static_cast<double>(param(n, "hidden"));
        forward += 24.0 * s * h * h + 4.0 * s * s * h;
        break;
      }
      case NodeKind::kRelu:
      case NodeKind::kGelu:
      case NodeKind::kLayerNorm:
      case NodeKind::kEmbedding:
      case NodeKind::kLoss:
        break;  // not matrix products: no model FLOPs by convention
      case NodeKind::kCausalSelfAttention:
      case NodeKind::kMlp:
      case NodeKind::kOpaque:
      case NodeKind::kTorchScript:
        return 0;  // work unknown from the parameters
    }
  }
  return 3.0 * forward * samples;
}

double recompute_flops_per_iteration(const graph::Model& model, double samples,
                                     LayerRecompute recompute) {
  if (recompute == LayerRecompute::kNone) return 0;
  const double s = seq_of(model);
  double per_sample = 0;
  for (const auto& n : model.nodes) {
    if (n.kind != graph::NodeKind::kTransformerBlock) continue;
    const auto h = static_cast<double>(param(n, "hidden"));
    per_sample += (recompute == LayerRecompute::kFull ? 24.0 * s * h * h : 0.0) + 4.0 * s * s * h;
  }
  return per_sample * samples;
}

graph::Model parallelize_model(const graph::Model& model, const ParallelModelSpec& spec) {
  using graph::NodeKind;
  PW_CHECK(spec.tp >= 1, ConfigError, "--tp must be >= 1, got " << spec.tp);
  PW_CHECK(!spec.sequence_parallel || spec.tp > 1, ConfigError,
           "--sequence-parallel needs --tp > 1 (it splits the sequence over the TP group)");
  PW_CHECK(spec.micro_batch_size >= 0, ConfigError,
           "micro-batch size must be >= 1, got " << spec.micro_batch_size);
  const std::int64_t base_mbs = std::max<std::int64_t>(model.micro_batch_size, 1);
  const std::int64_t mbs = spec.micro_batch_size > 0 ? spec.micro_batch_size : base_mbs;
  const double r = static_cast<double>(mbs) / static_cast<double>(base_mbs);
  const double t = spec.tp;
  const bool sp = spec.sequence_parallel;
  const double s = seq_of(model);
  const std::int64_t vocab = vocab_of(model);
  graph::Model out = model;
  out.micro_batch_size = mbs;
  if (r == 1.0 && spec.tp == 1 && spec.recompute == LayerRecompute::kNone && !spec.device)
    return out;

  for (auto& n : out.nodes) {
    graph::NodeCost& c = n.cost;
    const double h_node = static_cast<double>(param(n, "hidden"));
    // One collective over this microbatch's s x b x h activation on the TP link, in ms.
    const double act_bytes =
        s * static_cast<double>(mbs) *
        static_cast<double>(n.kind == NodeKind::kEmbedding ? param(n, "embedding_dim")
                                                           : param(n, "hidden")) *
        static_cast<double>(spec.element_bytes);
    const double coll_ms =
        static_cast<double>(tp_collective_ns(spec.tp_link, spec.tp, act_bytes)) / 1e6;
    double split = 1.0;        // compute divisor
    double param_ratio = 1.0;  // per-GPU parameters / the node's
    double act_ratio = 1.0;    // per-GPU activations / the node's (after r)
    // Note [Autocast bytes per GPU]: per-GPU fp32 part / the node's (after r); unset: act_ratio.
    // all_fp32: every kept byte is fp32.
    std::optional<double> fp32_ratio;
    bool all_fp32 = false;
    double fwd_extra = 0, bwd_extra = 0, recompute_ms = 0;
    double time_scale = r;  // the file's times are for model.micro_batch_size samples
    switch (n.kind) {
      case NodeKind::kTransformerBlock: {
        const std::int64_t heads = param(n, "heads");
        const std::int64_t hidden = param(n, "hidden");
        if (hidden <= 0 || heads <= 0) {
          split = t;  // no shape: the work and state split evenly, no activation formula
          param_ratio = act_ratio = 1.0 / t;
          fwd_extra = bwd_extra = 2 * coll_ms;
          break;
        }
        PW_CHECK(heads % spec.tp == 0 && hidden % spec.tp == 0, ConfigError,
                 "--tp " << spec.tp << " must divide the attention heads (" << heads
                         << ") and the hidden size (" << hidden << ") of node '" << n.name << "'");
        split = t;
        param_ratio = layer_params_per_gpu(h_node, t) / layer_params_per_gpu(h_node, 1);
        const double a = static_cast<double>(heads);
        act_ratio = layer_activation_bytes(s, 1, h_node, a, t, sp, spec.recompute) /
                    layer_activation_bytes(s, 1, h_node, a, 1, false, LayerRecompute::kNone);
        fp32_ratio = autocast_fp32_ratio(s, h_node, a, t, sp, spec.recompute);
        all_fp32 = spec.recompute == LayerRecompute::kFull;
        fwd_extra = bwd_extra = 2 * coll_ms;
        if (spec.device) {
          // Note [Roofline layer]: the device's times replace the file's (split = 1 below).
          const auto ffn_it = n.params.find("ffn_hidden");
          const double ffn =
              ffn_it == n.params.end() ? 4 * h_node : static_cast<double>(ffn_it->second);
          const LayerTimes lt = transformer_layer_times(s, static_cast<double>(mbs), h_node, a, ffn,
                                                        t, sp, *spec.device);
          c.forward_ms = lt.forward_ms;
          c.input_grad_ms = lt.input_grad_ms;
          c.weight_grad_ms = lt.weight_grad_ms;
          c.backward_ms = lt.input_grad_ms + lt.weight_grad_ms;
          time_scale = 1.0;
          split = 1.0;  // per GPU already
        }
        if (spec.recompute == LayerRecompute::kSelective)
          recompute_ms = c.forward_ms * time_scale / split * s / (6.0 * h_node + s);
        break;
      }
      case NodeKind::kCausalSelfAttention:
      case NodeKind::kMlp:
        split = t;
        param_ratio = act_ratio = 1.0 / t;
        fwd_extra = bwd_extra = coll_ms;
        break;
      case NodeKind::kEmbedding: {
        const auto rows = static_cast<double>(param(n, "num_embeddings"));
        const auto pos = static_cast<double>(param(n, "max_positions"));
        if (rows > 0) param_ratio = (rows / t + pos) / (rows + pos);
        fwd_extra = coll_ms;
        break;
      }
      case NodeKind::kLinear:
        if (vocab > 0 && param(n, "out_features") == vocab) {  // the output head
          split = t;
          param_ratio = 1.0 / t;
          if (spec.device) {  // one GEMM (tokens x h) x (h x V / t) each in F, I and W
            const Device& d = *spec.device;
            const double peak = d.peak_tflops * 1e12 * d.achieved_gemm_fraction;
            const double tokens = s * static_cast<double>(mbs);
            const auto in = static_cast<double>(param(n, "in_features"));
            const double flops = 2.0 * tokens * in * static_cast<double>(vocab) / t;
            const double bytes = 2.0 * (tokens * in + in * static_cast<double>(vocab) / t +
                                        tokens * static_cast<double>(vocab) / t);
            const double ms = std::max(peak > 0 ? flops / peak : 0.0,
                                       d.hbm_gb_per_s > 0 ? bytes / (d.hbm_gb_per_s * 1e9) : 0.0) *
                              1e3;
            c.forward_ms = ms;
            c.input_grad_ms = ms;
            c.weight_grad_ms = ms;
            c.backward_ms = 2 * ms;
            time_scale = 1.0;
            split = 1.0;
          }
          const double in_bytes = s * static_cast<double>(mbs) *
                                  static_cast<double>(param(n, "in_features")) *
                                  static_cast<double>(spec.element_bytes);
          const double head_ms =
              static_cast<double>(tp_collective_ns(spec.tp_link, spec.tp, in_bytes)) / 1e6;
          if (sp) {
            act_ratio = 1.0 / t;
            fwd_extra = bwd_extra = head_ms / 2;
          } else {
            bwd_extra = head_ms;
          }
        }
        break;
      case NodeKind::kLayerNorm:
        if (sp) {
          split = t;
          act_ratio = 1.0 / t;
        }
        break;
      default:
        break;  // replicated
    }
    const bool has_split = c.input_grad_ms.has_value() && c.weight_grad_ms.has_value();
    c.forward_ms = c.forward_ms * time_scale / split + fwd_extra;
    if (has_split) {
      c.input_grad_ms = *c.input_grad_ms * time_scale / split + bwd_extra + recompute_ms;
      c.weight_grad_ms = *c.weight_grad_ms * time_scale / split;
      c.backward_ms = *c.input_grad_ms + *c.weight_grad_ms;
    } else {
      c.backward_ms = c.backward_ms * time_scale / split + bwd_extra + recompute_ms;
    }
    c.param_bytes = round_bytes(static_cast<double>(c.param_bytes) * param_ratio);
    const std::int64_t fp32 = graph::autocast_fp32_bytes(n);  // before activation_bytes changes
    c.activation_bytes = round_bytes(static_cast<double>(c.activation_bytes) * r * act_ratio);
    if (all_fp32) {
      c.activation_fp32_bytes = c.activation_bytes;
    } else if (fp32_ratio || c.activation_fp32_bytes) {
      c.activation_fp32_bytes =
          std::min(c.activation_bytes,
                   round_bytes(static_cast<double>(fp32) * r * fp32_ratio.value_or(act_ratio)));
    }
    c.output_bytes = round_bytes(static_cast<double>(c.output_bytes) * r / t);
  }
  return out;
}

std::vector<StageTpCollectives> tp_collectives_per_stage(const graph::Model& model,
                                                         const graph::Partition& partition,
                                                         const ParallelModelSpec& spec) {
  std::vector<StageTpCollectives> out(partition.graph.stages.size());
  if (spec.tp <= 1) return out;
  const std::int64_t mbs = spec.micro_batch_size > 0
                               ? spec.micro_batch_size
                               : std::max<std::int64_t>(model.micro_batch_size, 1);
  const double s = seq_of(model);
  for (const auto& st : partition.graph.stages) {
    StageTpCollectives& c = out[static_cast<std::size_t>(st.index)];
    for (const auto n : st.nodes) {
      const graph::Node& node = model.nodes[static_cast<std::size_t>(n)];
      if (node.kind != graph::NodeKind::kTransformerBlock) continue;
      const double bytes = s * static_cast<double>(mbs) *
                           static_cast<double>(param(node, "hidden")) *
                           static_cast<double>(spec.element_bytes);
      c.per_pass += 2;
      c.bytes = round_bytes(bytes);
      c.ns = tp_collective_ns(spec.tp_link, spec.tp, bytes);
    }
  }
  return out;
}

Cluster tp_cluster(const Cluster& cluster, std::int32_t tp) {
  PW_CHECK(tp >= 1, ConfigError, "--tp must be >= 1, got " << tp);
  if (tp == 1) return cluster;
  Cluster out = cluster;
  const std::string origin = "cluster '" + cluster.name + "'";
  if (!cluster.rank_nodes.empty()) {
    PW_CHECK(cluster.rank_nodes.size() % static_cast<std::size_t>(tp) == 0, ConfigError,
             origin << ": rank_nodes lists " << cluster.rank_nodes.size()
                    << " GPUs, not a multiple of --tp " << tp);
    out.rank_nodes.clear();
    for (std::size_t g = 0; g < cluster.rank_nodes.size(); g += static_cast<std::size_t>(tp)) {
      for (std::size_t k = 1; k < static_cast<std::size_t>(tp); ++k)
        PW_CHECK(cluster.rank_nodes[g + k] == cluster.rank_nodes[g], ConfigError,
                 origin << ": rank_nodes puts GPUs " << g << " and " << g + k
                        << " of one tensor-parallel group (--tp " << tp
                        << ") on different nodes; a TP group must lie inside a node");
      out.rank_nodes.push_back(cluster.rank_nodes[g]);
    }
  }
  if (cluster.ranks_per_node > 0) {
    PW_CHECK(cluster.ranks_per_node % tp == 0, ConfigError,
             origin << ": --tp " << tp << " must divide ranks_per_node (" << cluster.ranks_per_node
                    << "): a TP group must lie inside a node");
    out.ranks_per_node = cluster.ranks_per_node / tp;
  }
  if (cluster.links_per_node > 0) out.links_per_node = std::max(1, cluster.links_per_node / tp);
  return out;
}

}  // namespace pipewright::sim
