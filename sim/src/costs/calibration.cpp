#include "pipewright/sim/calibration.hpp"

#include <algorithm>
#include <cmath>

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

}  // namespace pipewright::sim
