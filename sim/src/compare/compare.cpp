// Predicted versus measured (compare.hpp): the comparison of one step, its JSON and text, and
// the measured step drawn under the predicted one. Trace-driven replays are in trace_replay.cpp.
#include "pipewright/sim/compare.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "compare/trace_steps.hpp"
#include "costs/median.hpp"
#include "outputs/svg_util.hpp"
#include "outputs/timeline_svg.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sim/report.hpp"

namespace pipewright::sim {
namespace {

using detail::is_compute_category;
using detail::kind_slot;
using detail::steps_of;
using detail::StepView;
using detail::trace_ranks;
using sched::ActionKind;
using sched::TraceSlice;
using sched::TraceStream;

}  // namespace

CompareReport compare(const SimResult& predicted, const sched::Trace& measured,
                      const sched::CostTable* costs, const CompareOptions& options) {
  PW_CHECK(options.skip_steps >= 0, ConfigError, "--skip-steps must be >= 0");
  PW_CHECK(options.top_k >= 0, ConfigError, "--top must be >= 0");
  const std::int32_t pp = predicted.ranks;
  const std::int32_t replicas = std::max(predicted.dp, 1);
  const std::int32_t mranks = trace_ranks(measured);
  PW_CHECK(mranks == pp * replicas, ConfigError,
           "plan/trace mismatch: the plan has " << detail::plan_ranks_text(pp, replicas)
                                                << " but the measured trace has " << mranks);
  std::vector<StepView> steps = steps_of(measured);
  PW_CHECK(!steps.empty(), ConfigError, "the measured trace has no slices");
  if (static_cast<std::int64_t>(steps.size()) > options.skip_steps) {
    steps.erase(steps.begin(), steps.begin() + options.skip_steps);
  }

  // Predicted compute actions of the first simulated step, by pipeline rank.
  std::map<std::pair<std::int32_t, std::string>, const TimedAction*> pred;
  for (const auto& a : predicted.actions) {
    if (a.step != 0 || a.stream != Stream::kCompute || a.collective != Collective::kNone) continue;
    if (!sched::is_compute(a.action.kind)) continue;
    pred.emplace(std::make_pair(a.rank, action_name(a)), &a);
  }
  PW_CHECK(!pred.empty(), ConfigError,
           "the simulation recorded no actions (it needs record_actions)");

  // Every replica runs the predicted pipeline: world rank j x pp + r runs pipeline rank r's list.
  auto where = [&](std::int32_t world) {
    std::ostringstream os;
    os << "rank " << world;
    if (replicas > 1) os << " (replica " << world / pp << ", pipeline rank " << world % pp << ")";
    return os.str();
  };
  for (const auto& st : steps) {
    for (std::int32_t j = 0; j < replicas; ++j) {
      for (const auto& kv : pred) {
        const std::int32_t w = j * pp + kv.first.first;
        PW_CHECK(st.compute.count({w, kv.first.second}) == 1, ConfigError,
                 "plan/trace mismatch: the plan runs "
                     << kv.first.second << " on " << where(w)
                     << " but the measured trace has no such action in step " << st.step);
      }
    }
    for (const auto& kv : st.compute) {
      PW_CHECK(pred.count({kv.first.first % pp, kv.first.second}) == 1, ConfigError,
               "plan/trace mismatch: the measured trace runs "
                   << kv.first.second << " on " << where(kv.first.first) << " in step " << st.step
                   << ", which the plan does not have on that rank");
    }
  }

  CompareReport rep;
  rep.schedule = predicted.schedule;
  rep.ranks = pp;
  rep.replicas = replicas;
  rep.steps_used = static_cast<std::int32_t>(steps.size());
  rep.predicted_step_ms = predicted.step_end_ns.empty()
                              ? static_cast<double>(predicted.makespan_ns) / 1e6
                              : static_cast<double>(predicted.step_end_ns.front()) / 1e6;
  std::vector<double> step_ms;
  for (const auto& st : steps) {
    step_ms.push_back(st.period_ms());
    rep.step_numbers.push_back(st.step);
  }
  rep.per_step_measured_ms = step_ms;
  rep.measured_step_ms = median(step_ms);

  std::vector<ActionComparison> all;
  for (std::int32_t j = 0; j < replicas; ++j) {
    for (const auto& kv : pred) {
      const std::pair<std::int32_t, std::string> key{j * pp + kv.first.first, kv.first.second};
      std::vector<double> starts;
      std::vector<double> durs;
      for (const auto& st : steps) {
        const TraceSlice* s = st.compute.at(key);
        starts.push_back((s->start_us - st.start_us) / 1e3);
        durs.push_back(s->duration_us / 1e3);
      }
      ActionComparison c;
      c.rank = key.first;
      c.name = key.second;
      c.predicted_start_ms = static_cast<double>(kv.second->start_ns) / 1e6;
      c.predicted_ms = static_cast<double>(kv.second->end_ns - kv.second->start_ns) / 1e6;
      c.measured_start_ms = median(starts);
      c.measured_ms = median(durs);
      all.push_back(std::move(c));
    }
  }
  rep.matched_actions = static_cast<std::int64_t>(all.size());

  for (std::int32_t w = 0; w < pp * replicas; ++w) {
    RankComparison rc;
    rc.rank = w;
    rc.replica = w / pp;
    const auto& pr = predicted.per_rank.at(static_cast<std::size_t>(w % pp));
    rc.predicted_busy_ms = static_cast<double>(pr.busy_ns) / 1e6;
    rc.predicted_idle_ms = rep.predicted_step_ms - rc.predicted_busy_ms;
    std::vector<double> busy;
    std::vector<double> idle;
    for (const auto& st : steps) {
      double b = 0;  // this rank's entries only (the map is ordered by rank first)
      const auto end = st.compute.lower_bound({w + 1, std::string()});
      for (auto it = st.compute.lower_bound({w, std::string()}); it != end; ++it) {
        b += it->second->duration_us / 1e3;
      }
      busy.push_back(b);
      idle.push_back(st.period_ms() - b);
    }
    rc.measured_busy_ms = median(busy);
    rc.measured_idle_ms = median(idle);
    rc.predicted_peak_bytes = pr.peak_memory_bytes;
    if (costs != nullptr) {
      for (const auto& pm : costs->peak_memory) {
        if (pm.rank == w) rc.measured_peak_bytes = pm.peak_bytes;
      }
    }
    rep.per_rank.push_back(rc);
  }

  std::stable_sort(all.begin(), all.end(),
                   [](const ActionComparison& a, const ActionComparison& b) {
                     return std::fabs(a.end_error_ms()) > std::fabs(b.end_error_ms());
                   });
  if (static_cast<std::int64_t>(all.size()) > options.top_k)
    all.resize(static_cast<std::size_t>(options.top_k));
  rep.largest = std::move(all);
  return rep;
}

double CompareReport::per_step_mape() const noexcept {
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < per_step_predicted_ms.size() && i < per_step_measured_ms.size();
       ++i) {
    if (per_step_measured_ms[i] <= 0) continue;
    sum += std::fabs(per_step_predicted_ms[i] - per_step_measured_ms[i]) / per_step_measured_ms[i];
    ++n;
  }
  return n > 0 ? sum / static_cast<double>(n) : 0;
}

std::string to_json(const CompareReport& r) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["format"] = "pipewright-compare";
  j["version"] = 1;
  j["schedule"] = r.schedule;
  j["ranks"] = r.ranks;
  if (r.replicas > 1) {
    j["replicas"] = r.replicas;
    j["dp_algorithm"] = r.dp_algorithm;
    j["dp_period_steps"] = r.dp_period_steps;
  }
  j["steps_used"] = r.steps_used;
  j["predicted_step_ms"] = r.predicted_step_ms;
  j["measured_step_ms"] = r.measured_step_ms;
  j["step_error"] = r.step_error();
  j["prediction"] = r.prediction;
  j["matched_actions"] = r.matched_actions;
  if (!r.per_step_predicted_ms.empty()) {
    ordered_json steps = ordered_json::array();
    for (std::size_t i = 0; i < r.per_step_predicted_ms.size(); ++i) {
      ordered_json e;
      e["step"] = i < r.step_numbers.size() ? r.step_numbers[i] : static_cast<std::int64_t>(i);
      e["predicted_ms"] = r.per_step_predicted_ms[i];
      e["measured_ms"] = i < r.per_step_measured_ms.size() ? r.per_step_measured_ms[i] : 0.0;
      steps.push_back(e);
    }
    j["per_step"] = steps;
    j["per_step_mape"] = r.per_step_mape();
  }
  ordered_json ranks = ordered_json::array();
  for (const auto& rc : r.per_rank) {
    ordered_json e;
    e["rank"] = rc.rank;
    if (r.replicas > 1) e["replica"] = rc.replica;
    e["predicted_busy_ms"] = rc.predicted_busy_ms;
    e["measured_busy_ms"] = rc.measured_busy_ms;
    e["predicted_idle_ms"] = rc.predicted_idle_ms;
    e["measured_idle_ms"] = rc.measured_idle_ms;
    if (rc.predicted_peak_bytes) e["predicted_peak_bytes"] = *rc.predicted_peak_bytes;
    if (rc.measured_peak_bytes) e["measured_peak_bytes"] = *rc.measured_peak_bytes;
    ranks.push_back(e);
  }
  j["per_rank"] = ranks;
  if (!r.data_parallel.empty()) {
    ordered_json dp = ordered_json::array();
    for (const auto& d : r.data_parallel) {
      ordered_json e;
      e["rank"] = d.rank;
      e["replica"] = d.replica;
      e["stages"] = d.stages;
      e["predicted_wire_bytes_per_step"] = d.predicted_wire_bytes;
      e["measured_wire_bytes_per_step"] =
          d.measured_wire_bytes ? ordered_json(*d.measured_wire_bytes) : ordered_json();
      e["predicted_comm_ms_per_step"] = d.predicted_comm_ms;
      e["predicted_exposed_ms_per_step"] = d.predicted_exposed_ms;
      e["measured_exposed_ms_per_step"] =
          d.measured_exposed_ms ? ordered_json(*d.measured_exposed_ms) : ordered_json();
      if (d.measured_collectives) e["measured_collectives_per_step"] = *d.measured_collectives;
      dp.push_back(e);
    }
    j["data_parallel"] = dp;
  }
  ordered_json largest = ordered_json::array();
  for (const auto& a : r.largest) {
    ordered_json e;
    e["rank"] = a.rank;
    e["action"] = a.name;
    e["predicted_start_ms"] = a.predicted_start_ms;
    e["measured_start_ms"] = a.measured_start_ms;
    e["predicted_ms"] = a.predicted_ms;
    e["measured_ms"] = a.measured_ms;
    e["end_error_ms"] = a.end_error_ms();
    largest.push_back(e);
  }
  j["largest_errors"] = largest;
  return j.dump(2) + "\n";
}

std::string to_text(const CompareReport& r) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line,
                "%s, %d ranks%s, %d measured steps: predicted %.3f ms, measured %.3f ms, "
                "error %+.2f%%\n",
                r.schedule.c_str(), r.ranks,
                r.replicas > 1 ? (" x " + std::to_string(r.replicas) + " replicas").c_str() : "",
                r.steps_used, r.predicted_step_ms, r.measured_step_ms, 100 * r.step_error());
  os << line;
  if (!r.per_step_predicted_ms.empty()) {
    std::snprintf(line, sizeof line,
                  "trace-driven replay of %zu steps: mean absolute per-step error %.2f%%\n",
                  r.per_step_predicted_ms.size(), 100 * r.per_step_mape());
    os << line;
  }
  os << "rank  busy pred/meas (ms)   idle pred/meas (ms)   peak memory pred/meas (MiB)\n";
  for (const auto& rc : r.per_rank) {
    std::string mem = "-";
    if (rc.predicted_peak_bytes && rc.measured_peak_bytes) {
      char m[64];
      std::snprintf(m, sizeof m, "%.1f / %.1f",
                    static_cast<double>(*rc.predicted_peak_bytes) / 1048576.0,
                    static_cast<double>(*rc.measured_peak_bytes) / 1048576.0);
      mem = m;
    }
    std::snprintf(line, sizeof line, "%4d  %8.3f / %-8.3f   %8.3f / %-8.3f   %s\n", rc.rank,
                  rc.predicted_busy_ms, rc.measured_busy_ms, rc.predicted_idle_ms,
                  rc.measured_idle_ms, mem.c_str());
    os << line;
  }
  if (!r.data_parallel.empty()) {
    // Note [Data-parallel comparison]: means per step over a period / the measured steps.
    std::snprintf(line, sizeof line,
                  "data parallel (%s, %d replicas, period %d step(s)), per step:\n"
                  "rank  replica  stages  wire MB pred/meas       comm ms pred  "
                  "exposed ms pred/meas\n",
                  r.dp_algorithm.c_str(), r.replicas, r.dp_period_steps);
    os << line;
    for (const auto& d : r.data_parallel) {
      std::string stages;
      for (std::size_t k = 0; k < d.stages.size(); ++k)
        stages += (k > 0 ? "," : "") + std::to_string(d.stages[k]);
      char wire[64] = "-";
      char exposed[64] = "-";
      if (d.measured_wire_bytes)
        std::snprintf(wire, sizeof wire, "%.4f", *d.measured_wire_bytes / 1e6);
      if (d.measured_exposed_ms)
        std::snprintf(exposed, sizeof exposed, "%.3f", *d.measured_exposed_ms);
      std::snprintf(line, sizeof line, "%4d  %7d  %6s  %9.4f / %-10s  %12.3f  %8.3f / %s\n", d.rank,
                    d.replica, stages.c_str(), d.predicted_wire_bytes / 1e6, wire,
                    d.predicted_comm_ms, d.predicted_exposed_ms, exposed);
      os << line;
    }
  }
  if (!r.largest.empty()) {
    os << "largest errors (end time, predicted - measured):\n";
    for (const auto& a : r.largest) {
      std::snprintf(
          line, sizeof line,
          "  rank %d %-10s start %8.3f / %-8.3f  dur %7.3f / %-7.3f  end error %+.3f ms\n", a.rank,
          a.name.c_str(), a.predicted_start_ms, a.measured_start_ms, a.predicted_ms, a.measured_ms,
          a.end_error_ms());
      os << line;
    }
  }
  return os.str();
}

SimResult measured_as_result(const sched::Trace& measured, std::int64_t step) {
  SimResult r;
  r.schedule = measured.info.schedule;
  r.ranks = trace_ranks(measured);
  double t0 = 0;
  double t1 = 0;
  bool any = false;
  for (const auto& s : measured.slices) {
    if (s.step != step) continue;
    if (!any) {
      t0 = s.start_us;
      t1 = s.start_us + s.duration_us;
      any = true;
    }
    t0 = std::min(t0, s.start_us);
    t1 = std::max(t1, s.start_us + s.duration_us);
  }
  std::set<std::int32_t> stages;
  std::int32_t microbatches = 0;
  for (const auto& s : measured.slices) {
    if (s.step != step) continue;
    auto action = sched::try_parse_action(s.name);
    TimedAction a;
    a.rank = s.rank;
    a.step = 0;
    a.start_ns = std::llround((s.start_us - t0) * 1e3);
    a.end_ns = std::llround((s.start_us + s.duration_us - t0) * 1e3);
    if (s.stream == TraceStream::kDpAllReduce) {
      a.stream = Stream::kDpAllReduce;
      a.collective = Collective::kDdpBucket;
      a.action = sched::Action::stage_only(std::max(s.stage, 0), ActionKind::kReduceGrad);
    } else if (action) {
      a.action = *action;
      a.stream = s.stream == TraceStream::kCompute ? Stream::kCompute
                 : s.stream == TraceStream::kSend  ? Stream::kSend
                                                   : Stream::kRecv;
      stages.insert(action->stage);
      microbatches = std::max(microbatches, action->microbatch + 1);
    } else {
      continue;
    }
    r.actions.push_back(a);
  }
  // Pair each receive with its send (by producer stage, consumer stage, microbatch, direction)
  // for the timeline's arrows; only when unambiguous (one replica).
  using Key = std::tuple<std::int32_t, std::int32_t, std::int32_t, bool>;
  std::map<Key, std::int64_t> sends;
  std::map<Key, int> recv_count;
  auto key_of = [](const sched::Action& x) {
    const bool back = x.kind == ActionKind::kSendB || x.kind == ActionKind::kRecvB;
    const bool send = sched::is_send(x.kind);
    return (send != back) ? Key{x.stage, x.peer_stage, x.microbatch, back}
                          : Key{x.peer_stage, x.stage, x.microbatch, back};
  };
  for (std::size_t i = 0; i < r.actions.size(); ++i) {
    const auto& x = r.actions[i].action;
    if (sched::is_send(x.kind)) sends[key_of(x)] = static_cast<std::int64_t>(i);
    if (sched::is_recv(x.kind)) ++recv_count[key_of(x)];
  }
  for (auto& a : r.actions) {
    if (!sched::is_recv(a.action.kind)) continue;
    const Key k = key_of(a.action);
    const auto it = sends.find(k);
    if (it == sends.end() || recv_count[k] != 1) continue;
    a.match = it->second;
    a.peer_rank = r.actions[static_cast<std::size_t>(it->second)].rank;
    r.actions[static_cast<std::size_t>(it->second)].peer_rank = a.rank;
  }
  r.stages = static_cast<std::int32_t>(stages.size());
  r.microbatches = microbatches;
  r.makespan_ns = std::llround((t1 - t0) * 1e3);
  r.step_end_ns = {r.makespan_ns};
  r.per_rank.resize(static_cast<std::size_t>(r.ranks));
  for (const auto& a : r.actions) {
    if (a.stream == Stream::kCompute && sched::is_compute(a.action.kind)) {
      r.per_rank[static_cast<std::size_t>(a.rank)].busy_ns += a.end_ns - a.start_ns;
    }
  }
  for (std::size_t i = 0; i < r.per_rank.size(); ++i) {
    r.per_rank[i].rank = static_cast<std::int32_t>(i);
    r.per_rank[i].idle_ns = r.makespan_ns - r.per_rank[i].busy_ns;
  }
  return r;
}

namespace {

std::int64_t median_step_number(const sched::Trace& measured, const CompareReport& report) {
  std::vector<StepView> steps = steps_of(measured);
  std::int64_t chosen = steps.empty() ? 0 : steps.front().step;
  double best = -1;
  for (const auto& st : steps) {
    const double d = std::fabs(st.period_ms() - report.measured_step_ms);
    if (best < 0 || d < best) {
      best = d;
      chosen = st.step;
    }
  }
  return chosen;
}

}  // namespace

SimResult measured_median_step(const sched::Trace& measured, const CompareReport& report) {
  return measured_as_result(measured, median_step_number(measured, report));
}

std::string compare_svg(const SimResult& predicted, const sched::Trace& measured,
                        const CompareReport& report) {
  // The measured step drawn: the one whose duration is closest to the median.
  const std::int64_t chosen = median_step_number(measured, report);
  const SimResult meas = measured_as_result(measured, chosen);
  // One time axis and one width for both panels.
  TimelineOptions top;
  top.span_ns = std::max(predicted.makespan_ns, meas.makespan_ns);
  top.width_px =
      std::max(timeline_width(predicted, top.span_ns), timeline_width(meas, top.span_ns));
  char title[256];
  std::snprintf(title, sizeof title, "predicted (%s): step %.3f ms", report.schedule.c_str(),
                report.predicted_step_ms);
  top.title = title;
  top.id_prefix = "pred";
  TimelineOptions bottom = top;
  std::snprintf(title, sizeof title,
                "measured (step %lld, median of %d): step %.3f ms, error %+.2f%%",
                static_cast<long long>(chosen), report.steps_used, report.measured_step_ms,
                100 * report.step_error());
  bottom.title = title;
  bottom.legend = false;
  bottom.id_prefix = "meas";
  const TimelinePanel p = timeline_panel(predicted, top);
  const TimelinePanel m = timeline_panel(meas, bottom);
  TimelinePanel both;
  both.width = p.width;
  both.height = p.height + m.height;
  both.defs = p.defs + m.defs;
  both.body = "<g>\n" + p.body + "</g>\n<g transform=\"translate(0," + svg::num(p.height) +
              ")\">\n" + m.body + "</g>\n";
  return svg_document(both);
}

}  // namespace pipewright::sim
