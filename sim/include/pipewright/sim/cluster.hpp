// The cluster description the simulator times communication with (docs/simulator.md).
//
//   {"format": "pipewright-cluster", "version": 1, "name": "2x8-a100",
//    "nodes": 2, "ranks_per_node": 8, "device_memory_bytes": 85899345920,
//    "links_per_node": 1,                                      (optional, see below)
//    "intra_node": {"latency_ms": 0.005, "bandwidth_gb_per_s": 150},
//    "inter_node": {"latency_ms": 0.01, "bandwidth_gb_per_s": 25},
//    "collective": "ring", "placement": "pipeline-major",
//    "rank_nodes": [{"rank": 0, "node": 0}, ...],            (optional explicit placement)
//    "collective_links": {"intra_node": {...}, "inter_node": {...}},  (optional, see below)
//    "sharded_collective_links": {"reduce_scatter": {"intra_node": {...}, "inter_node": {...}},
//        "all_gather": {...}, "reduce_scatter_unregistered": {...},
//        "all_gather_unregistered": {...}},                     (optional, see below)
//    "calibration": {...},          (optional, written by `pipewright calibrate`, not read)
//    "device": {"name": "A100-SXM4-80GB", "peak_tflops": 312, "hbm_gb_per_s": 2039,
//               "achieved_gemm_fraction": 1.0, "source": "..."}}  (optional: MFU's peak)
// Point-to-point time between two ranks = latency + bytes / bandwidth of the link between their
// nodes (intra_node when both are on the same node). bandwidth 0 means "infinitely fast".
// Collectives (DDP all-reduce, LocalSGD / SlowMo averages) use collective_links when given: the
// latency and bandwidth a ring all-reduce fit measured (`pipewright calibrate`), which on hosts
// where a collective's per-step cost differs from a message's (Gloo's ring on CPU cores) predict
// better than the point-to-point link; else they use the point-to-point links.
// sharded_collective_links (optional, every key optional): ring reduce-scatters and all-gathers,
// t = (n-1) * latency + (n-1)/n * bytes / bandwidth (reduce_ns), on registered buffers (ZeRO-1/2
// and SlowMo's slow step: "reduce_scatter", "all_gather") and on private ones (ZeRO-3:
// "..._unregistered"), as `pipewright calibrate` measured them; a link not given is the
// collective link (Note [Unregistered collectives] in sim/src/network/network_model.cpp).
// links_per_node (optional, default 0): the inter-node links (NICs) each node has, shared by its
// ranks' transfers across nodes (Note [Shared links] in sim/src/network/link_sharing.hpp); 0: every
// transfer has a link of its own (one NIC per GPU, or sharing not modelled).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipewright::sim {

struct Link {
  double latency_ms = 0;
  double bandwidth_gb_per_s = 0;  // 1e9 bytes/s; 0 = no bandwidth term
};

enum class CollectiveAlgorithm { kRing, kTree };

// The accelerator of every rank (optional "device" object of a cluster file): what model-FLOPs
// utilisation (MFU) is measured against. Each figure names its source in the file.
struct Device {
  std::string name;
  double peak_tflops = 0;   // dense bf16 peak, TFLOP/s (the MFU denominator)
  double hbm_gb_per_s = 0;  // HBM bandwidth, 1e9 bytes/s (0: unknown)
  // The fraction of peak that large GEMMs reach (one number, fitted on one run).
  double achieved_gemm_fraction = 1.0;
  std::string source;  // datasheet(s) the figures come from
};

// The sharded collectives a cluster may price apart from the all-reduce (ZeRO, issue 43).
enum class ShardedCollective : std::uint8_t { kReduceScatter, kAllGather };
// The buffer a collective runs on: one the communicator registered
// (Communicator::allocate_collective_buffer: shared memory among one host's ranks with Gloo;
// ZeRO-1/2's buckets and parameters) or private memory (ZeRO-3's buckets and parameters).
enum class CollectiveBuffer : std::uint8_t { kRegistered, kPrivate };

// Optional links of one collective, within a node and across nodes.
struct CollectiveLinks {
  std::optional<Link> intra_node;
  std::optional<Link> inter_node;
  [[nodiscard]] bool empty() const noexcept { return !intra_node && !inter_node; }
};

// "sharded_collective_links" of a cluster file: per collective and buffer kind.
struct ShardedCollectiveLinks {
  CollectiveLinks reduce_scatter;               // registered buffers (ZeRO-1/2, SlowMo)
  CollectiveLinks all_gather;                   // registered buffers (ZeRO-1/2, SlowMo)
  CollectiveLinks reduce_scatter_unregistered;  // private buffers (ZeRO-3)
  CollectiveLinks all_gather_unregistered;      // private buffers (ZeRO-3)

  [[nodiscard]] const CollectiveLinks& of(ShardedCollective what,
                                          CollectiveBuffer buffer) const noexcept;
  [[nodiscard]] CollectiveLinks& of(ShardedCollective what, CollectiveBuffer buffer) noexcept;
  [[nodiscard]] bool empty() const noexcept;
};

// How global ranks are laid out when dp > 1 (global rank g, pipeline rank r, replica j):
//   kPipelineMajor  g = r * dp + j   (Megatron's order: replicas of a stage are neighbours)
//   kReplicaMajor   g = j * pp + r   (each replica's pipeline is contiguous)
enum class Placement { kPipelineMajor, kReplicaMajor };

struct Cluster {
  std::string name = "default";
  std::int32_t nodes = 1;
  std::int32_t ranks_per_node = 0;       // 0: all ranks on one node (any count)
  std::int64_t device_memory_bytes = 0;  // 0: unlimited
  // Compute units a node's ranks share (CPU cores when training on CPUs): with more ranks of a
  // node computing than this, each computes at cores / computing speed (processor sharing,
  // Note [Shared cores] in sim/src/network/core_sharing.hpp). 0: every rank has its own device;
  // then a profile's cores_per_node applies, if any.
  std::int32_t cores_per_node = 0;
  // Inter-node links each node has: with L flows crossing one of a node's directions, each moves
  // at min(1, links_per_node / L) of the inter-node bandwidth. 0: no sharing.
  std::int32_t links_per_node = 0;
  Link intra_node;
  Link inter_node;
  // Note [Compute beside a send] (sim/src/engine/engine.hpp): the share of a core that the
  // network stack takes from a rank's compute while one of its messages crosses the inter-node
  // link (JSON "send_cpu_load", >= 0; calibrate --network measures it). 0: none.
  double send_cpu_load = 0;
  CollectiveAlgorithm collective = CollectiveAlgorithm::kRing;
  Placement placement = Placement::kPipelineMajor;
  // Optional explicit node of each global rank (overrides ranks_per_node / placement).
  std::vector<std::int32_t> rank_nodes;
  // Optional links of collectives (within a node / across nodes); default: intra/inter_node.
  std::optional<Link> collective_intra_node;
  std::optional<Link> collective_inter_node;
  // Optional links of ZeRO's reduce-scatters and all-gathers; default: collective_link().
  ShardedCollectiveLinks sharded_links;
  // Opaque record of how the cluster was measured (calibrate's samples and fits), JSON text;
  // kept through parse/to_json, never interpreted.
  std::string calibration_json;
  // The accelerator (optional; MFU needs its peak).
  std::optional<Device> device;

  // The link a collective within one node (spans_nodes false) or across nodes uses.
  [[nodiscard]] const Link& collective_link(bool spans_nodes) const noexcept;
  // The link of a sharded collective on `buffer` within one node or across nodes: its
  // sharded_links entry when given, else collective_link(spans_nodes).
  [[nodiscard]] const Link& sharded_link(ShardedCollective what, CollectiveBuffer buffer,
                                         bool spans_nodes) const noexcept;

  // Node of global rank g (for a run with `world` ranks). Precondition: check_fits(world).
  [[nodiscard]] std::int32_t node_of(std::int32_t global_rank) const noexcept;
  // Global rank of (pipeline rank r, replica j) for pp pipeline ranks and dp replicas.
  [[nodiscard]] std::int32_t global_rank(std::int32_t r, std::int32_t j, std::int32_t pp,
                                         std::int32_t dp) const noexcept;
  [[nodiscard]] const Link& link(std::int32_t global_a, std::int32_t global_b) const noexcept;
  // Throws ConfigError naming the field when the cluster cannot host `world` ranks (nodes x
  // ranks_per_node too small, rank_nodes not covering exactly the ranks 0..world-1).
  void check_fits(std::int32_t world, std::string_view origin = "cluster") const;
};

// Time of one point-to-point message on `link`, in integer nanoseconds.
[[nodiscard]] std::int64_t p2p_ns(const Link& link, std::int64_t bytes) noexcept;
// Ring all-reduce over n ranks: 2(n-1)/n * bytes / bandwidth + 2(n-1) * latency.
// Tree (double binary tree): 2 * ceil(log2 n) * latency + 2 * bytes / bandwidth. 0 when n <= 1.
[[nodiscard]] std::int64_t allreduce_ns(CollectiveAlgorithm algo, const Link& link, std::int32_t n,
                                        std::int64_t bytes) noexcept;
// Ring reduce (or broadcast) alone: (n-1)/n * bytes / bandwidth + (n-1) * latency.
[[nodiscard]] std::int64_t reduce_ns(const Link& link, std::int32_t n, std::int64_t bytes) noexcept;

// Milliseconds to integer nanoseconds (rounded to nearest).
[[nodiscard]] std::int64_t ms_to_ns(double ms) noexcept;

[[nodiscard]] Cluster parse_cluster(std::string_view json_text, std::string_view origin);
[[nodiscard]] Cluster load_cluster(const std::string& path);
[[nodiscard]] std::string to_json(const Cluster& cluster);

}  // namespace pipewright::sim
