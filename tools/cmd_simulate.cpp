// `pipewright simulate [PLAN] [job flags] [cost options] [--cluster C] [--metrics FILE|-]
// [--trace FILE] [--timeline FILE.svg] [--text-timeline] [--plan-out FILE]`: times a job's plan
// with the simulator (docs/simulator.md). The job flags are `pipewright run`'s (job_flags.hpp);
// the plan is built by sched::make_plan exactly as run builds it (a PLAN file takes its shape
// from the file; compute-only plans get REDUCE_GRAD and OPTIM).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "job_flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
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
  sched::JobSpec job;  // the same flags as `pipewright run` (job_flags.hpp)
  std::string plan_file;
  int sampled_steps = 0;
  // Costs.
  std::vector<double> forward_ms, backward_ms, weight_ms;
  std::int64_t activation_bytes = 0, param_bytes = 0, output_bytes = 0;
  std::string profile_file;
  std::optional<double> p2p_ms;
  std::optional<double> compute_overhead_ms;
  // Cluster.
  std::string cluster_file;
  bool blocking_recv = false;
  // Outputs.
  std::string metrics;
  std::string trace;
  std::string timeline;
  std::string plan_out;
  int text_width = 0;
  bool memory_timeline = false;
};

std::string describe_plan(const sched::JobSpec& job, const sched::PlanShape& shape) {
  if (!job.plan_path.empty()) return job.plan_path;
  return shape.schedule + " p=" + std::to_string(shape.ranks) +
         " v=" + std::to_string(job.stages_per_rank) + " m=" + std::to_string(shape.microbatches);
}

void run_simulate(const SimulateArgs& a) {
  sched::JobSpec job = a.job;
  PW_CHECK(a.plan_file.empty() || job.plan_path.empty(), ConfigError,
           "give the plan file once: as PLAN or as --plan");
  if (!a.plan_file.empty()) job.plan_path = a.plan_file;
  const int cost_sources = static_cast<int>(!a.forward_ms.empty() || !a.backward_ms.empty()) +
                           static_cast<int>(!job.model_path.empty()) +
                           static_cast<int>(!a.profile_file.empty());
  PW_CHECK(cost_sources == 1, ConfigError,
           "give exactly one cost source: --forward-ms/--backward-ms, --model [--partition], or "
           "--profile");
  PW_CHECK(job.partition_path.empty() || !job.model_path.empty(), ConfigError,
           "--partition needs --model");

  // A plan file gives the job its shape; then the model is partitioned into the plan's stages.
  std::optional<sched::AnyPlan> loaded;
  if (!job.plan_path.empty()) {
    loaded = sched::load_plan(job.plan_path);
    job = sched::with_plan_shape(job, sched::shape_of(*loaded));
  }
  sched::validate_job(job);
  std::optional<graph::Model> model;
  std::optional<graph::Partition> partition;
  if (!job.model_path.empty()) {
    model = graph::load_model(job.model_path);
    partition = sched::resolve_partition(job, *model);
  }
  const sched::LoweredPlan plan =
      sched::make_plan(job, partition ? &*partition : nullptr, loaded ? &*loaded : nullptr);
  loaded.reset();
  if (!a.plan_out.empty()) write_plan_out(a.plan_out, job, plan);

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
    // Per model stage: Chimera's replicas share their model stage's costs (sim::replica_costs).
    costs = sim::what_if_costs(w, plan.shape.model_stages());
  }
  if (a.compute_overhead_ms) costs.compute_overhead_ms = *a.compute_overhead_ms;

  sim::Cluster cluster;
  if (!a.cluster_file.empty()) cluster = sim::load_cluster(a.cluster_file);

  sim::SimOptions opt = sim::sim_options(job);
  if (opt.micro_batch_size == 0 && model) opt.micro_batch_size = model->micro_batch_size;
  opt.blocking_recv = a.blocking_recv;
  opt.p2p_override_ms = a.p2p_ms;
  opt.record_memory_timeline = a.memory_timeline;

  const sim::SimResult result = sim::simulate(plan, costs, cluster, opt);

  // Render everything before writing anything, so a failure leaves no partial set of outputs.
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!a.metrics.empty()) outputs.emplace_back(a.metrics, sim::metrics_json(result));
  if (!a.trace.empty())
    outputs.emplace_back(a.trace, sim::trace_json(result, describe_plan(job, plan.shape)));
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
    if (plan.shape.forward_only) {
      // Inference: how long one batch takes end to end, and when the first microbatch's output
      // leaves the last stage.
      std::int64_t first = 0;
      for (const auto& t : result.actions) {
        if (t.action.kind == sched::ActionKind::kForward && t.action.microbatch == 0 &&
            t.step == 0 && plan.shape.consumers(t.action.stage).empty()) {
          first = std::max(first, t.end_ns);
        }
      }
      const double batch_ms =
          static_cast<double>(result.step_end_ns.empty() ? result.makespan_ns
                                                         : result.step_end_ns.front()) /
          1e6;
      std::printf("forward-only: batch latency %.3f ms, first microbatch latency %.3f ms", batch_ms,
                  static_cast<double>(first) / 1e6);
      if (result.micro_batch_size > 0)
        std::printf(", throughput %.1f samples/s", result.throughput_samples_per_s());
      std::printf("\n");
    }
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
  add_job_flags(cmd, a->job);
  const char* g = nullptr;
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
  cmd->add_option("--sampled-steps", a->sampled_steps,
                  "also print the median step time of N single steps whose durations are drawn "
                  "from the profile's measured distributions (docs/simulator.md)");
  cmd->add_flag("--blocking-recv", a->blocking_recv,
                "RECV blocks compute until the data arrives (default: posted receives)")
      ->group(g);
  g = "Outputs";
  cmd->add_option("--metrics", a->metrics, "metrics JSON file, or - for stdout")->group(g);
  cmd->add_option("--trace", a->trace, "Chrome/Perfetto trace JSON file")->group(g);
  cmd->add_option("--timeline", a->timeline, "SVG Gantt timeline file")->group(g);
  cmd->add_option("--plan-out", a->plan_out,
                  "write the resolved job (every default filled) and its lowered plan as JSON "
                  "(the same file as `run --dry-run --plan-out` for the same job flags)")
      ->group(g);
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
