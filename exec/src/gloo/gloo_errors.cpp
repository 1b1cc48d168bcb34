// How the Gloo backend names a failure (gloo_errors.hpp).
#include "gloo/gloo_errors.hpp"

#include "comm/communicator_base.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

std::exception_ptr mapped_error(const std::exception& e, const Blame& blame,
                                std::chrono::milliseconds timeout) {
  if (dynamic_cast<const Error*>(&e) != nullptr) {
    return std::current_exception();  // already ours (e.g. from the store)
  }
  const std::string what = e.what();
  if (contains(what, "Operation timed out") || contains(what, "Timed out") ||
      contains(what, "timed out") || contains(what, "Timeout") || contains(what, "timeout")) {
    return std::make_exception_ptr(TimeoutError(blame.prefix + ": " + timed_out_after(timeout) +
                                                " waiting for " + blame.peers +
                                                " (gloo: " + first_line(what) + ")"));
  }
  if (contains(what, "Connection closed by peer") || contains(what, "Connection reset") ||
      contains(what, "Broken pipe") || contains(what, "Connection refused") ||
      contains(what, "ECONNRESET") || contains(what, "EPIPE") || contains(what, "closed")) {
    return std::make_exception_ptr(
        PeerError(blame.prefix + ": peer " + blame.peers +
                  " died or closed its connection (gloo: " + first_line(what) + ")"));
  }
  return std::make_exception_ptr(BackendError(blame.prefix + ": gloo failed: " + first_line(what)));
}

[[noreturn]] void rethrow_mapped(const std::exception& e, const Blame& blame,
                                 std::chrono::milliseconds timeout) {
  std::rethrow_exception(mapped_error(e, blame, timeout));
}

}  // namespace pipewright::exec::detail
