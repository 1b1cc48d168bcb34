#include <nlohmann/json.hpp>
#include <sstream>

#include "io/plan_infer.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/sched/plan_io.hpp"

namespace pipewright::sched {
namespace {

using json::Json;

constexpr std::string_view kPlanFormat = "pipewright-plan";
constexpr int kPlanVersion = 1;
// Plans of frontier-size runs (bench/cli_scale.sh) are tens of MB; nesting is 3 levels.
constexpr json::Limits kPlanLimits{std::size_t{1} << 30, 8};

class Reader {
 public:
  Reader(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  AnyPlan read() {
    const json::Document parsed = json::parse_strict(text_, std::string(source_), kPlanLimits);
    const Json* root = &parsed.root;
    // `run --plan-out` / `simulate --plan-out` write {"job": ..., "plan": <a plan>}: a plan writer
    // too, so this reader takes its plan (issue 36: every plan written is a plan read back).
    if (root->is_object() && !root->contains("format") && root->contains("job") &&
        root->contains("plan")) {
      prefix_ = "/plan";
      root = &root->at("plan");
    }
    const Json& doc = *root;
    if (!doc.is_object()) fail("", "a plan is a JSON object");
    const Json& format = field(doc, "format");
    if (!format.is_string() || format.get<std::string>() != kPlanFormat) {
      fail("/format", "expected \"" + std::string(kPlanFormat) + "\"");
    }
    const int version = integer(doc, "version", true).value_or(0);
    if (version != kPlanVersion) {
      fail("/version", "unsupported version " + std::to_string(version) + " (this is " +
                           std::to_string(kPlanVersion) + ")");
    }
    detail::Declared d;
    d.ranks = integer(doc, "ranks", false, 1);
    d.stages = integer(doc, "stages", false, 1);
    d.microbatches = integer(doc, "microbatches", false, 1);
    if (doc.contains("schedule")) {
      if (!doc.at("schedule").is_string()) fail("/schedule", "expected a string");
      d.schedule = doc.at("schedule").get<std::string>();
    }
    if (doc.contains("kind")) {
      const Json& k = doc.at("kind");
      if (k == "compute") {
        d.lowered = false;
      } else if (k == "lowered") {
        d.lowered = true;
      } else {
        fail("/kind", "expected \"compute\" or \"lowered\"");
      }
    }
    if (doc.contains("stage_to_rank")) {
      const Json& a = doc.at("stage_to_rank");
      if (!a.is_array()) fail("/stage_to_rank", "expected an array of ranks");
      std::vector<std::int32_t> placement;
      for (std::size_t i = 0; i < a.size(); ++i) {
        placement.push_back(int_at(a[i], "/stage_to_rank/" + std::to_string(i), 0));
      }
      d.stage_to_rank = placement;
    }
    if (doc.contains("stage_edges")) {
      const Json& a = doc.at("stage_edges");
      if (!a.is_array()) fail("/stage_edges", "expected an array of [from, to] pairs");
      std::vector<StageEdge> edges;
      for (std::size_t i = 0; i < a.size(); ++i) {
        const std::string at = "/stage_edges/" + std::to_string(i);
        if (!a[i].is_array() || a[i].size() != 2) fail(at, "expected [from, to]");
        edges.push_back({int_at(a[i][0], at + "/0", 0), int_at(a[i][1], at + "/1", 0)});
      }
      d.stage_edges = edges;
    }
    if (doc.contains("stage_to_model_stage")) {
      const Json& a = doc.at("stage_to_model_stage");
      if (!a.is_array()) fail("/stage_to_model_stage", "expected an array of model stages");
      std::vector<std::int32_t> map;
      for (std::size_t i = 0; i < a.size(); ++i) {
        map.push_back(int_at(a[i], "/stage_to_model_stage/" + std::to_string(i), 0));
      }
      d.stage_to_model_stage = map;
    }
    if (doc.contains("forward_only")) {
      if (!doc.at("forward_only").is_boolean()) fail("/forward_only", "expected true or false");
      d.forward_only = doc.at("forward_only").get<bool>();
    }
    const Json& actions = field(doc, "actions");
    if (!actions.is_array() || actions.empty()) {
      fail("/actions", "expected an array with one array of action strings per rank");
    }
    // Note [Lazy error positions] (json_reader.hpp): each action's byte offset is kept and turned
    // into line:column only for the one cell an error names. Computing it for every action (as
    // the first version did) scanned the text from its start per action: quadratic in the plan.
    const auto offsets = json::Locator(text_).nested_element_offsets(prefix_ + "/actions");
    std::vector<std::vector<detail::ParsedCell>> rows(actions.size());
    for (std::size_t r = 0; r < actions.size(); ++r) {
      if (!actions[r].is_array())
        fail("/actions/" + std::to_string(r), "expected an array of action strings");
      rows[r].reserve(actions[r].size());
      for (std::size_t i = 0; i < actions[r].size(); ++i) {
        const Json& v = actions[r][i];
        if (!v.is_string()) fail(cell_path(r, i), "expected an action string such as \"0F0\"");
        const auto& s = v.get_ref<const std::string&>();
        std::string error;
        std::size_t col = 0;
        cell_actions_.clear();
        // After the opening quote (strings without escapes, as action strings are).
        const std::size_t start = offsets.at(r).at(i) + 1;
        if (!try_parse_cell(s, cell_actions_, &error, &col)) {
          throw ParseError(std::string(source_) + ":" + json::line_col(text_, start + col - 1) +
                           ": at " + prefix_ + cell_path(r, i) + ": " + error);
        }
        for (const Action& a : cell_actions_) rows[r].push_back({a, start - 1});
      }
    }
    return detail::build_plan(rows, d, source_,
                              [this](std::size_t r, std::size_t i, std::size_t pos) {
                                return std::string(source_) + ":" + json::line_col(text_, pos) +
                                       ": at " + prefix_ + cell_path(r, i);
                              });
  }

 private:
  static std::string cell_path(std::size_t r, std::size_t i) {
    return "/actions/" + std::to_string(r) + "/" + std::to_string(i);
  }

  // Note [Lazy error positions]: the pointer becomes line:column only here. `pointer` is within
  // the plan; prefix_ places it in the document.
  [[noreturn]] void fail(const std::string& pointer, const std::string& why) const {
    throw ParseError(json::where(json::Source{std::string(source_), text_}, prefix_ + pointer) +
                     ": " + why);
  }

  const Json& field(const Json& doc, const char* key) const {
    if (!doc.contains(key)) fail("", std::string("missing required field \"") + key + "\"");
    return doc.at(key);
  }

  std::int32_t int_at(const Json& v, const std::string& path, std::int64_t min) const {
    if (!v.is_number_integer()) fail(path, "expected an integer");
    const auto x = v.get<std::int64_t>();
    if (x < min || x > (std::int64_t{1} << 30)) {
      fail(path, "value " + std::to_string(x) + " is out of range");
    }
    return static_cast<std::int32_t>(x);
  }

  std::optional<std::int32_t> integer(const Json& doc, const char* key, bool required,
                                      std::int64_t min = 0) const {
    if (!doc.contains(key)) {
      if (required) fail("", std::string("missing required field \"") + key + "\"");
      return std::nullopt;
    }
    return int_at(doc.at(key), std::string("/") + key, min);
  }

  std::string_view text_;
  std::string_view source_;
  std::string prefix_;                // "/plan" in a --plan-out document, else ""
  std::vector<Action> cell_actions_;  // scratch: the actions of one cell
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
  os << "  \"schedule\": " << Json(sh.schedule).dump() << ",\n";
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
  // Written only when set, so that plans without replicas keep their bytes.
  if (sh.has_replicas()) {
    os << "  \"stage_to_model_stage\": [";
    for (std::size_t i = 0; i < sh.stage_to_model_stage.size(); ++i) {
      os << (i ? ", " : "") << sh.stage_to_model_stage[i];
    }
    os << "],\n";
  }
  if (sh.forward_only) os << "  \"forward_only\": true,\n";
  os << "  \"actions\": [";
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    os << (r ? ",\n    [" : "\n    [");
    const auto cells = to_cells(plan.per_rank[r]);
    for (std::size_t i = 0; i < cells.size(); ++i) os << (i ? ", \"" : "\"") << cells[i] << "\"";
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
  const std::string text = json::read_text_file(path, "plan file", kPlanLimits.max_bytes);
  const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (is_json) return parse_json(text, path);
  return parse_csv(text, path, options);
}

}  // namespace pipewright::sched
