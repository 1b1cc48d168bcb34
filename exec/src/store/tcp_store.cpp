// make_tcp_store(): the rendezvous Store over pipewright's own TCP store (Note [Store protocol]
// in tcp_store_server.cpp): rank 0 hosts the server on the master address; every rank (rank 0
// too) connects as a client, says who it is, and pings so a hung rank can be named.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "comm/comm_errors.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"
#include "store/store_wire.hpp"
#include "store/tcp_store_server.hpp"

namespace pipewright::exec {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kPingInterval = milliseconds(500);
// How long a ping, a goodbye or a question about unresponsive ranks waits for the store: a
// store that does not answer within this is hung (its host, rank 0, is stopped), and a rank
// naming the unresponsive ones must not wait for the full --timeout to learn that.
constexpr auto kShortRequest = milliseconds(3000);

// A connected socket to host:port, or -1 with `error` set. Waits at most until `deadline`.
int connect_to(const std::string& host, int port, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    error = std::string("cannot resolve '") + host + "': " + ::gai_strerror(rc);
    return -1;
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    int err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
      err = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count()))) == 1
                ? 0
                : ETIMEDOUT;
      socklen_t len = sizeof err;
      if (err == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      error = std::strerror(err);
      ::close(fd);
      fd = -1;
    }
  } else if (fd < 0) {
    error = std::strerror(errno);
  }
  ::freeaddrinfo(res);
  if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Reads one frame's payload into `out`: 1 when read, 0 when `deadline` passed first, -1 when the
// connection closed or broke.
int read_frame(int fd, Clock::time_point deadline, std::string& out) {
  std::string in;
  while (true) {
    const std::int64_t len = wire::complete_frame(in);
    if (len < 0) return -1;
    if (len > 0) {
      out = in.substr(4, static_cast<std::size_t>(len) - 4);
      return 1;
    }
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return 0;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    in.append(buf, static_cast<std::size_t>(n));
  }
}

class TcpStore final : public Store {
 public:
  TcpStore(std::unique_ptr<TcpStoreServer> server, int fd, std::string where, milliseconds timeout)
      : server_(std::move(server)), fd_(fd), where_(std::move(where)), timeout_(timeout) {
    pinger_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(stop_mu_);
      while (!stop_cv_.wait_for(lock, kPingInterval, [this] { return stop_; })) {
        try {
          const std::string reply =
              request(wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::kPing)), "ping",
                      std::min(timeout_, kShortRequest));
          std::vector<int> gone = read_ranks(reply);
          std::lock_guard<std::mutex> cache(gone_mu_);
          gone_seen_ = std::move(gone);
        } catch (const Error&) {
          return;  // the store is gone; the next real request reports it
        }
      }
    });
  }

  ~TcpStore() override {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    pinger_.join();
    // A goodbye only when not unwinding: a rank that leaves on an error is reported gone, so
    // the others of a rendezvous in progress fail at once naming it.
    if (std::uncaught_exceptions() == 0) {
      try {
        (void)request(wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::kBye)), "goodbye",
                      std::min(timeout_, kShortRequest));
      } catch (const Error&) {
      }
    }
    ::close(fd_);
  }

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    (void)request(wire::Writer()
                      .u8(static_cast<std::uint8_t>(wire::Op::kSet))
                      .str(key)
                      .str(std::string(value.begin(), value.end())),
                  "set '" + key + "'");
  }

  std::vector<std::uint8_t> get(const std::string& key, milliseconds timeout) override {
    wait({key}, timeout);
    const std::string reply = request(
        wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::kGet)).str(key), "get '" + key + "'");
    wire::Reader r(reply);
    (void)r.u8();
    const std::string value = r.str();
    return {value.begin(), value.end()};
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    const std::string reply =
        request(wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::kAdd)).str(key).i64(delta),
                "add '" + key + "'");
    return wire::Reader(reply).i64();
  }

  bool check(const std::vector<std::string>& keys) override {
    wire::Writer w;
    w.u8(static_cast<std::uint8_t>(wire::Op::kCheck)).i64(static_cast<std::int64_t>(keys.size()));
    for (const auto& k : keys) w.str(k);
    return wire::Reader(request(w, "check")).u8() != 0;
  }

  void wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    auto pause = milliseconds(1);
    while (!check(keys)) {
      const auto now = Clock::now();
      if (now >= deadline) {
        std::string names;
        for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
        throw TimeoutError("store at " + where_ + ": " + detail::timed_out_after(timeout) +
                           " waiting for key(s) " + names);
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, milliseconds(20));
    }
  }

  bool erase(const std::string& key) override {
    return wire::Reader(
               request(wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::kErase)).str(key),
                       "erase '" + key + "'"))
               .u8() != 0;
  }

  // When the store does not answer or is gone, its host (rank 0) is unresponsive, and so are
  // the ranks it had reported gone in its last answer to a ping.
  std::vector<int> unresponsive_ranks(milliseconds silent_for) override {
    try {
      return read_ranks(request(
          wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::kStale)).i64(silent_for.count()),
          "unresponsive ranks", std::min(timeout_, kShortRequest)));
    } catch (const Error&) {
      std::lock_guard<std::mutex> cache(gone_mu_);
      std::vector<int> ranks = gone_seen_;
      if (std::find(ranks.begin(), ranks.end(), 0) == ranks.end()) ranks.insert(ranks.begin(), 0);
      std::sort(ranks.begin(), ranks.end());
      return ranks;
    }
  }

 private:
  // "n, ranks..." (kStale and kPing answers).
  std::vector<int> read_ranks(const std::string& reply) const {
    wire::Reader r(reply);  // a view: `reply` outlives it
    const std::int64_t n = r.i64();
    PW_CHECK(r.ok() && n >= 0 && n <= std::int64_t{1} << 20, BackendError,
             "store at " << where_ << ": malformed list of ranks");
    std::vector<int> ranks(static_cast<std::size_t>(n));
    for (int& rank : ranks) rank = static_cast<int>(r.i64());
    return ranks;
  }

  // Sends one request and returns the reply's payload. PeerError when the connection breaks,
  // TimeoutError when no reply comes within `timeout` (default: the store's).
  std::string request(const wire::Writer& w, const std::string& what) {
    return request(w, what, timeout_);
  }
  std::string request(const wire::Writer& w, const std::string& what, milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty()) throw PeerError(broken_);
    auto fail = [&](const std::string& why) -> std::string {
      broken_ = "store at " + where_ + " (hosted by rank 0): " + what + " failed: " + why +
                " (did rank 0 exit?)";
      throw PeerError(broken_);
    };
    if (!wire::send_all(fd_, w.frame())) return fail(std::strerror(errno));
    std::string reply;
    const int got = read_frame(fd_, Clock::now() + timeout, reply);
    if (got == 1) return reply;
    if (got == -1) return fail("connection closed");
    broken_ = "store at " + where_ + " (hosted by rank 0): no answer to " + what + " within " +
              std::to_string(timeout.count()) + " ms: rank 0 is hung or stopped";
    throw TimeoutError(broken_);
  }

  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only; destroyed after the client closes
  int fd_;
  std::string where_;
  milliseconds timeout_;
  std::mutex mu_;
  std::string broken_;  // once a request failed, every later one fails the same way
  std::mutex gone_mu_;
  std::vector<int> gone_seen_;  // the ranks the store reported gone in its last ping answer
  std::thread pinger_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const WorldInfo& world, milliseconds timeout,
                                      const std::string& fingerprint) {
  const StoreIdentity identity{world.job_id, world.world_size, fingerprint};
  const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
  std::unique_ptr<TcpStoreServer> server;
  if (world.rank == 0)
    server = std::make_unique<TcpStoreServer>(world.master_addr, world.master_port, identity);
  // Rank 0 may simply start later than the others: clients retry until the deadline.
  const auto deadline = Clock::now() + timeout;
  std::string last_error;
  while (true) {
    const int fd = connect_to(world.master_addr, world.master_port, deadline, last_error);
    if (fd >= 0) {
      wire::Writer hello;
      hello.u8(static_cast<std::uint8_t>(wire::Op::kHello))
          .str(wire::kMagic)
          .str(identity.job_id)
          .i64(identity.world_size)
          .str(identity.fingerprint)
          .i64(world.rank);
      std::string reply;
      const int got =
          wire::send_all(fd, hello.frame())
              ? read_frame(fd, std::max(deadline, Clock::now() + milliseconds(2000)), reply)
              : -1;
      wire::Reader r(reply);
      const auto status = static_cast<wire::Status>(r.u8());
      const std::string why = r.str();
      if (got == 1 && r.ok() && status == wire::Status::kAccepted)
        return std::make_unique<TcpStore>(std::move(server), fd, where, timeout);
      ::close(fd);
      PW_CHECK(got != 1 || !r.ok() || status != wire::Status::kRefused, ConfigError,
               "rank " << world.rank << ": the rendezvous store at " << where
                       << " refused this process: " << why
                       << " (another job on this port? give each job its own --master-port)");
      PW_CHECK(got != -1 || world.rank != 0, BackendError,
               "rank 0: the rendezvous store at " << where << " closed the connection");
      // A listener that is not a pipewright store, or one that closed on us: not our job.
      PW_CHECK(got == 0, ConfigError,
               "rank " << world.rank << ": " << where
                       << " does not answer as a pipewright rendezvous store (another program on "
                          "this port? give each job its own --master-port)");
      last_error = "no answer to the hello";
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(50), deadline - now));
  }
  throw TimeoutError("rank " + std::to_string(world.rank) +
                     ": could not reach the rendezvous store at " + where + " within " +
                     std::to_string(timeout.count()) +
                     " ms: rank 0 never joined (not started, or died): " + last_error);
}

}  // namespace pipewright::exec
