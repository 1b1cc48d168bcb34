// `pipewright calibrate gemm --model M --cluster C <job flags> (--measured-step-ms T |
// --measured-tflops X) [-o cluster.json]`: fits the one number of the roofline layer model (Note
// [Roofline layer] in sim/src/costs/parallel_model.cpp), the cluster device's achieved-GEMM
// fraction, to one measured run: the fraction in (0, 1] at which `simulate` of the run the job
// flags describe takes the measured step time, or reaches the measured TFLOP/s per GPU (hardware
// FLOPs, recompute included: what Megatron-LM prints). Writes the cluster file with that
// fraction (docs/simulator.md, "Devices"). An offline command: the front end turns
// `calibrate gemm` into it (main.cpp), the rest of `calibrate` measures links with the executor.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "flags.hpp"
#include "job_flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/parallel_model.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::cli {
namespace {

struct CalibrateGemmArgs {
  sched::JobSpec job;
  std::string cluster_file;
  std::optional<double> step_ms;
  std::optional<double> tflops;
  std::string output = "-";
};

// What `simulate` predicts for the job at fraction f: the step (ms) and hardware TFLOP/s per GPU.
struct Prediction {
  double step_ms = 0;
  double tflops = 0;
};

Prediction predict(const CalibrateGemmArgs& a, const sim::Cluster& base, double f) {
  sim::Cluster cluster = base;
  cluster.device->achieved_gemm_fraction = f;
  const ResolvedJob r = resolve_job(a.job, "", &cluster);
  cluster = sim::tp_cluster(cluster, r.job.tp);
  sim::CostSources sources;
  sources.model = &*r.model;
  sources.partition = &*r.partition;
  sources.precision = r.job.precision;
  const sched::CostTable costs = sim::stage_costs(sources, r.plan.shape);
  sim::SimOptions opt = sim::sim_options(r.job);
  if (opt.micro_batch_size == 0) opt.micro_batch_size = r.model->micro_batch_size;
  opt.record_actions = false;
  sim::SimResult result = sim::simulate(r.plan, costs, cluster, opt);
  result.model_flops_per_step = r.model_flops_per_step;
  result.hardware_flops_per_step = r.hardware_flops_per_step;
  result.gpus_per_rank = r.job.tp;
  return {static_cast<double>(result.makespan_ns) / 1e6 / std::max(result.steps, 1),
          result.hardware_tflops_per_gpu()};
}

void run_calibrate_gemm(const CalibrateGemmArgs& a) {
  PW_CHECK(a.step_ms.has_value() != a.tflops.has_value(), ConfigError,
           "calibrate gemm: give the measured run once: --measured-step-ms or --measured-tflops");
  PW_CHECK(!a.job.model_path.empty(), ConfigError,
           "calibrate gemm: --model is required (the layers the roofline times)");
  sim::Cluster cluster = sim::load_cluster(a.cluster_file);
  PW_CHECK(cluster.device && cluster.device->peak_tflops > 0, ConfigError,
           a.cluster_file << ": calibrate gemm fits the device's achieved_gemm_fraction: the "
                             "cluster needs a \"device\" with peak_tflops (e.g. "
                             "examples/cluster-dgx-a100-80gb.json)");
  const double target = a.step_ms ? *a.step_ms : *a.tflops;
  PW_CHECK(std::isfinite(target) && target > 0, ConfigError,
           "calibrate gemm: the measured value must be > 0, got " << target);
  // Faster GEMMs shorten the step monotonically: bisection over (0, 1].
  const auto faster_than_measured = [&](double f) {
    const Prediction p = predict(a, cluster, f);
    PW_CHECK(a.step_ms || p.tflops > 0, ConfigError,
             "calibrate gemm: no TFLOP/s for this model (its FLOPs are unknown); use "
             "--measured-step-ms");
    return a.step_ms ? p.step_ms < *a.step_ms : p.tflops > *a.tflops;
  };
  PW_CHECK(!faster_than_measured(1e-3) && faster_than_measured(1.0), ConfigError,
           "calibrate gemm: the measured run is outside what a fraction in (0.001, 1] predicts "
           "(at 1 the prediction is "
               << (a.step_ms ? predict(a, cluster, 1.0).step_ms : predict(a, cluster, 1.0).tflops)
               << (a.step_ms ? " ms" : " TFLOP/s")
               << "): the run is slower than any GEMM speed explains, or faster than the peak");
  double lo = 1e-3, hi = 1.0;
  for (int k = 0; k < 40 && hi - lo > 1e-5; ++k) {
    const double mid = (lo + hi) / 2;
    (faster_than_measured(mid) ? hi : lo) = mid;
  }
  const double f = std::round((lo + hi) / 2 * 1e4) / 1e4;
  cluster.device->achieved_gemm_fraction = f;
  const Prediction p = predict(a, cluster, f);
  spdlog::info(
      "achieved-GEMM fraction {:.4f}: predicted step {:.3f} ms, {:.1f} TFLOP/s per GPU "
      "(measured: {})",
      f, p.step_ms, p.tflops,
      a.step_ms ? std::to_string(*a.step_ms) + " ms" : std::to_string(*a.tflops) + " TFLOP/s");
  write_output(a.output, sim::to_json(cluster));
}

void setup_calibrate_gemm(CLI::App& app) {
  auto a = std::make_shared<CalibrateGemmArgs>();
  auto* cmd = app.add_subcommand(
      "calibrate-gemm",
      "`calibrate gemm`: fit the device's achieved-GEMM fraction to one measured run");
  cmd->group("");  // spelled `pipewright calibrate gemm`
  add_job_flags(cmd, a->job);
  cmd->add_option("--cluster", a->cluster_file, "cluster JSON with a \"device\"")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--measured-step-ms", a->step_ms, "the measured run's step (iteration) time, ms");
  cmd->add_option("--measured-tflops", a->tflops,
                  "the measured run's TFLOP/s per GPU, hardware FLOPs (recompute counted, as "
                  "Megatron-LM prints them)");
  cmd->add_option("-o,--output", a->output,
                  "the cluster file with the fitted fraction (default: stdout)");
  cmd->callback([a] { run_calibrate_gemm(*a); });
}

}  // namespace

PW_REGISTER_COMMAND(setup_calibrate_gemm);

}  // namespace pipewright::cli
