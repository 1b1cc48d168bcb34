#include "run_config.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "config_file.hpp"
#include "pipewright/exec/backend.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"

namespace pipewright::cli {
namespace {

constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;  // 1 MiB

enum class Type : std::uint8_t { kInt, kNumber, kString, kBool };
using Kind = ConfigKind;
using Item = ConfigItem;

// --- Printing values as TOML literals ------------------------------------------------------

std::string str(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}
std::string str(std::string_view s) { return str(std::string(s)); }
std::string str(const char* s) { return str(std::string(s)); }

std::string num(double v) { return toml_number(v); }
std::string num(std::int64_t v) { return std::to_string(v); }
std::string num(std::uint64_t v) { return std::to_string(v); }
std::string num(int v) { return std::to_string(v); }
std::string boolean(bool b) { return b ? "true" : "false"; }
template <typename T>
std::string opt_num(const std::optional<T>& v) {
  return v ? num(*v) : std::string();
}
std::string opt_int(int v) { return v >= 0 ? num(v) : std::string(); }

// --- The keys ------------------------------------------------------------------------------

// One key of the file. A value key passes its value to `flag`. A boolean key passes `flag` when
// true and `flag_false` when false (either may be empty: nothing is passed, the default holds);
// both flags count as "given on the command line" for the file's key. `print` gives the key's
// value in `flags` as a TOML literal, or "" when it is not set.
struct Key {
  std::string_view section;
  std::string_view name;
  Type type;
  std::string_view flag;
  std::string_view flag_false;
  std::string (*print)(const RunFlags&);
};

using F = const RunFlags&;
const Key kKeys[] = {
    {"job", "model", Type::kString, "--model", "", [](F f) { return str(f.config.model_path); }},
    {"job", "partition", Type::kString, "--partition", "",
     [](F f) { return str(f.config.partition_path); }},
    {"job", "layout", Type::kString, "--layout", "", [](F f) { return str(f.config.layout); }},
    {"job", "partition_method", Type::kString, "--partition-method", "",
     [](F f) { return str(graph::to_string(f.config.partition_method)); }},
    {"job", "plan", Type::kString, "--plan", "", [](F f) { return str(f.config.plan_path); }},
    {"job", "schedule", Type::kString, "--schedule", "",
     [](F f) { return str(sched::to_string(f.config.schedule)); }},
    {"job", "dry_run", Type::kBool, "--dry-run", "", [](F f) { return boolean(f.dry_run); }},
    {"job", "plan_out", Type::kString, "--plan-out", "", [](F f) { return str(f.plan_out); }},

    {"parallelism", "pp", Type::kInt, "--pp", "", [](F f) { return num(f.config.pp); }},
    {"parallelism", "dp", Type::kInt, "--dp", "", [](F f) { return num(f.config.dp); }},
    {"parallelism", "stages_per_rank", Type::kInt, "--stages-per-rank", "",
     [](F f) { return f.config.stages_per_rank == 0 ? "" : num(f.config.stages_per_rank); }},
    {"parallelism", "microbatches", Type::kInt, "--microbatches", "",
     [](F f) { return num(f.config.microbatches); }},
    {"parallelism", "zero_stage", Type::kInt, "--zero-stage", "",
     [](F f) { return num(f.config.zero_stage); }},
    {"parallelism", "shard_placement", Type::kString, "--shard-placement", "",
     [](F f) { return str(sched::to_string(f.config.shard_placement)); }},
    {"parallelism", "tp", Type::kInt, "--tp", "", [](F f) { return num(f.config.tp); }},
    {"parallelism", "sequence_parallel", Type::kBool, "--sequence-parallel", "",
     [](F f) { return boolean(f.config.sequence_parallel); }},

    {"training", "batch_size", Type::kInt, "--batch-size", "",
     [](F f) { return num(f.config.batch_size); }},
    {"training", "steps", Type::kInt, "--steps", "", [](F f) { return num(f.config.steps); }},
    {"training", "loss", Type::kString, "--loss", "", [](F f) { return str(f.config.loss); }},
    {"training", "seed", Type::kInt, "--seed", "", [](F f) { return num(f.config.seed); }},
    {"training", "data_x", Type::kString, "--data-x", "", [](F f) { return str(f.config.data_x); }},
    {"training", "data_y", Type::kString, "--data-y", "", [](F f) { return str(f.config.data_y); }},
    {"training", "dataset", Type::kString, "--dataset", "",
     [](F f) { return str(f.config.dataset); }},
    {"training", "shuffle", Type::kBool, "", "--no-shuffle",
     [](F f) { return boolean(!f.no_shuffle); }},
    {"training", "prefetch", Type::kInt, "--prefetch", "",
     [](F f) { return num(f.config.prefetch); }},
    {"training", "init", Type::kString, "--init", "", [](F f) { return str(f.config.init_path); }},
    {"training", "save", Type::kString, "--save", "", [](F f) { return str(f.config.save_path); }},
    {"training", "outputs", Type::kString, "--outputs", "",
     [](F f) { return str(f.config.outputs_path); }},
    {"training", "save_replicas", Type::kBool, "--save-replicas", "",
     [](F f) { return boolean(f.config.save_replicas); }},
    {"training", "nan_policy", Type::kString, "--nan-policy", "",
     [](F f) { return str(sched::to_string(f.config.nan_policy)); }},
    {"training", "forward_only", Type::kBool, "--forward-only", "",
     [](F f) { return boolean(f.config.forward_only); }},
    {"training", "recompute", Type::kString, "--recompute", "",
     [](F f) { return str(sched::to_string(f.config.recompute)); }},

    {"training", "precision", Type::kString, "--precision", "",
     [](F f) { return str(sched::to_string(f.config.precision)); }},
    {"training", "reduce_dtype", Type::kString, "--reduce-dtype", "",
     [](F f) {
       const auto& v = f.config.reduce_dtype;
       return v ? str(sched::to_string(*v)) : std::string();
     }},
    {"training", "clip_grad_norm", Type::kNumber, "--clip-grad-norm", "",
     [](F f) { return num(f.config.clip_grad_norm); }},
    {"training", "initial_loss_scale", Type::kNumber, "--initial-loss-scale", "",
     [](F f) { return num(f.config.initial_loss_scale); }},
    {"training", "min_loss_scale", Type::kNumber, "--min-loss-scale", "",
     [](F f) { return num(f.config.min_loss_scale); }},
    {"training", "loss_scale_window", Type::kInt, "--loss-scale-window", "",
     [](F f) { return num(f.config.loss_scale_window); }},
    {"training", "eval_every", Type::kInt, "--eval-every", "",
     [](F f) { return num(f.config.eval_every); }},
    {"training", "eval_batches", Type::kInt, "--eval-batches", "",
     [](F f) { return num(f.config.eval_batches); }},
    {"training", "eval_data_x", Type::kString, "--eval-data-x", "",
     [](F f) { return str(f.config.eval_data_x); }},
    {"training", "eval_data_y", Type::kString, "--eval-data-y", "",
     [](F f) { return str(f.config.eval_data_y); }},
    {"training", "eval_dataset", Type::kString, "--eval-dataset", "",
     [](F f) { return str(f.config.eval_dataset); }},

    {"optimizer", "name", Type::kString, "--optimizer", "",
     [](F f) { return str(sched::to_string(f.config.optimizer)); }},
    {"optimizer", "lr", Type::kNumber, "--lr", "", [](F f) { return num(f.config.lr); }},
    {"optimizer", "momentum", Type::kNumber, "--momentum", "",
     [](F f) { return num(f.config.momentum); }},
    {"optimizer", "weight_decay", Type::kNumber, "--weight-decay", "",
     [](F f) { return num(f.config.weight_decay); }},
    {"optimizer", "lr_warmup_steps", Type::kInt, "--lr-warmup-steps", "",
     [](F f) { return num(f.config.lr_schedule.warmup_steps); }},
    {"optimizer", "lr_decay_style", Type::kString, "--lr-decay-style", "",
     [](F f) { return str(sched::to_string(f.config.lr_schedule.decay_style)); }},
    {"optimizer", "lr_decay_steps", Type::kInt, "--lr-decay-steps", "",
     [](F f) {
       const auto v = f.config.lr_schedule.decay_steps;
       return v > 0 ? num(v) : std::string();
     }},
    {"optimizer", "lr_min", Type::kNumber, "--lr-min", "",
     [](F f) { return num(f.config.lr_schedule.min_lr); }},

    {"data_parallel", "algorithm", Type::kString, "--dp-algorithm", "",
     [](F f) { return str(sched::to_string(f.config.data_parallel.algorithm)); }},
    {"data_parallel", "bucket_cap_mb", Type::kNumber, "--bucket-cap-mb", "",
     [](F f) { return num(f.config.data_parallel.bucket_cap_mb); }},
    {"data_parallel", "ddp_overlap", Type::kBool, "", "--no-ddp-overlap",
     [](F f) { return boolean(f.config.data_parallel.ddp_overlap); }},
    {"data_parallel", "localsgd_frequency", Type::kInt, "--localsgd-frequency", "",
     [](F f) { return opt_num(f.config.data_parallel.localsgd_frequency); }},
    {"data_parallel", "slowmo_frequency", Type::kInt, "--slowmo-frequency", "",
     [](F f) { return opt_num(f.config.data_parallel.slowmo_frequency); }},
    {"data_parallel", "slowmo_momentum", Type::kNumber, "--slowmo-momentum", "",
     [](F f) { return opt_num(f.config.data_parallel.slowmo_momentum); }},
    {"data_parallel", "slowmo_lr", Type::kNumber, "--slowmo-lr", "",
     [](F f) { return opt_num(f.config.data_parallel.slowmo_lr); }},
    {"data_parallel", "slowmo_memory_efficient", Type::kBool, "--slowmo-memory-efficient",
     "--no-slowmo-memory-efficient",
     [](F f) {
       const auto& v = f.config.data_parallel.slowmo_memory_efficient;
       return v ? boolean(*v) : std::string();
     }},
    {"data_parallel", "slowmo_num_shards", Type::kInt, "--slowmo-num-shards", "",
     [](F f) { return opt_num(f.config.data_parallel.slowmo_num_shards); }},
    {"data_parallel", "procs_per_node", Type::kInt, "--procs-per-node", "",
     [](F f) { return opt_num(f.config.data_parallel.procs_per_node); }},
    {"data_parallel", "check_replicas", Type::kInt, "--check-replicas", "",
     [](F f) { return num(f.config.check_replicas); }},
    // SlowMo's SGP base, DiLoCo (issue 24).
    {"data_parallel", "slowmo_base", Type::kString, "--slowmo-base", "",
     [](F f) {
       const auto& v = f.config.data_parallel.slowmo_base;
       return v ? str(sched::to_string(*v)) : std::string();
     }},
    {"data_parallel", "sync_every", Type::kInt, "--sync-every", "",
     [](F f) { return opt_num(f.config.data_parallel.sync_every); }},
    {"data_parallel", "outer_lr", Type::kNumber, "--outer-lr", "",
     [](F f) { return opt_num(f.config.data_parallel.outer_lr); }},
    {"data_parallel", "outer_momentum", Type::kNumber, "--outer-momentum", "",
     [](F f) { return opt_num(f.config.data_parallel.outer_momentum); }},
    {"data_parallel", "outer_nesterov", Type::kBool, "--outer-nesterov", "--no-outer-nesterov",
     [](F f) {
       const auto& v = f.config.data_parallel.outer_nesterov;
       return v ? boolean(*v) : std::string();
     }},
    {"data_parallel", "fragments", Type::kInt, "--fragments", "",
     [](F f) { return opt_num(f.config.data_parallel.fragments); }},
    {"data_parallel", "fragment_sync_delay", Type::kInt, "--fragment-sync-delay", "",
     [](F f) { return opt_num(f.config.data_parallel.sync_delay); }},
    {"data_parallel", "outer_dtype", Type::kString, "--outer-dtype", "",
     [](F f) {
       const auto& v = f.config.data_parallel.outer_dtype;
       return v ? str(sched::to_string(*v)) : std::string();
     }},

    {"comm", "backend", Type::kString, "--backend", "",
     [](F f) { return str(exec::to_string(f.config.backend)); }},
    {"comm", "device_map", Type::kString, "--device-map", "",
     [](F f) { return str(f.config.device_map); }},
    {"comm", "timeout", Type::kNumber, "--timeout", "",
     [](F f) { return num(f.config.timeout_s); }},
    {"comm", "prepost_receives", Type::kBool, "", "--no-prepost-receives",
     [](F f) { return boolean(f.config.prepost_receives); }},
    {"comm", "shm_collectives", Type::kBool, "", "--no-shm-collectives",
     [](F f) { return boolean(f.config.shm_collectives); }},
    {"comm", "shm_p2p", Type::kBool, "", "--no-shm-p2p",
     [](F f) { return boolean(f.config.shm_p2p); }},

    {"distributed", "rank", Type::kInt, "--rank", "", [](F f) { return opt_int(f.rank); }},
    {"distributed", "world_size", Type::kInt, "--world-size", "",
     [](F f) { return opt_int(f.world_size); }},
    {"distributed", "local_rank", Type::kInt, "--local-rank", "",
     [](F f) { return opt_int(f.local_rank); }},
    {"distributed", "local_world_size", Type::kInt, "--local-world-size", "",
     [](F f) { return opt_int(f.local_world_size); }},
    {"distributed", "master_addr", Type::kString, "--master-addr", "",
     [](F f) { return f.master_addr.empty() ? std::string() : str(f.master_addr); }},
    {"distributed", "master_port", Type::kInt, "--master-port", "",
     [](F f) { return opt_int(f.master_port); }},
    {"distributed", "job_id", Type::kString, "--job-id", "",
     [](F f) { return f.job_id.empty() ? std::string() : str(f.job_id); }},

    {"checkpoint", "dir", Type::kString, "--checkpoint-dir", "",
     [](F f) { return str(f.config.checkpoint_dir); }},
    {"checkpoint", "every", Type::kInt, "--checkpoint-every", "",
     [](F f) { return num(f.config.checkpoint_every); }},
    {"checkpoint", "resume", Type::kBool, "--resume", "",
     [](F f) { return boolean(f.config.resume); }},

    {"metrics", "trace", Type::kString, "--trace", "",
     [](F f) { return str(f.config.trace_path); }},
    {"metrics", "profile", Type::kString, "--profile", "",
     [](F f) { return str(f.config.profile_path); }},
    {"metrics", "metrics", Type::kString, "--metrics", "",
     [](F f) { return str(f.config.metrics_path); }},
    {"metrics", "warmup_steps", Type::kInt, "--warmup-steps", "",
     [](F f) { return num(f.config.warmup_steps); }},
    {"metrics", "log_every", Type::kInt, "--log-every", "", [](F f) { return num(f.log_every); }},
};

constexpr std::string_view kSections[] = {"job",         "parallelism",   "training",
                                          "optimizer",   "data_parallel", "comm",
                                          "distributed", "checkpoint",    "metrics"};

bool is_section(std::string_view name) {
  return std::find(std::begin(kSections), std::end(kSections), name) != std::end(kSections);
}

std::string underscores(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

std::string keys_of(std::string_view section) {
  std::string out;
  for (const Key& k : kKeys) {
    if (k.section != section) continue;
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

std::string section_list() {
  std::string out;
  for (const auto s : kSections) {
    if (!out.empty()) out += ", ";
    out += "[" + std::string(s) + "]";
  }
  return out;
}

const char* type_name(Type t) {
  switch (t) {
    case Type::kInt:
      return "an integer";
    case Type::kNumber:
      return "a number";
    case Type::kString:
      return "a string";
    case Type::kBool:
      return "a boolean (true or false)";
  }
  return "a value";
}

// The key an item names (nullptr: unknown). Top-level items name a long flag.
const Key* find_key(const CLI::App& cmd, const Item& item, const CLI::Option** flag_option) {
  *flag_option = nullptr;
  if (!item.section.empty()) {
    const std::string name = underscores(item.key);
    for (const Key& k : kKeys) {
      if (k.section == item.section && k.name == name) return &k;
    }
    return nullptr;
  }
  const CLI::Option* opt = cmd.get_option_no_throw("--" + item.key);
  if (opt == nullptr) {
    std::string dashed = item.key;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    opt = cmd.get_option_no_throw("--" + dashed);
  }
  if (opt == nullptr || opt == cmd.get_help_ptr() || opt->check_lname("config") ||
      item.key.size() < 2) {
    return nullptr;
  }
  for (const Key& k : kKeys) {
    for (const auto flag : {k.flag, k.flag_false}) {
      if (!flag.empty() && cmd.get_option_no_throw(std::string(flag)) == opt) {
        *flag_option = opt;
        return &k;
      }
    }
  }
  return nullptr;
}

bool type_fits(Type type, Kind kind) {
  switch (type) {
    case Type::kInt:
      return kind == Kind::kInt;
    case Type::kNumber:
      return kind == Kind::kInt || kind == Kind::kFloat;
    case Type::kString:
      return kind == Kind::kString;
    case Type::kBool:
      return kind == Kind::kBool;
  }
  return false;
}

}  // namespace

void apply_config_file(CLI::App& cmd, const std::string& path) {
  const std::string text = json::read_text_file(path, "config file", kMaxConfigBytes);
  std::optional<json::Document> doc;  // the items' error positions refer to it
  const std::vector<Item> items = read_config_items(path, text, is_section, doc);

  std::map<const Key*, const Item*> seen;
  for (const Item& item : items) {
    if (item.section.empty() && item.kind == Kind::kTable) {
      fail(item, "unknown section [" + item.key + "]; sections: " + section_list());
    }
    const CLI::Option* flag_option = nullptr;
    const Key* key = find_key(cmd, item, &flag_option);
    if (key == nullptr) {
      if (item.section.empty() && is_section(item.key)) {
        fail(item,
             "expected a table (the [" + item.key + "] section), got " + kind_name(item.kind));
      }
      if (!item.section.empty()) {
        fail(item, "unknown key '" + item.key + "' in [" + item.section +
                       "]; keys: " + keys_of(item.section));
      }
      fail(item, "unknown key '" + item.key + "'; use the sections " + section_list() +
                     " or a long flag of `run` (docs/executor.md)");
    }
    if (const auto [it, fresh] = seen.emplace(key, &item); !fresh) {
      fail(item, "set twice (also at " + it->second->where() + ")");
    }
    // A top-level flag that takes no value (--no-shuffle) is a boolean: true passes it.
    const bool bare_flag = flag_option != nullptr && flag_option->get_expected_max() == 0;
    const Type type = bare_flag ? Type::kBool : key->type;
    if (!type_fits(type, item.kind)) {
      fail(item, std::string("expected ") + type_name(type) + ", got " + kind_name(item.kind));
    }
    // Flags given on the command line win.
    bool given = false;
    for (const auto flag : {key->flag, key->flag_false}) {
      if (!flag.empty() && cmd.get_option_no_throw(std::string(flag))->count() > 0) given = true;
    }
    if (given) continue;
    std::string flag;
    if (bare_flag) {
      if (item.boolean) flag = "--" + flag_option->get_lnames().front();
    } else if (type == Type::kBool) {
      flag = std::string(item.boolean ? key->flag : key->flag_false);
    } else {
      flag = std::string(key->flag);
    }
    if (flag.empty()) continue;  // the default holds
    // The value goes through the flag's own option: the same conversion and checks as on the
    // command line (its callback fills RunFlags). clear() then forgets the result, so CLI11 does
    // not run the callback again and the option still counts as not given on the command line.
    CLI::Option* opt = cmd.get_option_no_throw(flag);
    try {
      opt->add_result(type == Type::kBool ? std::string("true") : item.text);
      opt->run_callback();
      opt->clear();
    } catch (const CLI::Error& e) {
      fail(item, e.what());
    } catch (const Error& e) {
      fail(item, e.what());
    }
  }
}

void check_config_covers(const CLI::App& cmd) {
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt == cmd.get_help_ptr() || opt->check_lname("config")) continue;
    if (opt->get_group().empty()) continue;  // a deprecated spelling (flags.hpp), hidden
    bool covered = false;
    for (const Key& k : kKeys) {
      for (const auto flag : {k.flag, k.flag_false}) {
        if (!flag.empty() && cmd.get_option_no_throw(std::string(flag)) == opt) covered = true;
      }
    }
    if (!covered) {
      throw std::logic_error("run: option " + opt->get_name() +
                             " has no key in the --config file format (tools/cli/run_config.cpp)");
    }
  }
}

std::string merged_config_toml(const RunFlags& flags) {
  std::ostringstream out;
  std::string_view section;
  for (const Key& k : kKeys) {
    if (k.section != section) {
      out << (section.empty() ? "" : "\n") << "[" << k.section << "]\n";
      section = k.section;
    }
    const std::string value = k.print(flags);
    if (value.empty()) {
      out << "# " << k.name << ": not set\n";
    } else {
      out << k.name << " = " << value << "\n";
    }
  }
  return out.str();
}

}  // namespace pipewright::cli
