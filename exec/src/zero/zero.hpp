// ZeRO stages 1 and 2 (Megatron-Core's distributed optimizer; issue 43,
// /work/briefs/zero-contract.md, docs/data-parallel.md "Sharded data parallelism (ZeRO)").
//
// Note [ZeRO flat buffers]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Per local stage, over its data-parallel group of d replicas (replica r):
// - Buckets: sched::assign_buckets over the stage's trainable float32 parameters, exactly DDP's
//   (reverse registration order, first bucket min(1 MiB, cap), then the cap), so the simulator's
//   buckets are the executor's. Bucket b holds n_b elements; it is padded to p_b = ceil(n_b/d)*d
//   and cut into d pieces of q_b = p_b/d elements.
// - One flat float32 parameter buffer P and one flat float32 gradient buffer G, both the buckets
//   in index order, each bucket at offset o_b = p_0 + ... + p_{b-1}, its parameters at DDP's
//   offsets inside it; the padding is zero and stays zero. Every parameter *is* its slice of P
//   (its storage is set to P), and its .grad is its slice of G (as DDP's gradient_as_bucket_view).
// - Replica r's shard is piece r of every bucket: P[o_b + r q_b, o_b + (r+1) q_b) for each b,
//   S = sum q_b elements (Megatron's param_and_grad_buffer). The optimizer steps one tensor per
//   bucket piece, a view of P (so the update lands in P, the fp32 master: pipewright's autocast
//   keeps fp32 parameters), whose .grad is its piece of the float32 shard gradient buffer Gs.
//   AdamW / Adam / SGD are element-wise, so the shards' step is the unsharded step.
// Stage 1: gradients accumulate in G over the step's microbatches; when every gradient of a
//   bucket is final (its last accumulation, in the last microbatch's B or W), the bucket's
//   reduce-scatter G[o_b, p_b) -> Gs piece b starts (buckets in index order, as DDP's all-reduce),
//   and REDUCE_GRAD waits for them. Each replica's loss is divided by d, so the sum is the mean.
// Stage 2: after every microbatch's backward of the stage (after_backward: its B, or W with a
//   split backward) every bucket is reduce-scattered into a temporary and added into Gs (the
//   float32 shard accumulator), and G is zeroed for the next microbatch: full gradients live
//   only within one backward. These m reduce-scatters a step complete right after the backward
//   action, before the rank's next action (await_gradients, Note [Gradient waits] in
//   dp/dp_hooks.hpp; with split backward, the next microbatch's I may run before this W, so
//   nothing may still read G when the next W writes it).
// After the stage's OPTIM, every bucket's parameters are all-gathered in place (piece r of P is
//   this replica's input), asynchronously; the stage's next forward or backward waits for them
//   (before_forward / before_backward), and so do evaluation, checkpoints and the final weights
//   (settle()).
// Bytes on the wire per replica and step (ring): stage 1: RS (d-1)/d G + AG (d-1)/d P = DDP's
//   all-reduce; stage 2: m RS of G + AG of P.
//
// Note [ZeRO bf16 reduce-scatter]
// With --reduce-dtype bf16 (torch MixedPrecision's reduce_dtype, DDP's Note [DDP bf16
// reduction]) each bucket of G is copied into a bfloat16 buffer of the same layout and
// reduce-scattered as bfloat16 (the communicators sum 16-bit buffers in float32 and round once,
// Note [16-bit sums]); the reduced bfloat16 piece is widened into the float32 shard gradient
// (stage 1) or added into the float32 shard accumulator Gs (stage 2: the sum over microbatches
// stays float32). The reduce-scatter moves half the bytes; the all-gather of the float32
// parameters is unchanged.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compat/torch_compat.hpp"
#include "dp/dp_algorithm.hpp"
#include "pipewright/sched/buckets.hpp"

namespace pipewright::exec {

struct ZeroOptions {
  int stage = 1;  // 1 or 2
  std::int64_t bucket_cap_bytes = 25 * sched::kBytesPerMiB;
  std::int64_t first_bucket_cap_bytes = sched::kDefaultFirstBucketBytes;
  int num_microbatches = 1;
  std::int64_t check_replicas = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::int64_t first_step = 0;
  // Parameters (TensorImpl addresses) tied across stages: a bucket of their own each (Note [ZeRO
  // tied parameters] in zero_buckets.hpp).
  std::set<const void*> dedicated;
  // --reduce-dtype bf16 (Note [ZeRO bf16 reduce-scatter]).
  bool bf16_reduce = false;
};

class Zero final : public DataParallelAlgorithm {
 public:
  // `dp` is the stage position's data-parallel group; it must outlive this object.
  Zero(Communicator* dp, ZeroOptions options);
  ~Zero() override;
  Zero(const Zero&) = delete;
  Zero& operator=(const Zero&) = delete;

  void on_start(std::vector<StageParams>& stages) override;
  void before_forward(int stage, int microbatch) override;
  void await_parameters(int stage) override;
  void before_backward(int stage, int microbatch, bool last) override;
  void before_weight(int stage, int microbatch) override;
  void after_backward(int stage, int microbatch, bool last) override;
  void await_gradients(int stage) override;
  void reduce_grad(int stage) override;
  void after_optimizer_step(std::int64_t step) override;
  [[nodiscard]] bool clear_gradients(int stage) override;
  [[nodiscard]] int gradient_divisor() const override { return dp_->size(); }
  [[nodiscard]] std::vector<torch::Tensor> optimizer_params(int stage) override;
  // A dedicated parameter's bucket piece (Note [ZeRO tied parameters]); another: `param`.
  [[nodiscard]] torch::Tensor optimizer_tensor_of(int stage, const torch::Tensor& param) override;
  void settle() override;
  [[nodiscard]] DataParallelStats stats() const override { return stats_; }
  // Checkpoints: "layout.stage<S>" per local stage with parameters, int64 [d, r, B, then per
  // bucket n_b (elements), p_b (padded), q_b (piece)]: what a loader needs to put this
  // replica's optimizer shard back into the whole flat buffer (Note [ZeRO flat buffers]).
  // load_state refuses (ConfigError naming the stage) a layout other than this run's.
  [[nodiscard]] std::map<std::string, torch::Tensor> state() const override;
  void load_state(const std::map<std::string, torch::Tensor>& state) override;

  // Elements of this replica's shard of a local stage (tests).
  [[nodiscard]] std::int64_t shard_elements(int stage) const;

 private:
  struct Bucket {
    std::int64_t offset = 0;        // in P and G
    std::int64_t padded = 0;        // p_b
    std::int64_t piece = 0;         // q_b
    std::int64_t shard_offset = 0;  // in Gs
    std::int64_t pending = 0;
    bool launched = false;
    WorkPtr work;
  };
  struct Stage {
    StageParams params;
    std::vector<torch::Tensor> trainable;
    std::vector<torch::Tensor> grad_alias;
    std::vector<int> accumulations;
    sched::BucketAssignment assignment;
    std::vector<Bucket> buckets;
    torch::Tensor flat_params;                // P
    torch::Tensor flat_grads;                 // G
    torch::Tensor shard_grads;                // Gs
    torch::Tensor scratch;                    // stage 2: one reduce-scatter's output
    torch::Tensor wire;                       // bf16_reduce: G as bfloat16, in flight
    torch::Tensor wire_out;                   // bf16_reduce: the reduced pieces, bfloat16
    std::vector<torch::Tensor> shard_params;  // the optimizer's tensors, one per bucket piece
    std::size_t next_launch = 0;
    std::vector<WorkPtr> gathers;  // in flight since OPTIM
    std::vector<compat::NodePtr> accumulators;
    std::vector<std::uintptr_t> hook_keys;
    bool step_open = false;
    bool scattering = false;  // stage 2: a backward's reduce-scatters into scratch in flight
  };
  template <typename O, typename S>
  friend class GradAccumulatedHook;

  void on_grad_accumulated(Stage& st, std::size_t param) noexcept;
  void launch_ready(Stage& st);
  void launch(Stage& st, std::size_t b, const torch::Tensor& out, bool in_backward);
  void finish(Stage& st, std::size_t b, const torch::Tensor& out);
  // Stage 2: waits for a backward's reduce-scatters and adds them into Gs (Note [Gradient waits]).
  void finish_scatters(Stage& st);
  void open_step(Stage& st);
  void wait_gathers(Stage& st);
  [[nodiscard]] Stage& stage(int id);
  void rethrow_hook_error();

  Communicator* dp_;
  ZeroOptions options_;
  std::vector<std::unique_ptr<Stage>> stages_;
  DataParallelStats stats_;
  std::int64_t step_;
  std::exception_ptr hook_error_;
};

}  // namespace pipewright::exec
