// Note [Store protocol]
// ~~~~~~~~~~~~~~~~~~~~~
// Issue 20, item 1: c10d's TCPStore listens on every address of the host and lets anyone who
// connects read and write keys, so a process of a second job started on the same port joined
// the first job's rendezvous and broke it. pipewright's store is its own small server:
//   * it listens on the master address only (127.0.0.1 for local jobs), never on *:PORT;
//   * a port already in use is a ConfigError naming the port (exit 2), not a crash later;
//   * the first frame of every connection is a hello carrying the job identity (job id, world
//     size, job fingerprint) and the rank; a process whose identity does not match the host's
//     (identity_mismatch) is refused with a one-line reason and its connection closed, before
//     it can touch a key; so is a second connection claiming a rank that is connected;
//   * the server notes when an accepted rank's connection closes without a goodbye (the process
//     died) under "pipewright/gone/<rank>", so the rendezvous names a dead rank at once instead
//     of waiting for its deadline, and answers which ranks have been silent for longer than a
//     threshold (kStale), so a timeout can name a hung (SIGSTOPped) rank: every client pings,
//     and each ping's answer lists the ranks gone so far, which the client keeps for when the
//     store itself is gone (its host, rank 0, failed because of them).
// The wire format is in store_wire.hpp. One thread serves every connection with poll(); the
// store holds only rendezvous keys, so requests are tiny and each is answered at once.
#include "store/tcp_store_server.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "store/store_wire.hpp"

namespace pipewright::exec {

std::string identity_mismatch(const StoreIdentity& client, const StoreIdentity& host) {
  auto id = [](const std::string& s) { return s.empty() ? std::string("(none)") : s; };
  if (client.world_size != host.world_size) {
    return "world size " + std::to_string(client.world_size) + " but the store's job has " +
           std::to_string(host.world_size);
  }
  if (client.job_id != host.job_id) {
    return "job id " + id(client.job_id) + " but the store's job is " + id(host.job_id);
  }
  return {};
}

namespace {

using Clock = std::chrono::steady_clock;

struct Client {
  int fd = -1;
  std::string in;
  int rank = -1;  // after an accepted hello
  bool bye = false;
  Clock::time_point last_seen = Clock::now();
};

}  // namespace

struct TcpStoreServer::State {
  StoreIdentity identity;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::map<std::string, std::string> data;
  std::map<int, Client> clients;               // by fd
  std::map<int, Clock::time_point> last_seen;  // accepted ranks (alive or not)
  std::set<int> connected;                     // ranks with an open accepted connection
  std::set<int> gone;                          // ranks whose connection closed without a goodbye
  std::thread thread;

  void serve();
  void close_client(int fd);
  // False when the connection must be closed.
  bool handle(Client& c, std::string_view payload);
};

void TcpStoreServer::State::close_client(int fd) {
  auto it = clients.find(fd);
  if (it == clients.end()) return;
  const Client& c = it->second;
  if (c.rank >= 0) {
    connected.erase(c.rank);
    if (!c.bye) {
      gone.insert(c.rank);
      data["pipewright/gone/" + std::to_string(c.rank)] = "1";
    }
  }
  ::close(fd);
  clients.erase(it);
}

bool TcpStoreServer::State::handle(Client& c, std::string_view payload) {
  wire::Reader r(payload);
  const auto op = static_cast<wire::Op>(r.u8());
  wire::Writer w;
  if (c.rank < 0) {  // the first frame must be an accepted hello
    if (op != wire::Op::kHello || r.str() != wire::kMagic) return false;
    StoreIdentity id;
    id.job_id = r.str();
    id.world_size = static_cast<int>(r.i64());
    id.fingerprint = r.str();
    const auto rank = r.i64();
    if (!r.ok()) return false;
    std::string why = identity_mismatch(id, identity);
    if (why.empty() && (rank < 0 || rank >= identity.world_size))
      why = "rank " + std::to_string(rank) + " is outside the store's world";
    if (why.empty() && connected.count(static_cast<int>(rank)) != 0) {
      why = "rank " + std::to_string(rank) + " of this job is already connected";
      if (id.fingerprint != identity.fingerprint)
        why += " (and this process's job fingerprint " + id.fingerprint + " differs from " +
               identity.fingerprint + ")";
    }
    if (!why.empty()) {
      (void)wire::send_all(
          c.fd, w.u8(static_cast<std::uint8_t>(wire::Status::kRefused)).str(why).frame());
      return false;
    }
    c.rank = static_cast<int>(rank);
    connected.insert(c.rank);
    gone.erase(c.rank);
    data.erase("pipewright/gone/" + std::to_string(c.rank));
    last_seen[c.rank] = Clock::now();
    return wire::send_all(c.fd,
                          w.u8(static_cast<std::uint8_t>(wire::Status::kAccepted)).str("").frame());
  }
  last_seen[c.rank] = Clock::now();
  switch (op) {
    case wire::Op::kSet: {
      std::string key = r.str();
      std::string value = r.str();
      if (!r.ok()) return false;
      data[std::move(key)] = std::move(value);
      break;
    }
    case wire::Op::kGet: {
      const std::string key = r.str();
      if (!r.ok()) return false;
      auto it = data.find(key);
      w.u8(it != data.end() ? 1 : 0).str(it != data.end() ? it->second : std::string());
      break;
    }
    case wire::Op::kAdd: {
      const std::string key = r.str();
      const std::int64_t delta = r.i64();
      if (!r.ok()) return false;
      std::string& slot = data[key];
      std::int64_t value = 0;  // an absent or non-integer value counts as 0
      (void)std::from_chars(slot.data(), slot.data() + slot.size(), value);
      value += delta;
      slot = std::to_string(value);
      w.i64(value);
      break;
    }
    case wire::Op::kCheck: {
      const std::int64_t n = r.i64();
      bool all = true;
      for (std::int64_t i = 0; i < n && r.ok(); ++i) all = data.count(r.str()) != 0 && all;
      if (!r.ok() || n < 0) return false;
      w.u8(all ? 1 : 0);
      break;
    }
    case wire::Op::kErase: {
      const std::string key = r.str();
      if (!r.ok()) return false;
      w.u8(data.erase(key) != 0 ? 1 : 0);
      break;
    }
    case wire::Op::kStale: {
      const auto threshold = std::chrono::milliseconds(r.i64());
      if (!r.ok()) return false;
      std::vector<int> stale;
      const auto now = Clock::now();
      for (const auto& [rank, seen] : last_seen) {
        if (gone.count(rank) != 0 || now - seen > threshold) stale.push_back(rank);
      }
      w.i64(static_cast<std::int64_t>(stale.size()));
      for (int s : stale) w.i64(s);
      break;
    }
    case wire::Op::kPing:  // the answer: the ranks gone so far, which the client keeps
      w.i64(static_cast<std::int64_t>(gone.size()));
      for (int g : gone) w.i64(g);
      break;
    case wire::Op::kBye:
      c.bye = true;
      break;
    default:
      return false;
  }
  return wire::send_all(c.fd, w.frame());
}

void TcpStoreServer::State::serve() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake[0], POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (const auto& [fd, c] : clients) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;  // destroyed
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        // A client that stops reading must not stall the others for long.
        timeval tv{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        clients[fd].fd = fd;
      }
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = fds[i].fd;
      Client& c = clients.at(fd);
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        close_client(fd);
        continue;
      }
      c.in.append(buf, static_cast<std::size_t>(n));
      bool keep = true;
      while (keep) {
        const std::int64_t len = wire::complete_frame(c.in);
        if (len < 0) keep = false;
        if (len <= 0) break;
        keep = handle(c, std::string_view(c.in).substr(4, static_cast<std::size_t>(len) - 4));
        c.in.erase(0, static_cast<std::size_t>(len));
      }
      if (!keep) close_client(fd);
    }
  }
}

TcpStoreServer::TcpStoreServer(const std::string& addr, int port, StoreIdentity identity)
    : state_(std::make_unique<State>()) {
  state_->identity = std::move(identity);
  const std::string where = addr + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  PW_CHECK(rc == 0 && res != nullptr, ConfigError,
           "rank 0: cannot resolve the master address '" << addr << "': " << ::gai_strerror(rc));
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int saved = errno;
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 512) == 0) {
      state_->listen_fd = fd;
    } else {
      saved = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (state_->listen_fd < 0) {
    PW_CHECK(saved != EADDRINUSE, ConfigError,
             "rank 0: port " << port << " is already in use on " << addr
                             << " (another job on this port?): cannot host the rendezvous store; "
                                "pick another with --master-port");
    PW_CHECK(saved != EADDRNOTAVAIL, ConfigError,
             "rank 0: cannot host the rendezvous store at "
                 << where << ": the address is not one of this host's (MASTER_ADDR must name "
                 << "rank 0's host)");
    throw BackendError("rank 0: cannot host the rendezvous store at " + where + ": " +
                       std::strerror(saved));
  }
  PW_CHECK(::pipe2(state_->wake, O_CLOEXEC) == 0, BackendError,
           "rank 0: pipe() failed: " << std::strerror(errno));
  state_->thread = std::thread([s = state_.get()] { s->serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char x = 1;
  (void)!::write(state_->wake[1], &x, 1);
  state_->thread.join();
  for (auto& [fd, c] : state_->clients) ::close(fd);
  ::close(state_->listen_fd);
  ::close(state_->wake[0]);
  ::close(state_->wake[1]);
}

}  // namespace pipewright::exec
