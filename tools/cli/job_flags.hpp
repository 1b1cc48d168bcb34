// The job's flags (sched::JobSpec): one definition, used by `pipewright run` (and so by the keys
// of its --config file, which run_config.cpp parses through the same options) and `pipewright
// simulate`, so both say a job the same way and resolve it to the same defaults
// (docs/architecture.md, "One job, one plan").
#pragma once

#include <optional>
#include <string>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sim/cluster.hpp"

namespace CLI {
class App;
}

namespace pipewright::cli {

// Adds --model --partition --partition-method --plan --schedule --pp (-p; --ranks deprecated) --dp
// --stages-per-rank (-v) --microbatches (-m) --batch-size --steps --optimizer --lr --momentum
// --weight-decay and the data-parallel flags (--dp-algorithm --bucket-cap-mb --no-ddp-overlap
// --localsgd-frequency --slowmo-* --procs-per-node), filling `job`, which must outlive `cmd`.
// Values that do not parse (an unknown schedule, optimizer...) throw ConfigError naming the flag.
// Sets job.stages_per_rank to 0 ("not given") until resolve_job_flags() runs.
void add_job_flags(CLI::App* cmd, sched::JobSpec& job);

// Fills what the flags left to the schedule, after parsing (and the --config file) and before
// validate_job: --stages-per-rank not given is the schedule's own V (2 for ZBVZeroBubble and
// DualPipeV, 1 for GPipe, 1F1B, Chimera and for a --plan file, whose shape is checked later), and
// a ConfigError for the looped schedules, whose V has no default.
void resolve_job_flags(sched::JobSpec& job);

// A job of the offline commands (simulate, export-chakra) resolved to its plan: the flags
// (resolve_job_flags), a plan file (PLAN or --plan, once) giving the shape, the model and its
// partition when --model is given, and sched::make_plan's plan, as `run` builds it.
// With --tp > 1 the model is the one GPU of a tensor-parallel group runs
// (sim::parallelize_model over `cluster`'s link inside a node; free without a cluster), and
// model_flops_per_step the whole model's FLOPs of one step over all replicas (MFU's numerator).
struct ResolvedJob {
  sched::JobSpec job;
  std::optional<graph::Model> model;
  double model_flops_per_step = 0;
  double hardware_flops_per_step = 0;  // + what recompute re-runs (SimResult's)
  std::optional<graph::Partition> partition;
  sched::LoweredPlan plan;
};
// `--gemm-fraction F` (simulate, search): the cluster device's achieved-GEMM fraction (Note
// [Roofline layer]); ConfigError without a device or outside (0, 1]. Nothing when unset.
void apply_gemm_fraction(sim::Cluster& cluster, const std::optional<double>& fraction);
[[nodiscard]] ResolvedJob resolve_job(sched::JobSpec job, const std::string& plan_file,
                                      const sim::Cluster* cluster = nullptr);

// Writes the --plan-out document of `job` and `plan` to `path` (write_output).
void write_plan_out(const std::string& path, const sched::JobSpec& job,
                    const sched::LoweredPlan& plan);

}  // namespace pipewright::cli
