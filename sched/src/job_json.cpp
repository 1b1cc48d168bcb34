// JobSpec <-> JSON (pipewright/sched/job.hpp). The writer is canonical: fixed key order, every
// default filled in, one key per line, so equal jobs give equal bytes (`run --dry-run
// --plan-out` and `simulate --plan-out` are compared byte for byte).
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"

namespace pipewright::sched {
namespace {

using nlohmann::json;

constexpr std::string_view kJobFormat = "pipewright-job";
constexpr int kJobVersion = 1;

// The resolved values, in file order. Options an algorithm ignores are written with their
// defaults, so every job file has every key.
json resolved(const JobSpec& j) {
  const DataParallelSpec& d = j.data_parallel;
  return json::array({
      json::array({"format", kJobFormat}),
      json::array({"version", kJobVersion}),
      json::array({"model", j.model_path}),
      json::array({"partition", j.partition_path}),
      json::array({"partition_method", graph::to_string(j.partition_method)}),
      json::array({"plan", j.plan_path}),
      json::array({"schedule", to_string(j.schedule)}),
      json::array({"pp", j.pp}),
      json::array({"dp", j.dp}),
      json::array({"stages_per_rank", j.stages_per_rank}),
      json::array({"microbatches", j.microbatches}),
      json::array({"batch_size", j.batch_size}),
      json::array({"steps", j.steps}),
      json::array({"optimizer", to_string(j.optimizer)}),
      json::array({"lr", j.lr}),
      json::array({"momentum", j.momentum}),
      json::array({"weight_decay", j.weight_decay}),
      json::array({"dp_algorithm", to_string(d.algorithm)}),
      json::array({"bucket_cap_mb", d.bucket_cap_mb}),
      json::array({"ddp_overlap", d.ddp_overlap}),
      json::array({"localsgd_frequency", d.localsgd_frequency_or_default()}),
      json::array({"slowmo_frequency", d.slowmo_frequency_or_default()}),
      json::array({"slowmo_momentum", d.slowmo_momentum_or_default()}),
      json::array({"slowmo_lr", d.slowmo_lr_or_default()}),
      json::array({"slowmo_memory_efficient", d.slowmo_memory_efficient_or_default()}),
      json::array({"slowmo_num_shards", d.slowmo_num_shards_or_default(j.dp)}),
      json::array({"procs_per_node", d.procs_per_node_or_default()}),
  });
}

class JobReader {
 public:
  JobReader(const json& doc, std::string_view origin) : doc_(doc), origin_(origin) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw ParseError(std::string(origin_) + ": /" + key + ": " + why);
  }
  const json& need(const char* key) const {
    if (!doc_.contains(key)) {
      throw ParseError(std::string(origin_) + ": /: missing required field \"" + key + "\"");
    }
    return doc_.at(key);
  }
  std::string str(const char* key) const {
    const json& v = need(key);
    if (!v.is_string()) fail(key, "expected a string");
    return v.get<std::string>();
  }
  std::int64_t integer(const char* key) const {
    const json& v = need(key);
    if (!v.is_number_integer()) fail(key, "expected an integer");
    return v.get<std::int64_t>();
  }
  int int32(const char* key) const {
    const std::int64_t v = integer(key);
    if (v < -(std::int64_t{1} << 30) || v > (std::int64_t{1} << 30)) fail(key, "out of range");
    return static_cast<int>(v);
  }
  double number(const char* key) const {
    const json& v = need(key);
    if (!v.is_number()) fail(key, "expected a number");
    return v.get<double>();
  }
  bool boolean(const char* key) const {
    const json& v = need(key);
    if (!v.is_boolean()) fail(key, "expected true or false");
    return v.get<bool>();
  }
  template <typename F>
  auto parsed(const char* key, F parse) const {
    try {
      return parse(str(key));
    } catch (const ConfigError& e) {
      fail(key, e.what());
    }
  }

 private:
  const json& doc_;
  std::string_view origin_;
};

}  // namespace

std::string to_json(const JobSpec& job) {
  std::ostringstream os;
  os << "{\n";
  const json fields = resolved(job);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    os << "  " << fields[i][0].dump() << ": " << fields[i][1].dump()
       << (i + 1 < fields.size() ? ",\n" : "\n");
  }
  os << "}\n";
  return os.str();
}

JobSpec parse_job(std::string_view text, std::string_view origin) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw ParseError(std::string(origin) + ": invalid JSON: " + e.what());
  }
  PW_CHECK(doc.is_object(), ParseError, origin << ": /: a job is a JSON object");
  const JobReader r(doc, origin);
  if (r.str("format") != kJobFormat) {
    r.fail("format", "expected \"" + std::string(kJobFormat) + "\"");
  }
  if (r.integer("version") != kJobVersion) {
    r.fail("version", "unsupported version (this is " + std::to_string(kJobVersion) + ")");
  }
  JobSpec j;
  j.model_path = r.str("model");
  j.partition_path = r.str("partition");
  {
    const std::string m = r.str("partition_method");
    const auto method = graph::parse_partition_method(m);
    if (!method) r.fail("partition_method", "expected uniform or balanced, got '" + m + "'");
    j.partition_method = *method;
  }
  j.plan_path = r.str("plan");
  j.schedule = r.parsed("schedule", [](const std::string& s) { return parse_schedule_kind(s); });
  j.pp = r.int32("pp");
  j.dp = r.int32("dp");
  j.stages_per_rank = r.int32("stages_per_rank");
  j.microbatches = r.int32("microbatches");
  j.batch_size = r.integer("batch_size");
  j.steps = r.integer("steps");
  j.optimizer = r.parsed("optimizer", [](const std::string& s) { return parse_optimizer(s); });
  j.lr = r.number("lr");
  j.momentum = r.number("momentum");
  j.weight_decay = r.number("weight_decay");
  DataParallelSpec& d = j.data_parallel;
  d.algorithm =
      r.parsed("dp_algorithm", [](const std::string& s) { return parse_dp_algorithm(s); });
  d.bucket_cap_mb = r.number("bucket_cap_mb");
  d.ddp_overlap = r.boolean("ddp_overlap");
  // Options the algorithm ignores must hold their defaults (what to_json writes for them).
  const bool averaging = d.algorithm != DpAlgorithm::kDdp;
  const bool slowmo = d.algorithm == DpAlgorithm::kSlowMo;
  DataParallelSpec defaults;
  defaults.algorithm = d.algorithm;
  auto option = [&](const char* key, bool applies, auto value, auto default_value, auto& field) {
    if (applies) {
      field = value;
    } else if (value != default_value) {
      r.fail(key, "has no effect with dp_algorithm " + std::string(to_string(d.algorithm)) +
                      "; leave it at its default");
    }
  };
  option("localsgd_frequency", averaging, r.integer("localsgd_frequency"),
         defaults.localsgd_frequency_or_default(), d.localsgd_frequency);
  option("procs_per_node", averaging, r.int32("procs_per_node"),
         defaults.procs_per_node_or_default(), d.procs_per_node);
  option("slowmo_frequency", slowmo, r.integer("slowmo_frequency"),
         defaults.slowmo_frequency_or_default(), d.slowmo_frequency);
  option("slowmo_momentum", slowmo, r.number("slowmo_momentum"),
         defaults.slowmo_momentum_or_default(), d.slowmo_momentum);
  option("slowmo_lr", slowmo, r.number("slowmo_lr"), defaults.slowmo_lr_or_default(), d.slowmo_lr);
  option("slowmo_memory_efficient", slowmo, r.boolean("slowmo_memory_efficient"),
         defaults.slowmo_memory_efficient_or_default(), d.slowmo_memory_efficient);
  option("slowmo_num_shards", slowmo, r.int32("slowmo_num_shards"),
         defaults.slowmo_num_shards_or_default(j.dp), d.slowmo_num_shards);
  try {
    validate_job(j);
  } catch (const ConfigError& e) {
    throw ParseError(std::string(origin) + ": " + e.what());
  }
  return j;
}

std::string plan_out_json(const JobSpec& job, const LoweredPlan& plan) {
  std::string out = "{\"job\": ";
  out += to_json(job);
  out.pop_back();  // the job's final newline
  out += ",\n\"plan\": ";
  out += to_json(plan);
  out.pop_back();
  out += "}\n";
  return out;
}

}  // namespace pipewright::sched
