#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "graph_test_util.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/partition.hpp"

namespace pipewright::graph {
namespace {

using testing::chain_model;
using ::testing::HasSubstr;
using testing::message_of;

// Every way to cut n items into p non-empty contiguous runs: calls fn(starts).
void for_each_composition(int n, int p, const std::function<void(const std::vector<int>&)>& fn) {
  std::vector<int> starts{0};
  std::function<void(int)> rec = [&](int from) {
    const int placed = static_cast<int>(starts.size());
    if (placed == p) {
      fn(starts);
      return;
    }
    for (int s = from; s <= n - (p - placed); ++s) {
      starts.push_back(s);
      rec(s + 1);
      starts.pop_back();
    }
  };
  rec(1);
}

// The best slowest-stage time by brute force (infinity if the memory limit cannot be met).
double brute_force(const Model& m, int p, const PartitionOptions& options, bool use_memory) {
  const int n = static_cast<int>(m.nodes.size());
  double best = std::numeric_limits<double>::infinity();
  for_each_composition(n, p, [&](const std::vector<int>& starts) {
    double worst = 0.0;
    for (int k = 0; k < p; ++k) {
      const int end = k + 1 < p ? starts[static_cast<std::size_t>(k) + 1] : n;
      double ms = 0.0;
      std::int64_t params = 0, acts = 0, fp32 = 0;
      for (int i = starts[static_cast<std::size_t>(k)]; i < end; ++i) {
        const Node& node = m.nodes[static_cast<std::size_t>(i)];
        const NodeCost& c = node.cost;
        ms += c.forward_ms + c.backward_ms;
        params += c.param_bytes;
        acts += c.activation_bytes;
        fp32 += autocast_fp32_bytes(node);
      }
      if (use_memory &&
          stage_memory_bytes(params, acts, fp32, in_flight_microbatches(k, p, options), options) >
              *options.memory_limit_bytes) {
        return;
      }
      worst = std::max(worst, ms);
    }
    best = std::min(best, worst);
  });
  return best;
}

void expect_valid(const Partition& part, const Model& m, int p) {
  ASSERT_EQ(part.num_stages(), p);
  std::vector<int> seen(m.nodes.size(), 0);
  int previous_last = -1;
  for (const StageInfo& s : part.graph.stages) {
    ASSERT_FALSE(s.nodes.empty());
    EXPECT_GT(s.nodes.front(), previous_last);  // contiguous runs of the chain, in order
    previous_last = s.nodes.back();
    for (int v : s.nodes) ++seen[static_cast<std::size_t>(v)];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

TEST(Partition, BalancedIsExactOnRandomChains) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  std::uniform_int_distribution<int> length(1, 9);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = length(rng);
    std::vector<double> ms(static_cast<std::size_t>(n));
    for (double& c : ms) c = trial % 7 == 0 ? std::floor(cost(rng)) : cost(rng);  // with ties
    const Model m = chain_model(ms);
    for (int p = 1; p <= n; ++p) {
      PartitionOptions opt;
      opt.stages = p;
      opt.method = PartitionMethod::kBalanced;
      const Partition part = partition_model(m, opt);
      expect_valid(part, m, p);
      const double want = brute_force(m, p, opt, false);
      EXPECT_NEAR(part.max_stage_ms(), want, 1e-9 * std::max(1.0, want))
          << "trial " << trial << " n " << n << " p " << p;
    }
  }
}

TEST(Partition, MemoryCappedIsExactOnRandomChains) {
  std::mt19937 rng(static_cast<unsigned>(::testing::FLAGS_gtest_random_seed + 777));
  std::uniform_real_distribution<double> cost(0.0, 10.0);
  std::uniform_int_distribution<std::int64_t> bytes(0, 100);
  std::uniform_int_distribution<int> length(1, 8);
  int feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = length(rng);
    std::vector<double> ms;
    std::vector<std::int64_t> params, acts;
    for (int i = 0; i < n; ++i) {
      ms.push_back(cost(rng));
      params.push_back(bytes(rng));
      acts.push_back(bytes(rng));
    }
    const Model m = chain_model(ms, params, acts);
    for (int p = 1; p <= n; ++p) {
      PartitionOptions opt;
      opt.stages = p;
      opt.method = PartitionMethod::kMemory;
      opt.memory_limit_bytes = std::uniform_int_distribution<std::int64_t>(100, 2000)(rng);
      if (trial % 2 == 1) opt.in_flight_microbatches = 3;  // GPipe-like assumption
      const double want = brute_force(m, p, opt, true);
      if (std::isinf(want)) {
        ++infeasible;
        EXPECT_THROW((void)partition_model(m, opt), InvalidGraphError);
        continue;
      }
      ++feasible;
      const Partition part = partition_model(m, opt);
      expect_valid(part, m, p);
      EXPECT_NEAR(part.max_stage_ms(), want, 1e-9 * std::max(1.0, want));
      for (const StageInfo& s : part.graph.stages) {
        EXPECT_LE(s.memory_bytes, *opt.memory_limit_bytes);
      }
    }
  }
  EXPECT_GT(feasible, 100);  // the grid really exercises both outcomes
  EXPECT_GT(infeasible, 20);
}

TEST(Partition, UniformSplitsByNodeCount) {
  const Model m = chain_model({1, 100, 1, 1, 1, 1, 1});
  PartitionOptions opt;
  opt.stages = 3;
  opt.method = PartitionMethod::kUniform;
  const Partition part = partition_model(m, opt);
  EXPECT_EQ(part.method, "uniform");
  EXPECT_EQ(part.graph.stages[0].nodes, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(part.graph.stages[1].nodes, (std::vector<int>{3, 4}));
  EXPECT_EQ(part.graph.stages[2].nodes, (std::vector<int>{5, 6}));
  EXPECT_EQ(part.node_stage, (std::vector<int>{0, 0, 0, 1, 1, 2, 2}));
}

TEST(Partition, StageMemoryFollowsThe1F1BAssumption) {
  const Model m = chain_model({1, 1, 1, 1}, {10, 10, 10, 10}, {5, 5, 5, 5});
  PartitionOptions opt;
  opt.stages = 4;
  opt.method = PartitionMethod::kUniform;
  const Partition part = partition_model(m, opt);
  for (int s = 0; s < 4; ++s) {
    const StageInfo& st = part.graph.stages[static_cast<std::size_t>(s)];
    EXPECT_EQ(st.in_flight_microbatches, 4 - s);
    EXPECT_EQ(st.memory_bytes, 10 * (1 + 1 + 2) + (4 - s) * 5);
  }
}

// Issue 33: bf16 / fp16 (activation_element_bytes 2) halve the activations and add autocast's
// 16-bit parameter copy; parameters, gradients and optimizer state stay fp32. Round trips.
TEST(Partition, SixteenBitActivationsAndTheAutocastCopy) {
  const Model m = chain_model({1, 1, 1, 1}, {10, 10, 10, 10}, {6, 6, 6, 6});
  PartitionOptions opt;
  opt.stages = 4;
  opt.method = PartitionMethod::kUniform;
  opt.activation_element_bytes = 2;
  const Partition part = partition_model(m, opt);
  EXPECT_EQ(part.activation_element_bytes, 2);
  for (int s = 0; s < 4; ++s) {
    const StageInfo& st = part.graph.stages[static_cast<std::size_t>(s)];
    EXPECT_EQ(st.memory_bytes, 10 * (1 + 1 + 2) + 5 + (4 - s) * 3);
  }
  EXPECT_EQ(parse_partition(to_json(part), "p.json"), part);
  EXPECT_NE(to_json(part).find("\"activation_element_bytes\": 2"), std::string::npos);
  opt.activation_element_bytes = 3;
  EXPECT_THROW((void)partition_model(m, opt), ConfigError);
}

// Issue 47 item 4 (Note [Stage memory], Note [Autocast bytes]): under bf16 what autocast keeps
// in fp32 (a layer norm's input, a block's 4/34, a node's own activation_fp32_bytes) stays at 4
// bytes and only the rest halves; recompute's kept stage inputs are 16-bit p2p messages. The
// memory method cuts by those bytes.
TEST(Partition, AutocastKeepsItsFp32ActivationsUnderSixteenBits) {
  Model m = chain_model({1, 1, 1, 1}, {10, 10, 10, 10}, {1000, 1000, 1000, 3400});
  m.nodes[0].kind = NodeKind::kLayerNorm;         // all 1000 fp32
  m.nodes[1].cost.activation_fp32_bytes = 400;    // the file's: 400 fp32
  m.nodes[3].kind = NodeKind::kTransformerBlock;  // 4/34 of 3400: 400 fp32
  PartitionOptions opt;
  opt.stages = 2;
  opt.method = PartitionMethod::kUniform;
  opt.activation_element_bytes = 2;
  const Partition part = partition_model(m, opt);
  ASSERT_EQ(part.node_stage, (std::vector<int>{0, 0, 1, 1}));
  const StageInfo& s0 = part.graph.stages[0];
  const StageInfo& s1 = part.graph.stages[1];
  EXPECT_EQ(stage_activation_fp32_bytes(m, s0), 1400);
  EXPECT_EQ(stage_activation_fp32_bytes(m, s1), 400);
  // params 20 x (1 + 1 + 2) + autocast copy 10 + in flight x (fp32 part + the rest / 2).
  EXPECT_EQ(s0.memory_bytes, 80 + 10 + 2 * (1400 + 600 / 2));  // halving all: 80 + 10 + 2 x 1000
  EXPECT_EQ(s1.memory_bytes, 80 + 10 + 1 * (400 + 4000 / 2));  // halving all: 80 + 10 + 2200
  // fp32: the fp32 part changes nothing.
  opt.activation_element_bytes = 4;
  EXPECT_EQ(partition_model(m, opt).graph.stages[0].memory_bytes, 80 + 2 * 2000);
  // Recompute: inputs per in-flight microbatch at 16 bits (n1's 101 bytes: 50), one recomputed
  // microbatch with its fp32 part.
  opt.activation_element_bytes = 2;
  opt.recompute = true;
  const Partition rc = partition_model(m, opt);
  EXPECT_EQ(rc.graph.stages[0].memory_bytes, 80 + 10 + 2 * 0 + (1400 + 600 / 2));
  EXPECT_EQ(rc.graph.stages[1].memory_bytes, 80 + 10 + 1 * 50 + (400 + 4000 / 2));
  // The memory method cuts by the fp32-aware bytes: 2 | 2 needs 3490 on stage 0, so a limit
  // just below it (which plain halving's 2090 would meet) moves the cut after n0 (n1..n3:
  // 120 + 15 + 800 + 4600 / 2 = 3235).
  opt.recompute = false;
  opt.method = PartitionMethod::kMemory;
  opt.memory_limit_bytes = 3489;
  const Partition capped = partition_model(m, opt);
  EXPECT_EQ(capped.node_stage, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(capped.graph.stages[1].memory_bytes, 120 + 15 + 800 + 4600 / 2);
  for (const StageInfo& st : capped.graph.stages) EXPECT_LE(st.memory_bytes, 3489);
  // The closed form itself: the fp32 part is clamped to the activations.
  EXPECT_EQ(stage_memory_bytes(0, 1000, 5000, 1, opt), 1000);
  EXPECT_EQ(stage_memory_bytes(0, 1000, -5, 1, opt), 500);
}

// Issue 22: with --recompute full a stage keeps its input per in-flight microbatch and one
// microbatch's full activations, so a limit too small for 1F1B's in-flight activations fits.
TEST(Partition, RecomputeMakesATightMemoryLimitFeasible) {
  // 8 nodes of 10 parameter bytes and 1000 activation bytes; node i outputs 100 + i bytes.
  const Model m = chain_model(std::vector<double>(8, 1.0), std::vector<std::int64_t>(8, 10),
                              std::vector<std::int64_t>(8, 1000));
  PartitionOptions opt;
  opt.stages = 2;
  opt.method = PartitionMethod::kMemory;
  opt.memory_limit_bytes = 5000;  // stage 0 (2 in flight) fits 2 nodes, stage 1 fits 4: 6 < 8
  EXPECT_THAT(message_of<InvalidGraphError>([&] { (void)partition_model(m, opt); }),
              HasSubstr("no partition into 2 stages meets the memory limit"));
  opt.recompute = true;
  const Partition with = partition_model(m, opt);
  expect_valid(with, m, 2);
  EXPECT_TRUE(with.recompute);
  EXPECT_EQ(with.node_stage, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  // Stage 0 receives only the model input (not counted); stage 1 receives n3's 103 bytes.
  EXPECT_EQ(with.graph.stages[0].memory_bytes, 4 * 10 * 4 + 2 * 0 + 4000);
  EXPECT_EQ(with.graph.stages[1].memory_bytes, 4 * 10 * 4 + 1 * 103 + 4000);
  for (const StageInfo& st : with.graph.stages) EXPECT_LE(st.memory_bytes, 5000);

  // The same cut without recompute predicts more memory where microbatches are in flight (the
  // last stage, 1 in flight, holds its input on top of its activations with recompute).
  PartitionOptions plain = opt;
  plain.recompute = false;
  plain.method = PartitionMethod::kBalanced;
  const Partition without = partition_model(m, plain);
  EXPECT_EQ(without.node_stage, with.node_stage);
  EXPECT_EQ(without.graph.stages[0].memory_bytes, 4 * 10 * 4 + 2 * 4000);
  EXPECT_EQ(without.graph.stages[1].memory_bytes, 4 * 10 * 4 + 1 * 4000);
  const auto peak = [](const Partition& p) {
    std::int64_t worst = 0;
    for (const StageInfo& st : p.graph.stages) worst = std::max(worst, st.memory_bytes);
    return worst;
  };
  EXPECT_EQ(peak(with), 4263);
  EXPECT_EQ(peak(without), 8160);
  // The JSON form keeps the assumption.
  EXPECT_EQ(parse_partition(to_json(with), "p.json"), with);
  EXPECT_EQ(parse_partition(to_json(without), "p.json"), without);
}

// With recompute the memory-capped partitioner still never exceeds the limit it reports meeting.
TEST(Partition, RecomputeStagesFitTheLimitOnRandomChains) {
  std::mt19937 rng(22);
  int found = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 9)(rng);
    std::vector<double> ms;
    std::vector<std::int64_t> params;
    std::vector<std::int64_t> acts;
    for (int i = 0; i < n; ++i) {
      ms.push_back(std::uniform_int_distribution<int>(0, 9)(rng));
      params.push_back(std::uniform_int_distribution<int>(0, 50)(rng));
      acts.push_back(std::uniform_int_distribution<int>(0, 500)(rng));
    }
    const Model m = chain_model(ms, params, acts);
    PartitionOptions opt;
    opt.stages = std::uniform_int_distribution<int>(1, n)(rng);
    opt.method = PartitionMethod::kMemory;
    opt.recompute = true;
    opt.memory_limit_bytes = std::uniform_int_distribution<std::int64_t>(200, 3000)(rng);
    try {
      const Partition part = partition_model(m, opt);
      expect_valid(part, m, opt.stages);
      for (const StageInfo& s : part.graph.stages)
        EXPECT_LE(s.memory_bytes, *opt.memory_limit_bytes);
      ++found;
    } catch (const InvalidGraphError&) {
      // No cut found for this limit: an error, never a partition over the limit.
    }
  }
  EXPECT_GT(found, 100);  // most limits are met
}

TEST(Partition, ZeroCostNodesStillFillEveryStage) {
  const Model m = chain_model(std::vector<double>(50, 0.0));
  PartitionOptions opt;
  opt.stages = 17;
  const Partition part = partition_model(m, opt);
  expect_valid(part, m, 17);
  EXPECT_EQ(part.max_stage_ms(), 0.0);
}

TEST(PartitionBadInput, MoreStagesThanNodes) {
  const Model m = chain_model({1, 2, 3});
  PartitionOptions opt;
  opt.stages = 4;
  EXPECT_THAT(message_of<ConfigError>([&] { (void)partition_model(m, opt); }),
              HasSubstr("--stages 4 is more than the model's 3 nodes"));
  opt.stages = 0;
  EXPECT_THROW((void)partition_model(m, opt), ConfigError);
  opt.stages = 2;
  opt.method = PartitionMethod::kMemory;
  EXPECT_THAT(message_of<ConfigError>([&] { (void)partition_model(m, opt); }),
              HasSubstr("needs --memory-limit"));
}

TEST(PartitionBadInput, MemoryLimitNamesTheNodeThatCannotFit) {
  const Model m = chain_model({1, 1, 1}, {10, 1000, 10}, {0, 0, 0});
  PartitionOptions opt;
  opt.stages = 3;
  opt.method = PartitionMethod::kMemory;
  opt.memory_limit_bytes = 400;  // n1 alone needs 4000
  EXPECT_THAT(message_of<InvalidGraphError>([&] { (void)partition_model(m, opt); }),
              HasSubstr("node \"n1\" alone needs 4000 bytes"));
  // Every node fits alone but not all together in 2 stages.
  const Model m2 = chain_model({1, 1, 1, 1}, {25, 25, 25, 25}, {0, 0, 0, 0});
  opt.stages = 2;
  opt.memory_limit_bytes = 100;  // one node per stage
  EXPECT_THAT(message_of<InvalidGraphError>([&] { (void)partition_model(m2, opt); }),
              HasSubstr("node \"n2\" does not fit in the last stage"));
}

TEST(PartitionMethodNames, RoundTrip) {
  for (auto m : {PartitionMethod::kUniform, PartitionMethod::kBalanced, PartitionMethod::kMemory}) {
    EXPECT_EQ(parse_partition_method(to_string(m)), m);
  }
  EXPECT_FALSE(parse_partition_method("greedy").has_value());
}

}  // namespace
}  // namespace pipewright::graph
