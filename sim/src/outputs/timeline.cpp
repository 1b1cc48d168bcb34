// The text timeline (the SVG one is in timeline_svg.cpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "pipewright/sim/report.hpp"

namespace pipewright::sim {
using sched::ActionKind;

std::string text_timeline(const SimResult& r, int width) {
  width = std::max(width, 10);
  const double span = static_cast<double>(std::max<std::int64_t>(r.makespan_ns, 1));
  const double col_ns = span / width;
  // coverage[rank][col][kind] in ns, kinds F, B, I, W.
  std::vector<std::vector<std::array<double, 4>>> cover(
      static_cast<std::size_t>(r.ranks),
      std::vector<std::array<double, 4>>(static_cast<std::size_t>(width), {0, 0, 0, 0}));
  for (const auto& a : r.actions) {
    if (a.stream != Stream::kCompute || a.collective != Collective::kNone) continue;
    int k = -1;
    switch (a.action.kind) {
      case ActionKind::kForward:
        k = 0;
        break;
      case ActionKind::kFullBackward:
        k = 1;
        break;
      case ActionKind::kBackwardInput:
        k = 2;
        break;
      case ActionKind::kBackwardWeight:
        k = 3;
        break;
      default:
        break;
    }
    if (k < 0 || a.end_ns <= a.start_ns) continue;
    const auto c0 = static_cast<int>(static_cast<double>(a.start_ns) / col_ns);
    const auto c1 = std::min(width - 1, static_cast<int>(static_cast<double>(a.end_ns) / col_ns));
    for (int c = std::max(c0, 0); c <= c1; ++c) {
      const double lo = std::max(static_cast<double>(a.start_ns), c * col_ns);
      const double hi = std::min(static_cast<double>(a.end_ns), (c + 1) * col_ns);
      if (hi > lo)
        cover[static_cast<std::size_t>(a.rank)][static_cast<std::size_t>(c)]
             [static_cast<std::size_t>(k)] += hi - lo;
    }
  }
  std::ostringstream os;
  char head[256];
  std::snprintf(
      head, sizeof head,
      "%s  makespan %.3f ms  bubble %.1f%%  (1 column = %.3f ms; F B I W compute, . idle)\n",
      r.schedule.c_str(), span / 1e6, 100 * r.bubble_fraction(), col_ns / 1e6);
  os << head;
  const char kChars[] = {'F', 'B', 'I', 'W'};
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    char label[16];
    std::snprintf(label, sizeof label, "r%-3d|", rank);
    os << label;
    for (int c = 0; c < width; ++c) {
      const auto& cv = cover[static_cast<std::size_t>(rank)][static_cast<std::size_t>(c)];
      const auto best = std::max_element(cv.begin(), cv.end());
      const double total = cv[0] + cv[1] + cv[2] + cv[3];
      os << (total >= col_ns / 2 ? kChars[best - cv.begin()] : '.');
    }
    os << "|\n";
  }
  return os.str();
}

}  // namespace pipewright::sim
