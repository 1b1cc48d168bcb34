// What a run writes at its end, gathered over the world communicator on one rank: the weights
// (--save, --save-replicas), the measurements (--trace, --profile), and the forward-only outputs
// (--outputs). Private to exec/.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "interpreter/interpreter.hpp"
#include "pipewright/exec/communicator.hpp"
#include "report/run_report.hpp"
#include "runtime/run_setup.hpp"

namespace pipewright::exec {

// Gathers replica `replica`'s state_dict (stage_module.hpp StageModule::state_dict) on its first
// pipeline rank and writes it to `path` (safetensors). Collective over the replica's ranks.
void save_weights(const RunConfig& c, const Prepared& p, Communicator& world,
                  const std::vector<std::shared_ptr<ModuleBody>>& bodies,
                  std::chrono::milliseconds timeout, int replica, const std::string& path);

// Gathers every rank's timings (report/run_report.hpp) on world rank 0, which writes --trace
// and --profile and adds them to result->written_files. Collective over the world.
void write_measurements(const RunConfig& c, const Prepared& p, Communicator& world,
                        const Interpreter& interp,
                        const std::vector<std::shared_ptr<ModuleBody>>& bodies,
                        const std::vector<DataWait>& data_waits,
                        const std::vector<DataParallelStep>& dp_steps,
                        std::chrono::milliseconds timeout, const MemoryBaseline& baseline,
                        RunResult* result);

// `run --forward-only --outputs OUT.npy` (issue 22 item 4): the last stage's outputs of every
// step, gathered on world rank 0 in sample order and written as one float32 .npy (atomically:
// temp file + rename, so a failed run leaves no half-written file).
class PredictionGather {
 public:
  // `per_microbatch`: Interpreter::predictions() after step `step` (undefined where the loss
  // stage is not on this rank).
  void add(std::int64_t step, const std::vector<torch::Tensor>& per_microbatch);

  // Collective over `world`: every rank sends what it holds to world rank 0, which writes `path`
  // with the predictions of steps [0, steps) x microbatches [0, m) in that order (the sample
  // order of the batches). Throws InternalError on rank 0 when one is missing.
  void write(Communicator& world, int world_rank, int world_size, std::int64_t steps, int m,
             const std::string& path, std::chrono::milliseconds timeout);

 private:
  std::vector<std::pair<std::int64_t, std::int64_t>> keys_;  // (step, microbatch)
  std::vector<torch::Tensor> values_;                        // float32, CPU, contiguous
};

}  // namespace pipewright::exec
