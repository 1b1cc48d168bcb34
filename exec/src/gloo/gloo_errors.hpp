// How the Gloo backend names a failure: whatever c10d or gloo threw becomes a pipewright error
// (TimeoutError, PeerError, BackendError) that names the rank, the operation and whom it waited
// for. Torch-free; used by gloo_communicator.cpp. Private to exec/.
#pragma once

#include <chrono>
#include <exception>
#include <string>

namespace pipewright::exec::detail {

// What an operation waits for, and who to blame: "rank 3" or "one of ranks [0, 2, 3]".
struct Blame {
  std::string prefix;  // op_prefix()
  std::string peers;
};

// Maps whatever c10d/gloo threw (the exception being handled) to the pipewright error contract.
[[nodiscard]] std::exception_ptr mapped_error(const std::exception& e, const Blame& blame,
                                              std::chrono::milliseconds timeout);

[[noreturn]] void rethrow_mapped(const std::exception& e, const Blame& blame,
                                 std::chrono::milliseconds timeout);

}  // namespace pipewright::exec::detail
