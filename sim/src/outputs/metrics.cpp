#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "pipewright/sched/trace.hpp"
#include "pipewright/sim/report.hpp"

namespace pipewright::sim {
namespace {

using nlohmann::json;

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

std::string action_name(const TimedAction& a) {
  switch (a.collective) {
    case Collective::kDdpBucket:
      return std::to_string(a.action.stage) + "ALLREDUCE_B" + std::to_string(a.bucket);
    case Collective::kLocalSgd:
      return "LOCALSGD";
    case Collective::kSlowMo:
      return "SLOWMO";
    case Collective::kDiLoCo:
      return "DILOCO";
    case Collective::kSgp:
      return "SGP";
    case Collective::kReduceScatter:
      return std::to_string(a.action.stage) + "REDUCE_SCATTER";
    case Collective::kAllGather:
      return std::to_string(a.action.stage) + "ALL_GATHER";
    case Collective::kNone:
      break;
  }
  return sched::to_string(a.action);
}

std::string action_category(const TimedAction& a) {
  switch (a.collective) {
    case Collective::kDdpBucket:
      return "ALLREDUCE";
    case Collective::kLocalSgd:
      return "LOCALSGD";
    case Collective::kSlowMo:
      return "SLOWMO";
    case Collective::kDiLoCo:
      return "DILOCO";
    case Collective::kSgp:
      return "SGP";
    case Collective::kReduceScatter:
      return "REDUCE_SCATTER";
    case Collective::kAllGather:
      return "ALL_GATHER";
    case Collective::kNone:
      break;
  }
  return std::string(sched::to_string(a.action.kind));
}

std::string metrics_json(const SimResult& r) {
  json j;
  j["format"] = "pipewright-sim-metrics";
  j["version"] = 1;
  j["schedule"] = r.schedule;
  j["pipeline_ranks"] = r.ranks;
  j["stages"] = r.stages;
  j["microbatches"] = r.microbatches;
  j["dp"] = r.dp;
  j["steps"] = r.steps;
  j["simulated_actions"] = r.simulated_actions;
  j["makespan_ms"] = ms(r.makespan_ns);
  json steps = json::array();
  std::int64_t prev = 0;
  for (auto end : r.step_end_ns) {
    steps.push_back(ms(end - prev));
    prev = end;
  }
  j["step_ms"] = steps;
  j["amortized_step_ms"] = ms(r.makespan_ns) / std::max(r.steps, 1);
  j["bubble_fraction"] = r.bubble_fraction();
  if (r.micro_batch_size > 0) {
    j["micro_batch_size"] = r.micro_batch_size;
    j["global_batch"] = r.micro_batch_size * r.microbatches * r.dp;
    j["throughput_samples_per_s"] = r.throughput_samples_per_s();
  } else {
    j["micro_batch_size"] = nullptr;
    j["global_batch"] = nullptr;
    j["throughput_samples_per_s"] = nullptr;
  }
  // Issue 46: model TFLOP/s per GPU and MFU (null when the model's FLOPs or the peak is unknown).
  j["model_tflops_per_gpu"] =
      r.model_tflops_per_gpu() > 0 ? json(r.model_tflops_per_gpu()) : json(nullptr);
  j["mfu"] = r.mfu() > 0 ? json(r.mfu()) : json(nullptr);
  // With recompute: the FLOPs the GPUs execute (Megatron-LM 2021's published figures count them).
  j["hardware_tflops_per_gpu"] =
      r.hardware_tflops_per_gpu() > 0 ? json(r.hardware_tflops_per_gpu()) : json(nullptr);
  std::int64_t send = 0, recv_wait = 0, dp = 0, dp_exposed_max = 0, dp_exposed = 0;
  bool fits = true;
  json ranks = json::array();
  for (const auto& rr : r.per_rank) {
    send += rr.send_ns;
    recv_wait += rr.recv_wait_ns;
    dp += rr.dp_comm_ns;
    dp_exposed += rr.dp_exposed_ns;
    dp_exposed_max = std::max(dp_exposed_max, rr.dp_exposed_ns);
    fits = fits && !rr.exceeds_memory;
    json jr{{"rank", rr.rank},
            {"busy_ms", ms(rr.busy_ns)},
            {"idle_ms", ms(rr.idle_ns)},
            {"finish_ms", ms(rr.finish_ns)},
            {"send_ms", ms(rr.send_ns)},
            {"recv_wait_ms", ms(rr.recv_wait_ns)},
            {"dp_comm_ms", ms(rr.dp_comm_ns)},
            {"dp_exposed_ms", ms(rr.dp_exposed_ns)},
            {"static_memory_bytes", rr.static_memory_bytes},
            {"peak_activation_bytes", rr.peak_activation_bytes},
            {"peak_activation_microbatches", rr.peak_activation_microbatches},
            {"peak_memory_bytes", rr.peak_memory_bytes},
            {"exceeds_memory", rr.exceeds_memory}};
    if (rr.autocast_cache_bytes != 0) jr["autocast_cache_bytes"] = rr.autocast_cache_bytes;
    if (!rr.memory_timeline.empty()) {
      json tl = json::array();
      for (const auto& p : rr.memory_timeline) tl.push_back(json::array({ms(p.time_ns), p.bytes}));
      jr["memory_timeline"] = tl;
    }
    ranks.push_back(std::move(jr));
  }
  j["ranks"] = std::move(ranks);
  j["communication"] = {{"p2p_ms", ms(send)},
                        {"recv_wait_ms", ms(recv_wait)},
                        {"dp_comm_ms", ms(dp)},
                        {"dp_exposed_ms", ms(dp_exposed)},
                        {"dp_exposed_max_rank_ms", ms(dp_exposed_max)},
                        {"dp_wire_bytes_per_step", r.dp_wire_bytes_per_step},
                        {"dp_wire_bytes_per_stage", r.dp_wire_bytes_per_stage}};
  j["device_memory_bytes"] = r.device_memory_bytes;
  j["fits_memory"] = fits;
  json path = json::array();
  for (auto idx : r.critical_path) {
    const auto& a = r.actions[static_cast<std::size_t>(idx)];
    path.push_back({{"rank", a.rank},
                    {"action", action_name(a)},
                    {"step", a.step},
                    {"start_ms", ms(a.start_ns)},
                    {"end_ms", ms(a.end_ns)}});
  }
  j["critical_path"] = std::move(path);
  return j.dump(2) + "\n";
}

// Note [Replicas in the simulated trace]: the simulator times one replica (every replica runs
// the same plan on the same costs), but a measured trace has a process per world rank, pp x dp
// of them, placed replica-major (rank = replica x pp + pipeline rank) as the executor places
// them. The simulated trace draws each replica the same way, so that both open alike in Perfetto
// and the data-parallel collectives get their flows: each all-reduce slice of the replicas is one
// collective (TraceBuilder::add_collective). At most kTraceReplicas replicas are drawn (they are
// identical): a trace of dp 512 would be large and show nothing more.
constexpr std::int32_t kTraceReplicas = 8;

std::string trace_json(const SimResult& r, const std::string& plan) {
  const std::int32_t replicas = std::clamp(r.dp, 1, kTraceReplicas);
  sched::TraceBuilder b(sched::TraceInfo{"simulator", plan, r.schedule}, r.ranks * replicas);
  // Posted receives complete independently and may be outstanding together; the recv track shows
  // them one after another in plan order (a slice starts when the previous one ends), so that the
  // track's slices never overlap. Compute timing is unaffected (docs/simulator.md).
  std::vector<std::int64_t> recv_track_end(static_cast<std::size_t>(r.ranks), 0);
  std::vector<sched::TraceSlice> slices;
  slices.reserve(r.actions.size());
  for (const auto& a : r.actions) {
    std::int64_t start_ns = a.start_ns;
    std::int64_t end_ns = a.end_ns;
    if (a.stream == Stream::kRecv) {
      auto& track = recv_track_end[static_cast<std::size_t>(a.rank)];
      start_ns = std::max(start_ns, track);
      end_ns = std::max(end_ns, start_ns);
      track = end_ns;
    }
    sched::TraceSlice s;
    s.name = action_name(a);
    s.category = action_category(a);
    s.rank = a.rank;
    s.stream = a.stream;
    s.start_us = static_cast<double>(start_ns) / 1e3;
    s.duration_us = static_cast<double>(end_ns - start_ns) / 1e3;
    s.stage = a.action.stage;
    s.microbatch = a.action.microbatch;
    s.step = a.step;
    slices.push_back(std::move(s));
  }
  // index[d][i]: the trace slice of action i on replica d.
  std::vector<std::vector<std::size_t>> index(static_cast<std::size_t>(replicas));
  for (std::int32_t d = 0; d < replicas; ++d) {
    auto& ix = index[static_cast<std::size_t>(d)];
    ix.reserve(slices.size());
    for (const auto& s : slices) {
      sched::TraceSlice copy = s;
      copy.rank = d * r.ranks + s.rank;
      ix.push_back(b.add_slice(std::move(copy)));
    }
    for (std::size_t i = 0; i < r.actions.size(); ++i) {
      if (r.actions[i].match >= 0)
        b.add_flow(ix[static_cast<std::size_t>(r.actions[i].match)], ix[i]);
    }
    // The memory counter track of each rank (with record_memory_timeline).
    for (const auto& rr : r.per_rank) {
      for (const auto& p : rr.memory_timeline)
        b.add_memory(d * r.ranks + rr.rank, static_cast<double>(p.time_ns) / 1e3, p.bytes);
    }
  }
  if (replicas > 1) {
    for (std::size_t i = 0; i < r.actions.size(); ++i) {
      if (r.actions[i].stream != Stream::kDpAllReduce) continue;
      std::vector<std::size_t> group;
      for (const auto& ix : index) group.push_back(ix[i]);
      b.add_collective(group);
    }
  }
  return b.to_json();
}

}  // namespace pipewright::sim
