#include "pipewright/sim/calibration.hpp"

#include <algorithm>
#include <cmath>

#include "costs/median.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::sim {
namespace {

struct Line {
  double intercept_ms = 0;
  double slope_ms_per_x = 0;
};

// Weighted least squares of t = a + b x with weights 1 / t^2 (relative error), a, b >= 0.
Line fit_line(const std::vector<double>& x, const std::vector<double>& t) {
  double sw = 0, swx = 0, swxx = 0, swt = 0, swxt = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (t[i] * t[i]);
    sw += w;
    swx += w * x[i];
    swxx += w * x[i] * x[i];
    swt += w * t[i];
    swxt += w * x[i] * t[i];
  }
  Line l;
  const double det = sw * swxx - swx * swx;
  if (det > 0) {
    l.slope_ms_per_x = (sw * swxt - swx * swt) / det;
    l.intercept_ms = (swt - l.slope_ms_per_x * swx) / sw;
  }
  if (det <= 0 || l.intercept_ms < 0) {  // through the origin
    l.intercept_ms = 0;
    l.slope_ms_per_x = swxx > 0 ? swxt / swxx : 0;
  }
  if (l.slope_ms_per_x < 0) {  // constant time
    l.slope_ms_per_x = 0;
    l.intercept_ms = swt / sw;
  }
  return l;
}

void check_points(const std::vector<TimingPoint>& points, const char* what) {
  PW_CHECK(points.size() >= 2, ConfigError,
           what << " fit needs at least 2 message sizes, got " << points.size());
  for (const auto& p : points) {
    PW_CHECK(p.bytes >= 0 && std::isfinite(p.ms) && p.ms > 0, ConfigError,
             what << " fit: bad sample (" << p.bytes << " bytes, " << p.ms << " ms)");
  }
}

// bandwidth in 1e9 bytes/s from a slope in ms per byte.
double gb_per_s(double ms_per_byte) { return ms_per_byte > 0 ? 1e-6 / ms_per_byte : 0; }

LinkFit finish(const Line& line, const std::vector<double>& x, const std::vector<double>& t,
               double latency_ms, double ms_per_byte) {
  LinkFit f;
  f.link.latency_ms = latency_ms;
  f.link.bandwidth_gb_per_s = gb_per_s(ms_per_byte);
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = std::abs(line.intercept_ms + line.slope_ms_per_x * x[i] - t[i]) / t[i];
    sum += e;
    f.max_abs_relative_error = std::max(f.max_abs_relative_error, e);
  }
  f.mean_abs_relative_error = sum / static_cast<double>(x.size());
  return f;
}

// A ring of `steps` steps, each moving 1/n of the buffer: t = steps * latency + steps / n *
// bytes / bandwidth.
LinkFit fit_ring(const std::vector<TimingPoint>& points, std::int32_t n, double steps) {
  std::vector<double> x, t;
  for (const auto& p : points) {
    x.push_back(steps / n * static_cast<double>(p.bytes));
    t.push_back(p.ms);
  }
  const Line line = fit_line(x, t);
  return finish(line, x, t, line.intercept_ms / steps, line.slope_ms_per_x);
}

}  // namespace

LinkFit fit_p2p(const std::vector<TimingPoint>& points) {
  check_points(points, "point-to-point");
  std::vector<double> x, t;
  for (const auto& p : points) {
    x.push_back(static_cast<double>(p.bytes));
    t.push_back(p.ms);
  }
  const Line line = fit_line(x, t);
  return finish(line, x, t, line.intercept_ms, line.slope_ms_per_x);
}

LinkFit fit_ring_allreduce(const std::vector<TimingPoint>& points, std::int32_t n) {
  check_points(points, "all-reduce");
  PW_CHECK(n >= 2, ConfigError, "all-reduce fit needs >= 2 ranks, got " << n);
  return fit_ring(points, n, 2.0 * (n - 1));
}

LinkFit fit_ring_one_pass(const std::vector<TimingPoint>& points, std::int32_t n) {
  check_points(points, "reduce-scatter / all-gather");
  PW_CHECK(n >= 2, ConfigError, "reduce-scatter / all-gather fit needs >= 2 ranks, got " << n);
  return fit_ring(points, n, static_cast<double>(n - 1));
}

// Note [Link fit of sharded collectives]: between nodes, the relative-error least squares over
// every size (fit_ring) lets the many small buffers, whose times on a shared host move by
// milliseconds from run to run, set the slope: two calibrations of one 100 Mbit/s link gave
// 0.0120 and 0.0138 GB/s for the same all-gather. Like Note [Pair fit] (tools/cli/
// cmd_calibrate.cpp), the latency is the median time of the buffers up to 4 KiB, per ring step;
// the bandwidth is then the least-squares slope (relative errors, latency fixed) over the
// buffers that take at least 4x that time, where the wire dominates, at whatever sizes those
// are (not only the largest two: on a shaped link the largest buffer is the slowest per byte,
// and a job's buckets are smaller). Fewer than one such buffer: fit_ring's line.
namespace {

// fit_ring's model fitted as a link (Note [Link fit of sharded collectives]).
LinkFit fit_ring_link(const std::vector<TimingPoint>& points, std::int32_t n, double steps) {
  std::vector<double> small;
  for (const auto& p : points) {
    if (p.bytes <= 4096) small.push_back(p.ms);
  }
  if (small.empty()) return fit_ring(points, n, steps);
  const double t0 = median(small);
  // Minimise sum ((t0 + x s - t) / t)^2 over s: s = sum (x/t)(1 - t0/t) / sum (x/t)^2.
  double num = 0, den = 0;
  std::vector<double> x, t;
  for (const auto& p : points) {
    x.push_back(steps / n * static_cast<double>(p.bytes));
    t.push_back(p.ms);
    if (p.ms < 4 * t0) continue;
    const double a = x.back() / p.ms;
    num += a * (1 - t0 / p.ms);
    den += a * a;
  }
  if (den <= 0 || num <= 0) return fit_ring(points, n, steps);
  const Line line{t0, num / den};
  return finish(line, x, t, t0 / steps, line.slope_ms_per_x);
}

}  // namespace

LinkFit fit_ring_one_pass_link(const std::vector<TimingPoint>& points, std::int32_t n) {
  check_points(points, "reduce-scatter / all-gather");
  PW_CHECK(n >= 2, ConfigError, "reduce-scatter / all-gather fit needs >= 2 ranks, got " << n);
  return fit_ring_link(points, n, static_cast<double>(n - 1));
}

LinkFit fit_ring_allreduce_link(const std::vector<TimingPoint>& points, std::int32_t n) {
  check_points(points, "all-reduce");
  PW_CHECK(n >= 2, ConfigError, "all-reduce fit needs >= 2 ranks, got " << n);
  return fit_ring_link(points, n, 2.0 * (n - 1));
}

}  // namespace pipewright::sim
