// The one description of a training job (docs/architecture.md, "One job, one plan"): what
// `pipewright run` trains and what `pipewright simulate` (and search, compare) times, with one
// set of defaults and one function that turns it into the lowered plan every rank runs.
//
// JobSpec holds what defines the job: the model and its partition, the plan (a schedule or a
// plan file) and its shape, the batch, the optimizer and the data-parallel algorithm. Settings
// of one way of running it (data files, backend, outputs, checkpoints) live with the executor
// (exec::RunConfig extends JobSpec). `to_json` writes it back with every default filled in
// (`run --dry-run --plan-out`, `simulate --plan-out`), and the checkpoint fingerprint hashes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/training.hpp"

namespace pipewright::graph {
struct Model;
}

namespace pipewright::sched {

enum class DpAlgorithm : std::uint8_t {
  kDdp,       // gradients averaged every step (PyTorch DistributedDataParallel)
  kSlowMo,    // fairscale SlowMo with the LocalSGD base algorithm
  kLocalSgd,  // LocalSGD alone (SlowMo with slowmo_lr = 1, momentum = 0)
  kDiLoCo,    // DiLoCo / Streaming DiLoCo (torchft): outer optimizer on averaged parameter deltas
  kSgp,       // Stochastic Gradient Push (fairscale's gossip): push-sum with one peer per step
};
// "ddp", "slowmo", "localsgd", "diloco", "sgp"; anything else is a ConfigError listing them.
[[nodiscard]] DpAlgorithm parse_dp_algorithm(std::string_view name);
[[nodiscard]] std::string_view to_string(DpAlgorithm algorithm) noexcept;

// The element type of DiLoCo's outer all-reduce: kBf16 sends bfloat16 and sums in float32.
enum class OuterDtype : std::uint8_t { kFp32, kBf16 };
// "fp32", "bf16"; anything else is a ConfigError naming --outer-dtype.
[[nodiscard]] OuterDtype parse_outer_dtype(std::string_view name);
[[nodiscard]] std::string_view to_string(OuterDtype dtype) noexcept;

enum class Optimizer : std::uint8_t { kSgd, kAdam, kAdamW };
// "sgd" (with --momentum), "adam", "adamw"; anything else is a ConfigError listing the names.
[[nodiscard]] Optimizer parse_optimizer(std::string_view name);
[[nodiscard]] std::string_view to_string(Optimizer optimizer) noexcept;

// What a run does when its loss or a stage's gradient norm is not finite (NaN or Inf), like
// torchtitan's and DeepSpeed's overflow handling (issue 20, item 8; docs/reliability.md):
// kError stops every rank (exit 1) naming the step, rank and stage; kSkipStep skips the
// optimizer step of the affected stages and goes on; kWarn logs and trains on.
enum class NanPolicy : std::uint8_t { kError, kSkipStep, kWarn };
// "error", "skip-step", "warn"; anything else is a ConfigError listing the names.
[[nodiscard]] NanPolicy parse_nan_policy(std::string_view name);
[[nodiscard]] std::string_view to_string(NanPolicy policy) noexcept;

// The data-parallel algorithm and its options. Unset optionals take the defaults of the
// *_or_default accessors (fairscale's SlowMo defaults); setting an option that the algorithm
// ignores is a ConfigError (validate_job), so the optionals record what the user said.
struct DataParallelSpec {
  DpAlgorithm algorithm = DpAlgorithm::kDdp;
  // DDP. Bucket cap in MiB (fractions allowed); the first bucket is min(1 MiB, cap).
  double bucket_cap_mb = 25.0;
  // DDP ablation: launch every bucket's all-reduce at REDUCE_GRAD instead of during backward.
  bool ddp_overlap = true;
  // SlowMo / LocalSGD.
  std::optional<std::int64_t> localsgd_frequency;  // default 3
  std::optional<std::int64_t> slowmo_frequency;    // default 48
  std::optional<double> slowmo_momentum;           // default 0.5
  std::optional<double> slowmo_lr;                 // default 1.0
  std::optional<bool> slowmo_memory_efficient;     // default true
  std::optional<int> slowmo_num_shards;            // default min(32, dp)
  // Ranks per node (consecutive world ranks share a node). With several replicas of a stage on
  // one node, SlowMo all-reduces gradients within the node every step and averages parameters
  // only across nodes, as fairscale does. Default 1.
  std::optional<int> procs_per_node;
  // SlowMo's base algorithm (fairscale's slowmo_base_algorithm): LocalSGD averaging every
  // localsgd_frequency steps (default) or SGP gossip every step.
  std::optional<DpAlgorithm> slowmo_base;  // kLocalSgd or kSgp

  [[nodiscard]] std::int64_t localsgd_frequency_or_default() const {
    return localsgd_frequency.value_or(3);
  }
  [[nodiscard]] std::int64_t slowmo_frequency_or_default() const {
    return slowmo_frequency.value_or(48);
  }
  // LocalSGD is SlowMo with these two fixed.
  [[nodiscard]] double slowmo_momentum_or_default() const {
    return algorithm == DpAlgorithm::kLocalSgd ? 0.0 : slowmo_momentum.value_or(0.5);
  }
  [[nodiscard]] double slowmo_lr_or_default() const {
    return algorithm == DpAlgorithm::kLocalSgd ? 1.0 : slowmo_lr.value_or(1.0);
  }
  [[nodiscard]] bool slowmo_memory_efficient_or_default() const {
    return slowmo_memory_efficient.value_or(true);
  }
  [[nodiscard]] int slowmo_num_shards_or_default(int dp) const {
    return slowmo_num_shards.value_or(dp < 32 ? dp : 32);
  }
  [[nodiscard]] int procs_per_node_or_default() const { return procs_per_node.value_or(1); }
  [[nodiscard]] DpAlgorithm slowmo_base_or_default() const {
    return slowmo_base.value_or(DpAlgorithm::kLocalSgd);
  }

  // DiLoCo / Streaming DiLoCo (docs/data-parallel.md, Note [DiLoCo step] in
  // exec/src/dp/diloco.hpp).
  std::optional<std::int64_t> sync_every;  // H, inner steps per outer step; default 100
  std::optional<double> outer_lr;          // default 0.7 (DiLoCo paper)
  std::optional<double> outer_momentum;    // default 0.9
  std::optional<bool> outer_nesterov;      // default: outer_momentum > 0
  std::optional<int> fragments;            // K (Streaming DiLoCo); default 1
  std::optional<std::int64_t> sync_delay;  // tau, inner steps the all-reduce overlaps;
                                           // default 1 when K > 1 and H / K > 1, else 0
  std::optional<OuterDtype> outer_dtype;   // default fp32

  [[nodiscard]] std::int64_t sync_every_or_default() const { return sync_every.value_or(100); }
  [[nodiscard]] double outer_lr_or_default() const { return outer_lr.value_or(0.7); }
  [[nodiscard]] double outer_momentum_or_default() const { return outer_momentum.value_or(0.9); }
  [[nodiscard]] bool outer_nesterov_or_default() const {
    return outer_nesterov.value_or(outer_momentum_or_default() > 0);
  }
  [[nodiscard]] int fragments_or_default() const { return fragments.value_or(1); }
  [[nodiscard]] std::int64_t sync_delay_or_default() const {
    const int k = fragments_or_default();
    return sync_delay.value_or(k > 1 && sync_every_or_default() / k > 1 ? 1 : 0);
  }
  [[nodiscard]] OuterDtype outer_dtype_or_default() const {
    return outer_dtype.value_or(OuterDtype::kFp32);
  }
};

// Activation recompute (activation checkpointing; Megatron's --recompute-granularity full with
// --recompute-method uniform over a whole stage). A recomputed stage keeps only its inputs during
// the forward and recomputes its forward inside its backward (B, or I when the backward is split;
// W then uses what I kept). Text form (flag --recompute, TOML key `recompute`):
//   "none"  (default) keep every activation;
//   "full"  recompute every stage;
//   "0,2"   recompute the listed model stages (partition stages, 0-based; replicas of a model
//           stage, Chimera's, follow it);
//   "selective"  Korthikanti et al. 2022's selective recompute inside each transformer block
//           (the attention core: softmax, dropout, scores x values): no stage is recomputed
//           (recomputes() is false); the simulator's per-GPU model drops that part of a block's
//           activations and re-runs its forward in the backward (sim/parallel_model.hpp).
//           Simulation only: `run` refuses it.
enum class RecomputeMode : std::uint8_t { kNone, kFull, kStages, kSelective };
struct RecomputeSpec {
  RecomputeMode mode = RecomputeMode::kNone;
  std::vector<int> stages;  // kStages only: ascending, unique, non-empty

  // Whether whole stages are recomputed (full or a stage list; not selective).
  [[nodiscard]] bool any() const noexcept {
    return mode == RecomputeMode::kFull || mode == RecomputeMode::kStages;
  }
  [[nodiscard]] bool selective() const noexcept { return mode == RecomputeMode::kSelective; }
  [[nodiscard]] bool recomputes(int model_stage) const noexcept;
  friend bool operator==(const RecomputeSpec& a, const RecomputeSpec& b) noexcept {
    return a.mode == b.mode && a.stages == b.stages;
  }
};
// Parses the text form; throws ConfigError naming --recompute (e.g. "--recompute: '0,x' is not
// none, selective, full or a comma-separated list of stage indices").
[[nodiscard]] RecomputeSpec parse_recompute(std::string_view text);
// "none", "selective", "full" or "0,2".
[[nodiscard]] std::string to_string(const RecomputeSpec& recompute);
// Stage indices in [0, stages): ConfigError naming --recompute otherwise.
void validate_recompute(const RecomputeSpec& recompute, int stages);

struct JobSpec {
  // Model and partition.
  std::string model_path;      // model JSON; empty only where costs come from elsewhere
  std::string partition_path;  // partition JSON; empty: partition the model (partition_method)
  graph::PartitionMethod partition_method = graph::PartitionMethod::kBalanced;
  // Megatron-Core layout string (graph/layout.hpp, `--layout "Et*3|(tt|)*29,m|L"`): the partition
  // it describes; empty: partition_path or partition_method. Its stages / pp is the V.
  std::string layout;
  // Plan: a plan file (CSV/JSON), or `schedule` generated for the shape below.
  std::string plan_path;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int pp = 1;
  int dp = 1;
  int stages_per_rank = 1;
  int microbatches = 1;
  // Training.
  std::int64_t batch_size = 0;  // samples per replica per step, a multiple of microbatches;
                                // 0: not given (simulate: no throughput unless the model's)
  std::int64_t steps = 1;
  Optimizer optimizer = Optimizer::kSgd;
  double lr = 0.01;
  double momentum = 0.0;  // sgd only
  double weight_decay = 0.0;
  NanPolicy nan_policy = NanPolicy::kError;
  DataParallelSpec data_parallel;
  // Sharded data parallelism (issue 43; docs/data-parallel.md, "Sharded data parallelism"):
  // 0 = DDP, every replica holds its stages' whole state; 1 = optimizer state sharded over the
  // stage's data-parallel group (Megatron's distributed optimizer); 2 = also gradients; 3 = also
  // parameters (FSDP; UNSHARD / RESHARD in the plan). Flag --zero-stage, TOML
  // [parallelism] zero_stage. Synchronous algorithms only (validate_job).
  int zero_stage = 0;
  // Where make_plan puts ZeRO-3's UNSHARD / RESHARD (lower.hpp, Note [Where UNSHARD and RESHARD
  // go]) in a plan that has none; flag --shard-placement. Only with zero stage 3 (validate_job).
  ShardPlacement shard_placement = ShardPlacement::kFit;
  // Tensor parallelism (issue 46; simulation only: `run` refuses tp > 1): each pipeline rank of
  // each replica is a group of tp GPUs inside one node running Megatron-LM's column/row-parallel
  // layers (sim/parallel_model.hpp, Note [Tensor parallelism as costs]); with
  // sequence_parallel, Megatron's sequence parallelism too. Flags --tp, --sequence-parallel;
  // TOML [parallelism] tp, sequence_parallel. The plan is the same: a plan rank stands for
  // the group.
  int tp = 1;
  bool sequence_parallel = false;
  // Inference / evaluation: the schedule's forward-only plan (ScheduleSpec::forward_only), no
  // gradients, no optimizer (flag --forward-only, TOML key `forward_only`).
  bool forward_only = false;
  RecomputeSpec recompute;  // flag --recompute, TOML key `recompute`
  // The training recipe (issue 33; pipewright/sched/training.hpp, docs/executor.md).
  Precision precision = Precision::kFp32;  // --precision
  // Element type of data-parallel gradient reductions (torch MixedPrecision's reduce_dtype):
  // fp32 or bf16 (bf16 on the wire, summed in fp32). Default fp32.
  std::optional<Precision> reduce_dtype;  // --reduce-dtype
  double clip_grad_norm = 0;              // --clip-grad-norm: global L2 norm; 0: no clipping
  LrSchedule lr_schedule;  // --lr-warmup-steps, --lr-decay-style, --lr-decay-steps, --lr-min

  [[nodiscard]] Precision reduce_dtype_or_default() const noexcept {
    return reduce_dtype.value_or(Precision::kFp32);
  }

  // The zero stage that takes effect: with one replica there is nothing to shard (0).
  [[nodiscard]] int effective_zero_stage() const noexcept { return dp > 1 ? zero_stage : 0; }

  [[nodiscard]] int stages() const noexcept { return pp * stages_per_rank; }
  // Samples per microbatch (batch_size / microbatches), 0 when batch_size is not given.
  [[nodiscard]] std::int64_t micro_batch_size() const noexcept {
    return batch_size > 0 && microbatches > 0 ? batch_size / microbatches : 0;
  }
};

// Checks what needs no file: ranges, the batch against the microbatches, optimizer options,
// data-parallel options against the algorithm. Throws ConfigError naming the flag.
void validate_job(const JobSpec& job);

// The partition the job runs: its partition file (checked against the model and the stage
// count) or the model partitioned by partition_method into pp x stages_per_rank stages.
// Throws ConfigError / InputError naming the file or flag.
[[nodiscard]] graph::Partition resolve_partition(const JobSpec& job, const graph::Model& model);

// A plan as `pipewright run` executes it: a compute-only plan lowered with REDUCE_GRAD after
// each stage's last backward and OPTIM per stage (sched::lower); a lowered plan with the
// REDUCE_GRAD / OPTIM it lacks appended to its rank's list.
[[nodiscard]] LoweredPlan lower_for_run(AnyPlan plan);

// The lowered plan every rank of the job runs: the plan file (lower_for_run) or the generated
// schedule (over the partition's stage DAG when it is not a chain), checked against the job's
// shape and, when given, the partition (every stage dependency must be a plan edge), then
// validated (check_valid) and dry-run for deadlocks. Under effective zero stage 3 a plan without
// UNSHARD / RESHARD gets them from place_shards(job.shard_placement) (kFit without a memory
// limit: kStep); a plan with them runs as written; validated (buffered sends: the executor
// pre-posts its receives). `loaded` is the plan file's contents when the caller has read it already
// (else the file is read here). Throws InvalidPlanError naming the plan and the mismatch.
[[nodiscard]] LoweredPlan make_plan(const JobSpec& job, const graph::Partition* partition,
                                    const AnyPlan* loaded = nullptr);

// The job with the shape (pp, stages_per_rank, microbatches) of a plan, for commands that take
// the shape from a plan file. Throws InvalidPlanError if the plan's stages are not a multiple of
// its ranks (a job runs pp x stages_per_rank stages).
[[nodiscard]] JobSpec with_plan_shape(JobSpec job, const PlanShape& shape);

// The job with every default filled in, as canonical JSON (one line per field, fixed order):
// equal jobs give equal bytes. parse_job reads it back (ParseError naming origin and field).
[[nodiscard]] std::string to_json(const JobSpec& job);
[[nodiscard]] JobSpec parse_job(std::string_view json_text, std::string_view origin);

// The --plan-out document: {"job": to_json(job), "plan": to_json(plan)}.
[[nodiscard]] std::string plan_out_json(const JobSpec& job, const LoweredPlan& plan);

}  // namespace pipewright::sched
