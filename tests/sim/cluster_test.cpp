#include "pipewright/sim/cluster.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::sim {
namespace {

const char* kGood = R"({"format": "pipewright-cluster", "version": 1, "name": "t",
  "nodes": 2, "ranks_per_node": 4, "cores_per_node": 2, "links_per_node": 1,
  "device_memory_bytes": 1000,
  "intra_node": {"latency_ms": 0.001, "bandwidth_gb_per_s": 100},
  "inter_node": {"latency_ms": 0.01, "bandwidth_gb_per_s": 10},
  "collective": "ring", "placement": "replica-major"})";

TEST(Cluster, ParsesAndRoundTrips) {
  const Cluster c = parse_cluster(kGood, "c.json");
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.ranks_per_node, 4);
  EXPECT_EQ(c.cores_per_node, 2);
  EXPECT_EQ(c.links_per_node, 1);
  EXPECT_EQ(c.placement, Placement::kReplicaMajor);
  EXPECT_EQ(c.node_of(3), 0);
  EXPECT_EQ(c.node_of(4), 1);
  EXPECT_DOUBLE_EQ(c.link(0, 5).bandwidth_gb_per_s, 10);
  EXPECT_DOUBLE_EQ(c.link(4, 5).bandwidth_gb_per_s, 100);
  const Cluster back = parse_cluster(to_json(c), "again.json");
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_EQ(back.cores_per_node, 2);
  EXPECT_EQ(back.links_per_node, 1);
  EXPECT_NO_THROW(c.check_fits(8));
  EXPECT_THROW(c.check_fits(9), ConfigError);
}

// Note [Compute beside a send]: send_cpu_load is read, written only when > 0, and >= 0.
TEST(Cluster, SendCpuLoadRoundTripsAndIsChecked) {
  std::string text = kGood;
  text.insert(text.rfind('}'), R"(, "send_cpu_load": 0.72)");
  const Cluster c = parse_cluster(text, "c.json");
  EXPECT_DOUBLE_EQ(c.send_cpu_load, 0.72);
  EXPECT_DOUBLE_EQ(parse_cluster(to_json(c), "again.json").send_cpu_load, 0.72);
  EXPECT_DOUBLE_EQ(parse_cluster(kGood, "c.json").send_cpu_load, 0.0);
  EXPECT_EQ(to_json(parse_cluster(kGood, "c.json")).find("send_cpu_load"), std::string::npos);
  std::string bad = kGood;
  bad.insert(bad.rfind('}'), R"(, "send_cpu_load": -0.1)");
  EXPECT_THROW((void)parse_cluster(bad, "c.json"), InputError);
}

TEST(Cluster, CommunicationFormulas) {
  const Link l{0.01, 10};  // 10 us, 10 bytes/ns
  EXPECT_EQ(p2p_ns(l, 4'000'000), 10'000 + 400'000);
  // Ring: 2(n-1)/n * bytes / bw + 2(n-1) * latency.
  EXPECT_EQ(allreduce_ns(CollectiveAlgorithm::kRing, l, 4, 4'000'000), 600'000 + 60'000);
  // Tree: 2 ceil(log2 n) latency + 2 bytes / bw.
  EXPECT_EQ(allreduce_ns(CollectiveAlgorithm::kTree, l, 4, 4'000'000), 40'000 + 800'000);
  EXPECT_EQ(allreduce_ns(CollectiveAlgorithm::kRing, l, 1, 4'000'000), 0);
  EXPECT_EQ(reduce_ns(l, 4, 4'000'000), 300'000 + 30'000);
  EXPECT_EQ(p2p_ns(Link{0.5, 0}, 123), 500'000);  // bandwidth 0: latency only
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    (void)parse_cluster(text, "c.json");
    FAIL() << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c.json"), std::string::npos) << e.what();
  }
}

TEST(Cluster, BadInputsNameTheField) {
  const std::string head = R"({"format": "pipewright-cluster", "version": 1, )";
  expect_error(head + R"("nodes": 0})", "/nodes");
  expect_error(head + R"("cores_per_node": -2})", "/cores_per_node");
  expect_error(head + R"("cores_per_node": 5000000000})",
               "at /cores_per_node: must be an integer in [0, 1048576], got 5000000000");
  expect_error(head + R"("intra_node": {"latency_ms": -1}})", "/intra_node/latency_ms");
  expect_error(head + R"("inter_node": {"bandwidth_gb_per_s": "fast"}})",
               "/inter_node/bandwidth_gb_per_s");
  expect_error(head + R"("collective": "butterfly"})", "/collective");
  expect_error(head + R"("placement": "random"})", "/placement");
  expect_error(head + R"("ranks_per_nod": 4})",
               "c.json:1:65: at /ranks_per_nod: unknown field \"ranks_per_nod\"");
  expect_error(
      head + R"("nodes": 2, "rank_nodes": [{"rank": 0, "node": 0}, {"rank": 5, "node": 1}]})",
      "at /rank_nodes/1/rank: names unknown rank 5");
  expect_error(head + R"("nodes": 2, "rank_nodes": [{"rank": 0, "node": 3}]})",
               "at /rank_nodes/0/node: names unknown node 3");
  expect_error(R"({"format": "other", "version": 1})", "/format");
  expect_error("{", "c.json:1:2: invalid JSON");
  expect_error(head + R"("nodes": 1, "nodes": 2})", "at /nodes: duplicate key \"nodes\"");
  EXPECT_THROW((void)load_cluster("/nonexistent/cluster.json"), InputError);
}

TEST(Cluster, ExplicitRankNodes) {
  const std::string text = R"({"format": "pipewright-cluster", "version": 1, "nodes": 2,
    "rank_nodes": [{"rank": 0, "node": 1}, {"rank": 1, "node": 0}]})";
  const Cluster c = parse_cluster(text, "c.json");
  EXPECT_EQ(c.node_of(0), 1);
  EXPECT_EQ(c.node_of(1), 0);
  EXPECT_NO_THROW(c.check_fits(2));
  try {
    c.check_fits(4);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/rank_nodes"), std::string::npos);
  }
}

}  // namespace
// Issue 46: a cluster file names its device (MFU's peak, the roofline's bandwidth).
TEST(Cluster, DeviceRoundTripsAndIsChecked) {
  const std::string text = R"({"format": "pipewright-cluster", "version": 1, "nodes": 2,
    "ranks_per_node": 8, "device": {"name": "A100", "peak_tflops": 312, "hbm_gb_per_s": 2039,
    "achieved_gemm_fraction": 0.8, "source": "datasheet"}})";
  const Cluster c = parse_cluster(text, "c.json");
  ASSERT_TRUE(c.device);
  EXPECT_EQ(c.device->name, "A100");
  EXPECT_DOUBLE_EQ(c.device->peak_tflops, 312);
  EXPECT_DOUBLE_EQ(c.device->achieved_gemm_fraction, 0.8);
  const Cluster again = parse_cluster(to_json(c), "again");
  ASSERT_TRUE(again.device);
  EXPECT_DOUBLE_EQ(again.device->hbm_gb_per_s, 2039);
  EXPECT_EQ(again.device->source, "datasheet");
  std::string bad = text;
  bad.replace(bad.find("0.8"), 3, "1.5");
  EXPECT_THROW((void)parse_cluster(bad, "c.json"), InputError);
  bad = text;
  bad.replace(bad.find("\"source\""), 8, "\"color\" ");
  EXPECT_THROW((void)parse_cluster(bad, "c.json"), InputError);
}

// The example device files parse.
TEST(Cluster, ExampleDeviceFiles) {
  for (const char* f :
       {"cluster-dgx-a100-80gb.json", "cluster-dgx-h100.json", "cluster-h200.json"}) {
    const Cluster c = load_cluster(std::string(PIPEWRIGHT_SOURCE_DIR) + "/examples/" + f);
    ASSERT_TRUE(c.device) << f;
    EXPECT_GT(c.device->peak_tflops, 300) << f;
    EXPECT_EQ(c.ranks_per_node, 8) << f;
  }
}

}  // namespace pipewright::sim
