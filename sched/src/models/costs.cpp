#include "pipewright/sched/costs.hpp"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"

namespace pipewright::sched {
namespace {

using json::At;
using json::Json;

constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

// Reads fields of one JSON object through the shared strict reader: every error names the file,
// line:column and JSON pointer (pipewright/graph/json_reader.hpp). Fields given as null count as
// absent.
class Reader {
 public:
  explicit Reader(At at) : at_(std::move(at)) { at_.expect_object(); }

  [[nodiscard]] bool has(std::string_view key) const { return at_.has_value(key); }
  [[nodiscard]] At at(std::string_view key) const { return at_[key]; }
  [[nodiscard]] double number(std::string_view key) const {
    return at_[key].as_finite_nonnegative();
  }
  [[nodiscard]] std::optional<double> opt_number(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return number(key);
  }
  [[nodiscard]] std::int64_t integer(std::string_view key) const {
    return at_[key].as_int(0, kMaxInt64);
  }
  [[nodiscard]] std::string string(std::string_view key) const { return at_[key].as_string(); }
  [[nodiscard]] const At& self() const noexcept { return at_; }

 private:
  At at_;
};

KindStats read_stats(const At& at) {
  Reader r(at);
  KindStats s;
  s.median_ms = r.number("median_ms");
  s.p10_ms = r.number("p10_ms");
  s.p90_ms = r.number("p90_ms");
  s.samples = r.integer("samples");
  if (r.has("mean_ms")) s.mean_ms = r.number("mean_ms");
  if (r.has("quantiles_ms")) {
    const At q = r.at("quantiles_ms");
    if (!q.value.is_array() || q.value.size() != 21) q.fail("must be an array of 21 numbers");
    for (std::size_t i = 0; i < q.value.size(); ++i) {
      const double v = q[i].as_finite_nonnegative();
      if (i > 0 && v < s.quantiles_ms.back()) {
        q[i].fail("must be >= the previous quantile, got " + q[i].value.dump());
      }
      s.quantiles_ms.push_back(v);
    }
  }
  return s;
}

Json stats_json(const KindStats& s) {
  Json j{{"median_ms", s.median_ms},
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
  check_number(origin, "/comm_send_ms", t.comm_send_ms);
  check_number(origin, "/dp_sync_compute_ms", t.dp_sync_compute_ms);
  check_number(origin, "/step_overhead_ms", t.step_overhead_ms);
  check_number(origin, "/runtime_memory_bytes", t.runtime_memory_bytes);
  check_number(origin, "/cores_per_node", static_cast<std::int64_t>(t.cores_per_node));
  check_number(origin, "/nodes", static_cast<std::int64_t>(t.nodes));
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
    check_number(origin, p + "/activation_fp32_bytes", s.activation_fp32_bytes);
    if (s.weight_grad_keeps) {
      PW_CHECK(std::isfinite(*s.weight_grad_keeps) && *s.weight_grad_keeps >= 0 &&
                   *s.weight_grad_keeps <= 1,
               ParseError,
               origin << ": " << p << "/weight_grad_keeps must be in [0, 1], got "
                      << *s.weight_grad_keeps);
    }
    PW_CHECK(s.activation_fp32_bytes <= s.activation_bytes, ParseError,
             origin << ": " << p << "/activation_fp32_bytes (" << s.activation_fp32_bytes
                    << ") exceeds activation_bytes (" << s.activation_bytes << ")");
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
    check_stats(origin, "/p2p/send_call", t.p2p->send_call_stats);
  }
  for (std::size_t i = 0; i < t.peak_memory.size(); ++i) {
    const std::string p = "/peak_memory/" + std::to_string(i);
    PW_CHECK(t.peak_memory[i].rank >= 0, ParseError,
             origin << ": " << p << "/rank must be >= 0, got " << t.peak_memory[i].rank);
    check_number(origin, p + "/peak_bytes", t.peak_memory[i].peak_bytes);
  }
  for (std::size_t i = 0; i < t.data_parallel.size(); ++i) {
    const std::string p = "/data_parallel/" + std::to_string(i);
    const RankDataParallel& d = t.data_parallel[i];
    PW_CHECK(d.rank >= 0, ParseError, origin << ": " << p << "/rank must be >= 0, got " << d.rank);
    check_number(origin, p + "/steps", d.steps);
    check_number(origin, p + "/collectives_per_step", d.collectives_per_step);
    check_number(origin, p + "/payload_bytes_per_step", d.payload_bytes_per_step);
    check_number(origin, p + "/wire_bytes_per_step", d.wire_bytes_per_step);
    check_number(origin, p + "/exposed_ms_per_step", d.exposed_ms_per_step);
  }
}

CostTable parse_costs(std::string_view json_text, std::string_view origin) {
  const json::Document doc = json::parse_strict(json_text, std::string(origin));
  const Reader root(At{doc.root, doc.source, ""});
  const std::string format = root.string("format");
  if (format != kProfileFormat) {
    root.at("format").fail("must be \"" + std::string(kProfileFormat) + "\", got \"" + format +
                           "\"");
  }
  const std::int64_t version = root.integer("version");
  if (version != kProfileVersion) {
    root.at("version").fail("version " + std::to_string(version) + " is not supported (expected " +
                            std::to_string(kProfileVersion) + ")");
  }
  CostTable t;
  if (root.has("source")) t.source = root.string("source");
  // Profiles written before issue 33 have no precision: they were measured in fp32.
  if (root.has("precision")) {
    const std::string name = root.string("precision");
    bool known = false;
    for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      if (to_string(p) != name) continue;
      t.precision = p;
      known = true;
    }
    if (!known)
      root.at("precision").fail("must be \"fp32\", \"bf16\" or \"fp16\", got \"" + name + "\"");
  }
  if (root.has("compute_overhead_ms")) t.compute_overhead_ms = root.number("compute_overhead_ms");
  if (root.has("comm_overhead_ms")) t.comm_overhead_ms = root.number("comm_overhead_ms");
  if (root.has("comm_send_ms")) t.comm_send_ms = root.number("comm_send_ms");
  if (root.has("dp_sync_compute_ms")) t.dp_sync_compute_ms = root.number("dp_sync_compute_ms");
  if (root.has("step_overhead_ms")) t.step_overhead_ms = root.number("step_overhead_ms");
  if (root.has("runtime_memory_bytes"))
    t.runtime_memory_bytes = root.integer("runtime_memory_bytes");
  if (root.has("cores_per_node")) {
    t.cores_per_node = static_cast<std::int32_t>(root.at("cores_per_node").as_int(0, 1 << 20));
  }
  if (root.has("p2p_uses_core")) t.p2p_uses_core = root.at("p2p_uses_core").as_bool();
  if (root.has("nodes")) t.nodes = static_cast<std::int32_t>(root.at("nodes").as_int(0, 1 << 20));
  if (root.has("step_correlation")) t.step_correlation = root.number("step_correlation");
  if (root.has("rank_step_correlation"))
    t.rank_step_correlation = root.number("rank_step_correlation");

  const At stages = root.at("stages");
  stages.expect_array();
  if (stages.value.empty()) stages.fail("must not be empty");
  for (std::size_t i = 0; i < stages.value.size(); ++i) {
    const Reader r(stages[i]);
    StageCost s;
    s.stage = static_cast<std::int32_t>(r.at("stage").as_int(
        std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()));
    if (s.stage != static_cast<std::int32_t>(i)) {
      r.at("stage").fail("must be " + std::to_string(i) +
                         " (stages are listed in order 0..n-1), got " + std::to_string(s.stage));
    }
    s.forward_ms = r.number("forward_ms");
    s.backward_ms = r.number("backward_ms");
    s.input_grad_ms = r.opt_number("input_grad_ms");
    s.weight_grad_ms = r.opt_number("weight_grad_ms");
    s.optimizer_ms = r.opt_number("optimizer_ms");
    s.param_bytes = r.has("param_bytes") ? r.integer("param_bytes") : 0;
    s.activation_bytes = r.has("activation_bytes") ? r.integer("activation_bytes") : 0;
    s.output_bytes = r.has("output_bytes") ? r.integer("output_bytes") : 0;
    s.activation_fp32_bytes =
        r.has("activation_fp32_bytes") ? r.integer("activation_fp32_bytes") : 0;
    s.weight_grad_keeps = r.opt_number("weight_grad_keeps");
    if (r.has("param_sizes_bytes")) {
      const At sizes = r.at("param_sizes_bytes");
      sizes.expect_array();
      std::int64_t total = 0;
      for (std::size_t k = 0; k < sizes.value.size(); ++k) {
        s.param_sizes_bytes.push_back(sizes[k].as_int(0, kMaxInt64));
        total += s.param_sizes_bytes.back();
      }
      if (total != s.param_bytes) {
        sizes.fail("sums to " + std::to_string(total) + " but param_bytes is " +
                   std::to_string(s.param_bytes));
      }
    }
    if (r.has("stats")) {
      const Reader st(r.at("stats"));
      if (st.has("forward")) s.forward_stats = read_stats(st.at("forward"));
      if (st.has("backward")) s.backward_stats = read_stats(st.at("backward"));
      if (st.has("input_grad")) s.input_grad_stats = read_stats(st.at("input_grad"));
      if (st.has("weight_grad")) s.weight_grad_stats = read_stats(st.at("weight_grad"));
      if (st.has("optimizer")) s.optimizer_stats = read_stats(st.at("optimizer"));
    }
    t.stages.push_back(std::move(s));
  }
  if (root.has("p2p")) {
    const Reader r(root.at("p2p"));
    P2PCost c;
    c.per_message_ms = r.opt_number("per_message_ms");
    if (r.has("latency_ms")) c.latency_ms = r.number("latency_ms");
    if (r.has("bandwidth_gb_per_s")) c.bandwidth_gb_per_s = r.number("bandwidth_gb_per_s");
    if (r.has("stats")) c.stats = read_stats(r.at("stats"));
    if (r.has("send_call")) c.send_call_stats = read_stats(r.at("send_call"));
    if (!c.per_message_ms && !r.has("latency_ms") && !r.has("bandwidth_gb_per_s")) {
      r.self().fail("needs per_message_ms or latency_ms/bandwidth_gb_per_s");
    }
    t.p2p = c;
  }
  if (root.has("peak_memory")) {
    const At pm = root.at("peak_memory");
    pm.expect_array();
    for (std::size_t i = 0; i < pm.value.size(); ++i) {
      const Reader r(pm[i]);
      RankPeakMemory m;
      m.rank = static_cast<std::int32_t>(
          r.at("rank").as_int(0, std::numeric_limits<std::int32_t>::max()));
      m.peak_bytes = r.integer("peak_bytes");
      t.peak_memory.push_back(m);
    }
  }
  if (root.has("data_parallel")) {
    const At dp = root.at("data_parallel");
    dp.expect_array();
    for (std::size_t i = 0; i < dp.value.size(); ++i) {
      const Reader r(dp[i]);
      RankDataParallel d;
      d.rank = static_cast<std::int32_t>(
          r.at("rank").as_int(0, std::numeric_limits<std::int32_t>::max()));
      d.steps = r.integer("steps");
      d.collectives_per_step = r.number("collectives_per_step");
      d.payload_bytes_per_step = r.number("payload_bytes_per_step");
      d.wire_bytes_per_step = r.number("wire_bytes_per_step");
      d.exposed_ms_per_step = r.number("exposed_ms_per_step");
      t.data_parallel.push_back(d);
    }
  }
  // Cross-field checks (correlations, input_grad_ms <= backward_ms) on the values read.
  validate(t, origin);
  return t;
}

CostTable load_costs(const std::string& path) {
  return parse_costs(json::read_text_file(path, "cost/profile file", json::Limits{}.max_bytes),
                     path);
}

std::string to_json(const CostTable& t) {
  Json j;
  j["format"] = std::string(kProfileFormat);
  j["version"] = kProfileVersion;
  j["source"] = t.source;
  j["precision"] = std::string(to_string(t.precision));
  j["compute_overhead_ms"] = t.compute_overhead_ms;
  if (t.comm_overhead_ms != 0) j["comm_overhead_ms"] = t.comm_overhead_ms;
  if (t.comm_send_ms != 0) j["comm_send_ms"] = t.comm_send_ms;
  if (t.dp_sync_compute_ms != 0) j["dp_sync_compute_ms"] = t.dp_sync_compute_ms;
  if (t.step_overhead_ms != 0) j["step_overhead_ms"] = t.step_overhead_ms;
  if (t.runtime_memory_bytes != 0) j["runtime_memory_bytes"] = t.runtime_memory_bytes;
  if (t.cores_per_node != 0) j["cores_per_node"] = t.cores_per_node;
  if (!t.p2p_uses_core) j["p2p_uses_core"] = false;
  if (t.nodes != 0) j["nodes"] = t.nodes;
  if (t.step_correlation != 0) j["step_correlation"] = t.step_correlation;
  if (t.rank_step_correlation != 0) j["rank_step_correlation"] = t.rank_step_correlation;
  Json stages = Json::array();
  for (const StageCost& s : t.stages) {
    Json js{{"stage", s.stage},
            {"forward_ms", s.forward_ms},
            {"backward_ms", s.backward_ms},
            {"param_bytes", s.param_bytes},
            {"activation_bytes", s.activation_bytes},
            {"output_bytes", s.output_bytes}};
    if (s.activation_fp32_bytes > 0) js["activation_fp32_bytes"] = s.activation_fp32_bytes;
    if (s.weight_grad_keeps) js["weight_grad_keeps"] = *s.weight_grad_keeps;
    if (s.input_grad_ms) js["input_grad_ms"] = *s.input_grad_ms;
    if (s.weight_grad_ms) js["weight_grad_ms"] = *s.weight_grad_ms;
    if (s.optimizer_ms) js["optimizer_ms"] = *s.optimizer_ms;
    if (!s.param_sizes_bytes.empty()) js["param_sizes_bytes"] = s.param_sizes_bytes;
    Json stats = Json::object();
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
    Json p{{"latency_ms", t.p2p->latency_ms}, {"bandwidth_gb_per_s", t.p2p->bandwidth_gb_per_s}};
    if (t.p2p->per_message_ms) p["per_message_ms"] = *t.p2p->per_message_ms;
    if (t.p2p->stats) p["stats"] = stats_json(*t.p2p->stats);
    if (t.p2p->send_call_stats) p["send_call"] = stats_json(*t.p2p->send_call_stats);
    j["p2p"] = p;
  }
  if (!t.peak_memory.empty()) {
    Json pm = Json::array();
    for (const auto& m : t.peak_memory)
      pm.push_back({{"rank", m.rank}, {"peak_bytes", m.peak_bytes}});
    j["peak_memory"] = pm;
  }
  if (!t.data_parallel.empty()) {
    Json dp = Json::array();
    for (const auto& d : t.data_parallel)
      dp.push_back({{"rank", d.rank},
                    {"steps", d.steps},
                    {"collectives_per_step", d.collectives_per_step},
                    {"payload_bytes_per_step", d.payload_bytes_per_step},
                    {"wire_bytes_per_step", d.wire_bytes_per_step},
                    {"exposed_ms_per_step", d.exposed_ms_per_step}});
    j["data_parallel"] = dp;
  }
  return j.dump(2) + "\n";
}

void check_profile_precision(const CostTable& table, std::string_view origin, Precision job) {
  PW_CHECK(table.precision == job, ConfigError,
           "profile " << origin << " was measured at precision " << to_string(table.precision)
                      << " but the job runs at " << to_string(job)
                      << " (--precision): its compute times and activation bytes belong to "
                      << to_string(table.precision) << "; measure a profile at " << to_string(job)
                      << " or pass --precision " << to_string(table.precision));
}

CostTable costs_from_partition(const graph::Model& model, const graph::Partition& partition) {
  graph::check_partition_matches(partition, model);
  CostTable t;
  t.source = "model:" + model.name;
  for (const auto& info : partition.graph.stages) {
    StageCost c;
    c.stage = info.index;
    c.forward_ms = info.forward_ms;
    c.backward_ms = info.backward_ms;
    c.input_grad_ms = info.input_grad_ms;
    c.weight_grad_ms = info.weight_grad_ms;
    c.param_bytes = info.param_bytes;
    c.activation_bytes = info.activation_bytes;
    c.output_bytes = info.output_bytes;
    // Note [Autocast bytes]: the same sum the partitioner's stage memory keeps fp32.
    c.activation_fp32_bytes = graph::stage_activation_fp32_bytes(model, info);
    for (int n : info.nodes) {
      const graph::Node& node = model.nodes[static_cast<std::size_t>(n)];
      if (node.cost.param_bytes > 0) c.param_sizes_bytes.push_back(node.cost.param_bytes);
    }
    t.stages.push_back(std::move(c));
  }
  validate(t, "partition of " + model.name);
  return t;
}

}  // namespace pipewright::sched
