// GPU tests of the NCCL backend (label gpu): real NCCL communicators on >= 2 CUDA devices of
// this machine, one thread per rank. Without enough devices every test is skipped with
// "no CUDA device: skipped" (tools/gpu-check runs this binary on a GPU machine).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl/nccl_communicator.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kTimeout{60000};

// Skips the test unless this machine has `needed` CUDA devices.
#define PW_REQUIRE_DEVICES(needed)                                                             \
  do {                                                                                         \
    std::string why_;                                                                          \
    const int found_ = cuda_device_count(&why_);                                               \
    if (found_ < (needed)) {                                                                   \
      GTEST_SKIP() << "no CUDA device: skipped (needs " << (needed) << " CUDA devices, found " \
                   << found_ << (why_.empty() ? "" : "; " + why_) << ")";                      \
    }                                                                                          \
  } while (false)

void check_cuda(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(r));
}

// A float buffer on `device`.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, std::size_t count) : device_(device), count_(count) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaMalloc(&data_, count * sizeof(float)), "cudaMalloc");
  }
  ~DeviceBuffer() {
    (void)cudaSetDevice(device_);
    (void)cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  BufferView view() const {
    return BufferView{data_, count_, DType::kFloat32, Device{Device::Kind::kCuda, device_}};
  }
  // Host copies go through the legacy default stream, i.e. the compute stream the communicator
  // orders against, so they see the result of a waited Work without any extra synchronisation.
  void fill(const std::vector<float>& values) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaMemcpy(data_, values.data(), count_ * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy");
  }
  std::vector<float> read() const {
    std::vector<float> out(count_);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaMemcpy(out.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost),
               "cudaMemcpy");
    return out;
  }

 private:
  int device_;
  std::size_t count_;
  void* data_ = nullptr;
};

// Runs body(rank, communicator) on one thread per rank; rethrows the first failure.
void run_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
               const std::function<void(int, Communicator&)>& body) {
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r), *comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<std::unique_ptr<Communicator>> world(int n) {
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  return make_local_nccl_communicators(devices, kTimeout);
}

int device_count() { return cuda_device_count(); }

TEST(NcclGpu, AllReduceSumsOverEveryRank) {
  PW_REQUIRE_DEVICES(2);
  const int n = device_count();
  auto comms = world(n);
  run_ranks(comms, [n](int rank, Communicator& comm) {
    EXPECT_EQ(comm.backend_name(), "nccl");
    EXPECT_EQ(comm.size(), n);
    DeviceBuffer buf(rank, 1000);
    buf.fill(std::vector<float>(1000, static_cast<float>(rank + 1)));
    comm.all_reduce(buf.view(), ReduceOp::kSum, OpContext{})->wait(kTimeout);
    const float expected = static_cast<float>(n * (n + 1) / 2);
    for (float v : buf.read()) ASSERT_EQ(v, expected);
  });
}

TEST(NcclGpu, RingSendRecvInOneBatch) {
  PW_REQUIRE_DEVICES(2);
  const int n = device_count();
  auto comms = world(n);
  run_ranks(comms, [n](int rank, Communicator& comm) {
    DeviceBuffer out(rank, 257);
    DeviceBuffer in(rank, 257);
    out.fill(std::vector<float>(257, static_cast<float>(rank)));
    OpContext ctx;
    ctx.what = "ring";
    // Every rank sends first and receives second: without the group this could deadlock.
    comm.begin_p2p_batch();
    WorkPtr s = comm.send(out.view(), (rank + 1) % n, 0, ctx);
    WorkPtr r = comm.recv(in.view(), (rank + n - 1) % n, 0, ctx);
    comm.end_p2p_batch();
    s->wait(kTimeout);
    r->wait(kTimeout);
    for (float v : in.read()) ASSERT_EQ(v, static_cast<float>((rank + n - 1) % n));
  });
}

TEST(NcclGpu, BroadcastReduceAndBarrier) {
  PW_REQUIRE_DEVICES(2);
  const int n = device_count();
  auto comms = world(n);
  run_ranks(comms, [n](int rank, Communicator& comm) {
    DeviceBuffer buf(rank, 64);
    buf.fill(std::vector<float>(64, rank == 1 ? 42.0F : -1.0F));
    comm.broadcast(buf.view(), 1, OpContext{})->wait(kTimeout);
    for (float v : buf.read()) ASSERT_EQ(v, 42.0F);
    buf.fill(std::vector<float>(64, static_cast<float>(rank)));
    comm.reduce(buf.view(), 0, ReduceOp::kMax, OpContext{})->wait(kTimeout);
    if (rank == 0) {
      for (float v : buf.read()) ASSERT_EQ(v, static_cast<float>(n - 1));
    }
    comm.barrier(OpContext{})->wait(kTimeout);
  });
}

TEST(NcclGpu, SplitIntoPairs) {
  PW_REQUIRE_DEVICES(2);
  const int n = device_count() / 2 * 2;
  auto comms = world(n);
  run_ranks(comms, [n](int rank, Communicator& comm) {
    // Every split is collective over the parent, members or not, in the same order.
    std::vector<std::unique_ptr<Communicator>> mine;
    for (int first = 0; first < n; first += 2) {
      auto sub = comm.split({first, first + 1});
      if (rank / 2 * 2 == first) {
        ASSERT_NE(sub, nullptr);
        mine.push_back(std::move(sub));
      } else {
        ASSERT_EQ(sub, nullptr);
      }
    }
    ASSERT_EQ(mine.size(), 1u);
    Communicator& pair = *mine.front();
    EXPECT_EQ(pair.size(), 2);
    EXPECT_EQ(pair.rank(), rank % 2);
    EXPECT_EQ(pair.global_rank(pair.rank()), rank);
    DeviceBuffer buf(rank, 8);
    buf.fill(std::vector<float>(8, static_cast<float>(rank)));
    pair.all_reduce(buf.view(), ReduceOp::kSum, OpContext{})->wait(kTimeout);
    const float expected = static_cast<float>(rank / 2 * 2 * 2 + 1);
    for (float v : buf.read()) ASSERT_EQ(v, expected);
  });
}

TEST(NcclGpu, RecvWithoutMatchingSendTimesOutNamingPeerAndContext) {
  PW_REQUIRE_DEVICES(2);
  auto comms = world(2);
  run_ranks(comms, [](int rank, Communicator& comm) {
    if (rank != 0) return;  // rank 1 never sends
    DeviceBuffer buf(rank, 16);
    OpContext ctx;
    ctx.step = 4;
    ctx.stage = 1;
    ctx.microbatch = 3;
    ctx.what = "RECV_F";
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.recv(buf.view(), 1, 0, ctx)->wait(milliseconds(1500));
      ADD_FAILURE() << "no timeout";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0: recv from rank 1 (RECV_F stage 1 microbatch "
                                           "3 step 4): timed out after 1500 ms"),
                std::string::npos)
          << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    // Aborted: the communicator stays dead.
    EXPECT_THROW(comm.barrier(OpContext{}), TimeoutError);
  });
}

TEST(NcclGpu, CpuBuffersAreStagedThroughTheDevice) {
  PW_REQUIRE_DEVICES(2);
  auto comms = world(2);
  run_ranks(comms, [](int rank, Communicator& comm) {
    std::vector<std::int64_t> header(8, rank + 1);
    const BufferView cpu{header.data(), header.size(), DType::kInt64, Device{}};
    comm.all_reduce(cpu, ReduceOp::kSum, OpContext{})->wait(kTimeout);
    for (auto v : header) ASSERT_EQ(v, 3);
    std::vector<float> msg(5, rank == 0 ? 7.0F : 0.0F);
    const BufferView m{msg.data(), msg.size(), DType::kFloat32, Device{}};
    if (rank == 0) {
      comm.send(m, 1, 0, OpContext{})->wait(kTimeout);
    } else {
      comm.recv(m, 0, 0, OpContext{})->wait(kTimeout);
      for (float v : msg) ASSERT_EQ(v, 7.0F);
    }
  });
}

TEST(NcclGpu, BufferOnAnotherDeviceIsRejected) {
  PW_REQUIRE_DEVICES(2);
  auto comms = world(2);
  DeviceBuffer other(1, 4);  // rank 0 works on device 0
  EXPECT_THROW((void)comms[0]->all_reduce(other.view(), ReduceOp::kSum, OpContext{}), BackendError);
}

}  // namespace
}  // namespace pipewright::exec
