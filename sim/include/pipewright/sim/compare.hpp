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

struct RankComparison {
  std::int32_t rank = 0;
  double predicted_busy_ms = 0;
  double measured_busy_ms = 0;
  double predicted_idle_ms = 0;
  double measured_idle_ms = 0;
  std::optional<std::int64_t> predicted_peak_bytes;
  std::optional<std::int64_t> measured_peak_bytes;
};

struct CompareReport {
  std::string schedule;
  std::int32_t ranks = 0;
  std::int32_t steps_used = 0;
  double predicted_step_ms = 0;
  double measured_step_ms = 0;                        // median over the steps used
  [[nodiscard]] double step_error() const noexcept {  // signed, relative to measured
    return measured_step_ms > 0 ? (predicted_step_ms - measured_step_ms) / measured_step_ms : 0;
  }
  std::vector<RankComparison> per_rank;
  std::vector<ActionComparison> largest;  // by |end error|, largest first (top_k)
  std::int64_t matched_actions = 0;
};

// Compares one simulated step with the measured trace. Throws ConfigError naming the mismatch
// when the trace does not belong to the plan (rank count, a compute action of the plan missing
// from the trace on some step, or a measured compute action the plan does not have). `costs`
// may carry measured peak memory (executor profiles); predicted peaks come from `predicted`.
[[nodiscard]] CompareReport compare(const SimResult& predicted, const sched::Trace& measured,
                                    const sched::CostTable* costs, const CompareOptions& options);

// Replay costs taken from the measured trace itself: per stage, the median F, B, I and W
// durations over the steps kept (used by `compare` when no --profile is given). Byte sizes are
// zero (the trace has none). Throws ConfigError when a stage of the plan never ran.
[[nodiscard]] sched::CostTable costs_from_trace(const sched::Trace& measured, std::int32_t stages,
                                                const CompareOptions& options);

[[nodiscard]] std::string to_json(const CompareReport& report);
[[nodiscard]] std::string to_text(const CompareReport& report);

// The measured trace's step `step` as a SimResult (compute and send slices only), so that it can
// be drawn with the simulator's own timeline renderer.
[[nodiscard]] SimResult measured_as_result(const sched::Trace& measured, std::int64_t step);

// One SVG: the predicted timeline above the measured one (the median step's timeline is drawn
// for the measured side: the step whose duration is closest to the median).
[[nodiscard]] std::string compare_svg(const SimResult& predicted, const sched::Trace& measured,
                                      const CompareReport& report);

}  // namespace pipewright::sim
