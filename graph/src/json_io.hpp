// Strict JSON reading for pipewright's input files (private to graph/).
//
// nlohmann::json silently keeps the last of duplicate keys; pipewright rejects them, and limits
// nesting depth and size, so a hostile or broken file fails with a ParseError that names the file
// and a JSON pointer instead of being half-understood. The field helpers below produce messages of
// the form "<source> at <json pointer>: <what is wrong>".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pipewright::graph::detail {

using Json = nlohmann::json;

// Reads a whole file, at most max_bytes (ParseError naming the file otherwise).
std::string read_text_file(const std::string& path, std::size_t max_bytes);

// Parses `text`; rejects syntax errors, duplicate object keys, nesting deeper than max_depth and
// texts longer than max_bytes, with ParseError("<source> ...").
Json parse_strict(std::string_view text, const std::string& source, int max_depth,
                  std::size_t max_bytes);

// `base` + "/" + key with JSON-pointer escaping (~ -> ~0, / -> ~1).
std::string pointer_append(const std::string& base, std::string_view key);
std::string pointer_append(const std::string& base, std::size_t index);

// A JSON value together with where it came from, for error messages.
struct At {
  const Json& value;
  const std::string& source;
  std::string pointer;

  // Throws ErrorType("<source> at <pointer>: <message>").
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_graph(const std::string& message) const;  // InvalidGraphError

  void expect_object() const;
  void expect_array() const;
  // Rejects keys not in `allowed` (typos must not be silently ignored).
  void only_keys(std::initializer_list<std::string_view> allowed) const;
  [[nodiscard]] bool has(std::string_view key) const;
  // The member `key` (must exist).
  [[nodiscard]] At operator[](std::string_view key) const;
  [[nodiscard]] At operator[](std::size_t index) const;

  [[nodiscard]] std::string as_string() const;
  [[nodiscard]] std::int64_t as_int() const;
  [[nodiscard]] std::int64_t as_int(std::int64_t min, std::int64_t max) const;
  [[nodiscard]] double as_finite_nonnegative() const;
  [[nodiscard]] double as_finite_positive() const;
};

}  // namespace pipewright::graph::detail
