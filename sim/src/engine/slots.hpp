// The engine's dependency slots: one 8-byte word per (step, fact, microbatch) holding the time
// the fact became true, a posted receive, or the ranks parked on it (Note [Engine] in engine.hpp),
// and the per-thread arena they live in (Note [Slot arena]). Part of the private event core.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace pipewright::sim {

// One dependency fact in 8 bytes, zero meaning "unknown, nothing pending", so the array can come
// from zeroed memory (Note [Slot arena]):
//   value > 0: known, time = value - 1;  value == 0: unknown;
//   value < 0, kWaiters bit clear: unknown arrival slot with a receive posted at time -value - 1;
//   value < 0, kWaiters bit set: unknown, ranks are parked on it (the first is the low bits - 1;
//   the rest are chained through RankState::next_waiter).
// A slot never has a posted receive and parked ranks at once: receives are posted on "arrived"
// slots only with posted receives, and ranks park on "arrived" slots only with blocking ones.
using Slot = std::int64_t;
constexpr std::int64_t kWaiters = std::int64_t{1} << 62;

// Note [Slot arena]
// The slot array of a big plan is tens of MB and each simulate() touches every slot once or
// twice. Fresh anonymous memory costs a page fault and a kernel page clear per 4 KiB page (15%
// of the engine's time on the p=64, v=4, m=1024 benchmark); search and compare simulate many plans
// in a row. So each thread keeps its largest slot array and the next simulate() clears only the
// prefix it needs with memset, which is cheaper than the faults. Above kKeepBytes the memory goes
// back to the system after the run.
class SlotArray {
 public:
  SlotArray() = default;
  SlotArray(const SlotArray&) = delete;
  SlotArray& operator=(const SlotArray&) = delete;
  ~SlotArray() { release(); }
  // Zeroed memory for n slots; false if it cannot be had.
  bool allocate(std::size_t n) noexcept {
    release();
    const std::size_t need = std::max<std::size_t>(n * sizeof(Slot), 1);
    Cache& c = cache();
    if (c.data != nullptr && c.bytes >= need) {
      data_ = c.data;
      bytes_ = c.bytes;
      c.data = nullptr;
      c.bytes = 0;
      std::memset(data_, 0, need);
      return true;
    }
    void* p = ::mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    (void)::madvise(p, need, MADV_HUGEPAGE);  // a hint; ignored where THP is off
    data_ = static_cast<Slot*>(p);
    bytes_ = need;
    return true;
  }
  Slot* data() noexcept { return data_; }
  Slot& operator[](std::size_t i) noexcept { return data_[i]; }
  const Slot& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  static constexpr std::size_t kKeepBytes = std::size_t{256} << 20;
  struct Cache {
    Slot* data = nullptr;
    std::size_t bytes = 0;
    ~Cache() {
      if (data != nullptr) ::munmap(data, bytes);
    }
  };
  static Cache& cache() noexcept {
    thread_local Cache c;
    return c;
  }
  void release() noexcept {
    if (data_ == nullptr) return;
    Cache& c = cache();
    if (bytes_ <= kKeepBytes && bytes_ > c.bytes) {
      if (c.data != nullptr) ::munmap(c.data, c.bytes);
      c.data = data_;
      c.bytes = bytes_;
    } else {
      ::munmap(data_, bytes_);
    }
    data_ = nullptr;
    bytes_ = 0;
  }
  Slot* data_ = nullptr;
  std::size_t bytes_ = 0;
};

[[nodiscard]] inline bool slot_known(Slot v) noexcept { return v > 0; }
[[nodiscard]] inline std::int64_t slot_time(Slot v) noexcept { return v > 0 ? v - 1 : -1; }
// A posted receive's time, or -1.
[[nodiscard]] inline std::int64_t slot_posted(Slot v) noexcept {
  return v < 0 && ((-v) & kWaiters) == 0 ? -v - 1 : -1;
}

}  // namespace pipewright::sim
