// The --metrics file (metrics.hpp, Note [Metrics file]).
#include "runtime/metrics.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
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

namespace {

// The lines of `path` whose "step" is at most `last` (a line that does not start as metrics_line
// writes it, e.g. a torn last line, ends the kept part).
std::string lines_up_to(const std::string& path, std::int64_t last) {
  std::ifstream in(path);
  std::string kept, line;
  const std::string head = "{\"step\": ";
  while (std::getline(in, line)) {
    if (line.compare(0, head.size(), head) != 0) break;
    std::int64_t step = 0;
    if (std::sscanf(line.c_str() + head.size(), "%" SCNd64, &step) != 1 || step > last) break;
    kept += line + '\n';
  }
  return kept;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, std::int64_t resumed_step) : path_(path) {
  if (resumed_step > 0) {
    // Note [Metrics file]: keep steps 1..resumed_step; replace the file atomically.
    const std::string kept = lines_up_to(path, resumed_step);
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << kept;
      out.flush();
      PW_CHECK(out.good(), ConfigError, "--metrics: cannot write '" << tmp << "'");
    }
    PW_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, ConfigError,
             "--metrics: cannot replace '" << path << "'");
  }
  out_.open(path, resumed_step > 0 ? std::ios::app : std::ios::trunc);
  PW_CHECK(out_.good(), ConfigError, "--metrics: cannot write '" << path << "'");
}

void MetricsWriter::write(const StepLog& log, std::int64_t tokens_per_sample,
                          const std::vector<std::int64_t>& peak_memory_bytes) {
  out_ << metrics_line(log, tokens_per_sample, peak_memory_bytes) << '\n';
  out_.flush();
  PW_CHECK(out_.good(), Error, "--metrics: writing '" << path_ << "' failed");
}

}  // namespace pipewright::exec
