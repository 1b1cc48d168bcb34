// Trace reading (trace.hpp: parse_trace, load_trace; Note [Streaming trace reader]).
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/sched/trace.hpp"

namespace pipewright::sched {
namespace {

using json::Json;

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
    std::optional<Value> stage, microbatch, step, kind, bytes, send_us, drain_us, cpu_us;
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
    if (k == "send_us") return &e.send_us;
    if (k == "drain_us") return &e.drain_us;
    if (k == "cpu_us") return &e.cpu_us;
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
              event_.send_us = event_.drain_us = event_.cpu_us = std::nullopt;
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
      if (is_num(e.send_us)) s.send_us = std::max(0.0, e.send_us->d);
      if (is_num(e.drain_us)) s.drain_us = std::max(0.0, e.drain_us->d);
      if (is_num(e.cpu_us)) s.cpu_us = std::max(0.0, e.cpu_us->d);
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
