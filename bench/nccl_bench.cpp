// NCCL bandwidth curves through pipewright's NCCL Communicator, for comparison with nccl-tests
// (all_reduce_perf / sendrecv_perf -g N): one process, one thread per GPU, float32 in place.
//
//   nccl_bench [--gpus N] [--min-bytes B] [--max-bytes B] [--factor F] [--iters I] [--warmup W]
//              [--op all_reduce|sendrecv|both]
//
// Per size, each iteration starts all ranks together (host barrier), every rank issues the
// operation and waits for its Work; the iteration time is the slowest rank's. Reported: median
// time, algorithm bandwidth algbw = bytes / time and bus bandwidth as nccl-tests defines it:
//   all_reduce: busbw = algbw * 2 (n - 1) / n       sendrecv (ring, one batch): busbw = algbw
// Exits 1 with a clear message when this machine has no CUDA device (or sendrecv has < 2).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nccl/nccl_communicator.hpp"
#include "pipewright/graph/error.hpp"

namespace {

using pipewright::exec::BufferView;
using pipewright::exec::Communicator;
using pipewright::exec::Device;
using pipewright::exec::DType;
using pipewright::exec::OpContext;
using pipewright::exec::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kTimeout{120000};

struct Args {
  int gpus = 0;  // 0: all visible
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;  // 256 MiB
  int factor = 2;
  int iters = 20;
  int warmup = 5;
  std::string op = "both";
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "nccl_bench: " << problem
            << "\nusage: nccl_bench [--gpus N] [--min-bytes B] [--max-bytes B] [--factor F] "
               "[--iters I] [--warmup W] [--op all_reduce|sendrecv|both]\n";
  std::exit(2);
}

long long number(const char* flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) usage(std::string(flag) + " needs a positive integer");
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const char* value = argv[++i];
    if (flag == "--gpus") {
      a.gpus = static_cast<int>(number("--gpus", value));
    } else if (flag == "--min-bytes") {
      a.min_bytes = static_cast<std::size_t>(number("--min-bytes", value));
    } else if (flag == "--max-bytes") {
      a.max_bytes = static_cast<std::size_t>(number("--max-bytes", value));
    } else if (flag == "--factor") {
      a.factor = static_cast<int>(number("--factor", value));
    } else if (flag == "--iters") {
      a.iters = static_cast<int>(number("--iters", value));
    } else if (flag == "--warmup") {
      a.warmup = static_cast<int>(number("--warmup", value));
    } else if (flag == "--op") {
      a.op = value;
      if (a.op != "all_reduce" && a.op != "sendrecv" && a.op != "both") usage("bad --op");
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (a.factor < 2) usage("--factor must be >= 2");
  if (a.min_bytes > a.max_bytes) usage("--min-bytes > --max-bytes");
  return a;
}

// A reusable host barrier for the rank threads (C++17 has no std::barrier).
class HostBarrier {
 public:
  explicit HostBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const long generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation != generation_; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
  long generation_ = 0;
};

void cuda(cudaError_t r, const char* what) {
  if (r != cudaSuccess) {
    throw pipewright::BackendError(std::string(what) + ": " + cudaGetErrorString(r));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

// Median seconds per iteration of `op` at `bytes` over all ranks.
double measure(std::vector<std::unique_ptr<Communicator>>& comms, const std::string& op,
               std::size_t bytes, const Args& args) {
  const int n = static_cast<int>(comms.size());
  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
  const int total = args.warmup + args.iters;
  std::vector<std::vector<double>> seconds(comms.size(), std::vector<double>(total));
  std::vector<std::exception_ptr> errors(comms.size());
  HostBarrier barrier(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      void* send = nullptr;
      void* recv = nullptr;
      try {
        cuda(cudaSetDevice(r), "cudaSetDevice");
        cuda(cudaMalloc(&send, count * sizeof(float)), "cudaMalloc");
        cuda(cudaMalloc(&recv, count * sizeof(float)), "cudaMalloc");
        cuda(cudaMemset(send, 0, count * sizeof(float)), "cudaMemset");
        cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        const Device device{Device::Kind::kCuda, r};
        const BufferView out{send, count, DType::kFloat32, device};
        const BufferView in{recv, count, DType::kFloat32, device};
        Communicator& comm = *comms[static_cast<std::size_t>(r)];
        for (int it = 0; it < total; ++it) {
          barrier.arrive_and_wait();
          const auto start = Clock::now();
          if (op == "all_reduce") {
            comm.all_reduce(out, ReduceOp::kSum, OpContext{})->wait(kTimeout);
          } else {
            comm.begin_p2p_batch();
            auto s = comm.send(out, (r + 1) % n, 0, OpContext{});
            auto q = comm.recv(in, (r + n - 1) % n, 0, OpContext{});
            comm.end_p2p_batch();
            s->wait(kTimeout);
            q->wait(kTimeout);
          }
          seconds[static_cast<std::size_t>(r)][static_cast<std::size_t>(it)] =
              std::chrono::duration<double>(Clock::now() - start).count();
        }
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      (void)cudaFree(send);
      (void)cudaFree(recv);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<double> slowest;
  for (int it = args.warmup; it < total; ++it) {
    double worst = 0;
    for (const auto& rank : seconds) worst = std::max(worst, rank[static_cast<std::size_t>(it)]);
    slowest.push_back(worst);
  }
  return median(slowest);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    std::string why;
    const int found = pipewright::exec::cuda_device_count(&why);
    if (found == 0) {
      std::cerr << "nccl_bench: no CUDA device on this machine (" << why
                << "); nothing to measure. Run it on a GPU node (see docs/gpu.md).\n";
      return 1;
    }
    const int n = args.gpus == 0 ? found : args.gpus;
    if (n > found) {
      std::cerr << "nccl_bench: --gpus " << n << " but only " << found << " CUDA devices\n";
      return 1;
    }
    std::vector<int> devices;
    for (int d = 0; d < n; ++d) devices.push_back(d);
    auto comms = pipewright::exec::make_local_nccl_communicators(devices, kTimeout);

    std::vector<std::string> ops;
    if (args.op == "both" || args.op == "all_reduce") ops.push_back("all_reduce");
    if (args.op == "both" || args.op == "sendrecv") {
      if (n < 2) {
        std::cerr << "nccl_bench: sendrecv needs >= 2 GPUs; measuring all_reduce only\n";
      } else {
        ops.push_back("sendrecv");
      }
    }
    std::printf(
        "# pipewright nccl_bench: NCCL %s, %d GPU(s), float32 in place, median of %d "
        "iterations after %d warm-up\n",
        pipewright::exec::nccl_version().c_str(), n, args.iters, args.warmup);
    std::printf("# busbw: all_reduce = algbw * 2(n-1)/n, sendrecv = algbw (as nccl-tests)\n");
    std::printf("%-11s %14s %12s %12s %12s %12s\n", "op", "size_B", "count", "time_us",
                "algbw_GB/s", "busbw_GB/s");
    for (const std::string& op : ops) {
      for (std::size_t bytes = args.min_bytes; bytes <= args.max_bytes;
           bytes *= static_cast<std::size_t>(args.factor)) {
        const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
        const double t = measure(comms, op, bytes, args);
        const double algbw = static_cast<double>(count * sizeof(float)) / t / 1e9;
        const double busbw = op == "all_reduce" ? algbw * 2.0 * (n - 1) / n : algbw;
        std::printf("%-11s %14zu %12zu %12.1f %12.2f %12.2f\n", op.c_str(), count * sizeof(float),
                    count, t * 1e6, algbw, busbw);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "nccl_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
