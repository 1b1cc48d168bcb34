// The fake, in-process Communicator backend: FakeWorld(n) owns the shared state of n ranks that
// run as threads of one process and exchange data through memory. It follows the contract of the
// real backends (communicator.hpp), so the plan interpreter and the data-parallel algorithms are
// testable without processes or sockets:
//   - send is buffered (completes at once, the data is copied); recv matches sends between the
//     same pair with the same tag in posting order (FIFO), and fails with BackendError when the
//     sizes differ;
//   - collectives match by call order within a communicator; arguments that disagree between
//     ranks (kind, element count, dtype, op, root) fail with BackendError on every rank;
//   - wait(timeout) throws TimeoutError naming the ranks still missing; a rank that died
//     (kill()) or destroyed its world communicator (thread ended) makes every operation that
//     still needs its data fail with PeerError naming it;
//   - split() is collective by call order and returns nullptr on non-members, like the others.
// A non-positive timeout checks once and does not wait. All methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

namespace detail {
struct FakeState;
}

class FakeWorld {
 public:
  // Throws ConfigError unless world_size >= 1.
  explicit FakeWorld(int world_size);
  ~FakeWorld();
  FakeWorld(const FakeWorld&) = delete;
  FakeWorld& operator=(const FakeWorld&) = delete;

  [[nodiscard]] int size() const noexcept;

  // The world communicator of `rank` (0 <= rank < size). Each rank's can be taken once (a second
  // call throws ConfigError). Destroying it counts as that rank leaving: peers still waiting for
  // data it never provided fail with PeerError. It may outlive the FakeWorld.
  [[nodiscard]] std::unique_ptr<Communicator> communicator(int rank);
  // Every rank's world communicator, in rank order.
  [[nodiscard]] std::vector<std::unique_ptr<Communicator>> communicators();

  // Simulates the death of `rank` (SIGKILL): its pending and future operations fail with
  // BackendError, and every operation that needs its data fails with PeerError naming it.
  void kill(int rank);
  [[nodiscard]] bool is_alive(int rank) const;

  // Bytes that `rank` has handed to the transport so far: payloads of sends, and its buffer for
  // each all_reduce, reduce, and broadcast it roots. For tests that count communication volume.
  [[nodiscard]] std::uint64_t bytes_sent(int rank) const;

 private:
  std::shared_ptr<detail::FakeState> state_;
};

}  // namespace pipewright::exec
