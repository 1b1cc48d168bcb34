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

namespace {

// Note [Streaming trace reader]: traces of frontier-size plans hold millions of events; a JSON
// document of them took ~4 KB of memory per event. TraceReader reads the text with nlohmann's
// SAX interface and keeps only the current event's fields, so reading is linear in time and the
// memory is the slices themselves. Its errors are the shared strict reader's
// (pipewright/graph/json_reader.hpp), in the same order: a syntax error, a duplicate key or too
// deep a nesting anywhere first, then the root's shape, then the first bad event; each names
// file, line:column (found lazily, Note [Lazy error positions]) and JSON pointer.
class TraceReader {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  TraceReader(std::string_view text, std::string_view origin, const json::Limits& limits)
      : source_{std::string(origin), text}, limits_(limits) {}

  Trace finish(bool syntax_ok) {
    if (!structure_error_.empty()) throw ParseError(structure_error_);
    if (!syntax_ok) {
      throw ParseError(source_.name + ":" + json::line_col(source_.text, syntax_error_at_) +
                       ": invalid JSON: " + syntax_error_);
    }
    if (!root_is_object_) {
      throw ParseError(json::where(source_, "") + ": expected an object, got " + root_type_);
    }
    if (!events_is_array_) {
      throw ParseError(json::where(source_, "/traceEvents") + ": must be an array");
    }
    if (!event_error_pointer_.empty()) {
      throw ParseError(json::where(source_, event_error_pointer_) + ":" + event_error_);
    }
    if (other_seen_) trace_.info = other_;
    std::sort(trace_.flows.begin(), trace_.flows.end(),
              [](const TraceFlow& a, const TraceFlow& b) { return a.id < b.id; });
    return std::move(trace_);
  }

  // nlohmann SAX interface.
  bool null() { return scalar(Value{}); }
  bool boolean(bool) { return scalar(Value{}); }
  bool number_integer(number_integer_t v) { return scalar(Value::integer(v)); }
  bool number_unsigned(number_unsigned_t v) {
    return scalar(Value::integer(static_cast<std::int64_t>(v)));
  }
  bool number_float(number_float_t v, const string_t&) { return scalar(Value::number(v)); }
  bool string(string_t& v) { return scalar(Value::text(std::move(v))); }
  bool binary(binary_t&) { return scalar(Value{}); }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool key(string_t& k) {
    Frame& top = stack_.back();
    if (!top.keys.insert(k)) {
      const std::string at = json::pointer_append(pointer(stack_.size() - 1), k);
      const std::size_t offset = json::Locator(source_.text).find(at, /*last_duplicate=*/true);
      structure_error_ = source_.name + ":" + json::line_col(source_.text, offset) + ": at " + at +
                         ": duplicate key \"" + k + "\"";
      return false;
    }
    top.key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    // `position` is the 1-based offset of the character where parsing failed. Strip nlohmann's
    // "[json.exception.parse_error.101] " prefix.
    syntax_error_ = e.what();
    if (const auto p = syntax_error_.find("] "); p != std::string::npos) {
      syntax_error_ = syntax_error_.substr(p + 2);
    }
    syntax_error_at_ = position > 0 ? position - 1 : 0;
    return false;
  }

 private:
  struct Value {
    enum Kind { kOther, kString, kInteger, kFloat } kind = kOther;
    std::string s;
    std::int64_t i = 0;
    double d = 0;
    static Value integer(std::int64_t v) {
      Value x;
      x.kind = kInteger;
      x.i = v;
      x.d = static_cast<double>(v);
      return x;
    }
    static Value number(double v) {
      Value x;
      x.kind = kFloat;
      x.d = v;
      return x;
    }
    std::string type_name() const {
      switch (kind) {
        case kString:
          return "string";
        case kInteger:
          return "integer";
        case kFloat:
          return "number";
        case kOther:
          break;
      }
      return "a literal";
    }
    static Value text(std::string v) {
      Value x;
      x.kind = kString;
      x.s = std::move(v);
      return x;
    }
  };
  enum class Role { kRoot, kEvents, kEvent, kArgs, kOtherData, kIgnored };
  // The keys of one open object, for the duplicate-key check: events have a handful, searched
  // in place without allocating a tree; an object with more than 16 keys switches to a set, so
  // reading stays linear in the text.
  class KeySet {
   public:
    bool insert(const std::string& k) {
      if (set_.empty()) {
        if (std::find(few_.begin(), few_.end(), k) != few_.end()) return false;
        few_.push_back(k);
        if (few_.size() > 16) set_.insert(few_.begin(), few_.end());
        return true;
      }
      return set_.insert(k).second;
    }

   private:
    std::vector<std::string> few_;
    std::set<std::string> set_;
  };
  struct Frame {
    Role role;
    bool object = true;
    std::string key;             // objects: the key whose value comes next
    std::size_t next_index = 0;  // arrays: the index of the next element
    KeySet keys;
  };
  // The fields of the event being read (present ones only).
  struct Event {
    std::optional<Value> ph, name, cat, pid, tid, ts, dur, id;
    bool args = false;
    std::optional<Value> stage, microbatch, step, kind, bytes;
  };

  static std::optional<Value>* event_field(Event& e, const std::string& k) {
    if (k == "ph") return &e.ph;
    if (k == "name") return &e.name;
    if (k == "cat") return &e.cat;
    if (k == "pid") return &e.pid;
    if (k == "tid") return &e.tid;
    if (k == "ts") return &e.ts;
    if (k == "dur") return &e.dur;
    if (k == "id") return &e.id;
    return nullptr;
  }
  static std::optional<Value>* args_field(Event& e, const std::string& k) {
    if (k == "stage") return &e.stage;
    if (k == "microbatch") return &e.microbatch;
    if (k == "step") return &e.step;
    if (k == "kind") return &e.kind;
    if (k == "bytes") return &e.bytes;
    return nullptr;
  }

  // A value (a scalar, or a container being opened) at the current position.
  // Returns the role of the container if `container` and it is one we read.
  Role place(Value v, bool container, bool object) {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().next_index;
    if (stack_.empty()) {
      root_is_object_ = container && object;
      root_type_ = container ? (object ? "object" : "array") : v.type_name();
      return root_is_object_ ? Role::kRoot : Role::kIgnored;
    }
    Frame& parent = stack_.back();
    switch (parent.role) {
      case Role::kRoot:
        if (parent.key == "traceEvents") {
          events_is_array_ = container && !object;
          if (events_is_array_) return Role::kEvents;
        } else if (parent.key == "otherData") {
          other_seen_ = container && object;
          other_ = TraceInfo{"", "", ""};
          if (other_seen_) return Role::kOtherData;
        }
        return Role::kIgnored;
      case Role::kEvents: {
        const std::size_t index = event_index_++;
        if (container && object) {
          event_ = Event{};
          return Role::kEvent;
        }
        set_event_error(index, "", " must be an object");
        return Role::kIgnored;
      }
      case Role::kEvent:
        if (parent.key == "args") {
          event_.args = container && object;
          event_.stage = event_.microbatch = event_.step = event_.kind = event_.bytes =
              std::nullopt;
          if (event_.args) return Role::kArgs;
        }
        if (auto* f = event_field(event_, parent.key)) *f = std::move(v);
        return Role::kIgnored;
      case Role::kArgs:
        if (auto* f = args_field(event_, parent.key)) *f = std::move(v);
        return Role::kIgnored;
      case Role::kOtherData:
        if (v.kind == Value::kString) {
          if (parent.key == "source") other_.source = v.s;
          if (parent.key == "plan") other_.plan = v.s;
          if (parent.key == "schedule") other_.schedule = v.s;
        }
        return Role::kIgnored;
      case Role::kIgnored:
        return Role::kIgnored;
    }
    return Role::kIgnored;
  }

  bool scalar(Value v) {
    place(std::move(v), false, false);
    return true;
  }
  bool open(bool object) {
    const Role role = place(Value{}, true, object);
    if (stack_.size() >= static_cast<std::size_t>(limits_.max_depth)) {
      structure_error_ = json::where(source_, pointer()) + ": nesting deeper than the limit of " +
                         std::to_string(limits_.max_depth);
      return false;
    }
    stack_.push_back(Frame{role, object, {}, 0, {}});
    return true;
  }

  // The JSON pointer of the value being read inside the first `frames` open containers (all of
  // them by default); built only for errors.
  std::string pointer(std::size_t frames = std::string::npos) const {
    std::string out;
    for (std::size_t i = 0; i < std::min(frames, stack_.size()); ++i) {
      const Frame& f = stack_[i];
      out = f.object ? json::pointer_append(out, f.key)
                     : json::pointer_append(out, f.next_index > 0 ? f.next_index - 1 : 0);
    }
    return out;
  }
  bool close() {
    const Role role = stack_.back().role;
    stack_.pop_back();
    if (role == Role::kEvent) finish_event(event_index_ - 1);
    return true;
  }

  void set_event_error(std::size_t index, const std::string& field, const std::string& why) {
    if (!event_error_pointer_.empty()) return;
    event_error_pointer_ =
        "/traceEvents/" + std::to_string(index) + (field.empty() ? "" : "/" + field);
    event_error_ = why;
  }

  void finish_event(std::size_t index) {
    if (!event_error_pointer_.empty()) return;  // only the first bad event is reported
    const Event& e = event_;
    auto is_int = [](const std::optional<Value>& v) { return v && v->kind == Value::kInteger; };
    auto is_num = [](const std::optional<Value>& v) {
      return v && (v->kind == Value::kInteger || v->kind == Value::kFloat) && std::isfinite(v->d);
    };
    auto is_str = [](const std::optional<Value>& v) { return v && v->kind == Value::kString; };
    if (!is_str(e.ph)) return set_event_error(index, "ph", " is missing or not a string");
    const std::string& ph = e.ph->s;
    if (ph == "M") {
      if (is_str(e.name) && e.name->s == "process_name") {
        if (!is_int(e.pid)) return set_event_error(index, "pid", " is missing or not an integer");
        trace_.ranks =
            std::max<std::int32_t>(trace_.ranks, static_cast<std::int32_t>(e.pid->i) + 1);
      }
      return;
    }
    if (ph == "s" || ph == "f") return finish_flow(index, ph == "s");
    if (ph == "C") {
      if (!is_str(e.name) || e.name->s != "memory") return;
      if (!is_int(e.pid)) return set_event_error(index, "pid", " is missing or not an integer");
      if (!is_num(e.ts)) return set_event_error(index, "ts", " is missing or not a number");
      if (!e.args || !is_int(e.bytes)) {
        return set_event_error(index, "args/bytes", " is missing or not an integer");
      }
      trace_.memory.push_back(
          TraceCounter{static_cast<std::int32_t>(e.pid->i), e.ts->d, e.bytes->i});
      return;
    }
    if (ph != "X") return;
    TraceSlice s;
    if (!is_str(e.name)) return set_event_error(index, "name", " is missing or not a string");
    s.name = e.name->s;
    if (is_str(e.cat)) s.category = e.cat->s;
    if (!is_int(e.pid)) return set_event_error(index, "pid", " is missing or not an integer");
    s.rank = static_cast<std::int32_t>(e.pid->i);
    if (!is_int(e.tid)) return set_event_error(index, "tid", " is missing or not an integer");
    if (e.tid->i < 0 || e.tid->i > 3) {
      return set_event_error(index, "tid",
                             " must be a stream 0..3, got " + std::to_string(e.tid->i));
    }
    s.stream = static_cast<TraceStream>(e.tid->i);
    if (!is_num(e.ts)) return set_event_error(index, "ts", " is missing or not a number");
    s.start_us = e.ts->d;
    if (!is_num(e.dur)) return set_event_error(index, "dur", " is missing or not a number");
    s.duration_us = e.dur->d;
    if (s.duration_us < 0) return set_event_error(index, "dur", " must be >= 0");
    if (e.args) {
      if (is_int(e.stage)) s.stage = static_cast<std::int32_t>(e.stage->i);
      if (is_int(e.microbatch)) s.microbatch = static_cast<std::int32_t>(e.microbatch->i);
      if (is_int(e.step)) s.step = e.step->i;
      if (s.category.empty() && is_str(e.kind)) s.category = e.kind->s;
    }
    trace_.ranks = std::max(trace_.ranks, s.rank + 1);
    trace_.slices.push_back(std::move(s));
  }

  void finish_flow(std::size_t index, bool start) {
    const Event& e = event_;
    auto is_int = [](const std::optional<Value>& v) { return v && v->kind == Value::kInteger; };
    if (!is_int(e.id)) return set_event_error(index, "id", " is missing or not an integer");
    if (!is_int(e.pid)) return set_event_error(index, "pid", " is missing or not an integer");
    if (!is_int(e.tid) || e.tid->i < 0 || e.tid->i > 3) {
      return set_event_error(index, "tid", " is missing or not a stream 0..3");
    }
    if (!e.ts || !(e.ts->kind == Value::kInteger || e.ts->kind == Value::kFloat) ||
        !std::isfinite(e.ts->d)) {
      return set_event_error(index, "ts", " is missing or not a number");
    }
    auto [it, fresh] = flow_index_.try_emplace(e.id->i, trace_.flows.size());
    if (fresh) {
      trace_.flows.emplace_back();
      trace_.flows.back().id = e.id->i;
    }
    TraceFlow& f = trace_.flows[it->second];
    if (e.cat && e.cat->kind == Value::kString) f.category = e.cat->s;
    const auto rank = static_cast<std::int32_t>(e.pid->i);
    const auto stream = static_cast<TraceStream>(e.tid->i);
    if (start) {
      if (f.has_start) return set_event_error(index, "id", " starts a second flow of that id");
      f.has_start = true;
      f.from_rank = rank;
      f.from_stream = stream;
      f.from_us = e.ts->d;
    } else {
      if (f.has_end) return set_event_error(index, "id", " ends a second flow of that id");
      f.has_end = true;
      f.to_rank = rank;
      f.to_stream = stream;
      f.to_us = e.ts->d;
    }
  }

  std::map<std::int64_t, std::size_t> flow_index_;  // flow id -> index in trace_.flows
  json::Source source_;
  json::Limits limits_;
  std::vector<Frame> stack_;
  std::size_t event_index_ = 0;
  Event event_;
  bool root_is_object_ = false;
  bool events_is_array_ = false;
  bool other_seen_ = false;
  TraceInfo other_;
  std::string root_type_ = "nothing";
  std::string syntax_error_;
  std::size_t syntax_error_at_ = 0;
  std::string structure_error_;  // a duplicate key or too deep a nesting
  std::string event_error_pointer_;
  std::string event_error_;
  Trace trace_;
};

}  // namespace

Trace parse_trace(std::string_view text, std::string_view origin) {
  const json::Limits limits;
  PW_CHECK(text.size() <= limits.max_bytes, ParseError,
           origin << ": input is " << text.size() << " bytes, more than the limit of "
                  << limits.max_bytes);
  TraceReader reader(text, origin, limits);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &reader);
  return reader.finish(ok);
}

Trace load_trace(const std::string& path) {
  return parse_trace(json::read_text_file(path, "trace file", json::Limits{}.max_bytes), path);
}

}  // namespace pipewright::sched
