// Predicted versus measured: lines up a simulated step (SimResult) with an executor trace
// (sched/trace.hpp schema) per rank and action, and reports the step-time error, per-rank
// busy/idle error, the actions with the largest error and the peak-memory error.
//
// Measured times are taken per training step and reduced with the median over the steps kept
// (the first `skip_steps` are warm-up), so one noisy step does not decide the result. Within a
// step, times are relative to the step's first measured slice on any rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/trace.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

struct CompareOptions {
  std::int32_t skip_steps = 1;  // warm-up steps ignored (only when more steps remain)
  std::int32_t top_k = 10;      // how many largest-error actions to report
};

struct ActionComparison {
  std::int32_t rank = 0;
  std::string name;  // "1F3"
  double predicted_start_ms = 0;
  double measured_start_ms = 0;  // median over steps, relative to the step start
  double predicted_ms = 0;
  double measured_ms = 0;  // median duration over steps
  [[nodiscard]] double end_error_ms() const noexcept {
    return (predicted_start_ms + predicted_ms) - (measured_start_ms + measured_ms);
  }
};

// One world rank of the measured run: rank = replica x pp + pipeline rank (the executor's
// replica-major order, Note [Replicas in the simulated trace]); its predicted side is its
// pipeline rank's (the simulator times one replica).
struct RankComparison {
  std::int32_t rank = 0;  // world rank
  std::int32_t replica = 0;
  double predicted_busy_ms = 0;
  double measured_busy_ms = 0;
  double predicted_idle_ms = 0;
  double measured_idle_ms = 0;
  std::optional<std::int64_t> predicted_peak_bytes;
  std::optional<std::int64_t> measured_peak_bytes;
};

// Note [Data-parallel comparison]: with dp > 1, each world rank's data-parallel communication per
// step, predicted and measured. Predicted: a simulation of one period of the algorithm (the steps
// after which its communication repeats: DDP and SGP 1, LocalSGD its frequency, SlowMo the lcm
// of both frequencies, DiLoCo sync_every) with median costs, divided by the period: the bytes the
// rank sends (DataParallelStats' wire-byte convention), the collectives' time (overlapped or not)
// and the part of it the rank's compute waited for (exposed). Measured: the profile's
// data_parallel entry of the rank (exec's DataParallelStats across each measured step, averaged):
// wire bytes and the time the training thread blocked on data-parallel communication. Both are
// means per step, so a run of warm-up + k periods of steps compares like with like.
struct DpComparison {
  std::int32_t rank = 0;  // world rank
  std::int32_t replica = 0;
  std::vector<std::int32_t> stages;  // the plan stages the rank holds
  double predicted_wire_bytes = 0;
  double predicted_comm_ms = 0;
  double predicted_exposed_ms = 0;
  std::optional<double> measured_wire_bytes;  // absent without a profile entry for the rank
  std::optional<double> measured_exposed_ms;
  std::optional<double> measured_collectives;
};

struct CompareReport {
  std::string schedule;
  std::int32_t ranks = 0;     // pipeline ranks of the plan
  std::int32_t replicas = 1;  // dp: the measured trace has ranks x replicas world ranks
  std::string dp_algorithm;   // with replicas > 1: "ddp", "localsgd", ... (and "zero-1" ...)
  std::int32_t dp_period_steps = 0;
  std::int32_t steps_used = 0;
  double predicted_step_ms = 0;
  // Median over the steps used; with a periodic data-parallel algorithm the mean over whole
  // periods (Note [Periodic syncs in compare]).
  double measured_step_ms = 0;
  [[nodiscard]] double step_error() const noexcept {  // signed, relative to measured
    return measured_step_ms > 0 ? (predicted_step_ms - measured_step_ms) / measured_step_ms : 0;
  }
  std::vector<RankComparison> per_rank;     // every world rank
  std::vector<DpComparison> data_parallel;  // every world rank, with replicas > 1
  std::vector<ActionComparison> largest;    // by |end error|, largest first (top_k)
  std::int64_t matched_actions = 0;
  // How predicted_step_ms was made: "medians", "sampled" (median of steps with sampled
  // durations) or "trace" (Note [Trace-driven replay]; then per step, in step order, both times).
  std::string prediction = "medians";
  // The steps used, in step order, and their measured times (every comparison); the predicted
  // ones only with trace-driven replay.
  std::vector<std::int64_t> step_numbers;
  std::vector<double> per_step_predicted_ms;
  std::vector<double> per_step_measured_ms;
  // Mean of |predicted - measured| / measured over the steps (trace-driven replay), or 0.
  [[nodiscard]] double per_step_mape() const noexcept;
};

// Note [Trace-driven replay]: the profile replay predicts a step from per-kind distributions
// pooled over the run, so how fast this shared host happened to be during each step (it drifts
// by tens of percent within a run here) is part of its error. A trace-driven replay (as Lumos and
// dPRO do) takes every compute action's own measured duration in each measured step (F, B, I, W
// and OPTIM; wall time, or with shared cores the dedicated-core work recovered from it as in
// Note [Shared cores in profiles], exec/src/report/run_report.hpp) and simulates that step alone
// with the profile's communication costs; its error is the error of the simulator's dependency,
// communication and core-sharing model, not of the host's drift. compare reports the median
// predicted step against the median measured step, and the per-step errors.
struct TraceReplay {
  std::vector<std::int64_t> steps;       // the kept measured steps
  std::vector<double> measured_step_ms;  // their durations
  std::int32_t replicas = 1;             // data-parallel replicas in the trace
  // Per kept step and replica (index step x replicas + replica): SimOptions::replay_durations_ns
  // for a plan of `stages` x `microbatches`. With replicas > 1 a step is predicted as its slowest
  // replica's replay (the replicas meet in their collectives).
  std::vector<std::vector<std::int64_t>> durations_ns;
};

// The kept steps of `measured` as replay tables. `cores` > 0 with more of the trace's ranks on
// one node (`node_of_rank`, by world rank) than cores: durations are converted to dedicated-core
// work. `replicas` > 1: world rank w belongs to replica w / (node_of_rank.size() / replicas).
// Throws ConfigError when node_of_rank is not empty and its size (the plan's ranks x replicas) is
// not the trace's rank count, and naming the slice when the trace has a stage or microbatch the
// plan has not.
[[nodiscard]] TraceReplay replay_from_trace(const sched::Trace& measured, std::int32_t stages,
                                            std::int32_t microbatches, std::int32_t cores,
                                            const std::vector<std::int32_t>& node_of_rank,
                                            const CompareOptions& options,
                                            std::int32_t replicas = 1);

// Compares one simulated step with the measured trace. With predicted.dp = D > 1 the trace holds
// D replicas of the plan's ranks (world rank = replica x ranks + pipeline rank), each compared
// with the predicted pipeline. Throws ConfigError naming the mismatch when the trace does not
// belong to the plan (rank count, a compute action of the plan missing from the trace on some
// step and rank, or a measured compute action the plan does not have). `costs`
// may carry measured peak memory (executor profiles); predicted peaks come from `predicted`.
[[nodiscard]] CompareReport compare(const SimResult& predicted, const sched::Trace& measured,
                                    const sched::CostTable* costs, const CompareOptions& options);

// Note [Trace-driven replay], end to end: every kept step of `measured` simulated alone (one
// step, `options` otherwise) with its replay table; the report's predicted_step_ms is the median
// of those steps, its per-step fields are filled, and its per-rank / per-action lines come from
// `predicted`, the recorded replay of the median predicted step (Note [One prediction]; the lower
// middle one for an even count), whose time is predicted_step_ms.
struct TraceReplayComparison {
  SimResult predicted;
  CompareReport report;
};
[[nodiscard]] TraceReplayComparison compare_trace_replay(
    const sched::LoweredPlan& plan, const sched::CostTable& costs, const Cluster& cluster,
    const SimOptions& options, const sched::Trace& measured, const CompareOptions& compare_options);

// Note [One prediction]: `compare` prints a step-time error, per-rank and per-action lines and an
// SVG; all of them come from one recorded simulated step. With `sampled_steps` > 0 it is the
// median step of that many draws with sampled durations (median_sampled_step), else the plain
// simulation with median costs; the report's predicted_step_ms is that step's end.
struct SampledComparison {
  SimResult predicted;
  CompareReport report;
};
[[nodiscard]] SampledComparison compare_sampled(const sched::LoweredPlan& plan,
                                                const sched::CostTable& costs,
                                                const Cluster& cluster, const SimOptions& options,
                                                std::int32_t sampled_steps,
                                                const sched::Trace& measured,
                                                const CompareOptions& compare_options);

// Replay costs taken from the measured trace itself: per stage, the median F, B, I and W
// durations over the steps kept (used by `compare` when no --profile is given). Byte sizes are
// zero (the trace has none). Throws ConfigError when a stage of the plan never ran.
[[nodiscard]] sched::CostTable costs_from_trace(const sched::Trace& measured, std::int32_t stages,
                                                const CompareOptions& options);

// The steps after which the data-parallel algorithm's communication repeats (1 for DDP and SGP;
// LocalSGD its frequency, SlowMo the lcm of its two, DiLoCo sync_every; at most 512).
[[nodiscard]] std::int32_t dp_period_steps(const DataParallelOptions& options);
// Note [Periodic syncs in compare] (data_parallel_compare.cpp): what the periodic syncs of
// LocalSGD, SlowMo and DiLoCo add to a step on average over a period, in ms: the mean over the
// period's steps, each simulated alone with median costs as training step first_step + k, of its
// time minus that of step first_step alone (DiLoCo with a sync delay: the period back to back).
// 0 with one replica or a period of 1. `simulate --sampled-steps` and compare add it to their step.
[[nodiscard]] double periodic_sync_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                                      const Cluster& cluster, const SimOptions& options);

// Note [Data-parallel comparison]: fills report.data_parallel, dp_algorithm and dp_period_steps
// (nothing when options.dp.replicas <= 1). compare_sampled and compare_trace_replay call it.
void add_data_parallel(CompareReport& report, const sched::LoweredPlan& plan,
                       const sched::CostTable& costs, const Cluster& cluster,
                       const SimOptions& options);

[[nodiscard]] std::string to_json(const CompareReport& report);
[[nodiscard]] std::string to_text(const CompareReport& report);

// The measured trace's step `step` as a SimResult (compute and send slices only), so that it can
// be drawn with the simulator's own timeline renderer.
[[nodiscard]] SimResult measured_as_result(const sched::Trace& measured, std::int64_t step);

// The measured step whose duration is closest to the report's median, as a SimResult.
[[nodiscard]] SimResult measured_median_step(const sched::Trace& measured,
                                             const CompareReport& report);

// One SVG: the predicted timeline above the measured one (the median step's timeline is drawn
// for the measured side: the step whose duration is closest to the median).
[[nodiscard]] std::string compare_svg(const SimResult& predicted, const sched::Trace& measured,
                                      const CompareReport& report);

}  // namespace pipewright::sim
