// `pipewright run` as a library call: one training run of a model with a pipeline schedule on
// pp x dp ranks (this process is one of them). Torch-free, so tools/ can fill RunConfig from
// flags or a config file without including libtorch. docs/executor.md describes the whole flow.
//
// Everything that can be checked without communicating is checked before the first message
// (flags, model, partition, plan, data files and shapes, world size == pp x dp), so bad input
// makes every rank throw an InputError (exit 2) before any training.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/data_parallel.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::exec {

// The job (sched::JobSpec: model, partition, plan, shape, batch, optimizer, data-parallel
// algorithm; shared with `pipewright simulate`) and how this run executes it.
struct RunConfig : sched::JobSpec {
  std::string loss;  // "mse" | "cross-entropy"; empty: the model's loss node decides
  std::uint64_t seed = 0;
  std::string init_path;  // safetensors with initial weights (names as in the model)
  std::string save_path;  // safetensors of the final weights, written by world rank 0
  // --forward-only: the last stage's outputs of every step in sample order (.npy, world rank 0;
  // exec/src/runtime/run_outputs.hpp).
  std::string outputs_path;
  // Data: either data_x + data_y (npy) or dataset (bundled name).
  std::string data_x;
  std::string data_y;
  std::string dataset;
  bool shuffle = true;
  // Steps of batches read ahead on a background thread (exec/src/data/prefetch.hpp); 0: read each
  // batch on the training thread when its step starts.
  std::int64_t prefetch = 2;
  // Communication.
  Backend backend = Backend::kGloo;
  // nccl: CUDA device per local rank, "2,3,0,1" or "0:2,1:3" (default: device = local rank).
  std::string device_map;
  double timeout_s = 300;
  // gloo: all-reduce DDP buckets through shared memory when the replicas share a host
  // (Note [Shared-memory all-reduce]); false: every byte through Gloo.
  bool shm_collectives = true;
  // gloo: pipeline activations and gradients through shared memory between ranks of one host
  // (Note [Shared-memory point-to-point]); false: every message through Gloo's TCP.
  bool shm_p2p = true;
  // Post each step's receives when it starts (Note [Pre-posted receives]; ignored for nccl).
  bool prepost_receives = true;
  WorldFlags world;
  // Measurement (written by world rank 0).
  std::string trace_path;         // Chrome Trace Event JSON, every rank in one file (pid = rank)
  std::string profile_path;       // pipewright-profile JSON for `pipewright simulate --profile`
  std::int64_t warmup_steps = 1;  // steps left out of the profile's statistics
  // Replicas and checkpoints (docs/data-parallel.md).
  // Every N steps verify that the replicas of each stage hold bit-identical parameters
  // (0 = never). Fails with ReplicaDivergenceError naming the diverged replica.
  std::int64_t check_replicas = 0;
  std::string checkpoint_dir;         // empty: no checkpoints; one file per rank under it
  std::int64_t checkpoint_every = 0;  // also every N steps (0: only after the last step)
  bool resume = false;                // start from the last complete checkpoint in checkpoint_dir
  bool save_replicas = false;         // --save also writes <FILE>.replica<R>.safetensors
  // fp16's dynamic loss scaling (torch GradScaler; Note [Loss scaling] in interpreter/recipe.hpp).
  double initial_loss_scale = 65536.0;    // --initial-loss-scale
  double min_loss_scale = 1.0;            // --min-loss-scale: a scale below it stops the run
  std::int64_t loss_scale_window = 2000;  // --loss-scale-window: overflow-free steps to double
  // Evaluation (Note [Evaluation] in runtime/evaluation.hpp): every eval_every steps (0: never)
  // a forward-only pass of the plan over eval_batches batches of eval_data_x/y (npy) or of the
  // held-out split of the bundled eval_dataset; the mean loss is logged and recorded.
  std::int64_t eval_every = 0;
  std::int64_t eval_batches = 1;
  std::string eval_data_x;
  std::string eval_data_y;
  std::string eval_dataset;
  // --metrics: one JSON line per step (Note [Metrics file] in runtime/metrics.hpp), world rank 0.
  std::string metrics_path;
};

// What `pipewright run --dry-run` reports: the job resolved and its plan built, validated and
// dry-run, with no rendezvous and no training.
struct DryRun {
  sched::LoweredPlan plan;
  std::int64_t actions = 0;  // every rank's actions
  // Per pipeline rank: the job's memory under the model's estimates (sched::peak_memory, the
  // numbers `pipewright simulate --model` prints for the same job).
  std::vector<sched::RankMemory> memory;
  std::string model_name;
};

// One step as logged by world rank 0.
// Training produced a non-finite loss or gradient norm under --nan-policy error (Note
// [Non-finite steps] in exec/src/interpreter/nonfinite.cpp): a runtime fault, exit 1
// (pipewright::Error's default). The message names the step, rank and stage.
class NumericalError : public Error {
 public:
  using Error::Error;
};

struct StepLog {
  std::int64_t step = 0;
  std::int64_t steps = 0;
  double loss = 0;     // mean over the global batch (averaged over replicas)
  double step_ms = 0;  // wall time of the step on rank 0 (ends with the loss all-reduce)
  double samples_per_s = 0;
  // Non-empty when a loss or gradient norm was not finite this step and --nan-policy is
  // skip-step or warn: "step 3: non-finite loss (nan) on rank 1, stage 1".
  std::string nonfinite;
  // The training recipe (issue 33): the learning rate of this step, the global gradient norm of
  // replica 0 (has_grad_norm: computed this step, with --clip-grad-norm, fp16 or --metrics), the
  // fp16 loss scale and whether an fp16 overflow skipped the step, and the mean evaluation loss
  // when the step ended with an evaluation.
  double lr = 0;
  bool has_grad_norm = false;
  double grad_norm = 0;
  double loss_scale = 1;
  bool skipped = false;
  bool has_eval_loss = false;
  double eval_loss = 0;
};

// What world rank 0 reports once every rank has joined and a checkpoint (if any) is loaded, just
// before the first step: the `run` banner (issue 25).
struct RunStart {
  std::string model_name;
  int world_size = 0;
  std::string backend;             // the communicator's backend name
  std::int32_t stages = 0;         // pipeline stages of the plan
  std::int64_t first_step = 0;     // > 0: resumed from the checkpoint taken after that many steps
  bool resume_found_none = false;  // --resume given and the directory had no checkpoint
};

struct RunResult {
  int world_rank = 0;
  std::vector<StepLog> steps;              // filled on world rank 0
  std::vector<std::string> written_files;  // files this rank wrote
  DataParallelStats data_parallel;         // this rank's data-parallel communication (dp > 1)
  // How this rank reaches each pipeline peer (Communicator::p2p_transports): "rank 1: shared
  // memory (rings of 1 MiB to it, 1 MiB from it)" or "rank 1: TCP (<why>)"; logged at info.
  std::vector<std::string> p2p_transports;
};

// Checks the flags that need no file or communication (sched::validate_job, then the executor's
// own). Throws ConfigError naming the flag.
void validate_run_config(const RunConfig& config);

// Everything a run checks before it talks to anyone: the flags, the model, the partition, the
// plan (built with sched::make_plan: validated and dry-run for deadlocks) and the data against
// the model. Throws what run_training would, with nothing started.
[[nodiscard]] DryRun dry_run_job(const RunConfig& config);

// Runs the training. `on_step` is called on world rank 0 after every step. Throws InputError
// subclasses for bad input (before training), PeerError / TimeoutError when a peer fails.
// `on_start` is called on world rank 0 once, before the first step.
RunResult run_training(const RunConfig& config,
                       const std::function<void(const StepLog&)>& on_step = {},
                       const std::function<void(const RunStart&)>& on_start = {});

}  // namespace pipewright::exec
