// `pipewright report`: one self-contained HTML page (report.hpp's html_report). No network: the
// pictures are inline SVG, the style is inline, and the only script marks the page ready (and
// records any script error on <body>, for the headless-browser test).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "outputs/memory_svg.hpp"
#include "outputs/svg_util.hpp"
#include "outputs/timeline_svg.hpp"
#include "pipewright/sim/compare.hpp"
#include "pipewright/sim/report.hpp"

namespace pipewright::sim {
namespace {

std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * f);
  return b;
}

std::string ms(double v) { return svg::human_ms(v); }
std::string ns_ms(std::int64_t ns) { return svg::human_ms(static_cast<double>(ns) / 1e6); }

std::string inline_svg(const std::string& body, const std::string& defs, double w, double h) {
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << svg::num(w) << "\" height=\""
     << svg::num(h) << "\" viewBox=\"0 0 " << svg::num(w) << " " << svg::num(h)
     << "\" font-family=\"" << svg::kFont << "\" font-size=\"11\"><defs>" << defs
     << "</defs><rect width=\"100%\" height=\"100%\" fill=\"white\"/>" << body << "</svg>";
  return os.str();
}

void row(std::ostringstream& os, const std::string& k, const std::string& v) {
  os << "<tr><th>" << svg::escape(k) << "</th><td>" << svg::escape(v) << "</td></tr>\n";
}

constexpr const char* kStyle = R"(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 24px; color: #222;
       background: #fff; font-size: 14px; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
h2 { font-size: 17px; margin: 28px 0 8px 0; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.sub { color: #666; margin: 0 0 16px 0; }
table { border-collapse: collapse; margin: 4px 0; }
th, td { padding: 3px 10px; text-align: left; border-bottom: 1px solid #eee; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.bar { background: #E57373; height: 10px; display: inline-block; vertical-align: middle; }
.busy { background: #64B5F6; }
.pic { overflow-x: auto; border: 1px solid #eee; padding: 4px; }
.neg { color: #1565C0; } .pos { color: #C62828; }
)";

}  // namespace

std::string html_report(const SimResult& r, const HtmlReportInputs& in) {
  std::ostringstream os;
  const std::string title =
      in.title.empty() ? "pipewright report: " + r.schedule : "pipewright report: " + in.title;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
     << svg::escape(title) << "</title>\n<style>" << kStyle << "</style>\n"
     << "<script>window.addEventListener('error', function (e) {"
        " document.documentElement.setAttribute('data-js-error', String(e.message)); });"
        "</script>\n</head><body>\n";
  os << "<h1>" << svg::escape(title) << "</h1>\n<p class=\"sub\">" << r.ranks << " ranks x dp "
     << r.dp << ", " << r.stages << " stages, " << r.microbatches << " microbatches, " << r.steps
     << " step(s)" << (in.compare ? "; predicted vs measured" : "") << "</p>\n";

  // Summary.
  std::int64_t peak = 0;
  for (const auto& rr : r.per_rank) peak = std::max(peak, rr.peak_memory_bytes);
  os << "<h2>Summary</h2>\n<table>\n";
  row(os, "schedule", r.schedule);
  row(os, in.compare ? "step time (predicted)" : "step time", ns_ms(r.makespan_ns));
  if (in.compare) {
    row(os, "step time (measured, median of " + std::to_string(in.compare->steps_used) + ")",
        ms(in.compare->measured_step_ms));
    char e[32];
    std::snprintf(e, sizeof e, "%+.2f%%", 100 * in.compare->step_error());
    row(os, "step-time error (predicted - measured) / measured", e);
  }
  row(os, "bubble (idle share of all ranks' time)", pct(r.bubble_fraction()));
  if (r.micro_batch_size > 0) {
    char t[64];
    std::snprintf(t, sizeof t, "%.1f samples/s", r.throughput_samples_per_s());
    row(os, "throughput", t);
  }
  if (r.model_tflops_per_gpu() > 0) {
    char t[96];
    if (r.mfu() > 0) {
      std::snprintf(t, sizeof t, "%.1f TFLOP/s per GPU (MFU %.1f%% of %.0f)",
                    r.model_tflops_per_gpu(), 100 * r.mfu(), r.device_peak_tflops);
    } else {
      std::snprintf(t, sizeof t, "%.1f TFLOP/s per GPU", r.model_tflops_per_gpu());
    }
    row(os, "model FLOPs", t);
  }
  row(os, "peak memory (largest rank)", svg::human_bytes(static_cast<double>(peak)));
  if (r.device_memory_bytes > 0)
    row(os, "device memory", svg::human_bytes(static_cast<double>(r.device_memory_bytes)));
  row(os, "actions simulated", std::to_string(r.simulated_actions));
  row(os, "critical path", std::to_string(r.critical_path.size()) + " actions");
  os << "</table>\n";

  // Timelines.
  os << "<h2>Timeline" << (in.compare ? " (predicted)" : "") << "</h2>\n"
     << "<p class=\"sub\">Hover an action for its stage, microbatch, start and duration. Hue: "
        "stage; lightness and hatching: F / B / I / W; arrows: messages; black outline: the "
        "critical path.</p>\n";
  TimelineOptions to;
  to.id_prefix = "pred";
  std::int64_t span = r.makespan_ns;
  if (in.measured) span = std::max(span, in.measured->makespan_ns);
  to.span_ns = span;
  to.width_px = timeline_width(r, span);
  if (in.measured) to.width_px = std::max(to.width_px, timeline_width(*in.measured, span));
  const TimelinePanel tp = timeline_panel(r, to);
  os << "<div class=\"pic\">" << inline_svg(tp.body, tp.defs, tp.width, tp.height) << "</div>\n";
  if (in.measured) {
    TimelineOptions mo = to;
    mo.id_prefix = "meas";
    mo.title = "measured: the step closest to the median";
    mo.legend = false;
    const TimelinePanel mp = timeline_panel(*in.measured, mo);
    os << "<h2>Timeline (measured)</h2>\n<div class=\"pic\">"
       << inline_svg(mp.body, mp.defs, mp.width, mp.height) << "</div>\n";
  }

  // Bubble per rank.
  os << "<h2>Busy and idle per rank</h2>\n<table><tr><th>rank</th><th>busy</th><th>idle</th>"
        "<th>bubble</th><th></th>"
     << (in.compare ? "<th>busy measured</th><th>idle measured</th>" : "") << "</tr>\n";
  for (const auto& rr : r.per_rank) {
    const double f = r.makespan_ns > 0
                         ? static_cast<double>(rr.idle_ns) / static_cast<double>(r.makespan_ns)
                         : 0;
    os << "<tr><td>" << rr.rank << "</td><td class=\"n\">" << ns_ms(rr.busy_ns)
       << "</td><td class=\"n\">" << ns_ms(rr.idle_ns) << "</td><td class=\"n\">" << pct(f)
       << "</td><td><span class=\"bar busy\" style=\"width:" << svg::num(200 * (1 - f))
       << "px\"></span><span class=\"bar\" style=\"width:" << svg::num(200 * f)
       << "px\"></span></td>";
    if (in.compare && static_cast<std::size_t>(rr.rank) < in.compare->per_rank.size()) {
      const auto& c = in.compare->per_rank[static_cast<std::size_t>(rr.rank)];
      os << "<td class=\"n\">" << ms(c.measured_busy_ms) << "</td><td class=\"n\">"
         << ms(c.measured_idle_ms) << "</td>";
    }
    os << "</tr>\n";
  }
  os << "</table>\n";

  // Memory.
  os << "<h2>Memory over time</h2>\n";
  const MemoryPanel mp = memory_panel(r, 1200);
  os << "<div class=\"pic\">" << inline_svg(mp.body, "", mp.width, mp.height) << "</div>\n";
  if (in.compare) {
    os << "<table><tr><th>rank</th><th>peak predicted</th><th>peak measured</th></tr>\n";
    for (const auto& c : in.compare->per_rank) {
      os << "<tr><td>" << c.rank << "</td><td class=\"n\">"
         << (c.predicted_peak_bytes ? svg::human_bytes(static_cast<double>(*c.predicted_peak_bytes))
                                    : "-")
         << "</td><td class=\"n\">"
         << (c.measured_peak_bytes ? svg::human_bytes(static_cast<double>(*c.measured_peak_bytes))
                                   : "-")
         << "</td></tr>\n";
    }
    os << "</table>\n";
  }

  // Critical path.
  os << "<h2>Critical path</h2>\n<p class=\"sub\">The chain of actions whose ends determine the "
        "step's end, first to last.</p>\n<table><tr><th>#</th><th>rank</th><th>action</th>"
        "<th>start</th><th>duration</th></tr>\n";
  const std::size_t shown = std::min<std::size_t>(r.critical_path.size(), 400);
  for (std::size_t k = 0; k < shown; ++k) {
    const auto& a = r.actions.at(static_cast<std::size_t>(r.critical_path[k]));
    os << "<tr><td>" << k << "</td><td>" << a.rank << "</td><td>" << svg::escape(action_name(a))
       << "</td><td class=\"n\">" << ns_ms(a.start_ns) << "</td><td class=\"n\">"
       << ns_ms(a.end_ns - a.start_ns) << "</td></tr>\n";
  }
  os << "</table>\n";
  if (shown < r.critical_path.size())
    os << "<p class=\"sub\">(" << r.critical_path.size() - shown << " more)</p>\n";

  // Largest errors.
  if (in.compare && !in.compare->largest.empty()) {
    os << "<h2>Largest errors (end time, predicted - measured)</h2>\n<table><tr><th>rank</th>"
          "<th>action</th><th>start pred / meas</th><th>duration pred / meas</th>"
          "<th>end error</th></tr>\n";
    for (const auto& a : in.compare->largest) {
      const double e = a.end_error_ms();
      os << "<tr><td>" << a.rank << "</td><td>" << svg::escape(a.name) << "</td><td class=\"n\">"
         << ms(a.predicted_start_ms) << " / " << ms(a.measured_start_ms) << "</td><td class=\"n\">"
         << ms(a.predicted_ms) << " / " << ms(a.measured_ms) << "</td><td class=\"n "
         << (e < 0 ? "neg" : "pos") << "\">" << ms(e) << "</td></tr>\n";
    }
    os << "</table>\n";
  }
  os << "<script>document.documentElement.setAttribute('data-report-ready', '1');</script>\n"
     << "</body></html>\n";
  return os.str();
}

}  // namespace pipewright::sim
