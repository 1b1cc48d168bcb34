// Shared-memory point-to-point: see Note [Shared-memory point-to-point] in shm_p2p.hpp.
#include "gloo/shm_p2p.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <thread>
#include <utility>

#include "comm/communicator_base.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

namespace {

using namespace shm_p2p_layout;  // NOLINT: kPage, kLine, the capacities

constexpr std::size_t kRecord = 64;  // a record's header; payloads start and end on a line
constexpr std::uint64_t kSkip = ~std::uint64_t{0};  // chunk of a record that skips to the start
// A waiting receiver, and a sender's pusher thread waiting for room, re-check their deadline, the
// peer and shutdown this often.
constexpr auto kPollSlice = std::chrono::milliseconds(100);
// A rank waiting for a send to complete, or for a receive while a peer's pusher waits for room
// towards it, drains its incoming rings this often.
constexpr auto kDrainSlice = std::chrono::milliseconds(1);

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

struct Record {
  std::int64_t tag;
  std::uint64_t total;   // bytes of the whole message
  std::uint64_t offset;  // of this chunk in the message
  std::uint64_t chunk;   // bytes of payload after this header, or kSkip
};
static_assert(sizeof(Record) <= kRecord);

}  // namespace

namespace {

// One message being received: into a posted buffer, or into heap memory when it arrived before
// its receive was posted.
struct Incoming {
  std::byte* dst = nullptr;  // the posted buffer, or heap.data()
  std::size_t capacity = 0;  // bytes of the posted buffer
  std::vector<std::byte> heap;
  std::uint64_t total = 0;
  std::uint64_t received = 0;
  bool started = false;    // its first record arrived (total is known)
  bool posted = false;     // a receive owns it
  bool abandoned = false;  // its receive's Work was destroyed first: consume, copy nothing

  [[nodiscard]] bool complete() const { return started && received == total; }
  void put(const std::byte* payload, std::uint64_t offset, std::uint64_t chunk) {
    // A message of another size than the posted buffer is consumed and dropped (an error on
    // wait()); an unexpected one is kept whole.
    if (chunk > 0 && !abandoned && (!posted || total == capacity)) {
      std::memcpy(dst + offset, payload, chunk);
    }
    received += chunk;
  }
};

using Key = std::pair<int, std::int64_t>;  // (peer, tag)

// The part of a message that did not fit into the ring when it was sent: a copy of its remaining
// bytes, which the channel's pusher thread moves into the ring as the receiver frees room.
struct Outgoing {
  std::int64_t tag = 0;
  std::uint64_t total = 0;  // bytes of the whole message
  std::uint64_t sent = 0;   // bytes of it in the ring so far (the copy starts at `base`)
  std::uint64_t base = 0;
  bool first = true;  // no record of it is in the ring yet
  std::vector<std::byte> rest;
  std::string prefix;  // of the send, for errors
  bool done = false;   // every byte is in the ring (guarded by the channel's send_mu)
  std::exception_ptr error;
};

}  // namespace

struct ShmP2P::State {
  struct Channel {
    int peer = -1;
    int side = 0;  // this rank's side of the link
    std::shared_ptr<ShmLink> link;
    // Sending (Note [Shared-memory point-to-point]): whoever holds send_mu with an empty backlog
    // writes into the ring; while the backlog is not empty only the pusher thread does.
    std::mutex send_mu;
    std::condition_variable send_cv;  // backlog changed, or an entry finished
    std::deque<std::shared_ptr<Outgoing>> backlog;
    std::exception_ptr send_failed;  // the pusher failed: later sends fail at once
    std::thread pusher;              // started with the first backlog
    std::atomic<bool> stopping{false};
    std::shared_ptr<Incoming> current;  // a message whose later chunks are still to come (mu)
  };

  int rank;
  std::vector<int> global_ranks;
  std::chrono::milliseconds timeout;
  std::map<int, std::unique_ptr<Channel>> channels;  // written only by add(), before any use
  std::mutex mu;                                     // receive state: below, and ring tails
  std::map<Key, std::deque<std::shared_ptr<Incoming>>> posted;
  std::map<Key, std::deque<std::shared_ptr<Incoming>>> unexpected;

  Channel& channel(int peer) {
    auto it = channels.find(peer);
    PW_ASSERT(it != channels.end(), "no shared-memory channel to rank " << peer);
    return *it->second;
  }

  // The peer's end of `ch` is gone: its communicator closed the link, or its process died.
  std::string peer_gone(const Channel& ch) const {
    auto& h = ch.link->header();
    const int other = 1 - ch.side;
    const int peer = global_ranks[static_cast<std::size_t>(ch.peer)];
    if (h.closed[other].load() != 0) {
      return "peer rank " + std::to_string(peer) + " left (it closed its communicator)";
    }
    const auto pid = static_cast<pid_t>(h.pid[other].load());
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) {
      return "peer rank " + std::to_string(peer) + " died (its process " + std::to_string(pid) +
             " is gone)";
    }
    return {};
  }

  // The receive a new message of (peer, tag) goes to: the oldest posted one, else a new
  // unexpected one. Requires mu.
  std::shared_ptr<Incoming> match(int peer, std::int64_t tag, std::uint64_t total) {
    std::shared_ptr<Incoming> in;
    auto it = posted.find({peer, tag});
    if (it != posted.end() && !it->second.empty()) {
      in = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) posted.erase(it);
    } else {
      in = std::make_shared<Incoming>();
      in->heap.resize(total);
      in->dst = in->heap.data();
      unexpected[{peer, tag}].push_back(in);
    }
    in->total = total;
    in->started = true;
    return in;
  }

  // Moves every record that has arrived from ch.peer into its receive. Requires mu.
  void drain(Channel& ch) {
    auto& ring = ch.link->ring(1 - ch.side);
    const std::byte* data = ch.link->data(1 - ch.side);
    const std::uint64_t cap = ch.link->capacity(1 - ch.side);
    std::uint64_t tail = ring.tail.load(std::memory_order_relaxed);
    const std::uint64_t first_tail = tail;
    std::uint64_t head = ring.head.load(std::memory_order_acquire);
    while (tail != head) {
      const std::uint64_t pos = tail % cap;
      Record r;
      std::memcpy(&r, data + pos, sizeof r);
      if (r.chunk == kSkip) {
        tail += cap - pos;
      } else {
        std::shared_ptr<Incoming> in = r.offset == 0 ? match(ch.peer, r.tag, r.total) : ch.current;
        PW_ASSERT(in != nullptr && r.offset + r.chunk <= r.total,
                  "shared-memory channel from rank "
                      << global_ranks[static_cast<std::size_t>(ch.peer)] << ": a stray chunk");
        in->put(data + pos + kRecord, r.offset, r.chunk);
        ch.current = in->complete() ? nullptr : in;
        tail += kRecord + round_up(r.chunk, kRecord);
      }
      if (tail == head) head = ring.head.load(std::memory_order_acquire);
    }
    if (tail == first_tail) return;
    ring.tail.store(tail, std::memory_order_seq_cst);
    ring.space_seq.fetch_add(1, std::memory_order_seq_cst);
    if (ring.producer_sleeping.load(std::memory_order_seq_cst) != 0) {
      futex_wake_all(&ring.space_seq);
    }
  }

  // Progress on every incoming ring (Note [Shared-memory point-to-point]). Requires mu.
  void drain_all() {
    for (auto& [peer, ch] : channels) drain(*ch);
  }

  // Whether some peer's pusher sleeps until this rank frees room in its ring.
  bool someone_waits_for_room() const {
    for (const auto& [peer, ch] : channels) {
      if (ch->link->ring(1 - ch->side).producer_sleeping.load(std::memory_order_relaxed) != 0) {
        return true;
      }
    }
    return false;
  }

  // Publishes `head` to the consumer of `ring` and wakes it if it sleeps.
  static void publish(ShmLink::Ring& ring, std::uint64_t head) {
    ring.head.store(head, std::memory_order_seq_cst);
    ring.data_seq.fetch_add(1, std::memory_order_seq_cst);
    if (ring.consumers_sleeping.load(std::memory_order_seq_cst) != 0) {
      futex_wake_all(&ring.data_seq);
    }
  }

  // Writes as much of message `out` into the ring towards ch.peer as there is room for now,
  // without waiting (the caller is the ring's only writer). True when every byte is in.
  static bool write_some(Channel& ch, Outgoing& out, const std::byte* rest) {
    auto& ring = ch.link->ring(ch.side);
    std::byte* data = ch.link->data(ch.side);
    const std::uint64_t cap = ch.link->capacity(ch.side);
    std::uint64_t head = ring.head.load(std::memory_order_relaxed);
    const std::uint64_t head0 = head;
    while (out.first || out.sent < out.total) {
      const std::uint64_t tail = ring.tail.load(std::memory_order_acquire);
      const std::uint64_t room = cap - (head - tail);
      const std::uint64_t pos = head % cap;
      const std::uint64_t contiguous = cap - pos;
      const std::uint64_t need = kRecord + std::min<std::uint64_t>(out.total - out.sent, kRecord);
      if (contiguous < need && room >= contiguous) {
        const Record skip{0, 0, 0, kSkip};
        std::memcpy(data + pos, &skip, sizeof skip);
        head += contiguous;
        continue;
      }
      if (room < need) break;
      const std::uint64_t chunk =
          std::min(out.total - out.sent, std::min(room, contiguous) - kRecord);
      const Record r{out.tag, out.total, out.sent, chunk};
      std::memcpy(data + pos, &r, sizeof r);
      if (chunk > 0) std::memcpy(data + pos + kRecord, rest + (out.sent - out.base), chunk);
      head += kRecord + round_up(chunk, kRecord);
      out.sent += chunk;
      out.first = false;
    }
    if (head != head0) publish(ring, head);
    return !out.first && out.sent == out.total;
  }

  // Sends `buf` to ch.peer without ever waiting for the receiver: what fits into the ring now
  // goes in at once; the rest is copied into the channel's backlog, which the pusher thread moves
  // into the ring as the receiver frees room. Null when the whole message is in the ring, else
  // the backlog entry (its Work completes when its last byte is in). Throws PeerError.
  std::shared_ptr<Outgoing> send(Channel& ch, const BufferView& buf, std::int64_t tag,
                                 const std::string& prefix) {
    std::unique_lock<std::mutex> lock(ch.send_mu);
    if (ch.send_failed) std::rethrow_exception(ch.send_failed);
    if (auto gone = peer_gone(ch); !gone.empty()) throw PeerError(prefix + ": " + gone);
    const auto* src = static_cast<const std::byte*>(buf.data);
    auto out = std::make_shared<Outgoing>();
    out->tag = tag;
    out->total = buf.bytes();
    out->prefix = prefix;
    if (ch.backlog.empty() && write_some(ch, *out, src)) return nullptr;
    out->base = out->sent;
    out->rest.assign(src + out->sent, src + out->total);
    ch.backlog.push_back(out);
    if (!ch.pusher.joinable()) ch.pusher = std::thread([this, &ch] { push(ch); });
    ch.send_cv.notify_all();
    return out;
  }

  // The pusher thread of `ch`: moves its backlog into the ring, oldest first, sleeping on the
  // ring's futex while it is full. An entry that sees no room freed for the timeout, or whose
  // peer left, fails, and so does every later send to that peer.
  void push(Channel& ch) {
    std::unique_lock<std::mutex> lock(ch.send_mu);
    for (;;) {
      ch.send_cv.wait(lock, [&] { return ch.stopping.load() || !ch.backlog.empty(); });
      if (ch.stopping.load()) return;
      std::shared_ptr<Outgoing> out = ch.backlog.front();
      lock.unlock();
      std::exception_ptr error;
      try {
        auto deadline = WorkClock::now() + timeout;
        while (!write_some(ch, *out, out->rest.data())) {
          if (wait_for_room(ch, deadline, out->prefix)) deadline = WorkClock::now() + timeout;
          if (ch.stopping.load()) return;
        }
      } catch (const Error&) {
        error = std::current_exception();
      }
      lock.lock();
      if (error) {
        ch.send_failed = error;
        for (auto& o : ch.backlog) o->error = error;
        ch.backlog.clear();
      } else {
        out->done = true;
        out->rest = {};
        ch.backlog.pop_front();
      }
      ch.send_cv.notify_all();
    }
  }

  // Sleeps until the receiver of ch's ring frees room, at most a poll slice. True when it did;
  // throws PeerError when the peer left, TimeoutError past `deadline`.
  bool wait_for_room(Channel& ch, WorkClock::time_point deadline, const std::string& prefix) {
    auto& ring = ch.link->ring(ch.side);
    const std::uint64_t tail = ring.tail.load(std::memory_order_seq_cst);
    const std::uint32_t seen = ring.space_seq.load(std::memory_order_seq_cst);
    ring.producer_sleeping.store(1, std::memory_order_seq_cst);
    if (ring.tail.load(std::memory_order_seq_cst) == tail) {
      futex_wait(&ring.space_seq, seen, kPollSlice);
    }
    ring.producer_sleeping.store(0, std::memory_order_seq_cst);
    if (ring.tail.load(std::memory_order_acquire) != tail) return true;
    if (auto gone = peer_gone(ch); !gone.empty()) throw PeerError(prefix + ": " + gone);
    if (WorkClock::now() >= deadline) {
      throw TimeoutError(prefix + ": " + timed_out_after(timeout) + " waiting for rank " +
                         std::to_string(global_ranks[static_cast<std::size_t>(ch.peer)]) +
                         " to make room in its shared-memory ring of " +
                         std::to_string(ch.link->capacity(ch.side)) + " bytes");
    }
    return false;
  }
};

namespace {

// A receive (Note [Work completion]): test() drains the channel and looks at its message, pause()
// sleeps on the ring's futex until the peer publishes more or the slice ends.
class ShmRecvWork final : public BasicWork {
 public:
  ShmRecvWork(std::shared_ptr<ShmP2P::State> state, ShmP2P::State::Channel* ch,
              std::shared_ptr<Incoming> in, const BufferView& buf, std::int64_t tag,
              std::string prefix)
      : BasicWork(std::move(prefix)),
        state_(std::move(state)),
        ch_(ch),
        in_(std::move(in)),
        buf_(buf),
        tag_(tag) {}

 private:
  std::unique_lock<std::mutex> lock() override { return std::unique_lock<std::mutex>(state_->mu); }

  bool test() override {
    state_->drain_all();
    if (in_->complete()) {
      const int peer = state_->global_ranks[static_cast<std::size_t>(ch_->peer)];
      if (in_->total != buf_.bytes()) {
        throw BackendError(prefix() + ": a message of " + std::to_string(in_->total) +
                           " bytes from rank " + std::to_string(peer) + " for a buffer of " +
                           std::to_string(buf_.bytes()) + " bytes");
      }
      if (!in_->posted && in_->total > 0) std::memcpy(buf_.data, in_->heap.data(), in_->total);
      return true;
    }
    if (auto gone = state_->peer_gone(*ch_); !gone.empty()) throw PeerError(prefix() + ": " + gone);
    return false;
  }

  std::string waiting_for() const override {
    return "rank " + std::to_string(state_->global_ranks[static_cast<std::size_t>(ch_->peer)]);
  }

  void pause(WaitState& wait, std::unique_lock<std::mutex>& lock) override {
    auto& ring = ch_->link->ring(1 - ch_->side);
    const std::uint32_t seen = ring.data_seq.load(std::memory_order_seq_cst);
    ring.consumers_sleeping.fetch_add(1, std::memory_order_seq_cst);
    if (ring.head.load(std::memory_order_seq_cst) == ring.tail.load(std::memory_order_relaxed)) {
      lock.unlock();
      const auto left = wait.deadline - now();
      // A peer whose pusher waits for room in another ring towards us is drained every slice.
      const auto slice = state_->someone_waits_for_room() ? kDrainSlice : kPollSlice;
      futex_wait(&ring.data_seq, seen,
                 std::min<std::chrono::nanoseconds>(left, std::chrono::nanoseconds(slice)));
      lock.lock();
    }
    ring.consumers_sleeping.fetch_sub(1, std::memory_order_seq_cst);
  }

  std::shared_ptr<ShmP2P::State> state_;
  ShmP2P::State::Channel* ch_;  // owned by state_
  std::shared_ptr<Incoming> in_;
  BufferView buf_;
  std::int64_t tag_;
  [[nodiscard]] std::int64_t tag_of() const noexcept { return tag_; }

 public:
  // A receive dropped before it completed must not write into its buffer later: a posted one
  // that nothing has arrived for leaves the queue (the message goes to the next receive of its
  // tag), one that is arriving is consumed and dropped.
  ~ShmRecvWork() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!in_->posted || in_->complete()) return;
    in_->abandoned = true;
    if (in_->started) return;
    auto it = state_->posted.find({ch_->peer, tag_of()});
    if (it == state_->posted.end()) return;
    auto& queue = it->second;
    queue.erase(std::remove(queue.begin(), queue.end(), in_), queue.end());
    if (queue.empty()) state_->posted.erase(it);
  }
};

// A send whose message did not fit into the ring at once: complete when the pusher has moved its
// last byte in; fails with the pusher's error.
class ShmSendWork final : public BasicWork {
 public:
  ShmSendWork(std::shared_ptr<ShmP2P::State> state, ShmP2P::State::Channel* ch,
              std::shared_ptr<Outgoing> out, std::string prefix)
      : BasicWork(std::move(prefix)), state_(std::move(state)), ch_(ch), out_(std::move(out)) {}

 private:
  std::unique_lock<std::mutex> lock() override {
    return std::unique_lock<std::mutex>(ch_->send_mu);
  }
  bool test() override {
    if (out_->error) std::rethrow_exception(out_->error);
    return out_->done;
  }
  std::string waiting_for() const override {
    return "rank " + std::to_string(state_->global_ranks[static_cast<std::size_t>(ch_->peer)]) +
           " to make room in its shared-memory ring of " +
           std::to_string(ch_->link->capacity(ch_->side)) + " bytes";
  }
  // While it waits, this rank drains every incoming ring: its peers may be waiting on their
  // sends to it too (Conformance.LargeMessagesBothWaysBeforeAnyReceive).
  void pause(WaitState& wait, std::unique_lock<std::mutex>& lock) override {
    {
      std::lock_guard<std::mutex> receive_lock(state_->mu);  // order: send_mu, then mu
      state_->drain_all();
    }
    (void)ch_->send_cv.wait_until(lock, std::min(wait.deadline, now() + kDrainSlice));
  }

  std::shared_ptr<ShmP2P::State> state_;
  ShmP2P::State::Channel* ch_;  // owned by state_
  std::shared_ptr<Outgoing> out_;
};

}  // namespace

ShmP2P::ShmP2P(int rank, std::vector<int> global_ranks, std::chrono::milliseconds timeout)
    : state_(std::make_shared<State>()) {
  state_->rank = rank;
  state_->global_ranks = std::move(global_ranks);
  state_->timeout = timeout;
}

ShmP2P::~ShmP2P() {
  for (auto& [peer, ch] : state_->channels) {
    {
      std::lock_guard<std::mutex> lock(ch->send_mu);
      ch->stopping.store(true);
      for (auto& o : ch->backlog) {
        o->error = std::make_exception_ptr(
            BackendError(o->prefix + ": the communicator was destroyed before it was sent"));
      }
      ch->backlog.clear();
    }
    ch->send_cv.notify_all();
    if (ch->pusher.joinable()) ch->pusher.join();  // it sees `stopping` within kPollSlice
  }
  for (auto& [peer, ch] : state_->channels) {
    auto& h = ch->link->header();
    h.closed[ch->side].store(1, std::memory_order_seq_cst);
    for (int d = 0; d < 2; ++d) {
      auto& ring = ch->link->ring(d);
      ring.data_seq.fetch_add(1, std::memory_order_seq_cst);
      ring.space_seq.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(&ring.data_seq);
      futex_wake_all(&ring.space_seq);
    }
  }
}

void ShmP2P::add(int peer, std::shared_ptr<ShmLink> link) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto ch = std::make_unique<State::Channel>();
  ch->peer = peer;
  ch->side = state_->rank < peer ? 0 : 1;
  ch->link = std::move(link);
  ch->link->header().pid[ch->side].store(static_cast<std::int64_t>(::getpid()));
  state_->channels[peer] = std::move(ch);
}

bool ShmP2P::connected(int peer) const { return state_->channels.count(peer) != 0; }

std::vector<int> ShmP2P::peers() const {
  std::vector<int> out;
  for (const auto& [peer, ch] : state_->channels) out.push_back(peer);
  return out;
}

WorkPtr ShmP2P::send(const BufferView& buf, int dst, std::int64_t tag, const std::string& prefix) {
  auto& ch = state_->channel(dst);
  std::shared_ptr<Outgoing> out;
  try {
    out = state_->send(ch, buf, tag, prefix);
  } catch (const Error&) {
    return failed_work(std::current_exception());
  }
  if (!out) return completed_work();
  return std::make_shared<ShmSendWork>(state_, &ch, std::move(out), prefix);
}

WorkPtr ShmP2P::recv(const BufferView& buf, int src, std::int64_t tag, const std::string& prefix) {
  auto& ch = state_->channel(src);
  std::shared_ptr<Incoming> in;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->drain_all();
    auto it = state_->unexpected.find({src, tag});
    if (it != state_->unexpected.end() && !it->second.empty()) {
      in = std::move(it->second.front());  // arrived first: copied out when complete
      it->second.pop_front();
      if (it->second.empty()) state_->unexpected.erase(it);
    } else {
      in = std::make_shared<Incoming>();
      in->posted = true;
      in->dst = static_cast<std::byte*>(buf.data);
      in->capacity = buf.bytes();
      state_->posted[{src, tag}].push_back(in);
    }
  }
  return std::make_shared<ShmRecvWork>(state_, &ch, std::move(in), buf, tag, prefix);
}

}  // namespace pipewright::exec::detail
