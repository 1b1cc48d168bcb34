#include "report/run_report.hpp"

#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <tuple>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/trace.hpp"

namespace pipewright::exec {

namespace {

constexpr std::int64_t kRecordMagic = 0x7077726563;  // "pwrec"

using sched::ActionKind;

}  // namespace

std::vector<std::int64_t> encode_record(const RankRecord& r) {
  std::vector<std::int64_t> out{kRecordMagic,
                                r.world_rank,
                                r.peak_rss_bytes,
                                r.baseline_rss_bytes,
                                r.host_id,
                                r.cpus,
                                static_cast<std::int64_t>(r.stages.size())};
  for (const auto& s : r.stages) {
    out.push_back(s.stage);
    out.push_back(static_cast<std::int64_t>(s.param_bytes.size()));
    out.insert(out.end(), s.param_bytes.begin(), s.param_bytes.end());
  }
  out.push_back(static_cast<std::int64_t>(r.actions.size()));
  for (const auto& a : r.actions) {
    out.insert(out.end(),
               {a.action.stage, static_cast<std::int64_t>(a.action.kind), a.action.microbatch,
                a.action.peer_stage, a.step, a.start_ns, a.end_ns, a.bytes});
  }
  out.push_back(static_cast<std::int64_t>(r.data_waits.size()));
  for (const auto& w : r.data_waits) out.insert(out.end(), {w.step, w.start_ns, w.end_ns});
  return out;
}

RankRecord decode_record(const std::vector<std::int64_t>& d) {
  std::size_t i = 0;
  auto next = [&]() {
    PW_ASSERT(i < d.size(), "truncated rank record");
    return d[i++];
  };
  PW_ASSERT(next() == kRecordMagic, "bad rank record");
  RankRecord r;
  r.world_rank = static_cast<int>(next());
  r.peak_rss_bytes = next();
  r.baseline_rss_bytes = next();
  r.host_id = next();
  r.cpus = next();
  const auto stages = next();
  for (std::int64_t s = 0; s < stages; ++s) {
    LocalStageSizes sz;
    sz.stage = static_cast<int>(next());
    const auto n = next();
    for (std::int64_t k = 0; k < n; ++k) sz.param_bytes.push_back(next());
    r.stages.push_back(sz);
  }
  const auto actions = next();
  for (std::int64_t k = 0; k < actions; ++k) {
    TimedAction a;
    a.action.stage = static_cast<std::int32_t>(next());
    a.action.kind = static_cast<ActionKind>(next());
    a.action.microbatch = static_cast<std::int32_t>(next());
    a.action.peer_stage = static_cast<std::int32_t>(next());
    a.step = next();
    a.start_ns = next();
    a.end_ns = next();
    a.bytes = next();
    r.actions.push_back(a);
  }
  const auto waits = next();
  for (std::int64_t k = 0; k < waits; ++k) {
    DataWait w;
    w.step = next();
    w.start_ns = next();
    w.end_ns = next();
    r.data_waits.push_back(w);
  }
  return r;
}

// The machine whose cores a rank shares is the running kernel: its boot_id is the same in every
// namespace and container of one machine (network-namespace "nodes" of tools/netns-cluster share
// the host's cores and its steady_clock), and differs between machines. Without /proc: the
// hostname.
std::int64_t this_host_id() {
  std::string name;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> name;
  if (name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) return 0;
    name = host;
  }
  std::uint64_t h = 1469598103934665603ULL;
  for (const char* c = name.c_str(); *c != 0; ++c) {
    h ^= static_cast<unsigned char>(*c);
    h *= 1099511628211ULL;
  }
  return static_cast<std::int64_t>(h >> 1);
}

std::int64_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<std::int64_t>(n) : 1;
}

std::int64_t heap_bytes_in_use() {
  const struct mallinfo2 mi = ::mallinfo2();
  return static_cast<std::int64_t>(mi.uordblks + mi.hblkhd);
}

std::int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream is(line.substr(6));
      std::int64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

namespace {

sched::TraceStream stream_of(ActionKind kind) {
  if (sched::is_send(kind)) return sched::TraceStream::kSend;
  if (sched::is_recv(kind)) return sched::TraceStream::kRecv;
  if (kind == ActionKind::kReduceGrad) return sched::TraceStream::kDpAllReduce;
  return sched::TraceStream::kCompute;
}

std::int64_t earliest(const std::vector<RankRecord>& records) {
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  for (const auto& r : records) {
    for (const auto& a : r.actions) t0 = std::min(t0, a.start_ns);
    for (const auto& w : r.data_waits) t0 = std::min(t0, w.start_ns);
  }
  return t0 == std::numeric_limits<std::int64_t>::max() ? 0 : t0;
}

// (producer stage, consumer stage, microbatch, backward?, step, replica) of a transfer.
using TransferKey = std::tuple<int, int, int, bool, std::int64_t, int>;

TransferKey transfer_key(const sched::Action& a, std::int64_t step, int replica) {
  switch (a.kind) {
    case ActionKind::kSendF:
      return {a.stage, a.peer_stage, a.microbatch, false, step, replica};
    case ActionKind::kRecvF:
      return {a.peer_stage, a.stage, a.microbatch, false, step, replica};
    case ActionKind::kSendB:
      return {a.peer_stage, a.stage, a.microbatch, true, step, replica};
    default:  // kRecvB
      return {a.stage, a.peer_stage, a.microbatch, true, step, replica};
  }
}

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

}  // namespace

std::string make_trace_json(const std::vector<RankRecord>& records, const ReportContext& ctx) {
  sched::TraceBuilder builder(sched::TraceInfo{"executor", ctx.plan_description, ctx.schedule},
                              ctx.world_size);
  const std::int64_t t0 = earliest(records);
  const int pp = ctx.pp > 0 ? ctx.pp : std::max(ctx.world_size, 1);
  std::map<TransferKey, std::size_t> sends;
  std::vector<std::pair<TransferKey, std::size_t>> recvs;
  // (stage, step) -> the REDUCE_GRAD slices of every replica of the stage.
  std::map<std::pair<int, std::int64_t>, std::vector<std::size_t>> collectives;
  for (const auto& r : records) {
    const int replica = r.world_rank / pp;
    // Actions of one p2p batch share one measured interval (Note [p2p batches]); a stream's
    // slices must not overlap, so a later member of a batch starts where the previous slice on
    // its stream ended (the batch's wait is shown on its first member of each stream).
    std::map<sched::TraceStream, std::int64_t> stream_end;
    // Memory counter: (time, change); what each forward left allocated, by (stage, mb, step).
    std::vector<std::pair<std::int64_t, std::int64_t>> memory;
    std::map<std::tuple<int, int, std::int64_t>, std::int64_t> held;
    for (const auto& a : r.actions) {
      const auto stream = stream_of(a.action.kind);
      auto [it, fresh] = stream_end.try_emplace(stream, a.start_ns);
      const std::int64_t start = std::max(a.start_ns, it->second);
      const std::int64_t end = std::max(start, a.end_ns);
      it->second = end;
      sched::TraceSlice s;
      s.name = sched::to_string(a.action);
      s.category = std::string(sched::to_string(a.action.kind));
      s.rank = r.world_rank;
      s.stream = stream;
      s.start_us = static_cast<double>(start - t0) / 1e3;
      s.duration_us = static_cast<double>(end - start) / 1e3;
      s.stage = a.action.stage;
      s.microbatch = a.action.microbatch;
      s.step = a.step;
      const auto idx = builder.add_slice(std::move(s));
      if (sched::is_comm(a.action.kind) && a.bytes > 0) {
        // Flow arrows pair a send with its receive within one replica.
        if (sched::is_send(a.action.kind)) {
          sends[transfer_key(a.action, a.step, replica)] = idx;
        } else {
          recvs.emplace_back(transfer_key(a.action, a.step, replica), idx);
        }
      }
      if (a.action.kind == ActionKind::kReduceGrad) {
        collectives[{a.action.stage, a.step}].push_back(idx);
      }
      const auto mb = std::make_tuple(a.action.stage, a.action.microbatch, a.step);
      if (a.action.kind == ActionKind::kForward && a.bytes > 0) {
        held[mb] += a.bytes;
        memory.emplace_back(end - t0, a.bytes);
      } else if (a.action.kind == ActionKind::kFullBackward ||
                 a.action.kind == ActionKind::kBackwardWeight) {
        if (auto h = held.find(mb); h != held.end()) {
          memory.emplace_back(end - t0, -h->second);
          held.erase(h);
        }
      }
    }
    for (const auto& w : r.data_waits) {  // before the step's actions on the training thread
      sched::TraceSlice s;
      s.name = "data";
      s.category = "data";
      s.rank = r.world_rank;
      s.stream = sched::TraceStream::kCompute;
      s.start_us = static_cast<double>(w.start_ns - t0) / 1e3;
      s.duration_us = static_cast<double>(std::max(w.end_ns, w.start_ns) - w.start_ns) / 1e3;
      s.step = w.step;
      builder.add_slice(std::move(s));
    }
    std::stable_sort(memory.begin(), memory.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    std::int64_t bytes = r.baseline_rss_bytes;
    builder.add_memory(r.world_rank, 0.0, bytes);
    for (const auto& [t, change] : memory) {
      bytes += change;
      builder.add_memory(r.world_rank, static_cast<double>(t) / 1e3, bytes);
    }
  }
  // Pair flows only when unambiguous (one receive per key).
  bool unique = true;
  std::map<TransferKey, int> count;
  for (const auto& [k, i] : recvs) unique = unique && ++count[k] == 1;
  if (unique) {
    for (const auto& [k, i] : recvs) {
      auto it = sends.find(k);
      if (it != sends.end()) builder.add_flow(it->second, i);
    }
  }
  for (const auto& [key, slices] : collectives) builder.add_collective(slices);
  return builder.to_json();
}

// Note [Comm overhead]: the executor posts a rank's consecutive SEND/RECV actions as one p2p
// batch and waits for its receives (interpreter.cpp, Note [p2p batches]); on CPU backends posting
// and completing a batch costs compute-stream time (Gloo hands each operation to its own thread
// and back, ~0.1-0.4 ms here) even when the data is already there. The profile's
// comm_overhead_ms is the median duration of the batches that did not wait for data: batches of
// sends only, and batches whose every receive's matching send had finished before the batch
// started. The simulator charges it once per batch on the compute stream.
double comm_overhead_ms(
    const std::vector<RankRecord>& records,
    const std::map<TransferKey, std::pair<const TimedAction*, const TimedAction*>>& transfers,
    int pp, std::int64_t warmup_steps) {
  std::vector<double> samples;
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
      if (ready && acts[i].step >= warmup_steps) {
        samples.push_back(static_cast<double>(end - start) / 1e6);
      }
      i = j;
    }
  }
  return samples.empty() ? 0.0 : stats_of(samples).median_ms;
}

namespace {

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

// Note [Correlated sampling] (sim/src/duration_model.cpp): the share of the variance of
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
  for (std::size_t ri = 0; ri < records.size(); ++ri) {
    const auto& r = records[ri];
    const int replica = r.world_rank / pp;
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
        if (uses_core(k) && a.action.stage >= 0 && a.action.stage < stages && a.step == split_step)
          split[static_cast<std::size_t>(a.action.stage)][k].push_back(sharing.compute_ms(ri, a));
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
  table.comm_overhead_ms = comm_overhead_ms(records, transfers, pp, ctx.warmup_steps);
  std::vector<double> runtime;
  for (const auto& r : records) {
    if (r.baseline_rss_bytes <= 0) continue;
    std::int64_t params = 0;
    for (const auto& sz : r.stages)
      for (auto b : sz.param_bytes) params += b;
    runtime.push_back(
        static_cast<double>(std::max<std::int64_t>(0, r.baseline_rss_bytes - params)));
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
    table.p2p = c;
  }
  return table;
}

}  // namespace pipewright::exec
