#include "data/prefetch.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

// The first sample (in `indices` order) of `t` with a non-finite value, or -1.
std::int64_t first_nonfinite(const torch::Tensor& t) {
  if (!t.is_floating_point()) return -1;
  const auto bad = torch::isfinite(t).logical_not().reshape({t.size(0), -1}).any(1);
  const auto rows = bad.nonzero();
  return rows.numel() == 0 ? -1 : rows[0][0].item<std::int64_t>();
}

// Note [Loader priority]: the loader thread runs at nice 19, so that it reads ahead in the time
// the training thread waits (receives, collectives) rather than in its place. At the training
// thread's priority, next() woke the loader (notify_all) and the kernel let the freshly woken
// thread preempt the waker whenever ranks share cores (2 ranks on 2 cores): the step then waited
// ~0.35 ms for a batch it had prefetched, a "data" slice in every other step's trace. At nice 19
// a woken loader does not preempt, yet keeps a small share of a busy core, and runs at full
// speed whenever the training thread blocks (the idle class, tried first, starved it for 3-5 ms
// at a time under load). Where the priority cannot be set, the loader keeps the default one (no
// error: it is an optimisation).
void yield_to_training() {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  (void)setpriority(PRIO_PROCESS, tid, 19);  // Linux: the nice value of this thread alone
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> checked_batch(const Dataset& dataset,
                                                      const std::vector<std::int64_t>& indices) {
  auto xy = dataset.batch(indices);
  const torch::Tensor* parts[] = {&xy.first, &xy.second};
  for (int k = 0; k < 2; ++k) {
    const std::int64_t row = first_nonfinite(*parts[k]);
    PW_CHECK(row < 0, ConfigError,
             "data " << (k == 0 ? "x " : "y ") << (k == 0 ? dataset.x_source() : dataset.y_source())
                     << ": sample " << indices.at(static_cast<std::size_t>(row))
                     << " has a non-finite value (NaN or infinity)");
  }
  return xy;
}

BatchLoader::BatchLoader(const Dataset& dataset, ShardedBatches batches, torch::Device device,
                         std::int64_t microbatches, std::int64_t depth, bool record_waits)
    : dataset_(dataset),
      batches_(std::move(batches)),
      device_(device),
      microbatches_(microbatches),
      depth_(depth),
      record_waits_(record_waits),
      position_(batches_.position()) {
  PW_CHECK(depth >= 0, ConfigError, "--prefetch must be >= 0 steps, got " << depth);
}

BatchLoader::~BatchLoader() { stop(); }

BatchLoader::Item BatchLoader::read_one() {
  Item item;
  try {
    const auto indices = batches_.next_batch();
    item.after = batches_.position();
    auto [x, y] = checked_batch(dataset_, indices);
    for (auto& [mx, my] : split_microbatches(x.to(device_), y.to(device_), microbatches_)) {
      item.batch.xs.push_back(mx);
      item.batch.ys.push_back(my);
    }
  } catch (...) {
    item.error = std::current_exception();
  }
  return item;
}

void BatchLoader::loop() {
  // Tensors read here are leaves without history; this thread uses the intra-op thread count of
  // the training thread (1 per rank under OMP_NUM_THREADS=1) instead of OpenMP's default of all
  // cores (at::init_num_threads copies it; at::set_num_threads would change it process-wide).
  at::init_num_threads();
  yield_to_training();
  torch::NoGradGuard no_grad;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock,
                    [&] { return closed_ || static_cast<std::int64_t>(queue_.size()) < depth_; });
      if (closed_) return;
    }
    Item item = read_one();
    const bool failed = item.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(item));
    }
    changed_.notify_all();
    if (failed) return;  // the training thread rethrows it in this batch's turn
  }
}

void BatchLoader::start() {
  closed_ = false;
  thread_ = std::thread([this] { loop(); });
}

void BatchLoader::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

StepBatch BatchLoader::next(std::int64_t step) {
  if (error_) std::rethrow_exception(error_);
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const std::int64_t start_ns = now_ns();
  Item item;
  if (depth_ == 0) {
    item = read_one();
  } else {
    if (!thread_.joinable()) start();
    std::unique_lock<std::mutex> lock(mutex_);
    // No timeout needed: the loader either delivers or queues its exception, and it never waits
    // on anything but this queue.
    changed_.wait(lock, [&] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();
  }
  if (item.error) {
    error_ = item.error;  // the loader has stopped: every later call throws it too
    std::rethrow_exception(error_);
  }
  position_ = item.after;
  if (record_waits_) waits_.push_back(DataWait{step, start_ns, now_ns()});
  return std::move(item.batch);
}

void BatchLoader::seek(DataPosition pos) {
  stop();
  queue_.clear();
  error_ = nullptr;
  waits_.clear();
  batches_.seek(pos);
  position_ = pos;
}

}  // namespace pipewright::exec
