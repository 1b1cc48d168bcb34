// The CUDA device of this rank with --backend nccl, decided before any stage is built or any
// peer is contacted, so that a node without enough devices (or a build without NCCL) fails with
// exit 2 and the reason before training.
#pragma once

#include <string>

namespace pipewright::exec {

// Throws ConfigError: "pipewright was built without NCCL ..." in a build without NCCL;
// "--backend nccl needs 2 CUDA devices on this node for 2 local ranks; found 0 (...)" when the
// node has fewer CUDA devices than local ranks; a bad --device-map (parse_device_map()).
[[nodiscard]] int nccl_rank_device(int local_rank, int local_world_size,
                                   const std::string& device_map_spec);

}  // namespace pipewright::exec
