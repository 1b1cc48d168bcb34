// Shared-memory all-reduce among the ranks of one host (Note [Shared-memory all-reduce]).
// No torch: raw buffers, POSIX shared memory and futexes. Private to exec/.
//
// Note [Shared-memory all-reduce]: c10d's Gloo moves every byte of an all-reduce through TCP
// loopback, which on a CPU host costs two kernel copies per byte sent and a progress thread that
// competes with backward for the cores; NCCL and Open MPI both switch to shared memory inside a
// node. pipewright does the same for buffers the communicator allocated itself
// (Communicator::allocate_collective_buffer, used by DDP's gradient buckets): each such buffer is
// one POSIX shared-memory object holding a slot per rank, rank r's buffer *is* its slot, and an
// all-reduce works on the peers' slots in place:
//   1. barrier: every rank's input is final (and all ranks name the same offset and count);
//   2. rank r reduces chunk r of the range over all slots, in rank order, into its own slot;
//   3. barrier; rank r copies every other chunk from its owner's slot;
//   4. barrier: nobody reuses its slot before every peer has copied from it.
// Each chunk is reduced by exactly one rank and copied bit for bit, so replicas stay identical.
// Note [Peer pages] (issue 43's memory target): a rank reads its peers' slots with pread() on the
// object's descriptor, in blocks of 256 KiB through a scratch buffer (into its own slot directly
// for the copies of step 3), never through the mapping: a page of a peer's slot that this process
// touched through its mapping would count in its resident set (VmHWM) although the peer owns it,
// 1.5x the buffer per rank at dp 4, which the memory model (sched::peak_memory) rightly does not
// count. Only the rank's own slot (its gradients) is resident in its RSS.
// Per rank that is (size + 1) / size reads and (size + 1) / size writes of the buffer, against
// 2 (size - 1) / size sends plus as many receives through the kernel for Gloo's ring.
// The operations run in FIFO order on one worker thread per communicator (so they are
// asynchronous, like c10d's), and every wait has a deadline: a peer that never arrives is named
// in a TimeoutError, and one whose process is gone (the slot records each rank's pid) in a
// PeerError within ~0.1 s.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

// What the shared-memory paths (this all-reduce, Note [Shared-memory point-to-point]) need from
// the group's store to agree: set a key, and get one (blocks until it is set; throws on timeout).
struct ShmHandshake {
  std::function<void(const std::string&, const std::string&)> put;
  std::function<std::string(const std::string&)> get;
};

// This host's identity for shared memory: ranks with equal identities can map each other's POSIX
// shared memory and see each other's pids (peer-death detection): same host name, same boot,
// same /dev/shm file system (containers on one machine have their own) and same pid namespace.
// The network namespace counts too: ranks in different ones are different nodes to the user
// (tools/netns-cluster), and their traffic must cross the network between them.
[[nodiscard]] std::string host_identity();

// Futexes on words in shared memory (not FUTEX_PRIVATE: other processes wait on them too).
// futex_wait sleeps while *word == seen, at most `for_at_most` (at least 1 us); it may return
// early. futex_wake_all wakes every waiter.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t seen,
                std::chrono::nanoseconds for_at_most);
void futex_wake_all(std::atomic<std::uint32_t>* word);

// Note [Shared-memory names] (issue 44): every POSIX shared-memory object pipewright creates is
// named "/pipewright-<job>-r<creator's world rank>-<kind>-<random>", <job> being the job id of
// `pipewright launch` (PIPEWRIGHT_JOB_ID, WorldInfo::job_id; 16 hex digits) or "p<pid>" without
// one. A name exists only from its creation until the peers have mapped it (point-to-point: the
// peer unlinks it right after mapping; the all-reduce: rank 0, once every member reported). A rank
// killed inside that window (SIGKILL, or launch's SIGTERM: the run installs no handler) leaves the
// object behind, so `pipewright launch`, once its ranks have exited, removes
// /dev/shm/pipewright-<job>-r<k>-* for each of its own ranks k (tools/cli/cmd_launch.cpp,
// remove_job_shared_memory), and nothing of another job or node. Returns
// "/pipewright-<job>-r<world_rank>-".
[[nodiscard]] std::string shm_name_prefix(const std::string& job_id, int world_rank);

// Creates the POSIX shared-memory object `name` (which must not exist) of `bytes` bytes, reserves
// its pages (posix_fallocate: a /dev/shm too small fails here with ENOSPC, not later with SIGBUS
// on first touch) and maps it. Null and *error set on failure, with nothing left behind.
[[nodiscard]] void* create_shm_mapping(const std::string& name, std::size_t bytes,
                                       std::string* error);

class ShmBuffer;
// Collective over the `size` ranks of a group (Note [Shared-memory all-reduce]): every member
// publishes its host identity; when all match, rank 0 creates the shared object and names it,
// the others map it and report back, and only if every member succeeded is it returned (else
// null on every member, which then uses heap memory, so the group agrees on which path each
// all-reduce takes). Rank 0 unlinks the name once all have mapped it, so nothing is left in
// /dev/shm once every member has mapped it; a failure of the handshake (a peer that never
// answers) unlinks it too. `seq` numbers the group's allocations; `name_prefix` is
// shm_name_prefix() of this rank (Note [Shared-memory names]).
[[nodiscard]] std::shared_ptr<ShmBuffer> allocate_shm_buffer(const ShmHandshake& store, int rank,
                                                             int size, std::int64_t seq,
                                                             std::size_t bytes,
                                                             const std::string& name_prefix);

// One collective buffer: `size` slots of `slot_bytes` bytes after a small header, in one
// shared-memory object mapped by every rank of the group.
class ShmBuffer {
 public:
  // Rank 0 creates the object under `name` (which must not exist), others open it. Returns null
  // and sets *error when the object cannot be created, sized (posix_fallocate, so a full
  // /dev/shm is an error now, not a SIGBUS later) or mapped.
  static std::shared_ptr<ShmBuffer> create(const std::string& name, int size,
                                           std::size_t slot_bytes, std::string* error);
  static std::shared_ptr<ShmBuffer> open(const std::string& name, int rank, int size,
                                         std::size_t slot_bytes, std::string* error);
  // Removes the name (the mapping stays valid); rank 0 calls it once every peer has mapped.
  static void unlink(const std::string& name) noexcept;

  ShmBuffer(const ShmBuffer&) = delete;
  ShmBuffer& operator=(const ShmBuffer&) = delete;
  ~ShmBuffer();

  [[nodiscard]] std::byte* slot(int r) const noexcept;
  // Copies `bytes` bytes of slot `r` from `offset` (bytes into the slot) to `dst` through the
  // object's file descriptor (pread), not the mapping: Note [Peer pages]. Throws BackendError
  // (naming `what`) when the read fails.
  void read_slot(int r, std::size_t offset, void* dst, std::size_t bytes,
                 const std::string& what) const;
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  [[nodiscard]] int size() const noexcept { return size_; }

  struct Header;
  [[nodiscard]] Header& header() const noexcept;

 private:
  ShmBuffer(void* base, int fd, std::size_t mapped_bytes, int size, std::size_t slot_bytes,
            std::size_t header_bytes) noexcept;
  void* base_;
  int fd_;  // the object, for read_slot
  std::size_t mapped_bytes_;
  int size_;
  std::size_t slot_bytes_;
  std::size_t header_bytes_;
};

// Runs all-reduces on registered ShmBuffers, in order, on a worker thread.
class ShmCollectives {
 public:
  // `global_ranks[r]` names communicator rank r in messages; `timeout` bounds every barrier.
  ShmCollectives(int rank, std::vector<int> global_ranks, std::chrono::milliseconds timeout);
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;
  ~ShmCollectives();

  // Records this rank's pid in `buffer` (peer-death detection) and makes it eligible.
  void add(std::shared_ptr<ShmBuffer> buffer);
  // The registered buffer whose slot of this rank contains [data, data + bytes), or null.
  [[nodiscard]] ShmBuffer* find(const void* data, std::size_t bytes) const noexcept;

  // In-place all-reduce of `buf` (which find() located in `buffer`). `prefix` starts error
  // messages ("rank 1: all_reduce (step 3 stage 0 DDP ...)").
  [[nodiscard]] WorkPtr all_reduce(ShmBuffer* buffer, const BufferView& buf, ReduceOp op,
                                   std::string prefix);

  // Note [Shared-memory sharded collectives] (ZeRO, issue 43): a reduce-scatter whose input
  // and an all-gather whose output lie in `buffer` (this rank's slot), in FIFO order with the
  // all-reduces. Reduce-scatter: barrier (every input final); rank r reduces piece r over every
  // slot, in rank order (float32 sums as the all-reduce's; 16-bit types in float32, rounded
  // once), into `out`; barrier (nobody rewrites its input before every peer has read it).
  // All-gather: rank r copies `in` into piece r of its slot (nothing when `in` is already
  // there); barrier; it copies every other piece from its owner's slot; barrier. Each rank
  // reads (size-1)/size of the buffer from its peers, once.
  [[nodiscard]] WorkPtr reduce_scatter(ShmBuffer* buffer, const BufferView& in,
                                       const BufferView& out, ReduceOp op, std::string prefix);
  [[nodiscard]] WorkPtr all_gather(ShmBuffer* buffer, const BufferView& in, const BufferView& out,
                                   std::string prefix);

  struct Job;  // one queued all-reduce and its completion (the Work's shared state)

 private:
  void run_worker();
  void execute(Job& job);
  void execute_sharded(Job& job);
  [[nodiscard]] WorkPtr submit(std::shared_ptr<Job> job, ShmBuffer* buffer, const void* data);
  // Waits until every rank has arrived at barrier number `epoch` of `buffer`.
  void barrier(ShmBuffer& buffer, std::uint64_t epoch, const std::string& prefix,
               std::chrono::steady_clock::time_point deadline);

  int rank_;
  std::vector<int> global_ranks_;
  std::chrono::milliseconds timeout_;
  std::vector<std::shared_ptr<ShmBuffer>> buffers_;
  // Per buffer: barriers this rank has entered. A deque so that a Job's pointer into it stays
  // valid while add() appends (the worker only touches its Job's counter).
  std::deque<std::uint64_t> epochs_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  bool failed_ = false;  // a barrier failed: later jobs fail at once, the worker is detached
  std::string failure_;
  std::thread worker_;
};

}  // namespace pipewright::exec::detail
