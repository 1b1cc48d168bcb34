// The NCCL backend; see nccl_communicator.hpp and Note [NCCL stream ordering].
#include "nccl/nccl_communicator.hpp"

#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include "comm/communicator_base.hpp"
#include "comm/reduce_kernels.hpp"
#include "comm/sharded_collectives.hpp"
#include "nccl/cuda_streams.hpp"
#include "nccl/nccl_check.hpp"
#include "nccl/nccl_ordering.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

namespace {

// The NCCL communicator handle: polled and aborted through CommControl, finalized and destroyed
// with the last owner (the communicator or a Work that outlives it).
class NcclControl final : public CommControl {
 public:
  NcclControl(ncclComm_t comm, int device, std::chrono::milliseconds teardown_timeout)
      : comm_(comm), device_(device), teardown_timeout_(teardown_timeout) {}
  ~NcclControl() override { teardown(); }
  NcclControl(const NcclControl&) = delete;
  NcclControl& operator=(const NcclControl&) = delete;

  CommHealth poll() override {
    if (aborted_) return {GpuStatus::kError, "the communicator was aborted"};
    ncclResult_t async = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &async);
    if (result != ncclSuccess) {
      return {GpuStatus::kError,
              "ncclCommGetAsyncError failed: " + nccl_result_name(static_cast<int>(result))};
    }
    const GpuStatus status = classify_nccl_result(static_cast<int>(async));
    if (status == GpuStatus::kOk || status == GpuStatus::kInProgress) return {status, ""};
    std::string detail =
        nccl_result_name(static_cast<int>(async)) + ": " + ncclGetErrorString(async);
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') detail += "; NCCL says: " + std::string(last);
    return {status, detail};
  }

  void abort() noexcept override {
    if (aborted_) return;
    aborted_ = true;
    (void)cudaSetDevice(device_);
    (void)ncclCommAbort(comm_);
  }

  [[nodiscard]] ncclComm_t get() const noexcept { return comm_; }

 private:
  // Finalize (flushes outstanding operations) with a bounded wait, then destroy; abort when the
  // flush does not finish in time (a peer is gone) so that destruction never hangs.
  void teardown() noexcept {
    if (aborted_ || comm_ == nullptr) return;
    (void)cudaSetDevice(device_);
    ncclResult_t result = ncclCommFinalize(comm_);
    const auto deadline = std::chrono::steady_clock::now() + teardown_timeout_;
    while (result == ncclInProgress || result == ncclSuccess) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) break;
      if (async == ncclSuccess) {
        (void)ncclCommDestroy(comm_);
        return;
      }
      if (async != ncclInProgress || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    abort();
  }

  ncclComm_t comm_;
  int device_;
  std::chrono::milliseconds teardown_timeout_;
  bool aborted_ = false;
};

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt64:
      return ncclInt64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kUInt8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

using detail::rank_list;

// Which way a CPU buffer is staged through the device (see NcclCommunicator::issue).
enum class Staging { kToDevice, kToHost, kBoth };

class DeviceBuffer {
 public:
  DeviceBuffer(int device, std::size_t bytes, const CallSite& site) : device_(device) {
    PW_GPU_CHECK(cudaMalloc(&data_, bytes), site);
  }
  ~DeviceBuffer() {
    (void)cudaSetDevice(device_);
    (void)cudaFree(data_);  // synchronises the device: NCCL is done with the buffer
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  [[nodiscard]] void* data() const noexcept { return data_; }

 private:
  int device_;
  void* data_ = nullptr;
};

// The Work of an operation on a staged CPU buffer: copies the result back to the host when the
// device operation completed (Work::wait has then ordered the compute stream after it).
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr inner, std::shared_ptr<DeviceBuffer> staged, void* host, std::size_t bytes,
             bool copy_back, int rank, OpInfo info)
      : inner_(std::move(inner)),
        staged_(std::move(staged)),
        host_(host),
        bytes_(bytes),
        copy_back_(copy_back),
        rank_(rank),
        info_(std::move(info)) {}

  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    finish();
  }
  bool is_completed() override {
    if (!inner_->is_completed()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    if (!copy_back_ || copied_) return;
    CallSite site;
    site.rank = rank_;
    site.peer = info_.peer;
    site.ctx = &info_.ctx;
    PW_GPU_CHECK(cudaMemcpy(host_, staged_->data(), bytes_, cudaMemcpyDeviceToHost), site);
    copied_ = true;
  }

  WorkPtr inner_;
  std::shared_ptr<DeviceBuffer> staged_;
  void* host_;
  std::size_t bytes_;
  bool copy_back_;
  int rank_;
  OpInfo info_;
  bool copied_ = false;
};

// Everything a communicator needs to create itself and its sub-communicators.
struct Setup {
  int device = 0;
  std::chrono::milliseconds timeout{0};
  std::function<void(const std::string&, const std::string&)> store_set;
  std::function<std::string(const std::string&)> store_get;
  cudaStream_t compute = nullptr;
};

class NcclCommunicator final : public detail::CommunicatorBase {
 public:
  // Joins the communicator of `global_ranks` as member `rank`; the unique id is exchanged under
  // `key` (rank 0 publishes it). Collective over the members.
  NcclCommunicator(Setup setup, int rank, std::vector<int> global_ranks, const std::string& key)
      : NcclCommunicator(std::move(setup), rank, std::move(global_ranks), key, nullptr) {}

  WorkPtr send(const BufferView& buf, int dst, std::int64_t /*tag*/,
               const OpContext& ctx) override {
    OpInfo info{"send to rank " + std::to_string(global_rank(dst)), global_rank(dst), ctx};
    check_peer(dst, info);
    return issue(buf, Staging::kToDevice, std::move(info),
                 [&](const BufferView& b, cudaStream_t stream) {
                   return PW_GPU_CHECK(
                       ncclSend(b.data, b.count, nccl_type(b.dtype), dst, control_->get(), stream),
                       tracker_.site(global_rank(dst), &ctx));
                 });
  }

  WorkPtr recv(const BufferView& buf, int src, std::int64_t /*tag*/,
               const OpContext& ctx) override {
    OpInfo info{"recv from rank " + std::to_string(global_rank(src)), global_rank(src), ctx};
    check_peer(src, info);
    return issue(buf, Staging::kToHost, std::move(info),
                 [&](const BufferView& b, cudaStream_t stream) {
                   return PW_GPU_CHECK(
                       ncclRecv(b.data, b.count, nccl_type(b.dtype), src, control_->get(), stream),
                       tracker_.site(global_rank(src), &ctx));
                 });
  }

  // Note [16-bit sums] on NCCL: NCCL's ring rounds a float16 / bfloat16 sum to 16 bits at
  // every step. A host buffer (staged) is widened to float32 on the host, summed as float32 and
  // rounded once at completion, as over MPI. A device buffer keeps NCCL's native 16-bit sum:
  // widening it needs a conversion kernel on the communication stream, which this backend does
  // not have (docs/executor.md, "16-bit sums").
  WorkPtr all_reduce(const BufferView& buf, ReduceOp op, const OpContext& ctx) override {
    if (detail::is_half(buf.dtype) && op == ReduceOp::kSum && !buf.device.is_cuda()) {
      auto wide = detail::widen_half(buf);
      auto work = all_reduce(BufferView{wide->data(), wide->size(), DType::kFloat32}, op, ctx);
      return std::make_shared<detail::FinishingWork>(
          std::move(work), [wide, buf] { detail::narrow_half(buf, *wide); });
    }
    OpInfo info{"all_reduce over ranks " + rank_list(members()), -1, ctx};
    return issue(buf, Staging::kBoth, std::move(info),
                 [&](const BufferView& b, cudaStream_t stream) {
                   return PW_GPU_CHECK(ncclAllReduce(b.data, b.data, b.count, nccl_type(b.dtype),
                                                     nccl_op(op), control_->get(), stream),
                                       tracker_.site(-1, &ctx));
                 });
  }

  WorkPtr reduce(const BufferView& buf, int root, ReduceOp op, const OpContext& ctx) override {
    OpInfo info{"reduce to rank " + std::to_string(global_rank(root)) + " over ranks " +
                    rank_list(members()),
                -1, ctx};
    check_root(root, info);
    if (detail::is_half(buf.dtype) && op == ReduceOp::kSum && !buf.device.is_cuda()) {
      auto wide = detail::widen_half(buf);  // Note [16-bit sums] on NCCL
      auto work = reduce(BufferView{wide->data(), wide->size(), DType::kFloat32}, root, op, ctx);
      if (root != rank()) return work;
      return std::make_shared<detail::FinishingWork>(
          std::move(work), [wide, buf] { detail::narrow_half(buf, *wide); });
    }
    return issue(buf, Staging::kBoth, std::move(info),
                 [&](const BufferView& b, cudaStream_t stream) {
                   return PW_GPU_CHECK(ncclReduce(b.data, b.data, b.count, nccl_type(b.dtype),
                                                  nccl_op(op), root, control_->get(), stream),
                                       tracker_.site(-1, &ctx));
                 });
  }

  WorkPtr broadcast(const BufferView& buf, int root, const OpContext& ctx) override {
    OpInfo info{"broadcast from rank " + std::to_string(global_rank(root)) + " over ranks " +
                    rank_list(members()),
                -1, ctx};
    check_root(root, info);
    return issue(buf, Staging::kBoth, std::move(info),
                 [&](const BufferView& b, cudaStream_t stream) {
                   return PW_GPU_CHECK(ncclBroadcast(b.data, b.data, b.count, nccl_type(b.dtype),
                                                     root, control_->get(), stream),
                                       tracker_.site(-1, &ctx));
                 });
  }

  // Sharded collectives (ZeRO) on device buffers: ncclReduceScatter / ncclAllGather on the
  // communication stream (in place when `in` is this rank's piece of `out`, as NCCL allows).
  WorkPtr reduce_scatter(const BufferView& in, const BufferView& out, ReduceOp op,
                         const OpContext& ctx) override {
    OpInfo info{"reduce_scatter over ranks " + rank_list(members()), -1, ctx};
    check_sharded_on_device(in, out, false, info);
    return issue(
        out, Staging::kBoth, std::move(info), [&](const BufferView& b, cudaStream_t stream) {
          return PW_GPU_CHECK(ncclReduceScatter(in.data, b.data, b.count, nccl_type(b.dtype),
                                                nccl_op(op), control_->get(), stream),
                              tracker_.site(-1, &ctx));
        });
  }

  WorkPtr all_gather(const BufferView& in, const BufferView& out, const OpContext& ctx) override {
    OpInfo info{"all_gather over ranks " + rank_list(members()), -1, ctx};
    check_sharded_on_device(in, out, true, info);
    return issue(
        out, Staging::kBoth, std::move(info), [&](const BufferView& b, cudaStream_t stream) {
          return PW_GPU_CHECK(
              ncclAllGather(in.data, b.data, in.count, nccl_type(b.dtype), control_->get(), stream),
              tracker_.site(-1, &ctx));
        });
  }

  // Note [16-bit sums] on NCCL: a staged host buffer's 16-bit sum goes over the wire as float32.
  std::size_t all_reduce_element_bytes(const BufferView& buf) const override {
    const bool widened = detail::is_half(buf.dtype) && !buf.device.is_cuda();
    return dtype_size(widened ? DType::kFloat32 : buf.dtype);
  }

  // A one-element all-reduce: completes on every rank only when all ranks reached it.
  WorkPtr barrier(const OpContext& ctx) override {
    const BufferView token{barrier_token_, 1, DType::kFloat32,
                           Device{Device::Kind::kCuda, device()}};
    OpInfo info{"barrier over ranks " + rank_list(members()), -1, ctx};
    return issue(
        token, Staging::kBoth, std::move(info), [&](const BufferView& b, cudaStream_t stream) {
          return PW_GPU_CHECK(
              ncclAllReduce(b.data, b.data, 1, ncclFloat32, ncclSum, control_->get(), stream),
              tracker_.site(-1, &ctx));
        });
  }

  void begin_p2p_batch() override {
    tracker_.begin_batch();
    streams_->use_device();
    guarded(nullptr, [&] { return PW_GPU_CHECK(ncclGroupStart(), tracker_.site(-1, nullptr)); });
    group_open_ = true;
  }

  void end_p2p_batch() override {
    if (!group_open_) return;  // ncclGroupStart failed: the batch is already closed
    group_open_ = false;
    streams_->use_device();
    if (!tracker_.in_batch()) {
      // A call of the batch failed and aborted the communicator (tracker_.fail closed the
      // batch); still close NCCL's thread-local group so other communicators stay usable.
      (void)ncclGroupEnd();
      return;
    }
    bool in_progress = false;
    guarded(&in_progress, [&] { return PW_GPU_CHECK(ncclGroupEnd(), tracker_.site(-1, nullptr)); });
    tracker_.end_batch(in_progress);
  }

  std::unique_ptr<Communicator> make_split(const SplitRequest& request) override {
    PW_ASSERT(!tracker_.in_batch(), "split() inside a p2p batch");
    tracker_.check_alive();
    const int my_index = request.rank;
    const std::vector<int>& child_globals = request.world;
    const std::string child_key = key_ + "/split" + std::to_string(request.seq);
    streams_->use_device();
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    // ncclCommSplit is collective over the parent: non-members pass NCCL_SPLIT_NOCOLOR and get
    // no communicator. The child keeps its own (non-blocking) config.
    ncclConfig_t config = nonblocking_config();
    ncclComm_t child = nullptr;
    const OpInfo info{"ncclCommSplit into ranks " + rank_list(child_globals), -1, OpContext {}};
    // The parent's previous non-blocking call (a collective, or an earlier split whose call
    // returned ncclSuccess while its work went on) must be done: NCCL refuses a split on a
    // communicator whose last operation is still in progress ("Attempt to use communicator
    // before the previous operation returned ncclSuccess"; seen 1 in 5 runs on an H100).
    tracker_.wait_enqueued(OpInfo{"the call before " + info.op, -1, OpContext {}});
    bool in_progress = false;
    guarded(&in_progress, [&] {
      return PW_GPU_CHECK(ncclCommSplit(control_->get(), my_index >= 0 ? 0 : NCCL_SPLIT_NOCOLOR,
                                        my_index >= 0 ? my_index : 0, &child, &config),
                          tracker_.site(-1, nullptr));
    });
    if (in_progress) tracker_.wait_enqueued(info);
    if (my_index < 0) return nullptr;
    auto out = std::unique_ptr<NcclCommunicator>(
        new NcclCommunicator(setup_, my_index, child_globals, child_key, child));
    if (in_progress) out->tracker_.wait_enqueued(info);  // the child's own init
    return out;
#else
    // No ncclCommSplit: the members build a fresh communicator from a new unique id.
    if (my_index < 0) return nullptr;
    return std::make_unique<NcclCommunicator>(setup_, my_index, child_globals, child_key);
#endif
  }

 private:
  NcclCommunicator(Setup setup, int rank, std::vector<int> global_ranks, std::string key,
                   ncclComm_t existing)
      : CommunicatorBase("nccl", std::move(global_ranks), rank),
        setup_(std::move(setup)),
        key_(std::move(key)),
        streams_(std::make_shared<CudaStreams>(setup_.device, setup_.compute, self())),
        control_(std::make_shared<NcclControl>(existing != nullptr ? existing : init_comm(),
                                               setup_.device, setup_.timeout)),
        tracker_(streams_, control_, self(), members(), setup_.timeout) {
    if (existing == nullptr) {
      // ncclCommInitRankConfig on a non-blocking communicator returns before the peers have
      // connected: wait for it here (bounded by the timeout) so construction means "joined".
      tracker_.wait_enqueued(OpInfo{"NCCL init of ranks " + rank_list(members()) +
                                        " (ranks that did not start or cannot reach this one "
                                        "make it time out)",
                                    -1, OpContext{}});
    }
    CallSite site;
    site.rank = self();
    PW_GPU_CHECK(cudaMalloc(&barrier_token_, sizeof(float)), site);
    PW_GPU_CHECK(cudaMemset(barrier_token_, 0, sizeof(float)), site);
  }

 public:
  ~NcclCommunicator() override {
    if (barrier_token_ != nullptr) {
      (void)cudaSetDevice(setup_.device);
      // cudaFree synchronises the device, so pending barriers have finished reading the token.
      (void)cudaFree(barrier_token_);
    }
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

 private:
  [[nodiscard]] int device() const noexcept { return setup_.device; }

  static ncclConfig_t nonblocking_config() {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    // Non-blocking: calls return ncclInProgress instead of blocking inside NCCL, so that a dead
    // peer cannot hang the process beyond our deadline (Note [NCCL stream ordering]).
    config.blocking = 0;
    return config;
  }

  // Creates this rank's NCCL communicator from the unique id under key_ (runs in the
  // constructor's initializer list, before tracker_ exists: errors are thrown directly).
  ncclComm_t init_comm() {
    CallSite site;
    site.rank = self();
    site.group = members();
    ncclUniqueId id;
    const std::string key = key_ + "/unique_id";
    if (rank() == 0) {
      PW_GPU_CHECK(ncclGetUniqueId(&id), site);
      setup_.store_set(key, std::string(id.internal, sizeof(id.internal)));
    } else {
      const std::string bytes = setup_.store_get(key);
      PW_CHECK(bytes.size() == sizeof(id.internal), BackendError,
               "rank " << self() << ": NCCL unique id under store key '" << key << "' has "
                       << bytes.size() << " bytes, expected " << sizeof(id.internal));
      std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    }
    PW_GPU_CHECK(cudaSetDevice(setup_.device), site);
    ncclConfig_t config = nonblocking_config();
    ncclComm_t comm = nullptr;
    PW_GPU_CHECK(ncclCommInitRankConfig(&comm, size(), id, rank(), &config), site);
    return comm;
  }

  void check_peer(int peer, const OpInfo& info) const {
    PW_CHECK(peer >= 0 && peer < size() && peer != rank(), BackendError,
             "rank " << self() << ": " << info.op << " (" << info.ctx.describe() << "): peer "
                     << peer << " is not another rank of a communicator of size " << size());
  }
  void check_root(int root, const OpInfo& info) const {
    PW_CHECK(root >= 0 && root < size(), BackendError,
             "rank " << self() << ": " << info.op << " (" << info.ctx.describe() << "): root "
                     << root << " is not a rank of a communicator of size " << size());
  }

  // Runs an NCCL call; any failure kills the communicator (NCCL's state after a failed call,
  // especially inside a group, is not recoverable) and is rethrown.
  template <class Call>
  void guarded(bool* in_progress, Call&& call) {
    try {
      const bool pending = call();
      if (in_progress != nullptr) *in_progress = pending;
    } catch (...) {
      tracker_.fail(std::current_exception());
      throw;
    }
  }

  void check_sharded_on_device(const BufferView& in, const BufferView& out, bool gather,
                               const OpInfo& info) const {
    const std::string prefix =
        "rank " + std::to_string(self()) + ": " + info.op + " (" + info.ctx.describe() + ")";
    detail::check_sharded(in, out, size(), gather, prefix);
    PW_CHECK(in.device.is_cuda() && out.device.is_cuda(), BackendError,
             prefix << ": the NCCL backend's reduce_scatter and all_gather work on device "
                       "buffers (the ZeRO buffers live on the rank's GPU)");
  }

  // Issues one operation on `buf`. A CPU buffer is staged through a temporary device buffer
  // (copied in before, out when the Work completes): meant for small start-up control messages
  // (shape headers); hot-path tensors live on the device and are used in place.
  template <class Enqueue>
  WorkPtr issue(const BufferView& buf, Staging staging, OpInfo info, Enqueue&& enqueue) {
    PW_CHECK(!buf.device.is_cuda() || buf.device.index == device(), BackendError,
             "rank " << self() << ": " << info.op << " (" << info.ctx.describe()
                     << "): the NCCL backend of this rank works on cuda:" << device()
                     << ", got a buffer on cuda:" << buf.device.index);
    streams_->use_device();
    std::shared_ptr<DeviceBuffer> staged;
    BufferView view = buf;
    if (!buf.device.is_cuda() && buf.count > 0) {
      const CallSite site = tracker_.site(info.peer, &info.ctx);
      staged = std::make_shared<DeviceBuffer>(device(), buf.bytes(), site);
      view.data = staged->data();
      view.device = Device{Device::Kind::kCuda, device()};
      if (staging != Staging::kToHost) {
        // Synchronous for the host and ordered on the legacy default (compute) stream.
        PW_GPU_CHECK(cudaMemcpy(view.data, buf.data, buf.bytes(), cudaMemcpyHostToDevice), site);
      }
    }
    tracker_.before_enqueue();
    bool in_progress = false;
    guarded(&in_progress, [&] { return enqueue(view, streams_->comm_stream()); });
    WorkPtr work = tracker_.after_enqueue(info, in_progress);
    if (staged == nullptr) return work;
    return std::make_shared<StagedWork>(std::move(work), std::move(staged), buf.data, buf.bytes(),
                                        staging != Staging::kToDevice, self(), std::move(info));
  }

  Setup setup_;
  std::string key_;
  std::shared_ptr<CudaStreams> streams_;
  std::shared_ptr<NcclControl> control_;
  OpTracker tracker_;
  bool group_open_ = false;  // between a successful ncclGroupStart and its ncclGroupEnd
  void* barrier_token_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options) {
  PW_CHECK(
      options.size >= 1 && options.rank >= 0 && options.rank < options.size, ConfigError,
      "NCCL backend: rank " << options.rank << " is out of range for world size " << options.size);
  PW_CHECK(options.store_set && options.store_get, ConfigError,
           "NCCL backend: rank " << options.rank << " needs a rendezvous store");
  Setup setup;
  setup.device = options.device;
  setup.timeout = options.timeout;
  setup.store_set = options.store_set;
  setup.store_get = options.store_get;
  setup.compute = static_cast<cudaStream_t>(options.compute_stream);
  std::vector<int> ranks(static_cast<std::size_t>(options.size));
  for (int r = 0; r < options.size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return std::make_unique<NcclCommunicator>(std::move(setup), options.rank, std::move(ranks),
                                            options.key_prefix);
}

int cuda_device_count(std::string* detail) {
  int count = 0;
  const cudaError_t result = cudaGetDeviceCount(&count);
  if (result != cudaSuccess) {
    if (detail != nullptr) {
      *detail = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(result) + ": " +
                cudaGetErrorString(result);
    }
    (void)cudaGetLastError();
    return 0;
  }
  if (detail != nullptr) detail->clear();
  return count;
}

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace pipewright::exec
