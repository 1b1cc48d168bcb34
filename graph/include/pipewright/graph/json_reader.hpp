// The one strict JSON reader behind every pipewright loader (models, partitions, plans, cost
// profiles, clusters, traces, `run --config`).
//
// nlohmann::json silently keeps the last of duplicate keys and accepts any nesting; pipewright
// rejects duplicates, limits nesting depth and size (checked before anything is allocated), so a
// hostile or broken file fails with a ParseError instead of being half-understood. Every error
// names the file, the line and column, and the JSON pointer of the offending value:
//   "<source>:<line>:<column>: at <json pointer>: <what is wrong>"
// (the root's pointer is shown as "(root)"; a source without text, such as a model built in code,
// gives "<source> at <json pointer>: ...").
//
// Note [Lazy error positions]: nlohmann keeps no positions, and computing line:column for every
// value would cost a scan of the text per value (quadratic). Readers keep only JSON pointers (and
// byte offsets where they have them) and turn them into line:column when an error is thrown: one
// linear scan of the text, once. Loaders therefore stay linear in the size of their input.
//
// This header exposes nlohmann::json, unlike graph's other public headers: it is the shared
// implementation of pipewright's loaders, included only from .cpp files of targets that link
// nlohmann_json themselves; no public header of any module includes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pipewright::json {

using Json = nlohmann::json;

struct Limits {
  std::size_t max_bytes = std::size_t{1} << 30;  // 1 GiB of JSON text
  int max_depth = 32;                            // nesting of objects and arrays
};

// The size of the input file at `path`, which must be a regular file (or a symlink to one) of at
// most `max_bytes` bytes. A FIFO (which would block, or be read once and then block), a device
// (/dev/zero never ends) or a socket is refused before it is opened: pipewright checks the size
// an input implies before allocating for it (issue 20, item 7). `what` names the kind of file in
// errors ("model file"). Throws InputError naming the path and the kind of file.
std::uint64_t check_input_file(const std::string& path, std::string_view what,
                               std::uint64_t max_bytes);

// Reads a whole input file of at most `max_bytes` bytes (check_input_file first, then the size
// is checked again while reading, in case the file grows). Throws InputError naming the path.
[[nodiscard]] std::string read_text_file(const std::string& path, std::string_view what,
                                         std::size_t max_bytes);

// Where the text came from, for error messages. `text` may be empty (no positions then); it must
// outlive every At that refers to this Source.
struct Source {
  std::string name;
  std::string_view text;
};

// "line:column" (1-based) of byte `offset` in `text`. Linear in `offset`: errors only.
[[nodiscard]] std::string line_col(std::string_view text, std::size_t offset);

// `base` + "/" + key with JSON-pointer escaping (~ -> ~0, / -> ~1).
[[nodiscard]] std::string pointer_append(const std::string& base, std::string_view key);
[[nodiscard]] std::string pointer_append(const std::string& base, std::size_t index);

// The error prefix for the value at `pointer`: "<name>:<line>:<column>: at <pointer>" (positions
// found lazily in the text, Note [Lazy error positions]), or "<name> at <pointer>" without text.
[[nodiscard]] std::string where(const Source& source, const std::string& pointer);

// Finds where values start in already-parsed, valid JSON text (nlohmann keeps no positions).
// Each call is one forward scan of the text: use it to report errors, or once per document.
class Locator {
 public:
  explicit Locator(std::string_view text) : t_(text) {}

  // Offset of the value at `pointer`, or of the closest enclosing value that exists. With
  // `last_duplicate`, the last of several equal keys is taken for the final token.
  [[nodiscard]] std::size_t find(const std::string& pointer, bool last_duplicate = false) const;

  // For an array of arrays at `pointer`: the offset of every element of every inner array.
  [[nodiscard]] std::vector<std::vector<std::size_t>> nested_element_offsets(
      const std::string& pointer) const;

 private:
  std::size_t ws(std::size_t p) const;
  std::size_t skip_string(std::size_t p) const;
  std::size_t skip_value(std::size_t p) const;
  std::size_t child(std::size_t p, const std::string& token, bool last) const;
  std::string_view t_;
};

// A parsed document; `source.text` still refers to the caller's text.
struct Document {
  Source source;
  Json root;
};

// Parses `text`; rejects syntax errors, duplicate object keys, nesting deeper than
// limits.max_depth and texts longer than limits.max_bytes, with ParseError("<name>:<l>:<c>: ...").
[[nodiscard]] Document parse_strict(std::string_view text, const std::string& source_name,
                                    const Limits& limits = {});
// Reads `path` (read_text_file) into `text`, then parses it; the Document refers to `text`.
[[nodiscard]] Document load_strict(const std::string& path, std::string_view what,
                                   std::string& text, const Limits& limits = {});

// A JSON value together with where it came from, for error messages. Field errors name the value's
// JSON pointer and position: At{v, src, "/a/b"}.fail("...") throws
// ParseError("<name>:<line>:<col>: at /a/b: ...").
struct At {
  const Json& value;
  const Source& source;
  std::string pointer;

  // Throws ErrorType(where(source, pointer) + ": " + message).
  template <typename ErrorType>
  [[noreturn]] void fail_as(const std::string& message) const {
    throw ErrorType(where(source, pointer) + ": " + message);
  }
  [[noreturn]] void fail(const std::string& message) const;        // ParseError
  [[noreturn]] void fail_graph(const std::string& message) const;  // InvalidGraphError

  void expect_object() const;
  void expect_array() const;
  // Rejects keys not in `allowed` (typos must not be silently ignored).
  void only_keys(std::initializer_list<std::string_view> allowed) const;
  // The member `key` exists (possibly null).
  [[nodiscard]] bool has(std::string_view key) const;
  // The member `key` exists and is not null (optional fields written as null are absent).
  [[nodiscard]] bool has_value(std::string_view key) const;
  // The member `key` (must exist).
  [[nodiscard]] At operator[](std::string_view key) const;
  [[nodiscard]] At operator[](std::size_t index) const;

  [[nodiscard]] std::string as_string() const;
  [[nodiscard]] bool as_bool() const;
  [[nodiscard]] std::int64_t as_int() const;
  [[nodiscard]] std::int64_t as_int(std::int64_t min, std::int64_t max) const;
  [[nodiscard]] double as_finite_nonnegative() const;
  [[nodiscard]] double as_finite_positive() const;
};

// "integer" / "number" / "string" / ... as used in "expected X, got Y" messages.
[[nodiscard]] std::string type_name(const Json& j);

}  // namespace pipewright::json
