// The profile of a run (make_profile, run_report.hpp): what `pipewright simulate --profile`
// reads. Per-stage per-kind statistics after warm-up, measured p2p time (Note [Measured p2p
// time]), comm overhead (Note [Comm overhead]), dedicated-core times recovered from shared cores
// (Note [Shared cores in profiles]), correlations (Note [Correlated sampling]), activation and
// runtime memory.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "report/run_report.hpp"

namespace pipewright::exec {

namespace {

using sched::ActionKind;

sched::KindStats stats_of(std::vector<double> v) {
  sched::KindStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(pos);
    const auto hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  s.median_ms = at(0.5);
  s.p10_ms = at(0.1);
  s.p90_ms = at(0.9);
  s.samples = static_cast<std::int64_t>(v.size());
  for (int k = 0; k <= 20; ++k) s.quantiles_ms.push_back(at(k / 20.0));
  double sum = 0;
  for (double x : v) sum += x;
  s.mean_ms = sum / static_cast<double>(v.size());
  return s;
}

// Note [Comm overhead]: the executor posts a rank's consecutive SEND/RECV actions as one p2p
// batch and waits for its receives (interpreter.cpp, Note [p2p batches]); on CPU backends posting
// and completing a batch costs compute-stream time (Gloo hands each operation to its own thread
// and back, ~0.1-0.4 ms here) even when the data is already there. The profile's
// comm_overhead_ms is the median, over the batches that did not wait for data (batches of sends
// only, and batches whose every receive's matching send had finished before the batch started),
// of the batch's duration less the time its SENDs spent inside the transport's send calls
// (Note [Send time] in run_report.hpp): software overhead only. Those batches still waited for
// their sends to leave: on a 100 Mbit/s link the send calls held 2-8 ms of a batch (the median
// batch 3.8 ms against 0.26 ms on GPipe's), the simulator charged that again on top of the
// link's transfer time, and 1F1B was predicted 1.74x its measured step. The send-call time is
// kept as comm_send_ms (the same batches' median; informational). The simulator charges
// comm_overhead_ms once per batch on the compute stream. Groups of receives only are left out:
// with pre-posted receives a RECV is recorded where its consumer waited for it (interpreter.cpp,
// Note [Receives wait at their consumer]), which posts nothing.
struct BatchOverhead {
  double overhead_ms = 0;
  double send_ms = 0;
};
BatchOverhead comm_overhead(
    const std::vector<RankRecord>& records,
    const std::map<TransferKey, std::pair<const TimedAction*, const TimedAction*>>& transfers,
    int pp, std::int64_t warmup_steps) {
  std::vector<double> samples, send_samples;
  for (const auto& r : records) {
    const int replica = r.world_rank / pp;
    const auto& acts = r.actions;
    for (std::size_t i = 0; i < acts.size();) {
      if (!sched::is_comm(acts[i].action.kind)) {
        ++i;
        continue;
      }
      std::size_t j = i;
      std::int64_t start = acts[i].start_ns, end = acts[i].end_ns;
      bool ready = true;
      for (; j < acts.size() && sched::is_comm(acts[j].action.kind) && acts[j].step == acts[i].step;
           ++j) {
        start = std::min(start, acts[j].start_ns);
        end = std::max(end, acts[j].end_ns);
      }
      for (std::size_t k = i; k < j; ++k) {
        if (sched::is_send(acts[k].action.kind)) continue;
        auto it = transfers.find(transfer_key(acts[k].action, acts[k].step, replica));
        ready = ready && it != transfers.end() && it->second.first != nullptr &&
                it->second.first->end_ns <= start;
      }
      bool sends = false;
      std::int64_t send_ns = 0;  // Note [Send time]: inside the batch's send calls
      for (std::size_t k = i; k < j; ++k) {
        if (!sched::is_send(acts[k].action.kind)) continue;
        sends = true;
        send_ns += acts[k].send_ns;
      }
      if (ready && sends && acts[i].step >= warmup_steps) {
        send_ns = std::min(send_ns, end - start);
        samples.push_back(static_cast<double>(end - start - send_ns) / 1e6);
        send_samples.push_back(static_cast<double>(send_ns) / 1e6);
      }
      i = j;
    }
  }
  if (samples.empty()) return {};
  return {stats_of(samples).median_ms, stats_of(send_samples).median_ms};
}

// Note [Data-parallel sync work]: a data-parallel sync (Note [Data-parallel sync] in
// run_report.hpp) both computes (SGP flattens, scales and unflattens the parameters, DiLoCo
// steps its outer optimizer, SlowMo its slow momentum) and waits for its collectives, whose time
// the simulator prices from the cluster. Its work is the sync's duration less the step's
// measured data-parallel wait (DataParallelStep::exposed_wait_ns, the training thread blocked on
// data-parallel communication; for the algorithms that sync here all of it falls inside the
// sync), at least 0. dp_sync_compute_ms is the median over the measured steps in which the
// algorithm communicated (collectives > 0) of every rank; 0 without such steps. The simulator
// charges it on the compute stream where those algorithms communicate.
double dp_sync_compute_ms(const std::vector<RankRecord>& records, std::int64_t warmup_steps) {
  std::vector<double> samples;
  for (const auto& r : records) {
    std::map<std::int64_t, const DataParallelStep*> by_step;
    for (const auto& d : r.dp_steps) by_step[d.step] = &d;
    for (const auto& y : r.dp_syncs) {
      if (y.step < warmup_steps) continue;
      auto it = by_step.find(y.step);
      if (it == by_step.end() || it->second->collectives <= 0) continue;
      const std::int64_t work = y.end_ns - y.start_ns - it->second->exposed_wait_ns;
      samples.push_back(static_cast<double>(std::max<std::int64_t>(0, work)) / 1e6);
    }
  }
  return samples.empty() ? 0.0 : stats_of(samples).median_ms;
}

// Note [Step overhead]: between two training steps the executor runs work no action records:
// the loss all-reduce over every rank (the step's barrier: it ends once the last rank has
// arrived), the step's log line and metrics, and the data loader's hand-over. Per measured step
// s whose successor was measured too, the gap from the latest end of anything step s recorded
// on any rank (actions, data-parallel syncs, data waits) to the earliest start of anything of
// step s + 1; step_overhead_ms is the median of those gaps (0 without two measured steps). The
// simulator adds it after each rank's step (Note [Between steps] in sim/src/engine/engine_dp.cpp).
// Measured (bench/fidelity.sh, 2026-11-29): 0.14-0.66 ms at dp 1 and 0.8-1.4 ms at dp 2 on one
// host (steps of 26-90 ms), 0.6-2 ms at dp 1 and 3-8 ms with DDP across the 100 Mbit/s link, and
// 60-70 ms with ZeRO-1 there (the loss all-reduce queues behind the all-gathers launched after
// OPTIM).
double step_overhead_ms(const std::vector<RankRecord>& records, std::int64_t warmup_steps) {
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> span;  // step -> (first, last)
  auto note = [&](std::int64_t step, std::int64_t start, std::int64_t end) {
    if (step < warmup_steps) return;
    auto [it, fresh] = span.try_emplace(step, start, end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, start);
      it->second.second = std::max(it->second.second, end);
    }
  };
  for (const auto& r : records) {
    for (const auto& a : r.actions) note(a.step, a.start_ns, a.end_ns);
    for (const auto& y : r.dp_syncs) note(y.step, y.start_ns, y.end_ns);
    for (const auto& w : r.data_waits) note(w.step, w.start_ns, w.end_ns);
  }
  std::vector<double> gaps;
  for (auto it = span.begin(); it != span.end(); ++it) {
    const auto next = std::next(it);
    if (next == span.end() || next->first != it->first + 1) continue;
    gaps.push_back(
        static_cast<double>(std::max<std::int64_t>(0, next->second.first - it->second.second)) /
        1e6);
  }
  return gaps.empty() ? 0.0 : stats_of(gaps).median_ms;
}

bool uses_core(ActionKind kind) noexcept {
  return sched::is_compute(kind) || kind == ActionKind::kOptimizerStep;
}

// The CPU share over time of one host's ranks (Note [Shared cores in profiles]): n(t), the
// number of ranks in a compute action, as segments, and prefix integrals of min(1, C / (n + k))
// for k = 0 (compute) and k = 1 (a transfer's progress thread).
class HostShare {
 public:
  HostShare(std::int64_t cores, const std::vector<const RankRecord*>& ranks) : cores_(cores) {
    std::vector<std::pair<std::int64_t, int>> edges;
    for (const auto* r : ranks) {
      for (const auto& a : r->actions) {
        if (!uses_core(a.action.kind) || a.end_ns <= a.start_ns) continue;
        edges.emplace_back(a.start_ns, +1);
        edges.emplace_back(a.end_ns, -1);
      }
    }
    std::sort(edges.begin(), edges.end());
    int n = 0;
    for (std::size_t i = 0; i < edges.size();) {
      const std::int64_t t = edges[i].first;
      for (; i < edges.size() && edges[i].first == t; ++i) n += edges[i].second;
      times_.push_back(t);
      count_.push_back(n);
    }
    for (int k = 0; k < 2; ++k) {
      auto& pre = prefix_[k];
      pre.assign(times_.size(), 0.0);
      for (std::size_t j = 1; j < times_.size(); ++j) {
        pre[j] = pre[j - 1] + static_cast<double>(times_[j] - times_[j - 1]) * share(j - 1, k);
      }
    }
  }
  // Dedicated time of an interval, ns: compute (k = 0) or a transfer (k = 1).
  [[nodiscard]] double work_ns(std::int64_t start, std::int64_t end, int k) const {
    return std::max(0.0, integral(end, k) - integral(start, k));
  }
  // Whether a core was free (fewer ranks computing than cores) throughout [start, end).
  [[nodiscard]] bool core_free(std::int64_t start, std::int64_t end) const {
    if (times_.empty()) return true;
    auto j = static_cast<std::size_t>(std::upper_bound(times_.begin(), times_.end(), start) -
                                      times_.begin());
    if (j > 0 && count_[j - 1] >= cores_) return false;
    for (; j < times_.size() && times_[j] < end; ++j) {
      if (count_[j] >= cores_) return false;
    }
    return true;
  }

 private:
  [[nodiscard]] double share(std::size_t seg, int k) const noexcept {
    const auto n = static_cast<std::int64_t>(count_[seg]) + k;
    return n > cores_ ? static_cast<double>(cores_) / static_cast<double>(n) : 1.0;
  }
  // integral from the first edge to t of the share; outside the edges the share is 1 for k = 0
  // and min(1, C / 1) = 1 for k = 1.
  [[nodiscard]] double integral(std::int64_t t, int k) const {
    if (times_.empty()) return static_cast<double>(t);
    if (t <= times_.front()) return static_cast<double>(t - times_.front());
    const auto it = std::upper_bound(times_.begin(), times_.end(), t);
    const auto j = static_cast<std::size_t>(it - times_.begin()) - 1;
    const double rest = static_cast<double>(t - times_[j]);
    if (j + 1 == times_.size()) return prefix_[k][j] + rest;
    return prefix_[k][j] + rest * share(j, k);
  }
  std::int64_t cores_;
  std::vector<std::int64_t> times_;
  std::vector<int> count_;  // ranks computing on [times_[j], times_[j + 1])
  std::array<std::vector<double>, 2> prefix_;
};

// Per record: the CPU share of its host, or null for ranks that computed on a GPU.
struct Sharing {
  std::vector<std::unique_ptr<HostShare>> hosts;
  std::vector<const HostShare*> of_record;
  std::int64_t cores = 0;  // the CPU hosts' cores (the smallest), or 0 when none computed on CPUs

  explicit Sharing(const std::vector<RankRecord>& records) : of_record(records.size(), nullptr) {
    std::map<std::int64_t, std::vector<std::size_t>> by_host;
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (records[i].cpus > 0) by_host[records[i].host_id].push_back(i);
    }
    for (const auto& [host, idx] : by_host) {
      std::int64_t c = std::numeric_limits<std::int64_t>::max();
      std::vector<const RankRecord*> ranks;
      for (auto i : idx) {
        c = std::min(c, records[i].cpus);
        ranks.push_back(&records[i]);
      }
      auto h = std::make_unique<HostShare>(c, ranks);
      for (auto i : idx) of_record[i] = h.get();
      cores = cores == 0 ? c : std::min(cores, c);
      hosts.push_back(std::move(h));
    }
  }
  // Measured or dedicated milliseconds of an action of record i.
  [[nodiscard]] double compute_ms(std::size_t i, const TimedAction& a) const {
    const HostShare* h = of_record[i];
    if (h == nullptr) return static_cast<double>(a.end_ns - a.start_ns) / 1e6;
    return h->work_ns(a.start_ns, a.end_ns, 0) / 1e6;
  }
  // Whether the host of record i had a core free for its receiver throughout [start, end)
  // (always on GPUs and hosts with enough cores).
  [[nodiscard]] bool core_free(std::size_t i, std::int64_t start, std::int64_t end) const {
    const HostShare* h = of_record[i];
    return h == nullptr || h->core_free(start, end);
  }
  [[nodiscard]] double transfer_ms(std::size_t i, std::int64_t start, std::int64_t end) const {
    const HostShare* h = of_record[i];
    if (h == nullptr) return static_cast<double>(std::max<std::int64_t>(0, end - start)) / 1e6;
    return h->work_ns(start, end, 1) / 1e6;
  }
};

// Note [Correlated sampling] (sim/src/costs/duration_model.cpp): the share of the variance of
// x = log(duration / median of its stage and kind) that is common to the actions of a group
// (a step, or a rank in a step), estimated by one-way analysis of variance: within-group
// variance sw = sum (x - group mean)^2 / (N - G), between-group variance
// sb = (sum n_g (group mean - mean)^2 / (G - 1) - sw) / n0, n0 = (N - sum n_g^2 / N) / (G - 1);
// the share is sb / (sb + sw), clamped to [0, 1], and 0 without at least two groups of two.
struct Sample {
  double x = 0;
  std::int64_t step = 0;
  int rank = 0;
};
[[nodiscard]] double shared_variance(const std::vector<Sample>& xs, bool per_rank) {
  std::map<std::pair<std::int64_t, int>, std::pair<double, int>> groups;  // sum, count
  double sum = 0;
  for (const auto& v : xs) {
    auto& g = groups[{v.step, per_rank ? v.rank : 0}];
    g.first += v.x;
    ++g.second;
    sum += v.x;
  }
  const auto n = static_cast<double>(xs.size());
  const auto k = static_cast<double>(groups.size());
  if (k < 2 || n < 2 * k) return 0;
  const double mean = sum / n;
  double within = 0, between = 0, sizes2 = 0;
  for (const auto& v : xs) {
    const auto& g = groups[{v.step, per_rank ? v.rank : 0}];
    const double d = v.x - g.first / g.second;
    within += d * d;
  }
  for (const auto& [key, g] : groups) {
    const double d = g.first / g.second - mean;
    between += g.second * d * d;
    sizes2 += static_cast<double>(g.second) * g.second;
  }
  const double sw = within / (n - k);
  const double n0 = (n - sizes2 / n) / (k - 1);
  const double sb = std::max(0.0, (between / (k - 1) - sw) / n0);
  return sb + sw > 0 ? std::clamp(sb / (sb + sw), 0.0, 1.0) : 0;
}

}  // namespace

sched::CostTable make_profile(const std::vector<RankRecord>& records, const sched::PlanShape& shape,
                              const ReportContext& ctx) {
  const int stages = shape.stages;
  const int pp = shape.ranks;
  std::vector<std::map<ActionKind, std::vector<double>>> times(static_cast<std::size_t>(stages));
  std::vector<std::vector<double>> out_bytes(static_cast<std::size_t>(stages));
  // Note [Measured activation memory]: heap bytes each F left allocated, and the size of the
  // activation each RECV_F brought in (held by the stage's state until the backward).
  std::vector<std::vector<double>> kept_bytes(static_cast<std::size_t>(stages));
  std::vector<std::vector<double>> in_bytes(static_cast<std::size_t>(stages));
  std::map<TransferKey, std::pair<const TimedAction*, const TimedAction*>> transfers;
  sched::CostTable table;
  table.source = "executor";
  table.precision = ctx.precision;  // its times and activation bytes are this precision's
  table.stages.resize(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) table.stages[static_cast<std::size_t>(s)].stage = s;
  const Sharing sharing(records);
  // Note [Measured split backward]: the last warm-up step with I or W actions, if any.
  std::int64_t split_step = -1;
  for (const auto& r : records) {
    for (const auto& a : r.actions) {
      if (a.step < ctx.warmup_steps && (a.action.kind == ActionKind::kBackwardInput ||
                                        a.action.kind == ActionKind::kBackwardWeight))
        split_step = std::max(split_step, a.step);
    }
  }
  std::vector<std::map<ActionKind, std::vector<double>>> split(static_cast<std::size_t>(stages));
  table.cores_per_node = static_cast<std::int32_t>(sharing.cores);
  table.p2p_uses_core = ctx.p2p_uses_core;
  {  // CostTable::nodes: machines, and network namespaces of one machine, the run spanned.
    std::set<std::pair<std::int64_t, std::int64_t>> nodes;
    for (const auto& r : records) nodes.emplace(r.host_id, r.node_rank);
    table.nodes = static_cast<std::int32_t>(nodes.size());
  }
  for (std::size_t ri = 0; ri < records.size(); ++ri) {
    const auto& r = records[ri];
    const int replica = r.world_rank / pp;
    // Note [Measured split backward]: this rank's I and W seen so far in the split step, per
    // stage; its first of each is left out when it has another (the split path's first use).
    std::map<std::pair<int, ActionKind>, int> split_seen, split_count;
    for (const auto& a : r.actions) {
      if (a.step == split_step && (a.action.kind == ActionKind::kBackwardInput ||
                                   a.action.kind == ActionKind::kBackwardWeight))
        ++split_count[{a.action.stage, a.action.kind}];
    }
    for (const auto& sz : r.stages) {
      if (replica != 0) continue;
      auto& st = table.stages.at(static_cast<std::size_t>(sz.stage));
      st.param_sizes_bytes = sz.param_bytes;
      st.param_bytes = 0;
      for (auto b : sz.param_bytes) st.param_bytes += b;
    }
    for (const auto& a : r.actions) {
      if (a.step < ctx.warmup_steps) {
        // Note [Measured split backward]: the warm-up step whose even full backwards ran split.
        const auto k = a.action.kind;
        if (!uses_core(k) || a.action.stage < 0 || a.action.stage >= stages || a.step != split_step)
          continue;
        if (k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight) {
          const std::pair<int, ActionKind> key{a.action.stage, k};
          if (split_seen[key]++ == 0 && split_count[key] > 1) continue;
        }
        // The work's ratio: CPU time where measured (CPU devices), which the other ranks' share
        // of the cores does not blur; else the dedicated-core wall time.
        split[static_cast<std::size_t>(a.action.stage)][k].push_back(
            a.cpu_ns > 0 ? static_cast<double>(a.cpu_ns) / 1e6 : sharing.compute_ms(ri, a));
        continue;
      }
      const auto s = static_cast<std::size_t>(a.action.stage);
      if (uses_core(a.action.kind)) times[s][a.action.kind].push_back(sharing.compute_ms(ri, a));
      if (a.action.kind == ActionKind::kSendF) out_bytes[s].push_back(static_cast<double>(a.bytes));
      if (a.action.kind == ActionKind::kRecvF) in_bytes[s].push_back(static_cast<double>(a.bytes));
      if (a.action.kind == ActionKind::kForward) {
        kept_bytes[s].push_back(static_cast<double>(a.bytes));
      }
      if (sched::is_comm(a.action.kind) && a.bytes > 0) {
        auto& slot = transfers[transfer_key(a.action, a.step, replica)];
        (sched::is_send(a.action.kind) ? slot.first : slot.second) = &a;
      }
    }
    table.peak_memory.push_back(sched::RankPeakMemory{r.world_rank, r.peak_rss_bytes});
  }
  std::sort(table.peak_memory.begin(), table.peak_memory.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  // Data-parallel communication per rank: means over the measured steps (algorithms that
  // communicate every k steps show their amortised cost), compared by `pipewright compare`.
  for (const auto& r : records) {
    sched::RankDataParallel d;
    d.rank = r.world_rank;
    double collectives = 0, payload = 0, wire = 0, exposed_ms = 0;
    for (const auto& s : r.dp_steps) {
      if (s.step < ctx.warmup_steps) continue;
      ++d.steps;
      collectives += static_cast<double>(s.collectives);
      payload += static_cast<double>(s.payload_bytes);
      wire += static_cast<double>(s.wire_bytes);
      exposed_ms += static_cast<double>(s.exposed_wait_ns) / 1e6;
    }
    if (d.steps == 0) continue;
    const auto n = static_cast<double>(d.steps);
    d.collectives_per_step = collectives / n;
    d.payload_bytes_per_step = payload / n;
    d.wire_bytes_per_step = wire / n;
    d.exposed_ms_per_step = exposed_ms / n;
    table.data_parallel.push_back(d);
  }
  std::sort(table.data_parallel.begin(), table.data_parallel.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  {  // Note [Correlated sampling]: how the measured compute times of a step move together.
    std::map<std::pair<std::size_t, ActionKind>, double> median;
    for (std::size_t s = 0; s < times.size(); ++s)
      for (const auto& [kind, v] : times[s]) median[{s, kind}] = stats_of(v).median_ms;
    std::vector<Sample> xs;
    for (std::size_t ri = 0; ri < records.size(); ++ri) {
      for (const auto& a : records[ri].actions) {
        if (a.step < ctx.warmup_steps || !uses_core(a.action.kind)) continue;
        const double ms = sharing.compute_ms(ri, a);
        const double med = median[{static_cast<std::size_t>(a.action.stage), a.action.kind}];
        if (ms > 0 && med > 0) xs.push_back({std::log(ms / med), a.step, records[ri].world_rank});
      }
    }
    table.step_correlation = shared_variance(xs, false);
    table.rank_step_correlation = std::max(table.step_correlation, shared_variance(xs, true));
  }
  for (int s = 0; s < stages; ++s) {
    auto& st = table.stages[static_cast<std::size_t>(s)];
    auto& t = times[static_cast<std::size_t>(s)];
    const auto f = stats_of(t[ActionKind::kForward]);
    st.forward_ms = f.median_ms;
    if (f.samples > 0) st.forward_stats = f;
    const auto b = stats_of(t[ActionKind::kFullBackward]);
    const auto i = stats_of(t[ActionKind::kBackwardInput]);
    const auto w = stats_of(t[ActionKind::kBackwardWeight]);
    if (b.samples > 0) st.backward_stats = b;
    if (i.samples > 0) {
      st.input_grad_stats = i;
      st.input_grad_ms = i.median_ms;
    }
    if (w.samples > 0) {
      st.weight_grad_stats = w;
      st.weight_grad_ms = w.median_ms;
    }
    if (b.samples > 0) {
      st.backward_ms = b.median_ms;
    } else {
      st.backward_ms = i.median_ms + w.median_ms;
    }
    if (!st.input_grad_ms || !st.weight_grad_ms) {
      st.input_grad_ms.reset();
      st.weight_grad_ms.reset();
    }
    auto& sp = split[static_cast<std::size_t>(s)];
    if (b.samples > 0 && i.samples == 0 && w.samples == 0 &&
        !sp[ActionKind::kBackwardInput].empty() && !sp[ActionKind::kBackwardWeight].empty()) {
      // Note [Measured split backward]: I and W as fractions of B (or of F when every backward
      // of the step ran split) in the split warm-up step, applied to the measured B (or F).
      const bool by_b = !sp[ActionKind::kFullBackward].empty();
      const double anchor =
          stats_of(sp[by_b ? ActionKind::kFullBackward : ActionKind::kForward]).median_ms;
      const sched::KindStats& base = by_b ? b : f;
      if (anchor > 0 && base.samples > 0) {
        auto scaled = [&](ActionKind k) {
          sched::KindStats out = base.scaled(stats_of(sp[k]).median_ms / anchor);
          out.samples = static_cast<std::int64_t>(sp[k].size());
          return out;
        };
        st.input_grad_stats = scaled(ActionKind::kBackwardInput);
        st.weight_grad_stats = scaled(ActionKind::kBackwardWeight);
        st.input_grad_ms = st.input_grad_stats->median_ms;
        st.weight_grad_ms = st.weight_grad_stats->median_ms;
      }
    }
    const auto o = stats_of(t[ActionKind::kOptimizerStep]);
    if (o.samples > 0) {
      st.optimizer_stats = o;
      st.optimizer_ms = o.median_ms;
    }
    const auto ob = stats_of(out_bytes[static_cast<std::size_t>(s)]);
    st.output_bytes = static_cast<std::int64_t>(ob.median_ms);
    const auto kept = stats_of(kept_bytes[static_cast<std::size_t>(s)]);
    if (kept.samples > 0 && kept.median_ms > 0) {
      st.activation_bytes = static_cast<std::int64_t>(
          kept.median_ms + stats_of(in_bytes[static_cast<std::size_t>(s)]).median_ms);
    } else if (static_cast<std::size_t>(s) < ctx.activation_bytes.size()) {
      st.activation_bytes = ctx.activation_bytes[static_cast<std::size_t>(s)];  // the model's
    }
  }
  const BatchOverhead overhead = comm_overhead(records, transfers, pp, ctx.warmup_steps);
  table.comm_overhead_ms = overhead.overhead_ms;
  table.comm_send_ms = overhead.send_ms;
  table.dp_sync_compute_ms = dp_sync_compute_ms(records, ctx.warmup_steps);
  table.step_overhead_ms = step_overhead_ms(records, ctx.warmup_steps);
  std::vector<double> runtime;
  for (const auto& r : records) {
    if (r.baseline_rss_bytes <= 0) continue;
    std::int64_t params = r.baseline_state_bytes;  // Note [Runtime memory]: ZeRO-3's shards
    if (params < 0) {
      params = 0;
      for (const auto& sz : r.stages)
        for (auto b : sz.param_bytes) params += b;
    }
    // Library code that training first ran became resident after the baseline (Note [Runtime
    // memory]).
    const std::int64_t code = std::max<std::int64_t>(0, r.file_bytes - r.baseline_file_bytes);
    runtime.push_back(
        static_cast<double>(std::max<std::int64_t>(0, r.baseline_rss_bytes - params) + code));
  }
  if (!runtime.empty())
    table.runtime_memory_bytes = static_cast<std::int64_t>(stats_of(runtime).median_ms);
  // Message time: from transfers whose receiver was already waiting when the send started (the
  // case on a critical path). A receive posted after the data arrived measures the batch
  // overhead instead, which comm_overhead_ms models; one posted while the sender was descheduled
  // (more ranks than cores) measures CPU contention, which the compute distributions carry.
  // All transfers when none waited.
  auto record_of = [&](const TimedAction* a) {
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& acts = records[i].actions;
      if (!acts.empty() && a >= acts.data() && a < acts.data() + acts.size()) return i;
    }
    return std::size_t{0};
  };
  // On an oversubscribed host a message waited for also measures how long the receiver (MPI: its
  // own polls move the data, p2p_uses_core false) or the progress threads (Gloo) waited for a
  // core, which the simulator's core sharing produces itself (as a delay, or as the send's share
  // of the cores): the message's own time comes from the transfers during which a core was free
  // (when there are >= 5 of them). Scaling the others by the share left to a progress thread
  // (transfer_ms) is not enough: the OS hands a core over in time slices of milliseconds, not
  // in proportion, and on p = 4 Gloo runs their median was 4x the core-free one (0.65 / 0.17 ms),
  // which charged every send that much core time in the simulator.
  std::vector<double> p2p, p2p_all, p2p_free;
  for (const auto& [key, pair] : transfers) {
    if (pair.first == nullptr || pair.second == nullptr) continue;
    const auto ready = std::max(pair.first->start_ns, pair.second->start_ns);
    const std::size_t ri = record_of(pair.second);
    const double ms = sharing.transfer_ms(ri, ready, pair.second->end_ns);
    p2p_all.push_back(ms);
    if (pair.second->start_ns <= pair.first->start_ns) {
      p2p.push_back(ms);
      if (sharing.core_free(ri, ready, pair.second->end_ns)) p2p_free.push_back(ms);
    }
  }
  if (p2p_free.size() >= 5) p2p = p2p_free;
  if (p2p.empty()) p2p = p2p_all;
  if (!p2p.empty()) {
    sched::P2PCost c;
    c.stats = stats_of(p2p);
    c.per_message_ms = c.stats->median_ms;
    // Note [Send calls] (sim/src/engine/engine.hpp): every measured SEND's send calls, on the
    // network the message times were measured on.
    std::vector<double> calls;
    for (const auto& r : records) {
      for (const auto& a : r.actions) {
        if (sched::is_send(a.action.kind) && a.step >= ctx.warmup_steps && a.bytes > 0)
          calls.push_back(static_cast<double>(a.send_ns) / 1e6);
      }
    }
    if (!calls.empty()) c.send_call_stats = stats_of(calls);
    table.p2p = c;
  }
  return table;
}

}  // namespace pipewright::exec
