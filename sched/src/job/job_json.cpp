// JobSpec <-> JSON (pipewright/sched/job.hpp). The writer is canonical: fixed key order, every
// default filled in, one key per line, so equal jobs give equal bytes (`run --dry-run
// --plan-out` and `simulate --plan-out` are compared byte for byte).
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"
#include "pipewright/sched/job.hpp"

namespace pipewright::sched {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kJobFormat = "pipewright-job";
constexpr int kJobVersion = 1;

// The resolved values, in file order. Options an algorithm ignores are written with their
// defaults, so every job file has every key.
Json resolved(const JobSpec& j) {
  const DataParallelSpec& d = j.data_parallel;
  Json out = Json::array({
      Json::array({"format", kJobFormat}),
      Json::array({"version", kJobVersion}),
      Json::array({"model", j.model_path}),
      Json::array({"partition", j.partition_path}),
      Json::array({"partition_method", graph::to_string(j.partition_method)}),
      Json::array({"layout", j.layout}),
      Json::array({"plan", j.plan_path}),
      Json::array({"schedule", to_string(j.schedule)}),
      Json::array({"pp", j.pp}),
      Json::array({"dp", j.dp}),
      Json::array({"stages_per_rank", j.stages_per_rank}),
      Json::array({"microbatches", j.microbatches}),
      Json::array({"batch_size", j.batch_size}),
      Json::array({"steps", j.steps}),
      Json::array({"optimizer", to_string(j.optimizer)}),
      Json::array({"lr", j.lr}),
      Json::array({"momentum", j.momentum}),
      Json::array({"weight_decay", j.weight_decay}),
      Json::array({"nan_policy", to_string(j.nan_policy)}),
      Json::array({"dp_algorithm", to_string(d.algorithm)}),
      Json::array({"bucket_cap_mb", d.bucket_cap_mb}),
      Json::array({"ddp_overlap", d.ddp_overlap}),
      Json::array({"localsgd_frequency", d.localsgd_frequency_or_default()}),
      Json::array({"slowmo_frequency", d.slowmo_frequency_or_default()}),
      Json::array({"slowmo_momentum", d.slowmo_momentum_or_default()}),
      Json::array({"slowmo_lr", d.slowmo_lr_or_default()}),
      Json::array({"slowmo_memory_efficient", d.slowmo_memory_efficient_or_default()}),
      Json::array({"slowmo_num_shards", d.slowmo_num_shards_or_default(j.dp)}),
      Json::array({"procs_per_node", d.procs_per_node_or_default()}),
      Json::array({"forward_only", j.forward_only}),
      Json::array({"recompute", to_string(j.recompute)}),
      Json::array({"slowmo_base", to_string(d.slowmo_base_or_default())}),
      Json::array({"sync_every", d.sync_every_or_default()}),
      Json::array({"outer_lr", d.outer_lr_or_default()}),
      Json::array({"outer_momentum", d.outer_momentum_or_default()}),
      Json::array({"outer_nesterov", d.outer_nesterov_or_default()}),
      Json::array({"fragments", d.fragments_or_default()}),
      Json::array({"fragment_sync_delay", d.sync_delay_or_default()}),
      Json::array({"outer_dtype", to_string(d.outer_dtype_or_default())}),
      Json::array({"precision", to_string(j.precision)}),
      Json::array({"reduce_dtype", to_string(j.reduce_dtype_or_default())}),
      Json::array({"clip_grad_norm", j.clip_grad_norm}),
      Json::array({"lr_warmup_steps", j.lr_schedule.warmup_steps}),
      Json::array({"lr_decay_style", to_string(j.lr_schedule.decay_style)}),
      Json::array({"lr_decay_steps", j.lr_schedule.decay_steps_or(j.steps)}),
      Json::array({"lr_min", j.lr_schedule.min_lr}),
      Json::array({"zero_stage", j.zero_stage}),
  });
  // Only ZeRO-3 jobs carry a placement (other jobs' bytes, and fingerprints, stay as they were).
  if (j.zero_stage == 3) {
    out.push_back(Json::array({"shard_placement", std::string(to_string(j.shard_placement))}));
  }
  // Only tensor-parallel jobs (issue 46; simulation only) carry tp and sequence_parallel.
  if (j.tp > 1) {
    out.push_back(Json::array({"tp", j.tp}));
    out.push_back(Json::array({"sequence_parallel", j.sequence_parallel}));
  }
  return out;
}

}  // namespace

std::string to_json(const JobSpec& job) {
  std::ostringstream os;
  os << "{\n";
  const Json fields = resolved(job);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    os << "  " << fields[i][0].dump() << ": " << fields[i][1].dump()
       << (i + 1 < fields.size() ? ",\n" : "\n");
  }
  os << "}\n";
  return os.str();
}

JobSpec parse_job(std::string_view text, std::string_view origin) {
  namespace pj = pipewright::json;
  const pj::Document doc = pj::parse_strict(text, std::string(origin));
  const pj::At root{doc.root, doc.source, ""};
  root.expect_object();
  root.only_keys({"format",
                  "version",
                  "model",
                  "partition",
                  "partition_method",
                  "layout",
                  "plan",
                  "schedule",
                  "pp",
                  "dp",
                  "stages_per_rank",
                  "microbatches",
                  "batch_size",
                  "steps",
                  "optimizer",
                  "lr",
                  "momentum",
                  "weight_decay",
                  "nan_policy",
                  "dp_algorithm",
                  "bucket_cap_mb",
                  "ddp_overlap",
                  "localsgd_frequency",
                  "slowmo_frequency",
                  "slowmo_momentum",
                  "slowmo_lr",
                  "slowmo_memory_efficient",
                  "slowmo_num_shards",
                  "procs_per_node",
                  "forward_only",
                  "recompute",
                  "slowmo_base",
                  "sync_every",
                  "outer_lr",
                  "outer_momentum",
                  "outer_nesterov",
                  "fragments",
                  "fragment_sync_delay",
                  "outer_dtype",
                  "precision",
                  "reduce_dtype",
                  "clip_grad_norm",
                  "lr_warmup_steps",
                  "lr_decay_style",
                  "lr_decay_steps",
                  "lr_min",
                  "zero_stage",
                  "shard_placement",
                  "tp",
                  "sequence_parallel"});
  if (root["format"].as_string() != kJobFormat) {
    root["format"].fail("expected \"" + std::string(kJobFormat) + "\"");
  }
  if (root["version"].as_int() != kJobVersion) {
    root["version"].fail("unsupported version (this is " + std::to_string(kJobVersion) + ")");
  }
  // Names parse with the flags' own parsers; their ConfigError becomes the field's ParseError.
  auto named = [&root](const char* key, auto parse) {
    const pj::At at = root[key];
    try {
      return parse(at.as_string());
    } catch (const ConfigError& e) {
      at.fail(e.what());
    }
  };
  auto int32 = [&root](const char* key) {
    return static_cast<int>(root[key].as_int(0, std::int64_t{1} << 30));
  };
  JobSpec j;
  j.model_path = root["model"].as_string();
  j.partition_path = root["partition"].as_string();
  if (root.has("layout")) j.layout = root["layout"].as_string();  // absent before issue 37
  j.partition_method = named("partition_method", [](const std::string& m) {
    const auto method = graph::parse_partition_method(m);
    PW_CHECK(method.has_value(), ConfigError, "expected uniform or balanced, got '" << m << "'");
    return *method;
  });
  j.plan_path = root["plan"].as_string();
  j.schedule = named("schedule", [](const std::string& s) { return parse_schedule_kind(s); });
  j.pp = int32("pp");
  j.dp = int32("dp");
  j.stages_per_rank = int32("stages_per_rank");
  j.microbatches = int32("microbatches");
  j.batch_size = root["batch_size"].as_int(0, std::int64_t{1} << 40);
  j.steps = root["steps"].as_int(1, std::int64_t{1} << 40);
  j.optimizer = named("optimizer", [](const std::string& s) { return parse_optimizer(s); });
  j.lr = root["lr"].as_finite_positive();
  j.momentum = root["momentum"].as_finite_nonnegative();
  j.weight_decay = root["weight_decay"].as_finite_nonnegative();
  if (root.has("nan_policy"))  // absent in files written before issue 20
    j.nan_policy = named("nan_policy", [](const std::string& s) { return parse_nan_policy(s); });
  DataParallelSpec& d = j.data_parallel;
  d.algorithm = named("dp_algorithm", [](const std::string& s) { return parse_dp_algorithm(s); });
  d.bucket_cap_mb = root["bucket_cap_mb"].as_finite_positive();
  d.ddp_overlap = root["ddp_overlap"].as_bool();
  // Options the algorithm ignores must hold their defaults (what to_json writes for them).
  const bool averaging =
      d.algorithm == DpAlgorithm::kSlowMo || d.algorithm == DpAlgorithm::kLocalSgd;
  const bool slowmo = d.algorithm == DpAlgorithm::kSlowMo;
  const bool diloco = d.algorithm == DpAlgorithm::kDiLoCo;
  DataParallelSpec defaults;
  defaults.algorithm = d.algorithm;
  auto option = [&](const char* key, bool applies, auto value, auto default_value, auto& field) {
    if (applies) {
      field = value;
    } else if (value != default_value) {
      root[key].fail("has no effect with dp_algorithm " + std::string(to_string(d.algorithm)) +
                     "; leave it at its default");
    }
  };
  option("localsgd_frequency", averaging, root["localsgd_frequency"].as_int(),
         defaults.localsgd_frequency_or_default(), d.localsgd_frequency);
  option("procs_per_node", averaging, int32("procs_per_node"), defaults.procs_per_node_or_default(),
         d.procs_per_node);
  option("slowmo_frequency", slowmo, root["slowmo_frequency"].as_int(),
         defaults.slowmo_frequency_or_default(), d.slowmo_frequency);
  option("slowmo_momentum", slowmo, root["slowmo_momentum"].as_finite_nonnegative(),
         defaults.slowmo_momentum_or_default(), d.slowmo_momentum);
  option("slowmo_lr", slowmo, root["slowmo_lr"].as_finite_positive(),
         defaults.slowmo_lr_or_default(), d.slowmo_lr);
  option("slowmo_memory_efficient", slowmo, root["slowmo_memory_efficient"].as_bool(),
         defaults.slowmo_memory_efficient_or_default(), d.slowmo_memory_efficient);
  option("slowmo_num_shards", slowmo, int32("slowmo_num_shards"),
         defaults.slowmo_num_shards_or_default(j.dp), d.slowmo_num_shards);
  // Absent in files written before issue 22.
  if (root.has("forward_only")) j.forward_only = root["forward_only"].as_bool();
  if (root.has("recompute"))
    j.recompute = named("recompute", [](const std::string& s) { return parse_recompute(s); });
  // slowmo_base and DiLoCo's keys are absent in files written before issue 24.
  if (root.has("slowmo_base")) {
    option("slowmo_base", slowmo,
           named("slowmo_base", [](const std::string& s) { return parse_dp_algorithm(s); }),
           defaults.slowmo_base_or_default(), d.slowmo_base);
  }
  if (root.has("sync_every")) {
    option("sync_every", diloco, root["sync_every"].as_int(), defaults.sync_every_or_default(),
           d.sync_every);
    option("outer_lr", diloco, root["outer_lr"].as_finite_positive(),
           defaults.outer_lr_or_default(), d.outer_lr);
    option("outer_momentum", diloco, root["outer_momentum"].as_finite_nonnegative(),
           defaults.outer_momentum_or_default(), d.outer_momentum);
    // The defaults of these two follow the values read above.
    option("outer_nesterov", diloco, root["outer_nesterov"].as_bool(),
           d.outer_nesterov_or_default(), d.outer_nesterov);
    option("fragments", diloco, int32("fragments"), defaults.fragments_or_default(), d.fragments);
    option("fragment_sync_delay", diloco, root["fragment_sync_delay"].as_int(),
           d.sync_delay_or_default(), d.sync_delay);
    option("outer_dtype", diloco,
           named("outer_dtype", [](const std::string& s) { return parse_outer_dtype(s); }),
           defaults.outer_dtype_or_default(), d.outer_dtype);
  }
  // The training recipe's keys are absent in files written before issue 33.
  if (root.has("precision")) {
    j.precision = named("precision", [](const std::string& s) { return parse_precision(s); });
    j.reduce_dtype = named("reduce_dtype",
                           [](const std::string& s) { return parse_precision(s, "reduce_dtype"); });
    j.clip_grad_norm = root["clip_grad_norm"].as_finite_nonnegative();
    j.lr_schedule.warmup_steps = root["lr_warmup_steps"].as_int(0, std::int64_t{1} << 40);
    j.lr_schedule.decay_style =
        named("lr_decay_style", [](const std::string& s) { return parse_lr_decay_style(s); });
    j.lr_schedule.decay_steps = root["lr_decay_steps"].as_int(1, std::int64_t{1} << 40);
    j.lr_schedule.min_lr = root["lr_min"].as_finite_nonnegative();
  }
  if (root.has("zero_stage"))  // absent in files written before issue 43
    j.zero_stage = static_cast<int>(root["zero_stage"].as_int(0, 3));
  if (root.has("tp")) j.tp = static_cast<int>(root["tp"].as_int(1, 1 << 16));
  if (root.has("sequence_parallel")) j.sequence_parallel = root["sequence_parallel"].as_bool();
  if (root.has("shard_placement")) {
    j.shard_placement =
        named("shard_placement", [](const std::string& s) { return parse_shard_placement(s); });
  }
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
