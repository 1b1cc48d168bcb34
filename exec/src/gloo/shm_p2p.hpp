// Shared-memory point-to-point messages between ranks of one host (Note [Shared-memory
// point-to-point]). No torch: raw buffers, POSIX shared memory and futexes. Private to exec/.
//
// Note [Shared-memory point-to-point]
// c10d's Gloo moves every pipeline activation and gradient through TCP loopback: the sender's
// writev, then the receiver's I/O thread (gloo_tcp_loop), which wakes for each message, reads it
// into the posted buffer and hands completion to the waiting thread. On a CPU host whose cores
// all compute, that thread preempts compute: measured with `perf record -e sched:sched_switch`
// on the small model of bench/executor_vs_torch.sh (Interleaved1F1B, 2 ranks on 2 cores), each
// rank's gloo_tcp_loop ran ~7 ms per 56 ms step, in slices of up to 5 ms, 22 of them preempting
// the rank's compute thread for over 1 ms; SEND actions that usually take 0.08 ms took 3-7 ms
// when the sender had to wait for the pair's lock. NCCL and Open MPI move intra-node messages
// through shared memory instead; so does pipewright, for the pairs the plan interpreter names
// (Communicator::connect_p2p) when both ranks are on one host:
//   - each pair maps one shared-memory object with a ring per direction (single producer, single
//     consumer), sized for a step's messages in that direction (the interpreter's hint, at least
//     64 KiB, at most 256 MiB), so in a valid plan a step's messages fit;
//   - a send never waits for its receiver (issue 44): send() copies what fits into the ring in
//     records of [tag, total size, offset, chunk] and, when the whole message went in, returns a
//     completed Work (the caller's buffer is free at once, as with a buffered send). A message
//     that does not fit (a ring smaller than the step's traffic: above the 256 MiB cap, or a
//     caller without hints) leaves its remaining bytes in a heap copy, the channel's backlog,
//     which a pusher thread of that channel (started with the first backlog) moves into the ring
//     as the receiver frees room; later sends to that peer queue behind it, so each pair stays
//     FIFO. Its Work completes when its last byte is in the ring. Every wait on this transport
//     (a receive, or a send whose bytes are still in the backlog) drains every incoming ring of
//     the rank, not only its peer's, so a peer's pusher is never stuck behind a wait for another
//     peer. Together: waits form a cycle only where the plan's own receive order does, as over
//     TCP. (The first design blocked send() while its ring was full and drained only from
//     there: a 3-rank cycle deadlocked, rank 0 blocked sending 1 MiB to rank 1, which waited for
//     rank 2, which waited for rank 0's next message.) The pusher fails an entry
//     whose receiver frees no room for the communicator's timeout (TimeoutError naming the peer
//     and the ring), and with it every later send to that peer;
//   - the receiving thread itself moves records out of the ring (no progress thread), whenever
//     it posts, tests or waits for a receive: into the posted buffer of that (peer, tag), first
//     come first matched as in MPI, or, for a message that arrived before its receive was
//     posted, into heap memory that the receive later copies from; a receive whose Work is
//     dropped unfinished never writes into its buffer afterwards;
//   - a waiting receiver sleeps on a futex in the ring (the sender wakes it only when it sleeps)
//     and wakes every 100 ms to check its deadline and its peer: a peer whose communicator was
//     destroyed marks the rings closed, one whose process is gone is found by its pid; either is
//     a PeerError naming the rank, a deadline a TimeoutError, as for Gloo's TCP.
// Memory: a pair maps capacity0 + capacity1 + 12 KiB (at most 2 x 256 MiB + 12 KiB); a backlog
// adds a heap copy of the overflow while it drains (docs/executor.md, "Shared-memory messages").
// Segments in /dev/shm (Note [Shared-memory names]): a name lives only from its creation until
// the peer has mapped it.
// Unlike Gloo's TCP, a receive checks the message's size: a message of another size than the
// buffer is a BackendError on wait().
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gloo/shm_collectives.hpp"
#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

// The shared-memory object of one pair: a header and a ring per direction. The lower rank of the
// pair creates it, the higher opens it; "side" 0 is the lower rank.
class ShmLink {
 public:
  // `capacity[d]`: bytes of the ring that side d writes (rounded up to 4 KiB, at least 64 KiB).
  // Null and *error set when the object cannot be created, sized or mapped.
  static std::shared_ptr<ShmLink> create(const std::string& name, std::size_t capacity0,
                                         std::size_t capacity1, std::string* error);
  static std::shared_ptr<ShmLink> open(const std::string& name, std::string* error);
  static void unlink(const std::string& name) noexcept;

  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;
  ~ShmLink();

  struct Header;
  struct Ring;
  [[nodiscard]] Header& header() const noexcept;
  // The ring that side `side` writes.
  [[nodiscard]] Ring& ring(int side) const noexcept;
  [[nodiscard]] std::byte* data(int side) const noexcept;
  [[nodiscard]] std::size_t capacity(int side) const noexcept;

 private:
  ShmLink(void* base, std::size_t bytes) noexcept : base_(base), bytes_(bytes) {}
  void* base_;
  std::size_t bytes_;
};

// The layout of a pair's object (shm_link.cpp creates it, shm_p2p.cpp moves messages through it).
namespace shm_p2p_layout {
inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kLine = 64;
inline constexpr std::uint32_t kMagic = 0x70775032;  // "pwP2"
inline constexpr std::size_t kMinCapacity = 64 * 1024;
// Rings are sized from the interpreter's per-step hint up to this; a step that sends more in one
// direction overflows into the sender's heap (the backlog below), which costs one more copy of
// the overflow but never blocks the sender.
inline constexpr std::size_t kMaxCapacity = std::size_t{256} << 20;
}  // namespace shm_p2p_layout

// Control words of one direction, each written by one side, on lines of their own.
struct ShmLink::Ring {
  alignas(shm_p2p_layout::kLine) std::atomic<std::uint64_t> head{0};  // bytes published (producer)
  std::atomic<std::uint32_t> data_seq{0};  // futex word: bumped after each publish
  alignas(shm_p2p_layout::kLine) std::atomic<std::uint64_t> tail{0};  // bytes consumed (consumer)
  std::atomic<std::uint32_t> space_seq{0};  // futex word: bumped when room was freed
  alignas(shm_p2p_layout::kLine) std::atomic<std::uint32_t> consumers_sleeping{0};
  std::atomic<std::uint32_t> producer_sleeping{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free (address-free)");

struct ShmLink::Header {
  std::uint32_t magic = shm_p2p_layout::kMagic;
  std::uint64_t capacity[2] = {0, 0};
  std::uint64_t ring_offset[2] = {0, 0};  // the Ring of side d, then its data after a page
  std::uint64_t total_bytes = 0;
  std::atomic<std::int64_t> pid[2];  // for peer-death detection, set by each side's add()
  std::atomic<std::uint32_t> closed[2];
};
static_assert(sizeof(ShmLink::Header) <= shm_p2p_layout::kPage &&
              sizeof(ShmLink::Ring) <= shm_p2p_layout::kPage);

// The handshake of Communicator::connect_p2p through the group's store, for the new pairs of
// `links` (peers are communicator-local ranks; `global_ranks[r]` is rank r's world rank). Three
// phases that never wait for anything published later: (0) every rank publishes its host
// identity ("off" when `allowed` is false); (1) the lower rank of each pair compares identities
// and, when they match, creates the pair's object (named name_prefix + "p2p-...", Note
// [Shared-memory names]) sized from the links' hints and publishes its name, or why there is
// none; (2) the higher rank opens it, unlinks the name at once (nothing is left in /dev/shm from
// here on) and acknowledges, or says why it could not; (3) the lower rank waits for the
// acknowledgement and unlinks the name again (for a peer that never opened it). Returns one
// entry per link: the link both ends mapped, or null and why (the pair keeps the transport's own
// path, and the caller logs it). Throws what store.get throws, with *current set to the peer it
// waited for, after unlinking what it created.
struct ShmLinkResult {
  int peer = -1;
  std::shared_ptr<ShmLink> link;  // null: not shared memory
  std::string how;  // "rank <world peer>: shared memory (...)" or "rank <p>: TCP (<why>)"
};
[[nodiscard]] std::vector<ShmLinkResult> connect_shm_links(
    const std::vector<P2PLink>& links, int rank, const std::vector<int>& global_ranks, bool allowed,
    const ShmHandshake& store, const std::string& name_prefix, int* current);

// The shared-memory channels of one communicator (Note [Shared-memory point-to-point]).
class ShmP2P {
 public:
  // `rank`: this rank's communicator-local rank; `global_ranks[r]` names rank r in messages.
  ShmP2P(int rank, std::vector<int> global_ranks, std::chrono::milliseconds timeout);
  ShmP2P(const ShmP2P&) = delete;
  ShmP2P& operator=(const ShmP2P&) = delete;
  // Marks every link closed (peers waiting on it fail with PeerError) and wakes them.
  ~ShmP2P();

  // Makes `peer` reachable through `link` (this rank is side 0 of it when rank < peer).
  void add(int peer, std::shared_ptr<ShmLink> link);
  [[nodiscard]] bool connected(int peer) const;
  // Peers with a channel, ascending (communicator-local).
  [[nodiscard]] std::vector<int> peers() const;

  // Copies `buf` into the ring towards `dst` (connected(dst)), never waiting for the receiver:
  // the Work is complete at once when the message fit, else when the pusher has moved its last
  // byte in (it fails when the ring stays full for the timeout or the peer left).
  [[nodiscard]] WorkPtr send(const BufferView& buf, int dst, std::int64_t tag,
                             const std::string& prefix);
  [[nodiscard]] WorkPtr recv(const BufferView& buf, int src, std::int64_t tag,
                             const std::string& prefix);

  struct State;  // shared with the Works

 private:
  std::shared_ptr<State> state_;
};

}  // namespace pipewright::exec::detail
