// parse_backend() and make_communicator(): the one place that knows which backends exist.
#include "pipewright/exec/backend.hpp"

#include "comm/backends.hpp"
#if PIPEWRIGHT_WITH_NCCL
#include "nccl/device_map.hpp"
#include "nccl/nccl_communicator.hpp"
#endif
#include "pipewright/exec/fake_communicator.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

Backend parse_backend(const std::string& name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "mpi") return Backend::kMpi;
  if (name == "nccl") return Backend::kNccl;
  if (name == "fake") return Backend::kFake;
  throw ConfigError("--backend: unknown backend '" + name + "'; valid: gloo, mpi, nccl, fake");
}

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kGloo:
      return "gloo";
    case Backend::kMpi:
      return "mpi";
    case Backend::kNccl:
      return "nccl";
    case Backend::kFake:
      return "fake";
  }
  return "?";
}

bool backend_compiled(Backend backend) noexcept {
  switch (backend) {
    case Backend::kGloo:
    case Backend::kFake:
      return true;
    case Backend::kMpi:
#if PIPEWRIGHT_WITH_MPI
      return true;
#else
      return false;
#endif
    case Backend::kNccl:
#if PIPEWRIGHT_WITH_NCCL
      return true;
#else
      return false;
#endif
  }
  return false;
}

std::unique_ptr<Communicator> make_communicator(Backend backend, const WorldInfo& world,
                                                Store* store, const CommOptions& options) {
  PW_CHECK(options.timeout.count() > 0, ConfigError,
           "--timeout must be > 0, got " << options.timeout.count() << " ms");
  switch (backend) {
    case Backend::kFake:
      PW_CHECK(options.fake_world != nullptr, ConfigError,
               "the fake backend needs CommOptions::fake_world (it only runs ranks as threads of "
               "one process)");
      PW_CHECK(options.fake_world->size() == world.world_size, ConfigError,
               "the fake world has " << options.fake_world->size()
                                     << " ranks but the world size is " << world.world_size);
      return options.fake_world->communicator(world.rank);
    case Backend::kGloo:
      PW_CHECK(store != nullptr, ConfigError, "the gloo backend needs a rendezvous store");
      return detail::make_gloo_communicator(world, *store, options);
    case Backend::kMpi:
#if PIPEWRIGHT_WITH_MPI
      return detail::make_mpi_communicator(world, options);
#else
      throw ConfigError("pipewright was built without MPI (PIPEWRIGHT_WITH_MPI=OFF)");
#endif
    case Backend::kNccl:
#if PIPEWRIGHT_WITH_NCCL
    {
      // NCCL (issue 8, nccl_communicator.hpp): device = local rank unless device_map says
      // otherwise; fewer devices than local ranks is a ConfigError. The unique id goes through
      // the rendezvous store.
      PW_CHECK(store != nullptr, ConfigError, "the nccl backend needs a rendezvous store");
      std::string count_detail;
      const int device_count = cuda_device_count(&count_detail);
      NcclOptions nccl;
      nccl.rank = world.rank;
      nccl.size = world.world_size;
      nccl.device = resolve_device(options.device_map, world.local_rank, world.local_world_size,
                                   device_count, count_detail);
      nccl.timeout = options.timeout;
      nccl.store_set = [store](const std::string& key, const std::string& value) {
        store->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
      };
      const auto timeout = options.timeout;
      nccl.store_get = [store, timeout](const std::string& key) {
        const auto bytes = store->get(key, timeout);
        return std::string(bytes.begin(), bytes.end());
      };
      return make_nccl_communicator(nccl);
    }
#else
      throw ConfigError("pipewright was built without NCCL (PIPEWRIGHT_WITH_NCCL=OFF)");
#endif
  }
  throw ConfigError("unknown backend");
}

}  // namespace pipewright::exec
