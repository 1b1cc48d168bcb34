// Small helpers shared by the SVG and HTML writers of sim/ (timeline, memory chart, compare,
// report). Private to pw_sim.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace pipewright::sim::svg {

// The one font of every picture pipewright draws.
inline constexpr const char* kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";

// A coordinate or length with 2 decimals.
inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Escapes text for XML content and attribute values.
inline std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "12.5 ms", "850 us", "1.20 s" for a duration in milliseconds.
inline std::string human_ms(double ms) {
  char buf[32];
  if (std::fabs(ms) >= 1000) {
    std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
  } else if (std::fabs(ms) >= 1 || ms == 0) {
    std::snprintf(buf, sizeof buf, "%.3g ms", ms);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g us", ms * 1000);
  }
  return buf;
}

// "1.50 GiB", "12.0 MiB", "512 B".
inline std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
  return buf;
}

// A "nice" tick step (1, 2 or 5 x 10^k) giving at most ~`ticks` ticks over `span`.
inline double tick_step(double span, double ticks = 10) {
  if (span <= 0) return 1;
  const double raw = span / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    if (f * mag >= raw) return f * mag;
  }
  return 10 * mag;
}

// Colour from hue (degrees), saturation and lightness (0..1), as "#rrggbb".
inline std::string hsl(double h, double s, double l) {
  auto f = [&](double n) {
    const double k = std::fmod(n + h / 30.0, 12.0);
    const double a = s * std::fmin(l, 1 - l);
    return l - a * std::max(-1.0, std::min({k - 3, 9 - k, 1.0}));
  };
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02X%02X%02X", static_cast<int>(std::lround(255 * f(0))),
                static_cast<int>(std::lround(255 * f(8))),
                static_cast<int>(std::lround(255 * f(4))));
  return buf;
}

// Hue of stage `s`: well separated for the first stages (a golden-angle walk).
inline double stage_hue(std::int32_t s) { return std::fmod(215.0 + 137.508 * s, 360.0); }

}  // namespace pipewright::sim::svg
