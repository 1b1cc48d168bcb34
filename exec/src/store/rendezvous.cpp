// World resolution and the rendezvous barrier (see rendezvous.hpp).
#include "pipewright/exec/rendezvous.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "comm/comm_errors.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/graph/hostlist.hpp"

extern char** environ;  // POSIX

namespace pipewright::exec {

namespace {

// A launcher's variable names for each field; nullptr where the launcher has none.
struct Source {
  const char* name;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* master_addr;
  const char* master_port;
  const char* node_rank;
};

constexpr Source kEnvSources[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
     "MASTER_PORT", "GROUP_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr, nullptr},
    {"PMI", "PMI_RANK", "PMI_SIZE", nullptr, nullptr, nullptr, nullptr, nullptr},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, nullptr, nullptr,
     "SLURM_NODEID"},
};

// One field's value and where it came from ("RANK=1 (torchrun)", "--rank 1").
template <typename T>
struct Resolved {
  std::optional<T> value;
  std::string origin;
};

int parse_int(const std::string& text, const std::string& what) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  PW_CHECK(ec == std::errc() && ptr == end && !text.empty(), ConfigError,
           what << "='" << text << "' is not an integer");
  return value;
}

template <typename T>
void offer(Resolved<T>& field, const char* field_name, const T& value, const std::string& origin,
           std::vector<std::string>& conflicts) {
  if (!field.value) {
    field.value = value;
    field.origin = origin;
  } else if (*field.value != value) {
    conflicts.push_back(std::string(field_name) + ": " + field.origin + " but " + origin);
  }
}

void offer_env_int(Resolved<int>& field, const char* field_name, const char* var, const Source& src,
                   const EnvMap& env, std::vector<std::string>& conflicts, bool& used) {
  if (var == nullptr) return;
  auto it = env.find(var);
  if (it == env.end()) return;
  const std::string what = std::string("environment variable ") + var + " (" + src.name + ")";
  const int value = parse_int(it->second, what);
  offer(field, field_name, value, std::string(var) + "=" + it->second + " (" + src.name + ")",
        conflicts);
  used = true;
}

// A Slurm task (srun pipewright run): the master is the first host of the allocation when it
// spans several nodes (on one node, loopback stays the default), and the ranks on this node are
// SLURM_TASKS_PER_NODE's count for SLURM_NODEID.
void offer_slurm_layout(const EnvMap& env, Resolved<std::string>& master_addr,
                        Resolved<int>& local_world_size, std::vector<std::string>& conflicts) {
  for (const char* var : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    auto it = env.find(var);
    if (it == env.end()) continue;
    const auto hosts =
        graph::expand_hostlist(it->second, std::string("environment variable ") + var + " (Slurm)");
    if (hosts.size() > 1) {
      offer(master_addr, "master address", hosts.front(),
            std::string(var) + "=" + it->second + " (Slurm: first host " + hosts.front() + ")",
            conflicts);
    }
    break;
  }
  auto tasks = env.find("SLURM_TASKS_PER_NODE");
  auto node = env.find("SLURM_NODEID");
  if (tasks != env.end() && node != env.end()) {
    const std::string what = "environment variable SLURM_TASKS_PER_NODE (Slurm)";
    const auto counts = graph::expand_task_counts(tasks->second, what);
    const int id = parse_int(node->second, "environment variable SLURM_NODEID (Slurm)");
    PW_CHECK(id >= 0 && static_cast<std::size_t>(id) < counts.size(), ConfigError,
             "SLURM_NODEID=" << id << " but SLURM_TASKS_PER_NODE=" << tasks->second << " lists "
                             << counts.size() << " nodes");
    offer(local_world_size, "local world size", counts[static_cast<std::size_t>(id)],
          "SLURM_TASKS_PER_NODE=" + tasks->second + " (Slurm, node " + std::to_string(id) + ")",
          conflicts);
  }
}

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string entry(*p);
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

WorldInfo resolve_world(const WorldFlags& flags, const EnvMap& env) {
  Resolved<int> rank, world_size, local_rank, local_world_size, master_port, node_rank;
  Resolved<std::string> master_addr;
  std::vector<std::string> conflicts;
  std::vector<std::string> sources;

  bool used_flags = false;
  auto flag_int = [&](Resolved<int>& field, const char* name, const std::optional<int>& v,
                      const char* flag) {
    if (!v) return;
    offer(field, name, *v, std::string(flag) + " " + std::to_string(*v), conflicts);
    used_flags = true;
  };
  flag_int(rank, "rank", flags.rank, "--rank");
  flag_int(world_size, "world size", flags.world_size, "--world-size");
  flag_int(local_rank, "local rank", flags.local_rank, "--local-rank");
  flag_int(local_world_size, "local world size", flags.local_world_size, "--local-world-size");
  flag_int(master_port, "master port", flags.master_port, "--master-port");
  if (flags.master_addr) {
    offer(master_addr, "master address", *flags.master_addr, "--master-addr " + *flags.master_addr,
          conflicts);
    used_flags = true;
  }
  if (used_flags) sources.emplace_back("flags");

  for (const Source& src : kEnvSources) {
    bool used = false;
    offer_env_int(rank, "rank", src.rank, src, env, conflicts, used);
    offer_env_int(world_size, "world size", src.world_size, src, env, conflicts, used);
    offer_env_int(local_rank, "local rank", src.local_rank, src, env, conflicts, used);
    offer_env_int(local_world_size, "local world size", src.local_world_size, src, env, conflicts,
                  used);
    offer_env_int(master_port, "master port", src.master_port, src, env, conflicts, used);
    offer_env_int(node_rank, "node rank", src.node_rank, src, env, conflicts, used);
    if (src.master_addr != nullptr) {
      auto it = env.find(src.master_addr);
      if (it != env.end()) {
        offer(master_addr, "master address", it->second,
              std::string(src.master_addr) + "=" + it->second + " (" + src.name + ")", conflicts);
        used = true;
      }
    }
    if (used && std::string(src.name) == "Slurm")
      offer_slurm_layout(env, master_addr, local_world_size, conflicts);
    if (used) sources.emplace_back(src.name);
  }

  PW_CHECK(
      conflicts.empty(), ConfigError,
      "launchers disagree about this process's place in the job: " << [&] {
        std::string all;
        for (const auto& c : conflicts) all += (all.empty() ? "" : "; ") + c;
        return all;
      }());

  WorldInfo info;
  info.world_size = world_size.value.value_or(1);
  info.rank = rank.value.value_or(0);
  info.local_rank = local_rank.value.value_or(info.rank);
  info.local_world_size = local_world_size.value.value_or(info.world_size);
  info.master_addr = master_addr.value.value_or("127.0.0.1");
  info.master_port = master_port.value.value_or(29500);
  info.node_rank = node_rank.value.value_or(0);
  if (flags.job_id) {
    info.job_id = *flags.job_id;
  } else if (auto it = env.find("PIPEWRIGHT_JOB_ID"); it != env.end()) {
    info.job_id = it->second;
  }
  for (const auto& s : sources) info.sources += (info.sources.empty() ? "" : ", ") + s;

  const std::string from = info.sources.empty() ? "defaults" : info.sources;
  PW_CHECK(info.world_size >= 1, ConfigError,
           "world size must be >= 1, got " << info.world_size << " (from " << from << ")");
  PW_CHECK(
      info.rank >= 0 && info.rank < info.world_size, ConfigError,
      "rank " << info.rank << " is outside [0, " << info.world_size << ") (from " << from << ")");
  PW_CHECK(
      info.local_world_size >= 1, ConfigError,
      "local world size must be >= 1, got " << info.local_world_size << " (from " << from << ")");
  PW_CHECK(info.local_rank >= 0 && info.local_rank < info.local_world_size, ConfigError,
           "local rank " << info.local_rank << " is outside [0, " << info.local_world_size
                         << ") (from " << from << ")");
  PW_CHECK(info.master_port >= 1 && info.master_port <= 65535, ConfigError,
           "master port " << info.master_port << " is outside [1, 65535] (from " << from << ")");
  PW_CHECK(!info.master_addr.empty(), ConfigError, "master address is empty (from " << from << ")");
  return info;
}

void rendezvous(Store& store, const WorldInfo& world, std::chrono::milliseconds timeout,
                const std::string& prefix) {
  const std::string base = prefix + "/joined/";
  const std::vector<std::uint8_t> yes{static_cast<std::uint8_t>(1)};
  store.set(base + std::to_string(world.rank), yes);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing(static_cast<std::size_t>(world.world_size));
  for (int r = 0; r < world.world_size; ++r) missing[static_cast<std::size_t>(r)] = r;
  const std::string failed = prefix + "/failed";
  // Set by the TCP store's server when a rank's connection closes unfinished (it died).
  auto gone_ranks = [&] {
    std::vector<int> gone;
    for (int r = 0; r < world.world_size; ++r) {
      if (r != world.rank && store.check({"pipewright/gone/" + std::to_string(r)}))
        gone.push_back(r);
    }
    return gone;
  };
  std::vector<int> gone;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    missing.erase(std::remove_if(missing.begin(), missing.end(),
                                 [&](int r) { return store.check({base + std::to_string(r)}); }),
                  missing.end());
    gone = gone_ranks();
    if (missing.empty() && gone.empty()) return;
    if (!gone.empty()) break;
    if (store.check({failed})) break;  // another rank timed out first
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  // Note [Failing rendezvous together]: the ranks that joined fail with the same error. Without
  // this, the store's host (rank 0) could time out first, exit, and leave the others a broken
  // connection (a PeerError, exit 3, instead of 4). The first to time out (or to see a rank
  // gone) marks the rendezvous failed; each rank acknowledges and waits (at most 2 s) until every
  // rank that joined and lives has, so the store outlives the ones that still read it. A store
  // already gone changes nothing.
  const std::string ack = prefix + "/failed_ack/";
  std::vector<std::string> acks;  // of every rank that joined and is not gone
  try {
    if (gone.empty()) gone = gone_ranks();
    for (int r = 0; r < world.world_size; ++r) {
      if (std::find(missing.begin(), missing.end(), r) == missing.end() &&
          std::find(gone.begin(), gone.end(), r) == gone.end())
        acks.push_back(ack + std::to_string(r));
    }
    store.set(failed, yes);
    store.set(ack + std::to_string(world.rank), yes);
    store.wait(acks, std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2)));
  } catch (const Error&) {  // a rank gone, the store gone: fail with our own error anyway
  }
  if (!gone.empty()) {
    throw PeerError("rank " + std::to_string(world.rank) + ": rendezvous failed: ranks " +
                    detail::rank_list(gone) +
                    " left before every rank joined (died or failed; world size " +
                    std::to_string(world.world_size) + ")");
  }
  throw TimeoutError("rank " + std::to_string(world.rank) + ": rendezvous " +
                     detail::timed_out_after(timeout) + ": ranks " + detail::rank_list(missing) +
                     " never joined (world size " + std::to_string(world.world_size) + ")");
}

// A port below Linux's ephemeral range (32768-60999 by default): a port the kernel picked for
// us would be in that range, and another process's outgoing connection can take it between our
// check and the store's bind (a flaky "Address already in use" under parallel tests).
int find_free_port() {
  constexpr int kLow = 20000, kHigh = 32767;
  std::random_device rd;
  const int first = kLow + static_cast<int>(rd() % static_cast<unsigned>(kHigh - kLow + 1));
  int saved = 0;
  for (int k = 0; k <= kHigh - kLow; ++k) {
    const int port = kLow + (first - kLow + k) % (kHigh - kLow + 1);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    PW_CHECK(fd >= 0, BackendError, "find_free_port: socket() failed: " << std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    saved = errno;
    ::close(fd);
    if (ok) return port;
  }
  throw BackendError(std::string("find_free_port: no free port in 20000-32767 on 127.0.0.1: ") +
                     std::strerror(saved));
}

}  // namespace pipewright::exec
