// Private to sim/src/search: a search's shapes, pending candidates and caches (Note [Search cache],
// search.cpp), and what the parallel search (Note [Parallel search]) runs on its threads: a
// parallel for over independent items, each chunk's peaks and simulations computed ahead, and a
// value or the exception computing it threw, replayed where the serial search would have met it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sim/search.hpp"
#include "pipewright/sim/simulator.hpp"
#include "search/rank.hpp"

namespace pipewright::sim::search_detail {

// The threads a search runs on: `jobs` when >= 1, else std::thread::hardware_concurrency()
// (at least 1).
[[nodiscard]] std::int32_t search_threads(std::int32_t jobs) noexcept;

// Calls f(0) ... f(n - 1), each once, on min(threads, n) threads (the calling one among them),
// and returns when all have returned. f must not throw (it keeps what it throws, Computed) and
// may run concurrently with itself: it writes only its own item's result.
void parallel_for(std::size_t n, std::int32_t threads, const std::function<void(std::size_t)>& f);

// A value computed ahead of its use, or the exception computing it threw (rethrown by get(), at
// the point the serial search would have thrown it).
template <class T>
struct Computed {
  T value{};
  std::exception_ptr error;
  [[nodiscard]] const T& get() const {
    if (error) std::rethrow_exception(error);
    return value;
  }
};

// The simulator's options for a search candidate: the shape's job with the candidate's recompute,
// precision, data-parallel algorithm and zero stage (Note [Search]).
[[nodiscard]] SimOptions candidate_sim_options(sched::JobSpec job, const SearchCandidate& x);

// A shape: what the plan and the per-GPU model are built from.
struct Shape {
  std::int32_t pp, dp, tp, v, m;
  std::int64_t mbs;
  sched::ScheduleKind kind;
  bool automatic = false;  // Auto (synthesize) with the memory limit as its cap; kind is 1F1B's
};

// What a simulation returned that a candidate keeps.
struct Timing {
  std::int64_t step_ns = 0;
  double throughput = 0;
  double bubble = 0;
};

// A simulation computed ahead (Note [Parallel search]).
struct Simulated {
  Timing timing;
  std::int64_t actions = 0;
};

// A per-GPU model's partition and cost table (Note [Search cache]).
struct Partitioned {
  graph::Partition partition;
  sched::CostTable costs;
  bool chain = false;  // is_chain(partition), asked for every candidate
};

// plan, costs, dp, zero stage, full recompute, precision
using MemKey = std::tuple<const void*, const void*, std::int32_t, std::int32_t, bool, int>;
using TimeKey = std::tuple<MemKey, std::size_t>;  // + the data-parallel variant

// A fitting candidate waiting to be timed (Note [Search bounds]).
struct Pending {
  SearchCandidate cand;
  Shape shape;  // its plan is built when it is needed, once per shape
  std::shared_ptr<const Partitioned> parted;
  const Cluster* cluster;
  sched::MemoryOptions memory;
  std::int64_t memory_bound;  // Note [Search pruning]
  double throughput_bound;    // samples / the step's lower bound (Note [Search bounds])
  double model_flops;
  std::size_t variant;  // index into the variants; SIZE_MAX at dp 1
};

// What a chunk computed ahead for a MemKey (Note [Parallel search]).
struct PeakSpec {
  bool has_least = false, has_sharded = false, has_peak = false;
  Computed<std::int64_t> least;                                 // ZeRO-3: kCompute's peak
  Computed<std::shared_ptr<const sched::LoweredPlan>> sharded;  // ZeRO-3: kFit's placement
  Computed<std::int64_t> peak;  // of `sharded` at ZeRO-3, else of the plan
};

// The peaks and timings a search keeps (Note [Search cache]) and what chunks computed ahead.
struct Caches {
  std::map<MemKey, std::shared_ptr<const sched::LoweredPlan>> sharded_plans;  // ZeRO-3
  std::map<MemKey, std::int64_t> peaks;
  std::map<MemKey, std::int64_t> pk_least;  // ZeRO-3 at kCompute: the least any placement holds
  std::map<TimeKey, Timing> timings;
  // Note [Plan peaks] (sched/lower.hpp): each plan read once for all its peaks.
  std::map<const void*, std::unique_ptr<const sched::PlanPeaks>> plan_peaks;
  std::map<MemKey, PeakSpec> peak_specs;
  std::map<TimeKey, Computed<Simulated>> sim_specs;
};

// What evaluating candidates reads besides the caches.
struct Evaluation {
  const SearchOptions* opt;
  std::int64_t limit;  // bytes per device; 0: none
  bool free_comm;      // communication_free(cluster)
  std::int32_t threads;
  const References* all;          // every simulated candidate
  const References* synchronous;  // the synchronous ones
};

// The job of a shape (Note [Search]).
[[nodiscard]] sched::JobSpec job_of(const Shape& c, const SearchOptions& opt);
// What a candidate's timing reads, run on `run_plan` (Note [Search cache]).
[[nodiscard]] TimeKey time_key(const void* run_plan, const Pending& p, bool free_comm);
// ZeRO-3's UNSHARD / RESHARD placed by kFit against the limit.
[[nodiscard]] std::shared_ptr<const sched::LoweredPlan> place_fit(const sched::LoweredPlan& plan,
                                                                  const Pending& p,
                                                                  std::int64_t limit);
// A candidate simulated on `run_plan`.
[[nodiscard]] Simulated simulate_one(const Pending& p, const sched::LoweredPlan& run_plan,
                                     const SearchOptions& opt);

// Note [Parallel search]: computes, on ev.threads threads, what pending[begin, end) may need
// (PlanPeaks, peaks, ZeRO-3 placements, simulations) into c.plan_peaks, c.peak_specs and
// c.sim_specs; plan_of(p) is p's plan (cached by the caller) or null.
void prefetch(
    Caches& c, const std::vector<Pending>& pending, std::size_t begin, std::size_t end,
    const Evaluation& ev,
    const std::function<std::shared_ptr<const sched::LoweredPlan>(const Pending&)>& plan_of);

}  // namespace pipewright::sim::search_detail
