// ZeRO's buckets with tied parameters (zero_buckets.hpp: Note [ZeRO tied parameters]).
#include "zero/zero_buckets.hpp"

#include <algorithm>
#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

sched::BucketAssignment assign_zero_buckets(const std::vector<std::int64_t>& bytes,
                                            const std::vector<bool>& dedicated,
                                            std::int64_t cap_bytes, std::int64_t first_cap_bytes) {
  PW_ASSERT(bytes.size() == dedicated.size(), "assign_zero_buckets: sizes differ");
  std::vector<std::size_t> regular;  // index in `bytes` of each regular parameter
  std::vector<std::int64_t> regular_bytes;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (dedicated[i]) continue;
    regular.push_back(i);
    regular_bytes.push_back(bytes[i]);
  }
  std::vector<sched::GradBucket> buckets;
  if (!regular.empty()) {
    auto a = sched::assign_buckets(regular_bytes, cap_bytes, first_cap_bytes);
    for (auto& b : a.buckets) {
      for (auto& p : b.params) p = regular[p];
      buckets.push_back(std::move(b));
    }
  }
  // Dedicated buckets, latest registered first (the order their gradients become ready).
  for (std::size_t i = bytes.size(); i-- > 0;) {
    if (!dedicated[i]) continue;
    sched::GradBucket own;
    own.params = {i};
    own.offsets_bytes = {0};
    own.bytes = bytes[i];
    own.limit_bytes = bytes[i];
    const auto at = std::find_if(buckets.begin(), buckets.end(), [&](const sched::GradBucket& b) {
      return *std::max_element(b.params.begin(), b.params.end()) < i;
    });
    buckets.insert(at, std::move(own));
  }
  sched::BucketAssignment out;
  out.bucket_of_param.assign(bytes.size(), 0);
  out.slot_of_param.assign(bytes.size(), 0);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    for (std::size_t k = 0; k < buckets[b].params.size(); ++k) {
      out.bucket_of_param[buckets[b].params[k]] = b;
      out.slot_of_param[buckets[b].params[k]] = k;
    }
  }
  out.buckets = std::move(buckets);
  return out;
}

}  // namespace pipewright::exec
