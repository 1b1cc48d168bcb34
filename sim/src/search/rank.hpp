// Private to sim/src/search: ranking a search's fitting candidates (candidates.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sim/search.hpp"

namespace pipewright::sim::search_detail {

// Sorts `fitting` (best throughput first), collapses equivalent rows (counted in
// result.collapsed), marks and collects the Pareto front of throughput against peak memory,
// keeps the best synchronous row and the top_k rows (0: all) in result.ranked.
void rank_candidates(std::vector<SearchCandidate> fitting, std::int32_t top_k,
                     SearchResult& result);

}  // namespace pipewright::sim::search_detail
