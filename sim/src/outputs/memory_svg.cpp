// Memory over time per rank (report.hpp's svg_memory): one small chart per rank on a shared time
// axis and a shared memory scale, a step line of RankResult::memory_timeline filled below, the
// static part (parameters, gradients, optimizer state) shaded darker, the peak marked and
// labelled, and the device's memory as a dashed red line when the cluster gives one.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "outputs/memory_svg.hpp"
#include "outputs/svg_util.hpp"
#include "pipewright/sim/report.hpp"

namespace pipewright::sim {
namespace {

constexpr double kLeft = 64;
constexpr double kRight = 90;
constexpr double kRowHeight = 64;
constexpr double kChartHeight = 48;

}  // namespace

MemoryPanel memory_panel(const SimResult& r, double width) {
  const double plot_w = width - kLeft - kRight;
  const std::int64_t span_ns = std::max<std::int64_t>(r.makespan_ns, 1);
  std::int64_t top_bytes = std::max<std::int64_t>(r.device_memory_bytes, 1);
  for (const auto& rr : r.per_rank) {
    top_bytes = std::max(top_bytes, rr.peak_memory_bytes);
    for (const auto& p : rr.memory_timeline) top_bytes = std::max(top_bytes, p.bytes);
  }
  const double y_scale = kChartHeight / (static_cast<double>(top_bytes) * 1.05);
  auto x_of = [&](std::int64_t ns) {
    return kLeft + plot_w * static_cast<double>(ns) / static_cast<double>(span_ns);
  };
  std::ostringstream os;
  os << "<text x=\"" << kLeft << "\" y=\"20\" font-size=\"14\" font-weight=\"bold\">"
     << svg::escape("Memory per rank over the step (" + r.schedule + "); scale 0 to " +
                    svg::human_bytes(static_cast<double>(top_bytes) * 1.05) + " on every row")
     << "</text>\n";
  const double top = 36;
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    const auto& rr = r.per_rank.at(static_cast<std::size_t>(rank));
    const double y0 = top + kRowHeight * rank;
    const double base = y0 + kChartHeight;
    const std::string colour = svg::hsl(svg::stage_hue(rank), 0.62, 0.45);
    os << "<text x=\"" << kLeft - 8 << "\" y=\"" << svg::num(y0 + kChartHeight / 2 + 4)
       << "\" text-anchor=\"end\">rank " << rank << "</text>\n";
    os << "<rect x=\"" << kLeft << "\" y=\"" << svg::num(y0) << "\" width=\"" << svg::num(plot_w)
       << "\" height=\"" << kChartHeight << "\" fill=\"#F6F6F6\"/>\n";
    // Static memory.
    const double ys = base - static_cast<double>(rr.static_memory_bytes) * y_scale;
    os << "<rect x=\"" << kLeft << "\" y=\"" << svg::num(ys) << "\" width=\"" << svg::num(plot_w)
       << "\" height=\"" << svg::num(base - ys) << "\" fill=\"" << colour
       << "\" fill-opacity=\"0.35\"><title>rank " << rank << ": static memory (parameters, "
       << "gradients, optimizer state) "
       << svg::human_bytes(static_cast<double>(rr.static_memory_bytes)) << "</title></rect>\n";
    if (!rr.memory_timeline.empty()) {
      std::ostringstream path;
      path << "M" << svg::num(kLeft) << "," << svg::num(base);
      double last_y = base;
      for (const auto& p : rr.memory_timeline) {
        const double x = x_of(p.time_ns);
        const double y = base - static_cast<double>(p.bytes) * y_scale;
        path << " L" << svg::num(x) << "," << svg::num(last_y) << " L" << svg::num(x) << ","
             << svg::num(y);
        last_y = y;
      }
      path << " L" << svg::num(kLeft + plot_w) << "," << svg::num(last_y) << " L"
           << svg::num(kLeft + plot_w) << "," << svg::num(base) << " Z";
      os << "<path d=\"" << path.str() << "\" fill=\"" << colour
         << "\" fill-opacity=\"0.25\" stroke=\"" << colour << "\" stroke-width=\"1.5\"/>\n";
    }
    // Peak.
    const double yp = base - static_cast<double>(rr.peak_memory_bytes) * y_scale;
    std::int64_t peak_at = 0;
    for (const auto& p : rr.memory_timeline) {
      if (p.bytes == rr.peak_memory_bytes) {
        peak_at = p.time_ns;
        break;
      }
    }
    if (!rr.memory_timeline.empty()) {
      os << "<circle cx=\"" << svg::num(x_of(peak_at)) << "\" cy=\"" << svg::num(yp)
         << "\" r=\"3\" fill=\"" << colour << "\"><title>rank " << rank << ": peak "
         << svg::human_bytes(static_cast<double>(rr.peak_memory_bytes)) << " at "
         << svg::human_ms(static_cast<double>(peak_at) / 1e6) << "</title></circle>\n";
    }
    os << "<text x=\"" << svg::num(kLeft + plot_w + 6) << "\" y=\"" << svg::num(y0 + 14)
       << "\">peak " << svg::human_bytes(static_cast<double>(rr.peak_memory_bytes)) << "</text>\n";
    if (rr.exceeds_memory) {
      os << "<text x=\"" << svg::num(kLeft + plot_w + 6) << "\" y=\"" << svg::num(y0 + 30)
         << "\" fill=\"#C62828\">exceeds device</text>\n";
    }
    if (r.device_memory_bytes > 0) {
      const double yd = base - static_cast<double>(r.device_memory_bytes) * y_scale;
      os << "<line x1=\"" << kLeft << "\" y1=\"" << svg::num(yd) << "\" x2=\""
         << svg::num(kLeft + plot_w) << "\" y2=\"" << svg::num(yd)
         << "\" stroke=\"#C62828\" stroke-dasharray=\"5,3\"><title>device memory "
         << svg::human_bytes(static_cast<double>(r.device_memory_bytes)) << "</title></line>\n";
    }
  }
  // Time axis.
  const double axis_y = top + kRowHeight * r.ranks - (kRowHeight - kChartHeight) + 2;
  const double span_ms = static_cast<double>(span_ns) / 1e6;
  const double step = svg::tick_step(span_ms, std::max(4.0, plot_w / 110));
  os << "<line x1=\"" << kLeft << "\" y1=\"" << svg::num(axis_y) << "\" x2=\""
     << svg::num(kLeft + plot_w) << "\" y2=\"" << svg::num(axis_y) << "\" stroke=\"#000\"/>\n";
  for (int k = 0; k * step <= span_ms * (1 + 1e-9); ++k) {
    const double x = kLeft + plot_w * k * step / span_ms;
    char label[32];
    std::snprintf(label, sizeof label, "%g", k * step);
    os << "<line x1=\"" << svg::num(x) << "\" y1=\"" << svg::num(axis_y) << "\" x2=\""
       << svg::num(x) << "\" y2=\"" << svg::num(axis_y + 5) << "\" stroke=\"#000\"/><text x=\""
       << svg::num(x) << "\" y=\"" << svg::num(axis_y + 18) << "\" text-anchor=\"middle\">" << label
       << "</text>\n";
  }
  os << "<text x=\"" << svg::num(kLeft + plot_w) << "\" y=\"" << svg::num(axis_y + 33)
     << "\" text-anchor=\"end\">time (ms)</text>\n";
  MemoryPanel p;
  p.body = os.str();
  p.width = width;
  p.height = axis_y + 42;
  return p;
}

std::string svg_memory(const SimResult& result) {
  const MemoryPanel p = memory_panel(result, 900);
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg::num(p.width) << "\" height=\""
     << svg::num(p.height) << "\" viewBox=\"0 0 " << svg::num(p.width) << " " << svg::num(p.height)
     << "\" font-family=\"" << svg::kFont << "\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << p.body << "</svg>\n";
  return os.str();
}

}  // namespace pipewright::sim
