// `pipewright search --model M --cluster C --devices N [--memory-limit SIZE] [--global-batch G]`:
// enumerates pp x dp x v x m x schedule x data-parallel algorithm, simulates each and prints the
// best configurations (docs/simulator.md). Progress goes to stderr, results to stdout or -o.
#include <spdlog/spdlog.h>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <cctype>
#include <cmath>

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
#include "job_flags.hpp"
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
  std::string recompute;         // comma-separated modes; empty: none, selective, full
  std::vector<int> zero_stages;  // empty: 0, 1, 2, 3
  bool pareto = false;
  std::optional<double> gemm_fraction;
  std::vector<std::string> precisions = {"fp32"};
  std::string output = "-";
  std::vector<std::string> dp_algorithms;
  std::vector<std::int64_t> micro_batch_sizes;
  std::vector<int> tps;
  bool sequence_parallel = false;
  bool explain = false;
  int jobs = 0;  // 0: std::thread::hardware_concurrency()
};

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024 * 1024); }

std::string dp_text(const sim::SearchCandidate& c) {
  std::string dp = (c.dp > 1 ? sim::describe(c.dp_variant) : std::string("-")) +
                   (c.zero_stage > 0 ? " zero" + std::to_string(c.zero_stage) : "");
  if (c.precision != sched::Precision::kFp32)
    dp += " " + std::string(sched::to_string(c.precision));
  if (!c.synchronous()) dp += " [local-step]";
  return dp;
}

std::string row(int k, const sim::SearchCandidate& c, bool pareto) {
  char line[360];
  const std::string tp = std::to_string(c.tp) + (c.sequence_parallel ? "sp" : "");
  const std::string mfu =
      c.mfu > 0 ? std::to_string(static_cast<int>(std::lround(100 * c.mfu))) + "%" : "-";
  std::snprintf(line, sizeof line,
                "%4d%s %-22s %4d %4s %4d %3d %5d %4lld %-9s %-28s %11.3f %12.1f %7.1f%% %9.2f "
                "%8.1f %5s\n",
                k, pareto && c.pareto ? "*" : " ", sim::schedule_name(c).c_str(), c.pp, tp.c_str(),
                c.dp, c.v, c.microbatches, static_cast<long long>(c.micro_batch_size),
                sim::to_string(c.recompute).c_str(), dp_text(c).c_str(),
                static_cast<double>(c.step_ns) / 1e6, c.throughput_samples_per_s,
                100 * c.bubble_fraction, gib(c.peak_memory_bytes), c.model_tflops_per_gpu,
                mfu.c_str());
  return line;
}

std::string table(const sim::SearchResult& r, bool communication_free, bool explain, bool pareto) {
  std::ostringstream os;
  char line[360];
  if (communication_free)
    os << "note: no --cluster: communication is free (every link infinitely fast), so "
          "data-parallel algorithms, tensor parallelism and placements are not timed; pass "
          "--cluster FILE (e.g. examples/cluster-2x8-ib.json)\n";
  std::snprintf(line, sizeof line,
                "%4s  %-22s %4s %4s %4s %3s %5s %4s %-9s %-28s %11s %12s %8s %9s %8s %5s\n", "#",
                "schedule", "pp", "tp", "dp", "v", "m", "mbs", "recompute", "dp algorithm",
                "step ms", "samples/s", "bubble", "peak GiB", "TFLOP/s", "MFU");
  os << line;
  int k = 0;
  bool local = false;
  for (const auto& c : r.ranked) {
    os << row(++k, c, pareto);
    local = local || !c.synchronous();
  }
  if (pareto) {
    // The whole front, whatever --top kept: the fastest configuration for each memory budget.
    os << "Pareto front (throughput against peak memory; * marks its rows above): "
       << r.pareto.size() << " configurations, fastest first\n";
    int f = 0;
    for (const auto& c : r.pareto) os << row(++f, c, false);
  }
  if (local)
    os << "[local-step]: LocalSGD / SlowMo / DiLoCo / SGP train with another algorithm than "
          "synchronous SGD (replicas diverge between averages): faster steps, different "
          "convergence\n";
  if (r.best_synchronous) {
    os << "best synchronous: " << sim::describe(*r.best_synchronous) << "\n";
  } else {
    os << "best synchronous: none fits\n";
  }
  std::snprintf(line, sizeof line,
                "%lld configurations: %lld simulated (%lld more timed by an equal simulation, "
                "%lld provably outside the top rows and the Pareto front, not simulated), %lld "
                "over the memory limit (%lld by the closed-form bound, not built), %lld "
                "rejected (schedule, partitioner, plan or tp), %lld equivalent rows collapsed%s\n",
                static_cast<long long>(r.enumerated), static_cast<long long>(r.simulated),
                static_cast<long long>(r.cache_hits), static_cast<long long>(r.bounded),
                static_cast<long long>(r.dropped_memory), static_cast<long long>(r.pruned_memory),
                static_cast<long long>(r.rejected_shape), static_cast<long long>(r.collapsed),
                explain ? "" : " (--explain lists the rejections)");
  os << line;
  if (explain) {
    for (const auto& x : r.rejections)
      os << "rejected: " << x.configuration << ": " << x.reason << "\n";
  }
  return os.str();
}

nlohmann::json candidate_json(const sim::SearchCandidate& c) {
  return {{"schedule", sim::schedule_name(c)},
          {"pp", c.pp},
          {"tp", c.tp},
          {"sequence_parallel", c.sequence_parallel},
          {"dp", c.dp},
          {"stages_per_rank", c.v},
          {"microbatches", c.microbatches},
          {"micro_batch_size", c.micro_batch_size},
          {"dp_algorithm", std::string(sched::to_string(c.dp_variant.algorithm))},
          {"synchronous", c.synchronous()},
          {"bucket_cap_mb", c.dp_variant.bucket_cap_mb},
          {"localsgd_frequency", c.dp_variant.localsgd_frequency},
          {"slowmo_frequency", c.dp_variant.slowmo_frequency},
          {"sync_every", c.dp_variant.sync_every},
          {"fragments", c.dp_variant.fragments},
          {"step_ms", static_cast<double>(c.step_ns) / 1e6},
          {"throughput_samples_per_s", c.throughput_samples_per_s},
          {"bubble_fraction", c.bubble_fraction},
          {"peak_memory_bytes", c.peak_memory_bytes},
          {"recompute", sim::to_string(c.recompute)},
          {"pareto", c.pareto},
          {"precision", std::string(sched::to_string(c.precision))},
          {"zero_stage", c.zero_stage},
          {"model_tflops_per_gpu", c.model_tflops_per_gpu},
          {"mfu", c.mfu > 0 ? nlohmann::json(c.mfu) : nlohmann::json()},
          {"description", sim::describe(c)}};
}

std::string to_json(const sim::SearchResult& r, bool communication_free) {
  nlohmann::json j;
  j["format"] = "pipewright-search";
  j["version"] = 1;
  j["communication_free"] = communication_free;
  j["enumerated"] = r.enumerated;
  j["simulated"] = r.simulated;
  j["dropped_memory"] = r.dropped_memory;
  j["pruned_memory"] = r.pruned_memory;
  j["cache_hits"] = r.cache_hits;
  j["bounded"] = r.bounded;
  j["rejected_shape"] = r.rejected_shape;
  j["collapsed"] = r.collapsed;
  nlohmann::json ranked = nlohmann::json::array();
  for (const auto& c : r.ranked) ranked.push_back(candidate_json(c));
  j["ranked"] = std::move(ranked);
  nlohmann::json front = nlohmann::json::array();
  for (const auto& c : r.pareto) front.push_back(candidate_json(c));
  j["pareto_front"] = std::move(front);
  j["best_synchronous"] =
      r.best_synchronous ? candidate_json(*r.best_synchronous) : nlohmann::json();
  nlohmann::json rejections = nlohmann::json::array();
  for (const auto& x : r.rejections)
    rejections.push_back({{"configuration", x.configuration}, {"reason", x.reason}});
  j["rejections"] = std::move(rejections);
  return j.dump(2) + "\n";
}

void run_search(const SearchArgs& a) {
  const graph::Model model = graph::load_model(a.model_file);
  sim::Cluster cluster;
  if (!a.cluster_file.empty()) cluster = sim::load_cluster(a.cluster_file);
  apply_gemm_fraction(cluster, a.gemm_fraction);
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
  // Earlier versions' "auto" (recompute when over the limit) is every mode now.
  std::vector<std::string> modes;
  for (std::size_t start = 0; !a.recompute.empty() && start <= a.recompute.size();) {
    const std::size_t end = std::min(a.recompute.find(',', start), a.recompute.size());
    modes.push_back(a.recompute.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& r : modes) {
    if (r == "auto") {
      opt.recomputes = {sim::LayerRecompute::kNone, sim::LayerRecompute::kSelective,
                        sim::LayerRecompute::kFull};
      continue;
    }
    const auto mode = sim::parse_layer_recompute(r);
    if (std::find(opt.recomputes.begin(), opt.recomputes.end(), mode) == opt.recomputes.end())
      opt.recomputes.push_back(mode);
  }
  for (int z : a.zero_stages) {
    PW_CHECK(z >= 0 && z <= 3, ConfigError, "--zero-stages values must be 0, 1, 2 or 3, got " << z);
    opt.zero_stages.push_back(z);
  }
  for (const auto& p : a.precisions) {
    const sched::Precision precision = sched::parse_precision(p);
    PW_CHECK(
        std::find(opt.precisions.begin(), opt.precisions.end(), precision) == opt.precisions.end(),
        ConfigError, "--precision: " << p << " is listed twice");
    opt.precisions.push_back(precision);
  }
  std::vector<sched::DpAlgorithm> algorithms;
  for (const auto& name : a.dp_algorithms) {
    const auto alg = sched::parse_dp_algorithm(name);
    PW_CHECK(std::find(algorithms.begin(), algorithms.end(), alg) == algorithms.end(), ConfigError,
             "--dp-algorithms: " << name << " is listed twice");
    algorithms.push_back(alg);
  }
  if (!algorithms.empty()) opt.dp_variants = sim::dp_variants_for(algorithms);
  opt.micro_batch_sizes = a.micro_batch_sizes;
  for (int t : a.tps) opt.tps.push_back(t);
  opt.sequence_parallel = a.sequence_parallel;
  PW_CHECK(a.top_k >= 1, ConfigError, "--top must be >= 1, got " << a.top_k);
  opt.top_k = a.top_k;
  PW_CHECK(a.jobs >= 0, ConfigError, "--jobs must be >= 0, got " << a.jobs);
  opt.jobs = a.jobs;

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
  const bool free = a.cluster_file.empty();
  if (!json && result.ranked.empty()) {
    // Say why, with the reasons, before failing.
    std::string why = table(result, free, true, false);
    PW_CHECK(false, ConfigError,
             "no configuration fits: " << result.dropped_memory << " over the memory limit, "
                                       << result.rejected_shape << " rejected\n"
                                       << why);
  }
  write_output(a.output, json ? to_json(result, free) : table(result, free, a.explain, a.pareto));
}

void setup_search(CLI::App& app) {
  auto a = std::make_shared<SearchArgs>();
  auto* cmd = app.add_subcommand(
      "search",
      "Search pp x tp x dp x v x m x micro-batch size x schedule x DP algorithm x zero stage x "
      "recompute by simulation; rank by speed");
  cmd->add_option("--model", a->model_file, "model JSON (graph/)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--cluster", a->cluster_file, "cluster JSON (pipewright-cluster)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--devices,-n", a->devices, "devices to use (pp x tp x dp)")->required();
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
  cmd->add_option("--dp-algorithms", a->dp_algorithms,
                  "data-parallel algorithms to try (default ddp: synchronous training, with its "
                  "ZeRO stages, --zero-stages); localsgd, slowmo, diloco, sgp are "
                  "local-step algorithms, marked [local-step] in the table")
      ->delimiter(',');
  cmd->add_option("--micro-batch-sizes", a->micro_batch_sizes,
                  "samples per microbatch to try (the model's costs rescaled; default 1, 2, 4, "
                  "... up to max(16, the model's))")
      ->delimiter(',');
  cmd->add_option("--tp", a->tps,
                  "tensor-parallel sizes to try, e.g. 1,2,4,8 (a TP group inside a node; "
                  "default 1)")
      ->delimiter(',');
  cmd->add_flag("--sequence-parallel", a->sequence_parallel,
                "with tp > 1: Megatron's sequence parallelism (activations split over the TP "
                "group)");
  cmd->add_flag("--explain", a->explain,
                "list every rejected configuration and over-the-limit one with its reason");
  cmd->add_option("-k,--top", a->top_k, "rows to print")->capture_default_str();
  cmd->add_option("-j,--jobs", a->jobs,
                  "threads evaluating candidates (default 0: one per hardware thread); the "
                  "output is the same at every count")
      ->capture_default_str();
  cmd->add_option("-f,--format", a->format, "text (a table) | json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  add_deprecated_flag(cmd, "--json", "--format json", [a] { a->format = "json"; });
  cmd->add_option("--recompute", a->recompute,
                  "activation recompute modes to try, each a candidate: none, selective "
                  "(Korthikanti's: each transformer block redoes its attention core), full (every "
                  "stage keeps its inputs only); default all three (auto, or the bare flag: the "
                  "same)")
      ->expected(0, 1)
      ->default_str("auto")
      ->option_text("none,selective,full");
  cmd->add_option("--zero-stages", a->zero_stages,
                  "the ZeRO stages to try with DDP at dp > 1, each a candidate (default 0,1,2,3)")
      ->delimiter(',');
  cmd->add_option("--gemm-fraction", a->gemm_fraction,
                  "achieved fraction of the device's peak that GEMMs reach (default: the cluster "
                  "file's device; simulate's flag)");
  cmd->add_flag("--pareto", a->pareto,
                "also print the Pareto front of throughput against peak memory (every "
                "configuration no other beats in both), marking its rows with * (JSON: always, "
                "\"pareto_front\" and each row's \"pareto\")");
  cmd->add_flag("--no-progress", a->no_progress, "no progress bar on stderr");
  cmd->add_flag("--progress", a->progress,
                "a progress bar on stderr also when it is not a terminal (default: only on a TTY)");
  cmd->add_option("-o,--output", a->output, "output file (default: stdout)");
  cmd->callback([a] { run_search(*a); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_search);

}  // namespace pipewright::cli
