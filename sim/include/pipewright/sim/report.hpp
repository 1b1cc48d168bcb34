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

// Chrome Trace Event JSON (needs record_actions), sched/trace.hpp's schema. `plan` describes the
// plan for otherData. With dp > 1 the replicas are drawn as world ranks replica x pp + rank (at
// most 8 replicas), their all-reduces joined by "dp" flows (Note [Replicas in the simulated
// trace]).
[[nodiscard]] std::string trace_json(const SimResult& result, const std::string& plan);

// SVG Gantt chart (Note [Timeline picture] in sim/src/outputs/timeline_svg.cpp): one lane per rank,
// every compute action its own labelled rectangle with a <title> tooltip, a hue per stage and a
// lightness / hatching per kind, messages as arrows between lanes, the critical path outlined,
// idle time as the grey background, axis in ms; the width follows the plan's length.
[[nodiscard]] std::string svg_timeline(const SimResult& result);

// Memory over time, one chart per rank on shared axes (needs record_memory_timeline for the
// curve; the static memory and the peaks are drawn in any case).
[[nodiscard]] std::string svg_memory(const SimResult& result);

struct CompareReport;  // compare.hpp

// What an HTML report shows besides the simulation.
struct HtmlReportInputs {
  std::string title;                       // e.g. the plan's description
  const CompareReport* compare = nullptr;  // predicted vs measured (pipewright compare)
  const SimResult* measured = nullptr;     // the measured step drawn as a timeline
};

// One self-contained HTML page (no network: inline SVG and style, a few lines of script):
// summary table in human units, timeline(s), busy/idle per rank, memory over time, the critical
// path, and with `compare` the predicted and measured figures side by side. Needs record_actions
// (and record_memory_timeline for the memory curves).
[[nodiscard]] std::string html_report(const SimResult& result, const HtmlReportInputs& inputs);

// `width` columns per rank: F/B/I/W for the kind covering most of the column, '.' idle.
[[nodiscard]] std::string text_timeline(const SimResult& result, int width = 100);

}  // namespace pipewright::sim
