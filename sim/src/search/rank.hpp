// Private to sim/src/search: ranking a search's fitting candidates (candidates.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "pipewright/graph/model.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sim/search.hpp"

namespace pipewright::sim::search_detail {

// Steps needed to see each periodic collective of a data-parallel variant at least once (the
// step time is amortised over them).
[[nodiscard]] std::int32_t steps_for(const DpVariant& d);
// Whether every transformer block's heads and hidden size split over tp.
[[nodiscard]] bool tp_divides(const graph::Model& model, std::int32_t tp);
// Whether selective recompute changes anything: a transformer block with heads and hidden.
[[nodiscard]] bool has_shaped_blocks(const graph::Model& model);
// Whether no link costs anything (no cluster): then the simulated time does not depend on
// message bytes (precision) or on which data-parallel collectives run (zero stages 0-2).
[[nodiscard]] bool communication_free(const Cluster& c);
// Whether the partition's stages form a chain (s feeds s + 1 only): then make_plan's plan for a
// named schedule depends on the shape alone.
[[nodiscard]] bool is_chain(const graph::Partition& p);

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
