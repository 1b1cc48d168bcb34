// pipewright's discrete-event simulator: times any lowered plan with per-stage costs and a
// cluster description, and reports step time, bubbles, memory, communication and the critical
// path (docs/simulator.md).
//
// Semantics (Note [Engine] in sim/src/engine/engine.hpp has the details):
// - each rank executes its action list in order on a compute stream; F/B/I/W take their
//   stage's cost (+ compute_overhead_ms); F needs the producer's activation (local F, or the
//   RECV_F), B/I need the consumer's gradient (local B/I, or the RECV_B) and their own F, W
//   needs I;
// - SEND_* is non-blocking for compute: it occupies the rank's send stream for the link time;
//   RECV_* blocks the compute stream until the message has arrived;
// - with dp > 1, each stage's gradients are all-reduced in DDP buckets that launch during the
//   last microbatch's backward (on a separate dp-allreduce stream) and overlap remaining compute;
//   REDUCE_GRAD (or the end of the rank's step, when the plan has none) waits for them;
//   LocalSGD / SlowMo replace the per-step all-reduce by periodic parameter averaging.
// - time is integer nanoseconds; the event queue is a binary heap ordered by (time, insertion
//   sequence), so results are bit-for-bit reproducible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipewright/sched/action.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sched/trace.hpp"
#include "pipewright/sim/cluster.hpp"

namespace pipewright::sim {

// The optimizer and the data-parallel algorithm are the job's (sched/job.hpp): one enum each
// for the simulator and the executor.
using sched::DpAlgorithm;
using sched::Optimizer;

struct DataParallelOptions {
  std::int32_t replicas = 1;  // dp
  DpAlgorithm algorithm = DpAlgorithm::kDdp;
  double bucket_cap_mb = 25.0;  // DDP (MiB, as torch's bucket_cap_mb)
  // DDP: buckets start in backward as their gradients are ready; false (--no-ddp-overlap): all
  // start at the stage's REDUCE_GRAD, as the executor runs them (ZeRO overlaps regardless).
  bool overlap = true;
  std::int64_t first_bucket_bytes = 1024 * 1024;
  // Defaults as sched::DataParallelSpec's (fairscale's); sim_options(job) fills them from a job.
  std::int32_t localsgd_frequency = 3;  // LocalSGD / SlowMo: average parameters every N steps
  std::int32_t slowmo_frequency = 48;   // SlowMo: slow-momentum step every N steps
  // SlowMo (memory-efficient): replicas owning a shard of the slow momentum; 0: the executor's
  // default, min(dp, 32). With one shard per replica the slow step is a reduce-scatter and an
  // all-gather of the parameters, else a reduce and a broadcast per shard (Note [SlowMo in the
  // simulator] in sim/src/network/network_model.cpp).
  std::int32_t slowmo_num_shards = 0;
  // DiLoCo / Streaming DiLoCo (Note [DiLoCo step] in exec/src/dp/diloco.hpp): one fragment of
  // param_bytes / fragments is all-reduced every sync_every / fragments steps; its all-reduce
  // starts sync_delay steps before the step that applies it and overlaps their compute.
  std::int32_t sync_every = 100;
  std::int32_t fragments = 1;
  std::int32_t sync_delay = 0;
  bool outer_bf16 = false;  // bf16 on the wire: half the bytes
  // SlowMo's base: kLocalSgd (average every localsgd_frequency steps) or kSgp (every step, each
  // replica sends its parameters to one peer, as --dp-algorithm sgp does).
  DpAlgorithm slowmo_base = DpAlgorithm::kLocalSgd;
  // Element type of gradient reductions on the wire (sched::JobSpec::reduce_dtype, torch
  // MixedPrecision's reduce_dtype): DDP buckets, Chimera's replica all-reduce and DiLoCo's outer
  // all-reduce of pseudo-gradients send element_bytes(reduce_dtype) / 4 of the fp32 gradient
  // bytes. Parameter averaging (LocalSGD, SlowMo, SGP) moves the fp32 master weights.
  sched::Precision reduce_dtype = sched::Precision::kFp32;
  // Sharded data parallelism (issue 43; ddp only; sched::JobSpec::effective_zero_stage()), Note
  // [ZeRO in the simulator] in sim/src/engine/engine_dp.cpp.
  std::int32_t zero_stage = 0;
};

struct SimOptions {
  DataParallelOptions dp;
  Optimizer optimizer = Optimizer::kSgd;
  double momentum = 0.0;   // sgd: a momentum buffer when > 0
  std::int32_t steps = 1;  // consecutive training steps simulated back to back
  // The training step the first simulated step is (0-based): LocalSGD's, SlowMo's and DiLoCo's
  // periodic syncs come after simulated step k when (first_step + k + 1) is a multiple of their
  // frequency, as in the executor. compare simulates each step of a period alone with it.
  std::int64_t first_step = 0;
  std::int64_t micro_batch_size = 0;  // samples per microbatch; 0 = unknown (no throughput)
  bool record_actions = true;         // keep per-action timings (trace, timelines, critical path)
  bool record_memory_timeline = false;
  // false (default, torch's semantics): RECV_* posts the receive and the rank goes on; the
  // compute that consumes the data waits for its arrival. true: RECV_* blocks the compute
  // stream until the data has arrived (an executor with blocking receives).
  bool blocking_recv = false;
  // A message of a fixed duration for every send, overriding cluster and profile (--p2p-ms).
  std::optional<double> p2p_override_ms;
  // Note [Sampled durations]: when set, every F/B/I/W/OPTIM whose stage has measured stats
  // (executor profiles: p10, median, p90) takes a duration drawn from that distribution instead
  // of the median, with a counter-based generator seeded by (seed, step, stage, microbatch,
  // kind), so results stay deterministic. On a noisy host a step's critical path is a max over
  // noisy sums, longer than the same max over medians; simulating several steps with sampled
  // durations and taking the median step time (median_step_ms) predicts it. The draws of one
  // step (and of one rank in it) are correlated as the profile measured (Note [Correlated
  // sampling] in sim/src/costs/duration_model.cpp).
  std::optional<std::uint64_t> sample_durations_seed;
  // Trace-driven replay (Note [Trace-driven replay] in sim/compare.hpp): when not empty, the
  // duration in ns of every compute action of the simulated step(s), at
  // replay_index(stage, kind slot, microbatch, M) (slots F 0, B 1, I 2, W 3, OPTIM 4 at
  // microbatch 0); entries < 0 fall back to the costs. Overrides sampled durations. With shared
  // cores the entries are work at full speed, like the costs.
  std::vector<std::int64_t> replay_durations_ns;
  // Activation recompute of the job (sched::RecomputeSpec, by model stage): a recomputed stage
  // keeps only its inputs from F to its backward, and its B (or I) re-runs the forward first:
  // B and I take forward_ms longer, and during them the stage's full activations of that
  // microbatch are live again (until the end of B, or of W after an I). Note [Recompute] in
  // sched/memory.hpp. Costs are taken as measured without recompute.
  sched::RecomputeSpec recompute;
  // The job's precision (sched::JobSpec::precision): activation memory and p2p message bytes at
  // it, plus autocast's parameter copies (Note [Precision bytes] in sched/memory.hpp). Compute
  // times are the cost table's as given (a profile measured at this precision has its times).
  sched::Precision precision = sched::Precision::kFp32;
};

// The simulator's options for a job: replicas, data-parallel algorithm and its options, steps,
// optimizer, precision and reduce dtype, and the micro-batch size (batch_size / microbatches; 0
// when the job has no batch).
[[nodiscard]] SimOptions sim_options(const sched::JobSpec& job);

inline constexpr int kReplaySlots = 5;
[[nodiscard]] inline std::size_t replay_index(std::int32_t stage, int slot, std::int32_t mb,
                                              std::int32_t microbatches) noexcept {
  return (static_cast<std::size_t>(stage) * kReplaySlots + static_cast<std::size_t>(slot)) *
             static_cast<std::size_t>(microbatches) +
         static_cast<std::size_t>(mb < 0 ? 0 : mb);
}

// The stream a timed action occupies on its rank: the trace schema's streams (one fact for the
// simulator's results and the traces both the simulator and the executor write).
using Stream = sched::TraceStream;

// What a slice on the dp-allreduce stream (or a blocking collective) is.
// kReduceScatter / kAllGather: ZeRO's (Note [ZeRO in the simulator] in engine_dp.cpp).
enum class Collective : std::uint8_t {
  kNone,
  kDdpBucket,
  kLocalSgd,
  kSlowMo,
  kDiLoCo,
  kSgp,
  kReduceScatter,
  kAllGather
};

// One timed action of the plan, or one collective (then action.kind == kReduceGrad,
// action.stage is the stage (DDP) or -1 (LocalSGD / SlowMo over all the rank's stages)).
struct TimedAction {
  sched::Action action;
  std::int32_t rank = 0;
  std::int32_t step = 0;
  Stream stream = Stream::kCompute;
  Collective collective = Collective::kNone;
  std::int32_t bucket = -1;     // DDP bucket index within the stage
  std::int32_t peer_rank = -1;  // sends: the receiving rank; receives: the sending rank
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t match = -1;  // receives: index of the matching send in SimResult::actions
  std::int64_t pred = -1;   // the action whose end determined this one's start (or -1)
};

struct MemoryPoint {
  std::int64_t time_ns = 0;
  std::int64_t bytes = 0;
};

struct RankResult {
  std::int32_t rank = 0;
  std::int64_t finish_ns = 0;      // end of the rank's last action (incl. its DP communication)
  std::int64_t busy_ns = 0;        // compute (F/B/I/W) time
  std::int64_t idle_ns = 0;        // makespan - busy
  std::int64_t send_ns = 0;        // time its send stream was busy
  std::int64_t recv_wait_ns = 0;   // time the compute stream was blocked in RECV_*
  std::int64_t dp_comm_ns = 0;     // DDP / LocalSGD / SlowMo communication (overlapped or not)
  std::int64_t dp_exposed_ns = 0;  // of which the compute stream waited for
  std::int64_t static_memory_bytes = 0;  // params + grads + optimizer state
  // bf16/fp16: autocast's 16-bit parameter copies (Note [Precision bytes] in sched/memory.hpp)
  std::int64_t autocast_cache_bytes = 0;
  std::int64_t peak_activation_bytes = 0;
  std::int32_t peak_activation_microbatches = 0;
  std::int64_t peak_memory_bytes = 0;
  bool exceeds_memory = false;
  std::vector<MemoryPoint> memory_timeline;  // only with record_memory_timeline
};

struct SimResult {
  std::string schedule;
  std::int32_t ranks = 0;
  std::int32_t stages = 0;
  std::int32_t microbatches = 0;
  std::int32_t dp = 1;
  std::int32_t steps = 1;
  std::int64_t micro_batch_size = 0;
  std::int64_t makespan_ns = 0;           // all steps
  std::vector<std::int64_t> step_end_ns;  // per step: when its last rank finished it
  std::int64_t simulated_actions = 0;     // plan actions executed (all ranks, all steps)
  std::int64_t device_memory_bytes = 0;   // from the cluster (0 = unlimited)
  std::vector<RankResult> per_rank;
  // With record_actions: every executed action and collective, in simulation order.
  std::vector<TimedAction> actions;
  std::vector<std::int64_t> critical_path;  // indices into `actions`, first to last
  // Data-parallel bytes one replica (all its pipeline ranks) sends per step, averaged over a
  // period of the algorithm (dp_wire_bytes_per_step in data_parallel.hpp); 0 when dp == 1.
  double dp_wire_bytes_per_step = 0;
  // The same per plan stage under DDP and ZeRO (Note [ZeRO in the simulator]); empty for other
  // algorithms and dp == 1.
  std::vector<double> dp_wire_bytes_per_stage;

  // Model FLOPs utilisation inputs (issue 46), set by the caller that knows the model and the
  // device (the simulator times a plan, not a model): the model FLOPs of one step over all
  // replicas (sim/parallel_model.hpp, model_flops_per_iteration; 0 unknown), the GPUs each
  // rank stands for (the tensor-parallel size) and the device's dense peak, TFLOP/s (0 unknown).
  double model_flops_per_step = 0;
  // Hardware FLOPs: the model FLOPs plus what activation recompute computes again (the FLOPs
  // Megatron-LM 2021's published TFLOP/s count: 96 B s l h^2 (1 + s/6h + V/16lh) with full
  // recompute; parallel_model.hpp, recompute_flops_per_iteration); 0 unknown.
  double hardware_flops_per_step = 0;
  std::int32_t gpus_per_rank = 1;
  double device_peak_tflops = 0;

  [[nodiscard]] double bubble_fraction() const noexcept;
  // Model FLOPs per second per GPU, TFLOP/s, over the amortised step; 0 when unknown.
  [[nodiscard]] double model_tflops_per_gpu() const noexcept;
  // model_tflops_per_gpu / device_peak_tflops; 0 when either is unknown.
  [[nodiscard]] double mfu() const noexcept;
  // Hardware FLOPs (with recompute) per second per GPU, TFLOP/s; 0 when unknown.
  [[nodiscard]] double hardware_tflops_per_gpu() const noexcept;
  // Samples per second over all steps (needs micro_batch_size); 0 when unknown.
  [[nodiscard]] double throughput_samples_per_s() const noexcept;
};

// Simulates `plan`. Throws ConfigError when the costs, cluster and options do not match the plan
// (naming the field), InvalidPlanError for malformed plans (naming rank, position and action) and
// for plans that deadlock (naming every blocked rank and what it waits for).
// Plans with stage replicas (Chimera; PlanShape::stage_to_model_stage) take costs either per plan
// stage or per model stage; the latter are expanded with replica_costs().
[[nodiscard]] SimResult simulate(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                 const Cluster& cluster, const SimOptions& options);

// Costs per model stage -> costs per plan stage (each replica gets its model stage's costs);
// `costs` unchanged when it already has a cost per plan stage or the plan has no replicas.
[[nodiscard]] sched::CostTable replica_costs(const sched::CostTable& costs,
                                             const sched::PlanShape& shape);

// The median step time (ms) of `steps` consecutive simulated steps (step k lasts from the end of
// step k-1 to its own end; the first from 0), with sampled durations (Note [Sampled durations],
// seed `seed`) when the costs carry stats, else the plain simulation's step time.
[[nodiscard]] double median_step_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                    const Cluster& cluster, SimOptions options, std::int32_t steps,
                                    std::uint64_t seed = 1);

// Note [Replica skew]: the simulator runs one replica and counts the others as copies of it, in
// lockstep; measured replicas are not. Each replica's step varies with the noise of its own
// actions, and every step ends with the loss all-reduce over all ranks (and DDP/ZeRO wait for
// the slowest replica's gradients), so a step lasts as long as its slowest replica's: the
// expected step is E[max over d replicas], longer than one replica's E[step]. On bench/
// fidelity.sh's loopback cells (pp 2 x dp 2 on 2 cores) the replicas finished their compute
// 4-11 ms apart on average with LocalSGD, SlowMo, SGP and DiLoCo (they sync at most once a
// step) and 0.2-0.9 ms apart with DDP and ZeRO-1 (after their gradient collectives, which
// had already waited), against steps of 65-100 ms; the predictions were 5-10% short.
// replica_skew_ms estimates E[max] - E[one] from `draws` x d independent single steps with
// sampled durations (Note [Sampled durations]), each on dedicated cores: the spread of the
// measured durations (on an oversubscribed host, mostly its time slices) is what sets replicas
// apart; the processor sharing that the headline prediction models is the same for every
// replica. 0 with dp 1 or without measured distributions. compare and `simulate
// --sampled-steps` add it to the predicted step.
[[nodiscard]] double replica_skew_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                     const Cluster& cluster, SimOptions options, std::int32_t draws,
                                     std::uint64_t seed = 1);

// Note [One prediction]: the recorded simulation of the median step of median_step_ms's draws
// (the lower middle one when `steps` is even), so that a step time, the per-rank and per-action
// lines and the pictures all come from one simulated step. `options.steps` is set to 1;
// record_actions is kept as given.
[[nodiscard]] SimResult median_sampled_step(const sched::LoweredPlan& plan,
                                            const sched::CostTable& costs, const Cluster& cluster,
                                            SimOptions options, std::int32_t steps,
                                            std::uint64_t seed = 1);

}  // namespace pipewright::sim
