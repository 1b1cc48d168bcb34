#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/buckets.hpp"

namespace pipewright::sched {
namespace {

using Indices = std::vector<std::size_t>;

std::vector<Indices> params_of(const BucketAssignment& a) {
  std::vector<Indices> out;
  for (const GradBucket& b : a.buckets) out.push_back(b.params);
  return out;
}

TEST(Buckets, ReverseRegistrationOrderWithFirstBucketCap) {
  // 4 KiB parameters, first cap 8 KiB, later caps 12 KiB: the bucket closes when size >= limit.
  const std::vector<std::int64_t> sizes(7, 4096);
  const BucketAssignment a = assign_buckets(sizes, 12288, 8192);
  EXPECT_EQ(params_of(a), (std::vector<Indices>{{6, 5}, {4, 3, 2}, {1, 0}}));
  EXPECT_EQ(a.buckets[0].limit_bytes, 8192);
  EXPECT_EQ(a.buckets[1].limit_bytes, 12288);
  EXPECT_EQ(a.buckets[2].limit_bytes, 12288);
  EXPECT_EQ(a.buckets[1].offsets_bytes, (std::vector<std::int64_t>{0, 4096, 8192}));
  EXPECT_EQ(a.buckets[1].bytes, 12288);
  EXPECT_EQ(a.buckets[2].bytes, 8192);
  EXPECT_EQ(a.bucket_of_param, (Indices{2, 2, 1, 1, 1, 0, 0}));
  EXPECT_EQ(a.slot_of_param, (Indices{1, 0, 2, 1, 0, 1, 0}));
}

TEST(Buckets, LargeParameterClosesTheBucketItJoins) {
  // As in PyTorch: the large parameter joins the open bucket and closes it; a large parameter
  // arriving at an empty bucket gets a bucket of its own.
  const std::vector<std::int64_t> sizes = {100, 5000, 100, 100};
  const BucketAssignment a = assign_buckets(sizes, 1000, 1000);
  EXPECT_EQ(params_of(a), (std::vector<Indices>{{3, 2, 1}, {0}}));
  EXPECT_EQ(a.buckets[0].bytes, 5200);
  const BucketAssignment b = assign_buckets({5000, 100}, 1000, 1000);
  EXPECT_EQ(params_of(b), (std::vector<Indices>{{1, 0}}));
  const BucketAssignment d = assign_buckets({100, 5000}, 1000, 1000);
  EXPECT_EQ(params_of(d), (std::vector<Indices>{{1}, {0}}));
  const BucketAssignment c = assign_buckets({5000, 1000}, 1000, 1000);
  EXPECT_EQ(params_of(c), (std::vector<Indices>{{1}, {0}}));
}

TEST(Buckets, DefaultCapsPutASmallModelInOneBucket) {
  const std::vector<std::int64_t> sizes = {4 * 64 * 32, 4 * 32, 4 * 32 * 8, 4 * 8};
  const BucketAssignment a = assign_buckets(sizes, bucket_cap_bytes_from_mb(kDefaultBucketCapMb),
                                            kDefaultFirstBucketBytes);
  EXPECT_EQ(params_of(a), (std::vector<Indices>{{3, 2, 1, 0}}));
  EXPECT_EQ(a.buckets[0].limit_bytes, kDefaultFirstBucketBytes);
}

TEST(Buckets, FirstBucketIsOneMiBThenCap) {
  // 512 KiB parameters: first bucket 1 MiB (2 params), then 25 MiB (50 params).
  const std::vector<std::int64_t> sizes(60, 512 * 1024);
  const BucketAssignment a = assign_buckets(sizes, bucket_cap_bytes_from_mb(25.0));
  ASSERT_EQ(a.buckets.size(), 3u);
  EXPECT_EQ(a.buckets[0].params.size(), 2u);
  EXPECT_EQ(a.buckets[1].params.size(), 50u);
  EXPECT_EQ(a.buckets[2].params.size(), 8u);
}

TEST(Buckets, TinyCapGivesOneBucketPerParameter) {
  const std::vector<std::int64_t> sizes = {400, 40, 4, 400};
  const BucketAssignment a = assign_buckets(sizes, bucket_cap_bytes_from_mb(0.0001));
  EXPECT_EQ(bucket_cap_bytes_from_mb(0.0001), 104);
  EXPECT_EQ(params_of(a), (std::vector<Indices>{{3}, {2, 1, 0}}));
  const BucketAssignment b = assign_buckets(sizes, 0);
  EXPECT_EQ(params_of(b), (std::vector<Indices>{{3}, {2}, {1}, {0}}));
}

TEST(Buckets, EveryParameterExactlyOnceOverAGrid) {
  for (std::size_t n : {1u, 2u, 3u, 7u, 20u}) {
    for (std::int64_t cap : {0, 1, 50, 333, 4096, 1 << 20}) {
      for (std::int64_t first : {0, 100, 1 << 20}) {
        std::vector<std::int64_t> sizes(n);
        for (std::size_t i = 0; i < n; ++i) sizes[i] = static_cast<std::int64_t>((i * 37) % 97 + 1);
        const BucketAssignment a = assign_buckets(sizes, cap, first);
        std::vector<int> seen(n, 0);
        std::size_t expected_next = n;  // gradient-ready order is strictly descending
        for (std::size_t b = 0; b < a.buckets.size(); ++b) {
          const GradBucket& bucket = a.buckets[b];
          ASSERT_FALSE(bucket.params.empty());
          std::int64_t off = 0;
          for (std::size_t s = 0; s < bucket.params.size(); ++s) {
            const std::size_t p = bucket.params[s];
            ASSERT_EQ(p + 1, expected_next);
            expected_next = p;
            ++seen[p];
            EXPECT_EQ(bucket.offsets_bytes[s], off);
            EXPECT_EQ(a.bucket_of_param[p], b);
            EXPECT_EQ(a.slot_of_param[p], s);
            off += sizes[p];
            // Only the last parameter may reach the limit.
            if (s + 1 < bucket.params.size()) {
              EXPECT_LT(off, bucket.limit_bytes);
            }
          }
          EXPECT_EQ(bucket.bytes, off);
          if (b + 1 < a.buckets.size()) {
            EXPECT_GE(bucket.bytes, bucket.limit_bytes);
          }
        }
        for (int c : seen) EXPECT_EQ(c, 1);
      }
    }
  }
}

TEST(Buckets, EmptyInputAndBadInput) {
  EXPECT_TRUE(assign_buckets({}, 100).buckets.empty());
  EXPECT_THROW((void)assign_buckets({10, -1}, 100), ConfigError);
  EXPECT_THROW((void)assign_buckets({10}, -1), ConfigError);
  EXPECT_THROW((void)bucket_cap_bytes_from_mb(0.0), ConfigError);
  EXPECT_THROW((void)bucket_cap_bytes_from_mb(-1.0), ConfigError);
  EXPECT_THROW((void)bucket_cap_bytes_from_mb(std::nan("")), ConfigError);
  EXPECT_EQ(bucket_cap_bytes_from_mb(0.5), 512 * 1024);
}

}  // namespace
}  // namespace pipewright::sched
