// Communication microbenchmarks for `pipewright calibrate`: point-to-point ping-pong between
// world ranks 0 and 1, and all-reduce, reduce-scatter and all-gather over every rank, over a
// range of message sizes, through the same Communicator the executor uses (so the numbers
// include pipewright's own overheads).
// Torch-free; the fit to the simulator's model lives in sim/ (sim/calibration.hpp).
//
// measure_communication() is collective: every rank of the job calls it with the same config;
// the result is complete on world rank 0 (other ranks get their own rank and nothing else).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pipewright/exec/rendezvous.hpp"

namespace pipewright::exec {

struct CalibrationConfig {
  std::string backend = "gloo";  // "gloo" | "mpi" (| "nccl" on GPUs)
  WorldFlags world;
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // Message sizes in bytes (multiples of 4), ascending. Empty: powers of 4 from 4 B to 16 MiB.
  std::vector<std::int64_t> sizes;
  // Timed repetitions per size (after 2 untimed ones); large messages use fewer, so that one
  // size moves at most ~512 MiB: reps(size) = max(5, min(iterations, 512 MiB / size)).
  int iterations = 40;
  // Also ping-pong between every pair of nodes (their first ranks) and within every node (its
  // first two ranks); node of a rank = rank / local world size (block placement, as `launch`
  // and `mpirun --host a:P,b:P` place ranks).
  bool network = false;
};

// One message size: the distribution of the timed repetitions, milliseconds.
struct SizeTiming {
  std::int64_t bytes = 0;
  double median_ms = 0;
  double p10_ms = 0;
  double p90_ms = 0;
  std::int64_t samples = 0;
};

// Note [Compute beside a send, measured]: across nodes, how fast rank_a computes while its own
// message crosses the link. rank_a times a fixed CPU probe (~0.5 ms of arithmetic on its
// training thread) over and over: first alone, then after each of 20 sends of one size to rank_b
// (made on that thread, as a pipeline's SEND is), for 80% of that size's measured one-way time
// (the probes that end inside it). The size is the largest whose one-way time is 2-10 ms (an
// activation's, on a slow link); none such (a fast link): not measured, 0 samples. The
// simulator's Cluster::send_cpu_load is busy / idle - 1 (Note [Compute beside a send] in
// sim/src/engine/engine.hpp). Sending from another thread instead measured nothing (0.46 ms
// beside against 0.50 alone on the shaped link): the kernel's work then ran on that thread's core.
struct ComputeBesideSend {
  double idle_ms = 0;  // median probe alone
  double busy_ms = 0;  // median probe beside the message
  int samples = 0;     // probes beside the message
  std::int64_t bytes = 0;
};

// One ping-pong pair of --network: one-way times measured from rank_a.
struct PairTimings {
  int node_a = 0, node_b = 0;  // equal: within a node
  int rank_a = 0, rank_b = 0;
  std::vector<SizeTiming> p2p;
  ComputeBesideSend beside_send;  // across nodes only
};

struct CommunicationMeasurements {
  int world_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  // CPUs rank 0 may run on (its affinity mask): the cores a node's CPU ranks share.
  int cpus = 0;
  std::string backend;
  // One-way point-to-point time between ranks 0 and 1 (half the round trip of a ping-pong).
  std::vector<SizeTiming> p2p;
  // In-place float32 sum all-reduce over all ranks, or one per node (group_size) (from a barrier
  // to completion on rank 0).
  std::vector<SizeTiming> allreduce;
  // ZeRO's sharded collectives over all ranks, or one per node (group_size) (float32;
  // reduce-scatter sums), timed as the all-reduce. SizeTiming::bytes is the whole buffer (one
  // piece per rank of the group): each message size rounded up to a multiple of 4 * the group's
  // size bytes, sizes that round alike measured once.
  // On a registered buffer (Communicator::allocate_collective_buffer), as ZeRO-1/2 run them:
  // reduce-scatter from it into a private piece, all-gather in place.
  std::vector<SizeTiming> reduce_scatter;
  std::vector<SizeTiming> all_gather;
  // On private memory, as ZeRO-3 runs them: reduce-scatter in place, all-gather from a private
  // piece into a private buffer. (Gloo: a ring over TCP; MPI and NCCL: the same path as above.)
  std::vector<SizeTiming> reduce_scatter_unregistered;
  std::vector<SizeTiming> all_gather_unregistered;
  // The ranks the all-reduce and the four sharded timings above ran over: the world, or with
  // --network on several nodes of >= 2 ranks each, one rank per node (Note [Sharded calibration
  // across nodes]).
  int group_size = 0;
  // With CalibrationConfig::network: the number of nodes, and every node pair (inter-node) and
  // node (intra-node, when it has >= 2 ranks), in that order: within nodes 0..N-1, then pairs.
  int nodes = 1;
  std::vector<PairTimings> pairs;
};

// Note [Sharded calibration across nodes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A job's data-parallel groups span the nodes with one rank per node (replica-major placement:
// stage s's replicas are local rank s of every node), and its all-reduces (DDP's buckets,
// LocalSGD, SlowMo, DiLoCo), reduce-scatters and all-gathers run over those groups. With
// --network on N nodes of P >= 2 ranks each, the collectives are therefore timed over local
// rank 0 of every node (N ranks; the others only pass the barriers), not over the world: a world
// ring of N x P ranks takes N x P - 1 steps, each with its own start-up and reduction on shared
// cores, and that per-step cost is not a link's. Measured on two namespace nodes joined by a
// 100 Mbit/s link, 2 ranks each: the world (4-rank) reduce-scatter of 1 MiB took 78.2 ms, 10.1
// MB/s on the link, the 2-rank group's 45.3 ms, 11.6 MB/s; ZeRO-2's step, priced from the
// world's fit, came out 7.4-12.1% slow. The world all-reduce's fit moved between 0.0110 and
// 0.0144 GB/s from one calibration to the next (Gloo's algorithm over 4 ranks is no ring of 4,
// and its small sizes took 0.2-7 ms), and DDP's, LocalSGD's, SlowMo's and DiLoCo's steps with
// it by 10-17% (docs/simulator.md, session 10). The fits of these timings:
// sim::fit_ring_allreduce_link and sim::fit_ring_one_pass_link.

// The default sizes: 4, 16, 64, ..., 16 MiB.
[[nodiscard]] std::vector<std::int64_t> default_calibration_sizes();

// The sizes the sharded collectives are measured at: each of `sizes` rounded up to a multiple of
// 4 * world_size bytes (equal float32 pieces), duplicates dropped; ascending.
[[nodiscard]] std::vector<std::int64_t> sharded_calibration_sizes(
    const std::vector<std::int64_t>& sizes, int world_size);

// Runs the measurements on this process's rank. Throws ConfigError for a world of one rank or
// bad sizes, and the communicator's PeerError / TimeoutError when a peer fails.
[[nodiscard]] CommunicationMeasurements measure_communication(const CalibrationConfig& config);

}  // namespace pipewright::exec
