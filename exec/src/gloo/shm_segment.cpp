// The shared-memory segments of one host's ranks: who shares a host (host_identity), how
// segments are named (shm_name_prefix: `launch` finds its job's leftovers by it), how they are
// created and agreed on (allocate_shm_buffer, create_shm_mapping), and the futex calls both the
// collectives and the point-to-point rings sleep on. Declared in shm_collectives.hpp.
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "gloo/shm_collectives.hpp"

namespace pipewright::exec::detail {

namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value,
           const struct timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

std::string host_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st {};
  const bool has_shm = ::stat("/dev/shm", &st) == 0;
  char pid_ns[128] = {}, net_ns[128] = {};
  const auto n = ::readlink("/proc/self/ns/pid", pid_ns, sizeof pid_ns - 1);
  const auto m = ::readlink("/proc/self/ns/net", net_ns, sizeof net_ns - 1);
  return std::string(host) + "|" + boot + "|" +
         (has_shm ? std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) : "no-shm") + "|" +
         (n > 0 ? std::string(pid_ns, static_cast<std::size_t>(n)) : "no-pid-ns") + "|" +
         (m > 0 ? std::string(net_ns, static_cast<std::size_t>(m)) : "no-net-ns");
}

std::string shm_name_prefix(const std::string& job_id, int world_rank) {
  bool plain = !job_id.empty() && job_id.size() <= 64;
  for (char c : job_id) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) != 0);
  return "/pipewright-" + (plain ? job_id : "p" + std::to_string(::getpid())) + "-r" +
         std::to_string(world_rank) + "-";
}

std::shared_ptr<ShmBuffer> allocate_shm_buffer(const ShmHandshake& store, int rank, int size,
                                               std::int64_t seq, std::size_t bytes,
                                               const std::string& name_prefix) {
  const std::string host = host_identity();
  store.put("host/" + std::to_string(rank), host);
  bool same_host = true;
  for (int r = 0; r < size; ++r)
    same_host = same_host && store.get("host/" + std::to_string(r)) == host;
  if (!same_host) return nullptr;
  std::shared_ptr<ShmBuffer> buffer;
  std::string name;
  std::string error;
  if (rank == 0) {
    std::random_device rd;
    name = name_prefix + "dp-" + std::to_string(seq) + "-" + std::to_string(rd());
    buffer = ShmBuffer::create(name, size, bytes, &error);
  }
  try {  // issue 44: a handshake that fails after the create leaves nothing in /dev/shm
    if (rank == 0) {
      store.put("name", buffer ? name : std::string());
    } else {
      name = store.get("name");
      if (!name.empty()) buffer = ShmBuffer::open(name, rank, size, bytes, &error);
    }
    store.put("ok/" + std::to_string(rank), buffer ? "1" : "0");
    bool all_ok = true;
    for (int r = 0; r < size; ++r) all_ok = all_ok && store.get("ok/" + std::to_string(r)) == "1";
    if (rank == 0 && buffer) ShmBuffer::unlink(name);
    return all_ok ? buffer : nullptr;
  } catch (...) {
    if (rank == 0 && buffer) ShmBuffer::unlink(name);
    throw;
  }
}

void* create_shm_mapping(const std::string& name, std::size_t bytes, std::string* error) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    *error = errno_text(("shm_open " + name).c_str());
    return nullptr;
  }
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    *error = "reserving " + std::to_string(bytes) + " bytes of shared memory for " + name + ": " +
             std::strerror(rc);
    ::close(fd);
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    *error = errno_text(("mmap " + name).c_str());
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  return base;
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t seen,
                std::chrono::nanoseconds for_at_most) {
  for_at_most = std::max(for_at_most, std::chrono::nanoseconds(1000));
  struct timespec ts {};
  ts.tv_sec = static_cast<time_t>(for_at_most.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(for_at_most.count() % 1000000000);
  (void)futex(word, FUTEX_WAIT, seen, &ts);  // returns at once if `word` moved since `seen`
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  (void)futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace pipewright::exec::detail
