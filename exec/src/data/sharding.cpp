#include "data/sharding.hpp"

#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

std::uint64_t SplitMix64::next() noexcept {
  state_ += 0x9e3779b97f4a7c15ULL;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t bound) noexcept {
  // Reject the top partial range so that every residue is equally likely.
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % bound);
  for (;;) {
    const std::uint64_t x = next();
    if (x < limit) return x % bound;
  }
}

std::vector<std::int64_t> seeded_permutation(std::int64_t n, std::uint64_t seed,
                                             std::int64_t epoch) {
  PW_CHECK(n >= 0, ConfigError, "permutation size must be >= 0, got " << n);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) perm[static_cast<std::size_t>(i)] = i;
  // Derive the stream from (seed, epoch): one splitmix64 output of the seed, xor the epoch, so
  // that nearby seeds and epochs give unrelated streams.
  SplitMix64 mix(seed);
  SplitMix64 rng(mix.next() ^ (static_cast<std::uint64_t>(epoch) * 0xd1b54a32d192ed03ULL));
  for (std::int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(j)]);
  }
  return perm;
}

std::vector<std::int64_t> shard_indices(std::int64_t n, int dp, int replica, std::uint64_t seed,
                                        std::int64_t epoch, bool shuffle) {
  PW_CHECK(n >= 1, ConfigError, "the dataset must have at least one row, got " << n);
  PW_CHECK(dp >= 1, ConfigError, "--dp must be >= 1, got " << dp);
  PW_CHECK(replica >= 0 && replica < dp, ConfigError,
           "replica " << replica << " is outside 0.." << dp - 1);
  PW_CHECK(epoch >= 0, ConfigError, "epoch must be >= 0, got " << epoch);
  const std::int64_t total = (n + dp - 1) / dp * dp;
  std::vector<std::int64_t> order;
  if (shuffle) {
    order = seeded_permutation(total, seed, epoch);
  }
  std::vector<std::int64_t> shard;
  shard.reserve(static_cast<std::size_t>(total / dp));
  for (std::int64_t p = replica; p < total; p += dp) {
    const std::int64_t pos = shuffle ? order[static_cast<std::size_t>(p)] : p;
    shard.push_back(pos % n);  // padding positions wrap to the start of the dataset
  }
  return shard;
}

DataPosition position_after_steps(std::int64_t n, int dp, std::int64_t batch_size,
                                  std::int64_t steps) {
  PW_CHECK(n >= 1 && dp >= 1 && batch_size >= 1 && steps >= 0, ConfigError,
           "data position after " << steps << " steps of " << batch_size << " rows at dp " << dp
                                  << " over " << n << " rows: invalid arguments");
  const std::int64_t shard = (n + dp - 1) / dp;
  const std::int64_t rows = steps * batch_size;
  if (rows == 0) return DataPosition{0, 0};
  const std::int64_t epoch = (rows - 1) / shard;
  return DataPosition{epoch, rows - epoch * shard};
}

ShardedBatches::ShardedBatches(std::int64_t n, int dp, int replica, std::uint64_t seed,
                               bool shuffle, std::int64_t batch_size)
    : n_(n), dp_(dp), replica_(replica), seed_(seed), shuffle_(shuffle), batch_size_(batch_size) {
  PW_CHECK(batch_size >= 1, ConfigError, "--batch-size must be >= 1, got " << batch_size);
  shard_ = shard_indices(n_, dp_, replica_, seed_, 0, shuffle_);  // validates the arguments
  loaded_epoch_ = 0;
  shard_size_ = static_cast<std::int64_t>(shard_.size());
}

void ShardedBatches::load_epoch() {
  if (loaded_epoch_ == pos_.epoch) return;
  shard_ = shard_indices(n_, dp_, replica_, seed_, pos_.epoch, shuffle_);
  loaded_epoch_ = pos_.epoch;
}

std::vector<std::int64_t> ShardedBatches::next_batch() {
  std::vector<std::int64_t> batch;
  batch.reserve(static_cast<std::size_t>(batch_size_));
  while (static_cast<std::int64_t>(batch.size()) < batch_size_) {
    if (pos_.offset == shard_size_) {
      ++pos_.epoch;
      pos_.offset = 0;
    }
    load_epoch();
    batch.push_back(shard_[static_cast<std::size_t>(pos_.offset)]);
    ++pos_.offset;
  }
  return batch;
}

void ShardedBatches::seek(DataPosition pos) {
  PW_CHECK(pos.epoch >= 0 && pos.offset >= 0 && pos.offset <= shard_size_, ConfigError,
           "data position (epoch " << pos.epoch << ", offset " << pos.offset
                                   << ") is outside the shard of " << shard_size_ << " rows");
  pos_ = pos;
}

}  // namespace pipewright::exec
