#include "job_flags.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <utility>

#include "commands.hpp"
#include "flags.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/layout.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/parallel_model.hpp"

namespace pipewright::cli {

namespace {

// SlowMo's SGP base, DiLoCo / Streaming DiLoCo (issue 24), into the spec's std::optional fields.
void add_diloco_flags(CLI::App* cmd, sched::DataParallelSpec& d, const char* g) {
  cmd->add_option_function<std::string>(
         "--slowmo-base",
         [&d](const std::string& s) { d.slowmo_base = sched::parse_dp_algorithm(s); },
         "SlowMo: base algorithm, localsgd (average every --localsgd-frequency steps, default) | "
         "sgp (gossip every step)")
      ->group(g);
  cmd->add_option_function<std::int64_t>(
         "--sync-every", [&d](std::int64_t v) { d.sync_every = v; },
         "DiLoCo: inner steps H between outer steps of each fragment (default 100)")
      ->group(g);
  cmd->add_option_function<double>(
         "--outer-lr", [&d](double v) { d.outer_lr = v; },
         "DiLoCo: outer SGD learning rate (default 0.7)")
      ->group(g);
  cmd->add_option_function<double>(
         "--outer-momentum", [&d](double v) { d.outer_momentum = v; },
         "DiLoCo: outer SGD momentum (default 0.9)")
      ->group(g);
  cmd->add_flag_function(
         "--outer-nesterov", [&d](std::int64_t) { d.outer_nesterov = true; },
         "DiLoCo: Nesterov outer momentum (default when --outer-momentum > 0)")
      ->group(g);
  cmd->add_flag_function(
         "--no-outer-nesterov", [&d](std::int64_t) { d.outer_nesterov = false; },
         "DiLoCo: plain (heavy-ball) outer momentum")
      ->group(g);
  cmd->add_option_function<int>(
         "--fragments", [&d](int v) { d.fragments = v; },
         "Streaming DiLoCo: K fragments of the parameters, fragment i synced after steps "
         "(i + 1) H / K + m H (default 1)")
      ->group(g);
  cmd->add_option_function<std::int64_t>(
         "--fragment-sync-delay", [&d](std::int64_t v) { d.sync_delay = v; },
         "Streaming DiLoCo: inner steps tau a fragment's all-reduce overlaps before it is "
         "applied (default 1 with --fragments > 1, else 0)")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--outer-dtype",
         [&d](const std::string& s) { d.outer_dtype = sched::parse_outer_dtype(s); },
         "DiLoCo: outer all-reduce element type, fp32 | bf16 (bf16 on the wire, summed in fp32)")
      ->group(g);
}

// The training recipe (issue 33; pipewright/sched/training.hpp).
void add_recipe_flags(CLI::App* cmd, sched::JobSpec& job) {
  const auto* g = "Training recipe (docs/executor.md)";
  cmd->add_option_function<std::string>(
         "--precision", [&job](const std::string& s) { job.precision = sched::parse_precision(s); },
         "fp32 | bf16 (autocast, fp32 master weights, bf16 between stages) | fp16 (the same with "
         "dynamic loss scaling)")
      ->default_str("fp32")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--reduce-dtype",
         [&job](const std::string& s) {
           job.reduce_dtype = sched::parse_precision(s, "--reduce-dtype");
         },
         "data-parallel gradient reduction: fp32 | bf16 (bf16 on the wire, summed in fp32)")
      ->default_str("fp32")
      ->group(g);
  cmd->add_option("--clip-grad-norm", job.clip_grad_norm,
                  "clip gradients to this global L2 norm over every stage (0: no clipping)")
      ->capture_default_str()
      ->group(g);
  auto& lr = job.lr_schedule;
  cmd->add_option("--lr-warmup-steps", lr.warmup_steps,
                  "linear warm-up of the learning rate from 0 over N steps (Megatron)")
      ->capture_default_str()
      ->group(g);
  cmd->add_option_function<std::string>(
         "--lr-decay-style",
         [&lr](const std::string& s) { lr.decay_style = sched::parse_lr_decay_style(s); },
         "constant | linear | cosine: decay from --lr to --lr-min by --lr-decay-steps")
      ->default_str("constant")
      ->group(g);
  cmd->add_option("--lr-decay-steps", lr.decay_steps,
                  "steps over which the learning rate decays, warm-up included (default --steps)")
      ->group(g);
  cmd->add_option("--lr-min", lr.min_lr, "learning rate at the end of the decay")
      ->capture_default_str()
      ->group(g);
}

}  // namespace

void add_job_flags(CLI::App* cmd, sched::JobSpec& job) {
  auto* g = "Job (the same flags for run and simulate)";
  cmd->add_option("--model", job.model_path, "model JSON (graph/)")->group(g);
  cmd->add_option("--partition", job.partition_path,
                  "partition JSON of the model (default: partition it with --partition-method)")
      ->group(g);
  cmd->add_option("--layout", job.layout,
                  "layout of Megatron-Core, e.g. \"Et*3|(tt|)*29,m|L\": the partition (and V = "
                  "its stages / --pp; docs/interop.md)")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--partition-method",
         [&job](const std::string& s) {
           const auto m = graph::parse_partition_method(s);
           PW_CHECK(m.has_value() && *m != graph::PartitionMethod::kMemory, ConfigError,
                    "--partition-method must be uniform or balanced, got '" << s << "'");
           job.partition_method = *m;
         },
         "uniform | balanced")
      ->default_str(std::string(graph::to_string(job.partition_method)))
      ->group(g);
  cmd->add_option("--plan", job.plan_path,
                  "plan file (torch's CSV or pipewright JSON) instead of --schedule")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--schedule",
         [&job](const std::string& s) { job.schedule = sched::parse_schedule_kind(s); },
         "GPipe | 1F1B | Interleaved1F1B | LoopedBFS | InterleavedZeroBubble | ZBVZeroBubble "
         "| DualPipeV | Chimera | ZBH2 (schedule Auto writes a plan file for --plan)")
      ->default_str(std::string(sched::to_string(job.schedule)))
      ->group(g);
  cmd->add_option("-p,--pp", job.pp, "pipeline ranks P")->capture_default_str()->group(g);
  add_deprecated_option(cmd, "--ranks", "--pp",
                        [&job](const std::string& v) { job.pp = parse_int_flag(v, "--ranks"); });
  cmd->add_option("--dp", job.dp, "data-parallel replicas")->capture_default_str()->group(g);
  // 0 until given: resolve_job_flags() fills the schedule's own V or, for the looped schedules,
  // asks for it ("Interleaved1F1B" alone used to mean V = 1 silently).
  job.stages_per_rank = 0;
  cmd->add_option("-v,--stages-per-rank", job.stages_per_rank,
                  "stages per pipeline rank V (stage s on rank s mod P); required by the looped "
                  "schedules Interleaved1F1B, LoopedBFS, InterleavedZeroBubble; default 2 for "
                  "ZBVZeroBubble, DualPipeV, else 1")
      ->group(g);
  cmd->add_option("-m,--microbatches", job.microbatches, "microbatches M per step")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--batch-size", job.batch_size,
                  "samples per step per replica, a multiple of --microbatches")
      ->group(g);
  cmd->add_option("--steps", job.steps, "training steps")->capture_default_str()->group(g);
  cmd->add_option_function<std::string>(
         "--optimizer", [&job](const std::string& s) { job.optimizer = sched::parse_optimizer(s); },
         "sgd | adam | adamw")
      ->default_str(std::string(sched::to_string(job.optimizer)))
      ->group(g);
  cmd->add_option("--lr", job.lr, "learning rate")->capture_default_str()->group(g);
  cmd->add_option("--momentum", job.momentum, "SGD momentum")->capture_default_str()->group(g);
  cmd->add_option("--weight-decay", job.weight_decay, "weight decay")
      ->capture_default_str()
      ->group(g);
  cmd->add_option_function<std::string>(
         "--nan-policy",
         [&job](const std::string& s) { job.nan_policy = sched::parse_nan_policy(s); },
         "when the loss or a gradient norm is NaN/Inf: error (stop, exit 1, naming step, rank "
         "and stage) | skip-step (skip that optimizer step) | warn (train on)")
      ->default_str(std::string(sched::to_string(job.nan_policy)))
      ->group(g);
  cmd->add_flag("--forward-only", job.forward_only,
                "inference / evaluation: the schedule's forward-only plan, no gradients, no "
                "optimizer")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--recompute", [&job](const std::string& s) { job.recompute = sched::parse_recompute(s); },
         "activation recompute (Megatron's --recompute-granularity): none | selective "
         "(Korthikanti's: each transformer block redoes its attention core in the backward; "
         "simulation only) | full | a stage list such as 0,2 (recomputed stages keep only their "
         "inputs and redo the forward in the backward)")
      ->default_str("none")
      ->group(g);

  add_recipe_flags(cmd, job);

  g = "Tensor parallelism (simulation only; docs/simulator.md)";
  cmd->add_option("--tp", job.tp,
                  "tensor-parallel size: each pipeline rank is a group of TP GPUs inside one node "
                  "running Megatron's column/row-parallel layers (simulate, report, export-chakra; "
                  "run takes 1 only)")
      ->capture_default_str()
      ->group(g);
  cmd->add_flag("--sequence-parallel", job.sequence_parallel,
                "with --tp > 1: Megatron's sequence parallelism (norms, dropout and their "
                "activations split over the TP group; reduce-scatter + all-gather)")
      ->group(g);

  // Options whose presence matters (SlowMo options are rejected with --dp-algorithm ddp) go
  // through callbacks into the spec's std::optional fields.
  g = "Data parallelism (docs/data-parallel.md)";
  auto& d = job.data_parallel;
  cmd->add_option_function<std::string>(
         "--dp-algorithm",
         [&d](const std::string& s) { d.algorithm = sched::parse_dp_algorithm(s); },
         "ddp | slowmo | localsgd | diloco | sgp")
      ->default_str(std::string(sched::to_string(d.algorithm)))
      ->group(g);
  cmd->add_option("--zero-stage", job.zero_stage,
                  "sharded data parallelism over each stage's replicas: 0 DDP | 1 optimizer state "
                  "(Megatron's distributed optimizer) | 2 also gradients | 3 also parameters "
                  "(FSDP); ddp only")
      ->capture_default_str()
      ->group(g);
  cmd->add_option_function<std::string>(
         "--shard-placement",
         [&job](const std::string& s) { job.shard_placement = sched::parse_shard_placement(s); },
         "--zero-stage 3: where UNSHARD / RESHARD go: fit (default: the fewest all-gathers "
         "whose peak fits; without a memory limit as step) | step (one all-gather per stage "
         "and step) | compute (one per compute action) | torch (torch's look-ahead of 3)")
      ->default_str("fit")
      ->group(g);
  cmd->add_option("--bucket-cap-mb", d.bucket_cap_mb, "DDP bucket cap, MiB (fractions allowed)")
      ->capture_default_str()
      ->group(g);
  cmd->add_flag_function(
         "--no-ddp-overlap", [&d](std::int64_t) { d.ddp_overlap = false; },
         "DDP: start every all-reduce at REDUCE_GRAD (ablation of the overlap)")
      ->group(g);
  cmd->add_option_function<std::int64_t>(
         "--localsgd-frequency", [&d](std::int64_t v) { d.localsgd_frequency = v; },
         "SlowMo/LocalSGD: average parameters every N steps (default 3)")
      ->group(g);
  cmd->add_option_function<std::int64_t>(
         "--slowmo-frequency", [&d](std::int64_t v) { d.slowmo_frequency = v; },
         "SlowMo: slow momentum step every N steps (default 48)")
      ->group(g);
  cmd->add_option_function<double>(
         "--slowmo-momentum", [&d](double v) { d.slowmo_momentum = v; },
         "SlowMo: slow momentum beta (default 0.5)")
      ->group(g);
  cmd->add_option_function<double>(
         "--slowmo-lr", [&d](double v) { d.slowmo_lr = v; },
         "SlowMo: slow learning rate alpha (default 1)")
      ->group(g);
  cmd->add_flag_function(
         "--slowmo-memory-efficient", [&d](std::int64_t) { d.slowmo_memory_efficient = true; },
         "SlowMo: shard the slow buffers over --slowmo-num-shards replicas (default)")
      ->group(g);
  cmd->add_flag_function(
         "--no-slowmo-memory-efficient", [&d](std::int64_t) { d.slowmo_memory_efficient = false; },
         "SlowMo: every replica keeps full slow buffers")
      ->group(g);
  cmd->add_option_function<int>(
         "--slowmo-num-shards", [&d](int v) { d.slowmo_num_shards = v; },
         "SlowMo: replicas holding shards of the slow buffers (default min(32, dp))")
      ->group(g);
  cmd->add_option_function<int>(
         "--procs-per-node", [&d](int v) { d.procs_per_node = v; },
         "SlowMo/LocalSGD: ranks per node (gradients all-reduced within a node)")
      ->group(g);
  add_diloco_flags(cmd, d, g);
}

void resolve_job_flags(sched::JobSpec& job) {
  PW_CHECK(job.layout.empty() || !job.model_path.empty(), ConfigError,
           "--layout needs --model (the model whose layers it places)");
  if (job.zero_stage > 0 && job.dp == 1) {
    // Nothing to shard over one replica: a note, and the job runs as DDP (issue 43).
    std::fprintf(stderr, "note: --zero-stage %d with --dp 1: nothing to shard, runs as 0\n",
                 job.zero_stage);
    job.zero_stage = 0;
    job.shard_placement = sched::ShardPlacement::kFit;  // nothing to place either
  }
  if (job.stages_per_rank == 0 && !job.layout.empty()) {
    // Megatron's V: the layout's stages over pp (layout_partition checks that pp divides them).
    const auto stages = static_cast<int>(graph::parse_megatron_layout(job.layout).stages.size());
    if (job.pp >= 1 && stages % job.pp == 0) job.stages_per_rank = stages / job.pp;
  }
  if (job.stages_per_rank != 0) return;
  const int v = sched::required_stages_per_rank(job.schedule);
  PW_CHECK(v != 0 || !job.plan_path.empty(), ConfigError,
           "--schedule " << sched::to_string(job.schedule)
                         << " needs --stages-per-rank V: the stages each rank holds (e.g. -v 2; "
                            "with V = 1 it is a plain 1F1B-style order)");
  job.stages_per_rank = job.plan_path.empty() ? v : 1;
}

ResolvedJob resolve_job(sched::JobSpec job, const std::string& plan_file,
                        const sim::Cluster* cluster) {
  PW_CHECK(plan_file.empty() || job.plan_path.empty(), ConfigError,
           "give the plan file once: as PLAN or as --plan");
  if (!plan_file.empty()) job.plan_path = plan_file;
  resolve_job_flags(job);
  PW_CHECK(job.partition_path.empty() || !job.model_path.empty(), ConfigError,
           "--partition needs --model");
  // A plan file gives the job its shape; then the model is partitioned into the plan's stages.
  std::optional<sched::AnyPlan> loaded;
  if (!job.plan_path.empty()) {
    loaded = sched::load_plan(job.plan_path);
    job = sched::with_plan_shape(job, sched::shape_of(*loaded));
  }
  sched::validate_job(job);
  ResolvedJob out;
  PW_CHECK(job.tp == 1 || !job.model_path.empty(), ConfigError,
           "--tp " << job.tp
                   << " splits a model's layers over the tensor-parallel group: it needs --model "
                      "(a profile or what-if costs describe one GPU already)");
  PW_CHECK(!job.recompute.selective() || !job.model_path.empty(), ConfigError,
           "--recompute selective recomputes the attention core of each transformer block: it "
           "needs --model (a profile's or what-if costs have no blocks to split)");
  if (!job.model_path.empty()) {
    out.model = graph::load_model(job.model_path);
    const double samples =
        static_cast<double>(job.batch_size > 0 ? job.batch_size
                                               : out.model->micro_batch_size * job.microbatches) *
        job.dp;
    out.model_flops_per_step = sim::model_flops_per_iteration(*out.model, samples);
    // Hardware FLOPs: full recompute of every stage, or selective, re-runs blocks' forwards (a
    // stage list: below, once the partition is known).
    out.hardware_flops_per_step =
        out.model_flops_per_step +
        (out.model_flops_per_step > 0 && job.recompute.mode == sched::RecomputeMode::kFull
             ? sim::recompute_flops_per_iteration(*out.model, samples, sim::LayerRecompute::kFull)
         : out.model_flops_per_step > 0 && job.recompute.selective()
             ? sim::recompute_flops_per_iteration(*out.model, samples,
                                                  sim::LayerRecompute::kSelective)
             : 0.0);
    if (job.tp > 1 || job.recompute.selective() || (cluster && cluster->device)) {
      // Note [Tensor parallelism as costs] (sim/parallel_model.hpp): the model one GPU of the
      // group runs; its TP collectives on the cluster's link inside a node; with the cluster's
      // device, its transformer layers timed op by op (Note [Roofline layer]).
      sim::ParallelModelSpec ps;
      if (cluster) ps.device = cluster->device;
      ps.tp = job.tp;
      ps.sequence_parallel = job.sequence_parallel;
      if (job.recompute.selective()) ps.recompute = sim::LayerRecompute::kSelective;
      ps.element_bytes = job.precision == sched::Precision::kFp32 ? 4 : 2;
      if (cluster) ps.tp_link = cluster->collective_link(false);
      out.model = sim::parallelize_model(*out.model, ps);
    }
    out.partition = sched::resolve_partition(job, *out.model);
    if (job.recompute.mode == sched::RecomputeMode::kStages && out.model_flops_per_step > 0) {
      // The listed stages' blocks re-run their forwards.
      graph::Model recomputed = *out.model;
      recomputed.nodes.clear();
      for (const auto& st : out.partition->graph.stages) {
        if (!job.recompute.recomputes(st.index)) continue;
        for (auto n : st.nodes)
          recomputed.nodes.push_back(out.model->nodes[static_cast<std::size_t>(n)]);
      }
      out.hardware_flops_per_step +=
          sim::recompute_flops_per_iteration(recomputed, samples, sim::LayerRecompute::kFull);
    }
  }
  out.plan =
      sched::make_plan(job, out.partition ? &*out.partition : nullptr, loaded ? &*loaded : nullptr);
  out.job = std::move(job);
  return out;
}

void apply_gemm_fraction(sim::Cluster& cluster, const std::optional<double>& fraction) {
  if (!fraction) return;
  PW_CHECK(cluster.device, ConfigError,
           "--gemm-fraction sets the achieved-GEMM fraction of the cluster's device: it needs a "
           "--cluster file with a \"device\" (e.g. examples/cluster-dgx-a100-80gb.json)");
  PW_CHECK(*fraction > 0 && *fraction <= 1, ConfigError,
           "--gemm-fraction must be in (0, 1], got " << *fraction);
  cluster.device->achieved_gemm_fraction = *fraction;
}

void write_plan_out(const std::string& path, const sched::JobSpec& job,
                    const sched::LoweredPlan& plan) {
  write_output(path, sched::plan_out_json(job, plan));
}

}  // namespace pipewright::cli
