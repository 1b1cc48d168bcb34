// `pipewright run`: train a model with a pipeline schedule on this process's rank of a pp x dp
// job. Thin: the flags (or the same keys from a --config file, TOML or JSON) fill an
// exec::RunConfig and exec::run_training does the work (docs/executor.md). This file only logs
// (rank 0: one line per step, a progress bar when stderr is a terminal).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "exec_commands.hpp"
#include "pipewright/exec/run.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/json_reader.hpp"

namespace pipewright::cli {
namespace {

// --config files: JSON objects ({"batch-size": 8, ...}) or CLI11's TOML subset
// (batch-size = 8). Keys are the long flag names; '_' may stand for '-'. Flags given on the
// command line win over the file.
// JSON goes through the shared strict reader (pipewright/graph/json_reader.hpp): errors name the
// file, line:column and JSON pointer.
class JsonOrTomlConfig final : public CLI::ConfigTOML {
 public:
  explicit JsonOrTomlConfig(const CLI::App* app) : app_(app) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::string text((std::istreambuf_iterator<char>(input)), std::istreambuf_iterator<char>());
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || text[first] != '{') {
      std::istringstream is(text);
      return CLI::ConfigTOML::from_config(is);
    }
    const json::Document doc = json::parse_strict(text, source_name());
    const json::At root{doc.root, doc.source, ""};
    root.expect_object();
    std::vector<CLI::ConfigItem> items;
    for (const auto& [key, value] : doc.root.items()) {
      CLI::ConfigItem item;
      item.name = key;
      std::replace(item.name.begin(), item.name.end(), '_', '-');
      auto scalar = [](const json::At& at) -> std::string {
        const json::Json& v = at.value;
        if (v.is_string()) return v.get<std::string>();
        if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
        if (v.is_number()) return v.dump();
        at.fail("expected a string, number or boolean");
      };
      const json::At at = root[key];
      if (value.is_array()) {
        for (std::size_t i = 0; i < value.size(); ++i) item.inputs.push_back(scalar(at[i]));
      } else {
        item.inputs.push_back(scalar(at));
      }
      items.push_back(std::move(item));
    }
    return items;
  }

 private:
  // The --config file's path for error messages.
  std::string source_name() const {
    const CLI::Option* opt = app_->get_config_ptr();
    return opt != nullptr && !opt->results().empty() ? opt->results().back() : "--config";
  }
  const CLI::App* app_;
};

struct RunFlags {
  exec::RunConfig config;
  bool no_shuffle = false;
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;
  int local_world_size = -1;
  std::string master_addr;
  int master_port = -1;
  std::int64_t log_every = 1;
};

// Options whose presence matters (SlowMo options are rejected with --dp-algorithm ddp) go
// through callbacks into std::optional fields.
void add_data_parallel_flags(CLI::App* sub, exec::DataParallelConfig& d) {
  sub->add_option_function<std::string>(
      "--dp-algorithm", [&d](const std::string& s) { d.algorithm = exec::parse_dp_algorithm(s); },
      "ddp|slowmo|localsgd (default ddp)");
  sub->add_option("--bucket-cap-mb", d.bucket_cap_mb, "DDP bucket cap, MiB (fractions allowed)")
      ->capture_default_str();
  sub->add_flag_function(
      "--no-ddp-overlap", [&d](std::int64_t) { d.ddp_overlap = false; },
      "DDP: start every all-reduce at REDUCE_GRAD (ablation of the overlap)");
  sub->add_option("--check-replicas", d.check_replicas,
                  "Every N steps verify that replicas hold identical parameters (0: never)")
      ->capture_default_str();
  sub->add_option_function<std::int64_t>(
      "--localsgd-frequency", [&d](std::int64_t v) { d.localsgd_frequency = v; },
      "SlowMo/LocalSGD: average parameters every N steps (default 3)");
  sub->add_option_function<std::int64_t>(
      "--slowmo-frequency", [&d](std::int64_t v) { d.slowmo_frequency = v; },
      "SlowMo: slow momentum step every N steps (default 48)");
  sub->add_option_function<double>(
      "--slowmo-momentum", [&d](double v) { d.slowmo_momentum = v; },
      "SlowMo: slow momentum beta (default 0.5)");
  sub->add_option_function<double>(
      "--slowmo-lr", [&d](double v) { d.slowmo_lr = v; },
      "SlowMo: slow learning rate alpha (default 1)");
  sub->add_flag_function(
      "--slowmo-memory-efficient", [&d](std::int64_t) { d.slowmo_memory_efficient = true; },
      "SlowMo: shard the slow buffers over --slowmo-num-shards replicas (default)");
  sub->add_flag_function(
      "--no-slowmo-memory-efficient", [&d](std::int64_t) { d.slowmo_memory_efficient = false; },
      "SlowMo: every replica keeps full slow buffers");
  sub->add_option_function<int>(
      "--slowmo-num-shards", [&d](int v) { d.slowmo_num_shards = v; },
      "SlowMo: replicas holding shards of the slow buffers (default min(32, dp))");
  sub->add_option_function<int>(
      "--procs-per-node", [&d](int v) { d.procs_per_node = v; },
      "SlowMo/LocalSGD: ranks per node (gradients all-reduced within a node)");
  sub->add_option("--checkpoint-dir", d.checkpoint_dir,
                  "Write checkpoints of the whole training state here (one file per rank)");
  sub->add_option("--checkpoint-every", d.checkpoint_every,
                  "Also checkpoint every N steps (0: after the last step only)")
      ->capture_default_str();
  sub->add_flag("--resume", d.resume,
                "Resume from the last complete checkpoint in --checkpoint-dir");
  sub->add_flag("--save-replicas", d.save_replicas,
                "With --save, also write every replica's weights as <FILE>.replica<R>.safetensors");
}

class Progress {
 public:
  Progress() : tty_(::isatty(STDERR_FILENO) == 1) {}
  void clear() const {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }
  void draw(std::int64_t done, std::int64_t total) const {
    if (!tty_ || total <= 0) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\r[%s%s] %lld/%lld",
                 std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total));
    std::fflush(stderr);
  }

 private:
  bool tty_;
};

void setup_run(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  auto& c = flags->config;
  auto* sub = app.add_subcommand("run", std::string(exec_command_description("run")));
  sub->config_formatter(std::make_shared<JsonOrTomlConfig>(sub));
  sub->set_config("--config", "", "TOML or JSON file with the same keys as the long flags");
  sub->add_option("--model", c.model_path, "Model JSON")->required();
  sub->add_option("--schedule", c.schedule,
                  "GPipe|1F1B|Interleaved1F1B|LoopedBFS|InterleavedZeroBubble")
      ->capture_default_str();
  sub->add_option("--plan", c.plan_path, "Use this plan file (CSV/JSON) instead of --schedule");
  sub->add_option("--partition", c.partition_path, "Use this partition JSON");
  sub->add_option("--partition-method", c.partition_method, "uniform|balanced")
      ->capture_default_str();
  sub->add_option("--pp", c.pp, "Pipeline ranks")->capture_default_str();
  sub->add_option("--dp", c.dp, "Data-parallel replicas")->capture_default_str();
  sub->add_option("--stages-per-rank", c.stages_per_rank, "Stages per pipeline rank (v)")
      ->capture_default_str();
  sub->add_option("--microbatches", c.microbatches, "Microbatches per step")->capture_default_str();
  sub->add_option("--batch-size", c.batch_size, "Samples per step per replica")->required();
  sub->add_option("--steps", c.steps, "Training steps")->capture_default_str();
  sub->add_option("--loss", c.loss, "mse|cross-entropy (default: the model's loss node)");
  sub->add_option("--optimizer", c.optimizer, "sgd|adam|adamw")->capture_default_str();
  sub->add_option("--lr", c.lr, "Learning rate")->capture_default_str();
  sub->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  sub->add_option("--weight-decay", c.weight_decay, "Weight decay")->capture_default_str();
  sub->add_option("--data-x", c.data_x, "Inputs, .npy (float32 or int64 rows)");
  sub->add_option("--data-y", c.data_y, "Targets, .npy");
  sub->add_option("--dataset", c.dataset, "Bundled dataset (e.g. sonnets)");
  sub->add_flag("--no-shuffle", flags->no_shuffle, "Read samples in file order");
  sub->add_option("--seed", c.seed, "Seed of initialisation and shuffling")->capture_default_str();
  sub->add_option("--init", c.init_path, "Initial weights (safetensors)");
  sub->add_option("--save", c.save_path, "Write final weights (safetensors, rank 0)");
  sub->add_option("--backend", c.backend, "gloo|mpi|nccl")->capture_default_str();
  sub->add_option("--device-map", c.device_map,
                  "nccl: CUDA device of each local rank, '2,3,0,1' or '0:2,1:3' (default: the "
                  "local rank; docs/gpu.md)");
  sub->add_option("--trace", c.trace_path, "Write a Chrome trace of every rank (rank 0)");
  sub->add_option("--profile", c.profile_path,
                  "Write measured per-stage costs for `pipewright simulate --profile`");
  sub->add_option("--warmup-steps", c.warmup_steps, "Steps left out of --profile statistics")
      ->capture_default_str();
  sub->add_flag_function(
      "--no-prepost-receives", [&c](std::int64_t) { c.prepost_receives = false; },
      "Post each receive at its RECV action instead of when the step starts (ablation)");
  sub->add_flag_function(
      "--no-shm-collectives", [&c](std::int64_t) { c.shm_collectives = false; },
      "gloo: all-reduce DDP buckets through Gloo (TCP) even when the replicas share a host");
  sub->add_option("--timeout", c.timeout_s, "Deadline of every wait, seconds")
      ->capture_default_str();
  sub->add_option("--log-every", flags->log_every, "Log every N-th step (and the last)")
      ->capture_default_str();
  sub->add_option("--rank", flags->rank, "This process's rank (else from the environment)");
  sub->add_option("--world-size", flags->world_size, "Number of processes");
  sub->add_option("--local-rank", flags->local_rank, "Rank on this node");
  sub->add_option("--local-world-size", flags->local_world_size, "Processes on this node");
  sub->add_option("--master-addr", flags->master_addr, "Rendezvous host (rank 0)");
  sub->add_option("--master-port", flags->master_port, "Rendezvous port");
  // Data-parallel flags (docs/data-parallel.md) fill c.data_parallel here.
  add_data_parallel_flags(sub, c.data_parallel);

  sub->callback([flags] {
    auto cfg = flags->config;
    cfg.shuffle = !flags->no_shuffle;
    if (flags->rank >= 0) cfg.world.rank = flags->rank;
    if (flags->world_size >= 0) cfg.world.world_size = flags->world_size;
    if (flags->local_rank >= 0) cfg.world.local_rank = flags->local_rank;
    if (flags->local_world_size >= 0) cfg.world.local_world_size = flags->local_world_size;
    if (!flags->master_addr.empty()) cfg.world.master_addr = flags->master_addr;
    if (flags->master_port >= 0) cfg.world.master_port = flags->master_port;
    Progress progress;
    PW_CHECK(flags->log_every >= 1, ConfigError, "--log-every must be >= 1");
    const auto every = flags->log_every;
    const auto result = exec::run_training(cfg, [&progress, every](const exec::StepLog& s) {
      if ((s.step + 1) % every != 0 && s.step + 1 != s.steps) {
        progress.draw(s.step + 1, s.steps);
        return;
      }
      progress.clear();
      spdlog::info("step {}/{} loss {:.6f} step {:.1f} ms {:.1f} samples/s", s.step + 1, s.steps,
                   s.loss, s.step_ms, s.samples_per_s);
      progress.draw(s.step + 1, s.steps);
    });
    progress.clear();
    for (const auto& f : result.written_files) spdlog::info("wrote {}", f);
    if (cfg.dp > 1 && result.world_rank == 0) {
      const auto& d = result.data_parallel;
      const double steps = static_cast<double>(std::max<std::int64_t>(1, d.steps));
      spdlog::info(
          "data-parallel ({}): {:.0f} wire bytes/step, {:.0f} payload bytes/step, {} "
          "collectives, buckets started in backward {} / at reduce {}, comm wait {:.3f} ms/step",
          exec::to_string(cfg.data_parallel.algorithm), d.wire_bytes / steps,
          static_cast<double>(d.payload_bytes) / steps, d.collectives, d.buckets_in_backward,
          d.buckets_at_reduce, static_cast<double>(d.exposed_wait_ns) / 1e6 / steps);
    }
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_run);

}  // namespace pipewright::cli
