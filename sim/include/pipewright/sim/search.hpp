// Configuration search: enumerates pipeline ranks x tensor-parallel size x data-parallel replicas
// x stages per rank x micro-batch size x microbatches x schedule x data-parallel algorithm x
// precision x zero stage x activation recompute for a model on a cluster, partitions with graph/,
// prunes by a closed-form memory bound, checks the exact peak (sched's memory model), simulates
// what fits (one simulation per distinct timing, Note [Search cache]) and ranks by throughput,
// with the Pareto front of step time against peak memory (Note [Search] in
// sim/src/search/search.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/parallel_model.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// One data-parallel algorithm setting.
struct DpVariant {
  DpAlgorithm algorithm = DpAlgorithm::kDdp;
  double bucket_cap_mb = 25.0;
  std::int32_t localsgd_frequency = 1;
  std::int32_t slowmo_frequency = 1;
  std::int32_t sync_every = 1;  // DiLoCo: H
  std::int32_t fragments = 1;   // DiLoCo: K (Streaming DiLoCo when > 1, with a delay of 1 step)
};

struct SearchOptions {
  std::int32_t devices = 1;  // pp x dp x tp
  // Per-device limit; unset = the cluster's device_memory_bytes (0 there = unlimited).
  std::optional<std::int64_t> memory_limit_bytes;
  // Samples per step. Set: m = global_batch / (dp x micro_batch_size) (configs where it does not
  // divide are skipped). Unset: m in microbatch_factors x pp.
  std::optional<std::int64_t> global_batch;
  std::vector<std::int32_t> microbatch_factors = {1, 2, 4, 8, 16};
  // Samples per microbatch to try (the model's costs rescaled, parallelize_model); empty = 1, 2,
  // 4, ... up to max(16, the model's) and the model's own.
  std::vector<std::int64_t> micro_batch_sizes;
  // Tensor-parallel sizes to try (each a TP group inside one node; parallel_model.hpp); empty =
  // {1}. A size that does not divide the devices, the cluster's ranks_per_node or a block's heads
  // is a counted rejection.
  std::vector<std::int32_t> tps;
  bool sequence_parallel = false;              // with tp > 1: Megatron's sequence parallelism
  std::vector<sched::ScheduleKind> schedules;  // empty = all
  // Also try Auto (sim/synthesis.hpp) at V = 1 for each pp, dp and m, with the memory limit as
  // its cap (`search --schedules` takes "Auto" like a schedule name).
  bool try_auto = true;
  bool named_schedules = true;                            // false: Auto only (`--schedules Auto`)
  std::vector<std::int32_t> stages_per_rank = {2, 4, 8};  // for the looped schedules
  // Data-parallel algorithms (`--dp-algorithms`); empty = default_dp_variants() (synchronous
  // only). dp_variants_for() turns names into variants.
  std::vector<DpVariant> dp_variants;
  Optimizer optimizer = Optimizer::kSgd;  // memory: optimizer state (sched::JobSpec's default)
  double momentum = 0.0;
  std::int32_t top_k = 10;
  // ZeRO stages to try (issue 43; sched/memory.hpp, Note [Sharded state]) for DDP at dp > 1, each
  // a candidate of its own (ZeRO-3's UNSHARD / RESHARD placed by place_shards' kFit against the
  // limit); empty = {0, 1, 2, 3}. At dp 1 or with a local-step algorithm only 0.
  std::vector<std::int32_t> zero_stages;
  // Activation recompute to try (`search --recompute none,selective,full`), each a candidate:
  // kSelective (Korthikanti's, inside each transformer block: parallel_model.hpp; only for models
  // with shaped blocks), kFull (every stage keeps its inputs only, sched::RecomputeSpec full);
  // empty = {kNone, kSelective, kFull}.
  std::vector<LayerRecompute> recomputes;
  // Precisions to try (`search --precision fp32,bf16`): each configuration is simulated at each
  // (memory and message bytes by dtype, Note [Precision bytes] in sched/memory.hpp; compute
  // times are the model's in every precision). Empty = fp32 only.
  std::vector<sched::Precision> precisions;
  // Threads that evaluate candidates (`search --jobs`); 0 = std::thread::hardware_concurrency().
  // The result is the same at every count (Note [Parallel search] in sim/src/search/search.cpp).
  std::int32_t jobs = 0;
};

// Synchronous training: DDP with 25 MiB buckets (ZeRO stages follow from try_zero). Local-step
// algorithms train another model (they converge differently) and are tried only when named.
[[nodiscard]] std::vector<DpVariant> default_dp_variants();
// The variants tried for each named algorithm: ddp (25 MiB buckets), localsgd (every 2 steps),
// slowmo (average every 2, slow momentum every 4), diloco (H 8; and Streaming DiLoCo, 2
// fragments), sgp.
[[nodiscard]] std::vector<DpVariant> dp_variants_for(const std::vector<DpAlgorithm>& algorithms);
// DDP (and its ZeRO stages) average gradients every step; the others are local-step algorithms.
[[nodiscard]] inline bool is_synchronous(DpAlgorithm a) noexcept { return a == DpAlgorithm::kDdp; }

struct SearchCandidate {
  std::int32_t pp = 1;
  std::int32_t dp = 1;
  std::int32_t tp = 1;
  bool sequence_parallel = false;
  std::int64_t micro_batch_size = 1;
  std::int32_t v = 1;
  std::int32_t microbatches = 1;
  sched::ScheduleKind schedule = sched::ScheduleKind::k1F1B;
  bool auto_schedule = false;  // Auto's plan (schedule then says nothing)
  DpVariant dp_variant;
  std::int64_t step_ns = 0;  // amortised over the simulated steps
  double throughput_samples_per_s = 0;
  double bubble_fraction = 0;
  std::int64_t peak_memory_bytes = 0;  // max over ranks
  bool fits_memory = true;
  LayerRecompute recompute = LayerRecompute::kNone;
  sched::Precision precision = sched::Precision::kFp32;
  std::int32_t zero_stage = 0;
  // Not dominated: no other fitting candidate is at least as fast and uses at most as much memory,
  // one of them strictly (SearchResult::pareto).
  bool pareto = false;
  // Model FLOPs (model_flops_per_iteration) per second per GPU, TFLOP/s; 0 when unknown. mfu:
  // that over the cluster's device peak; 0 without a peak.
  double model_tflops_per_gpu = 0;
  double mfu = 0;
  // Synchronous training (dp == 1, DDP, ZeRO); false: a local-step algorithm.
  [[nodiscard]] bool synchronous() const noexcept {
    return dp == 1 || is_synchronous(dp_variant.algorithm);
  }
};

// A configuration the search could not rank, and why.
struct SearchRejection {
  std::string configuration;  // describe() of the candidate
  std::string reason;         // the error, or "over the memory limit: ..."
};

// A lower bound of the peak memory of every plan over `ranks` pipeline ranks for these stage
// costs (Note [Search pruning]): runtime bytes plus the larger of the heaviest stage's static
// state (Note [Sharded state]) with one microbatch of its activations (at the memory options'
// precision, their activation_fp32_bytes kept fp32 as the memory model keeps them; a recomputed
// stage holds them during its backward too) and the ranks' average
// static state. Closed form, no plan: the search drops a candidate over the limit by it before
// building or simulating anything.
[[nodiscard]] std::int64_t peak_memory_lower_bound(const sched::CostTable& costs,
                                                   std::int32_t ranks,
                                                   const sched::MemoryOptions& memory);

struct SearchResult {
  std::vector<SearchCandidate> ranked;  // fitting configurations, best first, at most top_k
  std::int64_t enumerated = 0;          // configurations considered
  std::int64_t simulated = 0;           // configurations simulated
  std::int64_t rejected_shape = 0;      // schedule/partition/plan/tp cannot take the shape
  std::int64_t collapsed = 0;           // equal to a better-ranked row but for the schedule name
  std::int64_t dropped_memory = 0;      // over the memory limit (pruned or by the exact peak)
  std::int64_t pruned_memory = 0;       // of those, over it by the closed-form bound: no plan
  std::int64_t cache_hits = 0;          // fitting candidates timed by an earlier equal simulation
  // Fitting candidates not simulated: provably neither in the top_k rows nor on the Pareto front
  // (Note [Search bounds] in sim/src/search/candidates.cpp). With top_k large, none.
  std::int64_t bounded = 0;
  std::int64_t simulated_actions = 0;
  // Every rejected shape and every configuration over the memory limit, with its reason
  // (`search --explain`), at most kMaxRejections.
  std::vector<SearchRejection> rejections;
  static constexpr std::size_t kMaxRejections = 100000;
  // The best synchronous configuration, when the ranked rows (top_k) miss it.
  std::optional<SearchCandidate> best_synchronous;
  // The Pareto front of step time against peak memory over every fitting candidate (after
  // collapsing equivalent rows), fastest first (so smallest memory last); whatever top_k is.
  std::vector<SearchCandidate> pareto;
};

// `progress(done, total)` is called after each configuration (may be empty). Deterministic.
// Throws ConfigError for devices < 1 or a cluster that cannot host `devices` ranks.
[[nodiscard]] SearchResult search(
    const graph::Model& model, const Cluster& cluster, const SearchOptions& options,
    const std::function<void(std::int64_t, std::int64_t)>& progress = {});

// "ddp(25MB)", "localsgd(every 2)", "slowmo(avg 2, slow 4)".
[[nodiscard]] std::string describe(const DpVariant& variant);
// "Auto" for an Auto candidate, else the schedule's name.
[[nodiscard]] std::string schedule_name(const SearchCandidate& candidate);
// "1F1B pp=4 dp=2 v=1 m=8 mbs=2 ddp(25MB)" ("-" for the DP algorithm when dp == 1), with " tp=2"
// (" sp" with sequence parallelism) when tp > 1, " recompute=full" or " recompute=selective",
// " precision=bf16" when it is not fp32 and " zero=1" for a ZeRO stage.
[[nodiscard]] std::string describe(const SearchCandidate& candidate);
// "none", "selective", "full"; parse_layer_recompute throws ConfigError naming --recompute.
[[nodiscard]] std::string to_string(LayerRecompute recompute);
[[nodiscard]] LayerRecompute parse_layer_recompute(const std::string& text);

}  // namespace pipewright::sim
