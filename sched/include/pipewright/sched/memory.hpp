// The memory model of a job: what each pipeline rank holds, and its peak (Note [Memory model]).
//
// One model, one number: `pipewright run --dry-run`, `simulate`, `search` and the simulator's
// memory timeline all ask peak_memory() / MemoryModel, so the same job gets the same peak per
// rank wherever it is printed (issue 34). Memory changes only at compute actions, which a rank
// runs one after another in its plan order, so the peak depends on the plan and the stage sizes,
// not on timing: it lives here, beside the plan, and the simulator only places the same
// changes on its clock.
//
// Note [Memory model]
// ~~~~~~~~~~~~~~~~~~~
// A rank holds, for the whole run:
//   static     parameters + gradients (same dtype) + optimizer state
//              (optimizer_state_factor x parameters) of its stages;
//   runtime    CostTable::runtime_memory_bytes (libraries, allocator caches, data; executor
//              profiles measure it, model and what-if costs have 0);
// and, changing with its compute actions (MemoryModel::change), activations: an F adds the
// stage's kept bytes (its activation_bytes) when it starts, held until the microbatch's B ends
// (or, after an I, partly until its W: Note [Weight-gradient activation]).
//   peak = runtime + static + autocast cache (bf16/fp16 only, Note [Precision bytes]) + the
//          largest sum of activations over the rank's actions in plan order.
// Every F's activations are freed within its step, so one step's peak is every step's.
//
// Note [Weight-gradient activation]: the split backward's I computes the input gradient and
// frees what only it reads; W reads only the inputs of the stage's weight-bearing ops (their
// saved inputs and the output gradients I passes on). StageCost::weight_grad_keeps is that
// share of the kept bytes: an I frees (1 - share) x kept at its end, its W the rest. This is the
// Zero Bubble paper's accounting (Qi et al., ICLR 2024, Table 1: F +M_B, B +M_W - M_B, W -M_W;
// for a GPT layer M_B = 34bsh + 5as^2b and M_W = 32bsh, as its authors' efficiency.py
// evaluates: share 32h / (34h + 5as)). Absent, the share is 1 (W frees everything): a cost table
// says nothing about which tensors W reads, and the executor's split backward (Note [Split
// backward] in exec/src/model/split_backward.hpp) frees the graph above its boundary nodes after
// I but keeps the boundary nodes' saved tensors, whose share depends on the model; 1 never
// understates the peak. Recomputed stages keep their recomputed activations until W (share 1).
//
// Note [Recompute]: a recomputed stage (JobSpec::recompute) keeps only its inputs (the output
// bytes of the stages that feed it; the first stage's input batch is the data loader's) from F
// to its backward, and its full activations only during the B (or from I to the end of W) that
// recomputes them.
//
// Note [Precision bytes]: under --precision bf16 or fp16 (autocast with fp32 master weights, as
// torch.autocast and Megatron's --bf16 do) the parameters, their gradients and the optimizer
// state stay fp32; the tensors that cross stage boundaries (p2p messages) are 16-bit, and so are
// the activations a forward keeps for its backward except what autocast keeps in fp32 (layer
// norms' inputs and statistics, token ids, the loss: Note [Autocast bytes] in graph/model.hpp,
// StageCost::activation_fp32_bytes). So a cost table's output bytes are scaled by
// element_bytes(job) / element_bytes(table) (bytes_at_precision) and its activation bytes except
// their fp32 part (activation_bytes_at_precision): model estimates and what-if numbers are fp32,
// executor profiles carry their run's precision (measured: nothing to scale). Autocast also caches
// a 16-bit copy of every parameter a matmul uses (params x element_bytes / 4 per stage, all
// parameters counted), alive while any microbatch's activations are: the model holds it for the
// whole step (RankMemory::autocast_cache_bytes), which is what it holds at the peak. The
// data-parallel reduction's dtype (JobSpec::reduce_dtype) and the fp16 loss-scale all-reduce (one
// scalar) change no memory.
//
// Note [Sharded state] (issue 43, ZeRO; docs/data-parallel.md, "Sharded data parallelism"): with
// p = a stage's fp32 parameter bytes (CostTable param_bytes, 4 per parameter), d = its
// data-parallel replicas and k = optimizer_state_factor, a state layout holds per stage
//   layout (MemoryOptions::layout)  parameters a   gradients g   optimizer o (x p)
//   kAutocast (pipewright)          1 (fp32)       1 (fp32)      k  (+ the 16-bit autocast cache
//                                                                   p/2 under bf16 / fp16)
//   kMegatron (Megatron-Core)       1/2 (bf16)     1 (fp32)      1 + k (fp32 master + state)
//   kZero     (the ZeRO paper)      1/2 (fp16)     1/2 (fp16)    1 + k (fp32 master + state)
// and by zero stage (MemoryOptions::zero_stage, the job's effective one) static bytes
//   0: (a + g + o) p     1: (a + g) p + o p / d     2: a p + (g + o) p / d     3: (a + g + o) p / d
// (shards of a stage's padded flat buffer: ceil(p / d) per share) plus, changing with the plan:
//   ZeRO-2 and 3: a backward that completes weight gradients (B or W) holds the stage's full
//     gradients g p from its start to its end (then they are reduce-scattered into the shard);
//   ZeRO-3: the gathered parameters a p (and under kAutocast with bf16 / fp16 their autocast
//     cache, which then is no static bytes) from the stage's UNSHARD to its RESHARD.
// Per parameter with AdamW (k = 2): kMegatron 18 at stage 0 and 6 + 12/d at stage 1 (Megatron's
// distributed optimizer table); kZero 16, 4 + 12/d, 2 + 14/d, 16/d (the ZeRO paper's formulas);
// kAutocast 16, 8 + 8/d, 4 + 12/d, 16/d (+ 2 per parameter of autocast cache under bf16).
//
// Note [Optimizer transient] (issue 43's memory target): torch's optimizers allocate
// temporaries while they step a tensor: Adam and AdamW's denominator, exp_avg_sq.sqrt() /
// sqrt(bias_correction2), is two tensors of the parameter's size alive at once (plus the
// weight-decayed gradient, grad.add(p, wd), under Adam with weight decay); SGD with weight decay
// one (d_p.add(p, wd)); plain SGD or with momentum none. They live only within the stage's OPTIM,
// one tensor at a time, so the model adds (temporaries x the largest tensor the optimizer steps)
// from the OPTIM's start to its end: the largest parameter at zero stage 0, the largest bucket
// piece (ceil(bucket elements / d) x 4 bytes, Note [ZeRO flat buffers]) from stage 1 on. At
// dp 4 with 16 MiB weights that is 32 MiB. Likewise autograd computes each weight gradient
// into a fresh tensor and then adds it into the parameter's .grad when that is defined, which
// with dp > 1 it always is (DDP's and ZeRO's bucket views): there a backward that completes
// weight gradients (B or W) holds the stage's largest parameter's bytes more from its start to
// its end (with dp 1 torch moves the first microbatch's gradient into .grad; not modelled). Under
// bf16 / fp16 autocast that gradient is first the 16-bit matmul's, alive while autograd casts it
// to fp32, so the backward holds the largest parameter's 16-bit bytes on top (issue 44: measured
// at ZeRO-1 and 2, dp 2, 9.4M-element weights: 18 to 19 MB more than fp32 over the model). Both are
// in peak_activation_bytes.
//
// Note [Forward-only memory]: an inference plan frees a forward's activations when the forward
// ends and holds no gradients or optimizer state (static = parameters).
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sched/training.hpp"

namespace pipewright::sched {

// Optimizer state bytes per parameter byte (state in the parameters' dtype): SGD 0, SGD with
// momentum 1 (the momentum buffer), Adam and AdamW 2 (two moments).
[[nodiscard]] double optimizer_state_factor(Optimizer optimizer, double momentum) noexcept;

// Note [Sharded state]: what a replica keeps of its parameters, gradients and optimizer state.
enum class StateLayout : std::uint8_t { kAutocast, kMegatron, kZero };

// What of a job the memory model reads.
struct MemoryOptions {
  Optimizer optimizer = Optimizer::kSgd;
  double momentum = 0.0;
  RecomputeSpec recompute;
  Precision precision = Precision::kFp32;  // Note [Precision bytes]
  int zero_stage = 0;                      // Note [Sharded state]: the effective zero stage
  int dp = 1;                              // replicas of each stage
  StateLayout layout = StateLayout::kAutocast;
  double weight_decay = 0.0;  // Note [Optimizer transient]
  // DDP / ZeRO bucket cap (bytes; 0: PyTorch's 25 MiB), for ZeRO's bucket pieces.
  std::int64_t bucket_cap_bytes = 0;
};
// The job's options (zero_stage = job.effective_zero_stage(), layout kAutocast: what
// pipewright's executor keeps).
[[nodiscard]] MemoryOptions memory_options(const JobSpec& job);

// What place_shards' kFit policy (lower.hpp, Note [Where UNSHARD and RESHARD go]) places against:
// a rank's peak_memory must stay within limit_bytes (0: no limit).
struct ShardFit {
  const CostTable* costs = nullptr;
  MemoryOptions memory;
  std::int64_t limit_bytes = 0;
  // Tests: the plain greedy, without kFit's shortcuts (a merge that did not fit is tried again
  // after every other merge; no early stop when even the least-memory windows do not fit).
  bool plain = false;
  // Tests: kFit's shortcuts with the rank's list walked again for each trial, the reference for
  // the incremental peak (shard.cpp, Note [Incremental peak]).
  bool rewalk = false;
};

// How one compute action changes its rank's activation bytes, at its start and at its end, and
// the number of microbatches whose activations the rank holds.
struct MemoryChange {
  std::int64_t at_start = 0;  // activations, and Note [Sharded state]'s changing bytes
  std::int64_t at_end = 0;
  std::int64_t sharded_at_start = 0;    // the part of at_start / at_end that is Note [Sharded
  std::int64_t sharded_at_end = 0;      // state]'s (gathered parameters, transient gradients)
  std::int64_t transient_at_start = 0;  // the part that is Note [Optimizer transient]'s
  std::int64_t transient_at_end = 0;
  std::int32_t microbatches_at_start = 0;
  std::int32_t microbatches_at_end = 0;
};

// Note [Memory model] for one plan shape and cost table. `costs` has one stage per plan stage,
// or one per model stage for plans with replicas (Chimera); anything else is a ConfigError.
class MemoryModel {
 public:
  MemoryModel(const PlanShape& shape, const CostTable& costs, const MemoryOptions& options);

  // Parameters, gradients and optimizer state of the stages on pipeline rank `rank`.
  [[nodiscard]] std::int64_t static_bytes(std::int32_t rank) const;
  [[nodiscard]] std::int64_t runtime_bytes() const noexcept { return runtime_bytes_; }
  // Autocast's 16-bit parameter copies of the stages on pipeline rank `rank` (0 in fp32; Note
  // [Precision bytes]).
  [[nodiscard]] std::int64_t autocast_cache_bytes(std::int32_t rank) const;
  // The change an action of plan stage `stage` makes: compute actions, and UNSHARD / RESHARD at
  // zero stage 3 (all zero for other kinds).
  [[nodiscard]] MemoryChange change(ActionKind kind, std::int32_t stage) const noexcept;

 private:
  const PlanShape& shape_;
  [[nodiscard]] std::int64_t share(double bytes) const noexcept;          // ceil(bytes / dp)
  std::vector<std::int64_t> param_bytes_, kept_bytes_, recompute_bytes_;  // per plan stage
  // Note [Weight-gradient activation]: of kept_bytes_, what an I frees at its end (per stage).
  std::vector<std::int64_t> input_grad_frees_;
  std::vector<std::int64_t> optimizer_transient_;  // Note [Optimizer transient], per plan stage
  std::vector<std::int64_t> grad_transient_;       // the same note: the largest parameter
  double state_factor_ = 0.0;
  std::int64_t runtime_bytes_ = 0;
  Precision precision_ = Precision::kFp32;
  int zero_stage_ = 0;
  int dp_ = 1;
  double param_x_ = 1.0, grad_x_ = 1.0, optim_x_ = 0.0;  // Note [Sharded state]: a, g, o
};

struct RankMemory {
  std::int32_t rank = 0;
  std::int64_t static_bytes = 0;
  std::int64_t runtime_bytes = 0;
  std::int64_t autocast_cache_bytes = 0;  // Note [Precision bytes]; 0 in fp32
  std::int64_t peak_activation_bytes = 0;
  std::int32_t peak_activation_microbatches = 0;
  // Note [Sharded state]: gathered parameters and transient full gradients at the peak (0 below
  // zero stage 2).
  std::int64_t peak_sharded_bytes = 0;
  // Note [Optimizer transient]: optimizer temporaries or a fresh weight gradient at the peak.
  std::int64_t peak_transient_bytes = 0;
  std::int64_t peak_bytes = 0;  // runtime + static + autocast cache + activation + sharded
                                // + transient
  friend bool operator==(const RankMemory& a, const RankMemory& b) noexcept {
    return a.rank == b.rank && a.static_bytes == b.static_bytes &&
           a.runtime_bytes == b.runtime_bytes && a.autocast_cache_bytes == b.autocast_cache_bytes &&
           a.peak_activation_bytes == b.peak_activation_bytes &&
           a.peak_activation_microbatches == b.peak_activation_microbatches &&
           a.peak_sharded_bytes == b.peak_sharded_bytes &&
           a.peak_transient_bytes == b.peak_transient_bytes && a.peak_bytes == b.peak_bytes;
  }
};

// Every pipeline rank's memory under Note [Memory model], by rank. The one peak-memory function:
// `run --dry-run` prints it, and the simulator reports it (SimResult::per_rank).
[[nodiscard]] std::vector<RankMemory> peak_memory(const LoweredPlan& plan, const CostTable& costs,
                                                  const MemoryOptions& options);

}  // namespace pipewright::sched
