// `pipewright search --model M --cluster C --devices N [--memory-limit SIZE] [--global-batch G]`:
// enumerates pp x dp x v x m x schedule x data-parallel algorithm, simulates each and prints the
// best configurations (docs/simulator.md). Progress goes to stderr, results to stdout or -o.
#include <spdlog/spdlog.h>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <cctype>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/training.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/search.hpp"

namespace pipewright::cli {
namespace {

struct SearchArgs {
  std::string model_file;
  std::string cluster_file;
  int devices = 0;
  std::string memory_limit;
  std::optional<std::int64_t> global_batch;
  std::vector<std::string> schedules;
  std::vector<int> stages_per_rank = {2, 4, 8};
  std::string optimizer = std::string(sched::to_string(sched::JobSpec{}.optimizer));
  double momentum = 0.0;
  int top_k = 10;
  std::string format = "text";
  bool no_progress = false;
  bool progress = false;
  std::string recompute = "none";
  std::vector<std::string> precisions = {"fp32"};
  std::string output = "-";
};

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024 * 1024); }

std::string table(const sim::SearchResult& r) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%4s  %-22s %4s %4s %3s %5s  %-24s %12s %14s %8s %10s\n", "#",
                "schedule", "pp", "dp", "v", "m", "dp algorithm", "step ms", "samples/s", "bubble",
                "peak GiB");
  os << line;
  int k = 0;
  for (const auto& c : r.ranked) {
    std::string dp = (c.dp > 1 ? sim::describe(c.dp_variant) : std::string("-")) +
                     (c.recompute ? " +recompute" : "") +
                     (c.zero_stage > 0 ? " zero" + std::to_string(c.zero_stage) : "");
    if (c.precision != sched::Precision::kFp32)
      dp += " " + std::string(sched::to_string(c.precision));
    std::snprintf(line, sizeof line,
                  "%4d  %-22s %4d %4d %3d %5d  %-24s %12.3f %14.1f %7.1f%% %10.2f\n", ++k,
                  sim::schedule_name(c).c_str(), c.pp, c.dp, c.v, c.microbatches, dp.c_str(),
                  static_cast<double>(c.step_ns) / 1e6, c.throughput_samples_per_s,
                  100 * c.bubble_fraction, gib(c.peak_memory_bytes));
    os << line;
  }
  std::snprintf(line, sizeof line,
                "%lld configurations: %lld simulated, %lld over the memory limit, %lld shapes "
                "rejected by the schedule or partitioner\n",
                static_cast<long long>(r.enumerated), static_cast<long long>(r.simulated),
                static_cast<long long>(r.dropped_memory), static_cast<long long>(r.rejected_shape));
  os << line;
  return os.str();
}

std::string to_json(const sim::SearchResult& r) {
  nlohmann::json j;
  j["format"] = "pipewright-search";
  j["version"] = 1;
  j["enumerated"] = r.enumerated;
  j["simulated"] = r.simulated;
  j["dropped_memory"] = r.dropped_memory;
  j["rejected_shape"] = r.rejected_shape;
  nlohmann::json ranked = nlohmann::json::array();
  for (const auto& c : r.ranked) {
    ranked.push_back({{"schedule", sim::schedule_name(c)},
                      {"pp", c.pp},
                      {"dp", c.dp},
                      {"stages_per_rank", c.v},
                      {"microbatches", c.microbatches},
                      {"dp_algorithm", std::string(sched::to_string(c.dp_variant.algorithm))},
                      {"bucket_cap_mb", c.dp_variant.bucket_cap_mb},
                      {"localsgd_frequency", c.dp_variant.localsgd_frequency},
                      {"slowmo_frequency", c.dp_variant.slowmo_frequency},
                      {"sync_every", c.dp_variant.sync_every},
                      {"fragments", c.dp_variant.fragments},
                      {"step_ms", static_cast<double>(c.step_ns) / 1e6},
                      {"throughput_samples_per_s", c.throughput_samples_per_s},
                      {"bubble_fraction", c.bubble_fraction},
                      {"peak_memory_bytes", c.peak_memory_bytes},
                      {"recompute", c.recompute ? "full" : "none"},
                      {"precision", std::string(sched::to_string(c.precision))},
                      {"zero_stage", c.zero_stage},
                      {"description", sim::describe(c)}});
  }
  j["ranked"] = std::move(ranked);
  return j.dump(2) + "\n";
}

void run_search(const SearchArgs& a) {
  const graph::Model model = graph::load_model(a.model_file);
  sim::Cluster cluster;
  if (!a.cluster_file.empty()) cluster = sim::load_cluster(a.cluster_file);
  sim::SearchOptions opt;
  opt.devices = a.devices;
  if (!a.memory_limit.empty())
    opt.memory_limit_bytes = parse_size(a.memory_limit, "--memory-limit");
  opt.global_batch = a.global_batch;
  // "Auto" among --schedules: Auto only with the names given; a list without it: no Auto.
  opt.try_auto = a.schedules.empty();
  for (const auto& s : a.schedules) {
    std::string lower;
    for (char ch : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower == "auto") {
      opt.try_auto = true;
      continue;
    }
    opt.schedules.push_back(sched::parse_schedule_kind(s));
  }
  opt.named_schedules = a.schedules.empty() || !opt.schedules.empty();
  opt.stages_per_rank = a.stages_per_rank;
  for (int v : opt.stages_per_rank)
    PW_CHECK(v >= 1, ConfigError, "--stages-per-rank values must be >= 1, got " << v);
  opt.optimizer = sched::parse_optimizer(a.optimizer);
  opt.momentum = a.momentum;
  PW_CHECK(a.recompute == "none" || a.recompute == "auto", ConfigError,
           "--recompute: search takes none or auto (over the memory limit, try --recompute "
           "full), got '"
               << a.recompute << "'");
  opt.try_recompute = a.recompute == "auto";
  for (const auto& p : a.precisions) {
    const sched::Precision precision = sched::parse_precision(p);
    PW_CHECK(
        std::find(opt.precisions.begin(), opt.precisions.end(), precision) == opt.precisions.end(),
        ConfigError, "--precision: " << p << " is listed twice");
    opt.precisions.push_back(precision);
  }
  PW_CHECK(a.top_k >= 1, ConfigError, "--top must be >= 1, got " << a.top_k);
  opt.top_k = a.top_k;

  // A progress bar on stderr, redrawn at most once per percent; only on a terminal (a log file
  // gets the summary line alone) unless --progress asks for it.
  int last_percent = -1;
  const bool show = !a.no_progress && (a.progress || ::isatty(STDERR_FILENO) == 1);
  auto progress = [&](std::int64_t done, std::int64_t total) {
    if (!show || total <= 0) return;
    const int percent = static_cast<int>(100 * done / total);
    if (percent == last_percent) return;
    last_percent = percent;
    constexpr int kBar = 40;
    const int filled = percent * kBar / 100;
    std::fprintf(stderr, "\rsearch [%s%s] %3d%% %lld/%lld", std::string(filled, '#').c_str(),
                 std::string(kBar - filled, ' ').c_str(), percent, static_cast<long long>(done),
                 static_cast<long long>(total));
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const sim::SearchResult result = sim::search(model, cluster, opt, progress);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("searched {} configurations ({} simulated, {} actions) in {:.2f} s",
               result.enumerated, result.simulated, result.simulated_actions, secs);
  const bool json = a.format == "json";
  PW_CHECK(!result.ranked.empty() || json, ConfigError,
           "no configuration fits: " << result.dropped_memory << " over the memory limit, "
                                     << result.rejected_shape << " shapes rejected");
  write_output(a.output, json ? to_json(result) : table(result));
}

void setup_search(CLI::App& app) {
  auto a = std::make_shared<SearchArgs>();
  auto* cmd = app.add_subcommand(
      "search", "Search pp x dp x v x m x schedule x DP algorithm by simulation; rank by speed");
  cmd->add_option("--model", a->model_file, "model JSON (graph/)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--cluster", a->cluster_file, "cluster JSON (pipewright-cluster)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--devices,-n", a->devices, "devices to use (pp x dp)")->required();
  cmd->add_option("--memory-limit", a->memory_limit,
                  "memory per device: bytes or a size such as 80GB, 74.5GiB (default: the "
                  "cluster's)");
  cmd->add_option("--global-batch", a->global_batch,
                  "samples per step (fixes m = G / (dp x micro_batch_size))");
  cmd->add_option("--schedules", a->schedules,
                  "schedules to try, Auto among them (default: all and Auto)")
      ->delimiter(',');
  cmd->add_option("-v,--stages-per-rank", a->stages_per_rank,
                  "V values to try for the looped schedules")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--momentum", a->momentum, "SGD momentum (memory: a momentum buffer when > 0)")
      ->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer, "sgd | adam | adamw (memory)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--precision", a->precisions,
                  "precisions to try, e.g. fp32,bf16 (each configuration at each; bf16/fp16: "
                  "16-bit activations and p2p messages, fp32 parameters, gradients and optimizer "
                  "state)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-k,--top", a->top_k, "rows to print")->capture_default_str();
  cmd->add_option("-f,--format", a->format, "text (a table) | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_deprecated_flag(cmd, "--json", "--format json", [a] { a->format = "json"; });
  // A bare --recompute (the flag of earlier versions) means auto.
  cmd->add_option("--recompute", a->recompute,
                  "none (default) | auto: a configuration over the memory limit is tried again "
                  "with --recompute full (activation recompute of every stage); bare: auto")
      ->expected(0, 1)
      ->default_str("auto")
      ->check(CLI::IsMember({"none", "auto"}))
      ->option_text("none|auto");
  cmd->add_flag("--no-progress", a->no_progress, "no progress bar on stderr");
  cmd->add_flag("--progress", a->progress,
                "a progress bar on stderr also when it is not a terminal (default: only on a TTY)");
  cmd->add_option("-o,--output", a->output, "output file (default: stdout)");
  cmd->callback([a] { run_search(*a); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_search);

}  // namespace pipewright::cli
