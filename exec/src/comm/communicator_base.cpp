// Note [Communicator base] and Note [Work completion] (communicator_base.hpp).
#include "comm/communicator_base.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

bool BasicWork::poll() {
  if (error_) std::rethrow_exception(error_);
  if (done_) return true;
  try {
    done_ = test();
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
  return done_;
}

void BasicWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> guard = lock();
  check_waitable();
  WaitState state;
  state.timeout = timeout;
  state.start = now();
  state.deadline = state.start + timeout;
  while (!poll()) {
    if (now() >= state.deadline) std::rethrow_exception(timeout_error(timeout));
    pause(state, guard);
  }
}

bool BasicWork::is_completed() {
  std::unique_lock<std::mutex> guard = lock();
  check_waitable();
  if (!done_ && !error_) start_progress();
  return poll();
}

void BasicWork::pause(WaitState& state, std::unique_lock<std::mutex>& /*lock*/) {
  if (now() - state.start < kSpin) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(kPollSleep);
  }
}

std::exception_ptr BasicWork::timeout_error(std::chrono::milliseconds timeout) {
  return std::make_exception_ptr(
      TimeoutError(prefix_ + ": " + timed_out_after(timeout) + " waiting for " + waiting_for()));
}

namespace {
class FailedWork final : public Work {
 public:
  explicit FailedWork(std::exception_ptr error) : error_(std::move(error)) {}
  void wait(std::chrono::milliseconds /*timeout*/) override { std::rethrow_exception(error_); }
  bool is_completed() override { std::rethrow_exception(error_); }

 private:
  std::exception_ptr error_;
};
}  // namespace

WorkPtr failed_work(std::exception_ptr error) {
  return std::make_shared<FailedWork>(std::move(error));
}

CommunicatorBase::CommunicatorBase(std::string backend_name, std::vector<int> members, int rank)
    : backend_name_(std::move(backend_name)), members_(std::move(members)), rank_(rank) {
  PW_ASSERT(rank_ >= 0 && rank_ < size(),
            "communicator rank " << rank_ << " out of range for " << size() << " members");
}

std::unique_ptr<Communicator> CommunicatorBase::split(const std::vector<int>& members) {
  PW_ASSERT(!members.empty() && std::is_sorted(members.begin(), members.end()) &&
                std::adjacent_find(members.begin(), members.end()) == members.end() &&
                members.front() >= 0 && members.back() < size(),
            "split() members must be ascending, unique communicator-local ranks < " << size());
  SplitRequest request;
  request.seq = split_seq_++;
  request.members = members;
  for (int r : members) request.world.push_back(global_rank(r));
  auto pos = std::find(members.begin(), members.end(), rank_);
  if (pos != members.end()) request.rank = static_cast<int>(pos - members.begin());
  return make_split(request);
}

void CommunicatorBase::check_rank(int r, const char* what) const {
  PW_ASSERT(r >= 0 && r < size(),
            what << " rank " << r << " out of range for a communicator of " << size() << " ranks");
}

std::string CommunicatorBase::op_prefix(const std::string& op, const OpContext& ctx) const {
  return detail::op_prefix(self(), op, ctx);
}

std::string CommunicatorBase::p2p_prefix(bool is_send, int peer, const OpContext& ctx) const {
  return detail::op_prefix(self(), p2p_name(is_send, global_rank(peer)), ctx);
}

std::string CommunicatorBase::others() const {
  std::vector<int> ranks;
  for (int r = 0; r < size(); ++r) {
    if (r != rank_) ranks.push_back(global_rank(r));
  }
  if (ranks.empty()) return "nobody";
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  return "one of ranks " + rank_list(ranks);
}

std::string first_line(const std::string& s) {
  auto line = s.substr(0, s.find('\n'));
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

bool contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace pipewright::exec::detail
