// The MPI backend: Open MPI used directly (non-blocking MPI_Isend/Irecv/Iallreduce/Ireduce/
// Ibcast/Ibarrier). Built only with PIPEWRIGHT_WITH_MPI.
//
// Note [MPI deadlines and shutdown]: MPI has no timeouts. Work::wait polls MPI_Test until its
// deadline (polling also drives progress of non-blocking collectives, which Open MPI advances
// only inside MPI calls). After a timeout or a failed operation the requests cannot be cancelled
// and MPI_Finalize could block forever, so MPI_Abort is the only safe way out: an exit handler
// calls MPI_Abort(MPI_COMM_WORLD, code) (code 4 after a timeout, 3 after a peer failure, 1
// otherwise), which makes mpirun stop every rank. After a clean run the handler calls
// MPI_Finalize. Without a failure the library never aborts.
//
// Note [MPI split handshake]: MPI_Comm_create_group blocks without a deadline. Before calling it
// the members exchange a token point-to-point (tag kHandshakeTag, reserved) and wait for every
// other member with the communicator timeout, so a member that never arrives is a TimeoutError
// naming it instead of a hang.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/backends.hpp"
#include "comm/communicator_base.hpp"
#include "comm/reduce_kernels.hpp"
#include "comm/sharded_collectives.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Process-wide MPI state. All MPI calls are serialised by `mu` (so MPI_THREAD_SERIALIZED would
// suffice, but MULTIPLE is requested for users who call MPI themselves).
struct MpiRuntime {
  std::mutex mu;
  MPI_Datatype f16 = MPI_DATATYPE_NULL;  // 2-byte types that select the half-precision kernels
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Op half_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // by ReduceOp
  int tag_ub = 32767;
  std::atomic<int> failure_code{0};
};

MpiRuntime& runtime() {
  static MpiRuntime rt;
  return rt;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

void record_failure(int exit_code) {
  int expected = 0;
  runtime().failure_code.compare_exchange_strong(expected, exit_code);
}

// Every MPI call goes through this check: a failure is a BackendError naming the call.
#define PW_MPI_CHECK(call, prefix)                                                          \
  do {                                                                                      \
    const int pw_mpi_rc_ = (call);                                                          \
    if (pw_mpi_rc_ != MPI_SUCCESS) {                                                        \
      record_failure(1);                                                                    \
      throw BackendError((prefix) + ": " #call " failed: " + mpi_error_string(pw_mpi_rc_)); \
    }                                                                                       \
  } while (false)

template <ReduceOp R>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  const DType dtype = *type == runtime().f16 ? DType::kFloat16 : DType::kBFloat16;
  reduce_into(inout, in, static_cast<std::size_t>(*len), dtype, R);
}

void exit_handler() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  const int code = runtime().failure_code.load();
  if (code != 0) {
    MPI_Abort(MPI_COMM_WORLD, code);  // Note [MPI deadlines and shutdown]
    return;
  }
  MPI_Finalize();
}

void init_mpi_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& rt = runtime();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Note [Open MPI in-place Iallreduce]: Open MPI's libnbc picks the binomial algorithm for
      // every MPI_IN_PLACE Iallreduce (nbc_iallreduce.c), which moves the whole buffer through
      // the root: 16 MiB on 2 ranks took 2.1x the time of a blocking MPI_Allreduce here
      // (bench/comm_bench.sh). Rabenseifner (reduce-scatter + allgather, bandwidth-optimal)
      // matches MPI_Allreduce (0.99x). A value the user exported wins (setenv does not
      // overwrite), and MCA parameters are read from the environment by MPI_Init below.
      ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
      int provided = 0;
      PW_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                   std::string("MPI initialisation"));
      PW_CHECK(provided >= MPI_THREAD_SERIALIZED, BackendError,
               "MPI initialisation: the MPI library provides thread level "
                   << provided << ", pipewright needs at least MPI_THREAD_SERIALIZED");
      std::atexit(exit_handler);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Type_contiguous(2, MPI_BYTE, &rt.f16);
    MPI_Type_commit(&rt.f16);
    MPI_Type_contiguous(2, MPI_BYTE, &rt.bf16);
    MPI_Type_commit(&rt.bf16);
    MPI_Op_create(&half_reduce<ReduceOp::kSum>, 1, &rt.half_ops[0]);
    MPI_Op_create(&half_reduce<ReduceOp::kMax>, 1, &rt.half_ops[1]);
    MPI_Op_create(&half_reduce<ReduceOp::kMin>, 1, &rt.half_ops[2]);
    int* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    if (found && ub != nullptr) rt.tag_ub = *ub;
  });
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kUInt8:
      return MPI_UINT8_T;
    case DType::kFloat16:
      return runtime().f16;
    case DType::kBFloat16:
      return runtime().bf16;
  }
  return MPI_BYTE;
}

// Note [16-bit sums] over MPI: a user-defined MPI_Op sees two operands at a time, so it would
// round to 16 bits after every pairwise add. A 16-bit sum instead goes over the wire widened to
// float32 (MPI_SUM on MPI_FLOAT) and is rounded once, when the Work completes (widen_half /
// narrow_half); the buffer keeps its input until then. Max and min are exact in 16 bits and keep
// the 16-bit operation.
BufferView float_view(std::vector<float>& wide) noexcept {
  return BufferView{wide.data(), wide.size(), DType::kFloat32};
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  const int index = static_cast<int>(op);
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) return runtime().half_ops[index];
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

// One request, polled with MPI_Test by BasicWork's default pause (Note [Work completion]).
class MpiWork final : public BasicWork {
 public:
  MpiWork(MPI_Request request, std::string prefix, std::string peers, const BufferView& recv_buf,
          bool check_count)
      : BasicWork(std::move(prefix)),
        request_(request),
        peers_(std::move(peers)),
        expected_(recv_buf.count),
        recv_type_(mpi_type(recv_buf.dtype)),
        check_count_(check_count) {}

  ~MpiWork() override {
    if (finished_) return;
    // An abandoned request: let MPI complete it in the background (it still owns the buffer).
    std::lock_guard<std::mutex> lock(runtime().mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
  }

 private:
  bool test() override {
    int flag = 0;
    MPI_Status status{};
    int rc = 0;
    {
      std::lock_guard<std::mutex> lock(runtime().mu);
      rc = MPI_Test(&request_, &flag, &status);
    }
    // Single-request completion reports errors through the return code only (MPI_ERROR of the
    // status is not set by MPI_Test).
    if (rc != MPI_SUCCESS) {
      fail<PeerError>(3, ": failed with peer " + peers_ + ": " + mpi_error_string(rc));
    }
    if (!flag) return false;
    if (check_count_) {
      int got = 0;
      MPI_Get_count(&status, recv_type_, &got);
      if (got < 0 || static_cast<std::size_t>(got) != expected_) {
        fail<BackendError>(1, ": size mismatch: expected " + std::to_string(expected_) +
                                  " elements, " + peers_ + " sent " + std::to_string(got));
      }
    }
    finished_ = true;
    return true;
  }

  std::string waiting_for() const override { return peers_; }

  // Note [MPI deadlines and shutdown]: a timeout ends the job with exit code 4.
  std::exception_ptr timeout_error(std::chrono::milliseconds timeout) override {
    record_failure(4);
    return BasicWork::timeout_error(timeout);
  }

  template <typename E>
  [[noreturn]] void fail(int exit_code, const std::string& what) {
    record_failure(exit_code);
    finished_ = true;
    throw E(prefix() + what);
  }

  MPI_Request request_;
  std::string peers_;
  std::size_t expected_;
  MPI_Datatype recv_type_;
  bool check_count_;
  bool finished_ = false;  // completed or failed: the request is no longer ours to free
};

class MpiCommunicator final : public CommunicatorBase {
 public:
  // Takes ownership of `comm`. `members` are world ranks by local rank.
  MpiCommunicator(MPI_Comm comm, std::vector<int> members, int rank,
                  std::chrono::milliseconds timeout)
      : CommunicatorBase("mpi", std::move(members), rank), comm_(comm), timeout_(timeout) {}

  ~MpiCommunicator() override {
    std::lock_guard<std::mutex> lock(runtime().mu);
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After a failure, pending requests may still reference the communicator.
    if (!finalized && runtime().failure_code.load() == 0) MPI_Comm_free(&comm_);
  }

  WorkPtr send(const BufferView& buf, int dst, std::int64_t tag, const OpContext& ctx) override {
    check_rank(dst, "send");
    const std::string prefix = p2p_prefix(true, dst, ctx);
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(runtime().mu);
      PW_MPI_CHECK(MPI_Isend(buf.data, checked_count(buf), mpi_type(buf.dtype), dst,
                             checked_tag(tag), comm_, &req),
                   prefix);
    }
    return std::make_shared<MpiWork>(req, prefix, "rank " + std::to_string(global_rank(dst)), buf,
                                     false);
  }

  WorkPtr recv(const BufferView& buf, int src, std::int64_t tag, const OpContext& ctx) override {
    check_rank(src, "recv");
    const std::string prefix = p2p_prefix(false, src, ctx);
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(runtime().mu);
      PW_MPI_CHECK(MPI_Irecv(buf.data, checked_count(buf), mpi_type(buf.dtype), src,
                             checked_tag(tag), comm_, &req),
                   prefix);
    }
    return std::make_shared<MpiWork>(req, prefix, "rank " + std::to_string(global_rank(src)), buf,
                                     true);
  }

  WorkPtr all_reduce(const BufferView& buf, ReduceOp op, const OpContext& ctx) override {
    if (is_half(buf.dtype) && op == ReduceOp::kSum) {  // Note [16-bit sums] over MPI
      auto wide = widen_half(buf);
      auto work = all_reduce(float_view(*wide), op, ctx);
      return std::make_shared<FinishingWork>(std::move(work),
                                             [wide, buf] { narrow_half(buf, *wide); });
    }
    const std::string prefix = op_prefix("all_reduce", ctx);
    return post(prefix, [&](MPI_Request* req) {
      return MPI_Iallreduce(MPI_IN_PLACE, buf.data, checked_count(buf), mpi_type(buf.dtype),
                            mpi_op(op, buf.dtype), comm_, req);
    });
  }

  WorkPtr reduce(const BufferView& buf, int root, ReduceOp op, const OpContext& ctx) override {
    check_rank(root, "reduce root");
    const bool is_root = root == rank();
    if (is_half(buf.dtype) && op == ReduceOp::kSum) {  // Note [16-bit sums] over MPI
      auto wide = widen_half(buf);
      auto work = reduce(float_view(*wide), root, op, ctx);
      if (!is_root) return work;
      return std::make_shared<FinishingWork>(std::move(work),
                                             [wide, buf] { narrow_half(buf, *wide); });
    }
    const std::string prefix = op_prefix("reduce", ctx);
    return post(prefix, [&](MPI_Request* req) {
      return MPI_Ireduce(is_root ? MPI_IN_PLACE : buf.data, is_root ? buf.data : nullptr,
                         checked_count(buf), mpi_type(buf.dtype), mpi_op(op, buf.dtype), root,
                         comm_, req);
    });
  }

  WorkPtr broadcast(const BufferView& buf, int root, const OpContext& ctx) override {
    check_rank(root, "broadcast root");
    const std::string prefix = op_prefix("broadcast", ctx);
    return post(prefix, [&](MPI_Request* req) {
      return MPI_Ibcast(buf.data, checked_count(buf), mpi_type(buf.dtype), root, comm_, req);
    });
  }

  WorkPtr barrier(const OpContext& ctx) override {
    const std::string prefix = op_prefix("barrier", ctx);
    return post(prefix, [&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); });
  }

  // Sharded collectives (ZeRO): MPI_Ireduce_scatter_block (16-bit types through the same
  // user-defined operations as all_reduce) and MPI_Iallgather (MPI_IN_PLACE when `in` is this
  // rank's piece of `out`).
  WorkPtr reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp op,
                         const OpContext& ctx) override {
    const std::string prefix = op_prefix("reduce_scatter", ctx);
    check_sharded(in, out, size(), false, prefix);
    if (is_half(in.dtype) && op == ReduceOp::kSum) {  // Note [16-bit sums] over MPI
      auto wide_in = widen_half(in);
      auto wide_out = std::make_shared<std::vector<float>>(out.count);
      auto work = reduce_scatter(float_view(*wide_in), float_view(*wide_out), op, ctx);
      return std::make_shared<FinishingWork>(
          std::move(work), [wide_in, wide_out, out] { narrow_half(out, *wide_out); });
    }
    if (scatter_in_place(in, out, rank())) {
      // MPI_IN_PLACE takes the input from the receive buffer and leaves the result at its start;
      // it moves into piece rank() once complete.
      auto work = post(prefix, [&](MPI_Request* req) {
        return MPI_Ireduce_scatter_block(MPI_IN_PLACE, in.data, checked_count(out),
                                         mpi_type(out.dtype), mpi_op(op, out.dtype), comm_, req);
      });
      if (rank() == 0) return work;
      return std::make_shared<FinishingWork>(
          std::move(work), [in, out] { std::memmove(out.data, in.data, out.bytes()); });
    }
    return post(prefix, [&](MPI_Request* req) {
      return MPI_Ireduce_scatter_block(in.data, out.data, checked_count(out), mpi_type(out.dtype),
                                       mpi_op(op, out.dtype), comm_, req);
    });
  }

  WorkPtr all_gather(const BufferView& in, const BufferView& out, const OpContext& ctx) override {
    const std::string prefix = op_prefix("all_gather", ctx);
    check_sharded(in, out, size(), true, prefix);
    const bool in_place = gather_in_place(in, out, rank());
    return post(prefix, [&](MPI_Request* req) {
      return MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data, checked_count(in),
                            mpi_type(in.dtype), out.data, checked_count(in), mpi_type(in.dtype),
                            comm_, req);
    });
  }

  // Note [16-bit sums] over MPI: float16 / bfloat16 sums go over the wire as float32.
  std::size_t all_reduce_element_bytes(const BufferView& buf) const override {
    return dtype_size(is_half(buf.dtype) ? DType::kFloat32 : buf.dtype);
  }

  // The reserved tag of Note [MPI split handshake]; user tags must be below it.
  int handshake_tag() const { return runtime().tag_ub; }

 private:
  std::unique_ptr<Communicator> make_split(const SplitRequest& request) override {
    if (request.rank < 0) return nullptr;
    const int seq = static_cast<int>(request.seq);
    const std::string prefix = "rank " + std::to_string(self()) + ": split #" +
                               std::to_string(seq) + " into ranks " + rank_list(request.world);
    handshake(request.members, prefix);
    MPI_Comm child = MPI_COMM_NULL;
    {
      std::lock_guard<std::mutex> lock(runtime().mu);
      MPI_Group parent_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
      PW_MPI_CHECK(MPI_Comm_group(comm_, &parent_group), prefix);
      PW_MPI_CHECK(MPI_Group_incl(parent_group, static_cast<int>(request.members.size()),
                                  request.members.data(), &group),
                   prefix);
      PW_MPI_CHECK(MPI_Comm_create_group(comm_, group, seq, &child), prefix);
      MPI_Group_free(&group);
      MPI_Group_free(&parent_group);
      PW_MPI_CHECK(MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN), prefix);
    }
    return std::make_unique<MpiCommunicator>(child, request.world, request.rank, timeout_);
  }

  int checked_tag(std::int64_t tag) const {
    PW_ASSERT(tag >= 0 && tag < handshake_tag(),
              "MPI point-to-point tags must be in [0, " << handshake_tag() << "), got " << tag);
    return static_cast<int>(tag);
  }

  static int checked_count(const BufferView& buf) {
    PW_ASSERT(buf.count <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
              "MPI buffers are limited to 2^31-1 elements, got " << buf.count);
    return static_cast<int>(buf.count);
  }

  template <typename F>
  WorkPtr post(const std::string& prefix, F&& call) {
    MPI_Request req = MPI_REQUEST_NULL;
    {
      std::lock_guard<std::mutex> lock(runtime().mu);
      PW_MPI_CHECK(call(&req), prefix);
    }
    return std::make_shared<MpiWork>(req, prefix, others(), BufferView{}, false);
  }

  // Note [MPI split handshake]
  void handshake(const std::vector<int>& members, const std::string& prefix) {
    unsigned char out = 1;
    std::vector<unsigned char> in(members.size(), 0);
    std::vector<WorkPtr> sends;
    std::vector<std::pair<int, WorkPtr>> recvs;
    const int tag = handshake_tag();
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int peer = members[i];
      if (peer == rank()) continue;
      MPI_Request s = MPI_REQUEST_NULL, r = MPI_REQUEST_NULL;
      {
        std::lock_guard<std::mutex> lock(runtime().mu);
        PW_MPI_CHECK(MPI_Isend(&out, 1, MPI_UNSIGNED_CHAR, peer, tag, comm_, &s), prefix);
        PW_MPI_CHECK(MPI_Irecv(&in[i], 1, MPI_UNSIGNED_CHAR, peer, tag, comm_, &r), prefix);
      }
      const std::string who = "rank " + std::to_string(global_rank(peer));
      sends.push_back(std::make_shared<MpiWork>(s, prefix, who, BufferView{}, false));
      recvs.emplace_back(
          global_rank(peer),
          std::make_shared<MpiWork>(r, prefix, who, BufferView{&in[i], 1, DType::kUInt8}, true));
    }
    const auto deadline = Clock::now() + timeout_;
    std::vector<int> missing;
    for (auto& [peer, work] : recvs) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        work->wait(std::max(left, std::chrono::milliseconds(1)));
      } catch (const TimeoutError&) {
        missing.push_back(peer);
      }
    }
    if (!missing.empty()) {
      record_failure(4);
      throw TimeoutError(prefix + ": " + timed_out_after(timeout_) + ": ranks " +
                         rank_list(missing) + " never joined");
    }
    for (auto& s : sends) s->wait(timeout_);
  }

  MPI_Comm comm_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const WorldInfo& world,
                                                    const CommOptions& options) {
  init_mpi_once();
  int rank = 0, size = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> lock(runtime().mu);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    PW_CHECK(rank == world.rank && size == world.world_size, ConfigError,
             "--backend mpi: MPI says this is rank "
                 << rank << " of " << size << ", but the resolved world says rank " << world.rank
                 << " of " << world.world_size << " (from " << world.sources
                 << "); launch with mpirun -np N");
    // A private duplicate, so pipewright's tags never collide with other MPI users.
    PW_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), std::string("MPI_Comm_dup"));
    PW_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), std::string("MPI setup"));
  }
  std::vector<int> members(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) members[static_cast<std::size_t>(r)] = r;
  return std::make_unique<MpiCommunicator>(comm, std::move(members), rank, options.timeout);
}

}  // namespace pipewright::exec::detail
