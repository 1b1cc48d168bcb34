// Outputs of a simulation: metrics JSON, the Chrome/Perfetto trace (sched/trace.hpp schema), an
// SVG Gantt timeline and a compact text timeline. All are deterministic functions of the
// SimResult (same result -> same bytes).
#pragma once

#include <string>

#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// Trace/timeline name of a timed action: the plan action's text ("1F3", "0SEND_F2"), or for
// collectives "2ALLREDUCE_B0" (stage 2, DDP bucket 0), "LOCALSGD", "SLOWMO".
[[nodiscard]] std::string action_name(const TimedAction& action);
// Category: "F", "B", "I", "W", "SEND_F", ..., "ALLREDUCE", "LOCALSGD", "SLOWMO".
[[nodiscard]] std::string action_category(const TimedAction& action);

// {"format": "pipewright-sim-metrics", "version": 1, "makespan_ms", "bubble_fraction",
//  "ranks": [{rank, busy_ms, idle_ms, peak_memory_bytes, ...}], "communication": {...},
//  "throughput_samples_per_s", "critical_path": [...], ...}; docs/simulator.md lists every field.
[[nodiscard]] std::string metrics_json(const SimResult& result);

// Chrome Trace Event JSON (needs record_actions). `plan` describes the plan for otherData.
[[nodiscard]] std::string trace_json(const SimResult& result, const std::string& plan);

// SVG Gantt chart: one row per rank, F/B/I/W coloured, sends and DP collectives in a thin band
// under the compute row, idle time (bubbles) visible as the grey background, axis in ms.
[[nodiscard]] std::string svg_timeline(const SimResult& result);

// `width` columns per rank: F/B/I/W for the kind covering most of the column, '.' idle.
[[nodiscard]] std::string text_timeline(const SimResult& result, int width = 100);

}  // namespace pipewright::sim
