#include "pipewright/sim/calibration.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "pipewright/graph/error.hpp"
#include "pipewright/sim/cluster.hpp"

namespace pipewright::sim {
namespace {

std::vector<std::int64_t> sizes() {
  std::vector<std::int64_t> s;
  for (std::int64_t b = 4; b <= (std::int64_t{16} << 20); b *= 4) s.push_back(b);
  return s;
}

TEST(Calibration, P2PFitRecoversLatencyAndBandwidthExactly) {
  // 20 us + bytes / 2.5 GB/s
  std::vector<TimingPoint> pts;
  for (auto b : sizes()) pts.push_back({b, 0.02 + static_cast<double>(b) / 2.5e6});
  const LinkFit f = fit_p2p(pts);
  EXPECT_NEAR(f.link.latency_ms, 0.02, 1e-9);
  EXPECT_NEAR(f.link.bandwidth_gb_per_s, 2.5, 1e-6);
  EXPECT_LT(f.max_abs_relative_error, 1e-9);
}

TEST(Calibration, RingAllReduceFitRecoversTheSimulatorsFormula) {
  const Link truth{0.015, 4.0};
  for (std::int32_t n : {2, 3, 4, 8}) {
    std::vector<TimingPoint> pts;
    for (auto b : sizes()) {
      pts.push_back(
          {b, static_cast<double>(allreduce_ns(CollectiveAlgorithm::kRing, truth, n, b)) / 1e6});
    }
    const LinkFit f = fit_ring_allreduce(pts, n);
    EXPECT_NEAR(f.link.latency_ms, truth.latency_ms, 1e-6) << n;
    EXPECT_NEAR(f.link.bandwidth_gb_per_s, truth.bandwidth_gb_per_s, 1e-3) << n;
    EXPECT_LT(f.max_abs_relative_error, 1e-4) << n;
  }
}

// ZeRO's reduce-scatter and all-gather (one ring pass): the fit recovers reduce_ns's link.
TEST(Calibration, RingOnePassFitRecoversTheSimulatorsFormula) {
  const Link truth{0.15, 0.85};
  for (std::int32_t n : {2, 3, 4, 8}) {
    std::vector<TimingPoint> pts;
    for (auto b : sizes()) {
      const std::int64_t padded = (b + 4 * n - 1) / (4 * n) * (4 * n);  // as calibrate rounds
      pts.push_back({padded, static_cast<double>(reduce_ns(truth, n, padded)) / 1e6});
    }
    const LinkFit f = fit_ring_one_pass(pts, n);
    EXPECT_NEAR(f.link.latency_ms, truth.latency_ms, 1e-6) << n;
    EXPECT_NEAR(f.link.bandwidth_gb_per_s, truth.bandwidth_gb_per_s, 1e-4) << n;
    EXPECT_LT(f.max_abs_relative_error, 1e-4) << n;
    // The all-reduce fit of the same times reads them as two passes: half the latency.
    EXPECT_NEAR(fit_ring_allreduce(pts, n).link.latency_ms, truth.latency_ms / 2, 1e-6) << n;
  }
  EXPECT_THROW((void)fit_ring_one_pass({{8, 1.0}, {16, 2.0}}, 1), ConfigError);
  EXPECT_THROW((void)fit_ring_one_pass({{8, 1.0}}, 2), ConfigError);
  EXPECT_THROW((void)fit_ring_one_pass({{8, 1.0}, {16, -2.0}}, 2), ConfigError);
}

// Note [Link fit of sharded collectives]: the 2-rank reduce-scatter timings of a 100 Mbit/s
// link (calibrate --network, 2 namespace nodes; ms): small buffers with ms-level outliers, a
// largest buffer slower per byte. The link fit keeps the wire's rate of the mid sizes and the
// small buffers' median latency; the relative-error line over every size does not.
TEST(Calibration, LinkFitOfShardedCollectivesTakesTheRateFromWireBoundBuffers) {
  const std::vector<TimingPoint> pts{{8, 3.551},        {16, 1.285},       {64, 0.209},
                                     {256, 1.815},      {1024, 0.171},     {4096, 2.826},
                                     {16384, 0.648},    {65536, 2.939},    {262144, 11.625},
                                     {1048576, 44.973}, {4194304, 179.715}};
  const LinkFit f = fit_ring_one_pass_link(pts, 2);
  EXPECT_NEAR(f.link.latency_ms, (1.285 + 1.815) / 2, 1e-9);  // median of the six <= 4 KiB
  // The slope over 64 KiB..4 MiB (each >= 4 x 1.55 ms) with that latency: 12.2 MB/s here.
  EXPECT_NEAR(f.link.bandwidth_gb_per_s, 0.01225, 0.0003);
  // A ZeRO bucket of 821 KiB priced within 3% of its measured 35.9 ms (the job's trace).
  EXPECT_NEAR(static_cast<double>(reduce_ns(f.link, 2, 840704)) / 1e6, 35.9, 0.03 * 35.9);
  // The line over every size is pulled by the small buffers' noise: 33.2 ms, 7.6% fast.
  EXPECT_LT(static_cast<double>(reduce_ns(fit_ring_one_pass(pts, 2).link, 2, 840704)) / 1e6,
            0.95 * 35.9);
  // Without wire-bound buffers or small ones: the plain line.
  const std::vector<TimingPoint> flat{{8, 1.0}, {16, 1.0}, {64, 1.0}};
  EXPECT_EQ(fit_ring_one_pass_link(flat, 2).link.latency_ms,
            fit_ring_one_pass(flat, 2).link.latency_ms);
  const std::vector<TimingPoint> big{{65536, 3.0}, {262144, 12.0}};
  EXPECT_EQ(fit_ring_one_pass_link(big, 2).link.bandwidth_gb_per_s,
            fit_ring_one_pass(big, 2).link.bandwidth_gb_per_s);
  EXPECT_THROW((void)fit_ring_one_pass_link({{8, 1.0}, {16, 2.0}}, 1), ConfigError);
  EXPECT_THROW((void)fit_ring_one_pass_link({{8, 1.0}}, 2), ConfigError);
}

// The 2-rank all-reduce of the same link (calibrate --network, ms): the link fit reads the wire
// rate from 64 KiB up and the median of the small sizes as its latency (two steps).
TEST(Calibration, LinkFitOfTheAllReduceTakesTheRateFromWireBoundBuffers) {
  const std::vector<TimingPoint> pts{{4, 0.22},        {16, 1.48},       {64, 3.25},
                                     {256, 3.89},      {1024, 1.86},     {4096, 1.87},
                                     {16384, 2.44},    {65536, 8.18},    {262144, 22.7},
                                     {1048576, 90.75}, {4194304, 378.62}};
  const LinkFit f = fit_ring_allreduce_link(pts, 2);
  EXPECT_NEAR(f.link.latency_ms, 1.865 / 2, 1e-9);
  EXPECT_NEAR(f.link.bandwidth_gb_per_s, 0.0116, 0.0003);
  EXPECT_THROW((void)fit_ring_allreduce_link({{8, 1.0}, {16, 2.0}}, 1), ConfigError);
}

TEST(Calibration, FitWeighsSmallAndLargeMessagesByRelativeError) {
  // 10% noise alternating in sign: the latency must still come out near 50 us (an unweighted
  // fit would be dominated by the 16 MiB point's absolute error of ~0.7 ms).
  std::vector<TimingPoint> pts;
  int i = 0;
  for (auto b : sizes()) {
    const double t = 0.05 + static_cast<double>(b) / 1e6;
    pts.push_back({b, t * (i++ % 2 ? 1.1 : 0.9)});
  }
  const LinkFit f = fit_p2p(pts);
  EXPECT_NEAR(f.link.latency_ms, 0.05, 0.01);
  EXPECT_NEAR(f.link.bandwidth_gb_per_s, 1.0, 0.15);
  EXPECT_NEAR(f.max_abs_relative_error, 0.1, 0.05);
}

TEST(Calibration, DegenerateInputsClampOrThrow) {
  // Constant time: no bandwidth term.
  const LinkFit flat = fit_p2p({{4, 1.0}, {4096, 1.0}, {1 << 20, 1.0}});
  EXPECT_EQ(flat.link.bandwidth_gb_per_s, 0);
  EXPECT_NEAR(flat.link.latency_ms, 1.0, 1e-12);
  // Proportional time: zero latency.
  const LinkFit prop = fit_p2p({{1000, 0.001}, {2000, 0.002}, {4000, 0.004}});
  EXPECT_NEAR(prop.link.latency_ms, 0, 1e-12);
  EXPECT_NEAR(prop.link.bandwidth_gb_per_s, 1.0, 1e-9);
  EXPECT_THROW((void)fit_p2p({{4, 1.0}}), ConfigError);
  EXPECT_THROW((void)fit_p2p({{4, 1.0}, {8, 0.0}}), ConfigError);
  EXPECT_THROW((void)fit_ring_allreduce({{4, 1.0}, {8, 2.0}}, 1), ConfigError);
}

TEST(Calibration, ClusterCollectiveLinksRoundTripAndAreUsedForCollectives) {
  const char* text = R"({"format": "pipewright-cluster", "version": 1, "ranks_per_node": 4,
    "intra_node": {"latency_ms": 0.01, "bandwidth_gb_per_s": 5},
    "collective_links": {"intra_node": {"latency_ms": 0.2, "bandwidth_gb_per_s": 1}},
    "calibration": {"backend": "gloo", "p2p": [{"bytes": 4, "median_ms": 0.01}]}})";
  const Cluster c = parse_cluster(text, "cal.json");
  ASSERT_TRUE(c.collective_intra_node.has_value());
  EXPECT_DOUBLE_EQ(c.collective_link(false).latency_ms, 0.2);
  EXPECT_DOUBLE_EQ(c.collective_link(true).latency_ms, 0.01);  // inter falls back to inter_node
  EXPECT_DOUBLE_EQ(c.link(0, 1).latency_ms, 0.01);             // p2p unchanged
  const Cluster back = parse_cluster(to_json(c), "again.json");
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_NE(to_json(c).find("\"calibration\""), std::string::npos);
  EXPECT_THROW((void)parse_cluster(R"({"format": "pipewright-cluster", "version": 1,
    "collective_links": {"intra": {}}})",
                                   "bad.json"),
               ParseError);
}

// Issue 43/47: ZeRO's sharded collectives may have links of their own, per buffer kind and node
// span; absent ones fall back to the collective link (old files predict what they did).
const char* kSharded = R"({"format": "pipewright-cluster", "version": 1, "nodes": 2,
    "ranks_per_node": 2,
    "intra_node": {"latency_ms": 0.01, "bandwidth_gb_per_s": 5},
    "inter_node": {"latency_ms": 0.05, "bandwidth_gb_per_s": 1},
    "collective_links": {"intra_node": {"latency_ms": 0.02, "bandwidth_gb_per_s": 4}},
    "sharded_collective_links": {
      "reduce_scatter": {"intra_node": {"latency_ms": 0.03, "bandwidth_gb_per_s": 3}},
      "all_gather": {"intra_node": {"latency_ms": 0.04, "bandwidth_gb_per_s": 8},
                     "inter_node": {"latency_ms": 0.4, "bandwidth_gb_per_s": 0.8}},
      "reduce_scatter_unregistered": {"intra_node": {"latency_ms": 0.15, "bandwidth_gb_per_s": 0.85}},
      "all_gather_unregistered": {"inter_node": {"latency_ms": 0.6, "bandwidth_gb_per_s": 0.5}}}})";

TEST(Calibration, ShardedCollectiveLinksParseFallBackAndRoundTrip) {
  const Cluster c = parse_cluster(kSharded, "sharded.json");
  using SC = ShardedCollective;
  using CB = CollectiveBuffer;
  auto lat = [&c](SC what, CB buffer, bool spans) {
    return c.sharded_link(what, buffer, spans).latency_ms;
  };
  EXPECT_DOUBLE_EQ(lat(SC::kReduceScatter, CB::kRegistered, false), 0.03);
  EXPECT_DOUBLE_EQ(lat(SC::kReduceScatter, CB::kRegistered, true), 0.05);  // inter_node
  EXPECT_DOUBLE_EQ(lat(SC::kAllGather, CB::kRegistered, false), 0.04);
  EXPECT_DOUBLE_EQ(lat(SC::kAllGather, CB::kRegistered, true), 0.4);
  EXPECT_DOUBLE_EQ(lat(SC::kReduceScatter, CB::kPrivate, false), 0.15);
  EXPECT_DOUBLE_EQ(c.sharded_link(SC::kReduceScatter, CB::kPrivate, false).bandwidth_gb_per_s,
                   0.85);
  EXPECT_DOUBLE_EQ(lat(SC::kReduceScatter, CB::kPrivate, true), 0.05);
  EXPECT_DOUBLE_EQ(lat(SC::kAllGather, CB::kPrivate, false), 0.02);  // collective intra_node
  EXPECT_DOUBLE_EQ(lat(SC::kAllGather, CB::kPrivate, true), 0.6);
  const Cluster back = parse_cluster(to_json(c), "again.json");
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_DOUBLE_EQ(back.sharded_links.all_gather_unregistered.inter_node->bandwidth_gb_per_s, 0.5);
  EXPECT_FALSE(back.sharded_links.all_gather_unregistered.intra_node.has_value());
  // Without the object: every sharded collective on the collective link, and to_json writes none.
  Cluster plain = c;
  plain.sharded_links = {};
  for (SC what : {SC::kReduceScatter, SC::kAllGather}) {
    for (CB buffer : {CB::kRegistered, CB::kPrivate}) {
      for (bool spans : {false, true}) {
        EXPECT_EQ(&plain.sharded_link(what, buffer, spans), &plain.collective_link(spans));
      }
    }
  }
  EXPECT_EQ(to_json(plain).find("sharded_collective_links"), std::string::npos);
}

void expect_parse_error(const std::string& text, const std::string& needle) {
  try {
    (void)parse_cluster(text, "bad.json");
    FAIL() << needle;
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
}

TEST(Calibration, ShardedCollectiveLinksBadInputNamesTheField) {
  const std::string head = R"({"format": "pipewright-cluster", "version": 1, )";
  expect_parse_error(head + R"("sharded_collective_links": {"reduce_scatter_private": {}}})",
                     "at /sharded_collective_links/reduce_scatter_private: unknown field");
  expect_parse_error(head + R"("sharded_collective_links": {"all_gather": {"intra": {}}}})",
                     "at /sharded_collective_links/all_gather/intra: unknown field");
  expect_parse_error(
      head +
          R"("sharded_collective_links": {"all_gather_unregistered": {"inter_node": {"latency_ms": -1}}}})",
      "/sharded_collective_links/all_gather_unregistered/inter_node/latency_ms");
  expect_parse_error(head + R"("sharded_collective_links": [1]})", "/sharded_collective_links");
  expect_parse_error(
      head +
          R"("sharded_collective_links": {"reduce_scatter": {"intra_node": {"bandwidth_gb_per_s": "fast"}}}})",
      "/sharded_collective_links/reduce_scatter/intra_node/bandwidth_gb_per_s");
}

}  // namespace
}  // namespace pipewright::sim
