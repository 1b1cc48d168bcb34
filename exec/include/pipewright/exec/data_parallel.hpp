// Configuration of data parallelism across pipeline replicas (issue 7): the algorithm (DDP with
// bucketed, overlapped gradient all-reduce; SlowMo or plain LocalSGD averaging parameters every
// few steps), its options, replica checks, and checkpointing. Torch-free so that tools/ (the
// `pipewright run` flags and --config keys) can fill it. docs/data-parallel.md describes the
// semantics; exec/src/ddp.hpp and exec/src/slowmo.hpp implement them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pipewright::exec {

enum class DpAlgorithm : std::uint8_t {
  kDdp,       // gradients averaged every step (PyTorch DistributedDataParallel)
  kSlowMo,    // fairscale SlowMo with the LocalSGD base algorithm
  kLocalSgd,  // LocalSGD alone (SlowMo with slowmo_lr = 1, momentum = 0)
};

// "ddp", "slowmo", "localsgd". "sgp" (SlowMo's gossip base algorithm) is rejected with a
// ConfigError saying it is not supported; anything else is a ConfigError listing the names.
[[nodiscard]] DpAlgorithm parse_dp_algorithm(const std::string& name);
[[nodiscard]] const char* to_string(DpAlgorithm algorithm) noexcept;

struct DataParallelConfig {
  DpAlgorithm algorithm = DpAlgorithm::kDdp;

  // DDP. Bucket cap in MiB (fractions allowed); the first bucket is min(1 MiB, cap).
  double bucket_cap_mb = 25.0;
  // DDP ablation: launch every bucket's all-reduce at REDUCE_GRAD instead of during backward.
  bool ddp_overlap = true;

  // Every N steps verify that the replicas of each stage hold bit-identical parameters
  // (0 = never). Fails with ReplicaDivergenceError naming the diverged replica.
  std::int64_t check_replicas = 0;

  // SlowMo / LocalSGD. Unset optionals take the defaults below; setting a SlowMo-only option
  // with another algorithm is a ConfigError (validate_data_parallel).
  std::optional<std::int64_t> localsgd_frequency;  // default 3
  std::optional<std::int64_t> slowmo_frequency;    // default 48
  std::optional<double> slowmo_momentum;           // default 0.5
  std::optional<double> slowmo_lr;                 // default 1.0
  std::optional<bool> slowmo_memory_efficient;     // default true
  std::optional<int> slowmo_num_shards;            // default min(32, dp)
  // Ranks per node (consecutive world ranks share a node). With several replicas of a stage on
  // one node, SlowMo all-reduces gradients within the node every step and averages parameters
  // only across nodes, as fairscale does. Default 1.
  std::optional<int> procs_per_node;

  // Checkpoints of the whole training state, one file per rank under checkpoint_dir.
  std::string checkpoint_dir;         // empty: no checkpoints
  std::int64_t checkpoint_every = 0;  // also every N steps (0: only after the last step)
  bool resume = false;                // start from the last complete checkpoint in checkpoint_dir
  bool save_replicas = false;         // --save also writes <FILE>.replica<R>.safetensors

  [[nodiscard]] std::int64_t localsgd_frequency_or_default() const {
    return localsgd_frequency.value_or(3);
  }
  [[nodiscard]] std::int64_t slowmo_frequency_or_default() const {
    return slowmo_frequency.value_or(48);
  }
  // LocalSGD is SlowMo with these two fixed.
  [[nodiscard]] double slowmo_momentum_or_default() const {
    return algorithm == DpAlgorithm::kLocalSgd ? 0.0 : slowmo_momentum.value_or(0.5);
  }
  [[nodiscard]] double slowmo_lr_or_default() const {
    return algorithm == DpAlgorithm::kLocalSgd ? 1.0 : slowmo_lr.value_or(1.0);
  }
  [[nodiscard]] bool slowmo_memory_efficient_or_default() const {
    return slowmo_memory_efficient.value_or(true);
  }
  [[nodiscard]] int slowmo_num_shards_or_default(int dp) const {
    return slowmo_num_shards.value_or(dp < 32 ? dp : 32);
  }
  [[nodiscard]] int procs_per_node_or_default() const { return procs_per_node.value_or(1); }
};

// Communication counters of one rank's data-parallel algorithm, for logs and benchmarks.
// wire_bytes models what the rank puts on the network with the usual algorithms: an all-reduce
// of B bytes over n ranks sends 2 (n - 1) / n * B (ring), a reduce or a broadcast (n - 1) / n * B
// (NCCL's "bus bandwidth" convention), so SlowMo's reduce + broadcast costs one all-reduce.
struct DataParallelStats {
  std::int64_t steps = 0;
  std::int64_t collectives = 0;          // collective calls issued
  std::uint64_t payload_bytes = 0;       // sizes of the buffers handed to those collectives
  double wire_bytes = 0;                 // see above
  std::int64_t buckets_in_backward = 0;  // DDP: bucket all-reduces started during backward
  std::int64_t buckets_at_reduce = 0;    // DDP: started at REDUCE_GRAD (no overlap)
  std::int64_t exposed_wait_ns = 0;      // time the rank blocked waiting for data-parallel comm
  std::int64_t replica_checks = 0;       // --check-replicas verifications done
  // The start-up broadcast of parameters from replica 0, kept out of the per-step counters.
  std::uint64_t setup_payload_bytes = 0;
  double setup_wire_bytes = 0;
};

// Checks the configuration against the mesh (pp stages positions x dp replicas): bucket cap > 0,
// frequencies >= 1, 0 <= momentum < 1, slowmo_lr > 0, 1 <= num_shards <= dp, procs_per_node
// compatible with the mesh, SlowMo-only options only with slowmo/localsgd, check_replicas >= 0,
// checkpoint_every >= 0, --resume only with a checkpoint dir. Throws ConfigError naming the flag.
void validate_data_parallel(const DataParallelConfig& config, int pp, int dp);

// Replicas of each data-parallel group that share a node, given procs_per_node ranks per node
// and rank = dp_index * pp + pp_index: procs_per_node / pp when procs_per_node is a multiple of
// pp, else 1 (validate_data_parallel rejects the other cases).
[[nodiscard]] int replicas_per_node(int procs_per_node, int pp) noexcept;

}  // namespace pipewright::exec
