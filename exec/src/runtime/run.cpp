// run_training (pipewright/exec/run.hpp): from flags to a finished training run.
//
// Order of work (docs/executor.md):
//   1. checks that need no communication, identical on every rank: flags, model, partition,
//      plan (generated or loaded, then lowered with REDUCE_GRAD and OPTIM), data files and their
//      shapes against the model, world size == pp x dp, data-parallel options, the outputs this
//      rank will write (Note [Outputs checked first]); the job's fingerprint (run_setup.cpp);
//   2. this rank's stages built (seeded init or --init), optimizers (run_setup.cpp), data stream;
//   3. rendezvous, world communicator, agreement on the job (Note [Job agreement] in
//      agreement.cpp), mesh (pipeline groups then data-parallel groups);
//   4. start-up shape agreement along the pipeline, data-parallel on_start;
//   5. steps; after each, the loss is all-reduced over the world so rank 0 logs the global mean;
//   6. --save (replica 0's stages gathered on world rank 0), --trace / --profile (every rank's
//      action timings gathered on world rank 0) (run_outputs.cpp).
#include "pipewright/exec/run.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "data/prefetch.hpp"
#include "data/sharding.hpp"
#include "dp/dp_algorithm.hpp"
#include "dp/mesh.hpp"
#include "dp/tied_sync.hpp"
#include "interpreter/interpreter.hpp"
#include "interpreter/nonfinite.hpp"
#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/device_map.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"
#include "report/run_report.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/evaluation.hpp"
#include "runtime/metrics.hpp"
#include "runtime/run_outputs.hpp"
#include "runtime/run_setup.hpp"
#include "store/agreement.hpp"
#include "zero/zero.hpp"
#include "zero/zero3.hpp"

namespace pipewright::exec {

namespace {

using Clock = std::chrono::steady_clock;

// What must not change between a checkpoint and its resume: the job (its canonical JSON, every
// default resolved) but --steps, and the executor settings that change what is trained (loss,
// seed, initial weights, data), hashed (FNV-1a).
std::uint64_t checkpoint_fingerprint(const RunConfig& c) {
  sched::JobSpec job = c;
  // A decaying schedule's default length is --steps: fix it before --steps is left out (a
  // constant learning rate has none, so a resume may change --steps).
  job.lr_schedule.decay_steps = job.lr_schedule.decay_style == sched::LrDecayStyle::kConstant
                                    ? 0
                                    : job.lr_schedule.decay_steps_or(job.steps);
  job.steps = 1;
  // Note [Resuming at another dp]: the mesh's dp and the per-replica batch may change together
  // (load_checkpoint checks the global batch and names the flags); the rest must not.
  job.batch_size = c.batch_size * c.dp;
  job.dp = 1;
  std::ostringstream os;
  os << sched::to_json(job) << '|' << c.loss << '|' << c.seed << '|' << c.init_path << '|'
     << c.data_x << '|' << c.data_y << '|' << c.dataset << '|' << c.shuffle << '|'
     << c.initial_loss_scale << '|' << c.min_loss_scale << '|' << c.loss_scale_window << '|'
     << (c.eval_dataset == c.dataset ? c.eval_dataset : "");  // a held-out split changes the data
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : os.str()) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

// The copies of tied groups that the global gradient norm leaves out: all but those of each
// group's first stage (Note [Global gradient norm] in recipe.hpp).
std::set<const void*> copies_counted_elsewhere(const std::vector<TiedGroup>& groups,
                                               const std::vector<TiedCopy>& copies) {
  std::map<std::string, int> first;
  for (const auto& g : groups) first[g.name] = g.stages.front();
  std::set<const void*> out;
  for (const auto& cp : copies) {
    if (cp.stage != first.at(cp.group)) out.insert(cp.param.unsafeGetTensorImpl());
  }
  return out;
}

// Tests: PIPEWRIGHT_TEST_FP16_OVERFLOW=STEP:RANK makes one gradient of world rank RANK Inf at
// (0-based) step STEP of an fp16 run (Note [Loss scaling]).
void test_overflow_injection(TrainingRecipe::Options& o) {
  const char* env = std::getenv("PIPEWRIGHT_TEST_FP16_OVERFLOW");
  if (env == nullptr || *env == '\0') return;
  long long step = -1;
  int rank = -1;
  PW_CHECK(std::sscanf(env, "%lld:%d", &step, &rank) == 2, ConfigError,
           "PIPEWRIGHT_TEST_FP16_OVERFLOW='" << env << "' is not STEP:RANK");
  o.overflow_step = step;
  o.overflow_rank = rank;
}

// Token-id models (int64 input): the tokens of one sample; 0 for others (Note [Metrics file]).
std::int64_t tokens_per_sample_of(const graph::Model& model) {
  if (model.input.dtype != "int64") return 0;
  std::int64_t n = 1;
  for (auto d : model.input.shape) n *= d;
  return n;
}

// Collective over the world: every rank's peak resident set (VmHWM), in rank order.
std::vector<std::int64_t> gather_peak_rss(Communicator& world, std::int64_t step,
                                          std::chrono::milliseconds timeout) {
  std::vector<double> buf(static_cast<std::size_t>(world.size()), 0.0);
  buf[static_cast<std::size_t>(world.rank())] = static_cast<double>(peak_rss_bytes());
  world
      .all_reduce(BufferView{buf.data(), buf.size(), DType::kFloat64, {}}, ReduceOp::kSum,
                  OpContext{step, -1, -1, "peak memory all_reduce"})
      ->wait(timeout);
  std::vector<std::int64_t> out;
  for (double v : buf) out.push_back(static_cast<std::int64_t>(v));
  return out;
}

// The training itself; `store` is owned by the caller so that it outlives an error thrown here
// (name_unresponsive asks it who stopped answering).
RunResult train(const RunConfig& c, const std::function<void(const StepLog&)>& on_step,
                const std::function<void(const RunStart&)>& on_start, std::unique_ptr<Store>& store,
                int& world_rank) {
  const auto timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(c.timeout_s * 1000)));
  Prepared p = prepare(c);
  RunResult result;
  result.world_rank = p.world.rank;
  world_rank = p.world.rank;

  std::vector<std::shared_ptr<ModuleBody>> bodies;
  auto setups = build_stages(c, p, &bodies);
  std::map<int, torch::optim::Optimizer*> optimizer_of_stage;  // owned by the interpreter
  for (const auto& st : setups) optimizer_of_stage[st.stage] = st.optimizer.get();

  // Communication starts here.
  const Backend backend = c.backend;
  if (backend == Backend::kGloo || backend == Backend::kNccl) {
    store = make_tcp_store(p.world, timeout, fingerprint_digest(p.fingerprint));
    rendezvous(*store, p.world, timeout);
  }
  CommOptions comm_opts;
  comm_opts.timeout = timeout;
  comm_opts.shm_collectives = c.shm_collectives;
  comm_opts.shm_p2p = c.shm_p2p;
  if (backend == Backend::kNccl) {
    comm_opts.device_map = parse_device_map(c.device_map, p.world.local_world_size);
  }
  auto world = make_communicator(backend, p.world, store.get(), comm_opts);
  agree_on_job(*world, p.fingerprint, timeout);
  Mesh mesh = make_mesh(*world, c.pp, c.dp);

  // Tied parameters across stages: gradients summed before the optimizer (tied_sync.hpp); Chimera's
  // replicas too (Note [Replica gradients]). Under ZeRO each gets a bucket of its own (Note [ZeRO
  // tied parameters] in zero/zero_buckets.hpp).
  auto groups = cross_stage_tied_groups(p.model, p.partition);
  std::set<std::string> names;
  for (const auto& g : groups) names.insert(g.name);
  for (auto& g : replica_groups(p.model, p.partition, p.plan.shape, names)) {
    groups.push_back(std::move(g));
  }
  std::vector<TiedCopy> copies;
  if (!groups.empty()) {
    std::vector<const StageModule*> modules;
    for (const auto& b : bodies) modules.push_back(&b->module());
    copies =
        local_tied_copies(modules, p.plan.shape.stages_of_rank(p.pp_index), p.plan.shape, names);
  }
  std::unique_ptr<DataParallelAlgorithm> dp_algo;
  NoDataParallel no_dp;
  DataParallelHooks* hooks = &no_dp;
  if (c.dp > 1) {
    DataParallelContext ctx;
    ctx.dp_comm = mesh.data.get();
    ctx.pp = c.pp;
    ctx.num_microbatches = c.microbatches;
    ctx.learning_rate = c.lr;
    ctx.timeout = timeout;
    ctx.check_replicas = c.check_replicas;
    ctx.bf16_reduce = c.reduce_dtype_or_default() == sched::Precision::kBf16;
    if (c.effective_zero_stage() > 0) {
      // ZeRO (zero/zero.hpp): DDP's buckets, reduce-scattered; the optimizer steps a shard.
      ZeroOptions zo;
      zo.stage = c.effective_zero_stage();
      zo.bucket_cap_bytes = sched::bucket_cap_bytes_from_mb(c.data_parallel.bucket_cap_mb);
      zo.num_microbatches = c.microbatches;
      zo.check_replicas = c.check_replicas;
      zo.timeout = timeout;
      for (const auto& cp : copies) zo.dedicated.insert(cp.param.unsafeGetTensorImpl());
      zo.bf16_reduce = ctx.bf16_reduce;
      if (zo.stage == 3) {  // sharded parameters too (zero/zero3.hpp)
        dp_algo = std::make_unique<Zero3>(ctx.dp_comm, zo, p.world.rank);
      } else {
        dp_algo = std::make_unique<Zero>(ctx.dp_comm, zo);
      }
    } else {
      dp_algo = make_data_parallel(c.data_parallel, ctx);
    }
    hooks = dp_algo.get();
  }
  std::unique_ptr<TiedGradientSync> tied;
  std::set<const void*> not_counted;  // Note [Global gradient norm]
  if (!groups.empty()) {
    not_counted = copies_counted_elsewhere(groups, copies);
    tied = std::make_unique<TiedGradientSync>(hooks, mesh.pipe.get(), groups, copies, p.plan,
                                              p.device, timeout);
    hooks = tied.get();
  }
  // The training recipe (recipe.hpp): learning rate, clipping, fp16 loss scaling.
  TrainingRecipe::Options ro;
  ro.precision = c.precision;
  ro.clip_grad_norm = c.clip_grad_norm;
  ro.lr_schedule = c.lr_schedule;
  ro.max_lr = c.lr;
  ro.steps = c.steps;
  ro.scaler = LossScalerOptions{c.initial_loss_scale, c.min_loss_scale, c.loss_scale_window};
  ro.always_norm = !c.metrics_path.empty();
  ro.dp = c.dp;
  ro.dp_index = p.dp_index;
  ro.sharded = c.effective_zero_stage() > 0;
  ro.not_counted = not_counted;
  ro.world_rank = p.world.rank;
  ro.timeout = timeout;
  test_overflow_injection(ro);
  TrainingRecipe recipe(ro, world.get());

  InterpreterOptions iopts;
  iopts.timeout = timeout;
  iopts.precision = c.precision;
  iopts.recipe = &recipe;
  iopts.device = p.device;
  iopts.record_timings = !c.trace_path.empty() || !c.profile_path.empty();
  iopts.world_rank = p.world.rank;
  iopts.prepost_receives = c.prepost_receives && backend != Backend::kNccl;
  iopts.nan_policy = c.nan_policy;
  // Note [Measured split backward]: a profiled plan without I/W measures them in its last
  // warm-up step, so that zero-bubble plans can be predicted from its profile.
  if (!c.profile_path.empty()) {
    bool full = false, split = false;
    for (const auto& list : p.plan.per_rank) {
      for (const auto& act : list) {
        full = full || act.kind == sched::ActionKind::kFullBackward;
        split = split || act.kind == sched::ActionKind::kBackwardInput ||
                act.kind == sched::ActionKind::kBackwardWeight;
      }
    }
    const std::int64_t warmup = std::min<std::int64_t>(c.warmup_steps, c.steps - 1);
    if (full && !split && warmup >= 1) iopts.split_backward_step = warmup - 1;
  }
  const LossKind loss_kind = p.loss;
  Interpreter interp(
      p.plan, mesh.pp_index, std::move(setups), mesh.pipe.get(), hooks,
      [loss_kind](const torch::Tensor& out, const torch::Tensor& y) {
        return compute_loss(out, y, loss_kind);
      },
      iopts);

  // Note [Prefetching loader] (prefetch.hpp); the time each step waits for it is traced.
  BatchLoader loader(
      *p.data, ShardedBatches(p.data->size(), c.dp, p.dp_index, c.seed, c.shuffle, c.batch_size),
      p.device, c.microbatches, c.prefetch, iopts.record_timings);
  StepBatch mb = loader.next(0);
  interp.agree_shapes(mb.xs.at(0));
  std::unique_ptr<Evaluator> evaluator;  // Note [Evaluation]
  if (c.eval_every > 0) {
    std::vector<StageSetup> eval_setups;
    for (const auto& st : interp.setups()) {
      StageSetup e;
      e.stage = st.stage;
      e.body = st.body;
      e.inputs = st.inputs;
      e.num_outputs = st.num_outputs;
      e.loss_output = st.loss_output;
      e.consumers = st.consumers;
      eval_setups.push_back(std::move(e));
    }
    evaluator = std::make_unique<Evaluator>(
        p.eval_plan, mesh.pp_index, std::move(eval_setups), mesh.pipe.get(), world.get(),
        [loss_kind](const torch::Tensor& out, const torch::Tensor& y) {
          return compute_loss(out, y, loss_kind);
        },
        iopts, std::move(p.eval_data), c, p.dp_index);
    evaluator->agree_shapes(-1);
  }
  auto stage_params = interp.stage_params();
  hooks->on_start(stage_params);
  for (const auto& sp : stage_params) {  // ZeRO: each stage's optimizer steps the shard
    auto shard = hooks->optimizer_params(sp.stage);
    if (!shard.empty()) {
      optimizer_of_stage[sp.stage] = interp.replace_optimizer(sp.stage, make_optimizer(c, shard));
    }
  }
  if (c.effective_zero_stage() > 0 && !copies.empty()) {
    // Note [Global gradient norm] under ZeRO: the tied copies' pieces, not the parameters.
    std::vector<TiedCopy> stepped = copies;
    for (auto& cp : stepped) cp.param = hooks->optimizer_tensor_of(cp.stage, cp.param);
    recipe.set_not_counted(copies_counted_elsewhere(groups, stepped));
  }
  // Note [Runtime memory] in run_report.hpp: the resident set before the first step, from which
  // the peak is measured (the start-up transient is not training state).
  MemoryBaseline baseline;
  baseline.rss_bytes = reset_peak_rss() ? resident_bytes() : peak_rss_bytes();
  baseline.state_bytes = dp_algo ? dp_algo->resident_state_bytes() : -1;
  baseline.file_bytes = resident_file_bytes();

  // Checkpoints (docs/data-parallel.md): resume from the last complete one, save every N steps
  // and after the last step.
  TrainingState train_state;
  train_state.stages = stage_params;
  for (const auto& sp : stage_params)
    train_state.optimizers.push_back(optimizer_of_stage[sp.stage]);
  train_state.dp_algorithm = dp_algo.get();
  train_state.recipe = recipe.mutable_state();
  train_state.zero_stage = c.effective_zero_stage();
  train_state.pp = c.pp;
  train_state.dp = c.dp;
  train_state.batch_size = c.batch_size;
  train_state.make_optimizer = [&c](std::vector<torch::Tensor> params) {
    return make_optimizer(c, std::move(params));
  };
  const CheckpointIdentity ckpt_id{p.world.rank, p.world.world_size, checkpoint_fingerprint(c)};
  std::int64_t first_step = 0;
  bool resume_found_none = false;
  if (!c.checkpoint_dir.empty()) remove_stale_temporaries(c.checkpoint_dir, p.world.rank);
  if (c.resume) {
    const std::int64_t s = agree_resume_step(c.checkpoint_dir, p.world.rank, *world, timeout);
    if (s >= 0) {
      load_checkpoint(c.checkpoint_dir, s, ckpt_id, train_state);
      // Note [Resuming at another dp]: the same global batches from step s on; this replica's
      // place in the stream is where an uninterrupted run at this dp would be.
      if (train_state.loaded_dp != c.dp) {
        train_state.data = position_after_steps(p.data->size(), c.dp, c.batch_size, s);
      }
      loader.seek(train_state.data);
      first_step = s;
      mb = loader.next(s);  // the batch of step s
    } else {
      resume_found_none = true;
    }
  }
  if (p.world.rank == 0 && on_start) {
    on_start(RunStart{p.model.name, p.world.world_size, world->backend_name(), p.plan.shape.stages,
                      first_step, resume_found_none});
  }

  const double samples_per_step = static_cast<double>(c.batch_size) * c.dp;
  std::unique_ptr<MetricsWriter> metrics;  // Note [Metrics file]
  if (!c.metrics_path.empty() && p.world.rank == 0) {
    metrics = std::make_unique<MetricsWriter>(c.metrics_path, first_step);
  }
  const std::int64_t tokens_per_sample = tokens_per_sample_of(p.model);
  PredictionGather predictions;  // --forward-only --outputs
  // Per step, what the data-parallel algorithm communicated (the profile's data_parallel).
  std::vector<DataParallelStep> dp_steps;
  // Note [Loss all-reduce in shared memory] (interpreter/nonfinite.cpp): allocated collectively.
  const std::shared_ptr<void> loss_sync =
      world->allocate_collective_buffer(loss_sync_doubles(*world) * sizeof(double));
  for (std::int64_t step = first_step; step < c.steps; ++step) {
    if (step > first_step) mb = loader.next(step);
    const auto t0 = Clock::now();
    const DataParallelStats dp0 = dp_algo ? dp_algo->stats() : DataParallelStats{};
    const auto r = interp.run_step(step, mb.xs, mb.ys);
    if (dp_algo && iopts.record_timings) {
      const DataParallelStats dp1 = dp_algo->stats();
      dp_steps.push_back(
          DataParallelStep{step, dp1.collectives - dp0.collectives,
                           static_cast<std::int64_t>(dp1.payload_bytes - dp0.payload_bytes),
                           std::llround(dp1.wire_bytes - dp0.wire_bytes),
                           dp1.exposed_wait_ns - dp0.exposed_wait_ns});
    }
    if (!c.outputs_path.empty()) predictions.add(step - first_step, interp.predictions());
    std::string nonfinite;  // Note [Non-finite steps]
    const double loss =
        all_reduce_loss_checked(*world, static_cast<double*>(loss_sync.get()),
                                r.has_loss ? r.loss : 0.0, r.nonfinite, step, timeout, &nonfinite);
    PW_CHECK(nonfinite.empty() || c.nan_policy != sched::NanPolicy::kError, NumericalError,
             nonfinite << " (--nan-policy error: stopped before the step was applied; lower --lr, "
                          "or --nan-policy skip-step to skip such steps)");
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    StepLog log{step, c.steps, loss / c.dp, ms, samples_per_step / (ms / 1000.0), nonfinite};
    log.lr = r.optimizer.lr;
    log.has_grad_norm = r.optimizer.has_norm;
    log.grad_norm = r.optimizer.grad_norm;
    log.loss_scale = r.optimizer.loss_scale;
    log.skipped = r.optimizer.skipped;
    if (evaluator && ((step + 1) % c.eval_every == 0 || step + 1 == c.steps)) {
      hooks->settle();  // ZeRO: parameters gathered before anything outside a step reads them
      log.has_eval_loss = true;
      log.eval_loss = evaluator->evaluate(step);
    }
    std::vector<std::int64_t> peaks;
    if (!c.metrics_path.empty()) peaks = gather_peak_rss(*world, step, timeout);
    if (p.world.rank == 0) {
      result.steps.push_back(log);
      if (metrics) metrics->write(log, tokens_per_sample, peaks);
      if (on_step) on_step(log);
    }
    if (!c.checkpoint_dir.empty() &&
        ((c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0) || step + 1 == c.steps)) {
      train_state.completed_steps = step + 1;
      train_state.data = loader.position();  // the next batch training takes
      hooks->settle();
      save_checkpoint(c.checkpoint_dir, train_state, ckpt_id, *world, timeout);
    }
  }
  hooks->settle();
  if (dp_algo) result.data_parallel = dp_algo->stats();
  if (mesh.pipe) result.p2p_transports = mesh.pipe->p2p_transports();  // issue 44
  if (!c.outputs_path.empty()) {
    predictions.write(*world, p.world.rank, p.world.world_size, c.steps - first_step,
                      c.microbatches, c.outputs_path, timeout);
    if (p.world.rank == 0) result.written_files.push_back(c.outputs_path);
  }
  if (!c.save_path.empty()) {
    save_weights(c, p, *world, bodies, timeout, 0, c.save_path);
    if (p.world.rank == 0) result.written_files.push_back(c.save_path);
    for (int d = 0; c.save_replicas && d < c.dp; ++d) {
      const std::string path = replica_weights_path(c.save_path, d);
      save_weights(c, p, *world, bodies, timeout, d, path);
      if (p.world.rank == mesh_world_rank(0, d, c.pp)) result.written_files.push_back(path);
    }
  }
  if (iopts.record_timings)
    write_measurements(c, p, *world, interp, bodies, loader.waits(), dp_steps, timeout, baseline,
                       &result);
  world->barrier(OpContext{c.steps, -1, -1, "final barrier"})->wait(timeout);
  return result;
}

// Note [Naming the unresponsive rank]: a Gloo collective among more than two ranks cannot say
// which peer stopped (it lists candidates), and a receive that times out names the peer it
// waits for, which may itself be waiting for the rank that hung. The TCP store knows better:
// every rank pings it twice a second, and the server notes connections that closed unfinished.
// On a timeout or a peer failure, the ranks it has not heard from for 2 s (SIGSTOPped, hung) or
// that left (died) are named in the message. If the store itself does not answer or is gone, its
// host, rank 0, is the one that stopped or died. A failing rank 0 keeps the store up until the
// others have left (let_peers_ask, at most 1 s) so they can still ask; and every rank keeps the
// ranks gone as of its last ping, for when the store is gone by the time it asks.
std::string naming_unresponsive(Store& store, int self, const std::string& what) {
  std::vector<int> silent;
  bool host_silent = false;
  try {
    // A dead peer's connections close together, but the store may see its close a moment after
    // this rank saw the peer's: ask again once before concluding that nobody is silent.
    for (int attempt = 0; attempt < 2 && silent.empty(); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int r : store.unresponsive_ranks(std::chrono::milliseconds(2000))) {
        if (r != self) silent.push_back(r);
      }
    }
  } catch (const Error&) {  // the store does not answer (TimeoutError) or is gone (PeerError)
    host_silent = self != 0;
  }
  if (host_silent) silent.push_back(0);
  if (silent.empty()) return what;
  std::string list;
  for (int r : silent) list += (list.empty() ? "" : ",") + std::to_string(r);
  return what + "; not responding: rank" + (silent.size() > 1 ? "s " : " ") + list +
         " (hung, stopped or dead: no sign of life at the rendezvous store for over 2 s)";
}

// Rank 0 hosts the store: when it fails, it keeps the store up until every other rank has left
// (at most 1 s), so that they can still ask it who failed first. Without this, a rank whose own
// error came a moment later found the store gone and could only name rank 0.
void let_peers_ask(Store& store, int world_size) {
  const auto until = Clock::now() + std::chrono::seconds(1);
  try {
    while (Clock::now() < until &&
           static_cast<int>(store.unresponsive_ranks(std::chrono::hours(1)).size()) <
               world_size - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const Error&) {
  }
}

template <typename E>
[[noreturn]] void rethrow_naming_unresponsive(Store& store, int self, int world_size, const E& e) {
  E named(naming_unresponsive(store, self, e.what()));
  if (self == 0) let_peers_ask(store, world_size);
  throw named;
}

}  // namespace

RunResult run_training(const RunConfig& c, const std::function<void(const StepLog&)>& on_step,
                       const std::function<void(const RunStart&)>& on_start) {
  std::unique_ptr<Store> store;
  int self = -1;
  try {
    return train(c, on_step, on_start, store, self);
  } catch (const TimeoutError& e) {
    if (store) rethrow_naming_unresponsive(*store, self, c.pp * c.dp, e);
    throw;
  } catch (const PeerError& e) {
    if (store) rethrow_naming_unresponsive(*store, self, c.pp * c.dp, e);
    throw;
  }
}

}  // namespace pipewright::exec
