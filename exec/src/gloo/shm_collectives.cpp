// Shared-memory all-reduce: see Note [Shared-memory all-reduce] in shm_collectives.hpp.
#include "gloo/shm_collectives.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
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
#include <new>
#include <random>
#include <sstream>
#include <utility>

#include "comm/communicator_base.hpp"
#include "comm/reduce_kernels.hpp"
#include "comm/sharded_collectives.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kLine = 64;
constexpr std::uint32_t kMagic = 0x70775348;  // "pwSH"
// How long one futex wait sleeps before re-checking the deadline, peer liveness and stop.
constexpr auto kPollSlice = std::chrono::milliseconds(100);

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Per-rank state, one cache line each, after the first line of the header.
struct alignas(kLine) RankState {
  std::atomic<std::uint64_t> arrivals{0};  // barriers this rank has entered
  std::atomic<std::int64_t> pid{0};        // for peer-death detection
  std::atomic<std::uint64_t> offset{0};    // the all-reduce this rank is in (checked at entry)
  std::atomic<std::uint64_t> count{0};
};
static_assert(sizeof(RankState) == kLine);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "atomics in shared memory must be lock-free (address-free)");

std::size_t header_bytes_for(int size) {
  return round_up(kLine + kLine * static_cast<std::size_t>(size), kPage);
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Sum of `n` float32 inputs into dst, in input order, blockwise so the partial sums stay in L1.
// dst may alias one of the inputs.
void sum_float(float* dst, const float* const* in, int n, std::size_t count) {
  constexpr std::size_t kBlock = 2048;
  alignas(kLine) float acc[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    const float* __restrict a = in[0] + base;
    const float* __restrict b = in[1] + base;
    for (std::size_t i = 0; i < len; ++i) acc[i] = a[i] + b[i];
    for (int k = 2; k < n; ++k) {
      const float* __restrict c = in[k] + base;
      for (std::size_t i = 0; i < len; ++i) acc[i] += c[i];
    }
    std::memcpy(dst + base, acc, len * sizeof(float));
  }
}

// [begin, end) of chunk c when `count` elements are split over `size` ranks, chunk starts
// aligned to 64 bytes so no two owners write one cache line.
std::pair<std::size_t, std::size_t> chunk(std::size_t count, std::size_t elem, int size, int c) {
  const std::size_t align = std::max<std::size_t>(1, kLine / elem);
  const std::size_t per = round_up(
      (count + static_cast<std::size_t>(size) - 1) / static_cast<std::size_t>(size), align);
  const std::size_t begin = std::min(count, per * static_cast<std::size_t>(c));
  return {begin, std::min(count, begin + per)};
}

// dst[i] = op over every rank's slot of the `count` elements at `offset` bytes into the slot, in
// rank order (the kernels of the all-reduce and reduce-scatter); `own` is this rank's part, read
// in place; peers' parts are read with ShmBuffer::read_slot in blocks (Note [Peer pages]). dst
// may be `own`.
void reduce_slots(const ShmBuffer& b, int self, std::size_t offset, std::size_t count, DType dtype,
                  ReduceOp op, const std::byte* own, void* dst, const std::string& what) {
  constexpr std::size_t kBlockBytes = std::size_t{256} << 10;
  const int size = b.size();
  const std::size_t elem = dtype_size(dtype);
  const std::size_t block = std::min(count, kBlockBytes / elem);
  if (count == 0) return;
  std::vector<std::byte> scratch(block * elem * static_cast<std::size_t>(size));
  std::vector<const void*> in(static_cast<std::size_t>(size));
  for (std::size_t base = 0; base < count; base += block) {
    const std::size_t len = std::min(block, count - base);
    for (int r = 0; r < size; ++r) {
      std::byte* mine = scratch.data() + block * elem * static_cast<std::size_t>(r);
      if (r == self) {
        in[static_cast<std::size_t>(r)] = own + base * elem;
      } else {
        b.read_slot(r, offset + base * elem, mine, len * elem, what);
        in[static_cast<std::size_t>(r)] = mine;
      }
    }
    void* out = static_cast<std::byte*>(dst) + base * elem;
    if (dtype == DType::kFloat32 && op == ReduceOp::kSum && size >= 2) {
      sum_float(static_cast<float*>(out), reinterpret_cast<const float* const*>(in.data()), size,
                len);
    } else if ((dtype == DType::kBFloat16 || dtype == DType::kFloat16) && op == ReduceOp::kSum) {
      // Note [16-bit sums] (reduce_kernels.hpp): in float32, rounded once, as over TCP.
      sum_half_rounded_once(out, in.data(), size, len, dtype);
    } else {
      reduce_pieces(out, in, len, dtype, op);
    }
  }
}

}  // namespace

struct ShmBuffer::Header {
  std::atomic<std::uint32_t> wake{0};  // futex word: bumped by every arrival
  std::uint32_t magic = kMagic;
  std::int32_t size = 0;
  std::uint64_t slot_bytes = 0;
};
static_assert(sizeof(ShmBuffer::Header) <= kLine);

namespace {
RankState& rank_state(ShmBuffer::Header& h, int r) {
  auto* base = reinterpret_cast<std::byte*>(&h) + kLine;
  return *reinterpret_cast<RankState*>(base + kLine * static_cast<std::size_t>(r));
}
}  // namespace

ShmBuffer::ShmBuffer(void* base, int fd, std::size_t mapped_bytes, int size, std::size_t slot_bytes,
                     std::size_t header_bytes) noexcept
    : base_(base),
      fd_(fd),
      mapped_bytes_(mapped_bytes),
      size_(size),
      slot_bytes_(slot_bytes),
      header_bytes_(header_bytes) {}

ShmBuffer::~ShmBuffer() {
  ::munmap(base_, mapped_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

void ShmBuffer::read_slot(int r, std::size_t offset, void* dst, std::size_t bytes,
                          const std::string& what) const {
  auto* out = static_cast<std::byte*>(dst);
  auto at = static_cast<off_t>(header_bytes_ + slot_bytes_ * static_cast<std::size_t>(r) + offset);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, out, bytes, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw BackendError(what + ": reading a peer's shared-memory slot: " +
                         (n < 0 ? std::string(std::strerror(errno)) : "end of file"));
    }
    out += n, at += n, bytes -= static_cast<std::size_t>(n);
  }
}

std::byte* ShmBuffer::slot(int r) const noexcept {
  return static_cast<std::byte*>(base_) + header_bytes_ + slot_bytes_ * static_cast<std::size_t>(r);
}

ShmBuffer::Header& ShmBuffer::header() const noexcept { return *static_cast<Header*>(base_); }

std::shared_ptr<ShmBuffer> ShmBuffer::create(const std::string& name, int size,
                                             std::size_t slot_bytes, std::string* error) {
  const std::size_t slot = round_up(std::max<std::size_t>(slot_bytes, 1), kPage);
  const std::size_t header = header_bytes_for(size);
  const std::size_t total = header + slot * static_cast<std::size_t>(size);
  void* base = create_shm_mapping(name, total, error);
  if (base == nullptr) return nullptr;
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0600);  // Note [Peer pages]
  if (fd < 0) {
    *error = errno_text(("shm_open " + name).c_str());
    ::munmap(base, total);
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  auto* h = new (base) Header();
  h->size = size;
  h->slot_bytes = slot;
  for (int r = 0; r < size; ++r) {
    new (reinterpret_cast<std::byte*>(base) + kLine + kLine * static_cast<std::size_t>(r))
        RankState();
  }
  return std::shared_ptr<ShmBuffer>(new ShmBuffer(base, fd, total, size, slot, header));
}

std::shared_ptr<ShmBuffer> ShmBuffer::open(const std::string& name, int rank, int size,
                                           std::size_t slot_bytes, std::string* error) {
  const std::size_t slot = round_up(std::max<std::size_t>(slot_bytes, 1), kPage);
  const std::size_t header = header_bytes_for(size);
  const std::size_t total = header + slot * static_cast<std::size_t>(size);
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    *error = "rank " + std::to_string(rank) + ": " + errno_text(("shm_open " + name).c_str());
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != total) {
    *error = "rank " + std::to_string(rank) + ": shared memory " + name + " has " +
             std::to_string(st.st_size) + " bytes, expected " + std::to_string(total) +
             " (ranks asked for different buffer sizes)";
    ::close(fd);
    return nullptr;
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *error = "rank " + std::to_string(rank) + ": " + errno_text(("mmap " + name).c_str());
    ::close(fd);
    return nullptr;
  }
  auto* h = static_cast<Header*>(base);
  if (h->magic != kMagic || h->size != size || h->slot_bytes != slot) {
    *error = "rank " + std::to_string(rank) + ": shared memory " + name +
             " was created for another group";
    ::munmap(base, total);
    ::close(fd);
    return nullptr;
  }
  return std::shared_ptr<ShmBuffer>(new ShmBuffer(base, fd, total, size, slot, header));
}

void ShmBuffer::unlink(const std::string& name) noexcept { ::shm_unlink(name.c_str()); }

// ---------------------------------------------------------------------------------------------

struct ShmCollectives::Job {
  ShmBuffer* buffer = nullptr;
  std::uint64_t* epoch = nullptr;  // the buffer's barrier counter (epochs_)
  std::size_t offset_bytes = 0;
  std::size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string prefix;
  // Note [Shared-memory sharded collectives]: 1 reduce-scatter, 2 all-gather (0: all-reduce);
  // `count` is then the whole buffer's and `piece` one rank's part.
  int sharded = 0;
  std::size_t piece = 0;
  const void* in = nullptr;
  void* out = nullptr;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

namespace {

// The worker thread publishes the job's outcome; waits block on the job's condition variable.
class ShmWork final : public BasicWork {
 public:
  ShmWork(std::shared_ptr<ShmCollectives::Job> job, std::vector<int> global_ranks, int rank)
      : BasicWork(job->prefix),
        job_(std::move(job)),
        global_ranks_(std::move(global_ranks)),
        rank_(rank) {}

 private:
  std::unique_lock<std::mutex> lock() override { return std::unique_lock<std::mutex>(job_->mu); }
  bool test() override {
    if (!job_->done) return false;
    if (job_->error) std::rethrow_exception(job_->error);
    return true;
  }
  void pause(WaitState& wait, std::unique_lock<std::mutex>& lock) override {
    (void)job_->cv.wait_until(lock, wait.deadline);
  }
  std::string waiting_for() const override { return laggards(); }

 private:
  // Ranks that have entered fewer barriers of this buffer than we have.
  std::string laggards() const {
    auto& h = job_->buffer->header();
    const auto mine = rank_state(h, rank_).arrivals.load();
    std::vector<int> behind;
    for (int r = 0; r < job_->buffer->size(); ++r) {
      if (rank_state(h, r).arrivals.load() < mine) {
        behind.push_back(global_ranks_[static_cast<std::size_t>(r)]);
      }
    }
    if (behind.empty()) return "the shared-memory all-reduce to start";
    return behind.size() == 1 ? "rank " + std::to_string(behind[0]) : "ranks " + rank_list(behind);
  }

  std::shared_ptr<ShmCollectives::Job> job_;
  std::vector<int> global_ranks_;
  int rank_;
};

}  // namespace

ShmCollectives::ShmCollectives(int rank, std::vector<int> global_ranks,
                               std::chrono::milliseconds timeout)
    : rank_(rank), global_ranks_(std::move(global_ranks)), timeout_(timeout) {}

ShmCollectives::~ShmCollectives() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A worker inside a barrier notices stop_ within kPollSlice.
  if (worker_.joinable()) worker_.join();
  for (auto& job : queue_) {
    std::lock_guard<std::mutex> lock(job->mu);
    job->done = true;
    job->error = std::make_exception_ptr(
        BackendError(job->prefix + ": the communicator was destroyed before it ran"));
    job->cv.notify_all();
  }
}

void ShmCollectives::add(std::shared_ptr<ShmBuffer> buffer) {
  PW_ASSERT(buffer && buffer->size() == static_cast<int>(global_ranks_.size()),
            "a shared-memory buffer of another group size");
  rank_state(buffer->header(), rank_).pid.store(static_cast<std::int64_t>(::getpid()));
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.push_back(std::move(buffer));
  epochs_.push_back(0);
}

ShmBuffer* ShmCollectives::find(const void* data, std::size_t bytes) const noexcept {
  const auto* p = static_cast<const std::byte*>(data);
  for (const auto& b : buffers_) {
    const std::byte* s = b->slot(rank_);
    if (p >= s && p + bytes <= s + b->slot_bytes()) return b.get();
  }
  return nullptr;
}

WorkPtr ShmCollectives::all_reduce(ShmBuffer* buffer, const BufferView& buf, ReduceOp op,
                                   std::string prefix) {
  auto job = std::make_shared<Job>();
  job->buffer = buffer;
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].get() == buffer) job->epoch = &epochs_[i];
  }
  PW_ASSERT(job->epoch != nullptr, "all_reduce of a shared buffer this communicator did not add");
  job->offset_bytes =
      static_cast<std::size_t>(static_cast<const std::byte*>(buf.data) - buffer->slot(rank_));
  job->count = buf.count;
  job->dtype = buf.dtype;
  job->op = op;
  job->prefix = std::move(prefix);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { run_worker(); });
    queue_.push_back(job);
  }
  cv_.notify_all();
  return std::make_shared<ShmWork>(job, global_ranks_, rank_);
}

void ShmCollectives::run_worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = queue_.front();
      queue_.pop_front();
    }
    std::exception_ptr error;
    if (failed_) {
      error = std::make_exception_ptr(BackendError(
          job->prefix + ": not run: an earlier shared-memory all-reduce failed: " + failure_));
    } else {
      try {
        execute(*job);
      } catch (const std::exception& e) {
        failed_ = true;
        failure_ = e.what();
        error = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(job->mu);
    job->done = true;
    job->error = error;
    job->cv.notify_all();
  }
}

// Note [Barrier spin]: a barrier whose peers are not all there yet spins for up to kBarrierSpin
// before it sleeps on the futex. Waking a sleeping thread on a VM whose vCPU has gone idle took
// up to milliseconds here, once per barrier, and the peers of a collective's second barrier
// arrive within microseconds of each other.
constexpr std::chrono::microseconds kBarrierSpin{200};

void ShmCollectives::barrier(ShmBuffer& buffer, std::uint64_t epoch, const std::string& prefix,
                             std::chrono::steady_clock::time_point deadline) {
  auto& h = buffer.header();
  const int size = buffer.size();
  // Release: our writes to our slot before this point are visible to whoever sees the count.
  rank_state(h, rank_).arrivals.store(epoch, std::memory_order_release);
  h.wake.fetch_add(1, std::memory_order_acq_rel);
  futex_wake_all(&h.wake);
  const auto spin_until = std::chrono::steady_clock::now() + kBarrierSpin;
  for (int spins = 0;; ++spins) {
    const std::uint32_t seen = h.wake.load(std::memory_order_acquire);
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (rank_state(h, r).arrivals.load(std::memory_order_acquire) < epoch) missing.push_back(r);
    }
    if (missing.empty()) return;
    // Note [Barrier spin]: a peer up to kBarrierSpin behind is waited for awake.
    if (spins < 64 || std::chrono::steady_clock::now() < spin_until) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    std::vector<int> names;
    for (int r : missing) names.push_back(global_ranks_[static_cast<std::size_t>(r)]);
    const std::string who =
        names.size() == 1 ? "rank " + std::to_string(names[0]) : "ranks " + rank_list(names);
    for (int r : missing) {
      const auto pid = static_cast<pid_t>(rank_state(h, r).pid.load());
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
        throw PeerError(prefix + ": peer rank " +
                        std::to_string(global_ranks_[static_cast<std::size_t>(r)]) +
                        " died (its process " + std::to_string(pid) +
                        " is gone) during a shared-memory all-reduce");
      }
    }
    if (now >= deadline) {
      throw TimeoutError(prefix + ": " + timed_out_after(timeout_) + " waiting for " + who +
                         " in a shared-memory all-reduce");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) throw BackendError(prefix + ": the communicator was destroyed");
    }
    futex_wait(&h.wake, seen, std::min<std::chrono::nanoseconds>(kPollSlice, deadline - now));
  }
}

void ShmCollectives::execute(Job& job) {
  if (job.sharded != 0) return execute_sharded(job);
  ShmBuffer& b = *job.buffer;
  auto& h = b.header();
  const int size = b.size();
  const std::size_t elem = dtype_size(job.dtype);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::uint64_t& epoch = *job.epoch;

  auto& me = rank_state(h, rank_);
  me.offset.store(job.offset_bytes, std::memory_order_relaxed);
  me.count.store(job.count, std::memory_order_relaxed);
  barrier(b, ++epoch, job.prefix, deadline);  // 1: every input is final
  for (int r = 0; r < size; ++r) {
    auto& other = rank_state(h, r);
    if (other.offset.load(std::memory_order_relaxed) != job.offset_bytes ||
        other.count.load(std::memory_order_relaxed) != job.count) {
      throw BackendError(job.prefix + ": rank " +
                         std::to_string(global_ranks_[static_cast<std::size_t>(r)]) +
                         " all-reduces another part of the shared buffer (offset " +
                         std::to_string(other.offset.load()) + " bytes, " +
                         std::to_string(other.count.load()) + " elements; this rank: offset " +
                         std::to_string(job.offset_bytes) + ", " + std::to_string(job.count) + ")");
    }
  }

  auto at = [&](int r, std::size_t element) {
    return b.slot(r) + job.offset_bytes + element * elem;
  };
  // 2: reduce our chunk over every slot, in rank order, into our slot.
  const auto [begin, end] = chunk(job.count, elem, size, rank_);
  if (end > begin) {
    reduce_slots(b, rank_, job.offset_bytes + begin * elem, end - begin, job.dtype, job.op,
                 at(rank_, begin), at(rank_, begin), job.prefix);
  }
  barrier(b, ++epoch, job.prefix, deadline);  // 3: every chunk is reduced
  for (int r = 0; r < size; ++r) {
    if (r == rank_) continue;
    const auto [rb, re] = chunk(job.count, elem, size, r);
    if (re > rb) {
      b.read_slot(r, job.offset_bytes + rb * elem, at(rank_, rb), (re - rb) * elem, job.prefix);
    }
  }
  barrier(b, ++epoch, job.prefix, deadline);  // 4: every peer has copied from our slot
}

WorkPtr ShmCollectives::submit(std::shared_ptr<Job> job, ShmBuffer* buffer, const void* data) {
  job->buffer = buffer;
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].get() == buffer) job->epoch = &epochs_[i];
  }
  PW_ASSERT(job->epoch != nullptr, "a collective on a shared buffer this communicator did not add");
  job->offset_bytes =
      static_cast<std::size_t>(static_cast<const std::byte*>(data) - buffer->slot(rank_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { run_worker(); });
    queue_.push_back(job);
  }
  cv_.notify_all();
  return std::make_shared<ShmWork>(job, global_ranks_, rank_);
}

WorkPtr ShmCollectives::reduce_scatter(ShmBuffer* buffer, const BufferView& in,
                                       const BufferView& out, ReduceOp op, std::string prefix) {
  auto job = std::make_shared<Job>();
  job->count = in.count;
  job->piece = out.count;
  job->dtype = in.dtype;
  job->op = op;
  job->prefix = std::move(prefix);
  job->sharded = 1;
  job->out = out.data;
  return submit(std::move(job), buffer, in.data);
}

WorkPtr ShmCollectives::all_gather(ShmBuffer* buffer, const BufferView& in, const BufferView& out,
                                   std::string prefix) {
  auto job = std::make_shared<Job>();
  job->count = out.count;
  job->piece = in.count;
  job->dtype = in.dtype;
  job->prefix = std::move(prefix);
  job->sharded = 2;
  job->in = in.data;
  return submit(std::move(job), buffer, out.data);
}

void ShmCollectives::execute_sharded(Job& job) {
  ShmBuffer& b = *job.buffer;
  auto& h = b.header();
  const int size = b.size();
  const std::size_t piece_bytes = job.piece * dtype_size(job.dtype);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::uint64_t& epoch = *job.epoch;
  auto& me = rank_state(h, rank_);
  me.offset.store(job.offset_bytes, std::memory_order_relaxed);
  me.count.store(job.count, std::memory_order_relaxed);
  auto at = [&](int r, int piece) {
    return b.slot(r) + job.offset_bytes + static_cast<std::size_t>(piece) * piece_bytes;
  };
  if (job.sharded == 2 && job.in != at(rank_, rank_) && piece_bytes > 0) {
    std::memcpy(at(rank_, rank_), job.in, piece_bytes);
  }
  barrier(b, ++epoch, job.prefix, deadline);  // 1: every input is final
  for (int r = 0; r < size; ++r) {
    auto& other = rank_state(h, r);
    if (other.offset.load(std::memory_order_relaxed) != job.offset_bytes ||
        other.count.load(std::memory_order_relaxed) != job.count) {
      throw BackendError(job.prefix + ": rank " +
                         std::to_string(global_ranks_[static_cast<std::size_t>(r)]) +
                         " works on another part of the shared buffer");
    }
  }
  if (job.sharded == 1 && job.piece > 0) {
    reduce_slots(b, rank_, job.offset_bytes + static_cast<std::size_t>(rank_) * piece_bytes,
                 job.piece, job.dtype, job.op, at(rank_, rank_), job.out, job.prefix);
  } else if (job.sharded == 2 && piece_bytes > 0) {
    for (int r = 0; r < size; ++r) {
      if (r != rank_) {
        b.read_slot(r, job.offset_bytes + static_cast<std::size_t>(r) * piece_bytes, at(rank_, r),
                    piece_bytes, job.prefix);
      }
    }
  }
  barrier(b, ++epoch, job.prefix, deadline);  // 2: every peer has read what it needs of our slot
}

}  // namespace pipewright::exec::detail
