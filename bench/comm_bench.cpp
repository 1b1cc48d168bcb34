// All-reduce bus bandwidth at 16 MB: pipewright's communicator vs the plain library, in one run,
// alternating iteration by iteration so both see the same machine load.
//   mpirun -np 2 pw_comm_bench --transport mpi     (pipewright MPI backend vs MPI_Allreduce)
//   pipewright launch --nproc 2 -- pw_comm_bench --transport gloo
//                                                  (pipewright Gloo backend vs c10d Gloo)
// Rank 0 prints the medians, the bus bandwidths (2(n-1)/n * bytes / time) and the ratio
// pipewright/plain of bus bandwidths. bench/comm_bench.sh runs both.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if PIPEWRIGHT_WITH_MPI
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"

namespace ex = pipewright::exec;
using Clock = std::chrono::steady_clock;

namespace {

ex::CommOptions comm_options(std::chrono::milliseconds timeout) {
  ex::CommOptions o;
  o.timeout = timeout;
  return o;
}

constexpr std::size_t kBytes = 16u << 20;
constexpr std::size_t kCount = kBytes / sizeof(float);
constexpr int kWarmup = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double seconds(const std::function<void()>& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void report(const char* what, const char* plain_name, int n, const std::vector<double>& plain,
            const std::vector<double>& ours) {
  const double factor = 2.0 * (n - 1) / n * double(kBytes) / 1e9;
  const double mp = median(plain), mo = median(ours);
  std::printf("%s all_reduce %zu MiB, %d ranks, %zu iterations (medians):\n", what, kBytes >> 20, n,
              plain.size());
  std::printf("  %-28s %8.3f ms  busbw %6.3f GB/s\n", plain_name, mp * 1e3, factor / mp);
  std::printf("  %-28s %8.3f ms  busbw %6.3f GB/s\n", "pipewright", mo * 1e3, factor / mo);
  std::printf("  ratio pipewright/plain busbw = %.3f (target >= 0.90)\n", mp / mo);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string transport = "gloo";
  int iterations = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--transport") == 0) transport = argv[i + 1];
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::atoi(argv[i + 1]);
  }
  try {
    const ex::WorldInfo world = ex::resolve_world({}, ex::current_environment());
    const auto timeout = std::chrono::milliseconds(120000);
    std::vector<float> a(kCount, 1.0f), b(kCount, 1.0f);
    std::vector<double> plain, ours;
    if (transport == "mpi") {
#if PIPEWRIGHT_WITH_MPI
      // pipewright's backend initialises MPI (with its settings, Note [Open MPI in-place
      // Iallreduce]); the plain side then uses the same MPI_COMM_WORLD.
      auto comm = ex::make_communicator(ex::Backend::kMpi, world, nullptr, comm_options(timeout));
      for (int it = 0; it < kWarmup + iterations; ++it) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double tp = seconds([&] {
          MPI_Allreduce(MPI_IN_PLACE, a.data(), int(kCount), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        });
        MPI_Barrier(MPI_COMM_WORLD);
        const double to = seconds([&] {
          comm->all_reduce({b.data(), kCount, ex::DType::kFloat32}, ex::ReduceOp::kSum, {})
              ->wait(timeout);
        });
        if (it >= kWarmup) {
          plain.push_back(tp);
          ours.push_back(to);
        }
      }
      comm.reset();
      if (world.rank == 0) report("MPI", "plain MPI_Allreduce", world.world_size, plain, ours);
      MPI_Finalize();
      return 0;
#else
      std::fprintf(stderr, "built without MPI\n");
      return 2;
#endif
    }
    // Gloo: pipewright's backend over its own store, and a plain ProcessGroupGloo over a plain
    // TCPStore on the next port.
    auto store = ex::make_tcp_store(world, timeout);
    ex::rendezvous(*store, world, timeout);
    auto comm =
        ex::make_communicator(ex::Backend::kGloo, world, store.get(), comm_options(timeout));
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(world.master_port + 1);
    so.isServer = world.rank == 0;
    so.numWorkers = world.world_size;
    so.timeout = timeout;
    auto plain_store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    opts->threads = 2;
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(plain_store, world.rank, world.world_size,
                                                          opts);
    std::vector<at::Tensor> tensors{torch::from_blob(a.data(), {std::int64_t(kCount)})};
    for (int it = 0; it < kWarmup + iterations; ++it) {
      pg->barrier()->wait();
      const double tp = seconds([&] { pg->allreduce(tensors)->wait(); });
      pg->barrier()->wait();
      const double to = seconds([&] {
        comm->all_reduce({b.data(), kCount, ex::DType::kFloat32}, ex::ReduceOp::kSum, {})
            ->wait(timeout);
      });
      if (it >= kWarmup) {
        plain.push_back(tp);
        ours.push_back(to);
      }
    }
    comm->barrier({})->wait(timeout);
    if (world.rank == 0)
      report("Gloo", "plain c10d ProcessGroupGloo", world.world_size, plain, ours);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pw_comm_bench: %s\n", e.what());
    return 1;
  }
}
