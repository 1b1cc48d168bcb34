// Note [TCP ring collectives] (tcp_ring.hpp).
#include "gloo/tcp_ring.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "comm/communicator_base.hpp"
#include "comm/reduce_kernels.hpp"
#include "comm/sharded_collectives.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

namespace {

// Tags of the ring's messages (the transport is the ring's own, so only the ring uses them); a
// rank whose neighbour runs the other operation waits for a message that never comes (and names
// it) instead of taking the wrong one.
constexpr std::uint32_t kReduceScatterTag = 1;
constexpr std::uint32_t kAllGatherTag = 2;

}  // namespace

struct TcpRing::Job {
  bool gather = false;
  BufferView in;
  BufferView out;
  ReduceOp op = ReduceOp::kSum;
  std::string prefix;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

struct TcpRing::Shared {
  int rank = 0;
  int size = 1;
  std::shared_ptr<RingTransport> transport;
  std::size_t chunk_bytes = kRingChunkBytes;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Job>> queue;
  bool stop = false;
  // Worker-only: the first failure; later jobs fail at once with it.
  std::string failure;
};

namespace {

int ring_mod(int x, int d) { return ((x % d) + d) % d; }

// Between two transfers: a destroyed communicator ends the running operation (its caller is
// gone, and so may be its buffers).
void check_running(TcpRing::Shared& s, const std::string& prefix) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.stop) throw BackendError(prefix + ": the communicator was destroyed while it ran");
}

float load_half(const std::byte* p, std::size_t i, DType dtype) {
  std::uint16_t h = 0;
  std::memcpy(&h, p + 2 * i, 2);
  return dtype == DType::kBFloat16 ? bfloat16_to_float(h) : half_to_float(h);
}

float apply(float a, float b, ReduceOp op) {
  return op == ReduceOp::kSum ? a + b : op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
}

// One chunk of a 16-bit reduce-scatter: dst[i] = mine[i] op recv[i] in float32, where `recv` is
// 16-bit (step 0: a peer's input) or float32 (partial sums), and `dst` the float32 partial sums
// or, at the last step, the 16-bit result (rounded once, here).
void reduce_half_chunk(std::byte* dst, bool dst_half, const std::byte* mine, const std::byte* recv,
                       bool recv_half, std::size_t count, DType dtype, ReduceOp op) {
  for (std::size_t i = 0; i < count; ++i) {
    float r = 0;
    if (recv_half) {
      r = load_half(recv, i, dtype);
    } else {
      std::memcpy(&r, recv + 4 * i, 4);
    }
    const float v = apply(load_half(mine, i, dtype), r, op);
    if (dst_half) {
      const std::uint16_t h = dtype == DType::kBFloat16 ? float_to_bfloat16(v) : float_to_half(v);
      std::memcpy(dst + 2 * i, &h, 2);
    } else {
      std::memcpy(dst + 4 * i, &v, 4);
    }
  }
}

void run_reduce_scatter(TcpRing::Shared& s, TcpRing::Job& job) {
  const int d = s.size, r = s.rank;
  const int right = (r + 1) % d, left = (r + d - 1) % d;
  const DType dtype = job.in.dtype;
  const std::size_t n = job.out.count;  // elements of a piece
  const std::size_t esz = dtype_size(dtype);
  const bool half = is_half(dtype);
  // Element bytes of the partial sums (on the wire after step 0, and in the accumulator).
  const std::size_t wide = half ? 4 : esz;
  const std::size_t chunk = std::max<std::size_t>(1, s.chunk_bytes / wide);
  auto* in = static_cast<std::byte*>(job.in.data);
  auto* out = static_cast<std::byte*>(job.out.data);
  auto piece = [&](int p) { return in + static_cast<std::size_t>(p) * n * esz; };
  const bool in_place = scatter_in_place(job.in, job.out, r);
  if (d == 1) {
    if (!in_place && n > 0) std::memcpy(out, in, n * esz);
    return;
  }
  // Where the partial sums of piece p live between two steps.
  std::vector<float> acc32(half && d > 2 ? n : 0);
  auto partial = [&](int p) -> std::byte* {
    if (half) return reinterpret_cast<std::byte*>(acc32.data());
    return in_place ? piece(p) : out;
  };
  std::vector<std::byte> tmp[2];
  for (auto& t : tmp) t.resize(std::min(n, chunk) * wide);
  const std::size_t chunks = (n + chunk - 1) / chunk;

  for (int step = 0; step < d - 1; ++step) {
    const int send_p = ring_mod(r - 1 - step, d), recv_p = ring_mod(r - 2 - step, d);
    const bool last = step == d - 2;
    // Step 0 sends the input as it is (16 bits for 16-bit types), later steps the partial sums.
    const std::byte* src = step == 0 ? piece(send_p) : partial(send_p);
    const std::size_t wire = step == 0 ? esz : wide;
    std::byte* dst = last ? out : partial(recv_p);
    const bool dst_half = half && last;
    std::unique_ptr<RingTransfer> sends[2], recvs[2];
    auto post = [&](std::size_t c) {
      const std::size_t lo = c * chunk, len = std::min(chunk, n - lo);
      recvs[c % 2] =
          s.transport->recv(tmp[c % 2].data(), len * wire, left, kReduceScatterTag, job.prefix);
      sends[c % 2] =
          s.transport->send(src + lo * wire, len * wire, right, kReduceScatterTag, job.prefix);
    };
    for (std::size_t c = 0; c < std::min<std::size_t>(chunks, 2); ++c) post(c);
    for (std::size_t c = 0; c < chunks; ++c) {
      check_running(s, job.prefix);
      const std::size_t lo = c * chunk, len = std::min(chunk, n - lo);
      recvs[c % 2]->wait();
      sends[c % 2]->wait();  // the chunk may be the one about to be overwritten
      const std::byte* mine = piece(recv_p) + lo * esz;
      const std::byte* got = tmp[c % 2].data();
      if (half) {
        reduce_half_chunk(dst + lo * (dst_half ? esz : wide), dst_half, mine, got, step == 0, len,
                          dtype, job.op);
      } else {
        std::byte* d_chunk = dst + lo * esz;
        if (d_chunk != mine) std::memcpy(d_chunk, mine, len * esz);
        reduce_into(d_chunk, got, len, dtype, job.op);
      }
      if (c + 2 < chunks) post(c + 2);
    }
  }
}

void run_all_gather(TcpRing::Shared& s, TcpRing::Job& job) {
  const int d = s.size, r = s.rank;
  const int right = (r + 1) % d, left = (r + d - 1) % d;
  const std::size_t pb = job.in.bytes();
  auto* out = static_cast<std::byte*>(job.out.data);
  auto at = [&](int p) { return out + static_cast<std::size_t>(p) * pb; };
  if (pb == 0) return;
  if (!gather_in_place(job.in, job.out, r)) std::memcpy(at(r), job.in.data, pb);
  for (int step = 0; step < d - 1; ++step) {
    check_running(s, job.prefix);
    auto recv =
        s.transport->recv(at(ring_mod(r - 1 - step, d)), pb, left, kAllGatherTag, job.prefix);
    auto send = s.transport->send(at(ring_mod(r - step, d)), pb, right, kAllGatherTag, job.prefix);
    recv->wait();
    send->wait();
  }
}

void run_worker(const std::shared_ptr<TcpRing::Shared>& shared) {
  TcpRing::Shared& s = *shared;
  for (;;) {
    std::shared_ptr<TcpRing::Job> job;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
      if (s.stop) return;
      job = s.queue.front();
      s.queue.pop_front();
    }
    std::exception_ptr error;
    if (!s.failure.empty()) {
      error = std::make_exception_ptr(BackendError(
          job->prefix +
          ": not run: an earlier ring collective of this communicator failed: " + s.failure));
    } else {
      try {
        if (job->gather) {
          run_all_gather(s, *job);
        } else {
          run_reduce_scatter(s, *job);
        }
      } catch (const std::exception& e) {
        s.failure = e.what();
        error = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(job->mu);
    job->done = true;
    job->error = error;
    job->cv.notify_all();
  }
}

// The worker publishes the job's outcome; waits block on the job's condition variable.
class RingWork final : public BasicWork {
 public:
  RingWork(std::shared_ptr<TcpRing::Job> job, std::string neighbours)
      : BasicWork(job->prefix), job_(std::move(job)), neighbours_(std::move(neighbours)) {}

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
  std::string waiting_for() const override { return neighbours_; }

  std::shared_ptr<TcpRing::Job> job_;
  std::string neighbours_;
};

}  // namespace

TcpRing::TcpRing(int rank, std::vector<int> global_ranks, std::shared_ptr<RingTransport> transport,
                 std::size_t chunk_bytes)
    : rank_(rank), global_ranks_(std::move(global_ranks)), shared_(std::make_shared<Shared>()) {
  PW_ASSERT(
      rank_ >= 0 && rank_ < static_cast<int>(global_ranks_.size()) && transport && chunk_bytes >= 8,
      "TcpRing: bad arguments");
  shared_->rank = rank_;
  shared_->size = static_cast<int>(global_ranks_.size());
  shared_->transport = std::move(transport);
  shared_->chunk_bytes = chunk_bytes;
}

TcpRing::~TcpRing() {
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
    left.swap(shared_->queue);
  }
  shared_->cv.notify_all();
  if (worker_.joinable()) {
    if (abandon_) {
      worker_.detach();  // it owns `shared_` too
    } else {
      worker_.join();
    }
  }
  for (auto& job : left) {
    std::lock_guard<std::mutex> lock(job->mu);
    job->done = true;
    job->error = std::make_exception_ptr(
        BackendError(job->prefix + ": the communicator was destroyed before it ran"));
    job->cv.notify_all();
  }
}

WorkPtr TcpRing::submit(std::shared_ptr<Job> job) {
  const int d = static_cast<int>(global_ranks_.size());
  const int left = global_ranks_[static_cast<std::size_t>((rank_ + d - 1) % d)];
  const int right = global_ranks_[static_cast<std::size_t>((rank_ + 1) % d)];
  const std::string neighbours = left == right ? "rank " + std::to_string(left)
                                               : "rank " + std::to_string(left) + " or rank " +
                                                     std::to_string(right) + " (ring neighbours)";
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (!worker_.joinable()) worker_ = std::thread([s = shared_] { run_worker(s); });
    shared_->queue.push_back(job);
  }
  shared_->cv.notify_all();
  return std::make_shared<RingWork>(std::move(job), neighbours);
}

WorkPtr TcpRing::reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp op,
                                std::string prefix) {
  auto job = std::make_shared<Job>();
  job->in = in;
  job->out = out;
  job->op = op;
  job->prefix = std::move(prefix);
  return submit(std::move(job));
}

WorkPtr TcpRing::all_gather(const BufferView& in, const BufferView& out, std::string prefix) {
  auto job = std::make_shared<Job>();
  job->gather = true;
  job->in = in;
  job->out = out;
  job->prefix = std::move(prefix);
  return submit(std::move(job));
}

}  // namespace pipewright::exec::detail
