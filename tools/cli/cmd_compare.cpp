// `pipewright compare --plan P --measured TRACE [--profile F] [--cluster C]`: simulates the plan
// with the profile (or with replay costs taken from the trace itself) and lines the prediction
// up with the executor's measured trace (sim/compare.hpp).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "commands.hpp"
#include "flags.hpp"
#include "job_flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/trace.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/compare.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::cli {
namespace {

struct CompareArgs {
  sched::JobSpec job;  // the job that ran: --plan, and the flags that shape the prediction
  std::string measured_file;
  std::string profile_file;
  std::string cluster_file;
  std::string json_out;
  std::string svg_out;
  std::string output = "-";
  std::int32_t sampled_steps = 31;
  std::string recv = "posted";  // --recv: the executor's receives on CPU backends
  bool trace_replay = false;
  sim::CompareOptions options;
};

void run_compare(const CompareArgs& a) {
  PW_CHECK(!a.job.plan_path.empty(), ConfigError, "--plan FILE is required: the plan that ran");
  // The plan as `pipewright run` built it (sched::make_plan: with REDUCE_GRAD and OPTIM, so the
  // optimizer's measured time is predicted), its shape taken from the file.
  const sched::AnyPlan loaded = sched::load_plan(a.job.plan_path);
  sched::JobSpec given = a.job;
  resolve_job_flags(given);
  PW_CHECK(given.tp == 1 && !given.sequence_parallel, ConfigError,
           "--tp / --sequence-parallel: compare times a measured run, and runs execute --tp 1 "
           "(tensor parallelism is simulation only)");
  const sched::JobSpec job = sched::with_plan_shape(given, sched::shape_of(loaded));
  sched::validate_job(job);
  const sched::LoweredPlan plan = sched::make_plan(job, nullptr, &loaded);
  const std::string& plan_file = job.plan_path;
  const sched::Trace measured = sched::load_trace(a.measured_file);
  const sched::CostTable costs = a.profile_file.empty()
                                     ? sim::costs_from_trace(measured, plan.shape.stages, a.options)
                                     : sched::load_costs(a.profile_file);
  if (!a.profile_file.empty()) sched::check_profile_precision(costs, a.profile_file, job.precision);
  PW_CHECK(static_cast<std::int32_t>(costs.stages.size()) == plan.shape.stages, ConfigError,
           "plan/profile mismatch: " << plan_file << " has " << plan.shape.stages << " stages but "
                                     << a.profile_file << " has " << costs.stages.size());
  const sim::Cluster cluster =
      a.cluster_file.empty() ? sim::Cluster{} : sim::load_cluster(a.cluster_file);
  sim::SimOptions so = sim::sim_options(job);
  so.record_actions = true;
  // With Gloo and MPI the executor pre-posts a step's receives and each consumer waits for its
  // data (Note [Receives wait at their consumer]): posted receives, as torch's runtime. With
  // NCCL or --no-prepost-receives it waits for every receive of a p2p batch before its next
  // action (Note [p2p batches]): --recv blocking.
  so.blocking_recv = a.recv == "blocking";
  sim::SimResult predicted;
  sim::CompareReport report;
  if (a.trace_replay) {
    // Note [Trace-driven replay]: each measured step from its own compute durations.
    auto replay = sim::compare_trace_replay(plan, costs, cluster, so, measured, a.options);
    predicted = std::move(replay.predicted);
    report = std::move(replay.report);
  } else {
    // Note [One prediction] (sim/compare.hpp): with measured distributions (executor profiles)
    // the median of --sampled-steps steps with sampled durations (Note [Sampled durations]).
    auto sampled =
        sim::compare_sampled(plan, costs, cluster, so, a.sampled_steps, measured, a.options);
    predicted = std::move(sampled.predicted);
    report = std::move(sampled.report);
  }
  if (!a.svg_out.empty()) write_output(a.svg_out, sim::compare_svg(predicted, measured, report));
  if (!a.json_out.empty()) write_output(a.json_out, sim::to_json(report));
  // The text report goes to -o (stdout by default) unless the JSON took stdout.
  if (a.output != "-" || a.json_out != "-") write_output(a.output, sim::to_text(report));
}

void setup_compare(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand(
      "compare", "Compare a simulated plan with an executor's measured trace (step-time error)");
  // The job flags of `run` (job_flags.hpp): --plan is the plan that ran (required); the others
  // (--optimizer, --dp, --dp-algorithm, --steps...) shape the prediction as they shaped the run.
  add_job_flags(cmd, a->job);
  cmd->add_option("--measured", a->measured_file, "trace written by `pipewright run --trace`")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--profile", a->profile_file,
                  "costs from `run --profile` (default: replay costs from the trace itself)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--cluster", a->cluster_file, "cluster description (e.g. from calibrate)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--warmup-steps", a->options.skip_steps,
                  "measured steps to leave out at the start (as run's "
                  "--warmup-steps leaves them out of --profile)")
      ->capture_default_str();
  add_deprecated_option(cmd, "--skip-steps", "--warmup-steps", [a](const std::string& v) {
    a->options.skip_steps = parse_int_flag(v, "--skip-steps");
  });
  cmd->add_option("-k,--top", a->options.top_k, "how many largest-error actions to list")
      ->capture_default_str();
  cmd->add_option("--sampled-steps", a->sampled_steps,
                  "predict the step time as the median of N steps with durations drawn from the "
                  "profile's measured distributions (0: medians only)")
      ->capture_default_str();
  cmd->add_flag("--trace-replay", a->trace_replay,
                "trace-driven replay: simulate each measured step with its own measured compute "
                "durations (communication from the profile) and compare the median step "
                "(Note [Trace-driven replay]; overrides --sampled-steps)");
  add_recv_flags(cmd, a->recv, "Options",
                 "posted (default: the executor with Gloo or MPI, whose consumers wait for "
                 "pre-posted receives; torch's semantics) | blocking (the executor with NCCL or "
                 "--no-prepost-receives)");
  cmd->add_option("--metrics", a->json_out, "the report as JSON, exact numbers (- for stdout)");
  add_deprecated_option(cmd, "--json", "--metrics", [a](const std::string& v) { a->json_out = v; });
  cmd->add_option("--timeline", a->svg_out, "predicted and measured timelines in one SVG");
  add_deprecated_option(cmd, "--svg", "--timeline", [a](const std::string& v) { a->svg_out = v; });
  cmd->add_option("-o,--output", a->output, "the text report (default: stdout)");
  cmd->callback([a] { run_compare(*a); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_compare);

}  // namespace pipewright::cli
