// Reading `run --config` files into items (config_file.hpp).
#include "config_file.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <utility>

#include "pipewright/graph/error.hpp"

#if PIPEWRIGHT_WITH_TOML
#include <toml++/toml.h>
#endif

namespace pipewright::cli {

const char* kind_name(ConfigKind k) {
  switch (k) {
    case ConfigKind::kInt:
      return "an integer";
    case ConfigKind::kFloat:
      return "a floating-point number";
    case ConfigKind::kString:
      return "a string";
    case ConfigKind::kBool:
      return "a boolean";
    case ConfigKind::kTable:
      return "a table";
    case ConfigKind::kArray:
      return "an array";
    case ConfigKind::kOther:
      return "a date or time";
  }
  return "a value";
}

void fail(const ConfigItem& item, const std::string& message) {
  throw ConfigError(item.where() + ": " + message);
}

std::string toml_number(double v) {
  std::array<char, 64> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  std::string s(buf.data(), r.ptr);
  if (std::isfinite(v) && s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

namespace {

bool looks_like_json(const std::string& path, const std::string& text) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) return true;
  const auto first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{';
}

// JSON: {"section": {"key": value}} and/or {"long-flag": value}.
// `doc` must outlive the items (their `where` refers to its source).
void json_items(const json::Document& doc, const std::function<bool(std::string_view)>& is_section,
                const std::function<void(ConfigItem)>& sink) {
  const json::Source& source = doc.source;
  json::At{doc.root, source, ""}.expect_object();
  auto item_of = [&source](const std::string& section, const std::string& key, const json::Json& v,
                           const std::string& pointer) {
    ConfigItem item;
    item.section = section;
    item.key = key;
    item.where = [&source, pointer] { return json::where(source, pointer); };
    if (v.is_boolean()) {
      item.kind = ConfigKind::kBool;
      item.boolean = v.get<bool>();
    } else if (v.is_number_integer()) {
      item.kind = ConfigKind::kInt;
      item.text = v.dump();
    } else if (v.is_number()) {
      item.kind = ConfigKind::kFloat;
      item.text = toml_number(v.get<double>());
    } else if (v.is_string()) {
      item.kind = ConfigKind::kString;
      item.text = v.get<std::string>();
    } else if (v.is_object()) {
      item.kind = ConfigKind::kTable;
    } else if (v.is_array()) {
      item.kind = ConfigKind::kArray;
    } else {
      item.kind = ConfigKind::kOther;  // null
    }
    return item;
  };
  for (const auto& [key, value] : doc.root.items()) {
    const std::string pointer = json::pointer_append("", key);
    if (value.is_object() && is_section(key)) {
      for (const auto& [k2, v2] : value.items()) {
        sink(item_of(key, k2, v2, json::pointer_append(pointer, k2)));
      }
    } else {
      sink(item_of("", key, value, pointer));
    }
  }
}

#if PIPEWRIGHT_WITH_TOML
std::function<std::string()> toml_where(const std::string& path, const toml::source_region& at,
                                        const std::string& key) {
  return [path, line = at.begin.line, column = at.begin.column, key] {
    return path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + key;
  };
}

void toml_items(const std::string& path, const std::string& text,
                const std::function<bool(std::string_view)>& is_section,
                const std::function<void(ConfigItem)>& sink) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw ConfigError(path + ":" + std::to_string(e.source().begin.line) + ":" +
                      std::to_string(e.source().begin.column) +
                      ": invalid TOML: " + std::string(e.description()));
  }
  auto item_of = [&path](const std::string& section, const toml::key& key, const toml::node& v) {
    ConfigItem item;
    item.section = section;
    item.key = std::string(key.str());
    item.where =
        toml_where(path, key.source(), section.empty() ? item.key : section + "." + item.key);
    if (const auto* b = v.as_boolean()) {
      item.kind = ConfigKind::kBool;
      item.boolean = b->get();
    } else if (const auto* i = v.as_integer()) {
      item.kind = ConfigKind::kInt;
      item.text = std::to_string(i->get());
    } else if (const auto* d = v.as_floating_point()) {
      item.kind = ConfigKind::kFloat;
      item.text = toml_number(d->get());
      if (!std::isfinite(d->get())) {
        fail(item, "must be a finite number, got " + item.text);
      }
    } else if (const auto* s = v.as_string()) {
      item.kind = ConfigKind::kString;
      item.text = s->get();
    } else if (v.is_table()) {
      item.kind = ConfigKind::kTable;
    } else if (v.is_array()) {
      item.kind = ConfigKind::kArray;
    } else {
      item.kind = ConfigKind::kOther;
    }
    return item;
  };
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    if (const auto* table = value.as_table(); table != nullptr && is_section(name)) {
      for (const auto& [k2, v2] : *table) sink(item_of(name, k2, v2));
    } else {
      sink(item_of("", key, value));
    }
  }
}
#endif

}  // namespace

std::vector<ConfigItem> read_config_items(const std::string& path, const std::string& text,
                                          const std::function<bool(std::string_view)>& is_section,
                                          std::optional<json::Document>& doc) {
  std::vector<ConfigItem> items;
  auto sink = [&items](ConfigItem item) { items.push_back(std::move(item)); };
  if (looks_like_json(path, text)) {
    doc.emplace(json::parse_strict(text, path));
    json_items(*doc, is_section, sink);
  } else {
#if PIPEWRIGHT_WITH_TOML
    toml_items(path, text, is_section, sink);
#else
    throw ConfigError(path +
                      ": TOML config files need toml++, and this build has none (configured "
                      "without libtomlplusplus-dev); use a JSON file (docs/executor.md)");
#endif
  }
  return items;
}

}  // namespace pipewright::cli
