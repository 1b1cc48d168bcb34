#include "pipewright/sched/buckets.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipewright/graph/error.hpp"

namespace pipewright::sched {

std::int64_t bucket_cap_bytes_from_mb(double mb) {
  PW_CHECK(std::isfinite(mb) && mb > 0.0, ConfigError,
           "--bucket-cap-mb must be a positive number of MiB, got " << mb);
  const double bytes = mb * static_cast<double>(kBytesPerMiB);
  PW_CHECK(bytes < static_cast<double>(std::numeric_limits<std::int64_t>::max()), ConfigError,
           "--bucket-cap-mb " << mb << " is too large");
  return static_cast<std::int64_t>(bytes);  // truncates, like PyTorch's int(mb * 1024 * 1024)
}

namespace {

// The one bucketing rule (Note [First bucket cap] in buckets.hpp): parameters in reverse
// registration order (gradient-ready order) fill a bucket until it holds at least its cap (the
// first bucket's, then bucket_cap_bytes). Calls add(p) for each parameter p, then close(limit)
// after each bucket (the last one possibly under its cap).
template <typename Add, typename Close>
void fill_buckets(const std::vector<std::int64_t>& param_bytes, std::int64_t bucket_cap_bytes,
                  std::int64_t first_bucket_cap_bytes, Add add, Close close) {
  PW_CHECK(bucket_cap_bytes >= 0, ConfigError,
           "bucket cap must be >= 0 bytes, got " << bucket_cap_bytes);
  PW_CHECK(first_bucket_cap_bytes >= 0, ConfigError,
           "first bucket cap must be >= 0 bytes, got " << first_bucket_cap_bytes);
  const std::size_t n = param_bytes.size();
  std::int64_t limit = std::min(first_bucket_cap_bytes, bucket_cap_bytes);
  std::int64_t bytes = 0;
  bool open = false;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t p = n - 1 - k;
    PW_CHECK(param_bytes[p] >= 0, ConfigError,
             "parameter " << p << " has a negative size (" << param_bytes[p] << " bytes)");
    add(p);
    open = true;
    bytes += param_bytes[p];
    if (bytes >= limit) {
      close(limit);
      bytes = 0;
      open = false;
      limit = bucket_cap_bytes;  // every bucket after the first
    }
  }
  if (open) close(limit);
}

}  // namespace

BucketAssignment assign_buckets(const std::vector<std::int64_t>& param_bytes,
                                std::int64_t bucket_cap_bytes,
                                std::int64_t first_bucket_cap_bytes) {
  BucketAssignment out;
  out.bucket_of_param.assign(param_bytes.size(), 0);
  out.slot_of_param.assign(param_bytes.size(), 0);
  GradBucket open;
  fill_buckets(
      param_bytes, bucket_cap_bytes, first_bucket_cap_bytes,
      [&](std::size_t p) {
        out.bucket_of_param[p] = out.buckets.size();
        out.slot_of_param[p] = open.params.size();
        open.params.push_back(p);
        open.offsets_bytes.push_back(open.bytes);
        open.bytes += param_bytes[p];
      },
      [&](std::int64_t limit) {
        open.limit_bytes = limit;
        out.buckets.push_back(std::move(open));
        open = GradBucket{};
      });
  return out;
}

std::vector<std::int64_t> bucket_bytes(const std::vector<std::int64_t>& param_bytes,
                                       std::int64_t bucket_cap_bytes,
                                       std::int64_t first_bucket_cap_bytes) {
  std::vector<std::int64_t> out;
  std::int64_t bytes = 0;
  fill_buckets(
      param_bytes, bucket_cap_bytes, first_bucket_cap_bytes,
      [&](std::size_t p) { bytes += param_bytes[p]; },
      [&](std::int64_t) {
        out.push_back(bytes);
        bytes = 0;
      });
  return out;
}

}  // namespace pipewright::sched
