// ZeRO stage 3 (FSDP: sharded parameters; issue 43, /work/briefs/zero-contract.md,
// docs/data-parallel.md "ZeRO-3").
//
// Note [ZeRO-3 sharded parameters]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The layout is ZeRO-1/2's (Note [ZeRO flat buffers] in zero.hpp): per local stage, DDP's
// buckets over its trainable float32 parameters, bucket b padded to p_b = ceil(n_b/d) d elements
// and cut into d pieces of q_b; replica r's shard is piece r of every bucket, S = sum q_b.
// - Persistent per replica: the parameter shard (S floats, the fp32 master the optimizer steps,
//   one tensor per bucket piece), its gradient accumulator Gs (S floats) and the optimizer state
//   of the shard. Nothing of size P stays allocated between the plan's windows.
// - The full flat parameter buffer P (all buckets, padded) exists only inside a window: the
//   plan's sUNSHARD allocates its storage and starts one all-gather per bucket (piece r of the
//   shard -> bucket b of P); the stage's next compute (F, B, I or W) waits for them. sRESHARD
//   frees the storage. Every parameter is a view of P's one StorageImpl, which keeps its identity
//   while its memory is given back (nbytes 0) and re-allocated (FSDP1's storage.resize_(0) and
//   back): the parameters' TensorImpls and version counters never change, so the autograd graph's
//   saved parameters (an F before a RESHARD, its B after the next UNSHARD) read the re-gathered
//   values. Autocast's 16-bit casts are made from P in each forward (its cache is cleared when the
//   forward leaves autocast), so under --precision bf16 they follow the gathered parameters.
// - Compute of a stage whose parameters are not gathered (outside its UNSHARD..RESHARD window)
//   throws InvalidPlanError naming the rank, stage, action and microbatch before anything reads
//   the freed memory (validate() refuses such plans already; this is the executor's own guard).
// - Gradients as ZeRO-2, per backward (B, or W with a split backward): autograd accumulates each
//   parameter's gradient into its own .grad; when every parameter of a bucket has its gradient
//   (buckets in index order, as DDP's), the gradients are copied into a padded bucket buffer,
//   the .grad tensors are released, and the bucket's reduce-scatter starts (at most two in
//   flight: their buffers are the only full-size gradients alive). The last ones are waited for
//   right after the backward action (await_gradients, Note [Gradient waits] in dp/dp_hooks.hpp),
//   outside its measured time. On CPU its output is this
//   replica's piece of the bucket buffer itself (in place: the bucket is scratch once the
//   collective has it), which saves a piece-sized buffer per bucket in flight (8 MiB at the
//   peak of bench/zero_memory.sh; Gloo over TCP holds a receive buffer of the bucket's size
//   too, Note [Gloo sharded collectives]); on a GPU it is a piece-sized buffer. The
//   end of the backward (after_backward) launches the rest and adds every piece into Gs. So a
//   stage's full gradients never exist at once. Each replica's loss is divided by d.
// - --reduce-dtype bf16: each bucket is copied into a bfloat16 buffer and reduce-scattered as
//   bfloat16 (summed in float32, rounded once: Note [ZeRO bf16 reduce-scatter] in zero.hpp); the
//   reduced piece is added into the float32 Gs, so the sum over microbatches stays float32. The
//   reduce-scatters move half their float32 bytes; the all-gathers of the parameters do not change.
// - Tied parameters (GPT-2's wte / lm_head across the first and last stage) and Chimera's
//   replicated stages: each tied parameter is a bucket of its own, cut the same way in every
//   stage holding a copy (Note [ZeRO tied parameters]); optimizer_tensor_of names its piece of
//   the shard, whose gradient (a piece of Gs) the tied exchange sums over the pipeline group
//   before OPTIM. The exchange touches only shards, never P, so it needs no window: each holder's
//   UNSHARD..RESHARD windows stay its own, and after the identical OPTIMs every holder's next
//   UNSHARD gathers the same values.
// - OPTIM steps the shard; no all-gather follows (the next UNSHARD gathers the new values).
// - Outside a step (evaluation, checkpoints, --save, --check-replicas, the final weights),
//   settle() gathers every stage into P (counted as set-up bytes) and keeps it until the
//   stage's next UNSHARD, which then takes the shard back from P instead of gathering, or until
//   OPTIM makes it stale (freed). Checkpoints hold the shard (state()), not P.
// Bytes on the wire per replica and step (ring): m reduce-scatters of G + one all-gather of P
// per UNSHARD: (m G + u P)(d-1)/d, u = the stage's UNSHARDs per step (the plan's placement).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compat/torch_compat.hpp"
#include "dp/dp_algorithm.hpp"
#include "pipewright/sched/buckets.hpp"
#include "zero/zero.hpp"

namespace pipewright::exec {

class Zero3 final : public DataParallelAlgorithm {
 public:
  // `dp` is the stage position's data-parallel group; it must outlive this object. `world_rank`
  // names this rank in errors. options.stage must be 3.
  Zero3(Communicator* dp, ZeroOptions options, int world_rank);
  ~Zero3() override;
  Zero3(const Zero3&) = delete;
  Zero3& operator=(const Zero3&) = delete;

  void on_start(std::vector<StageParams>& stages) override;
  void before_forward(int stage, int microbatch) override;
  void await_parameters(int stage) override;
  void before_backward(int stage, int microbatch, bool last) override;
  void before_weight(int stage, int microbatch) override;
  void unshard(int stage) override;
  void reshard(int stage) override;
  void after_backward(int stage, int microbatch, bool last) override;
  void await_gradients(int stage) override;
  void reduce_grad(int stage) override;
  void after_optimizer_step(std::int64_t step) override;
  [[nodiscard]] bool clear_gradients(int stage) override;
  [[nodiscard]] int gradient_divisor() const override { return dp_->size(); }
  [[nodiscard]] std::vector<torch::Tensor> optimizer_params(int stage) override;
  // A dedicated (tied) parameter's bucket piece of the shard (Note [ZeRO tied parameters]);
  // another: `param`.
  [[nodiscard]] torch::Tensor optimizer_tensor_of(int stage, const torch::Tensor& param) override;
  void settle() override;
  [[nodiscard]] DataParallelStats stats() const override { return stats_; }
  // Checkpoints: "layout.stage<S>" as ZeRO-1/2 (zero.hpp) and "param_shard.stage<S>", this
  // replica's parameter shard (S floats: the rank file holds no whole trainable parameter).
  // load_state refuses (ConfigError naming the stage) another layout, then takes the shard and
  // drops a gathered P, so the next UNSHARD gathers the loaded values.
  [[nodiscard]] std::map<std::string, torch::Tensor> state() const override;
  void load_state(const std::map<std::string, torch::Tensor>& state) override;
  // The parameter shards and gradient accumulators (Gs), P where gathered, and the stages'
  // other (frozen) parameters: what the rank holds of its parameters and gradients.
  [[nodiscard]] std::int64_t resident_state_bytes() const override;

  // Tests: elements of this replica's shard of a local stage, and whether the stage's full
  // parameter buffer is allocated now (bytes of P's storage, 0 while sharded).
  [[nodiscard]] std::int64_t shard_elements(int stage) const;
  [[nodiscard]] std::int64_t gathered_bytes(int stage) const;

 private:
  enum class Params { kSharded, kGathering, kGathered, kSettled };
  struct Bucket {
    std::int64_t elements = 0;      // n_b
    std::int64_t offset = 0;        // o_b in P
    std::int64_t padded = 0;        // p_b
    std::int64_t piece = 0;         // q_b
    std::int64_t shard_offset = 0;  // in the shard and Gs
    std::vector<std::size_t> params;
    std::int64_t pending = 0;  // parameters still without this backward's gradient
  };
  struct InFlight {
    std::size_t bucket = 0;
    torch::Tensor in;   // the bucket's gradients, padded
    torch::Tensor out;  // this replica's piece of their sum
    WorkPtr work;
  };
  struct Stage {
    StageParams params;
    std::vector<torch::Tensor> trainable;
    std::vector<std::int64_t> at;  // each trainable parameter's offset in P
    std::vector<std::size_t> bucket_of;
    std::vector<Bucket> buckets;
    std::int64_t total = 0;  // elements of P
    torch::Tensor flat;      // P; its storage's memory exists only while gathered
    c10::Allocator* allocator = nullptr;
    torch::Tensor shard;        // S floats: this replica's parameters (persistent)
    torch::Tensor shard_grads;  // Gs
    std::vector<torch::Tensor> shard_params;
    Params state = Params::kSharded;
    std::vector<WorkPtr> gathers;
    std::vector<bool> got;  // per parameter: its gradient of this backward arrived
    std::size_t next_launch = 0;
    std::deque<InFlight> in_flight;
    std::vector<compat::NodePtr> accumulators;
    std::vector<std::uintptr_t> hook_keys;
  };
  template <typename O, typename S>
  friend class GradAccumulatedHook;

  void on_grad_accumulated(Stage& st, std::size_t param) noexcept;
  void launch_ready(Stage& st);
  void launch(Stage& st, std::size_t b);
  void finish(Stage& st, std::size_t keep);
  void allocate(Stage& st);
  void release(Stage& st);
  void start_gathers(Stage& st);
  void wait_gathers(Stage& st);
  void require_gathered(Stage& st, const char* what, int microbatch);
  [[nodiscard]] Stage& stage(int id);
  void rethrow_hook_error();

  Communicator* dp_;
  ZeroOptions options_;
  int world_rank_;
  std::vector<std::unique_ptr<Stage>> stages_;
  DataParallelStats stats_;
  std::int64_t step_;
  std::exception_ptr hook_error_;
};

}  // namespace pipewright::exec
