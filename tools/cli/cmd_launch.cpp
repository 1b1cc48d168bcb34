// `pipewright launch [--nnodes N --node-rank K --master-addr A] --nproc-per-node P
// [--master-port PORT] [--grace S] [--] CMD ARGS...`: starts P local ranks of CMD on this node,
// torchrun-style, and supervises them; with --nnodes > 1, once per node, the launchers of all
// nodes form one gang (launch_nodes.hpp, Note [Launcher links]).
//
// - Children are spawned with posix_spawnp (safe even if the launcher had threads; it has none
//   when it spawns), each in its own process group, with RANK, WORLD_SIZE, LOCAL_RANK,
//   LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR
//   (127.0.0.1 on one node), MASTER_PORT (on one node a free port unless --master-port),
//   and OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1 unless already set. The variables of other
//   launchers (OMPI_COMM_WORLD_*, PMI_RANK/SIZE, SLURM_PROCID/NTASKS/LOCALID) are removed, since
//   this launcher now defines the world (they would otherwise disagree, see rendezvous.hpp).
// - stdout/stderr of every rank are streamed line by line with a "[rank N] " prefix.
// - When a rank fails (non-zero exit or a signal) the others get SIGTERM, then SIGKILL after the
//   grace period; the launcher prints the first failure first ("rank 2 died with signal 9
//   (SIGKILL)", "rank 1 exited with code 2: <its last stderr line>") and exits with the first
//   failing rank's exit code, or 3 (peer failure) if it died from a signal. SIGINT/SIGTERM to the
//   launcher are forwarded the same way (exit 128 + signal).
// - Once every rank has exited, shared memory its ranks left in /dev/shm (a rank killed between
//   creating a segment and its peers mapping it) is removed: the names carry the job id and the
//   creating rank (Note [Shared-memory names], exec/src/gloo/shm_collectives.hpp), so only this
//   job's and this node's segments are touched.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "launch_nodes.hpp"
#include "launch_shm.hpp"
#include "pipewright/graph/error.hpp"

extern char** environ;

namespace pipewright::cli {

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_interrupt = 0;  // signal number that asked the launcher to stop

void on_signal(int sig) { g_interrupt = sig; }

// A free port on 127.0.0.1 below Linux's ephemeral range (32768-60999), so that no outgoing
// connection of another process takes it before rank 0's store binds it.
int free_port() {
  std::random_device rd;
  const unsigned span = 32767 - 20000 + 1;
  const unsigned first = rd() % span;
  for (unsigned k = 0; k < span; ++k) {
    const int port = 20000 + static_cast<int>((first + k) % span);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    PW_CHECK(fd >= 0, BackendError, "launch: socket() failed: " << std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (ok) return port;
  }
  throw BackendError("launch: no free port in 20000-32767 on 127.0.0.1; pass --master-port");
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGINT:
      return "SIGINT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal";
  }
}

// One output stream of a child: the read end of its pipe and the unfinished line.
struct Stream {
  int fd = -1;
  std::string partial;
};

struct Child {
  int rank = 0;  // global rank
  int local_rank = 0;
  pid_t pid = -1;
  Stream out, err;
  bool running = false;
  int status = 0;  // from waitpid, valid when !running
  bool killed_by_us = false;
  std::string last_err_line;
};

bool failed(const Child& c) { return !(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0); }

std::string describe(const Child& c) {
  std::string s = "rank " + std::to_string(c.rank);
  if (WIFSIGNALED(c.status)) {
    const int sig = WTERMSIG(c.status);
    s += " died with signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
  } else {
    s += " exited with code " + std::to_string(WEXITSTATUS(c.status));
  }
  if (!c.last_err_line.empty()) s += ": " + c.last_err_line;
  return s;
}

// Note [First failure]: a rank killed by a signal makes its peers fail with exit 3 (peer
// failure) or 4 (timeout) within milliseconds, so the launcher often reaps the killed rank and
// a peer in the same round; it reports the cause, not the rank with the lowest number. Lower is
// more likely a cause: a signal, then an exit code other than 3 and 4, then 4, then 3.
int cause_rank(const Child& c) {
  if (WIFSIGNALED(c.status)) return 0;
  const int code = WEXITSTATUS(c.status);
  return code == 3 ? 3 : code == 4 ? 2 : 1;
}

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own output is gone; keep supervising
    done += static_cast<std::size_t>(n);
  }
}

// Emits complete lines of `data` with the rank prefix to `out_fd`.
void emit(Child& c, Stream& s, const char* data, std::size_t n, int out_fd, bool is_err) {
  s.partial.append(data, n);
  std::size_t start = 0;
  std::string block;
  for (std::size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = s.partial.substr(start, nl - start);
    block += "[rank " + std::to_string(c.rank) + "] " + line + "\n";
    if (is_err && !line.empty()) c.last_err_line = line;
  }
  s.partial.erase(0, start);
  if (!block.empty()) write_all(out_fd, block);
}

void close_stream(Child& c, Stream& s, int out_fd, bool is_err) {
  if (!s.partial.empty()) {
    const std::string line = s.partial;
    s.partial.clear();
    write_all(out_fd, "[rank " + std::to_string(c.rank) + "] " + line + "\n");
    if (is_err) c.last_err_line = line;
  }
  ::close(s.fd);
  s.fd = -1;
}

// A random job id (16 hex digits) for the ranks' rendezvous (Note [Store protocol] in
// exec/src/store/tcp_store_server.cpp): a process of another job that reaches this job's port is
// refused instead of joining it.
std::string new_job_id() {
  std::random_device rd;
  const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<std::string> child_environment(const Child& c, const NodeLayout& layout, int port,
                                           const std::string& job_id) {
  static const char* const kDropped[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "GROUP_RANK",
                                         "GROUP_WORLD_SIZE",
                                         "ROLE_RANK",
                                         "ROLE_WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "PMI_RANK",
                                         "PMI_SIZE",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_NODEID",
                                         "SLURM_JOB_NODELIST",
                                         "SLURM_NODELIST",
                                         "SLURM_TASKS_PER_NODE",
                                         "PIPEWRIGHT_JOB_ID"};
  std::map<std::string, std::string> env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string entry(*p);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const char* name : kDropped) env.erase(name);
  const int world = layout.nnodes * layout.nproc_per_node;
  env["RANK"] = env["ROLE_RANK"] = std::to_string(c.rank);
  env["WORLD_SIZE"] = env["ROLE_WORLD_SIZE"] = std::to_string(world);
  env["LOCAL_RANK"] = std::to_string(c.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(layout.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(layout.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(layout.nnodes);
  env["MASTER_ADDR"] = layout.master_addr;
  env["MASTER_PORT"] = std::to_string(port);
  env["PIPEWRIGHT_JOB_ID"] = job_id;
  env.emplace("OMP_NUM_THREADS", "1");  // emplace: a user's explicit setting wins
  env.emplace("OPENBLAS_NUM_THREADS", "1");
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

// Spawns one rank; returns its pid. Throws ConfigError if CMD cannot be started.
pid_t spawn_rank(Child& c, const std::vector<std::string>& command, const NodeLayout& layout,
                 int port, const std::string& job_id) {
  int out_pipe[2], err_pipe[2];
  PW_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0, BackendError,
           "launch: pipe() failed: " << std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);  // own process group: signals reach its children too
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> env = child_environment(c, layout, port, job_id);
  std::vector<char*> argv, envp;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    throw ConfigError("launch: cannot start '" + command[0] + "' for rank " +
                      std::to_string(c.rank) + ": " + std::strerror(rc));
  }
  c.pid = pid;
  c.running = true;
  c.out.fd = out_pipe[0];
  c.err.fd = err_pipe[0];
  return pid;
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) {
    if (!c.running) continue;
    c.killed_by_us = true;
    ::kill(-c.pid, sig);  // the rank's process group
    ::kill(c.pid, sig);
  }
}

struct LaunchArgs {
  NodeLayoutFlags layout;
  double grace_s = 5.0;
  double node_timeout_s = 5.0;
  double join_timeout_s = 300.0;
  std::vector<std::string> command;
};

// One failure, of a local rank or of another node, in the order observed (Note [First failure]).
struct Failure {
  std::string text;  // "rank 2 died with signal 9 (SIGKILL)", "node 1: rank 3 exited ..."
  int exit_code = 1;
  int cause_class = 1;
  bool stopped_by_us = false;
  Clock::time_point when;
};

Failure local_failure(const Child& c, const NodeLayout& layout) {
  Failure f;
  f.text = describe(c);
  if (layout.nnodes > 1) f.text = "node " + std::to_string(layout.node_rank) + ": " + f.text;
  f.exit_code = WIFSIGNALED(c.status) ? 3 : WEXITSTATUS(c.status);
  f.cause_class = cause_rank(c);
  f.stopped_by_us = c.killed_by_us;
  f.when = Clock::now();
  return f;
}

Failure remote_failure(const NodeEvent& e) {
  Failure f;
  // A relayed failure already names its node ("node 1: rank 3 ..."); a lost node does not.
  f.text =
      e.kind == NodeEvent::Kind::kLost ? "node " + std::to_string(e.node) + " " + e.text : e.text;
  f.exit_code = e.exit_code;
  f.cause_class = e.cause_class;
  f.when = Clock::now();
  return f;
}

// Note [First failure], across nodes: a rank killed on node 1 makes node 0's ranks fail with
// exit 3 within milliseconds, before node 1's launcher has told node 0's; so an effect (exit 3
// or 4) seen first gives way to a likelier cause reported by another node within 2 s.
void put_cause_first(std::vector<Failure>& failures) {
  if (failures.size() < 2 || failures.front().cause_class < 2) return;
  const auto first = failures.front().when;
  for (std::size_t i = 1; i < failures.size(); ++i) {
    const Failure& f = failures[i];
    if (f.cause_class < 2 && !f.stopped_by_us && f.when - first <= std::chrono::seconds(2)) {
      std::rotate(failures.begin(), failures.begin() + static_cast<std::ptrdiff_t>(i),
                  failures.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return;
    }
  }
}

int run_launch(const LaunchArgs& args) {
  PW_CHECK(!args.command.empty(), ConfigError,
           "launch: no command given (pipewright launch --nproc-per-node N -- CMD ARGS...)");
  PW_CHECK(args.grace_s >= 0, ConfigError, "launch: --grace must be >= 0");
  PW_CHECK(args.node_timeout_s > 0 && args.join_timeout_s > 0, ConfigError,
           "launch: --node-timeout and --join-timeout must be > 0");
  NodeLayout layout = resolve_layout(args.layout, [] {
    std::map<std::string, std::string> env;
    for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
      const std::string entry(*p);
      const auto eq = entry.find('=');
      if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    return env;
  }());
  const int port = layout.master_port != 0 ? layout.master_port : free_port();
  PW_CHECK(port >= 1 && port <= 65535, ConfigError,
           "launch: --master-port " << port << " is outside [1, 65535]");

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  using std::chrono::duration;
  using std::chrono::milliseconds;
  std::unique_ptr<NodeGroup> group;
  std::string job_id = new_job_id();
  if (layout.nnodes > 1) {
    group = NodeGroup::join(
        layout, job_id,
        std::chrono::duration_cast<milliseconds>(duration<double>(args.join_timeout_s)),
        std::chrono::duration_cast<milliseconds>(duration<double>(args.node_timeout_s)));
    job_id = group->job_id();
  }

  const int nproc = layout.nproc_per_node;
  std::vector<Child> children(static_cast<std::size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    children[static_cast<std::size_t>(r)].local_rank = r;
    children[static_cast<std::size_t>(r)].rank = layout.node_rank * nproc + r;
  }
  try {
    for (auto& c : children) spawn_rank(c, args.command, layout, port, job_id);
  } catch (...) {
    signal_all(children, SIGKILL);
    for (auto& c : children) {
      if (c.running) ::waitpid(c.pid, nullptr, 0);
    }
    throw;
  }

  std::vector<Failure> failures;  // in the order observed
  bool reported = false;          // this node's first failure went to the other nodes
  bool stopping = false;
  std::optional<Clock::time_point> kill_deadline;
  bool sent_kill = false;
  bool sent_done = false;
  int running = nproc;
  std::optional<Clock::time_point> drain_deadline;
  char buffer[65536];

  while (true) {
    // Read whatever output is ready (at most 50 ms of waiting per round).
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is_err)
    for (auto& c : children) {
      if (c.out.fd >= 0) {
        fds.push_back({c.out.fd, POLLIN, 0});
        owners.emplace_back(&c, false);
      }
      if (c.err.fd >= 0) {
        fds.push_back({c.err.fd, POLLIN, 0});
        owners.emplace_back(&c, true);
      }
    }
    const bool drained = fds.empty() && running == 0;
    if (drained && (!group || group->finished())) break;
    if (!fds.empty()) {
      const int n = ::poll(fds.data(), fds.size(), 50);
      if (n > 0) {
        for (std::size_t i = 0; i < fds.size(); ++i) {
          if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          auto [child, is_err] = owners[i];
          Stream& s = is_err ? child->err : child->out;
          const int out_fd = is_err ? STDERR_FILENO : STDOUT_FILENO;
          const ssize_t got = ::read(s.fd, buffer, sizeof buffer);
          if (got > 0) {
            emit(*child, s, buffer, static_cast<std::size_t>(got), out_fd, is_err);
          } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
            close_stream(*child, s, out_fd, is_err);
          }
        }
      }
    } else {
      ::usleep(20000);
    }

    // Reap exited ranks. Failures seen in one round are ordered cause first (Note [First
    // failure]).
    std::vector<Child*> failed_now;
    for (auto& c : children) {
      if (!c.running) continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) continue;
      c.running = false;
      c.status = status;
      --running;
      if (failed(c)) failed_now.push_back(&c);
    }
    std::stable_sort(failed_now.begin(), failed_now.end(), [](const Child* a, const Child* b) {
      return cause_rank(*a) < cause_rank(*b);
    });
    for (const Child* c : failed_now) failures.push_back(local_failure(*c, layout));

    // The other nodes: their failures and losses end this node's ranks too.
    if (group) {
      if (!failures.empty() && !reported && !stopping) {
        group->report_failure(failures.front().text, failures.front().exit_code,
                              failures.front().cause_class);
        reported = true;
      }
      for (const NodeEvent& e : group->service()) failures.push_back(remote_failure(e));
      if (running == 0 && failures.empty() && !sent_done) {
        group->report_done();
        sent_done = true;
      }
    }

    // First failure or an interrupt: stop everyone, politely first.
    if ((!failures.empty() || g_interrupt != 0) && !kill_deadline) {
      stopping = true;
      signal_all(children, SIGTERM);
      kill_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(args.grace_s));
    }
    if (kill_deadline && !sent_kill && Clock::now() >= *kill_deadline) {
      signal_all(children, SIGKILL);
      sent_kill = true;
    }
    // Once every rank is gone, give orphaned pipe holders (grandchildren) one second.
    if (running == 0) {
      if (!drain_deadline) drain_deadline = Clock::now() + std::chrono::seconds(1);
      if (Clock::now() >= *drain_deadline) {
        for (auto& c : children) {
          if (c.out.fd >= 0) close_stream(c, c.out, STDOUT_FILENO, false);
          if (c.err.fd >= 0) close_stream(c, c.err, STDERR_FILENO, true);
        }
        // Node 0 after a failure: the others know (FAIL was sent); do not wait for them.
        if (!failures.empty() || g_interrupt != 0) break;
      }
    }
  }

  std::vector<int> ranks;
  for (const auto& c : children) ranks.push_back(c.rank);
  const int leftovers = remove_job_shared_memory(job_id, ranks);
  if (failures.empty() && g_interrupt == 0) return 0;

  std::string report;
  int exit_code = 1;
  put_cause_first(failures);
  if (!failures.empty()) {
    report += "pipewright launch: " + failures.front().text + "\n";
    exit_code = failures.front().exit_code;
  }
  if (g_interrupt != 0) {
    report += "pipewright launch: interrupted by signal " + std::to_string(g_interrupt) + " (" +
              signal_name(g_interrupt) + "); stopped every rank\n";
    if (failures.empty()) exit_code = 128 + g_interrupt;
  }
  for (std::size_t i = 1; i < failures.size(); ++i) {
    report += "pipewright launch:   then " + failures[i].text +
              (failures[i].stopped_by_us ? " (stopped by the launcher)" : "") + "\n";
  }
  if (leftovers > 0) {
    report += "pipewright launch: removed " + std::to_string(leftovers) +
              " shared-memory segment(s) the stopped ranks left in /dev/shm\n";
  }
  std::fflush(stdout);
  write_all(STDERR_FILENO, report);
  return exit_code;
}

void setup_launch(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "launch",
      "Start the ranks of a command on this node torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, "
      "GROUP_RANK, MASTER_ADDR, MASTER_PORT...), prefix their output with [rank N], and stop "
      "every rank of every node when one fails");
  auto args = std::make_shared<LaunchArgs>();
  sub->add_option("--nproc-per-node,--nproc", args->layout.nproc_per_node,
                  "number of ranks on this node")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--nnodes", args->layout.nnodes,
                  "number of nodes, one launcher each (default 1, or SLURM_JOB_NUM_NODES)");
  sub->add_option("--node-rank", args->layout.node_rank,
                  "this node's rank in [0, --nnodes) (default 0, or SLURM_NODEID)");
  sub->add_option("--master-addr", args->layout.master_addr,
                  "address of node 0 that every node reaches (one node: 127.0.0.1; Slurm: the "
                  "first host of SLURM_JOB_NODELIST)");
  sub->add_option("--master-port", args->layout.master_port,
                  "rendezvous port of the ranks on --master-addr (one node: a free port; several "
                  "nodes: 29500)");
  sub->add_option("--agent-port", args->layout.agent_port,
                  "port of the launchers' own link on --master-addr (default --master-port + 1)");
  sub->add_option("--grace", args->grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping the ranks")
      ->capture_default_str();
  sub->add_option("--node-timeout", args->node_timeout_s,
                  "seconds without word from another node's launcher before it is lost")
      ->capture_default_str();
  sub->add_option("--join-timeout", args->join_timeout_s,
                  "seconds to wait for every node's launcher at the start")
      ->capture_default_str();
  // CMD ARGS... are cut off argv by main() (split_command_tail) and arrive verbatim in
  // command_tail(); this positional only documents them in --help.
  sub->add_option("command", args->command, "the command each rank runs, with its arguments");
  sub->callback([args] {
    LaunchArgs a = *args;
    a.command = command_tail();
    const int code = run_launch(a);
    std::fflush(stdout);
    std::fflush(stderr);
    if (code != 0) throw ExitStatus{code};  // the ranks' own exit code, not an error category
  });
}

}  // namespace

PW_REGISTER_COMMAND(setup_launch);

}  // namespace pipewright::cli
