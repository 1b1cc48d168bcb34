// Fits of measured communication times to the simulator's models (cluster.hpp), used by
// `pipewright calibrate`:
//   point-to-point      t(bytes) = latency + bytes / bandwidth
//   ring all-reduce     t(bytes) = 2(n-1) * latency + 2(n-1)/n * bytes / bandwidth
//   ring one pass       t(bytes) = (n-1) * latency + (n-1)/n * bytes / bandwidth
//     (a reduce-scatter of a `bytes` buffer, or an all-gather into one: reduce_ns in cluster.hpp)
// Both are straight lines in a transformed size x, fitted by weighted least squares with weights
// 1/t^2, i.e. minimising the squared *relative* error, so that 4-byte and 16-MiB messages count
// alike (plain least squares would ignore the latency term entirely). A negative intercept is
// clamped to 0 latency and a negative slope to "no bandwidth term".
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sim/cluster.hpp"

namespace pipewright::sim {

struct TimingPoint {
  std::int64_t bytes = 0;
  double ms = 0;  // measured (median) time of one operation
};

struct LinkFit {
  Link link;
  double mean_abs_relative_error = 0;  // of the fit over the points, e.g. 0.05 = 5%
  double max_abs_relative_error = 0;
};

// Throws ConfigError for fewer than 2 points, a non-positive time or negative bytes.
[[nodiscard]] LinkFit fit_p2p(const std::vector<TimingPoint>& points);
// n = ranks in the all-reduce (>= 2).
[[nodiscard]] LinkFit fit_ring_allreduce(const std::vector<TimingPoint>& points, std::int32_t n);
// n = ranks in the reduce-scatter or all-gather (>= 2); `bytes` of a point is the whole buffer
// (n pieces), as ZeRO's buckets and reduce_ns count them.
[[nodiscard]] LinkFit fit_ring_one_pass(const std::vector<TimingPoint>& points, std::int32_t n);
// The same model fitted for a link between nodes (Note [Link fit of sharded collectives]):
// latency from the small buffers, bandwidth from the buffers whose time the wire dominates.
[[nodiscard]] LinkFit fit_ring_one_pass_link(const std::vector<TimingPoint>& points,
                                             std::int32_t n);
// The ring all-reduce's model fitted the same way (calibrate --network).
[[nodiscard]] LinkFit fit_ring_allreduce_link(const std::vector<TimingPoint>& points,
                                              std::int32_t n);

}  // namespace pipewright::sim
