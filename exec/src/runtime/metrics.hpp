// The --metrics file (issue 33, item 5; docs/executor.md, "Metrics"). Torch-free.
//
// Note [Metrics file]
// ~~~~~~~~~~~~~~~~~~~
// One JSON object per line and per step, written by world rank 0 as the step ends and flushed,
// so a run that dies leaves every finished step (JSON Lines, as torchtitan's and Megatron's
// loggers write for TensorBoard/W&B importers):
//   {"step": 1, "loss": 2.31, "eval_loss": 2.40, "lr": 0.001, "grad_norm": 0.83,
//    "loss_scale": 1, "skipped": false, "step_ms": 412.5, "samples_per_s": 77.6,
//    "tokens_per_s": 9932.8, "peak_memory_bytes": [412000000, 398000000]}
// `step` counts from 1 as the log does; "eval_loss" only on steps that ended with an evaluation;
// "tokens_per_s" only for token-id models (int64 input: tokens = its elements per sample);
// "grad_norm" is the global norm before clipping (Note [Global gradient norm]); peak memory is
// each world rank's peak resident set (VmHWM), in rank order. The file is replaced at the start
// of the run; a run resumed from the checkpoint after step k keeps the file's lines of steps
// 1..k and drops the later ones (an earlier run may have gone past its last checkpoint), so every
// step appears once (issue 44).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "pipewright/exec/run.hpp"

namespace pipewright::exec {

class MetricsWriter {
 public:
  // Opens `path` for writing: empty when `resumed_step` is 0, else with the existing lines of
  // steps <= resumed_step (rewritten atomically: temp file + rename) and appending after them.
  // ConfigError naming --metrics when it cannot.
  MetricsWriter(const std::string& path, std::int64_t resumed_step);
  // tokens_per_sample 0: not a token model.
  void write(const StepLog& log, std::int64_t tokens_per_sample,
             const std::vector<std::int64_t>& peak_memory_bytes);

 private:
  std::string path_;
  std::ofstream out_;
};

// One line of the file (no newline).
[[nodiscard]] std::string metrics_line(const StepLog& log, std::int64_t tokens_per_sample,
                                       const std::vector<std::int64_t>& peak_memory_bytes);

}  // namespace pipewright::exec
