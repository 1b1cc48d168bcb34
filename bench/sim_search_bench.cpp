// `search` benchmarks. Run (medians of 3):
//   build/bin/sim_search_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// BM_SearchGpt32On64: a 32-layer GPT on 64 devices (8 nodes x 8), every configuration of pp x dp
//   x v x m x schedule x DP algorithm (issue 5's target: >= 1,000 configurations in < 10 s);
//   auto:0 the named schedules, auto:1 also Auto (the CLI's default).
// BM_SearchAllDimensions: issue 46's search over every dimension: a 48-layer, h 6144 GPT (18B
//   parameters) on 256 GPUs of DGX A100 nodes (80 GB), global batch 1024, pp x tp (4, 8) x dp x
//   v x micro-batch size (1, 2) x schedule (1F1B, Interleaved1F1B, ZBH2) x zero stage (0-3) x
//   recompute (none, selective, full) x precision (fp32, bf16), with Adam, top 10. Counters:
//   candidates, candidates_per_s (over the CPU time), simulated, pruned (by the closed-form memory
//   bound), bounded (provably outside the top rows and the Pareto front, Note [Search bounds]),
//   cache hits, fit. The target is 10^5 candidates in < 10 s (10^4 per second).
// BM_Search175BOn1024: the target's workload, 136,320 candidates: GPT-3 175B (96 layers, h 12288)
//   on 1024 A100s (128 DGX nodes, 80 GB), the CLI's default microbatch sweep (m = pp x 1, 2, 4, 8,
//   16), tp 1, 2, 4, 8, micro-batch size 1, 2, 4, 8, every named schedule, zero stage 0-3, three
//   recompute modes, fp32 and bf16, with Adam, top 10.
#include <benchmark/benchmark.h>

#include "pipewright/graph/generators.hpp"
#include "pipewright/sim/search.hpp"

namespace {

using namespace pipewright;

void counters(benchmark::State& state, const sim::SearchResult& r) {
  state.counters["candidates"] = static_cast<double>(r.enumerated);
  state.counters["candidates_per_s"] =
      benchmark::Counter(static_cast<double>(r.enumerated), benchmark::Counter::kIsRate);
  state.counters["simulated"] = static_cast<double>(r.simulated);
  state.counters["pruned"] = static_cast<double>(r.pruned_memory);
  state.counters["cache_hits"] = static_cast<double>(r.cache_hits);
  state.counters["fit"] = static_cast<double>(r.enumerated - r.dropped_memory - r.rejected_shape);
  state.counters["actions"] = static_cast<double>(r.simulated_actions);
}

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
  opt.zero_stages = {0};
  opt.recomputes = {sim::LayerRecompute::kNone};
  opt.jobs = 1;  // one thread: its CPU time is the search's
  // Arg 0: the named schedules (issue 5's workload); 1: also Auto per (pp, dp, m), the CLI's
  // default, which synthesizes a schedule per shape (a search of its own).
  opt.try_auto = state.range(0) != 0;
  sim::SearchResult r;
  for (auto _ : state) {
    r = sim::search(model, cluster, opt);
    benchmark::DoNotOptimize(r.simulated);
  }
  counters(state, r);
}

void BM_SearchAllDimensions(benchmark::State& state) {
  graph::GptSpec spec;
  spec.layers = 48;
  spec.hidden = 6144;
  spec.heads = 48;
  spec.seq = 2048;
  spec.vocab = 51200;
  const auto model = graph::make_gpt(spec);
  sim::Cluster cluster;  // examples/cluster-dgx-a100-80gb.json's figures
  cluster.nodes = 32;
  cluster.ranks_per_node = 8;
  cluster.device_memory_bytes = 80LL << 30;
  cluster.intra_node = sim::Link{0.005, 300};
  cluster.inter_node = sim::Link{0.012, 25};
  cluster.device = sim::Device{"A100-SXM4-80GB", 312, 2039, 0.6213, ""};
  sim::SearchOptions opt;
  opt.devices = 256;
  opt.global_batch = 1024;
  opt.tps = {4, 8};
  opt.micro_batch_sizes = {1, 2};
  opt.schedules = {sched::ScheduleKind::k1F1B, sched::ScheduleKind::kInterleaved1F1B,
                   sched::ScheduleKind::kZBH2};
  opt.optimizer = sched::Optimizer::kAdam;
  opt.precisions = {sched::Precision::kFp32, sched::Precision::kBf16};
  opt.try_auto = false;  // Auto synthesizes a schedule per shape: a search of its own
  opt.jobs = 1;          // one thread: its CPU time is the search's
  sim::SearchResult r;
  for (auto _ : state) {
    r = sim::search(model, cluster, opt);
    benchmark::DoNotOptimize(r.simulated);
  }
  counters(state, r);
  state.counters["bounded"] = static_cast<double>(r.bounded);
}

void BM_Search175BOn1024(benchmark::State& state) {
  graph::GptSpec spec;
  spec.layers = 96;
  spec.hidden = 12288;
  spec.heads = 96;
  spec.seq = 2048;
  spec.vocab = 51200;
  const auto model = graph::make_gpt(spec);
  sim::Cluster cluster;  // examples/cluster-dgx-a100-80gb.json's figures
  cluster.nodes = 128;
  cluster.ranks_per_node = 8;
  cluster.device_memory_bytes = 80LL << 30;
  cluster.intra_node = sim::Link{0.005, 300};
  cluster.inter_node = sim::Link{0.012, 25};
  cluster.device = sim::Device{"A100-SXM4-80GB", 312, 2039, 0.6213, ""};
  sim::SearchOptions opt;
  opt.devices = 1024;
  opt.tps = {1, 2, 4, 8};
  opt.micro_batch_sizes = {1, 2, 4, 8};
  opt.optimizer = sched::Optimizer::kAdam;
  opt.precisions = {sched::Precision::kFp32, sched::Precision::kBf16};
  opt.try_auto = false;
  opt.jobs = static_cast<std::int32_t>(state.range(0));  // Note [Parallel search]
  sim::SearchResult r;
  for (auto _ : state) {
    r = sim::search(model, cluster, opt);
    benchmark::DoNotOptimize(r.simulated);
  }
  counters(state, r);  // UseRealTime: candidates_per_s is per wall second
  state.counters["bounded"] = static_cast<double>(r.bounded);
  state.counters["threads"] = static_cast<double>(opt.jobs);
}

BENCHMARK(BM_SearchGpt32On64)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->ArgName("auto")
    ->Arg(0)
    ->Arg(1);
BENCHMARK(BM_SearchAllDimensions)->Unit(benchmark::kSecond)->Iterations(1);
// Arg: search threads (SearchOptions::jobs, Note [Parallel search]); wall time is the measure (the
// CPU time column is the calling thread's alone).
BENCHMARK(BM_Search175BOn1024)
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime()
    ->ArgName("jobs")
    ->Arg(1)
    ->Arg(2);

}  // namespace

BENCHMARK_MAIN();
