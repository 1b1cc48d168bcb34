// The per-GPU model of a (micro-batch size, tp, sp) shape against the closed forms of Megatron-LM
// (Narayanan et al. 2021) and Korthikanti et al. 2022, over a grid of GPT shapes.
#include "pipewright/sim/parallel_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"

namespace pipewright::sim {
namespace {

graph::GptSpec spec_of(std::int64_t h, std::int64_t a, std::int64_t s, std::int64_t b) {
  graph::GptSpec spec;
  spec.layers = 2;
  spec.hidden = h;
  spec.heads = a;
  spec.seq = s;
  spec.vocab = 51200;
  spec.micro_batch_size = b;
  return spec;
}

const graph::Node& node(const graph::Model& m, const std::string& name) {
  return m.nodes.at(static_cast<std::size_t>(m.node_index(name)));
}

TEST(ParallelModel, KorthikantiClosedForms) {
  // Table 2 of Korthikanti et al. 2022, per layer, bytes.
  const double s = 2048, b = 4, h = 4096, a = 32, sbh = s * b * h, core = 5 * a * s / h;
  for (double t : {1.0, 2.0, 4.0, 8.0}) {
    EXPECT_DOUBLE_EQ(layer_activation_bytes(s, b, h, a, t, false, LayerRecompute::kNone),
                     sbh * (10 + 24 / t + core / t));
    EXPECT_DOUBLE_EQ(layer_activation_bytes(s, b, h, a, t, true, LayerRecompute::kNone),
                     sbh * (34 + core) / t);
    EXPECT_DOUBLE_EQ(layer_activation_bytes(s, b, h, a, t, false, LayerRecompute::kSelective),
                     sbh * (10 + 24 / t));
    EXPECT_DOUBLE_EQ(layer_activation_bytes(s, b, h, a, t, true, LayerRecompute::kSelective),
                     sbh * 34 / t);
    EXPECT_DOUBLE_EQ(layer_activation_bytes(s, b, h, a, t, false, LayerRecompute::kFull), 2 * sbh);
    EXPECT_DOUBLE_EQ(layer_activation_bytes(s, b, h, a, t, true, LayerRecompute::kFull),
                     2 * sbh / t);
  }
  // t = 1 without sp is the formula graph/ annotates blocks with: sbh (34 + 5as/h).
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s, b, h, a, 1, false, LayerRecompute::kNone),
                   sbh * (34 + core));
  EXPECT_DOUBLE_EQ(layer_params_per_gpu(h, 1), 12 * h * h + 13 * h);
}

// Over a grid of shapes: a block's per-GPU time, parameters and activations are the closed forms
// (compute / t + Megatron's two all-reduces each way on the TP link).
TEST(ParallelModel, TransformerBlockOverAGridOfShapes) {
  const Link nvlink{0.003, 300};
  int checked = 0;
  for (std::int64_t h : {1024, 2048, 4096}) {
    for (std::int64_t a : {16, 32}) {
      for (std::int64_t s : {512, 2048}) {
        const graph::Model base = graph::make_gpt(spec_of(h, a, s, 1));
        const graph::NodeCost& c1 = node(base, "block0").cost;
        for (std::int64_t b : {1, 2, 4}) {
          for (std::int32_t t : {1, 2, 4, 8}) {
            for (bool sp : {false, true}) {
              if (sp && t == 1) continue;
              for (auto rec : {LayerRecompute::kNone, LayerRecompute::kSelective}) {
                ParallelModelSpec ps;
                ps.micro_batch_size = b;
                ps.tp = t;
                ps.sequence_parallel = sp;
                ps.tp_link = nvlink;
                ps.recompute = rec;
                const graph::Model m = parallelize_model(base, ps);
                const graph::NodeCost& c = node(m, "block1").cost;
                const double S = static_cast<double>(s), B = static_cast<double>(b);
                const double H = static_cast<double>(h), A = static_cast<double>(a);
                const double coll_ms =
                    static_cast<double>(tp_collective_ns(nvlink, t, S * B * H * 2)) / 1e6;
                if (t > 1) {
                  // Ring all-reduce of sbh 16-bit elements: 2 (t-1)/t bytes / bw + 2 (t-1) lat.
                  const double ring_ms =
                      2.0 * (t - 1) / t * S * B * H * 2 / 300e9 * 1e3 + 2.0 * (t - 1) * 0.003;
                  EXPECT_NEAR(coll_ms, ring_ms, 2e-6);
                }
                const double recompute_ms = rec == LayerRecompute::kSelective
                                                ? c1.forward_ms * B / t * S / (6 * H + S)
                                                : 0.0;
                EXPECT_NEAR(c.forward_ms, c1.forward_ms * B / t + 2 * coll_ms, 1e-9);
                EXPECT_NEAR(*c.input_grad_ms,
                            *c1.input_grad_ms * B / t + 2 * coll_ms + recompute_ms, 1e-9);
                EXPECT_NEAR(*c.weight_grad_ms, *c1.weight_grad_ms * B / t, 1e-9);
                EXPECT_NEAR(c.backward_ms, *c.input_grad_ms + *c.weight_grad_ms, 1e-9);
                // 2-byte parameters: 12h^2/t + 7h/t + 6h elements.
                EXPECT_NEAR(static_cast<double>(c.param_bytes), 2 * layer_params_per_gpu(H, t),
                            1.0);
                // 2-byte activations: Korthikanti's bytes exactly.
                EXPECT_NEAR(static_cast<double>(c.activation_bytes),
                            layer_activation_bytes(S, B, H, A, t, sp, rec), 1.0);
                EXPECT_NEAR(static_cast<double>(c.output_bytes), S * B * H * 2 / t, 1.0);
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 2 * 2 * 3 * 7 * 2);
}

// Note [Autocast bytes per GPU]: a block's fp32 part (graph::autocast_fp32_bytes: 4/34 of it)
// is split over Korthikanti's terms as 4sbh of layer norms (replicated; / t with sp; kept by
// selective recompute) and the rest on the attention core (/ t; dropped by selective recompute);
// kFull keeps the fp32 residual stream only. Other nodes: by kind, or the file's share scaled.
TEST(ParallelModel, AutocastFp32BytesPerGpu) {
  int checked = 0;
  for (std::int64_t h : {1024, 4096}) {
    for (std::int64_t s : {512, 2048}) {
      const std::int64_t a = 32;
      const graph::Model base = graph::make_gpt(spec_of(h, a, s, 1));
      const graph::Node& b1 = node(base, "block1");
      const auto f = static_cast<double>(graph::autocast_fp32_bytes(b1));
      ASSERT_EQ(graph::autocast_fp32_bytes(b1), b1.cost.activation_bytes * 4 / 34);
      const double S = static_cast<double>(s), H = static_cast<double>(h);
      const double core = 5.0 * static_cast<double>(a) * S / H;
      for (std::int64_t b : {1, 4}) {
        for (std::int32_t t : {1, 2, 8}) {
          for (bool sp : {false, true}) {
            if (sp && t == 1) continue;
            for (auto rec :
                 {LayerRecompute::kNone, LayerRecompute::kSelective, LayerRecompute::kFull}) {
              ParallelModelSpec ps;
              ps.micro_batch_size = b;
              ps.tp = t;
              ps.sequence_parallel = sp;
              ps.recompute = rec;
              const graph::Node& n = node(parallelize_model(base, ps), "block1");
              const std::int64_t got = graph::autocast_fp32_bytes(n);
              if (rec == LayerRecompute::kFull) {
                EXPECT_EQ(got, n.cost.activation_bytes);
              } else {
                const double norms = f * 34 / (34 + core) * (sp ? 1.0 / t : 1.0);
                const double attention =
                    rec == LayerRecompute::kNone ? f * core / (34 + core) / t : 0.0;
                const double want = std::min(static_cast<double>(n.cost.activation_bytes),
                                             static_cast<double>(b) * (norms + attention));
                EXPECT_NEAR(static_cast<double>(got), want, 1.0)
                    << "h " << h << " s " << s << " b " << b << " t " << t << " sp " << sp;
                // Selective recompute: the layer norms' inputs alone, Korthikanti's 4sbh of
                // the block's (34 + 5as/h) sbh.
                if (rec == LayerRecompute::kSelective && !sp) {
                  EXPECT_NEAR(static_cast<double>(got),
                              static_cast<double>(b * b1.cost.activation_bytes) * 4 / (34 + core),
                              2.0);
                }
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 2 * 2 * 5 * 3);
  // A node's own activation_fp32_bytes scales with its activations (micro-batch size 2 -> 4).
  graph::Model file = graph::make_gpt(spec_of(1024, 16, 512, 2));
  file.nodes.at(static_cast<std::size_t>(file.node_index("head"))).cost.activation_fp32_bytes =
      1000;
  ParallelModelSpec ps;
  ps.micro_batch_size = 4;
  ps.tp = 2;
  const graph::Model m = parallelize_model(file, ps);
  EXPECT_EQ(graph::autocast_fp32_bytes(node(m, "head")), 2000);
  EXPECT_EQ(graph::autocast_fp32_bytes(node(m, "ln_f")), node(m, "ln_f").cost.activation_bytes);
  EXPECT_EQ(graph::autocast_fp32_bytes(node(m, "embed")), node(m, "embed").cost.activation_bytes);
}

// Vocabulary-parallel embedding and head; layer norms replicated, split by sp.
TEST(ParallelModel, EmbeddingHeadAndNorms) {
  const graph::Model base = graph::make_gpt(spec_of(1024, 16, 1024, 2));
  ParallelModelSpec ps;
  ps.tp = 4;
  ps.tp_link = Link{0, 200};
  const graph::Model m = parallelize_model(base, ps);
  const double H = 1024, V = 51200, S = 1024;
  EXPECT_NEAR(static_cast<double>(node(m, "embed").cost.param_bytes), (V / 4 + S) * H * 2, 1);
  EXPECT_NEAR(static_cast<double>(node(m, "head").cost.param_bytes), V * H * 2 / 4, 1);
  EXPECT_NEAR(node(m, "head").cost.forward_ms, node(base, "head").cost.forward_ms / 4, 1e-12);
  EXPECT_DOUBLE_EQ(node(m, "ln_f").cost.forward_ms, node(base, "ln_f").cost.forward_ms);
  ps.sequence_parallel = true;
  const graph::Model msp = parallelize_model(base, ps);
  EXPECT_NEAR(node(msp, "ln_f").cost.forward_ms, node(base, "ln_f").cost.forward_ms / 4, 1e-12);
  EXPECT_EQ(node(msp, "ln_f").cost.activation_bytes, node(base, "ln_f").cost.activation_bytes / 4);
}

TEST(ParallelModel, MicroBatchSizeScalesTimesAndActivations) {
  const graph::Model base = graph::make_gpt(spec_of(512, 8, 256, 4));
  ParallelModelSpec ps;
  ps.micro_batch_size = 2;
  const graph::Model m = parallelize_model(base, ps);
  EXPECT_EQ(m.micro_batch_size, 2);
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    EXPECT_NEAR(m.nodes[i].cost.forward_ms, base.nodes[i].cost.forward_ms / 2, 1e-12);
    EXPECT_EQ(m.nodes[i].cost.param_bytes, base.nodes[i].cost.param_bytes);
    EXPECT_NEAR(static_cast<double>(m.nodes[i].cost.activation_bytes),
                static_cast<double>(base.nodes[i].cost.activation_bytes) / 2, 1);
  }
}

TEST(ParallelModel, BadShapes) {
  const graph::Model base = graph::make_gpt(spec_of(512, 8, 256, 1));
  ParallelModelSpec ps;
  ps.tp = 3;  // does not divide 8 heads
  EXPECT_THROW((void)parallelize_model(base, ps), ConfigError);
  ps.tp = 1;
  ps.sequence_parallel = true;
  EXPECT_THROW((void)parallelize_model(base, ps), ConfigError);
  ps.sequence_parallel = false;
  ps.tp = 0;
  EXPECT_THROW((void)parallelize_model(base, ps), ConfigError);
}

TEST(ParallelModel, ClusterOfTensorParallelGroups) {
  Cluster c;
  c.nodes = 2;
  c.ranks_per_node = 8;
  c.links_per_node = 8;
  const Cluster g = tp_cluster(c, 4);
  EXPECT_EQ(g.ranks_per_node, 2);
  EXPECT_EQ(g.links_per_node, 2);
  EXPECT_THROW((void)tp_cluster(c, 3), ConfigError);
  Cluster explicit_nodes;
  explicit_nodes.nodes = 2;
  explicit_nodes.rank_nodes = {0, 0, 1, 1};
  EXPECT_EQ(tp_cluster(explicit_nodes, 2).rank_nodes, (std::vector<std::int32_t>{0, 1}));
  explicit_nodes.rank_nodes = {0, 1, 1, 0};
  EXPECT_THROW((void)tp_cluster(explicit_nodes, 2), ConfigError);
}

// Megatron's FLOPs formula is 3 x the forward FLOPs of the blocks and the head (the model FLOPs
// of graph/'s annotations), and the per-node sum is used for models that are not GPTs.
TEST(ParallelModel, ModelFlops) {
  const double B = 8, s = 2048, l = 24, h = 2048, V = 51200;
  const double blocks = l * (24 * B * s * h * h + 4 * B * s * s * h);
  const double head = 2 * B * s * h * V;
  EXPECT_NEAR(gpt_model_flops(B, s, l, h, V) / (3 * (blocks + head)), 1.0, 1e-12);
  graph::GptSpec spec = spec_of(256, 4, 128, 1);
  spec.layers = 3;
  const graph::Model gpt = graph::make_gpt(spec);
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(gpt, 4), gpt_model_flops(4, 128, 3, 256, 51200));
  graph::MlpSpec mlp;
  mlp.sizes = {10, 20, 5};
  EXPECT_DOUBLE_EQ(model_flops_per_iteration(graph::make_mlp(mlp), 2),
                   3 * 2 * (2.0 * 10 * 20 + 2.0 * 20 * 5));
}

Device a100() {
  Device d;
  d.name = "A100";
  d.peak_tflops = 312;
  d.hbm_gb_per_s = 2039;
  return d;
}

// Note [Roofline layer]: GEMMs at peak x f when compute-bound, the element-wise ops at HBM
// bandwidth; the memory-bound share of a layer shrinks as the hidden size grows.
TEST(ParallelModel, RooflineLayer) {
  Device d = a100();
  double last_share = 1.0;
  for (double h : {1024.0, 2048.0, 4096.0, 8192.0, 12288.0}) {
    const LayerTimes lt = transformer_layer_times(2048, 1, h, h / 128, 4 * h, 1, false, d);
    const double share = lt.memory_forward_ms / lt.forward_ms;
    EXPECT_LT(share, last_share) << h;
    last_share = share;
    EXPECT_NEAR(lt.forward_ms, lt.gemm_forward_ms + lt.memory_forward_ms, 1e-12);
    EXPECT_GT(lt.input_grad_ms, lt.forward_ms);
    EXPECT_LT(lt.weight_grad_ms, lt.forward_ms);
  }
  // h = 12288 (GPT-3 175B) at tp 1: the weight GEMMs are compute-bound (24 s h^2 FLOPs at
  // peak); the per-head score GEMMs (s x 128 x s) are bound by their s^2 bytes, within 1%.
  const double s = 2048, h = 12288;
  const LayerTimes big = transformer_layer_times(s, 1, h, 96, 4 * h, 1, false, d);
  const double at_peak = (24 * s * h * h + 4 * s * s * h) / 312e12 * 1e3;
  EXPECT_GE(big.gemm_forward_ms, at_peak);
  EXPECT_NEAR(big.gemm_forward_ms, at_peak, 0.01 * at_peak);
  d.achieved_gemm_fraction = 0.5;
  const LayerTimes half = transformer_layer_times(s, 1, h, 96, 4 * h, 1, false, d);
  EXPECT_NEAR(half.gemm_forward_ms, 2 * at_peak, 1e-9);  // now every GEMM is compute-bound
  EXPECT_DOUBLE_EQ(half.memory_forward_ms, big.memory_forward_ms);
  // Tensor parallelism splits both; sequence parallelism splits the norms and residual adds too.
  const LayerTimes t8 = transformer_layer_times(s, 1, h, 96, 4 * h, 8, false, a100());
  const LayerTimes t8sp = transformer_layer_times(s, 1, h, 96, 4 * h, 8, true, a100());
  EXPECT_NEAR(t8.gemm_forward_ms, big.gemm_forward_ms / 8, 1e-3 * big.gemm_forward_ms);
  EXPECT_LT(t8sp.memory_forward_ms, t8.memory_forward_ms);
}

TEST(ParallelModel, DeviceTimesTheBlocks) {
  const graph::Model base = graph::make_gpt(spec_of(2048, 16, 2048, 2));
  ParallelModelSpec ps;
  ps.tp = 2;
  ps.tp_link = Link{0.005, 300};
  ps.device = a100();
  const graph::Model m = parallelize_model(base, ps);
  const LayerTimes lt = transformer_layer_times(2048, 2, 2048, 16, 8192, 2, false, a100());
  const double coll = static_cast<double>(tp_collective_ns(ps.tp_link, 2, 2048.0 * 2 * 2048 * 2));
  EXPECT_NEAR(node(m, "block0").cost.forward_ms, lt.forward_ms + 2 * coll / 1e6, 1e-9);
  EXPECT_NEAR(*node(m, "block0").cost.weight_grad_ms, lt.weight_grad_ms, 1e-9);
}

}  // namespace
}  // namespace pipewright::sim
