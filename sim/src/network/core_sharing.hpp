// The core-sharing model of the simulator: how fast a rank's activities progress when the ranks
// of a host outnumber its cores.
//
// Note [Shared cores]
// CPU ranks of one host share its cores: with C cores (Cluster::cores_per_node, else the
// profile's cores_per_node) and n ranks of a node inside a compute action (F, B, I, W, OPTIM),
// each computes at speed min(1, C / n) (processor sharing; co-located data-parallel replicas
// count too, as copies of their replica-0 rank). An action's cost is then its work at full
// speed, and its end depends on what other ranks do meanwhile, so ranks can no longer run ahead
// through compute: a rank whose next compute action can start at t > now yields until the event
// clock reaches t; starting or ending a compute action updates the node's running actions
// (progress so far at the old speed, then new end events at the new speed; superseded end
// events carry an old version and are dropped). A rank's send stream is an activity too: the
// bytes of a SEND move with its work at the same shared speed (a transfer's progress thread
// needs a core; measured on p = 4 runs, replay without it left ranks computing at half speed
// where the real ones mostly waited for messages), so arrivals are known only when the send
// completes (only when the profile says transfers need a core, CostTable::p2p_uses_core: with
// Open MPI the ranks' own polls make progress, and a message is a fixed delay; on p = 4 Open MPI
// runs, counting it as work over-predicted trace-driven replays by a further 4-15 points).
// Receives and the other communication actions still run ahead, as before. Without
// sharing (no cores given, or no node with more ranks than cores) none of this runs and results are
// those of dedicated devices, bit for bit. With sharing, each kind costs the mean of its measured
// distribution (KindStats::mean_ms) and sampled simulation draws nothing: on an oversubscribed host
// most of the spread of measured times is the OS scheduler's time slices, during which the other
// ranks run; sampling it on top of processor sharing counts that delay twice (p = 4 on 2 cores,
// bench/fidelity.sh: sampled replay +25..+42% against the measured step, medians -6..-28%, means
// -21..+1%).
//
// Note [Collectives on shared cores]
// On a CPU host a collective within the node is CPU work too: Gloo moves the bytes through
// loopback TCP or shared memory and sums them on its threads, which take cores from the ranks'
// compute (and the compute takes them from it). Where a rank's data-parallel group lies in one
// node of an oversubscribed host, its collectives are therefore activities on the node's cores,
// with their time alone as work, so they slow down while the node's other ranks compute and
// slow them down:
//   - DDP's buckets and ZeRO's reduce-scatters and all-gathers: activities of the rank's
//     data-parallel stream (2R + r), queued in order as on shared links (Note [Shared links]):
//     the rank waits for them where it does there (a backward's reduce-scatters, REDUCE_GRAD,
//     the parameters of its next compute);
//   - the sync of LocalSGD, SlowMo and SGP after the rank's step, its own work (Note [Sync work
//     in the simulator]) and its collective as one activity of its compute stream (the rank
//     waits for it); DiLoCo's too where the step waits for its outer all-reduce at once
//     (tau = 0; a delayed one, tau > 0, takes its time alone on the data-parallel stream).
// Measured on bench/fidelity.sh's loopback cells (pp 2 x dp 2 on 2 cores), a backward's
// reduce-scatter took 1.4-4.5 ms where its calibration alone says 0.8 ms, and priced alone
// ZeRO-3's step was predicted 7-13% fast. On the kept traces of three matrices (session 10,
// docs/simulator.md), mean signed replay error and cells within 5% of 24 each: ZeRO-3 -7.7% ->
// -1.4%, 4 -> 21; ZeRO-2 -4.4% -> -1.7%, 15 -> 20; ZeRO-1 -1.2% -> -0.2%, 18 -> 22; DDP -1.6% ->
// -1.2%, 20 -> 22; SGP -5.1% -> -2.2%, 11 -> 22; LocalSGD -4.1% -> -3.4%, 20 -> 22; SlowMo -3.8%
// -> -3.1%, 19 -> 21; DiLoCo -5.0% -> -3.5%, 13 -> 21.
#pragma once

#include <cstdint>
#include <memory>

#include "network/event_queue.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sim/cluster.hpp"

namespace pipewright::sim {

// Activities: the compute stream of pipeline rank r is activity r, its send stream R + r, its
// data-parallel stream 2R + r (Note [Collectives on shared cores]).
class CoreSharing {
 public:
  virtual ~CoreSharing() = default;
  // false: every rank has its own core (dedicated devices); the engine then calls nothing else.
  [[nodiscard]] virtual bool active() const noexcept = 0;
  // Activity `activity` starts at `now_ns` with `work_ns` of work at full speed. The model
  // pushes an EventKind::kActivityDone event (id = activity) for the time it will end, and new
  // ones whenever its speed changes; only the one current() accepts counts.
  virtual void begin(std::int32_t activity, std::int64_t work_ns, std::int64_t now_ns,
                     EventQueue& queue) = 0;
  // The activity stops at `now_ns` (its end event came); the others speed up.
  virtual void end(std::int32_t activity, std::int64_t now_ns, EventQueue& queue) = 0;
  // Note [Compute beside a collective] (engine/engine.hpp): from `now_ns` the cores of rank
  // `rank`'s node carry `load` more of a core's demand (negative: less) besides its activities,
  // for each of the rank's replicas on that node; the activities slow down (speed up).
  virtual void add_load(std::int32_t rank, double load, std::int64_t now_ns, EventQueue& queue) = 0;
  // Whether an end event with `version` is the activity's latest (not superseded).
  [[nodiscard]] virtual bool current(std::int32_t activity,
                                     std::uint32_t version) const noexcept = 0;
};

// Processor sharing per node (Note [Shared cores]) for `ranks` pipeline ranks with `dp`
// replicas each on `cluster` (replica j of rank r on global rank cluster.global_rank(r, j, ...)).
// Active only when cluster.cores_per_node (else costs.cores_per_node) is > 0 and some node holds
// more ranks than cores.
[[nodiscard]] std::unique_ptr<CoreSharing> make_processor_sharing(const Cluster& cluster,
                                                                  const sched::CostTable& costs,
                                                                  std::int32_t ranks,
                                                                  std::int32_t dp);

}  // namespace pipewright::sim
