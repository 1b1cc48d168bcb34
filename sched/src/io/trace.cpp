// Trace writing (trace.hpp: TraceBuilder, Note [Trace writing], Note [Forward flows]). Reading
// traces back is in trace_reader.cpp.
#include "pipewright/sched/trace.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"

namespace pipewright::sched {
namespace {

using json::Json;

constexpr TraceStream kAllStreams[] = {TraceStream::kCompute, TraceStream::kSend,
                                       TraceStream::kRecv, TraceStream::kDpAllReduce};
// Slices may touch (end == next start) but not overlap; 1 ns of slack absorbs the rounding of
// nanosecond timestamps converted to floating-point microseconds.
constexpr double kOverlapSlackUs = 1e-3;

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

// Shortest text that reads back as the same double (as nlohmann's dump).
void append_double(std::string& out, double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void append_string(std::string& out, const std::string& s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    return c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20;
  });
  if (plain) {
    out += '"';
    out += s;
    out += '"';
  } else {
    out += Json(s).dump();
  }
}

// Stable counting sort of `items` by key(item) in [0, keys). Returns where each key's items
// start in the sorted vector (keys + 1 entries).
template <typename Key>
std::vector<std::size_t> counting_sort(std::vector<std::size_t>& items, std::size_t keys, Key key) {
  std::vector<std::size_t> start(keys + 1, 0);
  for (std::size_t item : items) ++start[key(item) + 1];
  for (std::size_t k = 0; k < keys; ++k) start[k + 1] += start[k];
  std::vector<std::size_t> next(start.begin(), start.end() - 1);
  std::vector<std::size_t> sorted(items.size());
  for (std::size_t item : items) sorted[next[key(item)]++] = item;
  items = std::move(sorted);
  return start;
}

bool slice_order(const TraceSlice& a, const TraceSlice& b) {
  if (a.rank != b.rank) return a.rank < b.rank;
  if (a.stream != b.stream) return a.stream < b.stream;
  if (a.start_us != b.start_us) return a.start_us < b.start_us;
  if (a.duration_us != b.duration_us) return a.duration_us < b.duration_us;
  return a.name < b.name;
}

}  // namespace

std::string_view to_string(TraceStream stream) noexcept {
  switch (stream) {
    case TraceStream::kCompute:
      return "compute";
    case TraceStream::kSend:
      return "send";
    case TraceStream::kRecv:
      return "recv";
    case TraceStream::kDpAllReduce:
      return "dp-allreduce";
  }
  return "?";
}

TraceBuilder::TraceBuilder(TraceInfo info, std::int32_t ranks)
    : info_(std::move(info)), ranks_(ranks) {}

std::size_t TraceBuilder::add_slice(TraceSlice slice) {
  PW_ASSERT(slice.rank >= 0 && slice.duration_us >= 0 && std::isfinite(slice.start_us),
            "trace slice " << slice.name << " has start " << slice.start_us << " duration "
                           << slice.duration_us);
  slices_.push_back(std::move(slice));
  return slices_.size() - 1;
}

void TraceBuilder::add_flow(std::size_t send_slice, std::size_t recv_slice) {
  PW_ASSERT(send_slice < slices_.size() && recv_slice < slices_.size(), "flow to unknown slice");
  flows_.push_back(Flow{send_slice, recv_slice, false});
}

void TraceBuilder::add_collective(const std::vector<std::size_t>& slices) {
  if (slices.size() < 2) return;
  std::size_t first = slices.front();
  for (std::size_t i : slices) {
    PW_ASSERT(i < slices_.size(), "collective with an unknown slice");
    if (slices_[i].start_us < slices_[first].start_us) first = i;
  }
  for (std::size_t i : slices) {
    if (i != first) flows_.push_back(Flow{first, i, true});
  }
}

void TraceBuilder::add_memory(std::int32_t rank, double time_us, std::int64_t bytes) {
  PW_ASSERT(rank >= 0 && std::isfinite(time_us), "memory sample of rank " << rank);
  memory_.push_back(TraceCounter{rank, time_us, bytes});
}

std::string TraceBuilder::to_json() const {
  // Sort by (rank, stream, start, ...) so the output does not depend on insertion order. Linear
  // for what the simulator and executor record: a stable counting sort by (rank, stream), then
  // each stream sorted only if it is not already in time order (Note [Trace writing]).
  std::int32_t ranks = ranks_;
  for (const auto& s : slices_) ranks = std::max(ranks, s.rank + 1);
  constexpr std::size_t kStreams = std::size(kAllStreams);
  std::vector<std::size_t> order(slices_.size());
  std::iota(order.begin(), order.end(), 0);
  auto stream_of = [this](std::size_t i) {
    return static_cast<std::size_t>(slices_[i].rank) * kStreams +
           static_cast<std::size_t>(slices_[i].stream);
  };
  const std::vector<std::size_t> stream_start =
      counting_sort(order, static_cast<std::size_t>(ranks) * kStreams, stream_of);
  auto by_slice = [this](std::size_t a, std::size_t b) {
    return slice_order(slices_[a], slices_[b]);
  };
  for (std::size_t b = 0; b + 1 < stream_start.size(); ++b) {
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(stream_start[b]);
    const auto last = order.begin() + static_cast<std::ptrdiff_t>(stream_start[b + 1]);
    if (!std::is_sorted(first, last, by_slice)) std::stable_sort(first, last, by_slice);
  }
  for (std::size_t k = 1; k < order.size(); ++k) {
    const TraceSlice& prev = slices_[order[k - 1]];
    const TraceSlice& cur = slices_[order[k]];
    if (prev.rank != cur.rank || prev.stream != cur.stream) continue;
    PW_ASSERT(cur.start_us + kOverlapSlackUs >= prev.start_us + prev.duration_us,
              "overlapping trace slices on rank "
                  << cur.rank << " stream " << to_string(cur.stream) << ": " << prev.name << " ["
                  << prev.start_us << ", " << prev.start_us + prev.duration_us << ") and "
                  << cur.name << " at " << cur.start_us);
  }

  // Note [Trace writing]: the events are written by hand, one per line, straight into the output
  // string: building a JSON document first cost ~4 KB of memory per event and ~22 s for the
  // half-million-action plans of bench/cli_scale.sh; this is linear in the events, with no
  // per-event allocation beyond the output itself.
  std::string out;
  out.reserve(256 + (slices_.size() + 2 * flows_.size() + memory_.size()) * 160);
  bool first = true;
  auto begin_event = [&out, &first] {
    out += first ? "\n" : ",\n";
    first = false;
  };
  auto meta = [&](std::int32_t pid, int tid, std::string_view name, std::string_view arg_key,
                  const std::string& arg_value_json) {
    begin_event();
    out += R"({"ph":"M","name":")";
    out += name;
    out += R"(","pid":)";
    append_int(out, pid);
    out += R"(,"tid":)";
    append_int(out, tid);
    out += R"(,"args":{")";
    out += arg_key;
    out += R"(":)";
    out += arg_value_json;
    out += "}}";
  };
  out += R"({"traceEvents": [)";
  for (std::int32_t r = 0; r < ranks; ++r) {
    meta(r, 0, "process_name", "name", "\"rank " + std::to_string(r) + "\"");
    meta(r, 0, "process_sort_index", "sort_index", std::to_string(r));
    for (TraceStream st : kAllStreams) {
      const int tid = static_cast<int>(st);
      meta(r, tid, "thread_name", "name", "\"" + std::string(to_string(st)) + "\"");
      meta(r, tid, "thread_sort_index", "sort_index", std::to_string(tid));
    }
  }
  for (std::size_t idx : order) {
    const TraceSlice& s = slices_[idx];
    begin_event();
    out += R"({"ph":"X","name":)";
    append_string(out, s.name);
    out += R"(,"cat":)";
    append_string(out, s.category);
    out += R"(,"pid":)";
    append_int(out, s.rank);
    out += R"(,"tid":)";
    append_int(out, static_cast<int>(s.stream));
    out += R"(,"ts":)";
    append_double(out, s.start_us);
    out += R"(,"dur":)";
    append_double(out, s.duration_us);
    out += R"(,"args":{"stage":)";
    append_int(out, s.stage);
    out += R"(,"microbatch":)";
    append_int(out, s.microbatch);
    out += R"(,"kind":)";
    append_string(out, s.category);
    out += R"(,"step":)";
    append_int(out, s.step);
    if (s.send_us > 0) {
      out += R"(,"send_us":)";
      append_double(out, s.send_us);
    }
    if (s.drain_us > 0) {
      out += R"(,"drain_us":)";
      append_double(out, s.drain_us);
    }
    if (s.cpu_us > 0) {
      out += R"(,"cpu_us":)";
      append_double(out, s.cpu_us);
    }
    out += "}}";
  }
  // Flows in a canonical order too: by the send slice, then the receive slice. Slices that
  // compare equal share a class, so equal slices order their flows alike whatever their
  // insertion order; two stable counting sorts (receive class, then send class) are linear.
  std::vector<std::size_t> slice_class(slices_.size());
  for (std::size_t k = 0, c = 0; k < order.size(); ++k) {
    if (k > 0 && by_slice(order[k - 1], order[k])) ++c;
    slice_class[order[k]] = c;
  }
  std::vector<std::size_t> flow_order(flows_.size());
  std::iota(flow_order.begin(), flow_order.end(), 0);
  counting_sort(flow_order, slices_.size(),
                [&](std::size_t f) { return slice_class[flows_[f].to]; });
  counting_sort(flow_order, slices_.size(),
                [&](std::size_t f) { return slice_class[flows_[f].from]; });
  // Note [Forward flows]: an arrow starts inside its source slice and ends inside its target
  // slice, and never goes back in time. A receive is posted before its send starts (its slice
  // starts earlier), so the arrow ends where the data arrived: the send's end, clamped into the
  // receive slice. A collective's arrows go from the replica that joined first (at its start) to
  // each other replica as it joins (a measured REDUCE_GRAD slice may be only the wait for work
  // launched earlier, so another replica's slice can end before the last one starts). An arrow that
  // cannot go forward (a receive that ended before its send started: clocks of different hosts) is
  // left out.
  std::int64_t id = 0;
  for (std::size_t f : flow_order) {
    const Flow& flow = flows_[f];
    const TraceSlice& from = slices_[flow.from];
    const TraceSlice& to = slices_[flow.to];
    const double from_us = from.start_us;
    const double want_us = flow.collective ? from.start_us : from.start_us + from.duration_us;
    const double to_us = std::clamp(want_us, to.start_us, to.start_us + to.duration_us);
    if (to_us < from_us) continue;
    ++id;
    for (const bool start : {true, false}) {
      const TraceSlice& at = start ? from : to;
      begin_event();
      out += start ? R"({"ph":"s","name":)" : R"({"ph":"f","bp":"e","name":)";
      append_string(out, from.name);
      out += flow.collective ? R"(,"cat":"dp","id":)" : R"(,"cat":"p2p","id":)";
      append_int(out, id);
      out += R"(,"pid":)";
      append_int(out, at.rank);
      out += R"(,"tid":)";
      append_int(out, static_cast<int>(at.stream));
      out += R"(,"ts":)";
      append_double(out, start ? from_us : to_us);
      out += "}";
    }
  }
  // Memory counters, by rank then time (stable: equal times keep their order of addition).
  std::vector<std::size_t> mem_order(memory_.size());
  std::iota(mem_order.begin(), mem_order.end(), 0);
  std::stable_sort(mem_order.begin(), mem_order.end(), [&](std::size_t a, std::size_t b) {
    const TraceCounter& x = memory_[a];
    const TraceCounter& y = memory_[b];
    return x.rank != y.rank ? x.rank < y.rank : x.time_us < y.time_us;
  });
  for (std::size_t k : mem_order) {
    const TraceCounter& c = memory_[k];
    begin_event();
    out += R"({"ph":"C","name":"memory","pid":)";
    append_int(out, c.rank);
    out += R"(,"tid":0,"ts":)";
    append_double(out, c.time_us);
    out += R"(,"args":{"bytes":)";
    append_int(out, c.bytes);
    out += "}}";
  }
  out += "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": ";
  out += Json{{"source", info_.source}, {"plan", info_.plan}, {"schedule", info_.schedule}}.dump();
  out += "}\n";
  return out;
}

}  // namespace pipewright::sched
