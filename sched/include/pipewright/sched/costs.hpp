// The per-stage cost table, which is also the executor's profile format.
//
// The executor (`pipewright run --profile F`) measures each stage and writes a CostTable with
// to_json(); the simulator (`pipewright simulate --profile F`) reads it with load_costs(). The
// simulator also builds CostTables from command-line what-if costs, and both build them from
// graph/ partitions (costs_from_partition), so every cost input ends up in this one type.
//
// JSON form (docs/simulator.md has the full description):
//   {"format": "pipewright-profile", "version": 1, "source": "executor", "precision": "bf16",
//    "compute_overhead_ms": 0, "comm_overhead_ms": 0.3, "runtime_memory_bytes": 0,
//    "comm_send_ms": 0.1, "dp_sync_compute_ms": 0.5,                     (optional)
//    "step_overhead_ms": 0.6,                                           (optional)
//    "cores_per_node": 2, "p2p_uses_core": true, "nodes": 1,             (optional)
//    "stages": [{"stage": 0, "forward_ms": 1.5, "backward_ms": 3.0,
//                "input_grad_ms": 1.5, "weight_grad_ms": 1.5,          (optional)
//                "optimizer_ms": 0.4,                                   (optional)
//                "param_bytes": 4096, "activation_bytes": 1024, "output_bytes": 256,
//                "param_sizes_bytes": [2048, 2048],                     (optional)
//                "stats": {"forward": {"median_ms": 1.5, "p10_ms": 1.4,
//                                      "p90_ms": 1.7, "samples": 32,
//                                      "quantiles_ms": [21 values]}}}],    (optional)
//    "p2p": {"latency_ms": 0.01, "bandwidth_gb_per_s": 10} or {"per_message_ms": 0.2,
//            "stats": {...}, "send_call": {...}},                       (stats optional)
//    "peak_memory": [{"rank": 0, "peak_bytes": 123456}],                (optional)
//    "data_parallel": [{"rank": 0, "steps": 4, "collectives_per_step": 2,
//                       "payload_bytes_per_step": 8192, "wire_bytes_per_step": 8192,
//                       "exposed_ms_per_step": 0.4}]}                     (optional)
// Times are milliseconds (double), sizes are bytes (integer), bandwidth is 1e9 bytes/s.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/sched/training.hpp"

namespace pipewright::graph {
struct Model;
struct Partition;
}  // namespace pipewright::graph

namespace pipewright::sched {

inline constexpr std::string_view kProfileFormat = "pipewright-profile";
inline constexpr int kProfileVersion = 1;

// A measured distribution of one action kind's duration on one stage.
struct KindStats {
  double median_ms = 0;
  double p10_ms = 0;
  double p90_ms = 0;
  std::int64_t samples = 0;
  // Optional empirical quantile function: the 0%, 5%, ..., 100% quantiles (21 values,
  // ascending; the first is the minimum, the last the maximum). Sampled simulation draws from it
  // when present (sim: Note [Sampled durations]), else from p10/median/p90.
  std::vector<double> quantiles_ms;
  // Optional mean of the samples. The simulator uses means instead of samples when ranks share
  // cores (sim: Note [Shared cores]); without it, the mean of the quantile function.
  std::optional<double> mean_ms;
  // mean_ms, else the trapezoid mean of quantiles_ms, else the median.
  [[nodiscard]] double mean_or_estimate_ms() const noexcept;
  // The same distribution with every time multiplied by r (samples unchanged).
  [[nodiscard]] KindStats scaled(double r) const;
  friend bool operator==(const KindStats& a, const KindStats& b) noexcept {
    return a.median_ms == b.median_ms && a.p10_ms == b.p10_ms && a.p90_ms == b.p90_ms &&
           a.samples == b.samples && a.quantiles_ms == b.quantiles_ms && a.mean_ms == b.mean_ms;
  }
};

struct StageCost {
  std::int32_t stage = 0;
  double forward_ms = 0;   // F, per microbatch
  double backward_ms = 0;  // B (input + weight gradients), per microbatch
  // Split backward (zero-bubble plans). When absent, I costs backward_ms / 2 and W the rest.
  std::optional<double> input_grad_ms;
  std::optional<double> weight_grad_ms;
  // The stage's optimizer step (OPTIM), once per training step; absent = free.
  std::optional<double> optimizer_ms;
  std::int64_t param_bytes = 0;       // all trainable parameters of the stage
  std::int64_t activation_bytes = 0;  // kept from F until B (or W), per microbatch
  // The part of activation_bytes that autocast keeps in fp32 (Note [Autocast bytes] in
  // graph/model.hpp): model tables sum it over the stage's nodes; a profile measured at its own
  // precision needs none (0).
  std::int64_t activation_fp32_bytes = 0;
  std::int64_t output_bytes = 0;  // activation crossing each outgoing cut, per microbatch
  // Note [Weight-gradient activation] (memory.hpp): the share of activation_bytes a microbatch
  // still holds from the end of its I to the end of its W (what W reads). Absent: 1, all of it.
  std::optional<double> weight_grad_keeps;
  // Parameter sizes in registration order (DDP bucketing). Empty: one tensor of param_bytes.
  std::vector<std::int64_t> param_sizes_bytes;
  // Measured distributions (executor profiles only).
  std::optional<KindStats> forward_stats;
  std::optional<KindStats> backward_stats;
  std::optional<KindStats> input_grad_stats;
  std::optional<KindStats> weight_grad_stats;
  std::optional<KindStats> optimizer_stats;

  // I and W costs with the documented default split.
  [[nodiscard]] double input_grad_or_default_ms() const noexcept {
    return input_grad_ms ? *input_grad_ms : backward_ms / 2;
  }
  [[nodiscard]] double weight_grad_or_default_ms() const noexcept {
    return weight_grad_ms ? *weight_grad_ms : backward_ms - input_grad_or_default_ms();
  }
  friend bool operator==(const StageCost& a, const StageCost& b) noexcept {
    return a.stage == b.stage && a.forward_ms == b.forward_ms && a.backward_ms == b.backward_ms &&
           a.input_grad_ms == b.input_grad_ms && a.weight_grad_ms == b.weight_grad_ms &&
           a.optimizer_ms == b.optimizer_ms && a.optimizer_stats == b.optimizer_stats &&
           a.param_bytes == b.param_bytes && a.activation_bytes == b.activation_bytes &&
           a.activation_fp32_bytes == b.activation_fp32_bytes && a.output_bytes == b.output_bytes &&
           a.weight_grad_keeps == b.weight_grad_keeps &&
           a.param_sizes_bytes == b.param_sizes_bytes && a.forward_stats == b.forward_stats &&
           a.backward_stats == b.backward_stats && a.input_grad_stats == b.input_grad_stats &&
           a.weight_grad_stats == b.weight_grad_stats;
  }
};

// Measured point-to-point cost: either latency + bytes / bandwidth, or a fixed time per message
// (per_message_ms wins when both are given).
struct P2PCost {
  double latency_ms = 0;
  double bandwidth_gb_per_s = 0;  // 1e9 bytes/s; 0 means "no bandwidth term"
  std::optional<double> per_message_ms;
  // Measured distribution of the message time (executor profiles; with per_message_ms).
  std::optional<KindStats> stats;
  // Measured on the same network (executor profiles): per SEND, how long the sender's training
  // thread stayed inside the transport's send call (JSON "send_call"). The simulator charges a
  // draw of it on the sender's compute stream after each SEND whose message the per-message cost
  // prices (sim: Note [Send calls] in engine.hpp); it goes with that cost, not with a cluster.
  std::optional<KindStats> send_call_stats;
  friend bool operator==(const P2PCost& a, const P2PCost& b) noexcept {
    return a.latency_ms == b.latency_ms && a.bandwidth_gb_per_s == b.bandwidth_gb_per_s &&
           a.per_message_ms == b.per_message_ms && a.stats == b.stats &&
           a.send_call_stats == b.send_call_stats;
  }
};

struct RankPeakMemory {
  std::int32_t rank = 0;
  std::int64_t peak_bytes = 0;
  friend bool operator==(const RankPeakMemory& a, const RankPeakMemory& b) noexcept {
    return a.rank == b.rank && a.peak_bytes == b.peak_bytes;
  }
};

// Measured data-parallel communication of one world rank (executor profiles of runs with
// dp > 1): means per step over the `steps` measured steps (after warm-up), so that algorithms
// that communicate every k steps (LocalSGD, SlowMo, DiLoCo) show their amortised cost. Bytes as
// exec's DataParallelStats counts them (payload: the buffers handed to collectives; wire: what
// the rank puts on the network with ring / rooted algorithms); exposed: the time the rank's
// training thread blocked waiting for data-parallel communication.
struct RankDataParallel {
  std::int32_t rank = 0;
  std::int64_t steps = 0;
  double collectives_per_step = 0;
  double payload_bytes_per_step = 0;
  double wire_bytes_per_step = 0;
  double exposed_ms_per_step = 0;
  friend bool operator==(const RankDataParallel& a, const RankDataParallel& b) noexcept {
    return a.rank == b.rank && a.steps == b.steps &&
           a.collectives_per_step == b.collectives_per_step &&
           a.payload_bytes_per_step == b.payload_bytes_per_step &&
           a.wire_bytes_per_step == b.wire_bytes_per_step &&
           a.exposed_ms_per_step == b.exposed_ms_per_step;
  }
};

struct CostTable {
  std::string source = "custom";  // "executor", "model", "cli", "custom"
  // The precision (`run --precision`) whose run the times and the activation and message bytes
  // describe: executor profiles record the run's (JSON key "precision"; files without it are
  // fp32); model estimates and what-if numbers are fp32. Parameter bytes are always the fp32
  // master weights'. Note [Precision bytes] in sched/memory.hpp.
  Precision precision = Precision::kFp32;
  // Fixed overhead added to every compute action (launch, Python-free dispatch...), ms.
  double compute_overhead_ms = 0;
  // Compute-stream time of posting and completing one batch of point-to-point operations (a
  // rank's consecutive SEND/RECV actions, which the executor posts together), even when the data
  // is already there: ms per batch. Executor profiles measure it (Note [Comm overhead] in
  // exec/src/report/run_profile.cpp).
  double comm_overhead_ms = 0;
  // Measured, informational (simulate prices transfers from p2p or the cluster): the median time
  // per batch of comm_overhead_ms's batches that their SENDs spent inside the transport's send
  // calls, i.e. waiting for the measured network; taken out of comm_overhead_ms (Note [Comm
  // overhead] in exec/src/report/run_profile.cpp). ms per batch.
  double comm_send_ms = 0;
  // The local work of a data-parallel algorithm's synchronisation after the last OPTIM (SGP's
  // gossip, LocalSGD / SlowMo averaging, DiLoCo's outer step) without its collectives' waits:
  // ms per step in which it communicates; the simulator charges it on the compute stream there.
  // Executor profiles measure it (Note [Data-parallel sync work] in run_profile.cpp).
  double dp_sync_compute_ms = 0;
  // Between two training steps, after every rank's last action: the executor's loss all-reduce
  // over all ranks (the step's barrier) and its bookkeeping, ms per step. The simulator adds it
  // to each rank's step after its last action; data-parallel communication still in flight runs
  // on meanwhile (Note [Between steps] in sim/src/engine/engine_dp.cpp). Executor profiles
  // measure it (Note [Step overhead] in exec/src/report/run_profile.cpp).
  double step_overhead_ms = 0;
  // Memory every rank holds besides the model state and activations (runtime libraries,
  // allocator caches, data), bytes; the simulator adds it to each rank's predicted peak.
  // Executor profiles measure it (Note [Runtime memory] in exec/src/report/run_report.hpp).
  std::int64_t runtime_memory_bytes = 0;
  // CPU cores the measured node's ranks shared when they were more than the cores (0: every
  // rank had its own device or cores). The compute times are then dedicated-core times
  // recovered from the shared ones, and the simulator shares this many cores between a node's
  // ranks unless the cluster says otherwise (Note [Shared cores] in
  // sim/src/network/core_sharing.hpp).
  std::int32_t cores_per_node = 0;
  // With shared cores: whether a point-to-point transfer needs a core of the host for its
  // duration (true: a progress thread moves the bytes, as Gloo's I/O threads do) or is a delay
  // only (false: the ranks' own polls make progress, as with Open MPI; their waiting is in the
  // measured times already). Executor profiles record it per backend (Note [Shared cores]).
  bool p2p_uses_core = true;
  // How many nodes (launch --nnodes: hosts or network namespaces, each with its own network
  // stack) the measured run's ranks spanned; 0: not known (profiles of earlier versions, and
  // tables not measured). A profile measured on one node holds no inter-node traffic in its
  // compute times, so the simulator slows its compute beside the cluster's inter-node collectives
  // (Note [Compute beside a collective] in sim/src/engine/engine.hpp); one measured across nodes
  // holds it already.
  std::int32_t nodes = 0;
  // How much of the spread of measured compute times is shared by the actions of one step
  // (step_correlation, all ranks: the host's speed during that step) and of one rank in one
  // step (rank_step_correlation >= step_correlation: that process's speed), as fractions of
  // the variance of log(duration / its kind's and stage's median), in [0, 1]. Sampled
  // simulation draws correlated durations with them (Note [Correlated sampling] in
  // sim/src/costs/duration_model.cpp); 0 and 0: independent draws. Executor profiles measure them.
  double step_correlation = 0;
  double rank_step_correlation = 0;
  std::vector<StageCost> stages;  // stages[i].stage == i
  std::optional<P2PCost> p2p;
  std::vector<RankPeakMemory> peak_memory;      // measured, executor profiles only
  std::vector<RankDataParallel> data_parallel;  // measured, executor profiles with dp > 1

  friend bool operator==(const CostTable& a, const CostTable& b) noexcept {
    return a.source == b.source && a.precision == b.precision &&
           a.compute_overhead_ms == b.compute_overhead_ms &&
           a.comm_overhead_ms == b.comm_overhead_ms && a.comm_send_ms == b.comm_send_ms &&
           a.dp_sync_compute_ms == b.dp_sync_compute_ms &&
           a.step_overhead_ms == b.step_overhead_ms &&
           a.runtime_memory_bytes == b.runtime_memory_bytes &&
           a.cores_per_node == b.cores_per_node && a.p2p_uses_core == b.p2p_uses_core &&
           a.nodes == b.nodes && a.step_correlation == b.step_correlation &&
           a.rank_step_correlation == b.rank_step_correlation && a.stages == b.stages &&
           a.p2p == b.p2p && a.peak_memory == b.peak_memory && a.data_parallel == b.data_parallel;
  }
};

// Checks the invariants (stage ids 0..n-1 in order, finite non-negative numbers). Throws
// ParseError naming `origin` and the JSON pointer of the offending field.
void validate(const CostTable& table, std::string_view origin = "cost table");

// Parses the JSON text; `origin` (a file name) is used in error messages.
[[nodiscard]] CostTable parse_costs(std::string_view json_text, std::string_view origin);
// Reads a profile file. Throws ParseError (naming the file and field) or InputError.
[[nodiscard]] CostTable load_costs(const std::string& path);
// Deterministic JSON (sorted keys, two-space indent, trailing newline).
[[nodiscard]] std::string to_json(const CostTable& table);

// Refuses a profile file measured at another precision than the job's: its compute times and
// activation bytes belong to that precision (a file without "precision" is fp32). Throws
// ConfigError naming `origin` (the profile file) and both precisions. Commands call it on every
// profile they read; model estimates and what-if numbers are not profiles and are scaled instead
// (Note [Precision bytes] in sched/memory.hpp).
void check_profile_precision(const CostTable& table, std::string_view origin, Precision job);

// Stage costs of a partition (the model's estimates): StageInfo sums, plus per-node parameter
// sizes (registration order = node order within the stage) for DDP bucketing. One stage per
// partition (model) stage. Throws InvalidGraphError when the partition was not made for `model`.
[[nodiscard]] CostTable costs_from_partition(const graph::Model& model,
                                             const graph::Partition& partition);

}  // namespace pipewright::sched
