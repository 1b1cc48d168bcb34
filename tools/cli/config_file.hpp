// `run --config FILE` read as its key = value items, before any key means anything: TOML
// (toml++), or JSON when the name ends in .json or the text starts with '{' (through the one
// strict reader, pipewright/graph/json_reader.hpp). run_config.cpp maps the items to `run`'s
// flags.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipewright/graph/json_reader.hpp"

namespace pipewright::cli {

enum class ConfigKind : std::uint8_t { kInt, kFloat, kString, kBool, kTable, kArray, kOther };
// "an integer", "a table", ... for messages.
[[nodiscard]] const char* kind_name(ConfigKind kind);

// One key = value of the file. `where` gives the error prefix naming file, line, column and key
// (computed only on error: Note [Lazy error positions] in json_reader.hpp).
struct ConfigItem {
  std::string section;  // "" at the top level
  std::string key;      // as written
  ConfigKind kind = ConfigKind::kOther;
  std::string text;  // the value as a command-line argument (integers, numbers, strings)
  bool boolean = false;
  std::function<std::string()> where;
};

// Throws ConfigError "<where>: <message>".
[[noreturn]] void fail(const ConfigItem& item, const std::string& message);

// Shortest text that reads back as the same double, with ".0" for whole numbers: how the file's
// numbers become flag values and how `run --dry-run` prints them back.
[[nodiscard]] std::string toml_number(double v);

// The items of the file at `path` whose text is `text`, in file order. A top-level table named
// by `is_section` holds that section's items; every other top-level key is an item of section
// "". For JSON, `doc` receives the parsed document, which the items' `where` refer to (keep it
// alive while they are used). Throws ConfigError naming file:line:column for invalid TOML,
// ParseError for invalid JSON, and ConfigError for a TOML file in a build without toml++.
[[nodiscard]] std::vector<ConfigItem> read_config_items(
    const std::string& path, const std::string& text,
    const std::function<bool(std::string_view)>& is_section, std::optional<json::Document>& doc);

}  // namespace pipewright::cli
