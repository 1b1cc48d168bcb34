// Simulator throughput: simulated plan actions per second for a lowered Interleaved1F1B plan,
// p = 64, v = 4, m in {256, 512, 1024} (time should be linear in actions). Target (issue 5):
// >= 20 M actions/s on one core at m = 1024. Run:
//   build/bin/sim_engine_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/simulator.hpp"

namespace {

using namespace pipewright;

const sched::LoweredPlan& plan_for(int m) {
  static std::map<int, std::unique_ptr<sched::LoweredPlan>> cache;
  auto& p = cache[m];
  if (!p) {
    sched::ScheduleSpec spec;
    spec.kind = sched::ScheduleKind::kInterleaved1F1B;
    spec.ranks = 64;
    spec.stages_per_rank = 4;
    spec.microbatches = m;
    p = std::make_unique<sched::LoweredPlan>(sched::lower(sched::generate(spec)));
  }
  return *p;
}

sched::CostTable costs() {
  sched::CostTable t;
  for (int s = 0; s < 256; ++s) {
    sched::StageCost c;
    c.stage = s;
    c.forward_ms = 1.0 + 0.001 * (s % 7);
    c.backward_ms = 2.0 + 0.001 * (s % 5);
    c.activation_bytes = 1 << 20;
    c.output_bytes = 1 << 20;
    c.param_bytes = 64 << 20;
    t.stages.push_back(c);
  }
  return t;
}

void run(benchmark::State& state, bool record) {
  const auto& plan = plan_for(static_cast<int>(state.range(0)));
  const auto table = costs();
  pipewright::sim::Cluster cluster;
  cluster.intra_node = pipewright::sim::Link{0.005, 100};
  pipewright::sim::SimOptions opt;
  opt.record_actions = record;
  std::int64_t actions = 0;
  for (auto _ : state) {
    const auto r = pipewright::sim::simulate(plan, table, cluster, opt);
    actions += r.simulated_actions;
    benchmark::DoNotOptimize(r.makespan_ns);
  }
  state.SetItemsProcessed(actions);
  state.counters["actions"] =
      static_cast<double>(actions) / static_cast<double>(state.iterations());
}

void BM_Interleaved_p64_v4(benchmark::State& state) { run(state, false); }
void BM_Interleaved_p64_v4_recorded(benchmark::State& state) { run(state, true); }

BENCHMARK(BM_Interleaved_p64_v4)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Interleaved_p64_v4_recorded)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
