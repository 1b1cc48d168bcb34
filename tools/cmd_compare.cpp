// `pipewright compare --plan P --measured TRACE [--profile F] [--cluster C]`: simulates the plan
// with the profile (or with replay costs taken from the trace itself) and lines the prediction
// up with the executor's measured trace (sim/compare.hpp).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "commands.hpp"
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
  std::string plan_file;
  std::string measured_file;
  std::string profile_file;
  std::string cluster_file;
  std::string json_out;
  std::string svg_out;
  std::int32_t sampled_steps = 31;
  bool posted_recv = false;
  bool trace_replay = false;
  sim::CompareOptions options;
};

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void run_compare(const CompareArgs& a) {
  sched::AnyPlan any = sched::load_plan(a.plan_file);
  const sched::LoweredPlan plan =
      sched::is_lowered(any)
          ? std::get<sched::LoweredPlan>(std::move(any))
          // as `pipewright run` lowers it: with REDUCE_GRAD and
          // OPTIM, so the optimizer's measured time is predicted
          : sched::lower(std::get<sched::ComputePlan>(any), sched::LowerOptions{false, true, true});
  const sched::Trace measured = sched::load_trace(a.measured_file);
  const sched::CostTable costs = a.profile_file.empty()
                                     ? sim::costs_from_trace(measured, plan.shape.stages, a.options)
                                     : sched::load_costs(a.profile_file);
  PW_CHECK(static_cast<std::int32_t>(costs.stages.size()) == plan.shape.stages, ConfigError,
           "plan/profile mismatch: " << a.plan_file << " has " << plan.shape.stages
                                     << " stages but " << a.profile_file << " has "
                                     << costs.stages.size());
  const sim::Cluster cluster =
      a.cluster_file.empty() ? sim::Cluster{} : sim::load_cluster(a.cluster_file);
  sim::SimOptions so;
  so.record_actions = true;
  // pipewright's executor waits for every receive of a p2p batch before its next action
  // (Note [p2p batches]), i.e. blocking receives; --posted-recv simulates torch's semantics.
  so.blocking_recv = !a.posted_recv;
  sim::SimResult predicted;
  sim::CompareReport report;
  if (a.trace_replay) {
    // Note [Trace-driven replay]: each measured step from its own compute durations; the
    // per-rank and per-action lines and the SVG show the replay of the step whose measured time
    // is closest to the median.
    const std::int32_t cores =
        cluster.cores_per_node > 0 ? cluster.cores_per_node : costs.cores_per_node;
    std::vector<std::int32_t> node_of_rank;
    for (std::int32_t r = 0; r < plan.shape.ranks; ++r)
      node_of_rank.push_back(cluster.node_of(cluster.global_rank(r, 0, plan.shape.ranks, 1)));
    const sim::TraceReplay replay = sim::replay_from_trace(
        measured, plan.shape.stages, plan.shape.microbatches, cores, node_of_rank, a.options);
    sim::SimOptions step_options = so;
    step_options.steps = 1;
    std::vector<double> per_step;
    for (std::size_t k = 0; k < replay.steps.size(); ++k) {
      step_options.replay_durations_ns = replay.durations_ns[k];
      step_options.record_actions = false;
      const sim::SimResult r = sim::simulate(plan, costs, cluster, step_options);
      per_step.push_back(
          static_cast<double>(r.step_end_ns.empty() ? r.makespan_ns : r.step_end_ns[0]) / 1e6);
    }
    const double measured_median = median_of(replay.measured_step_ms);
    std::size_t chosen = 0;
    for (std::size_t k = 1; k < replay.steps.size(); ++k) {
      if (std::fabs(replay.measured_step_ms[k] - measured_median) <
          std::fabs(replay.measured_step_ms[chosen] - measured_median))
        chosen = k;
    }
    step_options.record_actions = true;
    step_options.replay_durations_ns = replay.durations_ns.at(chosen);
    predicted = sim::simulate(plan, costs, cluster, step_options);
    report = sim::compare(predicted, measured, &costs, a.options);
    report.step_numbers = replay.steps;
    report.per_step_measured_ms = replay.measured_step_ms;
    report.per_step_predicted_ms = per_step;
    const double step_ms = median_of(per_step);
    for (auto& rc : report.per_rank) rc.predicted_idle_ms += step_ms - report.predicted_step_ms;
    report.predicted_step_ms = step_ms;
    report.prediction = "trace";
  } else {
    predicted = sim::simulate(plan, costs, cluster, so);
    report = sim::compare(predicted, measured, &costs, a.options);
    // With measured distributions (executor profiles), predict the step time as the median over
    // steps with sampled durations (Note [Sampled durations]); per-action lines stay at medians.
    if (a.sampled_steps > 0) {
      const double step_ms = sim::median_step_ms(plan, costs, cluster, so, a.sampled_steps);
      for (auto& rc : report.per_rank) rc.predicted_idle_ms += step_ms - report.predicted_step_ms;
      report.predicted_step_ms = step_ms;
      report.prediction = "sampled";
    }
  }
  if (!a.svg_out.empty()) write_output(a.svg_out, sim::compare_svg(predicted, measured, report));
  if (!a.json_out.empty()) write_output(a.json_out, sim::to_json(report));
  if (a.json_out != "-") std::cout << sim::to_text(report);
}

void setup_compare(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand(
      "compare", "Compare a simulated plan with an executor's measured trace (step-time error)");
  cmd->add_option("--plan", a->plan_file, "the plan that ran (CSV or JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--measured", a->measured_file, "trace written by `pipewright run --trace`")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--profile", a->profile_file,
                  "costs from `run --profile` (default: replay costs from the trace itself)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--cluster", a->cluster_file, "cluster description (e.g. from calibrate)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--skip-steps", a->options.skip_steps, "warm-up steps to ignore")
      ->capture_default_str();
  cmd->add_option("--top", a->options.top_k, "how many largest-error actions to list")
      ->capture_default_str();
  cmd->add_option("--sampled-steps", a->sampled_steps,
                  "predict the step time as the median of N steps with durations drawn from the "
                  "profile's measured distributions (0: medians only)")
      ->capture_default_str();
  cmd->add_flag("--trace-replay", a->trace_replay,
                "trace-driven replay: simulate each measured step with its own measured compute "
                "durations (communication from the profile) and compare the median step "
                "(Note [Trace-driven replay]; overrides --sampled-steps)");
  cmd->add_flag("--posted-recv", a->posted_recv,
                "simulate posted (non-blocking) receives instead of the executor's blocking ones");
  cmd->add_option("--json", a->json_out, "write the report as JSON (- for stdout)");
  cmd->add_option("--svg", a->svg_out, "predicted and measured timelines in one SVG");
  cmd->callback([a] { run_compare(*a); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_compare);

}  // namespace pipewright::cli
