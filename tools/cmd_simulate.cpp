// `pipewright simulate [PLAN] [cost options] [--cluster C] [--dp D] [--metrics FILE|-]
// [--trace FILE] [--timeline FILE.svg] [--text-timeline]`: times a plan with the simulator
// (docs/simulator.md). PLAN is a plan file (CSV or JSON, compute-only plans are lowered), or the
// plan is generated inline with --schedule/--ranks/--microbatches.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/report.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::cli {
namespace {

struct SimulateArgs {
  int sampled_steps = 0;
  std::string plan_file;
  // Inline generation.
  std::string schedule;
  int ranks = 0;
  int microbatches = 0;
  int stages_per_rank = 1;
  bool reduce_grad = false;
  // Costs.
  std::vector<double> forward_ms, backward_ms, weight_ms;
  std::int64_t activation_bytes = 0, param_bytes = 0, output_bytes = 0;
  std::string model_file, partition_file, profile_file;
  std::string partition_method = "balanced";
  std::optional<double> p2p_ms;
  std::optional<double> compute_overhead_ms;
  // Cluster and training.
  std::string cluster_file;
  int dp = 1;
  std::string dp_algorithm = "ddp";
  double bucket_cap_mb = 25.0;
  int localsgd_frequency = 1;
  int slowmo_frequency = 1;
  int steps = 1;
  std::string optimizer = "adam";
  std::int64_t micro_batch_size = 0;
  bool blocking_recv = false;
  // Outputs.
  std::string metrics;
  std::string trace;
  std::string timeline;
  int text_width = 0;
  bool memory_timeline = false;
};

// A compute-only plan file is lowered; with --reduce-grad as `pipewright run` lowers it (with
// REDUCE_GRAD and OPTIM, so a profile's optimizer time is charged).
sched::LoweredPlan plan_from_file(const std::string& path, bool reduce_grad) {
  sched::AnyPlan any = sched::load_plan(path);
  if (sched::is_lowered(any)) return std::get<sched::LoweredPlan>(std::move(any));
  return sched::lower(std::get<sched::ComputePlan>(any),
                      sched::LowerOptions{false, reduce_grad, reduce_grad});
}

std::string describe_plan(const SimulateArgs& a, const sched::PlanShape& shape) {
  if (!a.plan_file.empty()) return a.plan_file;
  return shape.schedule + " p=" + std::to_string(shape.ranks) +
         " v=" + std::to_string(a.stages_per_rank) + " m=" + std::to_string(shape.microbatches);
}

void run_simulate(const SimulateArgs& a) {
  const bool inline_plan = !a.schedule.empty();
  PW_CHECK(inline_plan != !a.plan_file.empty(), ConfigError,
           "give either a PLAN file or --schedule NAME --ranks P --microbatches M (not both)");
  const int cost_sources = static_cast<int>(!a.forward_ms.empty() || !a.backward_ms.empty()) +
                           static_cast<int>(!a.model_file.empty()) +
                           static_cast<int>(!a.profile_file.empty());
  PW_CHECK(cost_sources == 1, ConfigError,
           "give exactly one cost source: --forward-ms/--backward-ms, --model [--partition], or "
           "--profile");
  PW_CHECK(a.partition_file.empty() || !a.model_file.empty(), ConfigError,
           "--partition needs --model");

  // Model and partition first: an inline plan takes the partition's stage DAG.
  std::optional<graph::Model> model;
  std::optional<graph::Partition> partition;
  if (!a.model_file.empty()) {
    model = graph::load_model(a.model_file);
    if (!a.partition_file.empty()) {
      partition = graph::load_partition(a.partition_file);
      graph::check_partition_matches(*partition, *model, a.partition_file);
    }
  }

  sched::LoweredPlan plan;
  if (inline_plan) {
    sched::ScheduleSpec spec;
    spec.kind = sched::parse_schedule_kind(a.schedule);
    spec.ranks = a.ranks;
    spec.microbatches = a.microbatches;
    spec.stages_per_rank = a.stages_per_rank;
    PW_CHECK(a.ranks >= 1 && a.microbatches >= 1, ConfigError,
             "--schedule needs --ranks >= 1 and --microbatches >= 1");
    if (model && !partition) {
      auto opts = graph::PartitionOptions{};
      opts.stages = a.ranks * a.stages_per_rank;
      opts.method = *graph::parse_partition_method(a.partition_method);
      partition = graph::partition_model(*model, opts);
    }
    if (partition) {
      for (auto [from, to] : partition->graph.stage_dependencies()) {
        if (to != from + 1) {
          spec.stage_edges.clear();
          for (auto [f, t] : partition->graph.stage_dependencies())
            spec.stage_edges.push_back({f, t});
          break;
        }
      }
    }
    sched::LowerOptions lower_opts;
    lower_opts.reduce_grad = a.reduce_grad;
    lower_opts.optimizer_step = a.reduce_grad;
    plan = sched::lower(sched::generate(spec), lower_opts);
  } else {
    plan = plan_from_file(a.plan_file, a.reduce_grad);
    if (model && !partition) {
      auto opts = graph::PartitionOptions{};
      opts.stages = plan.shape.stages;
      opts.method = *graph::parse_partition_method(a.partition_method);
      partition = graph::partition_model(*model, opts);
    }
  }

  sched::CostTable costs;
  if (!a.profile_file.empty()) {
    costs = sched::load_costs(a.profile_file);
  } else if (model) {
    costs = sim::costs_from_partition(*model, *partition);
  } else {
    sim::WhatIfCosts w;
    w.forward_ms = a.forward_ms;
    w.backward_ms = a.backward_ms;
    w.weight_ms = a.weight_ms;
    w.activation_bytes = a.activation_bytes;
    w.param_bytes = a.param_bytes;
    w.output_bytes = a.output_bytes;
    costs = sim::what_if_costs(w, plan.shape.stages);
  }
  if (a.compute_overhead_ms) costs.compute_overhead_ms = *a.compute_overhead_ms;

  sim::Cluster cluster;
  if (!a.cluster_file.empty()) cluster = sim::load_cluster(a.cluster_file);

  sim::SimOptions opt;
  opt.dp.replicas = a.dp;
  opt.dp.algorithm = sim::parse_dp_algorithm(a.dp_algorithm);
  opt.dp.bucket_cap_mb = a.bucket_cap_mb;
  opt.dp.localsgd_frequency = a.localsgd_frequency;
  opt.dp.slowmo_frequency = a.slowmo_frequency;
  opt.steps = a.steps;
  opt.optimizer = sim::parse_optimizer(a.optimizer);
  opt.micro_batch_size = a.micro_batch_size > 0 ? a.micro_batch_size
                         : model                ? model->micro_batch_size
                                                : 0;
  opt.blocking_recv = a.blocking_recv;
  opt.p2p_override_ms = a.p2p_ms;
  opt.record_memory_timeline = a.memory_timeline;

  const sim::SimResult result = sim::simulate(plan, costs, cluster, opt);

  // Render everything before writing anything, so a failure leaves no partial set of outputs.
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!a.metrics.empty()) outputs.emplace_back(a.metrics, sim::metrics_json(result));
  if (!a.trace.empty())
    outputs.emplace_back(a.trace, sim::trace_json(result, describe_plan(a, plan.shape)));
  if (!a.timeline.empty()) outputs.emplace_back(a.timeline, sim::svg_timeline(result));
  for (const auto& [path, text] : outputs) {
    write_output(path, text);
    if (path != "-") spdlog::info("wrote {}", path);
  }
  if (a.metrics != "-") {
    std::printf("%s: %d ranks x dp %d, %d stages, %d microbatches, %d step(s)\n",
                result.schedule.c_str(), result.ranks, result.dp, result.stages,
                result.microbatches, result.steps);
    std::printf("makespan %.3f ms, bubble %.2f%%", static_cast<double>(result.makespan_ns) / 1e6,
                100 * result.bubble_fraction());
    if (result.micro_batch_size > 0)
      std::printf(", throughput %.1f samples/s", result.throughput_samples_per_s());
    std::printf("\n");
    if (a.sampled_steps > 0) {
      std::printf("median step over %d steps with sampled durations: %.3f ms\n", a.sampled_steps,
                  sim::median_step_ms(plan, costs, cluster, opt, a.sampled_steps));
    }
    for (const auto& r : result.per_rank) {
      std::printf("  rank %d: busy %.3f ms, idle %.3f ms, peak memory %lld B%s\n", r.rank,
                  static_cast<double>(r.busy_ns) / 1e6, static_cast<double>(r.idle_ns) / 1e6,
                  static_cast<long long>(r.peak_memory_bytes),
                  r.exceeds_memory ? " (exceeds device memory)" : "");
    }
    if (a.text_width > 0) std::printf("%s", sim::text_timeline(result, a.text_width).c_str());
    std::fflush(stdout);
  }
}

void setup_simulate(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand(
      "simulate", "Simulate a plan: step time, bubbles, memory, communication (docs/simulator.md)");
  cmd->add_option("plan", a->plan_file, "plan file (CSV or JSON); or generate with --schedule")
      ->check(CLI::ExistingFile);
  auto* g = "Inline plan";
  cmd->add_option("--schedule,-s", a->schedule, "generate: schedule name (e.g. 1F1B)")->group(g);
  cmd->add_option("--ranks,-p", a->ranks, "generate: pipeline ranks P")->group(g);
  cmd->add_option("--microbatches,-m", a->microbatches, "generate: microbatches M")->group(g);
  cmd->add_option("--stages-per-rank,-v", a->stages_per_rank, "generate: stages per rank V")
      ->capture_default_str()
      ->group(g);
  cmd->add_flag("--reduce-grad", a->reduce_grad,
                "lower as `pipewright run` does: REDUCE_GRAD after each stage's last backward "
                "(blocks on DDP there) and OPTIM per stage at the end of each rank")
      ->group(g);
  g = "Costs (one source)";
  cmd->add_option("--forward-ms", a->forward_ms,
                  "what-if: F per stage (one value or one per stage)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--backward-ms", a->backward_ms, "what-if: full backward B = I + W per stage")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--weight-ms", a->weight_ms, "what-if: W part of B (I = B - W)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--activation-bytes", a->activation_bytes,
                  "what-if: activation bytes kept per microbatch per stage")
      ->group(g);
  cmd->add_option("--param-bytes", a->param_bytes, "what-if: parameter bytes per stage")->group(g);
  cmd->add_option("--output-bytes", a->output_bytes, "what-if: bytes sent per message")->group(g);
  cmd->add_option("--model", a->model_file, "model JSON (graph/); costs from its partition")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--partition", a->partition_file,
                  "partition JSON for --model (default: partition on the fly)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--partition-method", a->partition_method,
                  "on-the-fly partitioner: uniform | balanced")
      ->check(CLI::IsMember({"uniform", "balanced"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--profile", a->profile_file, "executor profile (pipewright-profile JSON)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--p2p-ms", a->p2p_ms, "fixed time per point-to-point message (overrides all)")
      ->group(g);
  cmd->add_option("--compute-overhead-ms", a->compute_overhead_ms,
                  "fixed overhead added to every F/B/I/W")
      ->group(g);
  g = "Cluster and training";
  cmd->add_option("--cluster", a->cluster_file, "cluster JSON (pipewright-cluster)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--dp", a->dp, "data-parallel replicas")->capture_default_str()->group(g);
  cmd->add_option("--dp-algorithm", a->dp_algorithm, "ddp | localsgd | slowmo")
      ->check(CLI::IsMember({"ddp", "localsgd", "slowmo"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--bucket-cap-mb", a->bucket_cap_mb, "DDP bucket cap (MiB)")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--localsgd-frequency", a->localsgd_frequency,
                  "LocalSGD/SlowMo: average parameters every N steps")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--slowmo-frequency", a->slowmo_frequency,
                  "SlowMo: slow-momentum reduce+broadcast every N steps")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--sampled-steps", a->sampled_steps,
                  "also print the median step time of N single steps whose durations are drawn "
                  "from the profile's measured distributions (docs/simulator.md)");
  cmd->add_option("--steps", a->steps, "consecutive training steps to simulate")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--optimizer", a->optimizer, "sgd | sgd-momentum | adam | adamw (memory)")
      ->check(CLI::IsMember({"sgd", "sgd-momentum", "adam", "adamw"}))
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--micro-batch-size", a->micro_batch_size,
                  "samples per microbatch (throughput; default: the model's)")
      ->group(g);
  cmd->add_flag("--blocking-recv", a->blocking_recv,
                "RECV blocks compute until the data arrives (default: posted receives)")
      ->group(g);
  g = "Outputs";
  cmd->add_option("--metrics", a->metrics, "metrics JSON file, or - for stdout")->group(g);
  cmd->add_option("--trace", a->trace, "Chrome/Perfetto trace JSON file")->group(g);
  cmd->add_option("--timeline", a->timeline, "SVG Gantt timeline file")->group(g);
  cmd->add_option("--text-timeline", a->text_width,
                  "print a text timeline of this many columns (e.g. 100)")
      ->group(g);
  cmd->add_flag("--memory-timeline", a->memory_timeline,
                "include each rank's memory timeline in the metrics JSON")
      ->group(g);
  cmd->callback([a] { run_simulate(*a); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_simulate);

}  // namespace pipewright::cli
