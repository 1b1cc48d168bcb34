#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "plan_infer.hpp"

namespace pipewright::sched {
namespace {

using nlohmann::json;

constexpr std::string_view kPlanFormat = "pipewright-plan";
constexpr int kPlanVersion = 1;

// Line and column (1-based) of byte `offset` in `text`.
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

// Finds where the value at a JSON pointer starts in already-parsed text (nlohmann keeps no
// positions), so that field errors can name line and column.
class Locator {
 public:
  explicit Locator(std::string_view text) : t_(text) {}

  // For an array of arrays at `path`: the offset of every element of every inner array.
  std::vector<std::vector<std::size_t>> string_offsets(const std::vector<std::string>& path) const {
    std::vector<std::vector<std::size_t>> out;
    std::size_t p = find(path);
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

  // Offset of the value at `path` (object keys / array indices), or of the closest enclosing
  // value that exists.
  std::size_t find(const std::vector<std::string>& path) const {
    std::size_t pos = ws(0);
    for (const auto& token : path) {
      std::size_t next = child(pos, token);
      if (next == std::string_view::npos) return pos;
      pos = next;
    }
    return pos;
  }

 private:
  std::size_t ws(std::size_t p) const {
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\n' || t_[p] == '\r' || t_[p] == '\t')) ++p;
    return p;
  }
  std::size_t skip_string(std::size_t p) const {  // p at the opening quote
    for (++p; p < t_.size() && t_[p] != '"'; ++p) {
      if (t_[p] == '\\') ++p;
    }
    return p + 1;
  }
  std::size_t skip_value(std::size_t p) const {
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
  std::size_t child(std::size_t p, const std::string& token) const {
    if (p >= t_.size()) return std::string_view::npos;
    if (t_[p] == '{') {
      p = ws(p + 1);
      while (p < t_.size() && t_[p] == '"') {
        const std::size_t key_end = skip_string(p);
        const std::string_view key = t_.substr(p + 1, key_end - p - 2);
        p = ws(key_end);
        if (p < t_.size() && t_[p] == ':') p = ws(p + 1);
        if (key == token) return p;
        p = ws(skip_value(p));
        if (p < t_.size() && t_[p] == ',') p = ws(p + 1);
      }
      return std::string_view::npos;
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
  std::string_view t_;
};

class Reader {
 public:
  Reader(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  AnyPlan read() {
    json doc;
    try {
      doc = json::parse(text_.begin(), text_.end());
    } catch (const json::parse_error& e) {
      // e.byte is the 1-based offset of the character where parsing failed.
      const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
      std::string what = e.what();
      const auto colon = what.find("]: ");
      if (colon != std::string::npos) what = what.substr(colon + 3);
      throw ParseError(std::string(source_) + ":" + line_col(text_, at) + ": " + what);
    }
    if (!doc.is_object()) fail({}, "a plan is a JSON object");
    const json& format = field(doc, "format");
    if (!format.is_string() || format.get<std::string>() != kPlanFormat) {
      fail({"format"}, "expected \"" + std::string(kPlanFormat) + "\"");
    }
    const int version = integer(doc, "version", true).value_or(0);
    if (version != kPlanVersion) {
      fail({"version"}, "unsupported version " + std::to_string(version) + " (this is " +
                            std::to_string(kPlanVersion) + ")");
    }
    detail::Declared d;
    d.ranks = integer(doc, "ranks", false, 1);
    d.stages = integer(doc, "stages", false, 1);
    d.microbatches = integer(doc, "microbatches", false, 1);
    if (doc.contains("schedule")) {
      if (!doc.at("schedule").is_string()) fail({"schedule"}, "expected a string");
      d.schedule = doc.at("schedule").get<std::string>();
    }
    if (doc.contains("kind")) {
      const json& k = doc.at("kind");
      if (k == "compute") {
        d.lowered = false;
      } else if (k == "lowered") {
        d.lowered = true;
      } else {
        fail({"kind"}, "expected \"compute\" or \"lowered\"");
      }
    }
    if (doc.contains("stage_to_rank")) {
      const json& a = doc.at("stage_to_rank");
      if (!a.is_array()) fail({"stage_to_rank"}, "expected an array of ranks");
      std::vector<std::int32_t> placement;
      for (std::size_t i = 0; i < a.size(); ++i) {
        placement.push_back(int_at(a[i], {"stage_to_rank", std::to_string(i)}, 0));
      }
      d.stage_to_rank = placement;
    }
    if (doc.contains("stage_edges")) {
      const json& a = doc.at("stage_edges");
      if (!a.is_array()) fail({"stage_edges"}, "expected an array of [from, to] pairs");
      std::vector<StageEdge> edges;
      for (std::size_t i = 0; i < a.size(); ++i) {
        const std::vector<std::string> at = {"stage_edges", std::to_string(i)};
        if (!a[i].is_array() || a[i].size() != 2) fail(at, "expected [from, to]");
        edges.push_back(
            {int_at(a[i][0], {at[0], at[1], "0"}, 0), int_at(a[i][1], {at[0], at[1], "1"}, 0)});
      }
      d.stage_edges = edges;
    }
    const json& actions = field(doc, "actions");
    if (!actions.is_array() || actions.empty()) {
      fail({"actions"}, "expected an array with one array of action strings per rank");
    }
    // Note [Lazy error positions]: the readers keep each action's byte offset and turn it into
    // line:column only for the one cell an error names. Computing it for every action (as the
    // first version did) scanned the text from its start per action: quadratic in the plan.
    const auto offsets = Locator(text_).string_offsets({"actions"});
    std::vector<std::vector<detail::ParsedCell>> rows(actions.size());
    for (std::size_t r = 0; r < actions.size(); ++r) {
      if (!actions[r].is_array())
        fail({"actions", std::to_string(r)}, "expected an array of action strings");
      rows[r].reserve(actions[r].size());
      for (std::size_t i = 0; i < actions[r].size(); ++i) {
        const json& v = actions[r][i];
        if (!v.is_string()) fail(cell_path(r, i), "expected an action string such as \"0F0\"");
        const auto& s = v.get_ref<const std::string&>();
        std::string error;
        std::size_t col = 0;
        auto action = try_parse_action(s, &error, &col);
        // After the opening quote (strings without escapes, as action strings are).
        const std::size_t start = offsets.at(r).at(i) + 1;
        if (!action) {
          throw ParseError(std::string(source_) + ":" + line_col(text_, start + col - 1) + ": " +
                           pointer(cell_path(r, i)) + ": " + error);
        }
        rows[r].push_back({*action, start - 1});
      }
    }
    return detail::build_plan(rows, d, source_,
                              [this](std::size_t r, std::size_t i, std::size_t pos) {
                                return std::string(source_) + ":" + line_col(text_, pos) + ": " +
                                       pointer(cell_path(r, i));
                              });
  }

 private:
  static std::vector<std::string> cell_path(std::size_t r, std::size_t i) {
    return {"actions", std::to_string(r), std::to_string(i)};
  }

  static std::string pointer(const std::vector<std::string>& path) {
    std::string out;
    for (const auto& p : path) out += "/" + p;
    return out.empty() ? "/" : out;
  }

  [[noreturn]] void fail(const std::vector<std::string>& path, const std::string& why) const {
    const std::size_t at = Locator(text_).find(path);
    throw ParseError(std::string(source_) + ":" + line_col(text_, at) + ": " + pointer(path) +
                     ": " + why);
  }

  const json& field(const json& doc, const char* key) const {
    if (!doc.contains(key)) fail({}, std::string("missing required field \"") + key + "\"");
    return doc.at(key);
  }

  std::int32_t int_at(const json& v, const std::vector<std::string>& path, std::int64_t min) const {
    if (!v.is_number_integer()) fail(path, "expected an integer");
    const auto x = v.get<std::int64_t>();
    if (x < min || x > (std::int64_t{1} << 30)) {
      fail(path, "value " + std::to_string(x) + " is out of range");
    }
    return static_cast<std::int32_t>(x);
  }

  std::optional<std::int32_t> integer(const json& doc, const char* key, bool required,
                                      std::int64_t min = 0) const {
    if (!doc.contains(key)) {
      if (required) fail({}, std::string("missing required field \"") + key + "\"");
      return std::nullopt;
    }
    return int_at(doc.at(key), {key}, min);
  }

  std::string_view text_;
  std::string_view source_;
};

template <typename Plan>
std::string json_of(const Plan& plan, bool lowered) {
  // Written by hand so that each rank's actions stay on one line (diff-friendly, readable).
  const PlanShape& sh = plan.shape;
  std::ostringstream os;
  os << "{\n";
  os << "  \"format\": \"" << kPlanFormat << "\",\n";
  os << "  \"version\": " << kPlanVersion << ",\n";
  os << "  \"kind\": \"" << (lowered ? "lowered" : "compute") << "\",\n";
  os << "  \"schedule\": " << json(sh.schedule).dump() << ",\n";
  os << "  \"ranks\": " << sh.ranks << ",\n";
  os << "  \"stages\": " << sh.stages << ",\n";
  os << "  \"microbatches\": " << sh.microbatches << ",\n";
  os << "  \"stage_to_rank\": [";
  for (std::size_t i = 0; i < sh.stage_to_rank.size(); ++i) {
    os << (i ? ", " : "") << sh.stage_to_rank[i];
  }
  os << "],\n";
  os << "  \"stage_edges\": [";
  for (std::size_t i = 0; i < sh.stage_edges.size(); ++i) {
    os << (i ? ", " : "") << "[" << sh.stage_edges[i].from << ", " << sh.stage_edges[i].to << "]";
  }
  os << "],\n";
  os << "  \"actions\": [";
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    os << (r ? ",\n    [" : "\n    [");
    const auto& ops = plan.per_rank[r];
    for (std::size_t i = 0; i < ops.size(); ++i) os << (i ? ", \"" : "\"") << ops[i] << "\"";
    os << "]";
  }
  os << "\n  ]\n}\n";
  return os.str();
}

}  // namespace

std::string to_json(const ComputePlan& plan) { return json_of(plan, false); }
std::string to_json(const LoweredPlan& plan) { return json_of(plan, true); }

AnyPlan parse_json(std::string_view text, std::string_view source_name) {
  return Reader(text, source_name).read();
}

AnyPlan load_plan(const std::string& path, const CsvOptions& options) {
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in.good(), InputError, "cannot open plan file '" << path << "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  PW_CHECK(!in.bad(), InputError, "cannot read plan file '" << path << "'");
  const std::string text = buf.str();
  const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (is_json) return parse_json(text, path);
  return parse_csv(text, path, options);
}

}  // namespace pipewright::sched
