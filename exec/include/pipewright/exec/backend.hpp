// Choosing and building a Communicator: the backend enum, its parser, per-communicator options
// and the factory. The factory is the only place that knows which backends were compiled in.
//
//   auto world = resolve_world(flags, current_environment());
//   auto store = make_tcp_store(world, timeout);   // not needed for MPI or the fake backend
//   rendezvous(*store, world, timeout);
//   auto comm = make_communicator(parse_backend("gloo"), world, store.get(), {timeout});
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

class FakeWorld;
class Store;
struct WorldInfo;

enum class Backend : std::uint8_t { kGloo, kMpi, kNccl, kFake };

// "gloo", "mpi", "nccl", "fake" -> Backend; anything else is a ConfigError listing the valid
// names. Parsing does not check that the backend was compiled in (make_communicator does).
[[nodiscard]] Backend parse_backend(const std::string& name);
[[nodiscard]] const char* to_string(Backend backend) noexcept;
// Whether this build contains `backend` (MPI: PIPEWRIGHT_WITH_MPI, NCCL: PIPEWRIGHT_WITH_NCCL).
[[nodiscard]] bool backend_compiled(Backend backend) noexcept;

struct CommOptions {
  // Deadline of communicator setup (connecting to every peer) and the timeout the transport
  // itself applies to each operation (Gloo). Callers still pass their own deadline to
  // Work::wait. pipewright's --timeout.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Gloo: network interface to bind ("eth0"); empty -> GLOO_SOCKET_IFNAME, else 127.0.0.1 when
  // master_addr is a loopback address, else the local address of the route to master_addr.
  std::string gloo_interface;
  // Gloo: buffers from Communicator::allocate_collective_buffer() live in shared memory when
  // every member of the communicator is on this host, and all_reduce() of them runs there
  // (Note [Shared-memory all-reduce]). False: plain heap memory, every byte through Gloo.
  bool shm_collectives = true;
  // Gloo: point-to-point messages with the peers named by Communicator::connect_p2p() go through
  // shared memory when both ranks are on this host (Note [Shared-memory point-to-point]).
  // False: every message through Gloo's TCP.
  bool shm_p2p = true;
  // Fake backend: the world the communicator of WorldInfo::rank is taken from (required).
  FakeWorld* fake_world = nullptr;
  // NCCL: CUDA device of each local rank (empty -> device = local rank).
  std::vector<int> device_map;
};

// Builds the world communicator of `world.rank`. `store` must be the rendezvous store shared by
// all ranks for Gloo and NCCL (ConfigError if null); MPI and the fake backend ignore it. Under
// MPI, world.rank/world_size must match MPI_COMM_WORLD (ConfigError otherwise).
// A backend that this build lacks is a ConfigError ("pipewright was built without NCCL
// (PIPEWRIGHT_WITH_NCCL=OFF)"). Setup failures: TimeoutError / PeerError / BackendError.
[[nodiscard]] std::unique_ptr<Communicator> make_communicator(Backend backend,
                                                              const WorldInfo& world, Store* store,
                                                              const CommOptions& options);

}  // namespace pipewright::exec
