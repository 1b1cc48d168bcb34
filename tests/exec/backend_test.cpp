// The backend factory, and the Gloo backend driven by threads of this process (one
// ProcessGroupGloo per thread, rendezvous through a MemoryStore over loopback TCP). The
// multi-process checks of every backend are in comm_worker.cpp (label mp).
#include "pipewright/exec/backend.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/exec/fake_communicator.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong{20000};

TEST(Backend, ParseAndPrint) {
  for (Backend b : {Backend::kGloo, Backend::kMpi, Backend::kNccl, Backend::kFake}) {
    EXPECT_EQ(parse_backend(to_string(b)), b);
  }
  try {
    (void)parse_backend("carrier-pigeon");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("valid: gloo, mpi, nccl, fake"), std::string::npos);
  }
  EXPECT_TRUE(backend_compiled(Backend::kGloo));
  EXPECT_TRUE(backend_compiled(Backend::kFake));
}

TEST(Backend, FactoryChecksItsInputs) {
  WorldInfo w;
  CommOptions opts;
  EXPECT_THROW((void)make_communicator(Backend::kFake, w, nullptr, opts), ConfigError);
  EXPECT_THROW((void)make_communicator(Backend::kGloo, w, nullptr, opts), ConfigError);
  opts.timeout = milliseconds(0);
  EXPECT_THROW((void)make_communicator(Backend::kGloo, w, nullptr, opts), ConfigError);
  if (!backend_compiled(Backend::kNccl)) {
    try {
      (void)make_communicator(Backend::kNccl, w, nullptr, CommOptions{});
      FAIL();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("PIPEWRIGHT_WITH_NCCL=OFF"), std::string::npos);
    }
  }
}

TEST(Backend, FakeThroughTheFactory) {
  FakeWorld world(2);
  CommOptions opts;
  opts.fake_world = &world;
  WorldInfo w;
  w.world_size = 2;
  w.rank = 1;
  auto comm = make_communicator(Backend::kFake, w, nullptr, opts);
  EXPECT_EQ(comm->rank(), 1);
  EXPECT_EQ(comm->backend_name(), "fake");
  w.world_size = 3;
  w.rank = 0;
  EXPECT_THROW((void)make_communicator(Backend::kFake, w, nullptr, opts), ConfigError);
}

// Runs body on n threads, each with its own Gloo world communicator.
void run_gloo(int n, const std::function<void(int, Communicator&)>& body, bool final_barrier = true,
              bool shm_collectives = true) {
  MemoryStore store;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        WorldInfo w;
        w.rank = r;
        w.world_size = n;
        CommOptions opts;
        opts.timeout = kLong;
        opts.shm_collectives = shm_collectives;
        rendezvous(store, w, kLong);
        auto comm = make_communicator(Backend::kGloo, w, &store, opts);
        body(r, *comm);
        if (final_barrier) comm->barrier({})->wait(kLong);  // nobody leaves while others talk
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(GlooThreads, PointToPointAndCollectives) {
  run_gloo(3, [](int rank, Communicator& comm) {
    EXPECT_EQ(comm.backend_name(), "gloo");
    EXPECT_EQ(comm.size(), 3);
    EXPECT_EQ(comm.rank(), rank);
    // Ring exchange with polling on the receive side (Note [Gloo p2p completion]).
    std::vector<float> out{float(rank), float(rank) + 0.5f};
    std::vector<float> in(2);
    auto s = comm.send({out.data(), 2, DType::kFloat32}, (rank + 1) % 3, 5, {});
    auto r = comm.recv({in.data(), 2, DType::kFloat32}, (rank + 2) % 3, 5, {});
    const auto deadline = std::chrono::steady_clock::now() + kLong;
    while (!r->is_completed()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(milliseconds(1));
    }
    r->wait(kLong);
    s->wait(kLong);
    const float from = float((rank + 2) % 3);
    EXPECT_EQ(in, (std::vector<float>{from, from + 0.5f}));

    std::vector<double> v{double(rank), 1.0};
    comm.all_reduce({v.data(), 2, DType::kFloat64}, ReduceOp::kSum, {})->wait(kLong);
    EXPECT_EQ(v, (std::vector<double>{3.0, 3.0}));

    std::vector<std::int64_t> m{rank};
    comm.reduce({m.data(), 1, DType::kInt64}, 1, ReduceOp::kMax, {})->wait(kLong);
    if (rank == 1) {
      EXPECT_EQ(m[0], 2);
    }

    std::vector<std::int32_t> b{rank == 2 ? 77 : 0};
    comm.broadcast({b.data(), 1, DType::kInt32}, 2, {})->wait(kLong);
    EXPECT_EQ(b[0], 77);
  });
}

TEST(GlooThreads, SplitIntoPairs) {
  run_gloo(4, [](int rank, Communicator& comm) {
    auto low = comm.split({0, 1});
    auto high = comm.split({2, 3});
    Communicator* mine = rank < 2 ? low.get() : high.get();
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ((rank < 2 ? high : low), nullptr);
    EXPECT_EQ(mine->global_rank(0), rank < 2 ? 0 : 2);
    std::vector<float> v{float(rank)};
    mine->all_reduce({v.data(), 1, DType::kFloat32}, ReduceOp::kSum, {})->wait(kLong);
    EXPECT_EQ(v[0], rank < 2 ? 1.0f : 5.0f);
    mine->barrier({})->wait(kLong);
  });
}

TEST(GlooThreads, RecvTimeoutNamesPeerAndContext) {
  // A Gloo timeout closes every pair of the context (gloo's design): the communicator is
  // unusable afterwards, which is why timeouts are fatal to a run.
  run_gloo(
      2,
      [](int rank, Communicator& comm) {
        if (rank != 0) {
          // Stay connected past rank 0's deadline (leaving would be a PeerError instead).
          std::this_thread::sleep_for(milliseconds(800));
          return;
        }
        std::vector<float> v(1);
        try {
          comm.recv({v.data(), 1, DType::kFloat32}, 1, 9, OpContext{4, 1, 3, "RECV_F"})
              ->wait(milliseconds(200));
          ADD_FAILURE() << "expected TimeoutError";
        } catch (const TimeoutError& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("rank 0: recv from rank 1 (RECV_F stage 1 microbatch 3 step 4)"),
                    std::string::npos)
              << msg;
        }
      },
      false);
}

// Note [Shared-memory all-reduce]: buffers from allocate_collective_buffer are reduced through
// shared memory (ranks are threads here, each mapping the object separately, as processes do).
void shared_buffer_all_reduces(int n, bool shm) {
  std::vector<std::vector<float>> results(static_cast<std::size_t>(n));
  run_gloo(
      n,
      [&](int rank, Communicator& comm) {
        constexpr std::size_t kCount = 1003;  // not a multiple of n or of a cache line
        auto a = comm.allocate_collective_buffer(kCount * sizeof(float));
        auto b = comm.allocate_collective_buffer(64 * sizeof(double));
        auto* x = static_cast<float*>(a.get());
        auto* y = static_cast<double*>(b.get());
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(x) % 64, 0u);
        for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(x[i], 0.0f) << i;  // zero-filled
        for (int round = 0; round < 3; ++round) {
          for (std::size_t i = 0; i < kCount; ++i) x[i] = float(rank + 1) * float(i + round);
          for (std::size_t i = 0; i < 64; ++i) y[i] = rank == 1 ? double(i) : -1.0;
          // A sub-range of `a` (elements 5 .. 1002), then all of `b` with max, then a heap
          // buffer (Gloo's path), all in flight at once.
          auto wa = comm.all_reduce({x + 5, kCount - 5, DType::kFloat32}, ReduceOp::kSum, {});
          auto wb = comm.all_reduce({y, 64, DType::kFloat64}, ReduceOp::kMax, {});
          std::vector<float> heap{float(rank)};
          auto wh = comm.all_reduce({heap.data(), 1, DType::kFloat32}, ReduceOp::kSum, {});
          wa->wait(kLong);
          wb->wait(kLong);
          wh->wait(kLong);
          const float ranks_sum = float(n * (n + 1) / 2);
          for (std::size_t i = 0; i < 5; ++i) {
            ASSERT_EQ(x[i], float(rank + 1) * float(i + round)) << "outside the range " << i;
          }
          for (std::size_t i = 5; i < kCount; ++i) {
            ASSERT_EQ(x[i], ranks_sum * float(i + round)) << "rank " << rank << " element " << i;
          }
          for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(y[i], double(i)) << i;
          EXPECT_EQ(heap[0], float(n * (n - 1) / 2));
        }
        // Inexact sums: every replica must hold the same bits.
        for (std::size_t i = 0; i < kCount; ++i) x[i] = 0.1f * float(rank + 1) + 1e-3f * float(i);
        comm.all_reduce({x, kCount, DType::kFloat32}, ReduceOp::kSum, {})->wait(kLong);
        results[static_cast<std::size_t>(rank)].assign(x, x + kCount);
      },
      true, shm);
  for (int r = 1; r < n; ++r) EXPECT_EQ(results[static_cast<std::size_t>(r)], results[0]) << r;
}

TEST(GlooThreads, SharedMemoryAllReduce) {
  for (int n : {2, 3, 4}) shared_buffer_all_reduces(n, true);
}

TEST(GlooThreads, CollectiveBufferWithoutSharedMemory) { shared_buffer_all_reduces(3, false); }

TEST(GlooThreads, SharedMemoryAllReduceTimeoutNamesTheMissingRank) {
  run_gloo(
      3,
      [](int rank, Communicator& comm) {
        auto a = comm.allocate_collective_buffer(256 * sizeof(float));
        if (rank == 2) return;  // never joins the all-reduce
        auto* x = static_cast<float*>(a.get());
        try {
          comm.all_reduce({x, 256, DType::kFloat32}, ReduceOp::kSum, OpContext{7, 0, -1, "bucket"})
              ->wait(milliseconds(300));
          ADD_FAILURE() << "expected TimeoutError";
        } catch (const TimeoutError& e) {
          const std::string msg = e.what();
          EXPECT_NE(
              msg.find("rank " + std::to_string(rank) + ": all_reduce (bucket stage 0 step 7)"),
              std::string::npos)
              << msg;
          EXPECT_NE(msg.find("waiting for rank 2"), std::string::npos) << msg;
        }
      },
      false);
}

TEST(GlooThreads, SharedMemoryAllReduceRejectsMismatchedRanges) {
  run_gloo(
      2,
      [](int rank, Communicator& comm) {
        auto a = comm.allocate_collective_buffer(256 * sizeof(float));
        auto* x = static_cast<float*>(a.get());
        try {
          comm.all_reduce({x + (rank == 0 ? 0 : 16), 128, DType::kFloat32}, ReduceOp::kSum, {})
              ->wait(kLong);
          ADD_FAILURE() << "expected BackendError";
        } catch (const BackendError& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("rank " + std::to_string(1 - rank) + " all-reduces another part"),
                    std::string::npos)
              << msg;
        }
      },
      false);
}

}  // namespace
}  // namespace pipewright::exec
