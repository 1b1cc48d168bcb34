// Field readers for sim's JSON inputs: every error names the file (origin) and the JSON pointer.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>

#include "pipewright/graph/error.hpp"

namespace pipewright::sim::detail {

inline nlohmann::json parse_json_text(std::string_view text, std::string_view origin) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw ParseError(std::string(origin) + ": invalid JSON: " + e.what());
  }
}

inline std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in, InputError, path << ": cannot open the " << what << " file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class JsonObject {
 public:
  JsonObject(std::string_view origin, std::string pointer, const nlohmann::json& j)
      : origin_(origin), pointer_(std::move(pointer)), j_(j) {
    PW_CHECK(j_.is_object(), ParseError,
             origin_ << ": " << (pointer_.empty() ? "/" : pointer_)
                     << " must be a JSON object, got " << j_.type_name());
  }

  [[nodiscard]] std::string field(std::string_view key) const {
    return pointer_ + "/" + std::string(key);
  }
  [[nodiscard]] const std::string& origin() const noexcept { return origin_; }
  [[nodiscard]] bool has(std::string_view key) const {
    const std::string k(key);
    return j_.contains(k) && !j_.at(k).is_null();
  }
  [[nodiscard]] const nlohmann::json& at(std::string_view key) const {
    PW_CHECK(has(key), ParseError, origin_ << ": missing required field " << field(key));
    return j_.at(std::string(key));
  }
  // Rejects keys not in `known` (typos would otherwise be silently ignored).
  void check_known(std::initializer_list<std::string_view> known) const {
    for (const auto& item : j_.items()) {
      bool ok = false;
      for (auto k : known) ok = ok || item.key() == k;
      PW_CHECK(ok, ParseError, origin_ << ": unknown field " << field(item.key()));
    }
  }
  [[nodiscard]] double number(std::string_view key) const {
    const auto& v = at(key);
    PW_CHECK(v.is_number(), ParseError,
             origin_ << ": " << field(key) << " must be a number, got " << v.dump());
    const double d = v.get<double>();
    PW_CHECK(std::isfinite(d) && d >= 0, ParseError,
             origin_ << ": " << field(key) << " must be a finite number >= 0, got " << v.dump());
    return d;
  }
  [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t min = 0) const {
    const auto& v = at(key);
    PW_CHECK(v.is_number_integer(), ParseError,
             origin_ << ": " << field(key) << " must be an integer, got " << v.dump());
    const auto i = v.get<std::int64_t>();
    PW_CHECK(i >= min, ParseError,
             origin_ << ": " << field(key) << " must be >= " << min << ", got " << i);
    return i;
  }
  [[nodiscard]] std::string string(std::string_view key) const {
    const auto& v = at(key);
    PW_CHECK(v.is_string(), ParseError,
             origin_ << ": " << field(key) << " must be a string, got " << v.dump());
    return v.get<std::string>();
  }

 private:
  std::string origin_;
  std::string pointer_;
  const nlohmann::json& j_;
};

}  // namespace pipewright::sim::detail
