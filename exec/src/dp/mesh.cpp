#include "dp/mesh.hpp"

#include <vector>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

Mesh make_mesh(Communicator& world, int pp, int dp) {
  PW_CHECK(pp >= 1 && dp >= 1, ConfigError,
           "--pp and --dp must be >= 1, got " << pp << " and " << dp);
  PW_CHECK(world.size() == pp * dp, ConfigError,
           "the world has " << world.size() << " processes but --pp " << pp << " x --dp " << dp
                            << " = " << pp * dp << " are needed");
  Mesh mesh;
  mesh.pp = pp;
  mesh.dp = dp;
  mesh.pp_index = world.rank() % pp;
  mesh.dp_index = world.rank() / pp;
  for (int d = 0; d < dp; ++d) {
    std::vector<int> members;
    for (int p = 0; p < pp; ++p) members.push_back(mesh_world_rank(p, d, pp));
    auto comm = world.split(members);
    if (d == mesh.dp_index) mesh.pipe = std::move(comm);
  }
  for (int p = 0; p < pp; ++p) {
    std::vector<int> members;
    for (int d = 0; d < dp; ++d) members.push_back(mesh_world_rank(p, d, pp));
    auto comm = world.split(members);
    if (p == mesh.pp_index) mesh.data = std::move(comm);
  }
  PW_ASSERT(mesh.pipe && mesh.data, "rank " << world.rank() << " is missing a mesh group");
  PW_ASSERT(mesh.pipe->rank() == mesh.pp_index && mesh.data->rank() == mesh.dp_index,
            "mesh group ranks do not follow rank = dp_index * pp + pp_index");
  return mesh;
}

}  // namespace pipewright::exec
