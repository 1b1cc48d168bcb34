// The fake backend (see fake_communicator.hpp). One mutex and one condition variable guard the
// whole world: this backend is for tests, where clarity beats contention.
#include "pipewright/exec/fake_communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "comm/communicator_base.hpp"
#include "comm/reduce_kernels.hpp"
#include "comm/sharded_collectives.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace detail {

enum class RankStatus : std::uint8_t { kAlive, kKilled, kLeft };

struct P2PKey {
  int comm = 0;
  int src = 0;  // communicator-local
  int dst = 0;
  std::int64_t tag = 0;
  bool operator<(const P2PKey& o) const {
    return std::tie(comm, src, dst, tag) < std::tie(o.comm, o.src, o.dst, o.tag);
  }
};

struct Channel {
  std::int64_t next_send = 0;
  std::int64_t next_recv = 0;
  std::map<std::int64_t, std::vector<unsigned char>> messages;  // by send sequence number
};

enum class CollKind : std::uint8_t {
  kAllReduce,
  kReduce,
  kBroadcast,
  kBarrier,
  kReduceScatter,
  kAllGather
};

const char* to_string(CollKind kind) {
  switch (kind) {
    case CollKind::kAllReduce:
      return "all_reduce";
    case CollKind::kReduce:
      return "reduce";
    case CollKind::kBroadcast:
      return "broadcast";
    case CollKind::kBarrier:
      return "barrier";
    case CollKind::kReduceScatter:
      return "reduce_scatter";
    case CollKind::kAllGather:
      return "all_gather";
  }
  return "?";
}

struct CollArgs {
  CollKind kind = CollKind::kBarrier;
  std::size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  bool operator==(const CollArgs& o) const {
    return kind == o.kind && count == o.count && dtype == o.dtype && op == o.op && root == o.root;
  }
  std::string describe() const {
    std::string s = to_string(kind);
    if (kind != CollKind::kBarrier) {
      s += "(count=" + std::to_string(count) + ", dtype=" + exec::to_string(dtype);
      if (kind != CollKind::kBroadcast && kind != CollKind::kAllGather)
        s += ", op=" + std::to_string(static_cast<int>(op));
      if (root >= 0) s += ", root=" + std::to_string(root);
      s += ")";
    }
    return s;
  }
};

// One collective call, shared by the ranks of a communicator (matched by call order).
struct Slot {
  CollArgs args;
  int first_rank = 0;
  std::string mismatch;                          // non-empty: the ranks disagreed
  std::vector<std::vector<unsigned char>> data;  // per communicator-local rank
  std::vector<char> arrived;
  int finished = 0;  // ranks whose part is complete; the slot is erased when all are
  bool reduced = false;
  std::vector<unsigned char> result;
};

struct SplitRecord {
  std::vector<int> members;  // communicator-local ranks of the parent
  int comm_id = 0;
};

struct FakeState {
  explicit FakeState(int n)
      : world_size(n),
        status(static_cast<std::size_t>(n), RankStatus::kAlive),
        taken(static_cast<std::size_t>(n), 0),
        bytes(static_cast<std::size_t>(n), 0) {}

  const int world_size;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<RankStatus> status;  // by world rank
  std::vector<char> taken;
  std::vector<std::uint64_t> bytes;
  std::map<P2PKey, Channel> channels;
  std::map<std::pair<int, std::int64_t>, Slot> slots;  // (communicator, collective sequence)
  std::map<std::pair<int, std::int64_t>, SplitRecord> splits;
  int next_comm_id = 1;  // 0 is the world

  // "rank 2 died" / "rank 2 left (its communicator was destroyed)"; requires the lock.
  std::string departure(int world_rank) const {
    const auto s = status[static_cast<std::size_t>(world_rank)];
    return "rank " + std::to_string(world_rank) +
           (s == RankStatus::kKilled ? " died" : " left (its communicator was destroyed)");
  }
  bool gone(int world_rank) const {
    return status[static_cast<std::size_t>(world_rank)] != RankStatus::kAlive;
  }
};

}  // namespace detail

namespace {

using detail::CollArgs;
using detail::CollKind;
using detail::failed_work;
using detail::FakeState;
using detail::RankStatus;

// Base of the fake Work handles: tests under the world lock, pauses on its condition variable
// (Note [Work completion]).
class FakeWork : public detail::BasicWork {
 public:
  FakeWork(std::shared_ptr<FakeState> state, int self, std::string prefix)
      : BasicWork(std::move(prefix)), state_(std::move(state)), self_(self) {}

 protected:
  std::unique_lock<std::mutex> lock() final { return std::unique_lock<std::mutex>(state_->mu); }
  void pause(WaitState& wait, std::unique_lock<std::mutex>& lock) final {
    (void)state_->cv.wait_until(lock, wait.deadline);
  }

  void check_self_locked() const {
    if (state_->status[static_cast<std::size_t>(self_)] == RankStatus::kKilled) {
      throw BackendError(prefix() + ": this rank was killed");
    }
  }

  std::shared_ptr<FakeState> state_;
  int self_;  // world rank
};

class FakeRecvWork final : public FakeWork {
 public:
  FakeRecvWork(std::shared_ptr<FakeState> state, int self, std::string prefix, detail::P2PKey key,
               std::int64_t seq, const BufferView& buf, int src_world)
      : FakeWork(std::move(state), self, std::move(prefix)),
        key_(key),
        seq_(seq),
        buf_(buf),
        src_world_(src_world) {}

 private:
  bool test() override {
    check_self_locked();
    auto& channel = state_->channels[key_];
    auto it = channel.messages.find(seq_);
    if (it == channel.messages.end()) {
      if (state_->gone(src_world_)) {
        throw PeerError(prefix() + ": peer " + state_->departure(src_world_) +
                        " before sending the message");
      }
      return false;
    }
    const std::vector<unsigned char> payload = std::move(it->second);
    channel.messages.erase(it);
    if (payload.size() != buf_.bytes()) {
      throw BackendError(prefix() + ": size mismatch: expected " + std::to_string(buf_.bytes()) +
                         " bytes, rank " + std::to_string(src_world_) + " sent " +
                         std::to_string(payload.size()));
    }
    if (!payload.empty()) std::memcpy(buf_.data, payload.data(), payload.size());
    return true;
  }
  std::string waiting_for() const override { return "rank " + std::to_string(src_world_); }

  detail::P2PKey key_;
  std::int64_t seq_;
  BufferView buf_;
  int src_world_;
};

// The part of a collective that needs other ranks' data: all_reduce and barrier on every rank,
// reduce on the root, broadcast on non-roots.
class FakeCollectiveWork final : public FakeWork {
 public:
  FakeCollectiveWork(std::shared_ptr<FakeState> state, int self, std::string prefix,
                     std::pair<int, std::int64_t> slot_key, int local_rank,
                     std::vector<int> members, const BufferView& buf)
      : FakeWork(std::move(state), self, std::move(prefix)),
        slot_key_(slot_key),
        local_rank_(local_rank),
        members_(std::move(members)),
        buf_(buf) {}

 private:
  std::vector<int> needed_locked(const detail::Slot& slot) const {
    std::vector<int> needed;
    if (slot.args.kind == CollKind::kBroadcast) {
      needed.push_back(slot.args.root);
    } else {
      for (int r = 0; r < static_cast<int>(members_.size()); ++r) needed.push_back(r);
    }
    return needed;
  }

  std::vector<int> missing_locked(const detail::Slot& slot) const {
    std::vector<int> missing;
    for (int r : needed_locked(slot)) {
      if (!slot.arrived[static_cast<std::size_t>(r)]) missing.push_back(r);
    }
    return missing;
  }

  bool test() override {
    check_self_locked();
    auto it = state_->slots.find(slot_key_);
    PW_ASSERT(it != state_->slots.end(), "collective slot vanished before completion");
    detail::Slot& slot = it->second;
    if (!slot.mismatch.empty()) throw BackendError(prefix() + ": " + slot.mismatch);
    const std::vector<int> missing = missing_locked(slot);
    if (!missing.empty()) {
      for (int r : missing) {
        const int world = members_[static_cast<std::size_t>(r)];
        if (state_->gone(world)) {
          throw PeerError(prefix() + ": peer " + state_->departure(world) +
                          " before joining the collective");
        }
      }
      return false;
    }
    const CollKind kind = slot.args.kind;
    if (kind == CollKind::kReduceScatter) {
      // Piece local_rank_ of the reduction, 16-bit types summed in float32 and rounded once.
      const std::size_t n = buf_.count;
      const std::size_t offset = static_cast<std::size_t>(local_rank_) * buf_.bytes();
      std::vector<const void*> pieces;
      for (const auto& d : slot.data) pieces.push_back(d.data() + offset);
      if (n > 0) detail::reduce_pieces(buf_.data, pieces, n, slot.args.dtype, slot.args.op);
    } else if (kind == CollKind::kAllGather) {
      auto* out = static_cast<unsigned char*>(buf_.data);
      for (const auto& d : slot.data) {
        if (!d.empty()) std::memcpy(out, d.data(), d.size());
        out += d.size();
      }
    } else if (kind == CollKind::kAllReduce || kind == CollKind::kReduce) {
      if (!slot.reduced) {
        slot.result = slot.data[0];
        const DType dtype = slot.args.dtype;
        if (slot.args.op == ReduceOp::kSum &&
            (dtype == DType::kBFloat16 || dtype == DType::kFloat16)) {
          // Note [16-bit sums]: in float32, rounded once.
          std::vector<const void*> in;
          for (const auto& d : slot.data) in.push_back(d.data());
          detail::sum_half_rounded_once(slot.result.data(), in.data(), static_cast<int>(in.size()),
                                        slot.args.count, dtype);
        } else {
          for (std::size_t r = 1; r < slot.data.size(); ++r) {
            detail::reduce_into(slot.result.data(), slot.data[r].data(), slot.args.count,
                                slot.args.dtype, slot.args.op);
          }
        }
        slot.reduced = true;
      }
      if (!slot.result.empty()) std::memcpy(buf_.data, slot.result.data(), slot.result.size());
    } else if (kind == CollKind::kBroadcast) {
      const auto& src = slot.data[static_cast<std::size_t>(slot.args.root)];
      if (!src.empty()) std::memcpy(buf_.data, src.data(), src.size());
    }
    if (++slot.finished == static_cast<int>(members_.size())) state_->slots.erase(it);
    return true;
  }

  std::string waiting_for() const override {
    auto it = state_->slots.find(slot_key_);
    if (it == state_->slots.end()) return "nobody";
    std::vector<int> world;
    for (int r : missing_locked(it->second)) world.push_back(members_[static_cast<std::size_t>(r)]);
    return "ranks " + detail::rank_list(world) + " to join";
  }

  std::pair<int, std::int64_t> slot_key_;
  int local_rank_;
  std::vector<int> members_;  // world ranks by communicator-local rank
  BufferView buf_;
};

class FakeCommunicator final : public detail::CommunicatorBase {
 public:
  FakeCommunicator(std::shared_ptr<FakeState> state, int comm_id, std::vector<int> members,
                   int local_rank, bool is_world)
      : CommunicatorBase("fake", std::move(members), local_rank),
        state_(std::move(state)),
        comm_id_(comm_id),
        is_world_(is_world) {}

  ~FakeCommunicator() override {
    if (!is_world_) return;
    std::lock_guard<std::mutex> lock(state_->mu);
    auto& s = state_->status[static_cast<std::size_t>(self())];
    if (s == RankStatus::kAlive) s = RankStatus::kLeft;
    state_->cv.notify_all();
  }

  WorkPtr send(const BufferView& buf, int dst, std::int64_t tag, const OpContext& ctx) override {
    check_rank(dst, "send");
    const std::string prefix = p2p_prefix(true, dst, ctx);
    std::lock_guard<std::mutex> lock(state_->mu);
    if (killed_locked()) return failed_work<BackendError>(prefix + ": this rank was killed");
    if (state_->gone(global_rank(dst))) {
      return failed_work<PeerError>(prefix + ": peer " + state_->departure(global_rank(dst)));
    }
    auto& channel = state_->channels[detail::P2PKey{comm_id_, rank(), dst, tag}];
    const auto* bytes = static_cast<const unsigned char*>(buf.data);
    channel.messages[channel.next_send++] = std::vector<unsigned char>(bytes, bytes + buf.bytes());
    state_->bytes[static_cast<std::size_t>(self())] += buf.bytes();
    state_->cv.notify_all();
    return completed_work();
  }

  WorkPtr recv(const BufferView& buf, int src, std::int64_t tag, const OpContext& ctx) override {
    check_rank(src, "recv");
    const std::string prefix = p2p_prefix(false, src, ctx);
    std::lock_guard<std::mutex> lock(state_->mu);
    if (killed_locked()) return failed_work<BackendError>(prefix + ": this rank was killed");
    const detail::P2PKey key{comm_id_, src, rank(), tag};
    const std::int64_t seq = state_->channels[key].next_recv++;
    return std::make_shared<FakeRecvWork>(state_, self(), prefix, key, seq, buf, global_rank(src));
  }

  WorkPtr all_reduce(const BufferView& buf, ReduceOp op, const OpContext& ctx) override {
    return collective(CollArgs{CollKind::kAllReduce, buf.count, buf.dtype, op, -1}, buf, ctx);
  }
  WorkPtr reduce(const BufferView& buf, int root, ReduceOp op, const OpContext& ctx) override {
    check_rank(root, "reduce root");
    return collective(CollArgs{CollKind::kReduce, buf.count, buf.dtype, op, root}, buf, ctx);
  }
  WorkPtr broadcast(const BufferView& buf, int root, const OpContext& ctx) override {
    check_rank(root, "broadcast root");
    return collective(CollArgs{CollKind::kBroadcast, buf.count, buf.dtype, ReduceOp::kSum, root},
                      buf, ctx);
  }
  WorkPtr barrier(const OpContext& ctx) override {
    return collective(CollArgs{}, BufferView{}, ctx);
  }
  // The output view is what the Work fills; the input is deposited now (it may alias the output).
  WorkPtr reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp op,
                         const OpContext& ctx) override {
    detail::check_sharded(in, out, size(), false, op_prefix("reduce_scatter", ctx));
    return collective(CollArgs{CollKind::kReduceScatter, in.count, in.dtype, op, -1}, in, ctx,
                      &out);
  }
  WorkPtr all_gather(const BufferView& in, const BufferView& out, const OpContext& ctx) override {
    detail::check_sharded(in, out, size(), true, op_prefix("all_gather", ctx));
    return collective(CollArgs{CollKind::kAllGather, in.count, in.dtype, ReduceOp::kSum, -1}, in,
                      ctx, &out);
  }

  std::unique_ptr<Communicator> make_split(const SplitRequest& request) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto [it, inserted] =
        state_->splits.try_emplace(std::make_pair(comm_id_, request.seq), detail::SplitRecord{});
    if (inserted) {
      it->second.members = request.members;
      it->second.comm_id = state_->next_comm_id++;
    } else if (it->second.members != request.members) {
      throw BackendError("rank " + std::to_string(self()) + ": split() #" +
                         std::to_string(request.seq) + " with members " +
                         detail::rank_list(request.members) + " but another rank passed " +
                         detail::rank_list(it->second.members));
    }
    if (request.rank < 0) return nullptr;
    return std::make_unique<FakeCommunicator>(state_, it->second.comm_id, request.world,
                                              request.rank, false);
  }

 private:
  bool killed_locked() const {
    return state_->status[static_cast<std::size_t>(self())] == RankStatus::kKilled;
  }

  WorkPtr collective(const CollArgs& args, const BufferView& buf, const OpContext& ctx,
                     const BufferView* out = nullptr) {
    const std::string prefix = op_prefix(detail::to_string(args.kind), ctx);
    std::lock_guard<std::mutex> lock(state_->mu);
    if (killed_locked()) return failed_work<BackendError>(prefix + ": this rank was killed");
    const auto key = std::make_pair(comm_id_, coll_seq_++);
    auto [it, inserted] = state_->slots.try_emplace(key);
    detail::Slot& slot = it->second;
    if (inserted) {
      slot.args = args;
      slot.first_rank = rank();
      slot.data.resize(members().size());
      slot.arrived.assign(members().size(), 0);
    } else if (!(slot.args == args) && slot.mismatch.empty()) {
      slot.mismatch = "collective #" + std::to_string(key.second) + " mismatch: rank " +
                      std::to_string(global_rank(slot.first_rank)) + " called " +
                      slot.args.describe() + " but rank " + std::to_string(self()) + " called " +
                      args.describe();
    }
    const bool contributes = args.kind == CollKind::kAllReduce || args.kind == CollKind::kReduce ||
                             args.kind == CollKind::kReduceScatter ||
                             args.kind == CollKind::kAllGather ||
                             (args.kind == CollKind::kBroadcast && args.root == rank());
    if (contributes) {
      const auto* bytes = static_cast<const unsigned char*>(buf.data);
      slot.data[static_cast<std::size_t>(rank())].assign(bytes, bytes + buf.bytes());
      state_->bytes[static_cast<std::size_t>(self())] += buf.bytes();
    }
    slot.arrived[static_cast<std::size_t>(rank())] = 1;
    state_->cv.notify_all();
    if (!slot.mismatch.empty()) return failed_work<BackendError>(prefix + ": " + slot.mismatch);
    // Ranks that need nothing from others are done as soon as their data is deposited.
    const bool needs_others = args.kind == CollKind::kAllReduce || out != nullptr ||
                              args.kind == CollKind::kBarrier ||
                              (args.kind == CollKind::kReduce && args.root == rank()) ||
                              (args.kind == CollKind::kBroadcast && args.root != rank());
    if (!needs_others) {
      if (++slot.finished == size()) state_->slots.erase(it);
      return completed_work();
    }
    return std::make_shared<FakeCollectiveWork>(state_, self(), prefix, key, rank(), members(),
                                                out != nullptr ? *out : buf);
  }

  std::shared_ptr<FakeState> state_;
  int comm_id_;
  bool is_world_;
  std::int64_t coll_seq_ = 0;
};

}  // namespace

FakeWorld::FakeWorld(int world_size) {
  PW_CHECK(world_size >= 1, ConfigError, "FakeWorld: world size must be >= 1, got " << world_size);
  state_ = std::make_shared<FakeState>(world_size);
}

FakeWorld::~FakeWorld() = default;

int FakeWorld::size() const noexcept { return state_->world_size; }

std::unique_ptr<Communicator> FakeWorld::communicator(int rank) {
  PW_CHECK(rank >= 0 && rank < size(), ConfigError,
           "FakeWorld: rank " << rank << " out of range [0, " << size() << ")");
  std::vector<int> members(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) members[static_cast<std::size_t>(r)] = r;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    PW_CHECK(!state_->taken[static_cast<std::size_t>(rank)], ConfigError,
             "FakeWorld: the communicator of rank " << rank << " was already taken");
    state_->taken[static_cast<std::size_t>(rank)] = 1;
  }
  return std::make_unique<FakeCommunicator>(state_, 0, std::move(members), rank, true);
}

std::vector<std::unique_ptr<Communicator>> FakeWorld::communicators() {
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size(); ++r) out.push_back(communicator(r));
  return out;
}

void FakeWorld::kill(int rank) {
  PW_CHECK(rank >= 0 && rank < size(), ConfigError,
           "FakeWorld: rank " << rank << " out of range [0, " << size() << ")");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->status[static_cast<std::size_t>(rank)] = RankStatus::kKilled;
  state_->cv.notify_all();
}

bool FakeWorld::is_alive(int rank) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return rank >= 0 && rank < size() &&
         state_->status[static_cast<std::size_t>(rank)] == RankStatus::kAlive;
}

std::uint64_t FakeWorld::bytes_sent(int rank) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  PW_CHECK(rank >= 0 && rank < size(), ConfigError,
           "FakeWorld: rank " << rank << " out of range [0, " << size() << ")");
  return state_->bytes[static_cast<std::size_t>(rank)];
}

}  // namespace pipewright::exec
