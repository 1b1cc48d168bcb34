// Multi-node launching: the node layout and the links between launchers (launch_nodes.hpp).
//
// Note [Launcher links]: the launcher of node 0 listens on MASTER_ADDR:agent port (MASTER_PORT+1
// unless --agent-port; MASTER_PORT itself belongs to the ranks' rendezvous store, hosted by rank
// 0); every other launcher connects to it before starting its ranks. The protocol is one line per
// message:
//   node K -> node 0   HELLO 1 <node rank> <nnodes> <nproc per node>
//   node 0 -> node K   START <job id>   once every node has said HELLO; or REFUSE <why>
//   both ways          PING             every 0.5 s
//                      FAIL <node> <exit code> <cause class> <text>   a node's first failure;
//                                       node 0 relays it to every other node
//   node K -> node 0   DONE             every rank of node K exited 0
// A node that says nothing for --node-timeout, or whose connection closes before DONE, is lost:
// the launchers that notice stop their ranks and name it. Node 0 stays up until every node is
// done, failed or lost, so a node still training never loses its peer's launcher early.
#include "launch_nodes.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <sstream>
#include <thread>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/hostlist.hpp"

namespace pipewright::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPingEvery = std::chrono::milliseconds(500);

int parse_env_int(const std::map<std::string, std::string>& env, const std::string& name) {
  const std::string& text = env.at(name);
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  PW_CHECK(ec == std::errc() && ptr == text.data() + text.size() && !text.empty(), ConfigError,
           "launch: environment variable " << name << "='" << text << "' is not an integer");
  return value;
}

const std::string* find_env(const std::map<std::string, std::string>& env,
                            std::initializer_list<const char*> names, std::string* which) {
  for (const char* n : names) {
    auto it = env.find(n);
    if (it != env.end()) {
      *which = n;
      return &it->second;
    }
  }
  return nullptr;
}

// A flag's value, else Slurm's; both present and different: ConfigError naming both.
template <typename T>
std::optional<T> merge(const std::optional<T>& flag, const char* flag_name,
                       const std::optional<T>& slurm, const std::string& slurm_text) {
  if (flag && slurm && *flag != *slurm) {
    std::ostringstream os;
    os << "launch: " << flag_name << " " << *flag << " but " << slurm_text
       << " (Slurm): drop the flag or make them agree";
    throw ConfigError(os.str());
  }
  return flag ? flag : slurm;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

void send_line(int fd, const std::string& line) {
  const std::string msg = line + "\n";
  // Short control messages: a full send buffer (a dead link) only loses a heartbeat, which
  // the silence check on the other side turns into "lost".
  (void)::send(fd, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

// One TCP link to another launcher, read without blocking and split into lines.
struct Link {
  int fd = -1;
  int node = -1;
  std::string inbuf;
  Clock::time_point last_heard = Clock::now();
  Clock::time_point last_sent = Clock::now();
  bool done = false;    // said DONE
  bool failed = false;  // said FAIL
  bool closed = false;  // EOF, an error, or lost
  ~Link() {
    if (fd >= 0) ::close(fd);
  }
  // Appends complete lines; returns false on EOF or a socket error.
  bool read_lines(std::vector<std::string>& lines) {
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        inbuf.append(buf, static_cast<std::size_t>(n));
        last_heard = Clock::now();
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      split(lines);
      return false;
    }
    split(lines);
    return true;
  }
  void split(std::vector<std::string>& lines) {
    std::size_t start = 0;
    for (std::size_t nl; (nl = inbuf.find('\n', start)) != std::string::npos; start = nl + 1)
      lines.push_back(inbuf.substr(start, nl - start));
    inbuf.erase(0, start);
  }
};

std::vector<std::string> words(const std::string& line, std::size_t max_words) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < line.size() && out.size() + 1 < max_words) {
    const std::size_t sp = line.find(' ', pos);
    if (sp == std::string::npos) break;
    out.push_back(line.substr(pos, sp - pos));
    pos = sp + 1;
  }
  out.push_back(line.substr(pos));
  return out;
}

int to_int(const std::string& s, int fallback) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && ptr == s.data() + s.size() ? v : fallback;
}

// "FAIL <node> <code> <class> <text>" -> event; nullopt if malformed.
std::optional<NodeEvent> parse_fail(const std::string& line) {
  const auto w = words(line, 5);
  if (w.size() != 5 || w[0] != "FAIL") return std::nullopt;
  NodeEvent e;
  e.kind = NodeEvent::Kind::kFailure;
  e.node = to_int(w[1], -1);
  e.exit_code = to_int(w[2], 3);
  e.cause_class = to_int(w[3], 1);
  e.text = w[4];
  return e;
}

std::string fail_line(int node, const std::string& text, int code, int cls) {
  std::string flat = text;
  std::replace(flat.begin(), flat.end(), '\n', ' ');
  return "FAIL " + std::to_string(node) + " " + std::to_string(code) + " " + std::to_string(cls) +
         " " + flat;
}

std::string seconds(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(ms.count()) / 1000.0 << " s";
  return os.str();
}

NodeEvent lost(int node, bool closed, std::chrono::milliseconds node_timeout) {
  NodeEvent e;
  e.kind = NodeEvent::Kind::kLost;
  e.node = node;
  e.exit_code = 3;
  e.cause_class = 1;
  e.text = closed ? "lost: its launcher's connection closed before its ranks finished (launcher "
                    "killed or host down)"
                  : "lost: no word from its launcher for " + seconds(node_timeout) +
                        " (link down, host down or launcher stopped)";
  return e;
}

struct AddrInfo {
  addrinfo* res = nullptr;
  ~AddrInfo() {
    if (res != nullptr) ::freeaddrinfo(res);
  }
};

void resolve(const std::string& host, int port, AddrInfo& out, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &out.res);
  PW_CHECK(rc == 0 && out.res != nullptr, ConfigError,
           "launch: cannot resolve the master address '" << host << "': " << ::gai_strerror(rc));
}

// ---------------------------------------------------------------------------------------------
class MasterGroup final : public NodeGroup {
 public:
  MasterGroup(const NodeLayout& layout, std::string job_id, std::chrono::milliseconds join_timeout,
              std::chrono::milliseconds node_timeout)
      : layout_(layout), job_id_(std::move(job_id)), node_timeout_(node_timeout) {
    listen_on(layout.master_addr, layout.agent_port);
    accept_all(join_timeout);
    for (auto& l : links_) {
      send_line(l->fd, "START " + job_id_);
      l->last_heard = l->last_sent = Clock::now();
    }
  }
  ~MasterGroup() override {
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  const std::string& job_id() const override { return job_id_; }

  std::vector<NodeEvent> service() override {
    std::vector<NodeEvent> events;
    const auto now = Clock::now();
    // Late connections (a launcher of another job on this port): refused.
    while (true) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      send_line(fd, "REFUSE the job's nodes have all joined already (another job on this port?)");
      ::close(fd);
    }
    for (auto& l : links_) {
      if (l->closed) continue;
      std::vector<std::string> lines;
      const bool open = l->read_lines(lines);
      for (const auto& line : lines) {
        if (line == "DONE") {
          l->done = true;
        } else if (auto e = parse_fail(line)) {
          l->failed = true;
          for (auto& other : links_) {
            if (other.get() != l.get() && !other->closed) send_line(other->fd, line);
          }
          events.push_back(*e);
        }
      }
      if (!open || (!l->done && now - l->last_heard > node_timeout_)) {
        l->closed = true;
        if (!l->done && !l->failed) {
          events.push_back(lost(l->node, open == false, node_timeout_));
          // The other nodes learn of it as a failure of that node.
          const NodeEvent& e = events.back();
          for (auto& other : links_) {
            if (!other->closed)
              send_line(other->fd, fail_line(e.node, e.text, e.exit_code, e.cause_class));
          }
        }
        ::close(l->fd);
        l->fd = -1;
        continue;
      }
      if (now - l->last_sent >= kPingEvery) {
        send_line(l->fd, "PING");
        l->last_sent = now;
      }
    }
    return events;
  }

  void report_failure(const std::string& text, int exit_code, int cause_class) override {
    for (auto& l : links_) {
      if (!l->closed) send_line(l->fd, fail_line(0, text, exit_code, cause_class));
    }
  }
  void report_done() override {}
  bool finished() const override {
    return std::all_of(links_.begin(), links_.end(),
                       [](const auto& l) { return l->done || l->failed || l->closed; });
  }

 private:
  void listen_on(const std::string& host, int port) {
    AddrInfo ai;
    resolve(host, port, ai, true);
    int err = 0;
    for (addrinfo* p = ai.res; p != nullptr; p = p->ai_next) {
      const int fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, p->ai_addr, p->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
        set_nonblocking(fd);
        listen_fd_ = fd;
        return;
      }
      err = errno;
      ::close(fd);
    }
    throw ConfigError("launch: node 0 cannot listen on " + host + ":" + std::to_string(port) +
                      " for the other nodes' launchers: " + std::strerror(err) +
                      " (--master-addr must be an address of node 0; another job on this "
                      "port? pass --agent-port)");
  }

  void accept_all(std::chrono::milliseconds join_timeout) {
    const auto deadline = Clock::now() + join_timeout;
    std::vector<std::unique_ptr<Link>> pending;
    std::vector<bool> joined(static_cast<std::size_t>(layout_.nnodes), false);
    joined[0] = true;
    int missing = layout_.nnodes - 1;
    while (missing > 0) {
      PW_CHECK(
          Clock::now() < deadline, TimeoutError,
          "launch: node 0 waited " << seconds(join_timeout)
                                   << " for the other nodes' launchers: nodes " <<
              [&] {
                std::string s;
                for (int n = 1; n < layout_.nnodes; ++n) {
                  if (!joined[static_cast<std::size_t>(n)])
                    s += (s.empty() ? "" : ",") + std::to_string(n);
                }
                return s;
              }() << " never connected to "
                                   << layout_.master_addr << ":" << layout_.agent_port);
      pollfd pfd{listen_fd_, POLLIN, 0};
      ::poll(&pfd, 1, 50);
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        auto l = std::make_unique<Link>();
        l->fd = fd;
        pending.push_back(std::move(l));
      }
      for (auto it = pending.begin(); it != pending.end();) {
        Link& l = **it;
        std::vector<std::string> lines;
        const bool open = l.read_lines(lines);
        if (lines.empty()) {
          it = open ? it + 1 : pending.erase(it);
          continue;
        }
        const auto w = words(lines.front(), 5);
        std::string refuse;
        int node = -1;
        if (w.size() != 5 || w[0] != "HELLO" || w[1] != "1") {
          refuse = "not a pipewright launcher of this version";
        } else {
          node = to_int(w[2], -1);
          const int nnodes = to_int(w[3], -1), nproc = to_int(w[4], -1);
          if (nnodes != layout_.nnodes) {
            refuse =
                "--nnodes " + w[3] + " but node 0 has --nnodes " + std::to_string(layout_.nnodes);
          } else if (nproc != layout_.nproc_per_node) {
            refuse = "--nproc-per-node " + w[4] + " but node 0 has --nproc-per-node " +
                     std::to_string(layout_.nproc_per_node);
          } else if (node < 1 || node >= layout_.nnodes) {
            refuse =
                "--node-rank " + w[2] + " is outside [1, " + std::to_string(layout_.nnodes) + ")";
          } else if (joined[static_cast<std::size_t>(node)]) {
            refuse = "node " + w[2] + " has joined already (two launchers with --node-rank " +
                     w[2] + "?)";
          }
        }
        if (!refuse.empty()) {
          send_line(l.fd, "REFUSE " + refuse);
          it = pending.erase(it);
          continue;
        }
        joined[static_cast<std::size_t>(node)] = true;
        --missing;
        l.node = node;
        links_.push_back(std::move(*it));
        it = pending.erase(it);
      }
    }
  }

  NodeLayout layout_;
  std::string job_id_;
  std::chrono::milliseconds node_timeout_;
  int listen_fd_ = -1;
  std::vector<std::unique_ptr<Link>> links_;
};

// ---------------------------------------------------------------------------------------------
class MemberGroup final : public NodeGroup {
 public:
  MemberGroup(const NodeLayout& layout, std::chrono::milliseconds join_timeout,
              std::chrono::milliseconds node_timeout)
      : layout_(layout), node_timeout_(node_timeout) {
    const auto deadline = Clock::now() + join_timeout;
    std::string last_error = "no answer";
    while (link_.fd < 0) {
      PW_CHECK(Clock::now() < deadline, TimeoutError,
               "launch: node " << layout.node_rank << " could not reach node 0's launcher at "
                               << layout.master_addr << ":" << layout.agent_port << " within "
                               << seconds(join_timeout) << ": " << last_error);
      link_.fd = try_connect(last_error);
      if (link_.fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    link_.node = 0;
    send_line(link_.fd, "HELLO 1 " + std::to_string(layout.node_rank) + " " +
                            std::to_string(layout.nnodes) + " " +
                            std::to_string(layout.nproc_per_node));
    while (true) {
      PW_CHECK(Clock::now() < deadline, TimeoutError,
               "launch: node " << layout.node_rank << " waited " << seconds(join_timeout)
                               << " for the other nodes' launchers to join (node 0 at "
                               << layout.master_addr << ":" << layout.agent_port << ")");
      pollfd pfd{link_.fd, POLLIN, 0};
      ::poll(&pfd, 1, 100);
      std::vector<std::string> lines;
      const bool open = link_.read_lines(lines);
      if (!lines.empty()) {
        const auto w = words(lines.front(), 2);
        if (w[0] == "START" && w.size() == 2) {
          job_id_ = w[1];
          break;
        }
        throw ConfigError("launch: node 0's launcher at " + layout.master_addr + ":" +
                          std::to_string(layout.agent_port) + " refused node " +
                          std::to_string(layout.node_rank) + ": " +
                          (w.size() == 2 ? w[1] : lines.front()));
      }
      PW_CHECK(open, PeerError,
               "launch: node 0's launcher at " << layout.master_addr << ":" << layout.agent_port
                                               << " closed the connection before the start");
    }
    // Lines after START (a FAIL sent at once) stay in the buffer for service().
    link_.last_heard = link_.last_sent = Clock::now();
  }
  const std::string& job_id() const override { return job_id_; }

  std::vector<NodeEvent> service() override {
    std::vector<NodeEvent> events;
    if (link_.closed || done_) return events;
    const auto now = Clock::now();
    std::vector<std::string> lines;
    const bool open = link_.read_lines(lines);
    for (const auto& line : lines) {
      if (auto e = parse_fail(line)) {
        link_.failed = true;
        events.push_back(*e);
      }
    }
    if (!link_.failed && (!open || now - link_.last_heard > node_timeout_)) {
      link_.closed = true;
      events.push_back(lost(0, !open, node_timeout_));
    } else if (!open) {
      link_.closed = true;
    } else if (now - link_.last_sent >= kPingEvery) {
      send_line(link_.fd, "PING");
      link_.last_sent = now;
    }
    return events;
  }
  void report_failure(const std::string& text, int exit_code, int cause_class) override {
    if (!link_.closed)
      send_line(link_.fd, fail_line(layout_.node_rank, text, exit_code, cause_class));
  }
  void report_done() override {
    if (!link_.closed) send_line(link_.fd, "DONE");
    done_ = true;
  }
  bool finished() const override { return true; }

 private:
  int try_connect(std::string& last_error) {
    AddrInfo ai;
    resolve(layout_.master_addr, layout_.agent_port, ai, false);
    for (addrinfo* p = ai.res; p != nullptr; p = p->ai_next) {
      const int fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      if (fd < 0) continue;
      set_nonblocking(fd);
      int rc = ::connect(fd, p->ai_addr, p->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        int err = ETIMEDOUT;
        if (::poll(&pfd, 1, 1000) == 1) {
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return fd;
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    return -1;
  }

  NodeLayout layout_;
  std::chrono::milliseconds node_timeout_;
  std::string job_id_;
  Link link_;
  bool done_ = false;
};

}  // namespace

NodeLayout resolve_layout(const NodeLayoutFlags& flags,
                          const std::map<std::string, std::string>& env) {
  std::string which;
  std::optional<int> slurm_nnodes, slurm_node;
  std::string nnodes_text, node_text;
  if (const auto* v = find_env(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, &which)) {
    slurm_nnodes = parse_env_int(env, which);
    nnodes_text = which + "=" + *v;
  }
  if (const auto* v = find_env(env, {"SLURM_NODEID"}, &which)) {
    slurm_node = parse_env_int(env, which);
    node_text = which + "=" + *v;
  }
  NodeLayout out;
  out.nnodes = merge(flags.nnodes, "--nnodes", slurm_nnodes, nnodes_text).value_or(1);
  out.node_rank = merge(flags.node_rank, "--node-rank", slurm_node, node_text).value_or(0);
  out.nproc_per_node = flags.nproc_per_node;
  PW_CHECK(out.nnodes >= 1, ConfigError, "launch: --nnodes must be >= 1, got " << out.nnodes);
  PW_CHECK(out.node_rank >= 0 && out.node_rank < out.nnodes, ConfigError,
           "launch: --node-rank " << out.node_rank << " is outside [0, " << out.nnodes
                                  << ") (--nnodes " << out.nnodes << ")");
  PW_CHECK(out.nproc_per_node >= 1, ConfigError,
           "launch: --nproc-per-node must be >= 1, got " << out.nproc_per_node);
  if (out.nnodes == 1) {
    // One node: loopback, as before (a Slurm node list is not needed).
    out.master_addr = flags.master_addr.value_or("127.0.0.1");
    out.master_port = flags.master_port.value_or(0);
    out.agent_port = 0;
  } else {
    std::optional<std::string> slurm_master;
    std::string master_text;
    if (const auto* v = find_env(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &which)) {
      slurm_master = graph::expand_hostlist(*v, which).front();
      master_text = which + "=" + *v + " (first host " + *slurm_master + ")";
    }
    auto addr = merge(flags.master_addr, "--master-addr", slurm_master, master_text);
    PW_CHECK(addr.has_value(), ConfigError,
             "launch: --nnodes " << out.nnodes
                                 << " needs --master-addr (an address of node 0 that every node "
                                    "reaches), or a Slurm allocation (SLURM_JOB_NODELIST)");
    out.master_addr = *addr;
    out.master_port = flags.master_port.value_or(29500);
    out.agent_port = flags.agent_port.value_or(out.master_port + 1);
  }
  PW_CHECK(out.master_port >= 0 && out.master_port <= 65535, ConfigError,
           "launch: --master-port " << out.master_port << " is outside [1, 65535]");
  PW_CHECK(out.agent_port >= 0 && out.agent_port <= 65535 &&
               (out.nnodes == 1 || out.agent_port != out.master_port),
           ConfigError,
           "launch: --agent-port " << out.agent_port
                                   << " must be in [1, 65535] and differ from --master-port");
  return out;
}

std::unique_ptr<NodeGroup> NodeGroup::join(const NodeLayout& layout, const std::string& job_id,
                                           std::chrono::milliseconds join_timeout,
                                           std::chrono::milliseconds node_timeout) {
  if (layout.node_rank == 0)
    return std::make_unique<MasterGroup>(layout, job_id, join_timeout, node_timeout);
  return std::make_unique<MemberGroup>(layout, join_timeout, node_timeout);
}

}  // namespace pipewright::cli
