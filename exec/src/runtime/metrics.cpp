// The --metrics file (metrics.hpp, Note [Metrics file]).
#include "runtime/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

// Shortest text that reads back as the same double; JSON has no NaN/Inf, so those are null.
std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  double back = 0;
  for (int digits = 6; digits < 17; ++digits) {
    char shorter[40];
    std::snprintf(shorter, sizeof shorter, "%.*g", digits, v);
    if (std::sscanf(shorter, "%lf", &back) == 1 && back == v) return shorter;
  }
  return buf;
}

}  // namespace

std::string metrics_line(const StepLog& log, std::int64_t tokens_per_sample,
                         const std::vector<std::int64_t>& peak_memory_bytes) {
  std::ostringstream os;
  os << "{\"step\": " << log.step + 1 << ", \"loss\": " << number(log.loss);
  if (log.has_eval_loss) os << ", \"eval_loss\": " << number(log.eval_loss);
  os << ", \"lr\": " << number(log.lr);
  if (log.has_grad_norm) os << ", \"grad_norm\": " << number(log.grad_norm);
  os << ", \"loss_scale\": " << number(log.loss_scale)
     << ", \"skipped\": " << (log.skipped ? "true" : "false")
     << ", \"step_ms\": " << number(log.step_ms)
     << ", \"samples_per_s\": " << number(log.samples_per_s);
  if (tokens_per_sample > 0) {
    os << ", \"tokens_per_s\": "
       << number(log.samples_per_s * static_cast<double>(tokens_per_sample));
  }
  os << ", \"peak_memory_bytes\": [";
  for (std::size_t r = 0; r < peak_memory_bytes.size(); ++r) {
    os << (r ? ", " : "") << peak_memory_bytes[r];
  }
  os << "]}";
  return os.str();
}

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  PW_CHECK(out_.good(), ConfigError, "--metrics: cannot write '" << path << "'");
}

void MetricsWriter::write(const StepLog& log, std::int64_t tokens_per_sample,
                          const std::vector<std::int64_t>& peak_memory_bytes) {
  out_ << metrics_line(log, tokens_per_sample, peak_memory_bytes) << '\n';
  out_.flush();
  PW_CHECK(out_.good(), Error, "--metrics: writing '" << path_ << "' failed");
}

}  // namespace pipewright::exec
