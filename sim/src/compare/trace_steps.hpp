// The measured trace by step, shared by compare.cpp and trace_replay.cpp (private to sim/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "costs/median.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/trace.hpp"

namespace pipewright::sim::detail {

// Note [Periodic syncs in compare]: the mean of the last floor(n / p) p values of `v` (the whole
// periods of p steps at its end). Precondition: v.size() >= p >= 1.
inline double mean_of_whole_periods(const std::vector<double>& v, std::size_t p) {
  const std::size_t used = v.size() / p * p;
  double sum = 0;
  for (std::size_t i = v.size() - used; i < v.size(); ++i) sum += v[i];
  return sum / static_cast<double>(used);
}

inline bool is_compute_category(const std::string& category) {
  return category == "F" || category == "B" || category == "I" || category == "W";
}

// The replay slot of a compute slice's category (F 0, B 1, I 2, W 3, OPTIM 4), or -1.
inline int kind_slot(const std::string& category) {
  return category == "F"       ? 0
         : category == "B"     ? 1
         : category == "I"     ? 2
         : category == "W"     ? 3
         : category == "OPTIM" ? 4
                               : -1;
}

// Note [Measured step period]: a measured step lasts from its first slice (on any rank) to the
// next step's first slice, not to its own last slice. Between two steps the executor runs work
// no slice records: the loss all-reduce over every rank (which waits for the slowest rank, and
// on a shared link for whatever is queued on it), the metrics, and with ZeRO-1 the wait for the
// all-gathers launched after OPTIM (on a 100 Mbit/s link 36-48% of the step: bench/fidelity.sh's
// ZeRO-1 cells measured 144-158 ms spans against 210-227 ms between step starts). The simulator's
// step ends when its last collective does, so the period is what it predicts. The last step has
// no successor: its span plus the median of the other steps' between-step time (period minus
// span); a single step is its span.
struct StepView {
  std::int64_t step = 0;
  double start_us = 0;
  double end_us = 0;     // the end of its last slice
  double period_us = 0;  // Note [Measured step period]
  [[nodiscard]] double period_ms() const noexcept { return period_us / 1e3; }
  // (rank, name) -> compute slice
  std::map<std::pair<std::int32_t, std::string>, const sched::TraceSlice*> compute;
};

inline std::int32_t trace_ranks(const sched::Trace& t) {
  std::int32_t ranks = t.ranks;
  for (const auto& s : t.slices) ranks = std::max(ranks, s.rank + 1);
  return ranks;
}

// "2 ranks" or "2 ranks x 2 replicas = 4 ranks": the world ranks a plan of `ranks` pipeline
// ranks with `replicas` data-parallel replicas runs on (for plan/trace mismatch messages).
inline std::string plan_ranks_text(std::int32_t ranks, std::int32_t replicas) {
  std::string out = std::to_string(ranks) + " ranks";
  if (replicas > 1) {
    out += " x " + std::to_string(replicas) + " replicas = " + std::to_string(ranks * replicas) +
           " ranks";
  }
  return out;
}

// Groups the measured slices by step; throws when a rank runs one compute action twice in a step.
inline std::vector<StepView> steps_of(const sched::Trace& t) {
  std::map<std::int64_t, StepView> steps;
  for (const auto& s : t.slices) {
    auto [it, inserted] = steps.try_emplace(s.step);
    StepView& v = it->second;
    if (inserted) {
      v.step = s.step;
      v.start_us = s.start_us;
      v.end_us = s.start_us + s.duration_us;
    }
    v.start_us = std::min(v.start_us, s.start_us);
    v.end_us = std::max(v.end_us, s.start_us + s.duration_us);
    if (s.stream == sched::TraceStream::kCompute && is_compute_category(s.category)) {
      const bool fresh = v.compute.emplace(std::make_pair(s.rank, s.name), &s).second;
      PW_CHECK(
          fresh, ConfigError,
          "measured trace: rank " << s.rank << " runs " << s.name << " twice in step " << s.step);
    }
  }
  std::vector<StepView> out;
  for (auto& kv : steps) out.push_back(std::move(kv.second));
  std::vector<double> gaps;  // period minus span of every step with a successor
  for (std::size_t i = 0; i + 1 < out.size(); ++i) {
    out[i].period_us = std::max(out[i + 1].start_us - out[i].start_us, 0.0);
    gaps.push_back(std::max(out[i].period_us - (out[i].end_us - out[i].start_us), 0.0));
  }
  if (!out.empty()) out.back().period_us = out.back().end_us - out.back().start_us + median(gaps);
  return out;
}

}  // namespace pipewright::sim::detail
