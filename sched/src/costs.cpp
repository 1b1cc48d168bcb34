#include "pipewright/sched/costs.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::sched {
namespace {

using nlohmann::json;

// Reads fields of one JSON object and names `origin` + JSON pointer in every error.
class Reader {
 public:
  Reader(std::string_view origin, std::string pointer, const json& j)
      : origin_(origin), pointer_(std::move(pointer)), j_(j) {
    PW_CHECK(j_.is_object(), ParseError,
             origin_ << ": " << where() << " must be a JSON object, got " << j_.type_name());
  }

  [[nodiscard]] std::string where() const { return pointer_.empty() ? "/" : pointer_; }
  [[nodiscard]] std::string field(std::string_view key) const {
    return pointer_ + "/" + std::string(key);
  }
  [[nodiscard]] bool has(std::string_view key) const {
    return j_.contains(std::string(key)) && !j_.at(std::string(key)).is_null();
  }
  [[nodiscard]] const json& at(std::string_view key) const {
    PW_CHECK(has(key), ParseError, origin_ << ": missing required field " << field(key));
    return j_.at(std::string(key));
  }

  [[nodiscard]] double number(std::string_view key) const {
    const json& v = at(key);
    PW_CHECK(v.is_number(), ParseError,
             origin_ << ": " << field(key) << " must be a number, got " << v.type_name());
    const double d = v.get<double>();
    PW_CHECK(std::isfinite(d) && d >= 0, ParseError,
             origin_ << ": " << field(key) << " must be a finite number >= 0, got " << v.dump());
    return d;
  }
  [[nodiscard]] std::optional<double> opt_number(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return number(key);
  }
  [[nodiscard]] std::int64_t integer(std::string_view key) const {
    const json& v = at(key);
    PW_CHECK(v.is_number_integer(), ParseError,
             origin_ << ": " << field(key) << " must be an integer, got " << v.dump());
    const std::int64_t i = v.get<std::int64_t>();
    PW_CHECK(i >= 0, ParseError, origin_ << ": " << field(key) << " must be >= 0, got " << i);
    return i;
  }
  [[nodiscard]] std::string string(std::string_view key) const {
    const json& v = at(key);
    PW_CHECK(v.is_string(), ParseError,
             origin_ << ": " << field(key) << " must be a string, got " << v.type_name());
    return v.get<std::string>();
  }

 private:
  std::string origin_;
  std::string pointer_;
  const json& j_;
};

KindStats read_stats(std::string_view origin, const std::string& pointer, const json& j) {
  Reader r(origin, pointer, j);
  KindStats s;
  s.median_ms = r.number("median_ms");
  s.p10_ms = r.number("p10_ms");
  s.p90_ms = r.number("p90_ms");
  s.samples = r.integer("samples");
  if (r.has("mean_ms")) s.mean_ms = r.number("mean_ms");
  if (r.has("quantiles_ms")) {
    const json& q = r.at("quantiles_ms");
    PW_CHECK(q.is_array() && q.size() == 21, ParseError,
             origin << ": " << pointer << "/quantiles_ms must be an array of 21 numbers");
    for (std::size_t i = 0; i < q.size(); ++i) {
      PW_CHECK(q[i].is_number() && q[i].get<double>() >= 0 &&
                   (i == 0 || q[i].get<double>() >= q[i - 1].get<double>()),
               ParseError,
               origin << ": " << pointer << "/quantiles_ms/" << i
                      << " must be a number >= 0 and >= the previous one, got " << q[i].dump());
      s.quantiles_ms.push_back(q[i].get<double>());
    }
  }
  return s;
}

json stats_json(const KindStats& s) {
  json j{{"median_ms", s.median_ms},
         {"p10_ms", s.p10_ms},
         {"p90_ms", s.p90_ms},
         {"samples", s.samples}};
  if (!s.quantiles_ms.empty()) j["quantiles_ms"] = s.quantiles_ms;
  if (s.mean_ms) j["mean_ms"] = *s.mean_ms;
  return j;
}

void check_number(std::string_view origin, const std::string& pointer, double v) {
  PW_CHECK(std::isfinite(v) && v >= 0, ParseError,
           origin << ": " << pointer << " must be a finite number >= 0, got " << v);
}
void check_number(std::string_view origin, const std::string& pointer, std::int64_t v) {
  PW_CHECK(v >= 0, ParseError, origin << ": " << pointer << " must be >= 0, got " << v);
}
void check_stats(std::string_view origin, const std::string& p, const std::optional<KindStats>& s) {
  if (!s) return;
  check_number(origin, p + "/median_ms", s->median_ms);
  check_number(origin, p + "/p10_ms", s->p10_ms);
  check_number(origin, p + "/p90_ms", s->p90_ms);
  check_number(origin, p + "/samples", s->samples);
  if (s->mean_ms) check_number(origin, p + "/mean_ms", *s->mean_ms);
}

}  // namespace

double KindStats::mean_or_estimate_ms() const noexcept {
  if (mean_ms) return *mean_ms;
  if (quantiles_ms.size() == 21) {
    double sum = (quantiles_ms.front() + quantiles_ms.back()) / 2;
    for (std::size_t i = 1; i + 1 < quantiles_ms.size(); ++i) sum += quantiles_ms[i];
    return sum / 20;
  }
  return median_ms;
}

KindStats KindStats::scaled(double r) const {
  KindStats out = *this;
  out.median_ms *= r;
  out.p10_ms *= r;
  out.p90_ms *= r;
  for (auto& q : out.quantiles_ms) q *= r;
  if (out.mean_ms) *out.mean_ms *= r;
  return out;
}

void validate(const CostTable& t, std::string_view origin) {
  check_number(origin, "/compute_overhead_ms", t.compute_overhead_ms);
  check_number(origin, "/comm_overhead_ms", t.comm_overhead_ms);
  check_number(origin, "/runtime_memory_bytes", t.runtime_memory_bytes);
  check_number(origin, "/cores_per_node", static_cast<std::int64_t>(t.cores_per_node));
  PW_CHECK(t.step_correlation >= 0 && t.step_correlation <= 1, ParseError,
           origin << ": /step_correlation must be in [0, 1], got " << t.step_correlation);
  PW_CHECK(t.rank_step_correlation >= t.step_correlation && t.rank_step_correlation <= 1,
           ParseError,
           origin << ": /rank_step_correlation must be in [/step_correlation, 1] = ["
                  << t.step_correlation << ", 1], got " << t.rank_step_correlation);
  for (std::size_t i = 0; i < t.stages.size(); ++i) {
    const StageCost& s = t.stages[i];
    const std::string p = "/stages/" + std::to_string(i);
    PW_CHECK(s.stage == static_cast<std::int32_t>(i), ParseError,
             origin << ": " << p << "/stage must be " << i
                    << " (stages are listed in order 0..n-1), got " << s.stage);
    check_number(origin, p + "/forward_ms", s.forward_ms);
    check_number(origin, p + "/backward_ms", s.backward_ms);
    if (s.input_grad_ms) check_number(origin, p + "/input_grad_ms", *s.input_grad_ms);
    if (s.weight_grad_ms) check_number(origin, p + "/weight_grad_ms", *s.weight_grad_ms);
    if (s.optimizer_ms) check_number(origin, p + "/optimizer_ms", *s.optimizer_ms);
    PW_CHECK(s.backward_ms >= s.input_grad_or_default_ms() || s.weight_grad_ms, ParseError,
             origin << ": " << p << "/input_grad_ms (" << *s.input_grad_ms
                    << ") exceeds backward_ms (" << s.backward_ms
                    << ") and no weight_grad_ms is given");
    check_number(origin, p + "/param_bytes", s.param_bytes);
    check_number(origin, p + "/activation_bytes", s.activation_bytes);
    check_number(origin, p + "/output_bytes", s.output_bytes);
    std::int64_t total = 0;
    for (std::size_t k = 0; k < s.param_sizes_bytes.size(); ++k) {
      check_number(origin, p + "/param_sizes_bytes/" + std::to_string(k), s.param_sizes_bytes[k]);
      total += s.param_sizes_bytes[k];
    }
    PW_CHECK(s.param_sizes_bytes.empty() || total == s.param_bytes, ParseError,
             origin << ": " << p << "/param_sizes_bytes sums to " << total << " but param_bytes is "
                    << s.param_bytes);
    check_stats(origin, p + "/stats/forward", s.forward_stats);
    check_stats(origin, p + "/stats/backward", s.backward_stats);
    check_stats(origin, p + "/stats/input_grad", s.input_grad_stats);
    check_stats(origin, p + "/stats/weight_grad", s.weight_grad_stats);
    check_stats(origin, p + "/stats/optimizer", s.optimizer_stats);
  }
  if (t.p2p) {
    check_number(origin, "/p2p/latency_ms", t.p2p->latency_ms);
    check_number(origin, "/p2p/bandwidth_gb_per_s", t.p2p->bandwidth_gb_per_s);
    if (t.p2p->per_message_ms) check_number(origin, "/p2p/per_message_ms", *t.p2p->per_message_ms);
    check_stats(origin, "/p2p/stats", t.p2p->stats);
  }
  for (std::size_t i = 0; i < t.peak_memory.size(); ++i) {
    const std::string p = "/peak_memory/" + std::to_string(i);
    PW_CHECK(t.peak_memory[i].rank >= 0, ParseError,
             origin << ": " << p << "/rank must be >= 0, got " << t.peak_memory[i].rank);
    check_number(origin, p + "/peak_bytes", t.peak_memory[i].peak_bytes);
  }
}

CostTable parse_costs(std::string_view json_text, std::string_view origin) {
  json j;
  try {
    j = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    throw ParseError(std::string(origin) + ": invalid JSON: " + e.what());
  }
  Reader root(origin, "", j);
  const std::string format = root.string("format");
  PW_CHECK(format == kProfileFormat, ParseError,
           origin << ": /format must be \"" << kProfileFormat << "\", got \"" << format << "\"");
  const std::int64_t version = root.integer("version");
  PW_CHECK(version == kProfileVersion, ParseError,
           origin << ": /version " << version << " is not supported (expected " << kProfileVersion
                  << ")");
  CostTable t;
  if (root.has("source")) t.source = root.string("source");
  if (root.has("compute_overhead_ms")) t.compute_overhead_ms = root.number("compute_overhead_ms");
  if (root.has("comm_overhead_ms")) t.comm_overhead_ms = root.number("comm_overhead_ms");
  if (root.has("runtime_memory_bytes"))
    t.runtime_memory_bytes = root.integer("runtime_memory_bytes");
  if (root.has("cores_per_node")) {
    const std::int64_t c = root.integer("cores_per_node");
    PW_CHECK(c >= 0 && c <= 1 << 20, ParseError,
             origin << ": /cores_per_node must be in [0, 1048576], got " << c);
    t.cores_per_node = static_cast<std::int32_t>(c);
  }
  if (root.has("p2p_uses_core")) {
    const json& v = root.at("p2p_uses_core");
    PW_CHECK(v.is_boolean(), ParseError,
             origin << ": /p2p_uses_core must be true or false, got " << v.dump());
    t.p2p_uses_core = v.get<bool>();
  }
  if (root.has("step_correlation")) t.step_correlation = root.number("step_correlation");
  if (root.has("rank_step_correlation"))
    t.rank_step_correlation = root.number("rank_step_correlation");

  const json& stages = root.at("stages");
  PW_CHECK(stages.is_array(), ParseError, origin << ": /stages must be an array");
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string p = "/stages/" + std::to_string(i);
    Reader r(origin, p, stages[i]);
    StageCost s;
    const json& id = r.at("stage");
    PW_CHECK(id.is_number_integer(), ParseError,
             origin << ": " << p << "/stage must be an integer, got " << id.dump());
    s.stage = id.get<std::int32_t>();
    s.forward_ms = r.number("forward_ms");
    s.backward_ms = r.number("backward_ms");
    s.input_grad_ms = r.opt_number("input_grad_ms");
    s.weight_grad_ms = r.opt_number("weight_grad_ms");
    s.optimizer_ms = r.opt_number("optimizer_ms");
    s.param_bytes = r.has("param_bytes") ? r.integer("param_bytes") : 0;
    s.activation_bytes = r.has("activation_bytes") ? r.integer("activation_bytes") : 0;
    s.output_bytes = r.has("output_bytes") ? r.integer("output_bytes") : 0;
    if (r.has("param_sizes_bytes")) {
      const json& sizes = r.at("param_sizes_bytes");
      PW_CHECK(sizes.is_array(), ParseError,
               origin << ": " << p << "/param_sizes_bytes must be an array");
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        PW_CHECK(sizes[k].is_number_integer() && sizes[k].get<std::int64_t>() >= 0, ParseError,
                 origin << ": " << p << "/param_sizes_bytes/" << k
                        << " must be an integer >= 0, got " << sizes[k].dump());
        s.param_sizes_bytes.push_back(sizes[k].get<std::int64_t>());
      }
    }
    if (r.has("stats")) {
      Reader st(origin, p + "/stats", r.at("stats"));
      const std::string sp = p + "/stats/";
      if (st.has("forward")) s.forward_stats = read_stats(origin, sp + "forward", st.at("forward"));
      if (st.has("backward"))
        s.backward_stats = read_stats(origin, sp + "backward", st.at("backward"));
      if (st.has("input_grad"))
        s.input_grad_stats = read_stats(origin, sp + "input_grad", st.at("input_grad"));
      if (st.has("weight_grad"))
        s.weight_grad_stats = read_stats(origin, sp + "weight_grad", st.at("weight_grad"));
      if (st.has("optimizer"))
        s.optimizer_stats = read_stats(origin, sp + "optimizer", st.at("optimizer"));
    }
    t.stages.push_back(std::move(s));
  }
  if (root.has("p2p")) {
    Reader r(origin, "/p2p", root.at("p2p"));
    P2PCost c;
    c.per_message_ms = r.opt_number("per_message_ms");
    if (r.has("latency_ms")) c.latency_ms = r.number("latency_ms");
    if (r.has("bandwidth_gb_per_s")) c.bandwidth_gb_per_s = r.number("bandwidth_gb_per_s");
    if (r.has("stats")) c.stats = read_stats(origin, "/p2p/stats", r.at("stats"));
    PW_CHECK(c.per_message_ms || r.has("latency_ms") || r.has("bandwidth_gb_per_s"), ParseError,
             origin << ": /p2p needs per_message_ms or latency_ms/bandwidth_gb_per_s");
    t.p2p = c;
  }
  if (root.has("peak_memory")) {
    const json& pm = root.at("peak_memory");
    PW_CHECK(pm.is_array(), ParseError, origin << ": /peak_memory must be an array");
    for (std::size_t i = 0; i < pm.size(); ++i) {
      Reader r(origin, "/peak_memory/" + std::to_string(i), pm[i]);
      RankPeakMemory m;
      m.rank = static_cast<std::int32_t>(r.integer("rank"));
      m.peak_bytes = r.integer("peak_bytes");
      t.peak_memory.push_back(m);
    }
  }
  PW_CHECK(!t.stages.empty(), ParseError, origin << ": /stages must not be empty");
  validate(t, origin);
  return t;
}

CostTable load_costs(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PW_CHECK(in, InputError, path << ": cannot open the cost/profile file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_costs(ss.str(), path);
}

std::string to_json(const CostTable& t) {
  json j;
  j["format"] = std::string(kProfileFormat);
  j["version"] = kProfileVersion;
  j["source"] = t.source;
  j["compute_overhead_ms"] = t.compute_overhead_ms;
  if (t.comm_overhead_ms != 0) j["comm_overhead_ms"] = t.comm_overhead_ms;
  if (t.runtime_memory_bytes != 0) j["runtime_memory_bytes"] = t.runtime_memory_bytes;
  if (t.cores_per_node != 0) j["cores_per_node"] = t.cores_per_node;
  if (!t.p2p_uses_core) j["p2p_uses_core"] = false;
  if (t.step_correlation != 0) j["step_correlation"] = t.step_correlation;
  if (t.rank_step_correlation != 0) j["rank_step_correlation"] = t.rank_step_correlation;
  json stages = json::array();
  for (const StageCost& s : t.stages) {
    json js{{"stage", s.stage},
            {"forward_ms", s.forward_ms},
            {"backward_ms", s.backward_ms},
            {"param_bytes", s.param_bytes},
            {"activation_bytes", s.activation_bytes},
            {"output_bytes", s.output_bytes}};
    if (s.input_grad_ms) js["input_grad_ms"] = *s.input_grad_ms;
    if (s.weight_grad_ms) js["weight_grad_ms"] = *s.weight_grad_ms;
    if (s.optimizer_ms) js["optimizer_ms"] = *s.optimizer_ms;
    if (!s.param_sizes_bytes.empty()) js["param_sizes_bytes"] = s.param_sizes_bytes;
    json stats = json::object();
    if (s.forward_stats) stats["forward"] = stats_json(*s.forward_stats);
    if (s.backward_stats) stats["backward"] = stats_json(*s.backward_stats);
    if (s.input_grad_stats) stats["input_grad"] = stats_json(*s.input_grad_stats);
    if (s.weight_grad_stats) stats["weight_grad"] = stats_json(*s.weight_grad_stats);
    if (s.optimizer_stats) stats["optimizer"] = stats_json(*s.optimizer_stats);
    if (!stats.empty()) js["stats"] = stats;
    stages.push_back(std::move(js));
  }
  j["stages"] = std::move(stages);
  if (t.p2p) {
    json p{{"latency_ms", t.p2p->latency_ms}, {"bandwidth_gb_per_s", t.p2p->bandwidth_gb_per_s}};
    if (t.p2p->per_message_ms) p["per_message_ms"] = *t.p2p->per_message_ms;
    if (t.p2p->stats) p["stats"] = stats_json(*t.p2p->stats);
    j["p2p"] = p;
  }
  if (!t.peak_memory.empty()) {
    json pm = json::array();
    for (const auto& m : t.peak_memory)
      pm.push_back({{"rank", m.rank}, {"peak_bytes", m.peak_bytes}});
    j["peak_memory"] = pm;
  }
  return j.dump(2) + "\n";
}

}  // namespace pipewright::sched
