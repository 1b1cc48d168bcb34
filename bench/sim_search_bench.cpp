// `search` over a 32-layer GPT on 64 devices (8 nodes x 8): every configuration of pp x dp x v x
// m x schedule x DP algorithm. Target (issue 5): >= 1,000 configurations in < 10 s. Run:
//   build/bin/sim_search_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "pipewright/graph/generators.hpp"
#include "pipewright/sim/search.hpp"

namespace {

using namespace pipewright;

void BM_SearchGpt32On64(benchmark::State& state) {
  graph::GptSpec spec;
  spec.layers = 32;
  spec.hidden = 4096;
  spec.heads = 32;
  spec.seq = 2048;
  const auto model = graph::make_gpt(spec);
  sim::Cluster cluster;
  cluster.nodes = 8;
  cluster.ranks_per_node = 8;
  cluster.device_memory_bytes = 80LL << 30;
  cluster.intra_node = sim::Link{0.005, 150};
  cluster.inter_node = sim::Link{0.012, 25};
  sim::SearchOptions opt;
  opt.devices = 64;
  sim::SearchResult r;
  for (auto _ : state) {
    r = sim::search(model, cluster, opt);
    benchmark::DoNotOptimize(r.simulated);
  }
  state.counters["configs"] = static_cast<double>(r.enumerated);
  state.counters["simulated"] = static_cast<double>(r.simulated);
  state.counters["fit"] = static_cast<double>(r.simulated - r.dropped_memory);
  state.counters["actions"] = static_cast<double>(r.simulated_actions);
}

BENCHMARK(BM_SearchGpt32On64)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
