// A rank's record and how it travels (run_report.hpp): the flat int64 encoding, and what a
// process measures about itself (host identity, usable CPUs, heap in use, peak RSS). The trace
// of a run is made in run_trace.cpp, the profile in run_profile.cpp.
#include "report/run_report.hpp"

#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <thread>

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
                                r.baseline_state_bytes,
                                r.baseline_file_bytes,
                                r.file_bytes,
                                r.host_id,
                                r.cpus,
                                r.node_rank,
                                static_cast<std::int64_t>(r.stages.size())};
  for (const auto& s : r.stages) {
    out.push_back(s.stage);
    out.push_back(static_cast<std::int64_t>(s.param_bytes.size()));
    out.insert(out.end(), s.param_bytes.begin(), s.param_bytes.end());
  }
  out.push_back(static_cast<std::int64_t>(r.actions.size()));
  for (const auto& a : r.actions) {
    out.insert(out.end(), {a.action.stage, static_cast<std::int64_t>(a.action.kind),
                           a.action.microbatch, a.action.peer_stage, a.step, a.start_ns, a.end_ns,
                           a.bytes, a.send_ns, a.drain_ns, a.cpu_ns});
  }
  out.push_back(static_cast<std::int64_t>(r.data_waits.size()));
  for (const auto& w : r.data_waits) out.insert(out.end(), {w.step, w.start_ns, w.end_ns});
  out.push_back(static_cast<std::int64_t>(r.dp_steps.size()));
  for (const auto& d : r.dp_steps) {
    out.insert(out.end(),
               {d.step, d.collectives, d.payload_bytes, d.wire_bytes, d.exposed_wait_ns});
  }
  out.push_back(static_cast<std::int64_t>(r.dp_syncs.size()));
  for (const auto& y : r.dp_syncs) out.insert(out.end(), {y.step, y.start_ns, y.end_ns});
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
  r.baseline_state_bytes = next();
  r.baseline_file_bytes = next();
  r.file_bytes = next();
  r.host_id = next();
  r.cpus = next();
  r.node_rank = next();
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
    a.send_ns = next();
    a.drain_ns = next();
    a.cpu_ns = next();
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
  const auto dp_steps = next();
  for (std::int64_t k = 0; k < dp_steps; ++k) {
    DataParallelStep d;
    d.step = next();
    d.collectives = next();
    d.payload_bytes = next();
    d.wire_bytes = next();
    d.exposed_wait_ns = next();
    r.dp_steps.push_back(d);
  }
  const auto syncs = next();
  for (std::int64_t k = 0; k < syncs; ++k) {
    DataParallelSync y;
    y.step = next();
    y.start_ns = next();
    y.end_ns = next();
    r.dp_syncs.push_back(y);
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

namespace {
// A "Vm...:" line of /proc/self/status in bytes, 0 when absent.
std::int64_t status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream is(line.substr(key.size()));
      std::int64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  }
  return 0;
}
}  // namespace

std::int64_t peak_rss_bytes() { return status_bytes("VmHWM:"); }

std::int64_t resident_bytes() { return status_bytes("VmRSS:"); }

std::int64_t resident_file_bytes() { return status_bytes("RssFile:"); }

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5" << std::flush;
  return static_cast<bool>(out) && peak_rss_bytes() <= resident_bytes() + (1 << 20);
}

}  // namespace pipewright::exec
