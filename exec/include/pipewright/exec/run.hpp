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

#include "pipewright/exec/data_parallel.hpp"
#include "pipewright/exec/rendezvous.hpp"

namespace pipewright::exec {

struct RunConfig {
  // Model, partition, plan.
  std::string model_path;
  std::string partition_path;                 // empty: partition the model (partition_method)
  std::string partition_method = "balanced";  // "uniform" | "balanced"
  std::string plan_path;                      // empty: generate `schedule` and lower it
  std::string schedule = "1F1B";
  int pp = 1;
  int dp = 1;
  int stages_per_rank = 1;
  int microbatches = 1;
  // Training.
  std::int64_t batch_size = 0;  // per replica, per step; a multiple of microbatches
  std::int64_t steps = 1;
  std::string loss;               // "mse" | "cross-entropy"; empty: the model's loss node decides
  std::string optimizer = "sgd";  // "sgd" (with momentum) | "adam" | "adamw"
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  std::uint64_t seed = 0;
  std::string init_path;  // safetensors with initial weights (names as in the model)
  std::string save_path;  // safetensors of the final weights, written by world rank 0
  // Data: either data_x + data_y (npy) or dataset (bundled name).
  std::string data_x;
  std::string data_y;
  std::string dataset;
  bool shuffle = true;
  // Communication.
  std::string backend = "gloo";  // "gloo" | "mpi" | "nccl"
  // nccl: CUDA device per local rank, "2,3,0,1" or "0:2,1:3" (default: device = local rank).
  std::string device_map;
  double timeout_s = 300;
  // gloo: all-reduce DDP buckets through shared memory when the replicas share a host
  // (Note [Shared-memory all-reduce]); false: every byte through Gloo.
  bool shm_collectives = true;
  // Post each step's receives when it starts (Note [Pre-posted receives]; ignored for nccl).
  bool prepost_receives = true;
  WorldFlags world;
  // Measurement (written by world rank 0).
  std::string trace_path;         // Chrome Trace Event JSON, every rank in one file (pid = rank)
  std::string profile_path;       // pipewright-profile JSON for `pipewright simulate --profile`
  std::int64_t warmup_steps = 1;  // steps left out of the profile's statistics
  // Data parallelism (issue 7).
  DataParallelConfig data_parallel;
};

// One step as logged by world rank 0.
struct StepLog {
  std::int64_t step = 0;
  std::int64_t steps = 0;
  double loss = 0;     // mean over the global batch (averaged over replicas)
  double step_ms = 0;  // wall time of the step on rank 0 (ends with the loss all-reduce)
  double samples_per_s = 0;
};

struct RunResult {
  int world_rank = 0;
  std::vector<StepLog> steps;              // filled on world rank 0
  std::vector<std::string> written_files;  // files this rank wrote
  DataParallelStats data_parallel;         // this rank's data-parallel communication (dp > 1)
};

// Checks the flags that need no file or communication. Throws ConfigError naming the flag.
void validate_run_config(const RunConfig& config);

// Runs the training. `on_step` is called on world rank 0 after every step. Throws InputError
// subclasses for bad input (before training), PeerError / TimeoutError when a peer fails.
RunResult run_training(const RunConfig& config,
                       const std::function<void(const StepLog&)>& on_step = {});

}  // namespace pipewright::exec
