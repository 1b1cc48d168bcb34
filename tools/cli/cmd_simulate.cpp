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
#include "flags.hpp"
#include "job_flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/graph/render.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/compare.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/parallel_model.hpp"
#include "pipewright/sim/report.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::cli {
namespace {

struct SimulateArgs {
  sched::JobSpec job;  // the same flags as `pipewright run` (job_flags.hpp)
  std::string plan_file;
  int sampled_steps = 0;
  // Costs.
  sim::CostSources costs;  // the flags fill it; the model and its partition are added later
  std::string activation_bytes = "0", param_bytes = "0", output_bytes = "0";  // sizes
  std::vector<double> weight_grad_keeps;  // Note [Weight-gradient activation]
  std::optional<double> p2p_ms;
  // Cluster.
  std::string cluster_file;
  std::optional<double> gemm_fraction;  // overrides the cluster device's achieved_gemm_fraction
  std::string recv = "posted";          // --recv posted | blocking
  std::optional<std::int64_t> micro_batch_size;  // the deprecated --micro-batch-size
  // Outputs.
  std::string metrics;
  std::string trace;
  std::string timeline;
  std::string plan_out;
  std::string memory_svg;
  std::string output = "-";  // the text report
  int text_width = 0;
  bool memory_timeline = false;
  // `pipewright report`: the HTML page, and for predicted vs measured the executor's trace.
  bool report = false;
  std::string report_out;
  std::string measured_file;
  sim::CompareOptions compare;
};

std::string describe_plan(const sched::JobSpec& job, const sched::PlanShape& shape) {
  if (!job.plan_path.empty()) return job.plan_path;
  return shape.schedule + " p=" + std::to_string(shape.ranks) +
         " v=" + std::to_string(job.stages_per_rank) + " m=" + std::to_string(shape.microbatches) +
         (job.tp > 1 ? " tp=" + std::to_string(job.tp) + (job.sequence_parallel ? " sp" : "")
                     : std::string());
}

// `pipewright report`: the simulation (or, with --measured, the comparison that `compare` prints:
// Note [One prediction]) as one HTML page.
void write_report(const SimulateArgs& a, const std::string& description,
                  const sched::LoweredPlan& plan, const sched::CostTable& costs,
                  const sim::Cluster& cluster, sim::SimOptions opt,
                  const std::optional<sched::Trace>& measured, double model_flops_per_step,
                  int tp) {
  opt.record_actions = true;
  opt.record_memory_timeline = true;
  sim::HtmlReportInputs in;
  in.title = description;
  if (!measured) {
    sim::SimResult result = sim::simulate(plan, costs, cluster, opt);
    result.model_flops_per_step = model_flops_per_step;
    result.gpus_per_rank = tp;
    if (cluster.device) result.device_peak_tflops = cluster.device->peak_tflops;
    write_output(a.report_out, sim::html_report(result, in));
  } else {
    // As `compare`: --recv (default posted) says how the executor's receives waited (Note
    // [Receives wait at their consumer]: Gloo and MPI; blocking: NCCL, --no-prepost-receives).
    const auto got =
        sim::compare_sampled(plan, costs, cluster, opt, a.sampled_steps, *measured, a.compare);
    const sim::SimResult meas = sim::measured_median_step(*measured, got.report);
    in.compare = &got.report;
    in.measured = &meas;
    write_output(a.report_out, sim::html_report(got.predicted, in));
    std::cout << sim::to_text(got.report);
  }
  if (a.report_out != "-") spdlog::info("wrote {}", a.report_out);
}

// "precision bf16 (activations and p2p messages 16-bit; fp32 master weights, gradients and
// optimizer state); DP reduce fp32": what Note [Precision bytes] (sched/memory.hpp) models.
std::string describe_precision(const sched::JobSpec& job) {
  std::string out = "precision " + std::string(sched::to_string(job.precision));
  if (job.precision != sched::Precision::kFp32)
    out +=
        " (activations and p2p messages 16-bit; fp32 master weights, gradients and optimizer "
        "state; autocast weight copies)";
  if (job.dp > 1)
    out += "; DP reduce " + std::string(sched::to_string(job.reduce_dtype_or_default()));
  return out;
}

void run_simulate(const SimulateArgs& a) {
  sim::Cluster cluster;
  if (!a.cluster_file.empty()) cluster = sim::load_cluster(a.cluster_file);
  apply_gemm_fraction(cluster, a.gemm_fraction);
  ResolvedJob resolved = resolve_job(a.job, a.plan_file, &cluster);
  // With --tp each simulated rank is a TP group inside one node (sim/parallel_model.hpp).
  cluster = sim::tp_cluster(cluster, resolved.job.tp);
  const sched::JobSpec& job = resolved.job;
  const std::optional<graph::Model>& model = resolved.model;
  const std::optional<graph::Partition>& partition = resolved.partition;
  const sched::LoweredPlan& plan = resolved.plan;
  if (!a.plan_out.empty()) write_plan_out(a.plan_out, job, plan);

  std::optional<sched::Trace> measured;
  if (!a.measured_file.empty()) measured = sched::load_trace(a.measured_file);
  sim::CostSources sources = a.costs;
  sources.what_if.activation_bytes = parse_size(a.activation_bytes, "--activation-bytes", 0);
  sources.what_if.param_bytes = parse_size(a.param_bytes, "--param-bytes", 0);
  sources.what_if.output_bytes = parse_size(a.output_bytes, "--output-bytes", 0);
  sources.model = model ? &*model : nullptr;
  sources.partition = partition ? &*partition : nullptr;
  sources.precision = job.precision;
  // A report on a measured run may take its costs from the trace itself (as `compare` does).
  if (sources.given() == 0 && measured) {
    sources.table = sim::costs_from_trace(*measured, plan.shape.stages, a.compare);
    sources.table->precision = job.precision;  // measured by the run the flags describe
  }
  sched::CostTable costs = sim::stage_costs(sources, plan.shape);
  // Note [Weight-gradient activation]: the share given replaces any source's.
  sim::set_weight_grad_keeps(costs, a.weight_grad_keeps);

  sim::SimOptions opt = sim::sim_options(job);
  if (opt.micro_batch_size == 0 && model) opt.micro_batch_size = model->micro_batch_size;
  if (a.micro_batch_size) opt.micro_batch_size = *a.micro_batch_size;
  opt.blocking_recv = a.recv == "blocking";
  opt.p2p_override_ms = a.p2p_ms;
  opt.record_memory_timeline = a.memory_timeline || !a.trace.empty() || !a.memory_svg.empty();
  if (a.report) {
    write_report(a, describe_plan(job, plan.shape), plan, costs, cluster, opt, measured,
                 resolved.model_flops_per_step, job.tp);
    return;
  }

  sim::SimResult result = sim::simulate(plan, costs, cluster, opt);
  result.model_flops_per_step = resolved.model_flops_per_step;
  result.hardware_flops_per_step = resolved.hardware_flops_per_step;
  result.gpus_per_rank = job.tp;
  if (cluster.device) result.device_peak_tflops = cluster.device->peak_tflops;

  // Render everything before writing anything, so a failure leaves no partial set of outputs.
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!a.trace.empty())
    outputs.emplace_back(a.trace, sim::trace_json(result, describe_plan(job, plan.shape)));
  if (!a.timeline.empty()) outputs.emplace_back(a.timeline, sim::svg_timeline(result));
  if (!a.memory_svg.empty()) outputs.emplace_back(a.memory_svg, sim::svg_memory(result));
  if (!a.memory_timeline) {
    for (auto& r : result.per_rank) r.memory_timeline.clear();  // the metrics JSON's choice
  }
  if (!a.metrics.empty()) outputs.emplace_back(a.metrics, sim::metrics_json(result));
  for (const auto& [path, text] : outputs) {
    write_output(path, text);
    if (path != "-") spdlog::info("wrote {}", path);
  }
  // The text report goes to -o (stdout by default) unless the metrics JSON took stdout.
  if (a.output != "-" || a.metrics != "-") {
    std::string text;
    appendf(text, "%s: %d ranks x dp %d, %d stages, %d microbatches, %d step(s)\n",
            result.schedule.c_str(), result.ranks, result.dp, result.stages, result.microbatches,
            result.steps);
    appendf(text, "%s\n", describe_precision(job).c_str());
    if (job.tp > 1)
      appendf(text, "tensor parallel %d%s: each rank is a group of %d GPUs inside one node\n",
              job.tp, job.sequence_parallel ? " with sequence parallelism" : "", job.tp);
    appendf(text, "makespan %.3f ms, bubble %.2f%%", static_cast<double>(result.makespan_ns) / 1e6,
            100 * result.bubble_fraction());
    if (result.micro_batch_size > 0)
      appendf(text, ", throughput %.1f samples/s", result.throughput_samples_per_s());
    if (result.model_tflops_per_gpu() > 0)
      appendf(text, ", %.1f model TFLOP/s per GPU", result.model_tflops_per_gpu());
    if (result.mfu() > 0) appendf(text, ", MFU %.1f%%", 100 * result.mfu());
    appendf(text, "\n");
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
      appendf(text, "forward-only: batch latency %.3f ms, first microbatch latency %.3f ms",
              batch_ms, static_cast<double>(first) / 1e6);
      if (result.micro_batch_size > 0)
        appendf(text, ", throughput %.1f samples/s", result.throughput_samples_per_s());
      appendf(text, "\n");
    }
    if (result.dp > 1) {
      // Human units, and the exact bytes (scripts read them; --metrics has them too).
      appendf(text, "data-parallel (%s): %s/step per replica on the wire (%.0f B/step)\n",
              std::string(sched::to_string(job.data_parallel.algorithm)).c_str(),
              graph::human_bytes(static_cast<std::int64_t>(result.dp_wire_bytes_per_step)).c_str(),
              result.dp_wire_bytes_per_step);
    }
    if (a.sampled_steps > 0) {
      const double median = sim::median_step_ms(plan, costs, cluster, opt, a.sampled_steps);
      appendf(text, "median step over %d steps with sampled durations: %.3f ms\n", a.sampled_steps,
              median);
      // Note [Replica skew]: with replicas, a step lasts as long as the slowest one's.
      double step = median;
      if (opt.dp.replicas > 1) {
        const double skew = sim::replica_skew_ms(plan, costs, cluster, opt, a.sampled_steps);
        step += skew;
        appendf(text, "step of the slowest of %d replicas: %.3f ms (+%.3f ms)\n", opt.dp.replicas,
                step, skew);
      }
      // Note [Periodic syncs in compare]: LocalSGD, SlowMo and DiLoCo sync every few steps only.
      const std::int32_t period = opt.dp.replicas > 1 ? sim::dp_period_steps(opt.dp) : 1;
      if (period > 1) {
        appendf(text, "mean step over a period of %d steps with its syncs: %.3f ms\n", period,
                step + sim::periodic_sync_ms(plan, costs, cluster, opt));
      }
    }
    for (const auto& r : result.per_rank) {
      // Human units here; exact bytes in --metrics JSON.
      appendf(text, "  rank %d: busy %.3f ms, idle %.3f ms, peak memory %s%s\n", r.rank,
              static_cast<double>(r.busy_ns) / 1e6, static_cast<double>(r.idle_ns) / 1e6,
              graph::human_bytes(r.peak_memory_bytes).c_str(),
              r.exceeds_memory ? " (exceeds device memory)" : "");
    }
    if (a.text_width > 0) text += sim::text_timeline(result, a.text_width);
    write_output(a.output, text);
    if (a.output != "-") spdlog::info("wrote {}", a.output);
  }
}

// The flags of `simulate`, shared by `report` (which has -o and --measured instead of the
// simulate outputs).
void add_simulate_flags(CLI::App* cmd, const std::shared_ptr<SimulateArgs>& a) {
  cmd->add_option("plan", a->plan_file, "plan file (CSV or JSON); or generate with --schedule")
      ->check(CLI::ExistingFile);
  add_job_flags(cmd, a->job);
  // Old spellings of simulate's own plan flags (before `run`'s job flags, issue 19).
  add_deprecated_option(cmd, "-s", "--schedule", [a](const std::string& v) {
    a->job.schedule = sched::parse_schedule_kind(v);
  });
  add_removed_flag(cmd, "--reduce-grad",
                   "plans always carry REDUCE_GRAD now (and OPTIM), lowered as `run` lowers them");
  add_deprecated_option(
      cmd, "--micro-batch-size", "--batch-size (micro-batch size x --microbatches)",
      [a](const std::string& v) { a->micro_batch_size = parse_int_flag(v, "--micro-batch-size"); });
  const char* g = nullptr;
  g = "Costs (one source)";
  cmd->add_option("--forward-ms", a->costs.what_if.forward_ms,
                  "what-if: F per stage (one value or one per stage)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--backward-ms", a->costs.what_if.backward_ms,
                  "what-if: full backward B = I + W per stage")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--weight-ms", a->costs.what_if.weight_ms, "what-if: W part of B (I = B - W)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--activation-bytes", a->activation_bytes,
                  "what-if: activation memory kept per microbatch per stage (bytes or a size such "
                  "as 512KiB)")
      ->group(g);
  cmd->add_option("--weight-grad-keeps", a->weight_grad_keeps,
                  "share of a stage's activation W still needs after I (I frees the rest; one "
                  "value or one per stage; default 1, or the profile's)")
      ->delimiter(',')
      ->group(g);
  cmd->add_option("--param-bytes", a->param_bytes, "what-if: parameter memory per stage (size)")
      ->group(g);
  cmd->add_option("--output-bytes", a->output_bytes, "what-if: size of each message (size)")
      ->group(g);
  cmd->add_option("--profile", a->costs.profile_path, "executor profile (pipewright-profile JSON)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--p2p-ms", a->p2p_ms, "fixed time per point-to-point message (overrides all)")
      ->group(g);
  cmd->add_option("--compute-overhead-ms", a->costs.compute_overhead_ms,
                  "fixed overhead added to every F/B/I/W")
      ->group(g);
  g = "Cluster and training";
  cmd->add_option("--gemm-fraction", a->gemm_fraction,
                  "achieved fraction of the device's peak that GEMMs reach (the one number of the "
                  "roofline layer model; default: the cluster file's device)");
  cmd->add_option("--cluster", a->cluster_file, "cluster JSON (pipewright-cluster)")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--sampled-steps", a->sampled_steps,
                  "also print the median step time of N single steps whose durations are drawn "
                  "from the profile's measured distributions (docs/simulator.md)")
      ->group(g);
  add_recv_flags(cmd, a->recv, g,
                 "posted: RECV is posted early and compute runs on (torch's semantics); "
                 "blocking: RECV blocks compute until the data arrives (pipewright's executor)");
  if (a->report) {
    g = "Report";
    cmd->add_option("-o,--output", a->report_out, "the HTML page to write (- for stdout)")
        ->required()
        ->group(g);
    cmd->add_option("--measured", a->measured_file,
                    "trace of `pipewright run --trace`: predicted vs measured, as `compare` "
                    "(costs from --profile, or from the trace itself)")
        ->check(CLI::ExistingFile)
        ->group(g);
    cmd->add_option("--warmup-steps", a->compare.skip_steps,
                    "with --measured: measured steps to leave out at the start")
        ->capture_default_str()
        ->group(g);
    add_deprecated_option(cmd, "--skip-steps", "--warmup-steps", [a](const std::string& v) {
      a->compare.skip_steps = parse_int_flag(v, "--skip-steps");
    });
    return;
  }
  g = "Outputs";
  cmd->add_option("-o,--output", a->output, "the text report (default: stdout)")->group(g);
  cmd->add_option("--metrics", a->metrics, "metrics JSON file, or - for stdout")->group(g);
  cmd->add_option("--trace", a->trace, "Chrome/Perfetto trace JSON file")->group(g);
  cmd->add_option("--timeline", a->timeline, "SVG Gantt timeline file")->group(g);
  cmd->add_option("--memory-svg", a->memory_svg, "SVG chart of memory over time per rank")
      ->group(g);
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
}

void setup_simulate(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand(
      "simulate", "Simulate a plan: step time, bubbles, memory, communication (docs/simulator.md)");
  add_simulate_flags(cmd, a);
  cmd->callback([a] { run_simulate(*a); });
}

void setup_report(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  a->report = true;
  a->sampled_steps = 31;  // as `compare` (with --measured)
  auto* cmd = app.add_subcommand(
      "report",
      "One self-contained HTML page for a simulation, or with --measured for predicted vs "
      "measured (docs/rendering.md)");
  add_simulate_flags(cmd, a);
  cmd->callback([a] { run_simulate(*a); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_simulate);
PW_REGISTER_COMMAND(setup_report);

}  // namespace pipewright::cli
