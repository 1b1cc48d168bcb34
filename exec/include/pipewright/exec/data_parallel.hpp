// Configuration of data parallelism across pipeline replicas (issue 7): the algorithm (DDP with
// bucketed, overlapped gradient all-reduce; SlowMo or plain LocalSGD averaging parameters every
// few steps), its options, replica checks, and checkpointing. Torch-free so that tools/ (the
// `pipewright run` flags and --config keys) can fill it. docs/data-parallel.md describes the
// semantics; exec/src/dp/ddp.hpp and exec/src/dp/slowmo.hpp implement them.
#pragma once

#include <cstdint>

#include "pipewright/sched/job.hpp"

namespace pipewright::exec {

// The algorithm and its options are part of the job (sched::DataParallelSpec, shared with the
// simulator); the executor's own settings (replica checks, checkpoints) are in exec::RunConfig.
using sched::DataParallelSpec;
using sched::DpAlgorithm;
using sched::parse_dp_algorithm;
using sched::to_string;

// Communication counters of one rank's data-parallel algorithm, for logs and benchmarks.
// wire_bytes models what the rank puts on the network with the usual algorithms: an all-reduce
// of B bytes over n ranks sends 2 (n - 1) / n * B (ring), a reduce or a broadcast (n - 1) / n * B
// (NCCL's "bus bandwidth" convention), so SlowMo's reduce + broadcast costs one all-reduce.
struct DataParallelStats {
  std::int64_t steps = 0;
  std::int64_t collectives = 0;          // collective calls issued
  std::uint64_t payload_bytes = 0;       // sizes of the buffers handed to those collectives
  double wire_bytes = 0;                 // see above
  std::int64_t buckets_in_backward = 0;  // DDP: bucket all-reduces started during backward
  std::int64_t buckets_at_reduce = 0;    // DDP: started at REDUCE_GRAD (no overlap)
  std::int64_t exposed_wait_ns = 0;      // time the rank blocked waiting for data-parallel comm
  std::int64_t replica_checks = 0;       // --check-replicas verifications done
  // The start-up broadcast of parameters from replica 0, kept out of the per-step counters.
  std::uint64_t setup_payload_bytes = 0;
  double setup_wire_bytes = 0;
};

// Replicas of each data-parallel group that share a node, given procs_per_node ranks per node
// and rank = dp_index * pp + pp_index: procs_per_node / pp when procs_per_node is a multiple of
// pp, else 1 (sched::validate_job rejects the other cases).
[[nodiscard]] int replicas_per_node(int procs_per_node, int pp) noexcept;

}  // namespace pipewright::exec
