// DDP gradient buckets: the one assignment of parameters to flat all-reduce buckets shared by the
// executor (exec/src/dp/ddp.cpp) and the simulator, so that both communicate the same bytes in the
// same order.
//
// The assignment follows PyTorch's c10d::compute_bucket_assignment_by_size as
// DistributedDataParallel uses it after its first iteration (Reducer::rebuild_buckets): parameters
// are visited in the order their gradients become ready, which for a sequential model is the
// REVERSE of registration order; each parameter is appended to the open bucket and the bucket is
// closed as soon as its size reaches its limit (size >= limit). The first bucket's limit is
// `first_bucket_cap_bytes` (1 MiB, PyTorch's _DEFAULT_FIRST_BUCKET_BYTES), every later bucket's is
// `bucket_cap_bytes`. Consequences, exactly as in PyTorch: a parameter larger than the limit closes
// the bucket it joins (it gets its own bucket when that bucket was empty), and a bucket may exceed
// its limit by its last parameter. All gradients are float32 on one device, so PyTorch's grouping
// by (dtype, device) is moot.
//
// Note [First bucket cap]: pipewright uses min(first_bucket_cap_bytes, bucket_cap_bytes) as the
// first limit, so that a bucket cap below 1 MiB (tests use tiny fractions of a MB) also bounds the
// first bucket; PyTorch >= 2.0 likewise drops the 1 MiB first bucket when the cap is user-set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipewright::sched {

inline constexpr std::int64_t kBytesPerMiB = 1024 * 1024;
inline constexpr std::int64_t kDefaultFirstBucketBytes = kBytesPerMiB;  // PyTorch DDP
inline constexpr double kDefaultBucketCapMb = 25.0;                     // PyTorch DDP

struct GradBucket {
  // Parameter indices (into registration order) in the order their gradients become ready.
  std::vector<std::size_t> params;
  // Byte offset of each parameter's gradient inside the bucket's flat buffer (same order as
  // `params`); offsets_bytes[k + 1] == offsets_bytes[k] + param_bytes[params[k]].
  std::vector<std::int64_t> offsets_bytes;
  std::int64_t bytes = 0;        // total size of the flat buffer
  std::int64_t limit_bytes = 0;  // the limit this bucket was filled against

  friend bool operator==(const GradBucket& a, const GradBucket& b) noexcept {
    return a.params == b.params && a.offsets_bytes == b.offsets_bytes && a.bytes == b.bytes &&
           a.limit_bytes == b.limit_bytes;
  }
  friend bool operator!=(const GradBucket& a, const GradBucket& b) noexcept { return !(a == b); }
};

struct BucketAssignment {
  std::vector<GradBucket> buckets;  // in launch order: bucket 0 is the first to become ready
  std::vector<std::size_t> bucket_of_param;  // registration index -> bucket index
  std::vector<std::size_t> slot_of_param;    // registration index -> position in its bucket

  friend bool operator==(const BucketAssignment& a, const BucketAssignment& b) noexcept {
    return a.buckets == b.buckets && a.bucket_of_param == b.bucket_of_param &&
           a.slot_of_param == b.slot_of_param;
  }
  friend bool operator!=(const BucketAssignment& a, const BucketAssignment& b) noexcept {
    return !(a == b);
  }
};

// Converts --bucket-cap-mb (MiB, fractions allowed) to bytes as PyTorch does
// (int(mb * 1024 * 1024), truncating). Throws ConfigError unless mb is finite and > 0.
[[nodiscard]] std::int64_t bucket_cap_bytes_from_mb(double mb);

// Assigns parameters (sizes in bytes, registration order) to buckets; see the top of this file.
// Pure. Throws ConfigError on a negative size or a negative cap. An empty input gives no buckets.
[[nodiscard]] BucketAssignment assign_buckets(
    const std::vector<std::int64_t>& param_bytes, std::int64_t bucket_cap_bytes,
    std::int64_t first_bucket_cap_bytes = kDefaultFirstBucketBytes);
// The bytes of each bucket assign_buckets makes (GradBucket::bytes, in order), without its maps.
[[nodiscard]] std::vector<std::int64_t> bucket_bytes(
    const std::vector<std::int64_t>& param_bytes, std::int64_t bucket_cap_bytes,
    std::int64_t first_bucket_cap_bytes = kDefaultFirstBucketBytes);

}  // namespace pipewright::sched
