// The memory-over-time chart as a panel that the HTML report embeds. Private to pw_sim.
#pragma once

#include <string>

#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

struct MemoryPanel {
  std::string body;  // SVG elements, origin at (0, 0)
  double width = 0;
  double height = 0;
};

// Needs SimOptions::record_memory_timeline (else only the static memory and peaks are drawn).
[[nodiscard]] MemoryPanel memory_panel(const SimResult& result, double width);

}  // namespace pipewright::sim
