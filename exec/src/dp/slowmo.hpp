// SlowMo and LocalSGD with fairscale's semantics (SlowMoDistributedDataParallel with the LocalSGD
// base algorithm); see docs/data-parallel.md.
//
// Note [SlowMo step]
// After the optimizer step numbered n (0-based, fairscale's num_updates):
//   slowmo    = (slowmo_lr != 1 or momentum != 0) and (n + 1) % slowmo_frequency == 0
//   localsgd  = there are several nodes and (n + 1) % localsgd_frequency == 0
//   average   = localsgd and not (memory_efficient and slowmo)
// (1) if average: node masters divide their parameters by the number of nodes and all-reduce
//     them; the other replicas of each node then receive their master's parameters;
// (2) if slowmo: with x this replica's parameters, x_old the parameters at the previous slow step
//     (the initial parameters at first), gamma the optimizer's lr, beta the slow momentum, alpha
//     the slow lr:  u <- beta u + (x_old - x) / gamma;  x_old <- x_old - alpha gamma u;  x <-
//     x_old. Memory-efficient: x_old and u are sharded over the first num_shards replicas (shard k
//     = elements [k L, (k + 1) L) of the concatenated parameters, L = ceil(total / num_shards)).
//     Every replica divides x by dp and reduces (sums) shard k to replica k, which updates its
//     shard and broadcasts the result. The reduce averages, which is why (1) is skipped then.
//     Otherwise every replica keeps full buffers and updates its own x, without communication.
//     See Note [SlowMo sharded slow step] for how the reduce and broadcast run.
// Note [SlowMo sharded slow step]: with num_shards == dp (the default up to dp = 32) "reduce
// shard k to replica k, then broadcast shard k from k" is, byte for byte, one reduce-scatter of
// x cut into dp equal pieces followed by one all-gather (Communicator::reduce_scatter /
// all_gather, as ZeRO runs them). So on_start moves the trainable parameters into one flat
// buffer of dp * L elements (L as above; the padding past `total` stays zero), from
// Communicator::allocate_collective_buffer on the CPU (among the replicas of one host Gloo then
// reduces and gathers it in shared memory, Note [Shared-memory sharded collectives]; across
// hosts it is the TCP ring, Note [TCP ring collectives]), and the slow step is: x /= dp in
// place, an in-place reduce-scatter (piece k = shard k lands on replica k), the owner's update
// of its piece, and an in-place all-gather, after which every parameter (a view of the buffer)
// holds the new x: no copies, no memory beyond the padding. A parameter that does not alias its
// slot (one tensor listed twice, or whose storage someone replaced) is copied in and out, as
// the old path did. Results: at dp 2 bit-identical to the reduce + broadcast (a sum of two is
// order-free); at dp > 2 each piece is summed in one fixed order by every backend (shared
// memory: rank order; TCP ring: from replica k+1 around to k), which may differ from Gloo's
// reduce in the last bit; the all-gather copies bits, so the replicas stay identical. Stats:
// one reduce-scatter and one all-gather (2 collectives), counted as the (n-1)/n of the
// parameters' bytes each that the reduce + broadcast moved, which is what the simulator's bytes
// model counts (sim/src/costs/data_parallel.cpp); the padding (< dp elements) is not counted.
// With num_shards < dp the per-shard reduces and broadcasts above remain.
// With several replicas per node (procs_per_node), every REDUCE_GRAD all-reduces (averages) the
// gradients within the node, so the replicas of a node stay identical, as fairscale's
// backward hook does. There is no gradient communication across nodes: that is the point.
// The concatenated parameters are those of every local stage, in stage order, then registration
// order (trainable float32 parameters only).
// With the SGP base (--slowmo-base sgp, fairscale's SlowMoBaseAlgorithm.SGP), (1) is replaced by
// one push-sum gossip round after every step (Note [SGP step] in sgp.hpp); (2) is unchanged.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "dp/dp_algorithm.hpp"

namespace pipewright::exec {

struct SlowMoOptions {
  std::int64_t localsgd_frequency = 3;
  std::int64_t slowmo_frequency = 48;
  double momentum = 0.5;   // beta
  double slowmo_lr = 1.0;  // alpha
  bool memory_efficient = true;
  int num_shards = 1;         // 1..dp (memory-efficient only)
  int replicas_per_node = 1;  // consecutive replicas on one node
  double learning_rate = 0;   // gamma: the optimizer's lr (> 0)
  std::int64_t check_replicas = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::int64_t first_step = 0;
  bool sgp_base = false;  // gossip every step instead of LocalSGD averaging
};

class PushSumGossip;

class SlowMo final : public DataParallelAlgorithm {
 public:
  // `dp` is the stage position's data-parallel group (rank = replica index); it must outlive
  // this object. Throws ConfigError on invalid options.
  SlowMo(Communicator* dp, SlowMoOptions options);
  ~SlowMo() override;

  void on_start(std::vector<StageParams>& stages) override;
  void before_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void reduce_grad(int stage) override;
  void after_optimizer_step(std::int64_t step) override;
  [[nodiscard]] DataParallelStats stats() const override { return stats_; }
  [[nodiscard]] std::map<std::string, torch::Tensor> state() const override;
  void load_state(const std::map<std::string, torch::Tensor>& state) override;

  // Whether a step averaged the parameters, ran the slow step (for tests and logs).
  [[nodiscard]] bool averages_after(std::int64_t step) const noexcept;
  [[nodiscard]] bool slow_step_after(std::int64_t step) const noexcept;

 private:
  [[nodiscard]] torch::Tensor flat_params() const;
  void set_params(const torch::Tensor& flat);
  void average_parameters(std::int64_t step);
  void slow_momentum_step(std::int64_t step);
  void update_shard(torch::Tensor x, torch::Tensor x_old, torch::Tensor u) const;
  [[nodiscard]] bool is_owner() const noexcept;
  // Note [SlowMo sharded slow step].
  void make_flat_buffer();
  void sharded_slow_step(std::int64_t step);

  Communicator* dp_;
  SlowMoOptions options_;
  int replica_ = 0;
  int nodes_ = 1;
  bool slowmo_ = false;  // false: plain LocalSGD (slowmo_lr == 1 and momentum == 0)
  std::unique_ptr<Communicator> node_comm_;    // replicas of this node (replicas_per_node > 1)
  std::unique_ptr<Communicator> master_comm_;  // first replica of every node (when split)
  Communicator* averaging_comm_ = nullptr;     // dp_ or master_comm_ (null on non-masters)
  std::vector<StageParams> stages_;
  std::vector<torch::Tensor> trainable_;  // concatenation order
  std::int64_t total_ = 0;
  std::int64_t shard_len_ = 0;
  torch::Tensor x_old_;  // this replica's shard (or everything), float32
  torch::Tensor u_;      // slow momentum buffer, same extent
  // Note [SlowMo sharded slow step]: dp * shard_len_ elements holding the trainable parameters
  // (slots_[i] is trainable_[i]'s slot); undefined on the per-shard path.
  torch::Tensor flat_;
  std::vector<torch::Tensor> slots_;
  std::unique_ptr<PushSumGossip> gossip_;  // sgp_base only
  DataParallelStats stats_;
};

}  // namespace pipewright::exec
