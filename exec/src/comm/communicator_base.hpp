// What every Communicator backend shares, so that each backend (fake, Gloo, MPI, NCCL) implements
// only its transport. Modelled on c10d's Backend/Work base classes. Private to exec/.
//
// Note [Communicator base]
// CommunicatorBase holds the group: the world ranks of its members by communicator-local rank and
// this rank's index. It answers rank(), size(), global_rank() and backend_name(), builds the
// prefixes of error messages ("rank 1: recv from rank 2 (RECV_F stage 3 microbatch 2 step 7)"),
// and does split()'s bookkeeping: it validates the member list, numbers the splits (the same
// number on every rank, since split() is collective by call order), computes the child's world
// ranks and this rank's index in it, and hands that SplitRequest to the backend's make_split(),
// on members and non-members alike (some transports, e.g. ncclCommSplit, need every rank).
//
// Note [Work completion]
// BasicWork is the one implementation of Work::wait(timeout) / is_completed(). A backend's Work
// says only how to look at its operation once (test(), never blocking) and how to block for
// progress (pause(): a condition variable, a blocking transport wait with a deadline, or the
// default poll backoff). The base runs the loop
//     while (!test()) { if (now() >= deadline) throw timeout_error(timeout); pause(); }
// so a non-positive timeout looks once and never blocks. It keeps the first error that test()
// throws and rethrows it from every later wait() and is_completed() without asking the transport
// again (c10d's Work::exception_), and it stops asking once test() returned true. Timeouts are
// not stored (a later wait may still succeed) unless a backend's timeout_error() makes its
// transport fail for good (NCCL aborts the communicator, Gloo p2p marks the buffer failed). The
// timeout message names the peer(s) and the operation's context:
//     "rank 0: recv from rank 1 (RECV_F stage 1 microbatch 3 step 4): timed out after 200 ms
//      waiting for rank 1"
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/comm_errors.hpp"
#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

using WorkClock = std::chrono::steady_clock;

// Note [Work completion]
class BasicWork : public Work {
 public:
  void wait(std::chrono::milliseconds timeout) final;
  [[nodiscard]] bool is_completed() final;

 protected:
  // `prefix` is op_prefix(): "rank <self>: <op> (<ctx>)".
  explicit BasicWork(std::string prefix) : prefix_(std::move(prefix)) {}
  [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }

  // The state of one wait() call, for pause().
  struct WaitState {
    std::chrono::milliseconds timeout{0};
    WorkClock::time_point start;
    WorkClock::time_point deadline;
    std::chrono::microseconds backoff{0};  // free for pause() to use; 0 at the first pause
  };

  // One look at the operation, without blocking: true when it completed, false while it runs;
  // throws when it failed (the base stores that error, see the note). Called with lock() held.
  [[nodiscard]] virtual bool test() = 0;
  // Whom the operation waits for, for the timeout message: "rank 2", "ranks [1, 3] to join".
  [[nodiscard]] virtual std::string waiting_for() const = 0;
  // Blocks until progress is possible, at most until state.deadline; may return early. Called
  // with lock() held. The default polls: it yields during the first kSpin of the wait (keeps
  // collective progress fast), then sleeps kPollSleep.
  virtual void pause(WaitState& state, std::unique_lock<std::mutex>& lock);
  // The mutex held around test() and pause() (none by default).
  [[nodiscard]] virtual std::unique_lock<std::mutex> lock() { return {}; }
  // Called by is_completed() before test(), with lock() held: a transport that progresses only
  // inside a blocking wait can start a background waiter here (Note [Gloo p2p completion]).
  virtual void start_progress() {}
  // Rejects a wait() or is_completed() that the caller may not make yet (InternalError), before
  // anything else. Not an outcome of the operation, so not stored.
  virtual void check_waitable() const {}
  // The clock of wait() (NCCL injects one so that timeout tests are exact and instant).
  [[nodiscard]] virtual WorkClock::time_point now() const { return WorkClock::now(); }
  // The error a wait(timeout) throws on expiry. Default: TimeoutError
  // "<prefix>: timed out after <timeout> ms waiting for <waiting_for()>".
  [[nodiscard]] virtual std::exception_ptr timeout_error(std::chrono::milliseconds timeout);

  static constexpr std::chrono::milliseconds kSpin{200};
  static constexpr std::chrono::microseconds kPollSleep{200};

 private:
  bool poll();  // test() with the stored outcome; requires lock()

  std::string prefix_;
  bool done_ = false;
  std::exception_ptr error_;
};

// A Work that has already failed with `error`: every wait() and is_completed() rethrows it.
[[nodiscard]] WorkPtr failed_work(std::exception_ptr error);
template <typename E>
[[nodiscard]] WorkPtr failed_work(const std::string& message) {
  return failed_work(std::make_exception_ptr(E(message)));
}

// The first line of a transport's message, at most 300 characters; whether `s` contains `needle`.
[[nodiscard]] std::string first_line(const std::string& s);
[[nodiscard]] bool contains(const std::string& s, const char* needle);

// Note [Communicator base]
class CommunicatorBase : public Communicator {
 public:
  [[nodiscard]] int rank() const noexcept final { return rank_; }
  [[nodiscard]] int size() const noexcept final { return static_cast<int>(members_.size()); }
  [[nodiscard]] std::string backend_name() const final { return backend_name_; }
  [[nodiscard]] int global_rank(int r) const noexcept final {
    return r >= 0 && r < size() ? members_[static_cast<std::size_t>(r)] : -1;
  }
  // Validates `members` (ascending, unique, in range: else InternalError), then make_split().
  [[nodiscard]] std::unique_ptr<Communicator> split(const std::vector<int>& members) final;

 protected:
  // `members`: world ranks by communicator-local rank; `rank`: this rank's index in it.
  CommunicatorBase(std::string backend_name, std::vector<int> members, int rank);

  struct SplitRequest {
    std::int64_t seq = 0;      // this communicator's earlier split() calls: equal on every rank
    std::vector<int> members;  // communicator-local ranks of this communicator, validated
    std::vector<int> world;    // the members' world ranks
    int rank = -1;             // this rank's index in `members`; -1 when not a member
  };
  // Creates the sub-communicator; called on every rank, member or not. Returns nullptr on
  // non-members.
  [[nodiscard]] virtual std::unique_ptr<Communicator> make_split(const SplitRequest& request) = 0;

  // This rank's world rank.
  [[nodiscard]] int self() const noexcept { return members_[static_cast<std::size_t>(rank_)]; }
  [[nodiscard]] const std::vector<int>& members() const noexcept { return members_; }
  // InternalError unless 0 <= r < size(): "send rank 5 out of range for a communicator of 2 ranks".
  void check_rank(int r, const char* what) const;
  // "rank <self>: <op> (<ctx>)", and the same for point-to-point ("send to rank 2").
  [[nodiscard]] std::string op_prefix(const std::string& op, const OpContext& ctx) const;
  [[nodiscard]] std::string p2p_prefix(bool is_send, int peer, const OpContext& ctx) const;
  // Whom a collective waits for: "rank 2", "one of ranks [0, 2, 3]", or "nobody" (size 1).
  [[nodiscard]] std::string others() const;

 private:
  std::string backend_name_;
  std::vector<int> members_;
  int rank_;
  std::int64_t split_seq_ = 0;
};

}  // namespace pipewright::exec::detail
