// Checkpoints of the whole training state, one file per rank (issue 7):
//   <dir>/step-<NNNNNNNN>/rank-<R>.pt   weights and buffers of the rank's stages, optimizer state,
//                                       the data-parallel algorithm's state (SlowMo buffers), the
//                                       number of completed steps and the data position
//   <dir>/step-<NNNNNNNN>/COMPLETE      written by world rank 0 once every rank's file exists
// Every file is written to a temporary name, fsynced, renamed and its folder fsynced
// (file_io.hpp). A checkpoint counts only with its COMPLETE marker, which is written after a
// barrier over the world, so a run killed during a save resumes from the previous complete one.
// After a new complete checkpoint, rank 0 removes all but the two latest.
// The file is a torch serialize archive (zip); a configuration fingerprint in it refuses resuming
// with a different model/plan/mesh. Private to exec/ (names torch types).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/sharding.hpp"
#include "dp/dp_algorithm.hpp"
#include "dp/dp_hooks.hpp"
#include "interpreter/recipe.hpp"
#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

// What a rank saves and restores. Tensors are the live ones: loading copies into them.
struct TrainingState {
  std::int64_t completed_steps = 0;
  DataPosition data;
  std::vector<StageParams> stages;                   // the rank's stages, in order
  std::vector<torch::optim::Optimizer*> optimizers;  // one per stage (nullptr: none)
  DataParallelAlgorithm* dp_algorithm = nullptr;     // nullptr: dp == 1
  // fp16's loss scale and its growth counter (Note [Loss scaling]); nullptr: none kept. The
  // learning-rate schedule is a function of completed_steps and part of the fingerprint.
  RecipeState* recipe = nullptr;
  // The run's effective --zero-stage (0: every rank holds its stages' whole optimizer state;
  // 1/2: the optimizer state is this replica's shard, zero/zero.hpp). Saved as "zero"; a resume
  // with another stage is refused naming the stage and the optimizer state (absent: 0).
  int zero_stage = 0;
  // The run's mesh and per-replica batch, saved as "mesh" [pp, dp, batch_size]: a resume at
  // another --dp (same --pp, same global batch) re-shards (Note [Resuming at another dp]).
  int pp = 1;
  int dp = 1;
  std::int64_t batch_size = 0;
  // ZeRO at another dp: an optimizer of the run's kind over the given tensors (the saved pieces'
  // state is loaded into it, then re-sharded). Unset: a ZeRO checkpoint of another dp is refused.
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>
      make_optimizer;
  // Set by load_checkpoint: the --dp of the run that wrote the loaded checkpoint. When it is not
  // `dp`, `data` is the saved replica 0's position; the caller recomputes its own.
  int loaded_dp = 0;
};

struct CheckpointIdentity {
  int world_rank = 0;
  int world_size = 1;
  // Hash of everything that must match for a resume to be exact (model, plan, mesh,
  // microbatches, batch size, optimizer, data-parallel options...). Chosen by the caller.
  std::uint64_t fingerprint = 0;
};

[[nodiscard]] std::string checkpoint_dir_of_step(const std::string& dir, std::int64_t step);
[[nodiscard]] std::string checkpoint_file(const std::string& dir, std::int64_t step, int rank);

// Serialises `state` (pure; for tests) and parses it back into the live tensors of `state`.
// Parsing throws ParseError naming `name` when the bytes are not a checkpoint, ConfigError when
// it belongs to another rank / configuration or its tensors do not fit the stages.
[[nodiscard]] std::string serialize_checkpoint(const TrainingState& state,
                                               const CheckpointIdentity& id);
void parse_checkpoint(const std::string& bytes, const std::string& name,
                      const CheckpointIdentity& id, TrainingState& state);

// Collective over `world`: writes this rank's file for state.completed_steps, waits for every
// rank, then world rank 0 writes COMPLETE and prunes old checkpoints. Throws ConfigError when a
// file cannot be written.
void save_checkpoint(const std::string& dir, const TrainingState& state,
                     const CheckpointIdentity& id, Communicator& world,
                     std::chrono::milliseconds timeout);

// Removes what a save killed midway left of this rank's own temporary files in `dir`'s step
// folders ("rank-R.pt.tmp.*"; world rank 0 also "COMPLETE.tmp.*"), so they do not accumulate.
// Each rank removes only its own, so ranks may call it concurrently. Returns how many it removed.
std::int64_t remove_stale_temporaries(const std::string& dir, int world_rank);

// The latest complete checkpoint in `dir` that holds this rank's file or, written at another
// world size, world rank 0's (load_checkpoint re-shards or names why not), or -1. Local; see
// agree_resume_step for the collective version.
[[nodiscard]] std::int64_t latest_complete_checkpoint(const std::string& dir, int world_rank);

// Collective: every rank's latest_complete_checkpoint, reduced to the minimum over the world, so
// that every rank resumes from the same step (-1: start from scratch).
[[nodiscard]] std::int64_t agree_resume_step(const std::string& dir, int world_rank,
                                             Communicator& world,
                                             std::chrono::milliseconds timeout);

// Loads step `step` of `dir` for id.world_rank into `state`.
// Note [Resuming at another dp]: a checkpoint written at another world size loads when it was
// written at the same --pp (the same stages on the same pipeline ranks) and the same global batch
// (--batch-size x --dp); else ConfigError naming the flags. Parameters, buffers, the loss scale
// and (--zero-stage 0) the optimizer state are replicated: replica 0's file of this pipeline rank
// gives them. ZeRO's optimizer shards are re-sharded from every saved replica's file of this
// pipeline rank (zero/zero_reshard.hpp: Note [ZeRO re-sharding]), and so are ZeRO-3's parameter
// shards (handed to the algorithm's load_state with this run's layout). A data-parallel algorithm
// with per-replica state (SlowMo, DiLoCo, SGP) is refused.
void load_checkpoint(const std::string& dir, std::int64_t step, const CheckpointIdentity& id,
                     TrainingState& state);

}  // namespace pipewright::exec
