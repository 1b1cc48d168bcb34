// Simulation (`pipewright simulate`): the same job resolution, cost sources (sim::stage_costs),
// cluster and options as tools/cli/cmd_simulate.cpp, returning the metrics JSON and per-rank
// timelines (the package turns them into a dict and numpy arrays).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/trace.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/parallel_model.hpp"
#include "pipewright/sim/report.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan.hpp"

namespace py = pybind11;

namespace pipewright::python {
namespace {

struct SimArgs {
  // The plan: a Plan, or `schedule` generated for (pp, stages_per_rank, microbatches).
  const Plan* plan = nullptr;
  std::string schedule = "1F1B";
  int pp = 1;
  int stages_per_rank = 1;
  int microbatches = 1;
  // Costs: what-if numbers, a model (and its partition, given or made here), or an executor
  // profile; stage_costs picks the one given, as for `pipewright simulate`.
  sim::CostSources costs;
  const graph::Partition* partition = nullptr;
  std::string partition_method = "balanced";
  std::optional<double> p2p_ms;
  // Cluster: a file, or JSON text (starts with '{'); empty: the default cluster.
  std::string cluster;
  // Training.
  int dp = 1;
  std::int64_t steps = 1;
  std::int64_t batch_size = 0;
  std::string optimizer = "sgd";
  double momentum = 0.0;
  std::string dp_algorithm = "ddp";
  double bucket_cap_mb = 25.0;
  bool blocking_recv = false;
  bool memory_timeline = false;
  bool svg_timeline = false;
};

graph::Partition job_partition(const sched::JobSpec& job, const graph::Model& model,
                               const graph::Partition* given) {
  if (given == nullptr) return sched::resolve_partition(job, model);
  graph::check_partition_matches(*given, model, "partition");
  PW_CHECK(
      given->num_stages() == job.stages(), ConfigError,
      "the partition has " << given->num_stages() << " stages but the plan has " << job.stages());
  return *given;
}

py::tuple simulate(const SimArgs& a) {
  sched::JobSpec job;
  job.schedule = sched::parse_schedule_kind(a.schedule);
  job.pp = a.pp;
  job.stages_per_rank = a.stages_per_rank;
  job.microbatches = a.microbatches;
  job.dp = a.dp;
  job.steps = a.steps;
  job.batch_size = a.batch_size;
  job.optimizer = sched::parse_optimizer(a.optimizer);
  job.momentum = a.momentum;
  job.data_parallel.algorithm = sched::parse_dp_algorithm(a.dp_algorithm);
  job.data_parallel.bucket_cap_mb = a.bucket_cap_mb;
  const auto method = graph::parse_partition_method(a.partition_method);
  PW_CHECK(method.has_value() && *method != graph::PartitionMethod::kMemory, ConfigError,
           "partition_method must be uniform or balanced, got '" << a.partition_method << "'");
  job.partition_method = *method;
  PW_CHECK(a.partition == nullptr || a.costs.model != nullptr, ConfigError,
           "partition needs model");
  if (a.plan != nullptr) {
    job.plan_path = "plan";  // names the plan in messages; make_plan uses `loaded`, reads nothing
    job = sched::with_plan_shape(job, sched::shape_of(a.plan->plan));
  }
  sched::validate_job(job);
  sim::Cluster cluster;
  if (!a.cluster.empty()) {
    cluster = a.cluster.front() == '{' ? sim::parse_cluster(a.cluster, "cluster")
                                       : sim::load_cluster(a.cluster);
  }
  // As `pipewright simulate` (tools/cli/job_flags.cpp, resolve_job): the model's FLOPs for MFU,
  // and with the cluster's device its layers timed op by op (Note [Roofline layer]).
  double model_flops = 0;
  std::optional<graph::Model> device_model;
  sim::CostSources sources = a.costs;
  if (a.costs.model != nullptr) {
    const graph::Model& m = *a.costs.model;
    model_flops = sim::model_flops_per_iteration(
        m, static_cast<double>(job.batch_size > 0 ? job.batch_size
                                                  : m.micro_batch_size * job.microbatches) *
               job.dp);
    if (cluster.device) {
      sim::ParallelModelSpec ps;
      ps.device = cluster.device;
      device_model = sim::parallelize_model(m, ps);
      sources.model = &*device_model;
    }
  }
  std::optional<graph::Partition> partition;
  if (sources.model != nullptr) partition = job_partition(job, *sources.model, a.partition);
  const sched::LoweredPlan plan = sched::make_plan(job, partition ? &*partition : nullptr,
                                                   a.plan != nullptr ? &a.plan->plan : nullptr);
  sources.partition = partition ? &*partition : nullptr;
  const sched::CostTable costs = sim::stage_costs(sources, plan.shape);
  // No precision argument here: a profile is simulated at the precision it was measured at.
  job.precision = costs.precision;
  sim::SimOptions opt = sim::sim_options(job);
  if (opt.micro_batch_size == 0 && a.costs.model != nullptr) {
    opt.micro_batch_size = a.costs.model->micro_batch_size;
  }
  opt.blocking_recv = a.blocking_recv;
  opt.p2p_override_ms = a.p2p_ms;
  opt.record_memory_timeline = a.memory_timeline;
  sim::SimResult result = sim::simulate(plan, costs, cluster, opt);
  result.model_flops_per_step = model_flops;
  result.hardware_flops_per_step = model_flops;  // no recompute here: what the model runs once
  if (cluster.device) result.device_peak_tflops = cluster.device->peak_tflops;

  // Per rank: columns start_ns, end_ns, step, stage, microbatch, name, kind, stream.
  py::list timelines;
  std::vector<std::vector<std::int64_t>> start(result.ranks), end(result.ranks), step(result.ranks),
      stage(result.ranks), mb(result.ranks);
  std::vector<std::vector<std::string>> name(result.ranks), kind(result.ranks),
      stream(result.ranks);
  for (const sim::TimedAction& t : result.actions) {
    const auto r = static_cast<std::size_t>(t.rank);
    if (r >= start.size()) continue;
    start[r].push_back(t.start_ns);
    end[r].push_back(t.end_ns);
    step[r].push_back(t.step);
    stage[r].push_back(t.action.stage);
    mb[r].push_back(t.action.microbatch);
    name[r].push_back(sim::action_name(t));
    kind[r].push_back(sim::action_category(t));
    stream[r].emplace_back(sched::to_string(t.stream));
  }
  for (std::size_t r = 0; r < start.size(); ++r) {
    py::dict d;
    d["start_ns"] = start[r];
    d["end_ns"] = end[r];
    d["step"] = step[r];
    d["stage"] = stage[r];
    d["microbatch"] = mb[r];
    d["action"] = name[r];
    d["kind"] = kind[r];
    d["stream"] = stream[r];
    timelines.append(d);
  }
  py::object svg = py::none();
  if (a.svg_timeline) svg = py::str(sim::svg_timeline(result));
  return py::make_tuple(sim::metrics_json(result), timelines, svg,
                        static_cast<double>(result.makespan_ns) / 1e6);
}

}  // namespace

void bind_sim(py::module_& m) {
  m.def(
      "_simulate",
      [](const Plan* plan, const std::string& schedule, int ranks, int stages_per_rank,
         int microbatches, std::vector<double> forward_ms, std::vector<double> backward_ms,
         std::vector<double> weight_ms, std::int64_t activation_bytes, std::int64_t param_bytes,
         std::int64_t output_bytes, const graph::Model* model, const graph::Partition* partition,
         std::string partition_method, std::string profile, std::optional<double> p2p_ms,
         std::optional<double> compute_overhead_ms, std::string cluster, int dp, std::int64_t steps,
         std::int64_t batch_size, std::string optimizer, double momentum, std::string dp_algorithm,
         double bucket_cap_mb, bool blocking_recv, bool memory_timeline, bool svg_timeline) {
        SimArgs a;
        a.plan = plan;
        a.schedule = schedule;
        a.pp = ranks;
        a.stages_per_rank = stages_per_rank;
        a.microbatches = microbatches;
        a.costs.what_if.forward_ms = std::move(forward_ms);
        a.costs.what_if.backward_ms = std::move(backward_ms);
        a.costs.what_if.weight_ms = std::move(weight_ms);
        a.costs.what_if.activation_bytes = activation_bytes;
        a.costs.what_if.param_bytes = param_bytes;
        a.costs.what_if.output_bytes = output_bytes;
        a.costs.model = model;
        a.partition = partition;
        a.partition_method = std::move(partition_method);
        a.costs.profile_path = std::move(profile);
        a.p2p_ms = p2p_ms;
        a.costs.compute_overhead_ms = compute_overhead_ms;
        a.cluster = std::move(cluster);
        a.dp = dp;
        a.steps = steps;
        a.batch_size = batch_size;
        a.optimizer = std::move(optimizer);
        a.momentum = momentum;
        a.dp_algorithm = std::move(dp_algorithm);
        a.bucket_cap_mb = bucket_cap_mb;
        a.blocking_recv = blocking_recv;
        a.memory_timeline = memory_timeline;
        a.svg_timeline = svg_timeline;
        return simulate(a);
      },
      "The simulator; use pipewright.simulate");
}

}  // namespace pipewright::python
