// The SVG Gantt timeline (report.hpp's svg_timeline; timeline_svg.hpp), written by pipewright
// itself (no plotting library).
//
// Note [Timeline picture]: one lane per rank; every compute action is its own rectangle with a
// white 1 px border (adjacent actions never read as one bar), filled with its stage's hue (so the
// chunks of an interleaved rank differ) at a lightness per kind (F medium, B dark, I dark and
// hatched, W pale and hatched), and labelled "F3" (kind and microbatch) when the label fits, else
// "3". Each carries a <title> tooltip (rank, stage, microbatch, kind, start, duration). A message
// is an arrow from the sender's lane at the send's start to the receiver's lane at its arrival;
// the critical path (SimResult::critical_path, the chain of actions whose ends determine the
// step's end) is outlined in black, its messages drawn black. Sends and DP collectives also
// occupy a thin band under each lane. Actions narrower than kSliverPx (only in plans far too long
// for the maximum width) are drawn as plain slivers, merged with a neighbour of the same kind,
// so the SVG stays a few MB.
#include "outputs/timeline_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <vector>

#include "outputs/svg_util.hpp"
#include "pipewright/sim/report.hpp"

namespace pipewright::sim {
namespace {

using sched::ActionKind;

constexpr double kLeft = 64;
constexpr double kRight = 24;
constexpr double kLaneHeight = 44;
constexpr double kBarHeight = 26;
constexpr double kBandY = 29;  // sends / collectives band, relative to the lane
constexpr double kBandHeight = 6;
constexpr double kSliverPx = 1.5;
constexpr double kMinWidth = 900;
constexpr double kMaxWidth = 4800;
constexpr double kLabelPx = 40;  // Note [Timeline width]
constexpr double kCharPx = 6.6;  // average glyph width at font-size 11
constexpr const char* kCritical = "#000000";

struct KindLook {
  const char* letter;
  const char* name;
  double lightness;
  bool hatched;
  bool light_text;  // white label
};

const KindLook* look_of(ActionKind k) {
  static const KindLook f{"F", "forward", 0.62, false, false};
  static const KindLook b{"B", "backward", 0.36, false, true};
  static const KindLook i{"I", "input grad", 0.38, true, true};
  static const KindLook w{"W", "weight grad", 0.80, true, false};
  switch (k) {
    case ActionKind::kForward:
      return &f;
    case ActionKind::kFullBackward:
      return &b;
    case ActionKind::kBackwardInput:
      return &i;
    case ActionKind::kBackwardWeight:
      return &w;
    default:
      return nullptr;
  }
}

std::string ms_text(std::int64_t ns) { return svg::human_ms(static_cast<double>(ns) / 1e6); }

std::string tooltip(const TimedAction& a) {
  std::ostringstream t;
  t << "rank " << a.rank;
  if (a.action.stage >= 0) t << ", stage " << a.action.stage;
  if (a.action.microbatch >= 0) t << ", microbatch " << a.action.microbatch;
  t << ": " << action_name(a);
  if (const KindLook* k = look_of(a.action.kind); k && a.collective == Collective::kNone)
    t << " (" << k->name << ")";
  if (a.peer_rank >= 0)
    t << (sched::is_send(a.action.kind) ? " to rank " : " from rank ") << a.peer_rank;
  if (a.step > 0) t << ", step " << a.step;
  t << "; start " << ms_text(a.start_ns) << ", duration " << ms_text(a.end_ns - a.start_ns);
  return svg::escape(t.str());
}

}  // namespace

double timeline_width(const SimResult& r, std::int64_t span_ns) {
  std::vector<std::int64_t> durations;
  for (const auto& a : r.actions) {
    if (a.stream == Stream::kCompute && a.collective == Collective::kNone &&
        look_of(a.action.kind) != nullptr && a.end_ns > a.start_ns)
      durations.push_back(a.end_ns - a.start_ns);
  }
  if (durations.empty() || span_ns <= 0) return kMinWidth;
  // The 10th percentile, so that one tiny action does not decide the width.
  const auto k = durations.size() / 10;
  std::nth_element(durations.begin(), durations.begin() + static_cast<std::ptrdiff_t>(k),
                   durations.end());
  const double px_per_ns = kLabelPx / static_cast<double>(durations[k]);
  const double want = kLeft + kRight + px_per_ns * static_cast<double>(span_ns);
  return std::clamp(want, kMinWidth, kMaxWidth);
}

TimelinePanel timeline_panel(const SimResult& r, const TimelineOptions& o) {
  const std::int64_t span_ns = std::max<std::int64_t>(o.span_ns > 0 ? o.span_ns : r.makespan_ns, 1);
  const double width = o.width_px > 0 ? o.width_px : timeline_width(r, span_ns);
  const double plot_w = width - kLeft - kRight;
  const double px_per_ns = plot_w / static_cast<double>(span_ns);
  auto x_of = [&](std::int64_t ns) { return kLeft + static_cast<double>(ns) * px_per_ns; };
  const std::string hatch = o.id_prefix + "-hatch";
  const std::string arrow = o.id_prefix + "-arrow";
  const std::string arrow_critical = o.id_prefix + "-arrowc";
  std::ostringstream os;

  // Title.
  std::string title = o.title;
  if (title.empty()) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s: %d ranks, %d stages, %d microbatches, dp %d, %d step(s); step %s, "
                  "bubble %.1f%%",
                  r.schedule.c_str(), r.ranks, r.stages, r.microbatches, r.dp, r.steps,
                  ms_text(r.makespan_ns).c_str(), 100 * r.bubble_fraction());
    title = buf;
  }
  os << "<text x=\"" << kLeft << "\" y=\"20\" font-size=\"14\" font-weight=\"bold\">"
     << svg::escape(title) << "</text>\n";

  // Legend: kinds (in a neutral hue), stages, messages, critical path; wraps at the width.
  double top = 34;
  if (o.legend) {
    double lx = kLeft;
    double ly = 30;
    auto item = [&](const std::string& swatch, const std::string& text) {
      const double w = 18 + kCharPx * static_cast<double>(text.size()) + 16;
      if (lx + w > width - kRight) {
        lx = kLeft;
        ly += 17;
      }
      os << "<g transform=\"translate(" << svg::num(lx) << "," << svg::num(ly) << ")\">" << swatch
         << "<text x=\"18\" y=\"10\">" << svg::escape(text) << "</text></g>\n";
      lx += w;
    };
    for (ActionKind k : {ActionKind::kForward, ActionKind::kFullBackward,
                         ActionKind::kBackwardInput, ActionKind::kBackwardWeight}) {
      const KindLook* kl = look_of(k);
      std::string sw =
          "<rect width=\"14\" height=\"11\" fill=\"" + svg::hsl(0, 0, kl->lightness) + "\"/>";
      if (kl->hatched) sw += "<rect width=\"14\" height=\"11\" fill=\"url(#" + hatch + ")\"/>";
      item(sw, std::string(kl->letter) + " " + kl->name);
    }
    if (r.stages <= 16) {
      for (std::int32_t s = 0; s < r.stages; ++s) {
        item("<rect width=\"14\" height=\"11\" fill=\"" + svg::hsl(svg::stage_hue(s), 0.62, 0.55) +
                 "\"/>",
             "stage " + std::to_string(s));
      }
    } else {
      item("", "colour: stage (hue), kind (lightness)");
    }
    item("<line x1=\"0\" y1=\"6\" x2=\"14\" y2=\"6\" stroke=\"#666\" marker-end=\"url(#" + arrow +
             ")\"/>",
         "message");
    item("<rect width=\"14\" height=\"11\" fill=\"#DDD\" stroke=\"" + std::string(kCritical) +
             "\" stroke-width=\"2\"/>",
         "critical path");
    item("<rect width=\"14\" height=\"11\" fill=\"#F1F1F1\"/>", "idle");
    top = ly + 24;
  }

  // Lanes, grid and axis.
  const double lanes_h = kLaneHeight * r.ranks;
  auto lane_y = [&](std::int32_t rank) { return top + kLaneHeight * rank; };
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) {
    const double y = lane_y(rank);
    os << "<text x=\"" << kLeft - 8 << "\" y=\"" << svg::num(y + kBarHeight / 2 + 4)
       << "\" text-anchor=\"end\">rank " << rank << "</text>\n";
    os << "<rect x=\"" << kLeft << "\" y=\"" << svg::num(y) << "\" width=\"" << svg::num(plot_w)
       << "\" height=\"" << kBarHeight << "\" fill=\"#F1F1F1\"/>\n";
  }
  const double span_ms = static_cast<double>(span_ns) / 1e6;
  const double step = svg::tick_step(span_ms, std::max(4.0, plot_w / 110));
  const double axis_y = top + lanes_h + 2;
  for (int k = 0; k * step <= span_ms * (1 + 1e-9); ++k) {
    const double x = kLeft + k * step * 1e6 * px_per_ns;
    char label[32];
    std::snprintf(label, sizeof label, "%g", k * step);
    os << "<line x1=\"" << svg::num(x) << "\" y1=\"" << svg::num(top) << "\" x2=\"" << svg::num(x)
       << "\" y2=\"" << svg::num(axis_y + 5) << "\" stroke=\"#000\" stroke-opacity=\"0.12\"/>\n"
       << "<text x=\"" << svg::num(x) << "\" y=\"" << svg::num(axis_y + 18)
       << "\" text-anchor=\"middle\">" << label << "</text>\n";
  }
  os << "<line x1=\"" << kLeft << "\" y1=\"" << svg::num(axis_y) << "\" x2=\""
     << svg::num(kLeft + plot_w) << "\" y2=\"" << svg::num(axis_y) << "\" stroke=\"#000\"/>\n";
  os << "<text x=\"" << svg::num(kLeft + plot_w) << "\" y=\"" << svg::num(axis_y + 33)
     << "\" text-anchor=\"end\">time (ms)</text>\n";

  // Actions.
  const std::set<std::int64_t> critical(r.critical_path.begin(), r.critical_path.end());
  struct Sliver {
    double x0 = -1, x1 = -1;
    std::string fill;
  };
  std::vector<Sliver> sliver(static_cast<std::size_t>(r.ranks));
  auto flush = [&](std::int32_t rank) {
    Sliver& s = sliver[static_cast<std::size_t>(rank)];
    if (s.x1 > s.x0) {
      os << "<rect x=\"" << svg::num(s.x0) << "\" y=\"" << svg::num(lane_y(rank)) << "\" width=\""
         << svg::num(std::max(s.x1 - s.x0, 0.3)) << "\" height=\"" << kBarHeight << "\" fill=\""
         << s.fill << "\"/>\n";
    }
    s = Sliver{};
  };
  std::ostringstream outlines;  // drawn last, above every bar
  for (std::size_t i = 0; i < r.actions.size(); ++i) {
    const TimedAction& a = r.actions[i];
    if (a.end_ns <= a.start_ns || a.rank < 0 || a.rank >= r.ranks) continue;
    const double x0 = x_of(a.start_ns);
    const double x1 = x_of(a.end_ns);
    const double y = lane_y(a.rank);
    if (a.stream != Stream::kCompute || a.collective != Collective::kNone) {
      if (!sched::is_send(a.action.kind) && a.collective == Collective::kNone) continue;
      if (x1 - x0 < kSliverPx && x1 - x0 < 0.5) continue;
      os << "<rect x=\"" << svg::num(x0) << "\" y=\"" << svg::num(y + kBandY) << "\" width=\""
         << svg::num(std::max(x1 - x0, 0.5)) << "\" height=\"" << kBandHeight << "\" fill=\""
         << (a.collective != Collective::kNone ? "#555555" : "#B8A6C9") << "\"><title>"
         << tooltip(a) << "</title></rect>\n";
      continue;
    }
    const KindLook* kl = look_of(a.action.kind);
    const std::string fill =
        kl ? svg::hsl(svg::stage_hue(a.action.stage), 0.62, kl->lightness) : "#9E9E9E";
    if (kl == nullptr && !sched::is_compute(a.action.kind) &&
        a.action.kind != ActionKind::kOptimizerStep)
      continue;  // receives wait on the compute stream: idle, not work
    Sliver& sl = sliver[static_cast<std::size_t>(a.rank)];
    if (x1 - x0 < kSliverPx) {
      if (sl.x1 < 0 || sl.fill != fill || x0 - sl.x1 > 0.5) {
        flush(a.rank);
        sliver[static_cast<std::size_t>(a.rank)] = Sliver{x0, x1, fill};
      } else {
        sl.x1 = std::max(sl.x1, x1);
      }
      continue;
    }
    flush(a.rank);
    os << "<g><title>" << tooltip(a) << "</title><rect x=\"" << svg::num(x0) << "\" y=\""
       << svg::num(y) << "\" width=\"" << svg::num(x1 - x0) << "\" height=\"" << kBarHeight
       << "\" fill=\"" << fill << "\" stroke=\"#FFF\" stroke-width=\"1\"/>";
    if (kl && kl->hatched) {
      os << "<rect x=\"" << svg::num(x0 + 0.5) << "\" y=\"" << svg::num(y + 0.5) << "\" width=\""
         << svg::num(std::max(x1 - x0 - 1, 0.0)) << "\" height=\"" << kBarHeight - 1
         << "\" fill=\"url(#" << hatch << ")\"/>";
    }
    const std::string letter = kl ? kl->letter : action_name(a);
    const std::string full =
        a.action.microbatch >= 0 && kl ? letter + std::to_string(a.action.microbatch) : letter;
    const std::string shortl = a.action.microbatch >= 0 ? std::to_string(a.action.microbatch) : "";
    const double room = x1 - x0 - 4;
    const std::string label = kCharPx * static_cast<double>(full.size()) <= room     ? full
                              : kCharPx * static_cast<double>(shortl.size()) <= room ? shortl
                                                                                     : "";
    if (!label.empty()) {
      const bool light = kl && kl->light_text;
      os << "<text x=\"" << svg::num((x0 + x1) / 2) << "\" y=\"" << svg::num(y + kBarHeight / 2 + 4)
         << "\" text-anchor=\"middle\" fill=\"" << (light ? "#FFF" : "#111") << "\""
         << (light ? " font-weight=\"bold\"" : "") << ">" << svg::escape(label) << "</text>";
    }
    os << "</g>\n";
    if (critical.count(static_cast<std::int64_t>(i)) > 0) {
      outlines << "<rect x=\"" << svg::num(x0 + 1) << "\" y=\"" << svg::num(y + 1) << "\" width=\""
               << svg::num(std::max(x1 - x0 - 2, 0.5)) << "\" height=\"" << kBarHeight - 2
               << "\" fill=\"none\" stroke=\"" << kCritical << "\" stroke-width=\"2.2\"/>\n";
    }
  }
  for (std::int32_t rank = 0; rank < r.ranks; ++rank) flush(rank);

  // Messages: sender's lane at the send's start -> receiver's lane at the arrival (send's end).
  std::size_t arrows = 0;
  for (std::size_t i = 0; i < r.actions.size() && arrows < 20000; ++i) {
    const TimedAction& recv = r.actions[i];
    if (recv.match < 0 || static_cast<std::size_t>(recv.match) >= r.actions.size()) continue;
    const TimedAction& send = r.actions[static_cast<std::size_t>(recv.match)];
    if (send.rank == recv.rank || send.rank < 0 || send.rank >= r.ranks || recv.rank < 0 ||
        recv.rank >= r.ranks)
      continue;
    const bool down = recv.rank > send.rank;
    const double ys = lane_y(send.rank) + (down ? kBarHeight : 0);
    const double yr = lane_y(recv.rank) + (down ? 0 : kBarHeight);
    const bool on_path =
        critical.count(recv.match) > 0 || critical.count(static_cast<std::int64_t>(i)) > 0;
    ++arrows;
    (on_path ? outlines : os) << "<line x1=\"" << svg::num(x_of(send.start_ns)) << "\" y1=\""
                              << svg::num(ys) << "\" x2=\"" << svg::num(x_of(send.end_ns))
                              << "\" y2=\"" << svg::num(yr) << "\" stroke=\""
                              << (on_path ? kCritical : "#555") << "\" stroke-opacity=\""
                              << (on_path ? "0.9" : "0.45") << "\" stroke-width=\""
                              << (on_path ? "1.6" : "1") << "\" marker-end=\"url(#"
                              << (on_path ? arrow_critical : arrow) << ")\"><title>"
                              << tooltip(send) << "</title></line>\n";
  }
  os << outlines.str();

  TimelinePanel p;
  p.body = os.str();
  std::ostringstream defs;
  defs << "<pattern id=\"" << hatch
       << "\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
          "patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" "
          "stroke=\"#000\" stroke-opacity=\"0.28\" stroke-width=\"2.2\"/></pattern>\n";
  for (const auto& [id, colour] :
       {std::pair<std::string, std::string>{arrow, "#555"},
        std::pair<std::string, std::string>{arrow_critical, kCritical}}) {
    defs << "<marker id=\"" << id
         << "\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" "
            "orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\""
         << colour << "\"/></marker>\n";
  }
  p.defs = defs.str();
  p.width = width;
  p.height = axis_y + 42;
  return p;
}

std::string svg_document(const TimelinePanel& p) {
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg::num(p.width) << "\" height=\""
     << svg::num(p.height) << "\" viewBox=\"0 0 " << svg::num(p.width) << " " << svg::num(p.height)
     << "\" font-family=\"" << svg::kFont << "\" font-size=\"11\">\n"
     << "<defs>\n"
     << p.defs << "</defs>\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
     << p.body << "</svg>\n";
  return os.str();
}

std::string svg_timeline(const SimResult& result) {
  return svg_document(timeline_panel(result, TimelineOptions{}));
}

}  // namespace pipewright::sim
