#include "pipewright/graph/json_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::json {
namespace {

// Closes a descriptor on every path out of read_text_file.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

std::string display(const std::string& pointer) {
  return pointer.empty() ? std::string("(root)") : pointer;
}

// The tokens of a JSON pointer, unescaped (~1 -> /, ~0 -> ~).
std::vector<std::string> tokens_of(const std::string& pointer) {
  std::vector<std::string> out;
  std::size_t p = 0;
  while (p < pointer.size() && pointer[p] == '/') {
    std::string token;
    for (++p; p < pointer.size() && pointer[p] != '/'; ++p) {
      if (pointer[p] == '~' && p + 1 < pointer.size()) {
        token += pointer[p + 1] == '1' ? '/' : '~';
        ++p;
      } else {
        token += pointer[p];
      }
    }
    out.push_back(std::move(token));
  }
  return out;
}

// Tracks where the parser is (a JSON pointer) and the keys seen in each open object, for the
// duplicate-key and depth checks of parse_strict. nlohmann's parser callback reports events in
// document order: object_start/array_start, key, value, object_end/array_end.
class StrictTracker {
 public:
  StrictTracker(const Source& source, int max_depth) : source_(source), max_depth_(max_depth) {}

  bool on_event(int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        begin_element();
        if (depth >= max_depth_) {
          throw ParseError(where(source_, pointer()) + ": nesting deeper than the limit of " +
                           std::to_string(max_depth_));
        }
        frames_.push_back(Frame{event == E::array_start, 0, {}, {}, pointer()});
        break;
      case E::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) {
          const std::string at = pointer_append(top.base, top.key);
          const std::size_t offset = Locator(source_.text).find(at, /*last_duplicate=*/true);
          throw ParseError(source_.name + ":" + line_col(source_.text, offset) + ": at " + at +
                           ": duplicate key \"" + top.key + "\"");
        }
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

  const Source& source_;
  int max_depth_;
  std::vector<Frame> frames_;
  std::size_t current_index_ = 0;
};

}  // namespace

std::uint64_t check_input_file(const std::string& path, std::string_view what,
                               std::uint64_t max_bytes) {
  struct stat st {};
  PW_CHECK(::stat(path.c_str(), &st) == 0, InputError,
           path << ": cannot open the " << what << " for reading: " << std::strerror(errno));
  PW_CHECK(!S_ISDIR(st.st_mode), InputError, path << ": is a directory, not a " << what);
  const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO (pipe)"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  PW_CHECK(S_ISREG(st.st_mode), InputError,
           path << ": the " << what << " is " << kind
                << ", not a regular file; pipewright reads inputs whose size it can check before "
                   "reading (save the stream to a file first)");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  PW_CHECK(size <= max_bytes, ParseError,
           path << ": file is " << size << " bytes, more than the limit of " << max_bytes);
  return size;
}

std::string read_text_file(const std::string& path, std::string_view what, std::size_t max_bytes) {
  const std::uint64_t size = check_input_file(path, what, max_bytes);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  PW_CHECK(fd.get() >= 0, InputError,
           path << ": cannot open the " << what << " for reading: " << std::strerror(errno));
  struct stat st {};
  PW_CHECK(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), InputError,
           path << ": the " << what << " changed while being opened");
  std::string text;
  text.reserve(static_cast<std::size_t>(size));
  // Read to the end (a regular file may still grow), never past the limit.
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    PW_CHECK(n >= 0, InputError, path << ": read error: " << std::strerror(errno));
    if (n == 0) break;
    PW_CHECK(text.size() + static_cast<std::size_t>(n) <= max_bytes, ParseError,
             path << ": file is more than the limit of " << max_bytes << " bytes");
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

std::string line_col(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  std::size_t col = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
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

std::string where(const Source& source, const std::string& pointer) {
  if (source.text.empty()) return source.name + " at " + display(pointer);
  return source.name + ":" + line_col(source.text, Locator(source.text).find(pointer)) + ": at " +
         display(pointer);
}

// --- Locator -------------------------------------------------------------------------------------

std::size_t Locator::ws(std::size_t p) const {
  while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\n' || t_[p] == '\r' || t_[p] == '\t')) ++p;
  return p;
}

std::size_t Locator::skip_string(std::size_t p) const {  // p at the opening quote
  for (++p; p < t_.size() && t_[p] != '"'; ++p) {
    if (t_[p] == '\\') ++p;
  }
  return p + 1;
}

std::size_t Locator::skip_value(std::size_t p) const {
  p = ws(p);
  if (p >= t_.size()) return p;
  if (t_[p] == '"') return skip_string(p);
  if (t_[p] == '{' || t_[p] == '[') {
    int depth = 0;
    for (; p < t_.size(); ++p) {
      if (t_[p] == '"') {
        p = skip_string(p) - 1;
      } else if (t_[p] == '{' || t_[p] == '[') {
        ++depth;
      } else if (t_[p] == '}' || t_[p] == ']') {
        if (--depth == 0) return p + 1;
      }
    }
    return p;
  }
  while (p < t_.size() && t_[p] != ',' && t_[p] != '}' && t_[p] != ']') ++p;
  return p;
}

std::size_t Locator::child(std::size_t p, const std::string& token, bool last) const {
  if (p >= t_.size()) return std::string_view::npos;
  if (t_[p] == '{') {
    std::size_t found = std::string_view::npos;
    p = ws(p + 1);
    while (p < t_.size() && t_[p] == '"') {
      const std::size_t key_end = skip_string(p);
      const std::string_view key = t_.substr(p + 1, key_end - p - 2);
      p = ws(key_end);
      if (p < t_.size() && t_[p] == ':') p = ws(p + 1);
      if (key == token) {
        if (!last) return p;
        found = p;
      }
      p = ws(skip_value(p));
      if (p < t_.size() && t_[p] == ',') p = ws(p + 1);
    }
    return found;
  }
  if (t_[p] == '[') {
    std::size_t want = 0;
    try {
      want = std::stoul(token);
    } catch (const std::exception&) {
      return std::string_view::npos;
    }
    p = ws(p + 1);
    for (std::size_t i = 0; p < t_.size() && t_[p] != ']'; ++i) {
      if (i == want) return p;
      p = ws(skip_value(p));
      if (p < t_.size() && t_[p] == ',') p = ws(p + 1);
    }
  }
  return std::string_view::npos;
}

std::size_t Locator::find(const std::string& pointer, bool last_duplicate) const {
  const std::vector<std::string> path = tokens_of(pointer);
  std::size_t pos = ws(0);
  for (std::size_t i = 0; i < path.size(); ++i) {
    const std::size_t next = child(pos, path[i], last_duplicate && i + 1 == path.size());
    if (next == std::string_view::npos) return pos;
    pos = next;
  }
  return pos;
}

std::vector<std::vector<std::size_t>> Locator::nested_element_offsets(
    const std::string& pointer) const {
  std::vector<std::vector<std::size_t>> out;
  std::size_t p = find(pointer);
  if (p >= t_.size() || t_[p] != '[') return out;
  p = ws(p + 1);
  while (p < t_.size() && t_[p] == '[') {
    out.emplace_back();
    p = ws(p + 1);
    while (p < t_.size() && t_[p] != ']') {
      out.back().push_back(p);
      p = ws(skip_value(p));
      if (p < t_.size() && t_[p] == ',') p = ws(p + 1);
    }
    p = ws(p + 1);
    if (p < t_.size() && t_[p] == ',') p = ws(p + 1);
  }
  return out;
}

// --- parsing -------------------------------------------------------------------------------------

Document parse_strict(std::string_view text, const std::string& source_name, const Limits& limits) {
  PW_CHECK(text.size() <= limits.max_bytes, ParseError,
           source_name << ": input is " << text.size() << " bytes, more than the limit of "
                       << limits.max_bytes);
  Document doc{Source{source_name, text}, Json()};
  StrictTracker tracker(doc.source, limits.max_depth);
  try {
    doc.root = Json::parse(text.begin(), text.end(),
                           [&tracker](int depth, Json::parse_event_t event, Json& parsed) {
                             return tracker.on_event(depth, event, parsed);
                           });
  } catch (const Json::parse_error& e) {
    // e.byte is the 1-based offset of the character where parsing failed; e.what() names the
    // line and column too ("syntax error while parsing value - ... at line 3, column 7"). Strip
    // nlohmann's "[json.exception.parse_error.101] " prefix.
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    throw ParseError(source_name + ":" + line_col(text, at) + ": invalid JSON: " + what);
  } catch (const Json::exception& e) {
    // Number overflow ("number overflow parsing '1e999'") carries no position: the number's
    // first occurrence in the text gives it (issue 20, item 6).
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    std::string at;
    const auto open = what.find('\'');
    const auto close = what.rfind('\'');
    if (open != std::string::npos && close > open + 1) {
      const auto offset = text.find(what.substr(open + 1, close - open - 1));
      if (offset != std::string_view::npos) at = ":" + line_col(text, offset);
    }
    throw ParseError(source_name + at + ": invalid JSON: " + what);
  }
  return doc;
}

Document load_strict(const std::string& path, std::string_view what, std::string& text,
                     const Limits& limits) {
  text = read_text_file(path, what, limits.max_bytes);
  return parse_strict(text, path, limits);
}

// --- At ------------------------------------------------------------------------------------------

std::string type_name(const Json& j) {
  if (j.is_number_integer() || j.is_number_unsigned()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

void At::fail(const std::string& message) const { fail_as<ParseError>(message); }

void At::fail_graph(const std::string& message) const { fail_as<InvalidGraphError>(message); }

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

bool At::has_value(std::string_view key) const {
  if (!value.is_object()) return false;
  const auto it = value.find(std::string(key));
  return it != value.end() && !it->is_null();
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

bool At::as_bool() const {
  if (!value.is_boolean()) fail("expected true or false, got " + value.dump());
  return value.get<bool>();
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

}  // namespace pipewright::json
