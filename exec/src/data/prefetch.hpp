// The executor's data loader (issue 24, item 5): each step's batch read from the dataset, split
// into microbatches and moved to the device, on a background thread while the previous steps
// compute. Private to exec/: it names torch types.
//
// Note [Prefetching loader]: a loader thread runs ahead of training by at most `depth` steps
// (a bounded queue); depth 0 reads synchronously on the training thread, as before issue 24. The
// order of batches, and so the weights trained, do not depend on the depth: the thread walks the
// same ShardedBatches stream the training thread would. An exception while reading a batch
// (a bad sample: ConfigError naming the file and sample index) is queued in that batch's place, so
// the training thread rethrows it at the step that would have read it, and the steps before it
// train as without prefetching. position() is the stream position after the last batch the
// TRAINING thread took, never the loader's read-ahead, so checkpoints resume bit-exactly. The
// destructor closes the queue and joins the thread, so a step that throws cannot leave the
// loader blocked (a full queue) or the process hanging at exit.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.hpp"
#include "data/sharding.hpp"
#include "report/run_report.hpp"

namespace pipewright::exec {

// One step's input: microbatches on the device.
struct StepBatch {
  std::vector<torch::Tensor> xs;
  std::vector<torch::Tensor> ys;
};

// dataset.batch(indices) with every float value checked: a NaN or infinity in a sample throws
// ConfigError naming the data file and the sample index (row), since the step that trains on it
// would only report a non-finite loss.
[[nodiscard]] std::pair<torch::Tensor, torch::Tensor> checked_batch(
    const Dataset& dataset, const std::vector<std::int64_t>& indices);

class BatchLoader {
 public:
  // `dataset` must outlive the loader; `batches` is the replica's stream (moved in). depth >= 0:
  // the steps read ahead (0: synchronously); record_waits: keep how long each next() waited.
  // Throws ConfigError if depth < 0.
  BatchLoader(const Dataset& dataset, ShardedBatches batches, torch::Device device,
              std::int64_t microbatches, std::int64_t depth, bool record_waits);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next step's microbatches; blocks until the loader has them. Rethrows what reading them
  // threw (the loader then stops; a later call throws again).
  // `step` labels the recorded wait.
  [[nodiscard]] StepBatch next(std::int64_t step);
  // Where the stream stands after the batches next() returned (checkpoints save it).
  [[nodiscard]] DataPosition position() const noexcept { return position_; }
  // Jumps to a saved position: read-ahead batches and recorded waits are dropped. Throws
  // ConfigError outside the shard.
  void seek(DataPosition pos);
  // With record_waits: one entry per next() since construction or the last seek().
  [[nodiscard]] const std::vector<DataWait>& waits() const noexcept { return waits_; }

 private:
  struct Item {
    StepBatch batch;
    DataPosition after;        // stream position after this batch
    std::exception_ptr error;  // set instead of batch when reading it failed
  };
  Item read_one();  // on whichever thread loads; catches into Item::error
  void start();
  void stop();
  void loop();

  const Dataset& dataset_;
  ShardedBatches batches_;  // touched only by the loader thread while it runs
  torch::Device device_;
  std::int64_t microbatches_;
  std::int64_t depth_;
  bool record_waits_;
  std::vector<DataWait> waits_;
  DataPosition position_;
  std::exception_ptr error_;  // what a batch threw; next() rethrows it from then on

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  bool closed_ = false;
  std::thread thread_;
};

}  // namespace pipewright::exec
