// Plan pipeline cost: generate + validate + lower an Interleaved1F1B plan (p = 64, v = 4), at
// m = 1024 (target < 200 ms on one core) and at 4x the microbatches (target: ~4x the time, i.e.
// linear in the number of actions). Also each step alone, and the deadlock dry run.
//   build-*/bin/bench_sched --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace {

using namespace pipewright::sched;

ScheduleSpec spec_for(const benchmark::State& state) {
  return {ScheduleKind::kInterleaved1F1B, 64, static_cast<int>(state.range(0)), 4, {}};
}

std::int64_t actions_of(const LoweredPlan& plan) {
  std::int64_t n = 0;
  for (const auto& ops : plan.per_rank) n += static_cast<std::int64_t>(ops.size());
  return n;
}

void BM_GenerateValidateLower(benchmark::State& state) {
  std::int64_t actions = 0;
  for (auto _ : state) {
    const ComputePlan plan = generate(spec_for(state));
    auto diags = validate(plan);
    if (!diags.empty()) state.SkipWithError("generated plan is invalid");
    const LoweredPlan lowered = lower(plan);
    actions = actions_of(lowered);
    benchmark::DoNotOptimize(lowered.per_rank.data());
  }
  state.counters["lowered_actions"] = static_cast<double>(actions);
  state.counters["ns_per_action"] = benchmark::Counter(
      static_cast<double>(actions),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_GenerateValidateLower)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_Generate(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(generate(spec_for(state)).per_rank.data());
}
BENCHMARK(BM_Generate)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_ValidateCompute(benchmark::State& state) {
  const ComputePlan plan = generate(spec_for(state));
  for (auto _ : state) benchmark::DoNotOptimize(validate(plan).size());
}
BENCHMARK(BM_ValidateCompute)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_Lower(benchmark::State& state) {
  const ComputePlan plan = generate(spec_for(state));
  for (auto _ : state) benchmark::DoNotOptimize(lower(plan).per_rank.data());
}
BENCHMARK(BM_Lower)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

void BM_ValidateLoweredAndDryRun(benchmark::State& state) {
  const LoweredPlan plan = lower(generate(spec_for(state)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(validate(plan).size());
    benchmark::DoNotOptimize(dry_run(plan, Transport::kRendezvous).ok);
  }
}
BENCHMARK(BM_ValidateLoweredAndDryRun)->Arg(1024)->Arg(4096)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
