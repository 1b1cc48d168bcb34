// The shared-memory object of a pipeline pair (ShmLink: its layout, create and open) and the
// handshake through the store that maps it on both ranks (connect_shm_links). See Note
// [Shared-memory point-to-point] in shm_p2p.hpp and Note [Shared-memory names] in
// shm_collectives.hpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "gloo/shm_p2p.hpp"

namespace pipewright::exec::detail {

namespace {

using namespace shm_p2p_layout;  // NOLINT: kPage, kLine, the capacities

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

ShmLink::~ShmLink() { ::munmap(base_, bytes_); }

ShmLink::Header& ShmLink::header() const noexcept { return *static_cast<Header*>(base_); }

ShmLink::Ring& ShmLink::ring(int side) const noexcept {
  return *reinterpret_cast<Ring*>(static_cast<std::byte*>(base_) +
                                  header().ring_offset[static_cast<std::size_t>(side)]);
}

std::byte* ShmLink::data(int side) const noexcept {
  return static_cast<std::byte*>(base_) + header().ring_offset[static_cast<std::size_t>(side)] +
         kPage;
}

std::size_t ShmLink::capacity(int side) const noexcept {
  return header().capacity[static_cast<std::size_t>(side)];
}

std::shared_ptr<ShmLink> ShmLink::create(const std::string& name, std::size_t capacity0,
                                         std::size_t capacity1, std::string* error) {
  std::size_t cap[2];
  cap[0] = round_up(std::clamp(capacity0, kMinCapacity, kMaxCapacity), kPage);
  cap[1] = round_up(std::clamp(capacity1, kMinCapacity, kMaxCapacity), kPage);
  const std::size_t offset1 = kPage + kPage + cap[0];
  const std::size_t total = offset1 + kPage + cap[1];
  void* base = create_shm_mapping(name, total, error);
  if (base == nullptr) return nullptr;
  auto* h = new (base) Header();
  h->capacity[0] = cap[0];
  h->capacity[1] = cap[1];
  h->ring_offset[0] = kPage;
  h->ring_offset[1] = offset1;
  h->total_bytes = total;
  for (int d = 0; d < 2; ++d) {
    h->pid[d].store(0);
    h->closed[d].store(0);
  }
  new (static_cast<std::byte*>(base) + kPage) Ring();
  new (static_cast<std::byte*>(base) + offset1) Ring();
  return std::shared_ptr<ShmLink>(new ShmLink(base, total));
}

std::shared_ptr<ShmLink> ShmLink::open(const std::string& name, std::string* error) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    *error = errno_text("shm_open " + name);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < kPage) {
    *error = "shared memory " + name + " is too small";
    ::close(fd);
    return nullptr;
  }
  const auto total = static_cast<std::size_t>(st.st_size);
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    *error = errno_text("mmap " + name);
    return nullptr;
  }
  const auto* h = static_cast<const Header*>(base);
  if (h->magic != kMagic || h->total_bytes != total) {
    *error = "shared memory " + name + " is not a pipewright link";
    ::munmap(base, total);
    return nullptr;
  }
  return std::shared_ptr<ShmLink>(new ShmLink(base, total));
}

void ShmLink::unlink(const std::string& name) noexcept { ::shm_unlink(name.c_str()); }

namespace {

std::string human(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

std::string describe(const ShmLink& link, int side) {
  return "shared memory (rings of " + human(link.capacity(side)) + " to it, " +
         human(link.capacity(1 - side)) + " from it)";
}

}  // namespace

std::vector<ShmLinkResult> connect_shm_links(const std::vector<P2PLink>& links, int rank,
                                             const std::vector<int>& global_ranks, bool allowed,
                                             const ShmHandshake& store,
                                             const std::string& name_prefix, int* current) {
  auto pair_key = [&](int peer) {
    return "p2p/" + std::to_string(std::min(rank, peer)) + "-" +
           std::to_string(std::max(rank, peer)) + "/";
  };
  auto world = [&](int r) { return std::to_string(global_ranks[static_cast<std::size_t>(r)]); };
  auto result = [&](int peer, std::shared_ptr<ShmLink> link, const std::string& how) {
    return ShmLinkResult{peer, std::move(link), "rank " + world(peer) + ": " + how};
  };
  struct Created {
    int peer;
    std::string name;
    std::shared_ptr<ShmLink> link;
  };
  std::vector<Created> created;
  std::vector<ShmLinkResult> out;
  try {
    const std::string me = allowed ? host_identity() : std::string("off");
    store.put("p2p/host/" + std::to_string(rank), me);
    for (const auto& l : links) {  // (1) the lower rank creates
      if (l.peer < rank) continue;
      *current = l.peer;
      std::shared_ptr<ShmLink> link;
      std::string name, why;
      const std::string theirs = me == "off" ? me : store.get("p2p/host/" + std::to_string(l.peer));
      if (me == "off") {
        why = "shared memory turned off";
      } else if (theirs == "off") {
        why = "shared memory turned off on rank " + world(l.peer);
      } else if (theirs != me) {
        why = "rank " + world(l.peer) + " is on another host";
      } else {
        std::random_device rd;
        name = name_prefix + "p2p-" + world(l.peer) + "-" + std::to_string(rd());
        std::string error;
        link = ShmLink::create(name, l.send_bytes, l.recv_bytes, &error);
        if (!link) why = "creating its shared memory failed: " + error;
      }
      // A published reason starts with '!': the higher rank logs it too.
      store.put(pair_key(l.peer) + "name", link ? name : "!" + why);
      if (link) {
        created.push_back(Created{l.peer, name, std::move(link)});
      } else {
        out.push_back(result(l.peer, nullptr, "TCP (" + why + ")"));
      }
    }
    for (const auto& l : links) {  // (2) the higher rank opens, unlinks and acknowledges
      if (l.peer > rank) continue;
      *current = l.peer;
      const std::string name = store.get(pair_key(l.peer) + "name");
      std::shared_ptr<ShmLink> link;
      std::string why;
      if (!name.empty() && name[0] == '!') {
        why = name.substr(1);
      } else {
        std::string error;
        link = ShmLink::open(name, &error);
        ShmLink::unlink(name);  // mapped (or unusable): the name has served
        if (!link)
          why = "rank " + world(rank) + " could not map rank " + world(l.peer) + "'s: " + error;
      }
      store.put(pair_key(l.peer) + "ack", link ? "1" : "!" + why);
      out.push_back(link ? result(l.peer, link, describe(*link, 1))
                         : result(l.peer, nullptr, "TCP (" + why + ")"));
    }
    for (auto& c : created) {  // (3) the lower rank waits for it and unlinks
      *current = c.peer;
      const std::string ack = store.get(pair_key(c.peer) + "ack");
      ShmLink::unlink(c.name);
      c.name.clear();
      out.push_back(ack == "1" ? result(c.peer, c.link, describe(*c.link, 0))
                               : result(c.peer, nullptr, "TCP (" + ack.substr(1) + ")"));
    }
  } catch (...) {
    for (const auto& c : created) {
      if (!c.name.empty()) ShmLink::unlink(c.name);
    }
    throw;
  }
  return out;
}

}  // namespace pipewright::exec::detail
