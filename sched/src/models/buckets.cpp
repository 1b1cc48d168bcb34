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

BucketAssignment assign_buckets(const std::vector<std::int64_t>& param_bytes,
                                std::int64_t bucket_cap_bytes,
                                std::int64_t first_bucket_cap_bytes) {
  PW_CHECK(bucket_cap_bytes >= 0, ConfigError,
           "bucket cap must be >= 0 bytes, got " << bucket_cap_bytes);
  PW_CHECK(first_bucket_cap_bytes >= 0, ConfigError,
           "first bucket cap must be >= 0 bytes, got " << first_bucket_cap_bytes);
  const std::size_t n = param_bytes.size();
  BucketAssignment out;
  out.bucket_of_param.assign(n, 0);
  out.slot_of_param.assign(n, 0);

  // See Note [First bucket cap] in buckets.hpp.
  std::int64_t limit = std::min(first_bucket_cap_bytes, bucket_cap_bytes);
  GradBucket open;
  const auto close = [&] {
    open.limit_bytes = limit;
    out.buckets.push_back(std::move(open));
    open = GradBucket{};
  };
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t p = n - 1 - k;  // reverse registration order = gradient-ready order
    PW_CHECK(param_bytes[p] >= 0, ConfigError,
             "parameter " << p << " has a negative size (" << param_bytes[p] << " bytes)");
    out.bucket_of_param[p] = out.buckets.size();
    out.slot_of_param[p] = open.params.size();
    open.params.push_back(p);
    open.offsets_bytes.push_back(open.bytes);
    open.bytes += param_bytes[p];
    if (open.bytes >= limit) {
      close();
      limit = bucket_cap_bytes;  // every bucket after the first
    }
  }
  if (!open.params.empty()) close();
  return out;
}

}  // namespace pipewright::sched
