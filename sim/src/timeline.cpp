// SVG and text timelines, written by pipewright itself (no Graphviz or plotting library).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "pipewright/sim/report.hpp"

namespace pipewright::sim {
namespace {

using sched::ActionKind;

// Colours per kind (Tableau 10), with the legend text.
struct KindStyle {
  const char* label;
  const char* fill;
};
constexpr KindStyle kForwardStyle{"F forward", "#4C78A8"};
constexpr KindStyle kBackwardStyle{"B backward", "#54A24B"};
constexpr KindStyle kInputStyle{"I input grad", "#EECA3B"};
constexpr KindStyle kWeightStyle{"W weight grad", "#F58518"};
constexpr KindStyle kSendStyle{"send", "#B279A2"};
constexpr KindStyle kDpStyle{"DP collective", "#E45756"};

// Layout in pixels.
constexpr double kWidth = 1200;
constexpr double kLeft = 70;
constexpr double kRight = 20;
constexpr double kTop = 50;
constexpr double kRowHeight = 30;
constexpr double kComputeHeight = 18;
constexpr double kCommHeight = 6;
// Adjacent slices of one kind closer than this are drawn as one rectangle: a 64-rank plan with
// a million actions stays a few MB of SVG and every visible gap (a bubble) is kept.
constexpr double kMergePx = 0.25;

const KindStyle* style_of(const TimedAction& a) {
  if (a.collective != Collective::kNone) return &kDpStyle;
  switch (a.action.kind) {
    case ActionKind::kForward:
      return &kForwardStyle;
    case ActionKind::kFullBackward:
      return &kBackwardStyle;
    case ActionKind::kBackwardInput:
      return &kInputStyle;
    case ActionKind::kBackwardWeight:
      return &kWeightStyle;
    case ActionKind::kSendF:
    case ActionKind::kSendB:
      return &kSendStyle;
    default:
      return nullptr;  // RECV waits are idle compute; REDUCE_GRAD / OPTIM take no time
  }
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A "nice" tick step (1, 2 or 5 x 10^k) giving at most ~10 ticks over `span`.
double tick_step(double span) {
  if (span <= 0) return 1;
  const double raw = span / 10;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (f * mag >= raw) return f * mag;
  }
  return 10 * mag;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct Rect {
  const KindStyle* style;
  double x0, x1;
  std::int32_t mb;
  bool merged;
};

}  // namespace

std::string svg_timeline(const SimResult& r) {
  const double span_ms = std::max(static_cast<double>(r.makespan_ns) / 1e6, 1e-6);
  const double plot_w = kWidth - kLeft - kRight;
  const double px_per_ms = plot_w / span_ms;
  const double height = kTop + kRowHeight * r.ranks + 60;
  auto x_of = [&](std::int64_t ns) { return kLeft + static_cast<double>(ns) / 1e6 * px_per_ms; };

  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
     << fmt(height) << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  char title[256];
  std::snprintf(title, sizeof title,
                "%s: %d ranks, %d stages, %d microbatches, dp %d, %d step(s); makespan %.3f ms, "
                "bubble %.1f%%",
                r.schedule.c_str(), r.ranks, r.stages, r.microbatches, r.dp, r.steps,
                static_cast<double>(r.makespan_ns) / 1e6, 100 * r.bubble_fraction());
  os << "<text x=\"" << kLeft << "\" y=\"20\" font-size=\"13\">" << title << "</text>\n";

  // Rows: grey background = idle; rectangles per kind on top.
  std::vector<std::vector<Rect>> compute(static_cast<std::size_t>(r.ranks));
  std::vector<std::vector<Rect>> comm(static_cast<std::size_t>(r.ranks));
  for (const auto& a : r.actions) {
    const KindStyle* st = style_of(a);
    if (st == nullptr || a.end_ns <= a.start_ns) continue;
    auto& rects = (a.stream == Stream::kCompute ? compute : comm)[static_cast<std::size_t>(a.rank)];
    const double x0 = x_of(a.start_ns);
    const double x1 = x_of(a.end_ns);
    if (!rects.empty() && rects.back().style == st && x0 - rects.back().x1 < kMergePx &&
        x0 >= rects.back().x0) {
      rects.back().x1 = std::max(rects.back().x1, x1);
      rects.back().merged = true;
      continue;
    }
    rects.push_back(Rect{st, x0, x1, a.action.microbatch, false});
  }
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    const double y = kTop + kRowHeight * rank;
    os << "<text x=\"" << kLeft - 8 << "\" y=\"" << fmt(y + kComputeHeight - 4)
       << "\" text-anchor=\"end\">rank " << rank << "</text>\n";
    os << "<rect x=\"" << kLeft << "\" y=\"" << fmt(y) << "\" width=\"" << fmt(plot_w)
       << "\" height=\"" << kComputeHeight << "\" fill=\"#E8E8E8\"/>\n";
    for (const auto& rc : compute[static_cast<std::size_t>(rank)]) {
      os << "<rect x=\"" << fmt(rc.x0) << "\" y=\"" << fmt(y) << "\" width=\""
         << fmt(std::max(rc.x1 - rc.x0, 0.1)) << "\" height=\"" << kComputeHeight << "\" fill=\""
         << rc.style->fill << "\"/>\n";
      if (!rc.merged && rc.mb >= 0 && rc.x1 - rc.x0 >= 14) {
        os << "<text x=\"" << fmt((rc.x0 + rc.x1) / 2) << "\" y=\"" << fmt(y + kComputeHeight - 5)
           << "\" text-anchor=\"middle\" fill=\"white\" font-size=\"10\">" << rc.mb << "</text>\n";
      }
    }
    const double cy = y + kComputeHeight + 1;
    for (const auto& rc : comm[static_cast<std::size_t>(rank)]) {
      os << "<rect x=\"" << fmt(rc.x0) << "\" y=\"" << fmt(cy) << "\" width=\""
         << fmt(std::max(rc.x1 - rc.x0, 0.1)) << "\" height=\"" << kCommHeight << "\" fill=\""
         << rc.style->fill << "\"/>\n";
    }
  }
  // Axis in ms.
  const double axis_y = kTop + kRowHeight * r.ranks + 4;
  os << "<line x1=\"" << kLeft << "\" y1=\"" << fmt(axis_y) << "\" x2=\"" << fmt(kLeft + plot_w)
     << "\" y2=\"" << fmt(axis_y) << "\" stroke=\"black\"/>\n";
  const double step = tick_step(span_ms);
  for (int k = 0; k * step <= span_ms * (1 + 1e-9); ++k) {
    const double x = kLeft + k * step * px_per_ms;
    os << "<line x1=\"" << fmt(x) << "\" y1=\"" << fmt(axis_y) << "\" x2=\"" << fmt(x) << "\" y2=\""
       << fmt(axis_y + 5) << "\" stroke=\"black\"/>\n";
    os << "<text x=\"" << fmt(x) << "\" y=\"" << fmt(axis_y + 17) << "\" text-anchor=\"middle\">"
       << tick_label(k * step) << "</text>\n";
  }
  os << "<text x=\"" << fmt(kLeft + plot_w) << "\" y=\"" << fmt(axis_y + 32)
     << "\" text-anchor=\"end\">time (ms)</text>\n";
  // Legend.
  double lx = kLeft;
  const double ly = 32;
  for (const KindStyle* st :
       {&kForwardStyle, &kBackwardStyle, &kInputStyle, &kWeightStyle, &kSendStyle, &kDpStyle}) {
    os << "<rect x=\"" << fmt(lx) << "\" y=\"" << fmt(ly) << "\" width=\"10\" height=\"10\" fill=\""
       << st->fill << "\"/><text x=\"" << fmt(lx + 14) << "\" y=\"" << fmt(ly + 9) << "\">"
       << st->label << "</text>\n";
    lx += 110;
  }
  os << "<rect x=\"" << fmt(lx) << "\" y=\"" << fmt(ly)
     << "\" width=\"10\" height=\"10\" fill=\"#E8E8E8\"/><text x=\"" << fmt(lx + 14) << "\" y=\""
     << fmt(ly + 9) << "\">idle (bubble)</text>\n";
  os << "</svg>\n";
  return os.str();
}

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
