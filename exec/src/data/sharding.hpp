// Data sharding across data-parallel replicas with fastai's DistributedDL semantics
// (torch-free, so it is unit-testable without libtorch and cheap to compile).
//
// For an epoch e the dataset of n rows is padded by wrapping to total = ceil(n / dp) * dp
// positions; with shuffling, positions 0..total-1 are permuted by a permutation seeded by
// (seed, e) that is identical on every replica and every platform (splitmix64 + Fisher-Yates,
// implemented here, because std::shuffle and the std distributions are implementation-defined);
// position p reads row p mod n. Replica r takes every dp-th position starting at r, so each row
// is read exactly once per epoch except the total - n padding rows, which are read twice.
// Without shuffling the order is the file order: replica r reads r, r + dp, r + 2 dp, ...
//
// Within a replica, the per-step batch is the next `batch_size` consecutive rows of its shard;
// when the shard is exhausted the next epoch's shard continues the stream (a batch may span the
// boundary), so every step has a full batch.
#pragma once

#include <cstdint>
#include <vector>

namespace pipewright::exec {

// The splitmix64 generator (Steele, Lea, Flood 2014): a 64-bit state advanced by a constant,
// output mixed; passes BigCrush and is trivially portable.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  [[nodiscard]] std::uint64_t next() noexcept;
  // Uniform integer in [0, bound) without modulo bias (rejection sampling). bound > 0.
  [[nodiscard]] std::uint64_t below(std::uint64_t bound) noexcept;

 private:
  std::uint64_t state_;
};

// A permutation of 0..n-1 determined only by (seed, epoch). Throws ConfigError if n < 0.
[[nodiscard]] std::vector<std::int64_t> seeded_permutation(std::int64_t n, std::uint64_t seed,
                                                           std::int64_t epoch);

// Rows (indices into the dataset) of `replica`'s shard for `epoch`, in reading order; its size is
// ceil(n / dp). Throws ConfigError unless n >= 1, dp >= 1, 0 <= replica < dp, epoch >= 0.
[[nodiscard]] std::vector<std::int64_t> shard_indices(std::int64_t n, int dp, int replica,
                                                      std::uint64_t seed, std::int64_t epoch,
                                                      bool shuffle);

// Where a replica's stream of rows stands: the epoch and the next position within its shard.
// Saved in checkpoints so that a resumed run reads exactly the rows an uninterrupted one would.
struct DataPosition {
  std::int64_t epoch = 0;
  std::int64_t offset = 0;
  friend bool operator==(const DataPosition& a, const DataPosition& b) noexcept {
    return a.epoch == b.epoch && a.offset == b.offset;
  }
};

// Where every replica's stream stands after `steps` batches of `batch_size` rows at `dp` replicas
// (an epoch's end is left as offset == shard size, as next_batch leaves it): what a resume at
// another dp seeks to (Note [Resuming at another dp] in runtime/checkpoint.hpp).
[[nodiscard]] DataPosition position_after_steps(std::int64_t n, int dp, std::int64_t batch_size,
                                                std::int64_t steps);

// The stream of per-step batches of one replica.
class ShardedBatches {
 public:
  // Throws ConfigError on invalid arguments (see shard_indices; batch_size >= 1).
  ShardedBatches(std::int64_t n, int dp, int replica, std::uint64_t seed, bool shuffle,
                 std::int64_t batch_size);

  // The next batch_size rows of the stream.
  [[nodiscard]] std::vector<std::int64_t> next_batch();

  [[nodiscard]] DataPosition position() const noexcept { return pos_; }
  // Jumps to a saved position. Throws ConfigError when it is outside the shard.
  void seek(DataPosition pos);
  [[nodiscard]] std::int64_t shard_size() const noexcept { return shard_size_; }

 private:
  void load_epoch();

  std::int64_t n_;
  int dp_;
  int replica_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t batch_size_;
  std::int64_t shard_size_;
  DataPosition pos_;
  std::int64_t loaded_epoch_ = -1;
  std::vector<std::int64_t> shard_;
};

}  // namespace pipewright::exec
