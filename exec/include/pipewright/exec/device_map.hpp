// Which CUDA device each local rank of a node uses with the NCCL backend (`--device-map`).
// Public so that the CLI can parse the flag once it knows the local world size.
//
// By default local rank r uses device r. `--device-map` overrides it in one of two forms:
//   "2,3,0,1"       entry i is the device of local rank i (one entry per local rank)
//   "0:2,1:3"       explicit local_rank:device pairs, every local rank exactly once
// Two local ranks may not share a device (NCCL does not support one device as two ranks of a
// communicator: it may hang). Device-free, so it is unit-tested on machines without a GPU.
#pragma once

#include <string>
#include <vector>

namespace pipewright::exec {

// Parses `spec` for a node with `local_world_size` ranks and returns the device of each local
// rank. An empty spec is the identity map. Throws ConfigError naming the column and the problem
// (not an integer, negative, a local rank out of range, listed twice or missing, a device shared
// by two local ranks, an entry count different from local_world_size).
[[nodiscard]] std::vector<int> parse_device_map(const std::string& spec, int local_world_size);

// The device of `local_rank` given a parsed map (empty: device = local rank), checked against
// the node's `device_count` (from cudaGetDeviceCount; `count_detail` says why it is 0 when the
// runtime reported an error and is appended to the message). Every rank checks the whole map, so
// all fail alike. Throws ConfigError:
//   "--backend nccl needs 2 CUDA devices on this node for 2 local ranks; found 0"
//   "--device-map maps local rank 0 to CUDA device 5; this node has 2 (0..1)"
[[nodiscard]] int resolve_device(const std::vector<int>& device_map, int local_rank,
                                 int local_world_size, int device_count,
                                 const std::string& count_detail = "");
// The same from the --device-map text (parse_device_map(); empty: device = local rank).
[[nodiscard]] int resolve_device(const std::string& spec, int local_rank, int local_world_size,
                                 int device_count, const std::string& count_detail = "");

}  // namespace pipewright::exec
