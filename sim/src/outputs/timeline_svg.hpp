// The SVG Gantt timeline as a panel that other pictures (compare, the HTML report) embed.
// Private to pw_sim; report.hpp's svg_timeline wraps one panel in an <svg> document.
#pragma once

#include <cstdint>
#include <string>

#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

struct TimelineOptions {
  std::string title;         // empty: the schedule and its figures
  std::int64_t span_ns = 0;  // time axis length; 0: the result's makespan
  double width_px = 0;       // 0: from the plan's length (Note [Timeline width])
  bool legend = true;
  std::string id_prefix = "t";  // prefix of the SVG ids (patterns, markers): unique per page
};

struct TimelinePanel {
  std::string body;  // SVG elements (no <svg> element), origin at (0, 0)
  std::string defs;  // what goes into <defs> (patterns, markers)
  double width = 0;
  double height = 0;
};

// Note [Timeline width]: the plot is wide enough that the shortest compute action gets ~40 px
// (room for its label "F12"), between 900 and 4800 px in all.
[[nodiscard]] double timeline_width(const SimResult& result, std::int64_t span_ns);

[[nodiscard]] TimelinePanel timeline_panel(const SimResult& result, const TimelineOptions& options);

// The panel as a standalone SVG document.
[[nodiscard]] std::string svg_document(const TimelinePanel& panel);

}  // namespace pipewright::sim
