// Issue 44: kill -9 of a rank in each phase of the shared-memory point-to-point handshake
// (connect_shm_links, Note [Shared-memory point-to-point]) leaves /dev/shm clean, or, in the one
// window no process can close (the creator killed between creating the segment and publishing
// its name), leaves exactly one segment named so that `pipewright launch` finds it (Note
// [Shared-memory names]: "pipewright-<job>-r<creator>-").
//
// Not a gtest: the parent forks its two ranks per case while it has no thread (a fork from a
// threaded process may inherit a held malloc lock). The ranks agree through files in a
// directory (a ShmHandshake of put = write + rename, get = poll with a 1.5 s deadline), and the
// victim SIGKILLs itself when it reaches its phase's key. Exit 0 when every case passes.
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gloo/shm_collectives.hpp"
#include "gloo/shm_p2p.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace {

using namespace pipewright::exec;
using namespace pipewright::exec::detail;

struct Case {
  const char* what;
  int victim;       // rank that kills itself
  const char* op;   // "put" or "get"
  const char* key;  // when it reaches this key
  bool leaves_one;  // the creator's segment stays for launch to remove
};

std::string file_of(const std::string& dir, std::string key) {
  for (auto& c : key) {
    if (c == '/') c = '_';
  }
  return dir + "/" + key;
}

ShmHandshake file_handshake(const std::string& dir, int rank, const Case& c) {
  ShmHandshake h;
  h.put = [dir, rank, c](const std::string& k, const std::string& v) {
    if (rank == c.victim && std::string(c.op) == "put" && k == c.key) ::raise(SIGKILL);
    const std::string path = file_of(dir, k);
    std::ofstream(path + ".tmp") << v;
    std::rename((path + ".tmp").c_str(), path.c_str());
  };
  h.get = [dir, rank, c](const std::string& k) {
    if (rank == c.victim && std::string(c.op) == "get" && k == c.key) ::raise(SIGKILL);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    for (;;) {
      std::ifstream in(file_of(dir, k));
      if (in) {
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw pipewright::TimeoutError("no key " + k);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  return h;
}

std::vector<std::string> segments(const std::string& job) {
  std::vector<std::string> out;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  const std::string prefix = "pipewright-" + job + "-";
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

int run_rank(const std::string& dir, const std::string& job, int rank, const Case& c) {
  try {
    const std::vector<P2PLink> links{P2PLink{1 - rank, 1 << 20, 1 << 20}};
    int current = -1;
    auto out = connect_shm_links(links, rank, {0, 1}, true, file_handshake(dir, rank, c),
                                 shm_name_prefix(job, rank), &current);
    return out.size() == 1 ? 0 : 3;
  } catch (const std::exception&) {
    return 1;  // the survivor's store wait timed out: expected when its peer died early
  }
}

}  // namespace

int main() {
  if (::opendir("/dev/shm") == nullptr) {
    std::puts("no /dev/shm: skipped");
    return 77;
  }
  const std::vector<Case> cases = {
      {"rank 0 before publishing its host", 0, "put", "p2p/host/0", false},
      {"rank 1 before publishing its host", 1, "put", "p2p/host/1", false},
      {"creator after creating, before publishing the name", 0, "put", "p2p/0-1/name", true},
      {"creator waiting for the acknowledgement", 0, "get", "p2p/0-1/ack", false},
      {"opener before opening", 1, "get", "p2p/0-1/name", false},
      {"opener after mapping, before acknowledging", 1, "put", "p2p/0-1/ack", false},
  };
  int failed = 0;
  std::random_device rd;
  for (const auto& c : cases) {
    char job[17];
    std::snprintf(job, sizeof job, "%08x%08x", rd(), rd());
    char tmpl[] = "/tmp/pw-shm-kill-XXXXXX";
    const std::string dir = ::mkdtemp(tmpl);
    pid_t pids[2];
    for (int r = 0; r < 2; ++r) {
      pids[r] = ::fork();
      if (pids[r] == 0) ::_exit(run_rank(dir, job, r, c));
    }
    int status[2] = {0, 0};
    for (int r = 0; r < 2; ++r) ::waitpid(pids[r], &status[r], 0);
    const bool killed = WIFSIGNALED(status[c.victim]) && WTERMSIG(status[c.victim]) == SIGKILL;
    const auto left = segments(job);
    const std::string launch_prefix = "pipewright-" + std::string(job) + "-r0-";
    bool ok = killed;
    if (c.leaves_one) {
      ok = ok && left.size() == 1 && left[0].compare(0, launch_prefix.size(), launch_prefix) == 0;
    } else {
      ok = ok && left.empty();
    }
    std::printf("%s %s: victim %s, %zu segment(s) left%s\n", ok ? "OK  " : "FAIL", c.what,
                killed ? "killed" : "NOT killed", left.size(),
                c.leaves_one ? " (expected 1, named for launch to remove)" : "");
    for (const auto& name : left) ::shm_unlink(("/" + name).c_str());
    std::system(("rm -rf " + dir).c_str());
    if (!ok) failed = 1;
  }
  return failed;
}
