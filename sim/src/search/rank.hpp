// Private to sim/src/search: ranking a search's fitting candidates (candidates.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/search.hpp"

namespace pipewright::sim::search_detail {

// Sorts `fitting` (best throughput first), collapses equivalent rows (counted in
// result.collapsed), marks and collects the Pareto front of throughput against peak memory,
// keeps the best synchronous row and the top_k rows (0: all) in result.ranked.
void rank_candidates(std::vector<SearchCandidate> fitting, std::int32_t top_k,
                     SearchResult& result);

// Note [Search bounds]: a lower bound of the amortised step of any plan of this schedule, pp, v
// and m over these stage costs, in closed form (no plan): the busiest rank's compute (its stages'
// F, B or I + W, a recomputed stage's forward again), run one action at a time on the rank's
// compute stream, after the fill (the forwards of the stages before its first one, for a chain).
[[nodiscard]] std::int64_t step_lower_bound_ns(const sched::CostTable& costs,
                                               sched::ScheduleKind kind, bool automatic,
                                               std::int32_t pp, std::int32_t v, std::int32_t m,
                                               bool full_recompute, bool chain);

// The simulated candidates a pending one is measured against (Note [Search bounds]): the
// non-dominated (peak memory, throughput) pairs, and the top_k largest distinct throughputs.
class References {
 public:
  explicit References(std::int32_t top_k) : top_k_(top_k) {}
  void add(std::int64_t peak_bytes, double throughput);
  // Whether a candidate of this peak whose throughput is at most `bound` can be neither in the
  // top_k rows nor on the Pareto front.
  [[nodiscard]] bool excludes(std::int64_t peak_bytes, double bound) const;

 private:
  std::int32_t top_k_;
  std::map<std::int64_t, double> staircase_;  // peak -> throughput, both ascending
  std::set<double> best_;                     // the top_k largest distinct throughputs
};

}  // namespace pipewright::sim::search_detail
