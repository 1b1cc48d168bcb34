#include "json_io.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "pipewright/graph/error.hpp"

namespace pipewright::graph::detail {

std::string read_text_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in.good(), ParseError, path << ": cannot open file for reading");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  PW_CHECK(size >= 0, ParseError, path << ": cannot read file (not a regular file?)");
  PW_CHECK(static_cast<std::uint64_t>(size) <= max_bytes, ParseError,
           path << ": file is " << size << " bytes, more than the limit of " << max_bytes);
  in.seekg(0, std::ios::beg);
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), size);
  PW_CHECK(in.good() || in.eof(), ParseError, path << ": read error");
  return text;
}

std::string pointer_append(const std::string& base, std::string_view key) {
  std::string out = base + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string pointer_append(const std::string& base, std::size_t index) {
  return base + "/" + std::to_string(index);
}

namespace {

// Tracks where the parser is (a JSON pointer) and the keys seen in each open object, for the
// duplicate-key and depth checks of parse_strict. nlohmann's parser callback reports events in
// document order: object_start/array_start, key, value, object_end/array_end.
class StrictTracker {
 public:
  StrictTracker(const std::string& source, int max_depth)
      : source_(source), max_depth_(max_depth) {}

  bool on_event(int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        begin_element();
        PW_CHECK(depth < max_depth_, ParseError,
                 source_ << " at " << display(pointer()) << ": nesting deeper than the limit of "
                         << max_depth_);
        frames_.push_back(Frame{event == E::array_start, 0, {}, {}, pointer()});
        break;
      case E::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        PW_CHECK(top.keys.insert(top.key).second, ParseError,
                 source_ << " at " << display(pointer_append(top.base, top.key))
                         << ": duplicate key \"" << top.key << "\"");
        break;
      }
      case E::value:
        begin_element();
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_array = false;
    std::size_t next_index = 0;
    std::string key;
    std::set<std::string> keys;
    std::string base;
  };

  // A value, object or array starts inside the current container: advance the array index.
  void begin_element() {
    if (!frames_.empty() && frames_.back().is_array) {
      current_index_ = frames_.back().next_index++;
    }
  }

  std::string pointer() const {
    if (frames_.empty()) return "";
    const Frame& top = frames_.back();
    return top.is_array ? pointer_append(top.base, current_index_)
                        : pointer_append(top.base, top.key);
  }

  static std::string display(const std::string& pointer) {
    return pointer.empty() ? std::string("(root)") : pointer;
  }

  const std::string& source_;
  int max_depth_;
  std::vector<Frame> frames_;
  std::size_t current_index_ = 0;
};

std::string display_pointer(const std::string& pointer) {
  return pointer.empty() ? std::string("(root)") : pointer;
}

std::string type_name(const Json& j) {
  if (j.is_number_integer() || j.is_number_unsigned()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

}  // namespace

Json parse_strict(std::string_view text, const std::string& source, int max_depth,
                  std::size_t max_bytes) {
  PW_CHECK(
      text.size() <= max_bytes, ParseError,
      source << ": input is " << text.size() << " bytes, more than the limit of " << max_bytes);
  StrictTracker tracker(source, max_depth);
  try {
    return Json::parse(text.begin(), text.end(),
                       [&tracker](int depth, Json::parse_event_t event, Json& parsed) {
                         return tracker.on_event(depth, event, parsed);
                       });
  } catch (const Json::exception& e) {
    // e.what() names the line and column ("syntax error while parsing value - ... at line 3,
    // column 7") or the offending number ("number overflow parsing '1e999'"); strip nlohmann's
    // "[json.exception.parse_error.101] " prefix.
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    throw ParseError(source + ": invalid JSON: " + what);
  }
}

void At::fail(const std::string& message) const {
  throw ParseError(source + " at " + display_pointer(pointer) + ": " + message);
}

void At::fail_graph(const std::string& message) const {
  throw InvalidGraphError(source + " at " + display_pointer(pointer) + ": " + message);
}

void At::expect_object() const {
  if (!value.is_object()) fail("expected an object, got " + type_name(value));
}

void At::expect_array() const {
  if (!value.is_array()) fail("expected an array, got " + type_name(value));
}

void At::only_keys(std::initializer_list<std::string_view> allowed) const {
  expect_object();
  for (const auto& item : value.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || item.key() == a;
    if (!known) {
      std::string list;
      for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      At{item.value(), source, pointer_append(pointer, item.key())}.fail(
          "unknown field \"" + item.key() + "\" (known fields: " + list + ")");
    }
  }
}

bool At::has(std::string_view key) const {
  return value.is_object() && value.find(std::string(key)) != value.end();
}

At At::operator[](std::string_view key) const {
  expect_object();
  const auto it = value.find(std::string(key));
  if (it == value.end()) fail("missing required field \"" + std::string(key) + "\"");
  return At{*it, source, pointer_append(pointer, key)};
}

At At::operator[](std::size_t index) const {
  expect_array();
  PW_ASSERT(index < value.size(), "index " << index << " out of range");
  return At{value[index], source, pointer_append(pointer, index)};
}

std::string At::as_string() const {
  if (!value.is_string()) fail("expected a string, got " + type_name(value));
  return value.get<std::string>();
}

std::int64_t At::as_int() const {
  return as_int(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
}

std::int64_t At::as_int(std::int64_t min, std::int64_t max) const {
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max) || (min > 0 && u < static_cast<std::uint64_t>(min))) {
      fail("must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
           "], got " + std::to_string(u));
    }
    return static_cast<std::int64_t>(u);
  }
  if (!value.is_number_integer()) fail("expected an integer, got " + type_name(value));
  const auto v = value.get<std::int64_t>();
  if (v < min || v > max) {
    fail("must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
         std::to_string(v));
  }
  return v;
}

double At::as_finite_nonnegative() const {
  if (!value.is_number()) fail("expected a number, got " + type_name(value));
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < 0.0) {
    std::ostringstream os;
    os << "must be a finite number >= 0, got " << v;
    fail(os.str());
  }
  return v;
}

double At::as_finite_positive() const {
  const double v = as_finite_nonnegative();
  if (v <= 0.0) fail("must be > 0");
  return v;
}

}  // namespace pipewright::graph::detail
