#include "pipewright/sched/job.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <variant>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/layout.hpp"
#include "pipewright/graph/model.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/stage_edges.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

bool is_chain(const std::vector<std::pair<int, int>>& deps, int stages) {
  if (static_cast<int>(deps.size()) != stages - 1) return false;
  for (int i = 0; i + 1 < stages; ++i) {
    if (deps[static_cast<std::size_t>(i)] != std::make_pair(i, i + 1)) return false;
  }
  return true;
}

// DiLoCo's options, with torchft's constraints on the fragment schedule (Note [DiLoCo step]).
void validate_diloco(const DataParallelSpec& c) {
  const bool diloco = c.algorithm == DpAlgorithm::kDiLoCo;
  const struct {
    bool set;
    const char* flag;
  } diloco_only[] = {
      {c.sync_every.has_value(), "--sync-every"},
      {c.outer_lr.has_value(), "--outer-lr"},
      {c.outer_momentum.has_value(), "--outer-momentum"},
      {c.outer_nesterov.has_value(), "--outer-nesterov"},
      {c.fragments.has_value(), "--fragments"},
      {c.sync_delay.has_value(), "--fragment-sync-delay"},
      {c.outer_dtype.has_value(), "--outer-dtype"},
  };
  for (const auto& o : diloco_only) {
    PW_CHECK(diloco || !o.set, ConfigError,
             o.flag << " is a DiLoCo option; it has no effect with --dp-algorithm "
                    << to_string(c.algorithm));
  }
  if (!diloco) return;
  const std::int64_t h = c.sync_every_or_default();
  PW_CHECK(h >= 1, ConfigError, "--sync-every must be >= 1, got " << h);
  const double lr = c.outer_lr_or_default();
  PW_CHECK(std::isfinite(lr) && lr > 0, ConfigError, "--outer-lr must be > 0, got " << lr);
  const double mu = c.outer_momentum_or_default();
  PW_CHECK(std::isfinite(mu) && mu >= 0 && mu < 1, ConfigError,
           "--outer-momentum must be in [0, 1), got " << mu);
  PW_CHECK(!(c.outer_nesterov.value_or(false) && mu == 0), ConfigError,
           "--outer-nesterov needs --outer-momentum > 0 (Nesterov momentum without momentum is "
           "plain SGD)");
  const int k = c.fragments_or_default();
  PW_CHECK(k >= 1, ConfigError, "--fragments must be >= 1, got " << k);
  PW_CHECK(k <= h && h % k == 0, ConfigError,
           "--fragments " << k << " must divide --sync-every " << h
                          << " (one fragment is synced every H / K inner steps)");
  const std::int64_t tau = c.sync_delay_or_default();
  PW_CHECK(tau >= 0 && tau < h / k, ConfigError,
           "--fragment-sync-delay must be in 0..H/K-1 = 0.."
               << h / k - 1 << ", got " << tau
               << " (a fragment's all-reduce must end "
                  "before the next one starts)");
}

void validate_data_parallel(const DataParallelSpec& c, int pp, int dp) {
  PW_CHECK(std::isfinite(c.bucket_cap_mb) && c.bucket_cap_mb > 0, ConfigError,
           "--bucket-cap-mb must be a positive number of MiB, got " << c.bucket_cap_mb);
  const bool averaging =
      c.algorithm == DpAlgorithm::kSlowMo || c.algorithm == DpAlgorithm::kLocalSgd;
  const bool slowmo = c.algorithm == DpAlgorithm::kSlowMo;
  const std::string algo(to_string(c.algorithm));
  // Options that only mean something for an algorithm that averages parameters.
  PW_CHECK(averaging || !c.localsgd_frequency, ConfigError,
           "--localsgd-frequency is a SlowMo/LocalSGD option; it has no effect with "
           "--dp-algorithm "
               << to_string(c.algorithm));
  PW_CHECK(averaging || !c.procs_per_node, ConfigError,
           "--procs-per-node is a SlowMo/LocalSGD option; it has no effect with --dp-algorithm "
               << to_string(c.algorithm));
  const struct {
    bool set;
    const char* flag;
  } slowmo_only[] = {
      {c.slowmo_frequency.has_value(), "--slowmo-frequency"},
      {c.slowmo_momentum.has_value(), "--slowmo-momentum"},
      {c.slowmo_lr.has_value(), "--slowmo-lr"},
      {c.slowmo_memory_efficient.has_value(), "--slowmo-memory-efficient"},
      {c.slowmo_num_shards.has_value(), "--slowmo-num-shards"},
  };
  for (const auto& o : slowmo_only) {
    PW_CHECK(slowmo || !o.set, ConfigError,
             o.flag << " is a SlowMo option; it has no effect with --dp-algorithm " << algo);
  }
  PW_CHECK(c.localsgd_frequency_or_default() >= 1, ConfigError,
           "--localsgd-frequency must be >= 1, got " << *c.localsgd_frequency);
  PW_CHECK(c.slowmo_frequency_or_default() >= 1, ConfigError,
           "--slowmo-frequency must be >= 1, got " << *c.slowmo_frequency);
  const double beta = c.slowmo_momentum_or_default();
  PW_CHECK(std::isfinite(beta) && beta >= 0 && beta < 1, ConfigError,
           "--slowmo-momentum must be in [0, 1), got " << beta);
  const double alpha = c.slowmo_lr_or_default();
  PW_CHECK(std::isfinite(alpha) && alpha > 0, ConfigError,
           "--slowmo-lr must be > 0, got " << alpha);
  const int shards = c.slowmo_num_shards_or_default(dp);
  PW_CHECK(shards >= 1 && shards <= dp, ConfigError,
           "--slowmo-num-shards must be in 1..dp = 1.." << dp << ", got " << shards);
  validate_diloco(c);
  PW_CHECK(slowmo || !c.slowmo_base, ConfigError,
           "--slowmo-base is a SlowMo option; it has no effect with --dp-algorithm " << algo);
  PW_CHECK(!c.slowmo_base || *c.slowmo_base == DpAlgorithm::kLocalSgd ||
               *c.slowmo_base == DpAlgorithm::kSgp,
           ConfigError, "--slowmo-base must be localsgd or sgp, got " << to_string(*c.slowmo_base));
  const bool gossip = c.algorithm == DpAlgorithm::kSgp ||
                      (slowmo && c.slowmo_base_or_default() == DpAlgorithm::kSgp);
  PW_CHECK(!gossip || dp >= 2, ConfigError,
           "SGP needs --dp >= 2 (gossip between replicas), got --dp " << dp);
  PW_CHECK(!gossip || c.procs_per_node_or_default() == 1, ConfigError,
           "--slowmo-base sgp with --procs-per-node > 1 is not supported (gossip runs between "
           "all replicas)");
  const int ppn = c.procs_per_node_or_default();
  PW_CHECK(ppn >= 1, ConfigError, "--procs-per-node must be >= 1, got " << ppn);
  if (ppn > 1) {
    PW_CHECK(ppn % pp == 0, ConfigError,
             "--procs-per-node " << ppn << " must be a multiple of --pp " << pp
                                 << " (each node holds whole pipeline replicas)");
    PW_CHECK(dp % (ppn / pp) == 0, ConfigError,
             "--procs-per-node " << ppn << " does not divide the world of pp x dp = " << pp << " x "
                                 << dp << " = " << pp * dp << " ranks into whole nodes");
  }
}

}  // namespace

DpAlgorithm parse_dp_algorithm(std::string_view name) {
  if (name == "ddp") return DpAlgorithm::kDdp;
  if (name == "slowmo") return DpAlgorithm::kSlowMo;
  if (name == "localsgd") return DpAlgorithm::kLocalSgd;
  if (name == "diloco") return DpAlgorithm::kDiLoCo;
  if (name == "sgp") return DpAlgorithm::kSgp;
  throw ConfigError("--dp-algorithm: unknown algorithm '" + std::string(name) +
                    "' (expected ddp, slowmo, localsgd, diloco or sgp)");
}

OuterDtype parse_outer_dtype(std::string_view name) {
  if (name == "fp32") return OuterDtype::kFp32;
  if (name == "bf16") return OuterDtype::kBf16;
  throw ConfigError("--outer-dtype must be fp32 or bf16, got '" + std::string(name) + "'");
}

std::string_view to_string(OuterDtype dtype) noexcept {
  return dtype == OuterDtype::kBf16 ? "bf16" : "fp32";
}

std::string_view to_string(DpAlgorithm algorithm) noexcept {
  switch (algorithm) {
    case DpAlgorithm::kDdp:
      return "ddp";
    case DpAlgorithm::kSlowMo:
      return "slowmo";
    case DpAlgorithm::kLocalSgd:
      return "localsgd";
    case DpAlgorithm::kDiLoCo:
      return "diloco";
    case DpAlgorithm::kSgp:
      return "sgp";
  }
  return "?";
}

Optimizer parse_optimizer(std::string_view name) {
  if (name == "sgd") return Optimizer::kSgd;
  if (name == "adam") return Optimizer::kAdam;
  if (name == "adamw") return Optimizer::kAdamW;
  throw ConfigError("--optimizer must be sgd, adam or adamw, got '" + std::string(name) + "'");
}

std::string_view to_string(Optimizer optimizer) noexcept {
  switch (optimizer) {
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kAdam:
      return "adam";
    case Optimizer::kAdamW:
      return "adamw";
  }
  return "?";
}

NanPolicy parse_nan_policy(std::string_view name) {
  if (name == "error") return NanPolicy::kError;
  if (name == "skip-step") return NanPolicy::kSkipStep;
  if (name == "warn") return NanPolicy::kWarn;
  throw ConfigError("--nan-policy must be error, skip-step or warn, got '" + std::string(name) +
                    "'");
}

std::string_view to_string(NanPolicy policy) noexcept {
  switch (policy) {
    case NanPolicy::kError:
      return "error";
    case NanPolicy::kSkipStep:
      return "skip-step";
    case NanPolicy::kWarn:
      return "warn";
  }
  return "?";
}

bool RecomputeSpec::recomputes(int model_stage) const noexcept {
  if (mode == RecomputeMode::kFull) return true;
  if (mode != RecomputeMode::kStages) return false;  // none, selective
  return std::binary_search(stages.begin(), stages.end(), model_stage);
}

RecomputeSpec parse_recompute(std::string_view text) {
  RecomputeSpec out;
  if (text == "none") return out;
  if (text == "full") {
    out.mode = RecomputeMode::kFull;
    return out;
  }
  if (text == "selective") {
    out.mode = RecomputeMode::kSelective;
    return out;
  }
  auto bad = [&]() {
    return ConfigError(
        "--recompute: '" + std::string(text) +
        "' is not none, selective, full or a comma-separated list of stage indices (e.g. "
        "0,2)");
  };
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    if (item.empty() || item.size() > 9) throw bad();
    int v = 0;
    for (char ch : item) {
      if (ch < '0' || ch > '9') throw bad();
      v = v * 10 + (ch - '0');
    }
    out.stages.push_back(v);
    start = end + 1;
  }
  std::sort(out.stages.begin(), out.stages.end());
  out.stages.erase(std::unique(out.stages.begin(), out.stages.end()), out.stages.end());
  out.mode = RecomputeMode::kStages;
  return out;
}

std::string to_string(const RecomputeSpec& r) {
  if (r.mode == RecomputeMode::kNone) return "none";
  if (r.mode == RecomputeMode::kFull) return "full";
  if (r.mode == RecomputeMode::kSelective) return "selective";
  std::string out;
  for (int s : r.stages) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

void validate_recompute(const RecomputeSpec& r, int stages) {
  if (r.mode != RecomputeMode::kStages) return;
  PW_CHECK(!r.stages.empty(), ConfigError, "--recompute: the stage list is empty");
  for (int s : r.stages) {
    PW_CHECK(s >= 0 && s < stages, ConfigError,
             "--recompute: stage " << s << " is out of range [0, " << stages
                                   << ") (--pp x --stages-per-rank)");
  }
}

void validate_job(const JobSpec& c) {
  PW_CHECK(c.pp >= 1, ConfigError, "--pp must be >= 1, got " << c.pp);
  PW_CHECK(c.dp >= 1, ConfigError, "--dp must be >= 1, got " << c.dp);
  // The simulator and the executor do work per rank: a tiny command line must not imply a
  // billion of them (issue 20, item 7; docs/reliability.md, "Input limits").
  constexpr std::int64_t kMaxRanks = std::int64_t{1} << 20;
  PW_CHECK(
      static_cast<std::int64_t>(c.pp) * c.dp <= kMaxRanks, ConfigError,
      "--pp " << c.pp << " x --dp " << c.dp << " is beyond the limit of " << kMaxRanks << " ranks");
  PW_CHECK(c.stages_per_rank >= 1, ConfigError,
           "--stages-per-rank must be >= 1, got " << c.stages_per_rank);
  PW_CHECK(c.microbatches >= 1, ConfigError, "--microbatches must be >= 1, got " << c.microbatches);
  PW_CHECK(c.batch_size >= 0, ConfigError, "--batch-size must be >= 1, got " << c.batch_size);
  PW_CHECK(
      c.batch_size % c.microbatches == 0, ConfigError,
      "--batch-size " << c.batch_size << " is not a multiple of --microbatches " << c.microbatches);
  PW_CHECK(c.steps >= 1, ConfigError, "--steps must be >= 1, got " << c.steps);
  PW_CHECK(c.partition_method != graph::PartitionMethod::kMemory, ConfigError,
           "--partition-method must be uniform or balanced, got 'memory' (partition with "
           "`pipewright partition --method memory` and pass --partition)");
  PW_CHECK(std::isfinite(c.lr) && c.lr > 0, ConfigError, "--lr must be > 0, got " << c.lr);
  PW_CHECK(std::isfinite(c.momentum) && c.momentum >= 0 && c.momentum < 1, ConfigError,
           "--momentum must be in [0, 1), got " << c.momentum);
  PW_CHECK(c.momentum == 0 || c.optimizer == Optimizer::kSgd, ConfigError,
           "--momentum applies to --optimizer sgd only");
  PW_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0, ConfigError,
           "--weight-decay must be >= 0, got " << c.weight_decay);
  validate_data_parallel(c.data_parallel, c.pp, c.dp);
  PW_CHECK(c.zero_stage >= 0 && c.zero_stage <= 3, ConfigError,
           "--zero-stage must be 0, 1, 2 or 3, got " << c.zero_stage);
  PW_CHECK(c.zero_stage == 0 || c.data_parallel.algorithm == DpAlgorithm::kDdp, ConfigError,
           "--zero-stage " << c.zero_stage << " shards the state of synchronous data parallelism; "
                           << "--dp-algorithm " << to_string(c.data_parallel.algorithm)
                           << " keeps a whole replica between its syncs (use --dp-algorithm ddp "
                              "or --zero-stage 0)");
  PW_CHECK(c.shard_placement == ShardPlacement::kFit || c.zero_stage == 3, ConfigError,
           "--shard-placement " << to_string(c.shard_placement)
                                << " places ZeRO-3's UNSHARD / RESHARD; it needs --zero-stage 3");
  PW_CHECK(c.tp >= 1, ConfigError, "--tp must be >= 1, got " << c.tp);
  PW_CHECK(!c.sequence_parallel || c.tp > 1, ConfigError,
           "--sequence-parallel splits activations over the tensor-parallel group; it needs --tp "
           "> 1");
  validate_recompute(c.recompute, c.stages());
  PW_CHECK(c.reduce_dtype_or_default() != Precision::kFp16, ConfigError,
           "--reduce-dtype must be fp32 or bf16, got fp16");
  PW_CHECK(std::isfinite(c.clip_grad_norm) && c.clip_grad_norm >= 0, ConfigError,
           "--clip-grad-norm must be >= 0 (0: no clipping), got " << c.clip_grad_norm);
  validate_lr_schedule(c.lr_schedule, c.lr, c.steps);
  PW_CHECK(!c.forward_only || c.recompute.mode == RecomputeMode::kNone, ConfigError,
           "--recompute has no effect with --forward-only (nothing is kept for a backward)");
  if (c.plan_path.empty() && is_v_shaped(c.schedule)) {
    const int v = required_stages_per_rank(c.schedule);
    PW_CHECK(c.stages_per_rank == v, ConfigError,
             "--schedule " << to_string(c.schedule) << " needs --stages-per-rank " << v << ", got "
                           << c.stages_per_rank
                           << (v == 2 ? " (V placement: rank r holds stages r and 2P-1-r)" : ""));
    PW_CHECK(c.schedule != ScheduleKind::kChimera || c.pp % 2 == 0, ConfigError,
             "--schedule Chimera needs an even --pp (two pipelines in opposite directions), got "
                 << c.pp);
    PW_CHECK(c.schedule != ScheduleKind::kDualPipeV || c.microbatches >= 2 * c.pp, ConfigError,
             "DualPipeV requires at least as many microbatches as stages, but got "
                 << c.microbatches << " microbatches and " << 2 * c.pp << " stages (--microbatches"
                 << " must be >= 2 x --pp)");
  }
}

graph::Partition resolve_partition(const JobSpec& job, const graph::Model& model) {
  const int stages = job.stages();
  PW_CHECK(job.layout.empty() || job.partition_path.empty(), ConfigError,
           "give the partition once: --layout or --partition");
  if (!job.layout.empty()) {
    // Issue 44: a Megatron layout's stages follow Megatron's rank rule (layout stage v * pp + r
    // on rank r, docs/interop.md); the V placement puts stage 2pp-1-r on rank r instead, so the
    // layout would not mean what it says. Refused rather than silently remapped.
    PW_CHECK(!is_v_shaped(job.schedule) || job.schedule == ScheduleKind::kChimera, ConfigError,
             "--layout with --schedule " << to_string(job.schedule)
                                         << ": a Megatron layout places stage v x pp + r on rank "
                                            "r, but "
                                         << to_string(job.schedule)
                                         << "'s V placement puts stages r and 2 x pp - 1 - r on "
                                            "rank r; give the partition with --partition instead");
    // Issue 44: the expansion is bounded by the model's size (graph::layout_limit).
    graph::Partition p = graph::layout_partition(
        model, graph::parse_megatron_layout(job.layout, "--layout", graph::layout_limit(model)),
        job.pp);
    PW_CHECK(p.num_stages() == stages, ConfigError,
             "--layout has " << p.num_stages() << " stages but --pp " << job.pp
                             << " x --stages-per-rank " << job.stages_per_rank << " = " << stages);
    return p;
  }
  if (!job.partition_path.empty()) {
    graph::Partition p = graph::load_partition(job.partition_path);
    graph::check_partition_matches(p, model, job.partition_path);
    PW_CHECK(p.num_stages() == stages, ConfigError,
             job.partition_path << " has " << p.num_stages() << " stages but --pp " << job.pp
                                << " x --stages-per-rank " << job.stages_per_rank << " = "
                                << stages);
    return p;
  }
  graph::PartitionOptions opts;
  opts.stages = stages;
  opts.method = job.partition_method;
  return graph::partition_model(model, opts);
}

LoweredPlan lower_for_run(AnyPlan plan) {
  if (is_lowered(plan)) {
    // A lowered plan file may leave out REDUCE_GRAD / OPTIM: each rank's missing ones go at the
    // end of its list (all REDUCE_GRADs, then all OPTIMs, in stage order), as lower() places
    // them, so the executor and the simulator never add actions of their own.
    LoweredPlan lowered = std::get<LoweredPlan>(std::move(plan));
    if (lowered.shape.forward_only) return lowered;  // no gradients: no REDUCE_GRAD / OPTIM
    for (int r = 0; r < lowered.shape.ranks; ++r) {
      auto& list = lowered.per_rank[static_cast<std::size_t>(r)];
      auto stages = lowered.shape.stages_of_rank(r);
      // Replicas all-reduce in model-stage order on every rank (Note [Stage replicas]).
      std::stable_sort(stages.begin(), stages.end(), [&](int x, int y) {
        return lowered.shape.model_stage(x) < lowered.shape.model_stage(y);
      });
      for (const ActionKind kind : {ActionKind::kReduceGrad, ActionKind::kOptimizerStep}) {
        for (const int s : stages) {
          const bool has = std::any_of(list.begin(), list.end(), [&](const Action& a) {
            return a.kind == kind && a.stage == s;
          });
          if (!has) list.push_back(Action::stage_only(s, kind));
        }
      }
    }
    return lowered;
  }
  LowerOptions options;
  options.reduce_grad = true;
  options.optimizer_step = true;
  return lower(std::get<ComputePlan>(plan), options);
}

JobSpec with_plan_shape(JobSpec job, const PlanShape& shape) {
  const std::string origin = job.plan_path.empty() ? std::string("plan") : job.plan_path;
  const int model_stages = shape.model_stages();
  PW_CHECK(shape.ranks >= 1 && model_stages % shape.ranks == 0, InvalidPlanError,
           origin << ": the plan has " << model_stages << " (model) stages on " << shape.ranks
                  << " ranks; a job runs pp x stages-per-rank stages");
  job.pp = shape.ranks;
  job.stages_per_rank = model_stages / shape.ranks;
  job.microbatches = shape.microbatches;
  job.forward_only = shape.forward_only;
  return job;
}

LoweredPlan make_plan(const JobSpec& job, const graph::Partition* partition,
                      const AnyPlan* loaded) {
  const int stages = job.stages();
  const std::string origin = job.plan_path.empty() ? std::string("generated plan") : job.plan_path;
  std::vector<std::pair<int, int>> deps;
  if (partition != nullptr) deps = partition->graph.stage_dependencies();
  LoweredPlan plan;
  if (job.plan_path.empty()) {
    ScheduleSpec spec;
    spec.kind = job.schedule;
    spec.ranks = job.pp;
    spec.microbatches = job.microbatches;
    spec.stages_per_rank = job.stages_per_rank;
    spec.forward_only = job.forward_only;
    if (partition != nullptr && !is_chain(deps, partition->num_stages())) {
      spec.stage_edges = stage_edges_from(partition->graph);
    }
    plan = lower_for_run(generate(spec));
  } else {
    plan = lower_for_run(loaded != nullptr ? *loaded : load_plan(job.plan_path));
  }
  if (job.effective_zero_stage() == 3 && !has_shard_actions(plan.per_rank)) {
    plan = place_shards(std::move(plan), job.shard_placement);  // Note [Where UNSHARD and ...]
  }
  const auto& shape = plan.shape;
  PW_CHECK(shape.ranks == job.pp, InvalidPlanError,
           origin << ": the plan has " << shape.ranks << " ranks but --pp is " << job.pp);
  // Plans with stage replicas (Chimera) run model_stages() model stages on more plan stages.
  const int model_stages = shape.model_stages();
  if (partition != nullptr) {
    PW_CHECK(model_stages == partition->num_stages(), InvalidPlanError,
             origin << ": the plan has " << model_stages << " stages but the model '"
                    << partition->model_name << "' is partitioned into " << partition->num_stages()
                    << " stages (--pp x --stages-per-rank)");
  }
  PW_CHECK(model_stages == stages, InvalidPlanError,
           origin << ": the plan has " << model_stages << " stages but --pp " << job.pp
                  << " x --stages-per-rank " << job.stages_per_rank << " = " << stages);
  PW_CHECK(shape.forward_only == job.forward_only, InvalidPlanError,
           origin << (shape.forward_only
                          ? ": the plan is forward-only (no backward); pass --forward-only"
                          : ": the plan trains (has backwards) but --forward-only is set"));
  PW_CHECK(shape.microbatches == job.microbatches, InvalidPlanError,
           origin << ": the plan has " << shape.microbatches
                  << " microbatches but --microbatches is " << job.microbatches);
  if (partition != nullptr) {
    // Every replica of model stage b reads from a replica of model stage a.
    const auto edges = shape.edges();
    for (const auto& dep : deps) {
      // Named copies: a lambda may not capture a structured binding before C++20 (clang).
      const int a = dep.first;
      const int b = dep.second;
      for (const std::int32_t pb : shape.replicas_of(b)) {
        const bool found = std::any_of(edges.begin(), edges.end(), [&](const StageEdge& e) {
          return e.to == pb && shape.model_stage(e.from) == a;
        });
        PW_CHECK(found, InvalidPlanError,
                 origin << ": stage " << b << " reads values of stage " << a
                        << " in the partition, but the plan has no edge " << a << " -> " << b
                        << (shape.has_replicas() ? " into plan stage " + std::to_string(pb) : ""));
      }
    }
  }
  check_valid(plan, origin);
  // The executor pre-posts each step's receives, so a send never waits for its receive to be
  // reached: a plan runs if it runs with buffered sends.
  const DeadlockReport report = dry_run(plan, Transport::kBuffered);
  PW_CHECK(report.ok, InvalidPlanError, origin << ": the plan deadlocks: " << report.message());
  return plan;
}

}  // namespace pipewright::sched
