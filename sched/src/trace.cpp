#include "pipewright/sched/trace.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::sched {
namespace {

using nlohmann::json;

constexpr TraceStream kAllStreams[] = {TraceStream::kCompute, TraceStream::kSend,
                                       TraceStream::kRecv, TraceStream::kDpAllReduce};
// Slices may touch (end == next start) but not overlap; 1 ns of slack absorbs the rounding of
// nanosecond timestamps converted to floating-point microseconds.
constexpr double kOverlapSlackUs = 1e-3;

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
  PW_ASSERT(slice.duration_us >= 0 && std::isfinite(slice.start_us),
            "trace slice " << slice.name << " has start " << slice.start_us << " duration "
                           << slice.duration_us);
  slices_.push_back(std::move(slice));
  return slices_.size() - 1;
}

void TraceBuilder::add_flow(std::size_t send_slice, std::size_t recv_slice) {
  PW_ASSERT(send_slice < slices_.size() && recv_slice < slices_.size(), "flow to unknown slice");
  flows_.emplace_back(send_slice, recv_slice);
}

std::string TraceBuilder::to_json() const {
  // Sort by (rank, stream, start) so the output does not depend on insertion order.
  std::vector<std::size_t> order(slices_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [this](std::size_t a, std::size_t b) {
    return slice_order(slices_[a], slices_[b]);
  });
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

  json events = json::array();
  std::int32_t ranks = ranks_;
  for (const auto& s : slices_) ranks = std::max(ranks, s.rank + 1);
  for (std::int32_t r = 0; r < ranks; ++r) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", r},
                      {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", r},
                      {"tid", 0},
                      {"args", {{"sort_index", r}}}});
    for (TraceStream st : kAllStreams) {
      const int tid = static_cast<int>(st);
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", r},
                        {"tid", tid},
                        {"args", {{"name", std::string(to_string(st))}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_sort_index"},
                        {"pid", r},
                        {"tid", tid},
                        {"args", {{"sort_index", tid}}}});
    }
  }
  for (std::size_t idx : order) {
    const TraceSlice& s = slices_[idx];
    events.push_back({{"ph", "X"},
                      {"name", s.name},
                      {"cat", s.category},
                      {"pid", s.rank},
                      {"tid", static_cast<int>(s.stream)},
                      {"ts", s.start_us},
                      {"dur", s.duration_us},
                      {"args",
                       {{"stage", s.stage},
                        {"microbatch", s.microbatch},
                        {"kind", s.category},
                        {"step", s.step}}}});
  }
  // Flows in a canonical order too: by the send slice, then the receive slice.
  std::vector<std::pair<const TraceSlice*, const TraceSlice*>> flows;
  flows.reserve(flows_.size());
  for (const auto& [a, b] : flows_) flows.emplace_back(&slices_[a], &slices_[b]);
  std::stable_sort(flows.begin(), flows.end(), [](const auto& x, const auto& y) {
    if (slice_order(*x.first, *y.first)) return true;
    if (slice_order(*y.first, *x.first)) return false;
    return slice_order(*x.second, *y.second);
  });
  std::int64_t id = 0;
  for (const auto& [send, recv] : flows) {
    ++id;
    events.push_back({{"ph", "s"},
                      {"name", send->name},
                      {"cat", "p2p"},
                      {"id", id},
                      {"pid", send->rank},
                      {"tid", static_cast<int>(send->stream)},
                      {"ts", send->start_us}});
    events.push_back({{"ph", "f"},
                      {"bp", "e"},
                      {"name", send->name},
                      {"cat", "p2p"},
                      {"id", id},
                      {"pid", recv->rank},
                      {"tid", static_cast<int>(recv->stream)},
                      {"ts", recv->start_us}});
  }
  json root{{"traceEvents", std::move(events)},
            {"displayTimeUnit", "ms"},
            {"otherData",
             {{"source", info_.source}, {"plan", info_.plan}, {"schedule", info_.schedule}}}};
  return root.dump(1) + "\n";
}

Trace parse_trace(std::string_view text, std::string_view origin) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw ParseError(std::string(origin) + ": invalid JSON: " + e.what());
  }
  PW_CHECK(j.is_object(), ParseError, origin << ": / must be a JSON object");
  PW_CHECK(j.contains("traceEvents") && j["traceEvents"].is_array(), ParseError,
           origin << ": /traceEvents must be an array");
  Trace t;
  if (j.contains("otherData") && j["otherData"].is_object()) {
    const json& o = j["otherData"];
    auto str = [&o](const char* k) {
      return o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : std::string();
    };
    t.info.source = str("source");
    t.info.plan = str("plan");
    t.info.schedule = str("schedule");
  }
  const json& events = j["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const std::string p = "/traceEvents/" + std::to_string(i);
    const json& e = events[i];
    PW_CHECK(e.is_object(), ParseError, origin << ": " << p << " must be an object");
    PW_CHECK(e.contains("ph") && e["ph"].is_string(), ParseError,
             origin << ": " << p << "/ph is missing or not a string");
    const std::string ph = e["ph"].get<std::string>();
    auto need_int = [&](const char* k) {
      PW_CHECK(e.contains(k) && e[k].is_number_integer(), ParseError,
               origin << ": " << p << "/" << k << " is missing or not an integer");
      return e[k].get<std::int64_t>();
    };
    auto need_num = [&](const char* k) {
      PW_CHECK(e.contains(k) && e[k].is_number() && std::isfinite(e[k].get<double>()), ParseError,
               origin << ": " << p << "/" << k << " is missing or not a number");
      return e[k].get<double>();
    };
    if (ph == "M") {
      if (e.value("name", "") == "process_name") {
        t.ranks = std::max<std::int32_t>(t.ranks, static_cast<std::int32_t>(need_int("pid")) + 1);
      }
      continue;
    }
    if (ph != "X") continue;
    TraceSlice s;
    PW_CHECK(e.contains("name") && e["name"].is_string(), ParseError,
             origin << ": " << p << "/name is missing or not a string");
    s.name = e["name"].get<std::string>();
    if (e.contains("cat") && e["cat"].is_string()) s.category = e["cat"].get<std::string>();
    s.rank = static_cast<std::int32_t>(need_int("pid"));
    const std::int64_t tid = need_int("tid");
    PW_CHECK(tid >= 0 && tid <= 3, ParseError,
             origin << ": " << p << "/tid must be a stream 0..3, got " << tid);
    s.stream = static_cast<TraceStream>(tid);
    s.start_us = need_num("ts");
    s.duration_us = need_num("dur");
    PW_CHECK(s.duration_us >= 0, ParseError, origin << ": " << p << "/dur must be >= 0");
    if (e.contains("args") && e["args"].is_object()) {
      const json& a = e["args"];
      if (a.contains("stage") && a["stage"].is_number_integer()) s.stage = a["stage"].get<int>();
      if (a.contains("microbatch") && a["microbatch"].is_number_integer())
        s.microbatch = a["microbatch"].get<int>();
      if (a.contains("step") && a["step"].is_number_integer())
        s.step = a["step"].get<std::int64_t>();
      if (s.category.empty() && a.contains("kind") && a["kind"].is_string())
        s.category = a["kind"].get<std::string>();
    }
    t.ranks = std::max(t.ranks, s.rank + 1);
    t.slices.push_back(std::move(s));
  }
  return t;
}

Trace load_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in, InputError, path << ": cannot open the trace file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_trace(ss.str(), path);
}

}  // namespace pipewright::sched
