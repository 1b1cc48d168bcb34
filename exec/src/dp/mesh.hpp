// The 2-D process mesh of a run: pp pipeline positions x dp data-parallel replicas.
//
// World rank = dp_index * pp + pp_index: the pp ranks of one replica are consecutive (so a
// replica's pipeline neighbours are usually on one node), and the replicas of one pipeline stage
// are pp ranks apart. Sub-communicators are created eagerly, in one deterministic order that every
// rank follows: first the pipeline group of each dp_index (0, 1, ...), then the data-parallel
// group of each pp_index (0, 1, ...). Torch-free.
#pragma once

#include <memory>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

[[nodiscard]] constexpr int mesh_world_rank(int pp_index, int dp_index, int pp) noexcept {
  return dp_index * pp + pp_index;
}

struct Mesh {
  int pp = 1;
  int dp = 1;
  int pp_index = 0;
  int dp_index = 0;
  std::unique_ptr<Communicator> pipe;  // this replica's pipeline group; its rank == pp_index
  std::unique_ptr<Communicator> data;  // this position's replica group; its rank == dp_index
};

// Collective over `world`. Throws ConfigError unless world.size() == pp * dp (pp, dp >= 1).
[[nodiscard]] Mesh make_mesh(Communicator& world, int pp, int dp);

}  // namespace pipewright::exec
