// Partitioner throughput. Target (issue 3): balanced partition of a 100,000-node chain into 1,024
// stages in < 1 s on one core. Run: build-*/bin/bench_graph_partition --benchmark_repetitions=5
// --benchmark_report_aggregates_only=true (report the median).
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"

namespace {

using pipewright::graph::Model;

Model random_chain(int nodes) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> ms(0.1, 10.0);
  std::uniform_int_distribution<std::int64_t> bytes(1 << 10, 1 << 24);
  Model m;
  m.name = "chain";
  m.input = pipewright::graph::ModelInput{"float32", {1024}};
  m.nodes.reserve(static_cast<std::size_t>(nodes));
  for (int i = 0; i < nodes; ++i) {
    pipewright::graph::Node n;
    n.name = "n" + std::to_string(i);
    n.cost.forward_ms = ms(rng);
    n.cost.backward_ms = 2.0 * n.cost.forward_ms;
    n.cost.param_bytes = bytes(rng);
    n.cost.activation_bytes = bytes(rng);
    n.cost.output_bytes = bytes(rng);
    m.nodes.push_back(std::move(n));
    if (i > 0) m.edges.push_back({i - 1, 0, i, 0});
  }
  return m;
}

void partition_chain(benchmark::State& state, pipewright::graph::PartitionMethod method) {
  const Model model = random_chain(static_cast<int>(state.range(0)));
  pipewright::graph::PartitionOptions options;
  options.stages = static_cast<int>(state.range(1));
  options.method = method;
  // For the memory method: 1.5x the memory of an even split's first stage, so the cap binds.
  std::int64_t first_stage = 0;
  const std::size_t per_stage = model.nodes.size() / static_cast<std::size_t>(options.stages);
  for (std::size_t i = 0; i < per_stage; ++i) {
    const auto& c = model.nodes[i].cost;
    first_stage += pipewright::graph::stage_memory_bytes(
        c.param_bytes, c.activation_bytes, pipewright::graph::autocast_fp32_bytes(model.nodes[i]),
        options.stages, options);
  }
  options.memory_limit_bytes = first_stage + first_stage / 2;
  for (auto _ : state) {
    auto partition = pipewright::graph::partition_model(model, options);
    benchmark::DoNotOptimize(partition);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_BalancedChain(benchmark::State& state) {
  partition_chain(state, pipewright::graph::PartitionMethod::kBalanced);
}
void BM_MemoryChain(benchmark::State& state) {
  partition_chain(state, pipewright::graph::PartitionMethod::kMemory);
}
void BM_UniformChain(benchmark::State& state) {
  partition_chain(state, pipewright::graph::PartitionMethod::kUniform);
}

}  // namespace

BENCHMARK(BM_BalancedChain)->Args({100000, 1024})->Args({10000, 64})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MemoryChain)->Args({100000, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_UniformChain)->Args({100000, 1024})->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
