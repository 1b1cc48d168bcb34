// The Gloo backend: a Communicator over c10d::ProcessGroupGloo from Debian's libtorch. Buffers
// are wrapped with torch::from_blob (no copies). This is the only translation unit that includes
// ProcessGroupGloo.
//
// Note [Gloo p2p completion]: c10d's Gloo SendWork/RecvWork only learn of completion inside
// wait() (isCompleted() stays false until then), and each wait() consumes one completion of the
// underlying gloo buffer, so it must be called exactly once. GlooP2PWork therefore calls the
// c10d wait directly from wait() (its BasicWork::pause), and only if someone polls
// is_completed() first does it start a waiter thread (BasicWork::start_progress) that performs
// that single wait and publishes the outcome.
//
// Note [Leaking a failed process group]: ~ProcessGroupGloo drains its work queue and joins its
// threads; after a peer died or an operation timed out, that can block until gloo's own
// timeout. A communicator that has seen a failure therefore leaks its process group instead of
// destroying it: the process is about to report the error and exit, and must not hang.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "comm/backends.hpp"
#include "comm/communicator_base.hpp"
#include "comm/sharded_collectives.hpp"
#include "compat/torch_compat.hpp"
#include "gloo/gloo_errors.hpp"
#include "gloo/gloo_store.hpp"
#include "gloo/shm_collectives.hpp"
#include "gloo/shm_p2p.hpp"
#include "gloo/tcp_ring.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

namespace {

at::ScalarType scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return at::kFloat;
    case DType::kFloat64:
      return at::kDouble;
    case DType::kFloat16:
      return at::kHalf;
    case DType::kBFloat16:
      return at::kBFloat16;
    case DType::kInt64:
      return at::kLong;
    case DType::kInt32:
      return at::kInt;
    case DType::kUInt8:
      return at::kByte;
  }
  return at::kFloat;
}

c10d::ReduceOp reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  return c10d::ReduceOp::SUM;
}

using Flag = std::shared_ptr<std::atomic<bool>>;

// A collective (c10d AsyncWork): isCompleted() and repeated wait() are supported by c10d, so
// test() asks isCompleted() and pause() blocks in c10d's wait until the deadline.
class GlooCollectiveWork final : public BasicWork {
 public:
  GlooCollectiveWork(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> tensors,
                     Blame blame, Flag failed)
      : BasicWork(blame.prefix),
        work_(std::move(work)),
        tensors_(std::move(tensors)),
        blame_(std::move(blame)),
        failed_(std::move(failed)) {}

 private:
  bool test() override {
    if (!work_->isCompleted()) return false;
    c10d_wait(std::chrono::milliseconds(1));  // rethrows a stored error
    return true;
  }
  std::string waiting_for() const override { return blame_.peers; }
  void pause(WaitState& wait, std::unique_lock<std::mutex>& /*lock*/) override {
    c10d_wait(std::chrono::ceil<std::chrono::milliseconds>(wait.deadline - now()), wait.timeout);
  }

  // c10d treats 0 as "no timeout"; ours is "check once".
  void c10d_wait(std::chrono::milliseconds t, std::chrono::milliseconds reported) {
    try {
      work_->wait(std::max(t, std::chrono::milliseconds(1)));
    } catch (const std::exception& e) {
      *failed_ = true;
      rethrow_mapped(e, blame_, reported);
    }
  }
  void c10d_wait(std::chrono::milliseconds t) { c10d_wait(t, t); }

  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> tensors_;  // keep the views alive while gloo uses them
  Blame blame_;
  Flag failed_;
};

// Point-to-point: see Note [Gloo p2p completion]. `shared_` is what the waiter thread (started
// by is_completed()) publishes; every failure is final.
class GlooP2PWork final : public BasicWork {
 public:
  GlooP2PWork(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> tensors, Blame blame,
              Flag failed, std::chrono::milliseconds transport_timeout)
      : BasicWork(blame.prefix),
        shared_(std::make_shared<Shared>()),
        blame_(std::move(blame)),
        failed_(std::move(failed)),
        transport_timeout_(transport_timeout) {
    shared_->work = std::move(work);
    shared_->tensors = std::move(tensors);
  }

 private:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool waiter_started = false;
    bool done = false;
    std::exception_ptr error;  // mapped
    c10::intrusive_ptr<c10d::Work> work;
    std::vector<at::Tensor> tensors;
  };

  std::unique_lock<std::mutex> lock() override { return std::unique_lock<std::mutex>(shared_->mu); }

  bool test() override {
    if (!shared_->done) return false;
    if (shared_->error) std::rethrow_exception(shared_->error);
    return true;
  }

  std::string waiting_for() const override { return blame_.peers; }

  void pause(WaitState& wait, std::unique_lock<std::mutex>& lock) override {
    if (shared_->waiter_started) {
      (void)shared_->cv.wait_until(lock, wait.deadline);
      return;
    }
    // Nobody polled: wait in this thread (the common, cheap path). The lock is held so that a
    // concurrent is_completed() cannot start a second wait.
    // Rounded up: c10d counts whole milliseconds, and a truncated wait could give up (finally)
    // a fraction of a millisecond before the caller's deadline.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wait.deadline - now());
    try {
      shared_->work->wait(std::max(left, std::chrono::milliseconds(1)));
    } catch (const std::exception& e) {
      // A c10d-level wait timeout leaves the gloo buffer pending and c10d lets us wait again
      // only at the risk of consuming a later completion: treat every failure as final.
      shared_->error = mapped_error(e, blame_, wait.timeout);
      *failed_ = true;
    }
    shared_->done = true;
  }

  void start_progress() override {
    if (shared_->waiter_started) return;
    shared_->waiter_started = true;
    std::thread([shared = shared_, blame = blame_, failed = failed_, t = transport_timeout_] {
      std::exception_ptr error;
      try {
        shared->work->wait(t);
      } catch (const std::exception& e) {
        error = mapped_error(e, blame, t);
        *failed = true;
      } catch (...) {
        error = std::current_exception();
        *failed = true;
      }
      std::lock_guard<std::mutex> guard(shared->mu);
      shared->done = true;
      shared->error = error;
      shared->cv.notify_all();
    }).detach();
  }

  std::shared_ptr<Shared> shared_;
  Blame blame_;
  Flag failed_;
  std::chrono::milliseconds transport_timeout_;
};

// Note [TCP ring collectives]: the ring's messages go through a process group of its own (its
// connections, its tags), so they never meet the pipeline's point-to-point messages. Each
// transfer is waited exactly once (Note [Gloo p2p completion]) by the ring's worker thread.
class GlooRingTransport final : public RingTransport {
 public:
  GlooRingTransport(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, std::vector<int> members,
                    Flag failed, std::chrono::milliseconds timeout)
      : pg_(std::move(pg)),
        members_(std::move(members)),
        failed_(std::move(failed)),
        timeout_(timeout) {}
  ~GlooRingTransport() override {
    if (*failed_) (void)pg_.release();  // Note [Leaking a failed process group]
  }
  std::unique_ptr<RingTransfer> send(const void* data, std::size_t bytes, int peer,
                                     std::uint32_t tag, const std::string& prefix) override {
    return post(true, const_cast<void*>(data), bytes, peer, tag, prefix);
  }
  std::unique_ptr<RingTransfer> recv(void* data, std::size_t bytes, int peer, std::uint32_t tag,
                                     const std::string& prefix) override {
    return post(false, data, bytes, peer, tag, prefix);
  }

 private:
  struct Transfer final : RingTransfer {
    c10::intrusive_ptr<c10d::Work> work;
    std::vector<at::Tensor> tensors;
    Blame blame;
    Flag failed;
    std::chrono::milliseconds timeout{0};
    void wait() override {
      try {
        work->wait(timeout);
      } catch (const std::exception& e) {
        *failed = true;
        rethrow_mapped(e, blame, timeout);
      }
    }
  };
  std::unique_ptr<RingTransfer> post(bool is_send, void* data, std::size_t bytes, int peer,
                                     std::uint32_t tag, const std::string& prefix) {
    auto t = std::make_unique<Transfer>();
    t->tensors = {torch::from_blob(data, {static_cast<std::int64_t>(bytes)}, at::kByte)};
    t->blame = Blame{prefix + (is_send ? ", ring send to rank " : ", ring recv from rank ") +
                         std::to_string(members_[static_cast<std::size_t>(peer)]),
                     "rank " + std::to_string(members_[static_cast<std::size_t>(peer)])};
    t->failed = failed_;
    t->timeout = timeout_;
    try {
      t->work = is_send ? pg_->send(t->tensors, peer, static_cast<int>(tag))
                        : pg_->recv(t->tensors, peer, static_cast<int>(tag));
    } catch (const std::exception& e) {
      *failed_ = true;
      rethrow_mapped(e, t->blame, timeout_);
    }
    return t;
  }
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::vector<int> members_;  // world ranks, for messages
  Flag failed_;
  std::chrono::milliseconds timeout_;
};

class GlooCommunicator final : public CommunicatorBase {
 public:
  // `members` are world ranks by local rank; `name` is the deterministic store prefix.
  GlooCommunicator(c10::intrusive_ptr<c10d::Store> root_store, std::string name,
                   std::vector<int> members, int rank, const CommOptions& options,
                   std::shared_ptr<::gloo::transport::Device> device, std::string shm_prefix)
      : CommunicatorBase("gloo", std::move(members), rank),
        root_store_(std::move(root_store)),
        name_(std::move(name)),
        options_(options),
        failed_(std::make_shared<std::atomic<bool>>(false)),
        device_(std::move(device)),
        shm_prefix_(std::move(shm_prefix)) {
    auto pg_options = c10d::ProcessGroupGloo::Options::create(options_.timeout);
    pg_options->devices.push_back(device_);
    pg_options->threads = 2;
    auto store = c10::make_intrusive<c10d::PrefixStore>(name_, root_store_);
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size(), pg_options);
    } catch (const std::exception& e) {
      const std::string what = "rank " + std::to_string(self()) + ": connecting the Gloo group " +
                               name_ + " of ranks " + rank_list(this->members());
      if (dynamic_cast<const TimeoutError*>(&e) != nullptr || contains(e.what(), "imeout") ||
          contains(e.what(), "timed out")) {
        throw TimeoutError(what + " " + timed_out_after(options_.timeout) + ": " +
                           first_line(e.what()));
      }
      throw PeerError(what + " failed: " + first_line(e.what()));
    }
  }

  ~GlooCommunicator() override {
    if (*failed_) {
      // Note [Leaking a failed process group]
      (void)pg_.release();
      if (ring_) ring_->abandon();
    }
  }

  WorkPtr send(const BufferView& buf, int dst, std::int64_t tag, const OpContext& ctx) override {
    check_rank(dst, "send");
    if (p2p_ && p2p_->connected(dst) && !buf.device.is_cuda()) {
      return p2p_->send(buf, dst, tag, p2p_prefix(true, dst, ctx));
    }
    auto tensors = wrap(buf, "send");
    Blame blame{p2p_prefix(true, dst, ctx), "rank " + std::to_string(global_rank(dst))};
    auto work = guarded(blame, [&] { return pg_->send(tensors, dst, checked_tag(tag)); });
    return std::make_shared<GlooP2PWork>(std::move(work), std::move(tensors), std::move(blame),
                                         failed_, options_.timeout);
  }

  WorkPtr recv(const BufferView& buf, int src, std::int64_t tag, const OpContext& ctx) override {
    check_rank(src, "recv");
    if (p2p_ && p2p_->connected(src) && !buf.device.is_cuda()) {
      return p2p_->recv(buf, src, tag, p2p_prefix(false, src, ctx));
    }
    auto tensors = wrap(buf, "recv");
    Blame blame{p2p_prefix(false, src, ctx), "rank " + std::to_string(global_rank(src))};
    auto work = guarded(blame, [&] { return pg_->recv(tensors, src, checked_tag(tag)); });
    return std::make_shared<GlooP2PWork>(std::move(work), std::move(tensors), std::move(blame),
                                         failed_, options_.timeout);
  }

  WorkPtr all_reduce(const BufferView& buf, ReduceOp op, const OpContext& ctx) override {
    if (shm_ && !buf.device.is_cuda()) {
      if (ShmBuffer* b = shm_->find(buf.data, buf.bytes())) {
        return shm_->all_reduce(b, buf, op, op_prefix("all_reduce", ctx));
      }
    }
    auto tensors = wrap(buf, "all_reduce");
    c10d::AllreduceOptions opts;
    opts.reduceOp = reduce_op(op);
    if (buf.dtype == DType::kBFloat16 || buf.dtype == DType::kFloat16) {
      // Note [16-bit all-reduce over Gloo]: libtorch 1.13's Gloo has no bfloat16 kernels; a
      // 16-bit buffer goes over TCP widened to float32 (summed in float32, rounded once), and is
      // narrowed back when the Work completes. Replicas on one host sum 16-bit buffers in shared
      // memory above (allocate_collective_buffer), 16 bits on the "wire".
      at::Tensor narrow = tensors.front();
      std::vector<at::Tensor> wide{narrow.to(at::kFloat)};
      at::Tensor widened = wide.front();
      auto work = collective("all_reduce", ctx, std::move(wide),
                             [&](std::vector<at::Tensor>& t) { return pg_->allreduce(t, opts); });
      // Note [16-bit all-reduce over Gloo]: the widened float32 all-reduce of a 16-bit buffer;
      // when it completes, the sum is rounded back into the caller's buffer (once).
      return std::make_shared<FinishingWork>(
          std::move(work), [narrow, widened]() mutable { narrow.copy_(widened); });
    }
    return collective("all_reduce", ctx, std::move(tensors),
                      [&](std::vector<at::Tensor>& t) { return pg_->allreduce(t, opts); });
  }

  WorkPtr reduce(const BufferView& buf, int root, ReduceOp op, const OpContext& ctx) override {
    check_rank(root, "reduce root");
    auto tensors = wrap(buf, "reduce");
    c10d::ReduceOptions opts;
    opts.reduceOp = reduce_op(op);
    opts.rootRank = root;
    return collective("reduce", ctx, std::move(tensors),
                      [&](std::vector<at::Tensor>& t) { return pg_->reduce(t, opts); });
  }

  WorkPtr broadcast(const BufferView& buf, int root, const OpContext& ctx) override {
    check_rank(root, "broadcast root");
    auto tensors = wrap(buf, "broadcast");
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return collective("broadcast", ctx, std::move(tensors),
                      [&](std::vector<at::Tensor>& t) { return pg_->broadcast(t, opts); });
  }

  WorkPtr barrier(const OpContext& ctx) override {
    return collective("barrier", ctx, {}, [&](std::vector<at::Tensor>&) { return pg_->barrier(); });
  }

  // Note [Gloo sharded collectives] (sharded_collectives.hpp): shared memory among the ranks of
  // one host, else the ring over TCP (Note [TCP ring collectives], tcp_ring.hpp).
  WorkPtr reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp op,
                         const OpContext& ctx) override {
    const std::string prefix = op_prefix("reduce_scatter", ctx);
    check_sharded(in, out, size(), false, prefix);
    if (ShmBuffer* b = shm_buffer(in)) return shm_->reduce_scatter(b, in, out, op, prefix);
    (void)wrap(in, "reduce_scatter");  // rejects device buffers
    return ring(ctx, "reduce_scatter").reduce_scatter(in, out, op, prefix);
  }

  WorkPtr all_gather(const BufferView& in, const BufferView& out, const OpContext& ctx) override {
    check_sharded(in, out, size(), true, op_prefix("all_gather", ctx));
    if (ShmBuffer* b = shm_buffer(out))
      return shm_->all_gather(b, in, out, op_prefix("all_gather", ctx));
    (void)wrap(in, "all_gather");  // rejects device buffers
    return ring(ctx, "all_gather").all_gather(in, out, op_prefix("all_gather", ctx));
  }

  // Note [Shared-memory all-reduce]. Every member publishes its host identity; when all match,
  // rank 0 creates the shared object and names it, the others map it and report back, and only
  // if every member succeeded is it used (else every member falls back to heap memory, so the
  // group agrees on which path each all-reduce takes). Rank 0 unlinks the name once all have
  // mapped it, so nothing is left in /dev/shm even if the job is killed.
  std::shared_ptr<void> allocate_collective_buffer(std::size_t bytes) override {
    if (!options_.shm_collectives || size() == 1) {
      return Communicator::allocate_collective_buffer(bytes);
    }
    auto buffer = allocate_shm_buffer(handshake("shm/" + std::to_string(alloc_seq_) + "/"), rank(),
                                      size(), alloc_seq_, bytes, shm_prefix_);
    ++alloc_seq_;
    if (!buffer) return Communicator::allocate_collective_buffer(bytes);
    if (!shm_) shm_ = std::make_unique<ShmCollectives>(rank(), members(), options_.timeout);
    shm_->add(buffer);
    void* data = buffer->slot(rank());
    return std::shared_ptr<void>(std::move(buffer), data);  // keeps the mapping alive
  }

  // Note [Shared-memory point-to-point] (shm_p2p.hpp): the pairs decide through the store.
  void connect_p2p(const std::vector<P2PLink>& links) override {
    std::vector<P2PLink> todo;
    for (const auto& l : links) {
      check_rank(l.peer, "connect_p2p peer");
      if (l.peer != rank() && p2p_decided_.insert(l.peer).second) todo.push_back(l);
    }
    if (todo.empty()) return;
    int current = -1;  // the peer being connected, for the error message
    try {
      for (auto& r : connect_shm_links(todo, rank(), members(), options_.shm_p2p, handshake(""),
                                       shm_prefix_, &current)) {
        p2p_transports_.push_back(r.how);
        if (r.link) p2p().add(r.peer, std::move(r.link));
      }
    } catch (const std::exception& e) {
      Blame blame{"rank " + std::to_string(self()) +
                      ": connecting shared-memory point-to-point with rank " +
                      std::to_string(global_rank(current)),
                  "rank " + std::to_string(global_rank(current))};
      rethrow_mapped(e, blame, options_.timeout);
    }
  }

  std::vector<int> shared_memory_peers() const override {
    return p2p_ ? p2p_->peers() : std::vector<int>{};
  }

  std::vector<std::string> p2p_transports() const override { return p2p_transports_; }
  std::size_t all_reduce_element_bytes(const BufferView& buf) const override {
    const bool half = buf.dtype == DType::kBFloat16 || buf.dtype == DType::kFloat16;
    const bool in_shm = shm_ && shm_->find(buf.data, buf.bytes()) != nullptr;
    // Note [16-bit all-reduce over Gloo]: over TCP they go widened to float32.
    return dtype_size(half && !buf.device.is_cuda() && !in_shm ? DType::kFloat32 : buf.dtype);
  }

  std::unique_ptr<Communicator> make_split(const SplitRequest& request) override {
    // Every rank numbers its splits identically, so the prefix is the same on all members.
    const std::string child = name_ + "/" + std::to_string(request.seq);
    if (request.rank < 0) return nullptr;
    return std::make_unique<GlooCommunicator>(root_store_, child, request.world, request.rank,
                                              options_, device_, shm_prefix_);
  }

 private:
  static int checked_tag(std::int64_t tag) {
    PW_ASSERT(tag >= 0 && tag <= std::numeric_limits<std::int32_t>::max(),
              "Gloo point-to-point tags must be in [0, 2^31), got " << tag);
    return static_cast<int>(tag);
  }

  ShmBuffer* shm_buffer(const BufferView& v) const {
    return shm_ && !v.device.is_cuda() ? shm_->find(v.data, v.bytes()) : nullptr;
  }
  at::Tensor bytes_of(const BufferView& buf, const char* op) const {
    return wrap(BufferView{buf.data, buf.bytes(), DType::kUInt8, buf.device}, op).front();
  }

  std::vector<at::Tensor> wrap(const BufferView& buf, const char* op) const {
    if (buf.device.is_cuda()) {
      throw BackendError("rank " + std::to_string(self()) + ": " + op +
                         ": the Gloo backend works on CPU buffers only (use --backend nccl)");
    }
    auto tensor = torch::from_blob(buf.data, {static_cast<std::int64_t>(buf.count)},
                                   torch::TensorOptions().dtype(scalar_type(buf.dtype)));
    return {tensor};
  }

  template <typename F>
  c10::intrusive_ptr<c10d::Work> guarded(const Blame& blame, F&& post) {
    try {
      return post();
    } catch (const std::exception& e) {
      *failed_ = true;
      rethrow_mapped(e, blame, options_.timeout);
    }
  }

  template <typename F>
  WorkPtr collective(const char* name, const OpContext& ctx, std::vector<at::Tensor> tensors,
                     F&& post) {
    Blame blame{op_prefix(name, ctx), others()};
    auto work = guarded(blame, [&] { return post(tensors); });
    return std::make_shared<GlooCollectiveWork>(std::move(work), std::move(tensors),
                                                std::move(blame), failed_);
  }

  // Note [TCP ring collectives]: its process group connects at the first TCP sharded collective.
  TcpRing& ring(const OpContext& ctx, const char* op) {
    if (ring_) return *ring_;
    auto pg_options = c10d::ProcessGroupGloo::Options::create(options_.timeout);
    pg_options->devices.push_back(device_);
    pg_options->threads = 1;  // send/recv do not use c10d's threads
    auto store = c10::make_intrusive<c10d::PrefixStore>(name_ + "/ring", root_store_);
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
    try {
      pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank(), size(), pg_options);
    } catch (const std::exception& e) {
      *failed_ = true;
      rethrow_mapped(e, Blame{op_prefix(op, ctx) + ": connecting the TCP ring", others()},
                     options_.timeout);
    }
    ring_ = std::make_unique<TcpRing>(
        rank(), members(),
        std::make_shared<GlooRingTransport>(std::move(pg), members(), failed_, options_.timeout));
    return *ring_;
  }

  c10::intrusive_ptr<c10d::Store> root_store_;
  std::string name_;
  CommOptions options_;
  Flag failed_;
  std::shared_ptr<::gloo::transport::Device> device_;  // shared by the world and its splits
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::int64_t alloc_seq_ = 0;
  std::unique_ptr<ShmCollectives> shm_;      // created with the first shared buffer
  std::set<int> p2p_decided_;                // peers connect_p2p() has seen
  std::unique_ptr<ShmP2P> p2p_;              // created with the first shared-memory peer
  std::vector<std::string> p2p_transports_;  // how each peer of connect_p2p is reached
  std::string shm_prefix_;                   // Note [Shared-memory names]; same in splits
  std::unique_ptr<TcpRing> ring_;            // Note [TCP ring collectives]; at first use

  // This group's store under `prefix`, for the shared-memory handshakes.
  ShmHandshake handshake(const std::string& prefix) {
    auto store = c10::make_intrusive<c10d::PrefixStore>(name_, root_store_);
    ShmHandshake h;
    h.put = [store, prefix](const std::string& k, const std::string& v) {
      store->set(prefix + k, std::vector<std::uint8_t>(v.begin(), v.end()));
    };
    h.get = [store, prefix](const std::string& k) {
      const auto v = store->get(prefix + k);
      return std::string(v.begin(), v.end());
    };
    return h;
  }

  ShmP2P& p2p() {
    if (!p2p_) p2p_ = std::make_unique<ShmP2P>(rank(), members(), options_.timeout);
    return *p2p_;
  }
};

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const WorldInfo& world, Store& store,
                                                     const CommOptions& options) {
  auto adapter = c10::make_intrusive<StoreAdapter>(store, options.timeout);
  // Bind where peers can reach us: an explicit interface (GLOO_SOCKET_IFNAME), loopback for
  // single-host jobs (the default, and what tests use), else the local address of the route to
  // the master (as PyTorch does), else the address this host's name resolves to.
  std::shared_ptr<::gloo::transport::Device> device;
  const std::string& addr = world.master_addr;
  std::string interface = options.gloo_interface;
  if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); interface.empty() && env != nullptr) {
    interface = env;
    PW_CHECK(interface.find(',') == std::string::npos, ConfigError,
             "rank " << world.rank << ": GLOO_SOCKET_IFNAME='"
                     << interface << "': pipewright binds one interface; name one");
  }
  try {
    if (!interface.empty()) {
      device = c10d::ProcessGroupGloo::createDeviceForInterface(interface);
    } else if (addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "::1") {
      device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    } else if (const std::string local = address_towards(addr, world.master_port); !local.empty()) {
      device = c10d::ProcessGroupGloo::createDeviceForHostname(local);
    } else {
      device = c10d::ProcessGroupGloo::createDefaultDevice();
    }
  } catch (const std::exception& e) {
    throw ConfigError("rank " + std::to_string(world.rank) +
                      ": cannot create the Gloo network device (interface '" + interface +
                      "'): " + first_line(e.what()));
  }
  std::vector<int> members(static_cast<std::size_t>(world.world_size));
  for (int r = 0; r < world.world_size; ++r) members[static_cast<std::size_t>(r)] = r;
  return std::make_unique<GlooCommunicator>(adapter, "pipewright/gloo", std::move(members),
                                            world.rank, options, std::move(device),
                                            shm_name_prefix(world.job_id, world.rank));
}

}  // namespace pipewright::exec::detail
