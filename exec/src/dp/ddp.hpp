// DDP: gradients averaged over the replicas of each stage every step, through flat buckets whose
// all-reduce starts during the backward of the last microbatch, as soon as every gradient of the
// bucket is final (PyTorch DistributedDataParallel with gradient_as_bucket_view).
//
// Note [DDP gradient buckets]
// - Buckets: sched::assign_buckets over the stage's trainable parameters (reverse registration
//   order, first bucket min(1 MiB, cap), then the cap), so the simulator models the same ones.
// - Each parameter's gradient lives in its slice of the bucket's flat buffer (an alias tensor),
//   so the all-reduce runs on the buffer in place. Buckets on the CPU come from
//   Communicator::allocate_collective_buffer (shared memory among the replicas of one host with
//   Gloo, Note [Shared-memory all-reduce]). After the optimizer step, clear_gradients() leaves
//   .grad undefined (instead of the optimizer's zero_grad, which zeroes); the first accumulation of
//   a step then hands autograd's new gradient to the post hook, which copies it into the alias and
//   installs the alias as .grad, so later microbatches accumulate in the buffer directly. Nothing
//   zeroes the buffers (parameters without a gradient in a step are zeroed at reduce_grad), and the
//   replicas' average needs no pass either: the interpreter divides every replica's loss by dp
//   (gradient_divisor), so the all-reduced sum is the average (for dp a power of two this is
//   bit-identical to dividing afterwards).
// - Readiness: a post hook on each parameter's gradient accumulator (the AccumulateGrad node)
//   counts the accumulations of the step. A gradient is final when it has been accumulated once
//   per microbatch; for zero-bubble plans that happens in the W of the last microbatch, for the
//   others in its B. Nothing is sent before then, so accumulation over microbatches costs no
//   communication. When every gradient of bucket b is final the buckets are started in index
//   order (b only after b - 1, so every replica issues the collectives in the same order),
//   asynchronously, and backward continues.
// - reduce_grad(s) zeroes the slices of parameters that got no gradient this step, starts what
//   is left (their buckets, or every bucket when overlap is off) and waits for stage s's buckets
//   only.
// - on_start broadcasts parameters and buffers from replica 0; --check-replicas N compares a hash
//   of every stage's parameters across replicas after every N-th step.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "compat/torch_compat.hpp"
#include "dp/dp_algorithm.hpp"
#include "pipewright/sched/buckets.hpp"

namespace pipewright::exec {

struct DdpOptions {
  std::int64_t bucket_cap_bytes = 25 * sched::kBytesPerMiB;
  std::int64_t first_bucket_cap_bytes = sched::kDefaultFirstBucketBytes;
  int num_microbatches = 1;
  bool overlap = true;
  std::int64_t check_replicas = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::int64_t first_step = 0;
  // Note [DDP bf16 reduction]: each bucket goes over the wire as bfloat16 (torch's
  // bf16_compress_hook / MixedPrecision(reduce_dtype=torch.bfloat16)).
  bool bf16_reduce = false;
};

class Ddp final : public DataParallelAlgorithm {
 public:
  // `dp` is the stage position's data-parallel group (rank = replica index); it must outlive
  // this object.
  Ddp(Communicator* dp, DdpOptions options);
  ~Ddp() override;
  Ddp(const Ddp&) = delete;
  Ddp& operator=(const Ddp&) = delete;

  void on_start(std::vector<StageParams>& stages) override;
  void before_backward(int stage, int microbatch, bool last) override;
  void after_backward(int stage, int microbatch, bool last) override;
  void reduce_grad(int stage) override;
  void after_optimizer_step(std::int64_t step) override;
  [[nodiscard]] bool clear_gradients(int stage) override;
  // Every replica's loss is divided by dp, so the all-reduced sum is the average.
  [[nodiscard]] int gradient_divisor() const override { return dp_->size(); }
  [[nodiscard]] DataParallelStats stats() const override { return stats_; }

  // The bucket assignment of a local stage (for tests and the simulator cross-check).
  [[nodiscard]] const sched::BucketAssignment& buckets_of(int stage) const;

 private:
  struct Bucket {
    torch::Tensor flat;
    torch::Tensor wire;        // bf16_reduce: the bfloat16 copy in flight
    std::int64_t pending = 0;  // parameters whose gradient is not final yet this step
    bool launched = false;
    WorkPtr work;
  };
  struct Stage {
    StageParams params;                     // as given to on_start (all tensors)
    std::vector<torch::Tensor> trainable;   // requires_grad parameters, registration order
    std::vector<torch::Tensor> grad_alias;  // per trainable parameter: slice of its bucket
    std::vector<int> accumulations;         // per trainable parameter, this step
    sched::BucketAssignment assignment;
    std::vector<Bucket> buckets;
    std::size_t next_launch = 0;  // buckets start in index order
    std::vector<compat::NodePtr> accumulators;
    std::vector<std::uintptr_t> hook_keys;
    bool step_open = false;  // a backward of this step has started
  };
  template <typename O, typename S>
  friend class GradAccumulatedHook;

  void on_grad_accumulated(Stage& st, std::size_t param) noexcept;
  void launch_ready(Stage& st, bool in_backward);
  void launch(Stage& st, std::size_t b, bool in_backward);
  void open_step(Stage& st);
  [[nodiscard]] Stage& stage(int id);
  void rethrow_hook_error();

  Communicator* dp_;
  DdpOptions options_;
  std::vector<std::unique_ptr<Stage>> stages_;
  DataParallelStats stats_;
  std::int64_t step_;
  std::exception_ptr hook_error_;  // an error inside an autograd hook, rethrown on the main path
};

}  // namespace pipewright::exec
