// The simulator's event core: a binary heap of events ordered by (time, insertion sequence), so
// that equal-time events come out in the order they were pushed and every run is reproducible
// (STYLE.md rule 8). Private to sim/; the engine and the core-sharing model push into it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pipewright::sim {

// kResume: run the rank from its current action. kActivityDone: activity `id` of the
// core-sharing model (Note [Shared cores]) ends unless `version` is stale. kSendStart: rank
// `id`'s send stream may take its next queued SEND (shared cores or links only). kLinkDone:
// activity `id` of the link-sharing model (Note [Shared links]) ends unless `version` is stale.
// kDpStart: rank `id`'s data-parallel stream may take its next queued DDP bucket (shared links).
// kCpuLoad: a collective of rank `id` across nodes starts (version 1) or ends (0) loading its
// node's cores (Note [Compute beside a collective] in engine/engine.hpp).
enum class EventKind : std::uint8_t {
  kResume,
  kActivityDone,
  kSendStart,
  kLinkDone,
  kDpStart,
  kCpuLoad
};

struct Event {
  std::int64_t time_ns;
  std::int64_t seq;
  std::int32_t id;  // a rank, or an activity for kActivityDone
  EventKind kind;
  std::uint32_t version;
};

class EventQueue {
 public:
  void reserve(std::size_t n) { heap_.reserve(n); }
  [[nodiscard]] bool empty() const noexcept { return heap_.empty(); }
  void push(std::int64_t time_ns, std::int32_t id, EventKind kind, std::uint32_t version) {
    heap_.push_back(Event{time_ns, seq_++, id, kind, version});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }
  // Precondition: !empty().
  Event pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    const Event ev = heap_.back();
    heap_.pop_back();
    return ev;
  }

 private:
  // std heap functions build a max-heap; "later" puts the earliest (time, seq) on top.
  struct Later {
    bool operator()(const Event& a, const Event& b) const noexcept {
      return a.time_ns != b.time_ns ? a.time_ns > b.time_ns : a.seq > b.seq;
    }
  };
  std::vector<Event> heap_;
  std::int64_t seq_ = 0;
};

}  // namespace pipewright::sim
