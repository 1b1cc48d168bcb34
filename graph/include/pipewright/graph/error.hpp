// pipewright's error hierarchy and the PW_CHECK / PW_ASSERT macros.
//
// Every module throws one of these; only tools/ turns them into exit codes:
//   InputError and its subclasses (ParseError, InvalidGraphError, InvalidPlanError,
//   ConfigError)  -> exit 2 (bad input or configuration)
//   PeerError     -> exit 3 (a peer rank failed or disappeared)
//   TimeoutError  -> exit 4 (an operation passed its deadline)
//   anything else -> exit 1 (internal error; InternalError comes from PW_ASSERT)
// It lives in graph/ because graph is the lowest module; every other module depends on it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace pipewright {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad user input: a file, a field, a flag. Messages name the file and field (JSON pointer).
class InputError : public Error {
 public:
  using Error::Error;
};
class ParseError : public InputError {
 public:
  using InputError::InputError;
};
class InvalidGraphError : public InputError {
 public:
  using InputError::InputError;
};
class InvalidPlanError : public InputError {
 public:
  using InputError::InputError;
};
class ConfigError : public InputError {
 public:
  using InputError::InputError;
};

// A failure of a communication backend (Gloo, MPI, NCCL, the store).
class BackendError : public Error {
 public:
  using Error::Error;
};
// A peer rank died or closed its connection. Messages name the peer rank, stage, microbatch, step.
class PeerError : public BackendError {
 public:
  using BackendError::BackendError;
};
// An operation passed its deadline. Same naming contract as PeerError.
class TimeoutError : public BackendError {
 public:
  using BackendError::BackendError;
};

// A broken internal invariant (a bug in pipewright, never bad input).
class InternalError : public Error {
 public:
  using Error::Error;
};

// Exit code that tools/ uses for an exception (see the table above).
inline int exit_code_for(const std::exception& e) noexcept {
  if (dynamic_cast<const InputError*>(&e) != nullptr) return 2;
  if (dynamic_cast<const PeerError*>(&e) != nullptr) return 3;
  if (dynamic_cast<const TimeoutError*>(&e) != nullptr) return 4;
  return 1;
}

}  // namespace pipewright

// PW_CHECK(cond, ErrorType, message-stream): validates user input; always on.
//   PW_CHECK(n > 0, pipewright::ConfigError, "--stages must be > 0, got " << n);
#define PW_CHECK(cond, ErrorType, msg)     \
  do {                                     \
    if (!(cond)) {                         \
      std::ostringstream pw_check_os_;     \
      pw_check_os_ << msg;                 \
      throw ErrorType(pw_check_os_.str()); \
    }                                      \
  } while (false)

// PW_ASSERT(cond, message-stream): internal invariant; always on, throws InternalError.
#define PW_ASSERT(cond, msg)                                                                   \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::ostringstream pw_assert_os_;                                                        \
      pw_assert_os_ << __FILE__ << ":" << __LINE__ << ": internal error: assertion `" << #cond \
                    << "` failed: " << msg;                                                    \
      throw ::pipewright::InternalError(pw_assert_os_.str());                                  \
    }                                                                                          \
  } while (false)
