// The executor's Chrome trace of a run (make_trace_json, run_report.hpp), in sched's trace
// schema: one slice per action, p2p and data-parallel flows, a memory counter per rank.
#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipewright/sched/trace.hpp"
#include "report/run_report.hpp"

namespace pipewright::exec {

namespace {

using sched::ActionKind;

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
    for (const auto& y : r.dp_syncs) t0 = std::min(t0, y.start_ns);
  }
  return t0 == std::numeric_limits<std::int64_t>::max() ? 0 : t0;
}
}  // namespace

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
      s.send_us = static_cast<double>(a.send_ns) / 1e3;  // Note [Send time]
      s.drain_us = static_cast<double>(a.drain_ns) / 1e3;
      s.cpu_us = static_cast<double>(a.cpu_ns) / 1e3;  // Note [Compute CPU time]
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
    for (const auto& y : r.dp_syncs) {  // Note [Data-parallel sync]: after the last OPTIM
      sched::TraceSlice s;
      s.name = "dp sync";
      s.category = "dp sync";
      s.rank = r.world_rank;
      s.stream = sched::TraceStream::kCompute;
      s.start_us = static_cast<double>(y.start_ns - t0) / 1e3;
      s.duration_us = static_cast<double>(std::max(y.end_ns, y.start_ns) - y.start_ns) / 1e3;
      s.step = y.step;
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

}  // namespace pipewright::exec
