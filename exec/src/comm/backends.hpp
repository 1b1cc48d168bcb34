// Private factories of the compiled-in Communicator backends, called by make_communicator()
// (backend.cpp). Each lives in its own translation unit so that only that file includes the
// transport's headers.
#pragma once

#include <memory>
#include <string>

#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"

namespace pipewright::exec::detail {

// gloo_communicator.cpp. `store` must outlive the communicator and its sub-communicators.
std::unique_ptr<Communicator> make_gloo_communicator(const WorldInfo& world, Store& store,
                                                     const CommOptions& options);

#if PIPEWRIGHT_WITH_MPI
// mpi_communicator.cpp. Initialises MPI (MPI_Init_thread, MPI_THREAD_MULTIPLE) on first use.
std::unique_ptr<Communicator> make_mpi_communicator(const WorldInfo& world,
                                                    const CommOptions& options);
#endif

// NCCL: make_nccl_communicator() in nccl_communicator.hpp (issue 8).

// net_address.cpp. The local address of the route to `host` (the master): what this rank's peers
// reach it by, as PyTorch picks Gloo's interface; empty if `host` does not resolve or has no
// route.
[[nodiscard]] std::string address_towards(const std::string& host, int port);

}  // namespace pipewright::exec::detail
