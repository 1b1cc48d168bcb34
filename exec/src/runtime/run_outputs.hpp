// `run --forward-only --outputs OUT.npy` (issue 22 item 4): the last stage's outputs of every
// step, gathered on world rank 0 in sample order and written as one float32 .npy (atomically:
// temp file + rename, so a failed run leaves no half-written file). Private to exec/.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

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
