// One conformance suite over every Communicator backend (issue 19): the same semantic checks,
// typed over a backend harness that runs a body on every rank of a fresh world.
//   Fake: threads of this process (FakeWorld).
//   Gloo: threads of this process, one ProcessGroupGloo each, rendezvous through a MemoryStore,
//         bound to 127.0.0.1.
//   GlooShm: the same, after connect_p2p() to every peer: point-to-point messages through
//         shared-memory rings of the minimum size (Note [Shared-memory point-to-point]).
//   GlooTcp2, GlooTcp4: Gloo at 2 and 4 ranks with every shared-memory path off (as between
//         hosts): the sharded collectives run as the TCP ring (Note [TCP ring collectives]).
//   Mpi:  this process is one rank; runs only under mpirun (comm_mp.sh conformance-mpi*), else
//         skipped. A timeout or a failed operation ends an MPI job with MPI_Abort at exit
//         (Note [MPI deadlines and shutdown]), so those two tests run in mpirun jobs of their own.
//   Nccl: threads of this process, one CUDA device each (make_local_nccl_communicators); skipped
//         without PIPEWRIGHT_WITH_NCCL or with fewer than two CUDA devices.
// Every wait has a deadline, so a broken backend fails a test instead of hanging it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/reduce_kernels.hpp"
#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/exec/fake_communicator.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"
#if PIPEWRIGHT_WITH_NCCL
#include "nccl/nccl_communicator.hpp"
#endif

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong{20000};
using Body = std::function<void(Communicator&)>;

// Runs body on one thread per rank, each with the communicator make(rank) returns (called on
// that thread: creating a communicator is collective). `final_barrier`: nobody leaves while
// others may still talk to it.
void run_threads(int n, const std::function<std::unique_ptr<Communicator>(int)>& make,
                 const Body& body, bool final_barrier) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = make(r);
        body(*comm);
        if (final_barrier) comm->barrier({})->wait(kLong);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// What a harness declares: its name, world size, why it cannot run here (empty: it can), and
// run(body, final_barrier). Traits name the documented differences between transports.
struct FakeHarness {
  static constexpr const char* kName = "Fake";
  static constexpr bool kMatchesTags = true;  // NCCL matches by posting order only
  // A receive of a shorter message than its buffer fails (BackendError). NCCL sends no sizes;
  // Gloo accepts a shorter message silently (and a longer one aborts the process: gloo enforces
  // the length in its I/O thread).
  static constexpr bool kChecksSizes = true;
  // A rank whose communicator is destroyed makes its peers' operations fail with PeerError while
  // the others go on. Under MPI and NCCL a lost rank ends the job.
  static constexpr bool kSurvivesPeerExit = true;
  // A 16-bit sum in float32, rounded once (issue 44).
  static constexpr bool kSumsHalfInFloat32 = true;
  // allocate_collective_buffer gives shared memory that Gloo reduces in 16 bits (Gloo only).
  static constexpr bool kShmCollectives = false;
  static int world_size() { return 3; }
  static std::string unavailable() { return ""; }
  static void run(const Body& body, bool final_barrier) {
    FakeWorld world(world_size());
    run_threads(
        world_size(), [&](int r) { return world.communicator(r); }, body, final_barrier);
  }
};

// A Gloo world of `n` threads; with `shm_p2p`, each rank connects point-to-point to every
// other (P2PLink hints of 0 bytes: the smallest rings, so large messages go in chunks).
void run_gloo(int n, bool shm_p2p, const Body& body, bool final_barrier,
              milliseconds timeout = kLong, bool shm_allowed = true, bool shm_collectives = true) {
  MemoryStore store;
  run_threads(
      n,
      [&](int r) {
        WorldInfo w;
        w.rank = r;
        w.world_size = n;
        w.master_addr = "127.0.0.1";
        CommOptions opts;
        opts.timeout = timeout;
        opts.shm_p2p = shm_allowed;
        opts.shm_collectives = shm_collectives;
        rendezvous(store, w, kLong);
        auto comm = make_communicator(Backend::kGloo, w, &store, opts);
        if (shm_p2p) {
          std::vector<P2PLink> links;
          for (int p = 0; p < n; ++p) {
            if (p != r) links.push_back(P2PLink{p, 0, 0});
          }
          comm->connect_p2p(links);
        }
        return comm;
      },
      body, final_barrier);
}

struct GlooHarness {
  static constexpr const char* kName = "Gloo";
  static constexpr bool kMatchesTags = true;
  static constexpr bool kChecksSizes = false;
  static constexpr bool kSurvivesPeerExit = true;
  // A 16-bit sum in float32, rounded once (issue 44).
  static constexpr bool kSumsHalfInFloat32 = true;
  static constexpr bool kShmCollectives = true;
  static int world_size() { return 3; }
  static std::string unavailable() { return ""; }
  static void run(const Body& body, bool final_barrier) {
    run_gloo(world_size(), false, body, final_barrier);
  }
};

// Gloo with every shared-memory path off, as between hosts: point-to-point and the collectives
// over TCP, the sharded collectives as the TCP ring (Note [TCP ring collectives]), at 2 and 4
// ranks (the Gloo harness runs 3).
template <int N>
struct GlooTcpHarness {
  static constexpr const char* kName = N == 2 ? "GlooTcp2" : "GlooTcp4";
  static constexpr bool kMatchesTags = true;
  static constexpr bool kChecksSizes = false;
  static constexpr bool kSurvivesPeerExit = true;
  static constexpr bool kSumsHalfInFloat32 = true;
  static constexpr bool kShmCollectives = false;
  static int world_size() { return N; }
  static std::string unavailable() { return ""; }
  static void run(const Body& body, bool final_barrier) {
    run_gloo(N, false, body, final_barrier, kLong, false, false);
  }
};

struct GlooShmHarness {
  static constexpr const char* kName = "GlooShm";
  static constexpr bool kMatchesTags = true;
  static constexpr bool kChecksSizes = true;  // unlike Gloo's TCP
  static constexpr bool kSurvivesPeerExit = true;
  // A 16-bit sum in float32, rounded once (issue 44).
  static constexpr bool kSumsHalfInFloat32 = true;
  static constexpr bool kShmCollectives = true;
  static int world_size() { return 3; }
  static std::string unavailable() { return ""; }
  static void run(const Body& body, bool final_barrier) {
    run_gloo(world_size(), true, body, final_barrier);
  }
};

struct MpiHarness {
  static constexpr const char* kName = "Mpi";
  static constexpr bool kMatchesTags = true;
  static constexpr bool kChecksSizes = true;
  static constexpr bool kSurvivesPeerExit = false;
  // A 16-bit sum in float32, rounded once (issue 44): widened on the wire.
  static constexpr bool kSumsHalfInFloat32 = true;
  static constexpr bool kShmCollectives = false;
  static int world_size() {
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    return size != nullptr ? std::atoi(size) : 0;
  }
  static std::string unavailable() {
    if (!backend_compiled(Backend::kMpi)) return "built without MPI";
    if (world_size() < 2) return "not under mpirun with >= 2 ranks (comm_mp.sh conformance-mpi)";
    return "";
  }
  static void run(const Body& body, bool final_barrier) {
    const WorldInfo w = resolve_world({}, current_environment());
    CommOptions opts;
    opts.timeout = kLong;
    auto comm = make_communicator(Backend::kMpi, w, nullptr, opts);
    try {
      body(*comm);
      if (final_barrier) comm->barrier({})->wait(kLong);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << w.rank << ": " << e.what();
    }
  }
};

struct NcclHarness {
  static constexpr const char* kName = "Nccl";
  static constexpr bool kMatchesTags = false;
  static constexpr bool kChecksSizes = false;
  static constexpr bool kSurvivesPeerExit = false;
  // A 16-bit sum in float32, rounded once (issue 44): this suite's buffers are host memory,
  // which the backend widens before staging (device buffers keep NCCL's 16-bit sum).
  static constexpr bool kSumsHalfInFloat32 = true;
  static constexpr bool kShmCollectives = false;
  static int world_size() {
#if PIPEWRIGHT_WITH_NCCL
    return std::min(cuda_device_count(), 4);
#else
    return 0;
#endif
  }
  static std::string unavailable() {
#if PIPEWRIGHT_WITH_NCCL
    std::string detail;
    const int count = cuda_device_count(&detail);
    if (count < 2) {
      return "no CUDA device: skipped (needs 2, found " + std::to_string(count) +
             (detail.empty() ? "" : ": " + detail) + ")";
    }
    return "";
#else
    return "built without NCCL";
#endif
  }
  static void run([[maybe_unused]] const Body& body, [[maybe_unused]] bool final_barrier) {
#if PIPEWRIGHT_WITH_NCCL
    const int n = world_size();
    std::vector<int> devices;
    for (int d = 0; d < n; ++d) devices.push_back(d);
    auto comms = make_local_nccl_communicators(devices, kLong);
    run_threads(
        n, [&](int r) { return std::move(comms[static_cast<std::size_t>(r)]); }, body,
        final_barrier);
#endif
  }
};

template <typename H>
class Conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = H::unavailable();
    if (!why.empty()) GTEST_SKIP() << H::kName << ": " << why;
  }
  static int n() { return H::world_size(); }
  static void run(const Body& body, bool final_barrier = true) { H::run(body, final_barrier); }
  static std::string lower_name() {
    std::string name = H::kName;
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
  }
};

struct HarnessNames {
  template <typename H>
  static std::string GetName(int /*index*/) {
    return H::kName;
  }
};

using Harnesses = ::testing::Types<FakeHarness, GlooHarness, GlooShmHarness, GlooTcpHarness<2>,
                                   GlooTcpHarness<4>, MpiHarness, NcclHarness>;
TYPED_TEST_SUITE(Conformance, Harnesses, HarnessNames);

template <typename T>
BufferView view(std::vector<T>& v, DType dtype) {
  return BufferView{v.data(), v.size(), dtype};
}

TYPED_TEST(Conformance, AccessorsDescribeTheGroup) {
  const int n = this->n();
  std::string name = this->lower_name();
  if (name.rfind("gloo", 0) == 0) name = "gloo";  // Gloo with or without shared memory
  this->run([&](Communicator& comm) {
    EXPECT_EQ(comm.size(), n);
    EXPECT_GE(comm.rank(), 0);
    EXPECT_LT(comm.rank(), n);
    EXPECT_EQ(comm.backend_name(), name);
    for (int r = 0; r < n; ++r) EXPECT_EQ(comm.global_rank(r), r);  // the world
    EXPECT_EQ(comm.global_rank(-1), -1);
    EXPECT_EQ(comm.global_rank(n), -1);
  });
}

// A ring in both directions; with tags, the receives are posted in the other order than the
// sends, so matching must be by (peer, tag), not by arrival.
TYPED_TEST(Conformance, SendRecvMatchesPeerAndTag) {
  const int n = this->n();
  this->run([&](Communicator& comm) {
    const int me = comm.rank(), right = (me + 1) % n, left = (me + n - 1) % n;
    std::vector<float> a(100, float(me * 10 + 1)), b(3, float(me * 10 + 2));
    std::vector<float> from_left(100, -1), from_left_b(3, -1), from_right(100, -1);
    comm.begin_p2p_batch();
    std::vector<WorkPtr> works;
    works.push_back(comm.send(view(a, DType::kFloat32), right, 1, {}));
    works.push_back(comm.send(view(b, DType::kFloat32), right, 2, {}));
    works.push_back(comm.send(view(a, DType::kFloat32), left, 3, {}));
    if (TypeParam::kMatchesTags) {
      works.push_back(comm.recv(view(from_left_b, DType::kFloat32), left, 2, {}));
      works.push_back(comm.recv(view(from_left, DType::kFloat32), left, 1, {}));
    } else {
      works.push_back(comm.recv(view(from_left, DType::kFloat32), left, 1, {}));
      works.push_back(comm.recv(view(from_left_b, DType::kFloat32), left, 2, {}));
    }
    works.push_back(comm.recv(view(from_right, DType::kFloat32), right, 3, {}));
    comm.end_p2p_batch();
    for (auto& w : works) w->wait(kLong);
    for (auto& w : works) EXPECT_TRUE(w->is_completed());
    EXPECT_EQ(from_left, std::vector<float>(100, float(left * 10 + 1)));
    EXPECT_EQ(from_left_b, std::vector<float>(3, float(left * 10 + 2)));
    EXPECT_EQ(from_right, std::vector<float>(100, float(right * 10 + 1)));
  });
}

// Every rank sends a message of ~1 MiB (not a multiple of 64 bytes) to both neighbours before
// receiving anything: a shared-memory
// ring smaller than the message goes in chunks while the receiver has posted nothing, so a
// sender waiting for room must keep draining its own incoming rings.
TYPED_TEST(Conformance, LargeMessagesBothWaysBeforeAnyReceive) {
  const int n = this->n();
  this->run([&](Communicator& comm) {
    const int me = comm.rank(), right = (me + 1) % n, left = (me + n - 1) % n;
    constexpr std::size_t kCount = (1 << 18) + 3;
    std::vector<float> to_right(kCount), to_left(kCount);
    for (std::size_t i = 0; i < kCount; ++i) {
      to_right[i] = float(me * 1000003 + i);
      to_left[i] = -float(me * 1000003 + i);
    }
    std::vector<float> from_left(kCount, 0), from_right(kCount, 0);
    comm.begin_p2p_batch();
    std::vector<WorkPtr> works;
    works.push_back(comm.send(view(to_right, DType::kFloat32), right, 5, {}));
    works.push_back(comm.send(view(to_left, DType::kFloat32), left, 7, {}));
    works.push_back(comm.recv(view(from_right, DType::kFloat32), right, 7, {}));
    works.push_back(comm.recv(view(from_left, DType::kFloat32), left, 5, {}));
    comm.end_p2p_batch();
    for (auto& w : works) w->wait(kLong);
    for (std::size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(from_left[i], float(left * 1000003 + i)) << i;
      ASSERT_EQ(from_right[i], -float(right * 1000003 + i)) << i;
    }
  });
}

// Issue 44: one bfloat16 (and float16) sum on every CPU transport: the inputs are summed in
// float32 and the sum rounded once, on buffers the communicator allocated (Gloo: shared memory
// among one host's ranks) and on plain ones (Gloo: TCP, widened). 1 + 2^-8 + 2^-8 = 1 + 2^-7 is
// exact in bfloat16, but rounding after each add gives 1 (1 + 2^-8 is a tie that rounds to even).
// Ranks beyond the third add 0; over two ranks (MPI's conformance-mpi 2) the one add is a tie. MPI
// widens to float32 on the wire; NCCL stages the sum in float32 on the device.
TYPED_TEST(Conformance, HalfPrecisionSumIsFloat32RoundedOnce) {
  if (!TypeParam::kSumsHalfInFloat32) GTEST_SKIP() << TypeParam::kName << " sums in 16 bits";
  this->run([&](Communicator& comm) {
    const int me = comm.rank();
    constexpr std::size_t kCount = 4099;  // several chunks of the shared-memory all-reduce
    for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
      const float tiny = dtype == DType::kBFloat16 ? 1.0f / 256 : 1.0f / 2048;
      const float input = me == 0 ? 1.0f : me <= 2 ? tiny : 0.0f;
      const std::uint16_t bits = dtype == DType::kBFloat16 ? detail::float_to_bfloat16(input)
                                                           : detail::float_to_half(input);
      // Two ranks add once (1 + tiny, a tie, rounds to 1); three or more show the rounding.
      const float exact = 1.0f + float(std::min(comm.size() - 1, 2)) * tiny;
      const float want = dtype == DType::kBFloat16
                             ? detail::bfloat16_to_float(detail::float_to_bfloat16(exact))
                             : detail::half_to_float(detail::float_to_half(exact));
      for (bool shared : {true, false}) {
        std::shared_ptr<void> mem;
        std::vector<std::uint16_t> heap;
        std::uint16_t* data = nullptr;
        if (shared) {
          mem = comm.allocate_collective_buffer(kCount * 2);
          data = static_cast<std::uint16_t*>(mem.get());
        } else {
          heap.resize(kCount);
          data = heap.data();
        }
        std::fill(data, data + kCount, bits);
        // What the data-parallel wire statistics count: Gloo's TCP, MPI and NCCL (host buffers)
        // send them widened.
        const bool widened =
            (comm.backend_name() == "gloo" && (!shared || !TypeParam::kShmCollectives)) ||
            comm.backend_name() == "mpi" || comm.backend_name() == "nccl";
        EXPECT_EQ(comm.all_reduce_element_bytes(BufferView{data, kCount, dtype}),
                  widened ? 4u : 2u);
        comm.all_reduce(BufferView{data, kCount, dtype}, ReduceOp::kSum, {})->wait(kLong);
        for (std::size_t i = 0; i < kCount; ++i) {
          const float got = dtype == DType::kBFloat16 ? detail::bfloat16_to_float(data[i])
                                                      : detail::half_to_float(data[i]);
          ASSERT_EQ(got, want) << to_string(dtype) << (shared ? " shared buffer" : " plain buffer")
                               << " element " << i << " on rank " << me;
        }
      }
    }
  });
}

TYPED_TEST(Conformance, AllReduceSumsMaxAndMin) {
  const int n = this->n();
  this->run([&](Communicator& comm) {
    const int me = comm.rank();
    std::vector<float> f(1 << 16);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = float(me + 1) * float(i % 7);
    comm.all_reduce(view(f, DType::kFloat32), ReduceOp::kSum, {})->wait(kLong);
    const float tri = float(n * (n + 1) / 2);
    for (std::size_t i = 0; i < f.size(); i += 997) ASSERT_EQ(f[i], tri * float(i % 7)) << i;
    std::vector<double> d{double(me), -double(me)};
    comm.all_reduce(view(d, DType::kFloat64), ReduceOp::kMax, {})->wait(kLong);
    EXPECT_EQ(d, (std::vector<double>{double(n - 1), 0.0}));
    std::vector<std::int64_t> l{me + 5, 1};
    comm.all_reduce(view(l, DType::kInt64), ReduceOp::kMin, {})->wait(kLong);
    EXPECT_EQ(l, (std::vector<std::int64_t>{5, 1}));
    std::vector<std::int32_t> s{me, 1};
    comm.all_reduce(view(s, DType::kInt32), ReduceOp::kSum, {})->wait(kLong);
    EXPECT_EQ(s, (std::vector<std::int32_t>{n * (n - 1) / 2, n}));
  });
}

// Sharded collectives (ZeRO, issue 43): pieces of k elements, k odd so that nothing aligns.
TYPED_TEST(Conformance, ReduceScatterAndAllGatherOnEqualPieces) {
  if (std::string(TypeParam::kName) == "Nccl") {
    GTEST_SKIP() << "NCCL's reduce_scatter/all_gather take device buffers (zero_nccl tests)";
  }
  const int n = this->n();
  this->run([&](Communicator& comm) {
    const int me = comm.rank();
    const std::size_t k = 1001;
    const std::size_t nk = k * static_cast<std::size_t>(n);
    std::vector<float> in(nk);
    for (std::size_t i = 0; i < nk; ++i) in[i] = float(me + 1) * float(i % 13);
    std::vector<float> out(k, -1.0f);
    comm.reduce_scatter(view(in, DType::kFloat32), view(out, DType::kFloat32), ReduceOp::kSum, {})
        ->wait(kLong);
    const float tri = float(n * (n + 1) / 2);
    for (std::size_t j = 0; j < k; ++j) {
      ASSERT_EQ(out[j], tri * float((static_cast<std::size_t>(me) * k + j) % 13)) << j;
    }
    // In place: `out` is piece rank() of `in` (ZeRO-3's CPU buckets).
    std::vector<float> ip(nk);
    for (std::size_t i = 0; i < nk; ++i) ip[i] = float(me + 1) * float(i % 13);
    const std::size_t at = static_cast<std::size_t>(me) * k;
    comm.reduce_scatter(view(ip, DType::kFloat32), BufferView{ip.data() + at, k, DType::kFloat32},
                        ReduceOp::kSum, {})
        ->wait(kLong);
    for (std::size_t j = 0; j < k; ++j) ASSERT_EQ(ip[at + j], out[j]) << "in place " << j;
    std::vector<std::int64_t> li(static_cast<std::size_t>(n) * 2);
    for (std::size_t i = 0; i < li.size(); ++i) li[i] = me * 10 + static_cast<std::int64_t>(i);
    std::vector<std::int64_t> lo(2);
    comm.reduce_scatter(view(li, DType::kInt64), view(lo, DType::kInt64), ReduceOp::kMax, {})
        ->wait(kLong);
    EXPECT_EQ(lo, (std::vector<std::int64_t>{(n - 1) * 10 + 2 * me, (n - 1) * 10 + 2 * me + 1}));
    // bfloat16: 1 + 2^-8 is not a bfloat16; the sum of n of 2^-8 and one 1 is (in float32, rounded
    // once), while rounding after each addition would lose every 2^-8.
    const auto bf16 = [](float f) {
      std::uint32_t u = 0;
      std::memcpy(&u, &f, 4);
      return static_cast<std::uint16_t>(u >> 16);
    };
    std::vector<std::uint16_t> hi(nk, bf16(me == 0 ? 1.0f : 0.00390625f));
    std::vector<std::uint16_t> ho(k, 0);
    comm.reduce_scatter(view(hi, DType::kBFloat16), view(ho, DType::kBFloat16), ReduceOp::kSum, {})
        ->wait(kLong);
    // 1 + (n-1) 2^-8 rounded to bfloat16 once: 1 (a tie, to even) at 2 ranks, 1 + 2^-7 at 3,
    // 1 + 2^-6 at 4 (a tie again).
    const std::uint16_t expect = detail::float_to_bfloat16(1.0f + float(n - 1) * 0.00390625f);
    for (std::size_t j = 0; j < k; j += 97) ASSERT_EQ(ho[j], expect) << j;
    // all_gather, out of place and in place.
    std::vector<float> piece(k);
    for (std::size_t j = 0; j < k; ++j) piece[j] = float(me * 10000 + static_cast<int>(j));
    std::vector<float> whole(nk, -1.0f);
    comm.all_gather(view(piece, DType::kFloat32), view(whole, DType::kFloat32), {})->wait(kLong);
    for (std::size_t i = 0; i < nk; i += 7) {
      ASSERT_EQ(whole[i], float(static_cast<int>(i / k) * 10000 + static_cast<int>(i % k))) << i;
    }
    std::vector<float> inplace(nk, -1.0f);
    for (std::size_t j = 0; j < k; ++j) inplace[static_cast<std::size_t>(me) * k + j] = piece[j];
    BufferView mine{inplace.data() + static_cast<std::size_t>(me) * k, k, DType::kFloat32};
    comm.all_gather(mine, view(inplace, DType::kFloat32), {})->wait(kLong);
    EXPECT_EQ(inplace, whole);
    // On collective buffers (Gloo: shared memory among the ranks of one host, Note
    // [Shared-memory sharded collectives]), twice, so that a buffer is reused.
    auto in_mem = comm.allocate_collective_buffer(nk * sizeof(float));
    auto out_mem = comm.allocate_collective_buffer(nk * sizeof(float));
    auto* cin = static_cast<float*>(in_mem.get());
    auto* cout = static_cast<float*>(out_mem.get());
    for (int round = 0; round < 2; ++round) {
      for (std::size_t i = 0; i < nk; ++i) cin[i] = float(me + 1 + round) * float(i % 13);
      comm.reduce_scatter(BufferView{cin, nk, DType::kFloat32}, view(out, DType::kFloat32),
                          ReduceOp::kSum, {})
          ->wait(kLong);
      const float sum = tri + float(n * round);
      for (std::size_t j = 0; j < k; ++j) {
        ASSERT_EQ(out[j], sum * float((static_cast<std::size_t>(me) * k + j) % 13)) << j;
      }
      for (std::size_t j = 0; j < k; ++j) cout[static_cast<std::size_t>(me) * k + j] = piece[j];
      comm.all_gather(BufferView{cout + static_cast<std::size_t>(me) * k, k, DType::kFloat32},
                      BufferView{cout, nk, DType::kFloat32}, {})
          ->wait(kLong);
      EXPECT_EQ(std::vector<float>(cout, cout + nk), whole);
      comm.all_gather(view(piece, DType::kFloat32), BufferView{cout, nk, DType::kFloat32}, {})
          ->wait(kLong);
      EXPECT_EQ(std::vector<float>(cout, cout + nk), whole);
    }
  });
}

TYPED_TEST(Conformance, ReduceAndBroadcastFromEveryRoot) {
  const int n = this->n();
  this->run([&](Communicator& comm) {
    const int me = comm.rank();
    for (int root = 0; root < n; ++root) {
      std::vector<std::int32_t> v{me, 1};
      comm.reduce(view(v, DType::kInt32), root, ReduceOp::kSum, {})->wait(kLong);
      if (me == root) {
        EXPECT_EQ(v, (std::vector<std::int32_t>{n * (n - 1) / 2, n})) << "root " << root;
      }
      std::vector<double> b(5, me == root ? 3.25 + root : -1.0);
      comm.broadcast(view(b, DType::kFloat64), root, {})->wait(kLong);
      EXPECT_EQ(b, std::vector<double>(5, 3.25 + root)) << "root " << root;
    }
  });
}

// The last rank arrives late and broadcasts when it arrived (CLOCK_MONOTONIC is one clock for
// every process of the host): no rank may leave the barrier before that.
TYPED_TEST(Conformance, BarrierWaitsForTheLastRank) {
  const int n = this->n();
  this->run([&](Communicator& comm) {
    const bool last = comm.rank() == n - 1;
    std::vector<std::int64_t> arrived{0};
    if (last) {
      std::this_thread::sleep_for(milliseconds(150));
      arrived[0] = std::chrono::steady_clock::now().time_since_epoch().count();
    }
    comm.barrier({})->wait(kLong);
    const auto left = std::chrono::steady_clock::now().time_since_epoch().count();
    comm.broadcast(view(arrived, DType::kInt64), n - 1, {})->wait(kLong);
    EXPECT_GE(left, arrived[0]);
  });
}

// Pairs of neighbours and the parity groups, created by every rank in one order; members get a
// working communicator with their own numbering, non-members nullptr.
TYPED_TEST(Conformance, SplitIntoSubgroups) {
  const int n = this->n();
  this->run([&](Communicator& comm) {
    const int me = comm.rank();
    std::vector<std::unique_ptr<Communicator>> pairs;
    for (int r = 0; r + 1 < n; ++r) pairs.push_back(comm.split({r, r + 1}));
    std::vector<int> even, odd;
    for (int r = 0; r < n; ++r) (r % 2 == 0 ? even : odd).push_back(r);
    auto even_comm = comm.split(even);
    auto odd_comm = comm.split(odd);
    for (int r = 0; r + 1 < n; ++r) {
      auto& pc = pairs[static_cast<std::size_t>(r)];
      ASSERT_EQ(pc != nullptr, me == r || me == r + 1) << "pair " << r;
      if (!pc) continue;
      EXPECT_EQ(pc->size(), 2);
      EXPECT_EQ(pc->rank(), me - r);
      EXPECT_EQ(pc->global_rank(0), r);
      EXPECT_EQ(pc->global_rank(1), r + 1);
      std::vector<float> v{float(me)};
      pc->all_reduce(view(v, DType::kFloat32), ReduceOp::kSum, {})->wait(kLong);
      EXPECT_EQ(v[0], float(2 * r + 1));
      std::vector<float> p{float(me)};
      pc->begin_p2p_batch();
      auto w = pc->rank() == 0 ? pc->send(view(p, DType::kFloat32), 1, 7, {})
                               : pc->recv(view(p, DType::kFloat32), 0, 7, {});
      pc->end_p2p_batch();
      w->wait(kLong);
      EXPECT_EQ(p[0], float(r));
    }
    Communicator* parity = me % 2 == 0 ? even_comm.get() : odd_comm.get();
    ASSERT_NE(parity, nullptr);
    EXPECT_EQ(me % 2 == 0 ? odd_comm : even_comm, nullptr);
    EXPECT_EQ(parity->global_rank(parity->rank()), me);
    std::int64_t expect = 0;
    for (int r = me % 2; r < n; r += 2) expect += r;
    std::vector<std::int64_t> v{me};
    parity->all_reduce(view(v, DType::kInt64), ReduceOp::kSum, {})->wait(kLong);
    EXPECT_EQ(v[0], expect);
    // A split of a split: the group of one.
    auto first = parity->split({0});
    ASSERT_EQ(first != nullptr, parity->rank() == 0);
    if (first) {
      EXPECT_EQ(first->size(), 1);
      EXPECT_EQ(first->global_rank(0), me);
      first->barrier({})->wait(kLong);
    }
  });
}

// Rank 0 waits for a message rank 1 never sends. Rank 1 stays connected past the deadline (a
// rank that left would be a PeerError instead). Fatal to Gloo and MPI runs by design.
TYPED_TEST(Conformance, RecvTimeoutNamesPeerAndContext) {
  this->run(
      [&](Communicator& comm) {
        if (comm.rank() != 0) {
          std::this_thread::sleep_for(milliseconds(800));
          return;
        }
        std::vector<float> v(1);
        auto work = comm.recv(view(v, DType::kFloat32), 1, 9, OpContext{4, 1, 3, "RECV_F"});
        const auto start = std::chrono::steady_clock::now();
        try {
          work->wait(milliseconds(200));
          ADD_FAILURE() << "expected TimeoutError";
        } catch (const TimeoutError& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("rank 0: recv from rank 1 (RECV_F stage 1 microbatch 3 step 4): "
                             "timed out after 200 ms"),
                    std::string::npos)
              << msg;
          EXPECT_EQ(exit_code_for(e), 4);
        }
        EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
      },
      false);
}

// Checks that `work` fails on wait() with an error of type E (not a timeout) whose message
// starts with `prefix`, and that the Work keeps it: every later wait() and is_completed()
// rethrows the same error.
template <typename E>
void expect_kept_error(Work& work, const std::string& prefix) {
  std::string first;
  try {
    work.wait(kLong);
    ADD_FAILURE() << "expected an error";
  } catch (const TimeoutError& e) {
    ADD_FAILURE() << "expected a failure, not a timeout: " << e.what();
  } catch (const E& e) {
    first = e.what();
    EXPECT_EQ(first.rfind(prefix, 0), 0u) << first;
  }
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) {
        work.wait(milliseconds(1));
      } else {
        (void)work.is_completed();
      }
      ADD_FAILURE() << "the error was not kept";
    } catch (const E& e) {
      EXPECT_EQ(e.what(), first);
    }
  }
}

// Rank 1 sends 2 elements where rank 0 receives 4: a BackendError on wait().
TYPED_TEST(Conformance, ShortMessageFailsOnWaitAndIsKept) {
  if (!TypeParam::kChecksSizes) GTEST_SKIP() << TypeParam::kName << " does not check sizes";
  this->run(
      [&](Communicator& comm) {
        if (comm.rank() != 0) {
          if (comm.rank() == 1) {
            std::vector<float> two{1, 2};
            comm.send(view(two, DType::kFloat32), 0, 4, {})->wait(kLong);
          }
          return;
        }
        std::vector<float> four(4);
        auto work = comm.recv(view(four, DType::kFloat32), 1, 4, OpContext{3, 2, 1, "RECV_F"});
        expect_kept_error<BackendError>(
            *work, "rank 0: recv from rank 1 (RECV_F stage 2 microbatch 1 step 3): ");
      },
      false);
}

// Rank 1 leaves (its communicator is destroyed) without sending: a PeerError on wait().
TYPED_TEST(Conformance, PeerLeavingFailsOnWaitAndIsKept) {
  if (!TypeParam::kSurvivesPeerExit) {
    GTEST_SKIP() << TypeParam::kName << " cannot lose a rank and go on";
  }
  this->run(
      [&](Communicator& comm) {
        // Rank 0 posts its receive before the barrier, so rank 1 leaves only after that (a
        // transport may also reject an operation posted to a peer already gone).
        std::vector<float> v(4);
        WorkPtr work;
        if (comm.rank() == 0) {
          work = comm.recv(view(v, DType::kFloat32), 1, 4, OpContext{3, 2, 1, "RECV_F"});
        }
        comm.barrier({})->wait(kLong);
        if (comm.rank() != 0) return;
        expect_kept_error<PeerError>(
            *work, "rank 0: recv from rank 1 (RECV_F stage 2 microbatch 1 step 3): peer rank 1 ");
      },
      false);
}

// Note [Shared-memory point-to-point]: what only the shared-memory channels of Gloo do.

// connect_p2p gives every peer of this host a channel, unless CommOptions::shm_p2p is off; a
// second call changes nothing; messages flow either way.
TEST(GlooSharedMemory, ConnectsThePeersOfOneHostUnlessTurnedOff) {
  for (bool allowed : {true, false}) {
    run_gloo(
        3, true,
        [&](Communicator& comm) {
          const int me = comm.rank();
          std::vector<int> others;
          for (int r = 0; r < 3; ++r) {
            if (r != me) others.push_back(r);
          }
          EXPECT_EQ(comm.shared_memory_peers(), allowed ? others : std::vector<int>{});
          comm.connect_p2p({P2PLink{(me + 1) % 3, 1 << 20, 1 << 20}});
          EXPECT_EQ(comm.shared_memory_peers(), allowed ? others : std::vector<int>{});
          std::vector<float> out(5, float(me)), in(5, -1);
          auto s = comm.send(view(out, DType::kFloat32), (me + 1) % 3, 1, {});
          comm.recv(view(in, DType::kFloat32), (me + 2) % 3, 1, {})->wait(kLong);
          s->wait(kLong);
          EXPECT_EQ(in, std::vector<float>(5, float((me + 2) % 3)));
        },
        true, kLong, allowed);
  }
}

// Messages that arrive before their receive is posted (kept on the heap, one of them still
// arriving in chunks while the receive is posted), an empty message, and two messages of one
// tag, matched in the order they were sent.
TEST(GlooSharedMemory, MessagesBeforeTheirReceiveAndOfOneTag) {
  run_gloo(
      2, true,
      [&](Communicator& comm) {
        constexpr std::size_t kCount = 100000;  // 400 KB: chunks through a 64 KiB ring
        if (comm.rank() == 0) {
          std::vector<float> a(kCount), b(7, 2.5f), none;
          for (std::size_t i = 0; i < kCount; ++i) a[i] = float(i);
          comm.send(view(b, DType::kFloat32), 1, 3, {})->wait(kLong);
          comm.send(view(none, DType::kFloat32), 1, 4, {})->wait(kLong);
          std::vector<float> c(7, 3.5f);
          comm.send(view(c, DType::kFloat32), 1, 3, {})->wait(kLong);
          comm.send(view(a, DType::kFloat32), 1, 9, {})->wait(kLong);
          return;
        }
        std::this_thread::sleep_for(milliseconds(100));
        std::vector<float> none(0), first(7), second(7), big(kCount);
        auto w_big = comm.recv(view(big, DType::kFloat32), 0, 9, {});
        auto w_first = comm.recv(view(first, DType::kFloat32), 0, 3, {});
        auto w_none = comm.recv(view(none, DType::kFloat32), 0, 4, {});
        auto w_second = comm.recv(view(second, DType::kFloat32), 0, 3, {});
        for (auto* w : {&w_big, &w_first, &w_none, &w_second}) (*w)->wait(kLong);
        EXPECT_EQ(first, std::vector<float>(7, 2.5f));
        EXPECT_EQ(second, std::vector<float>(7, 3.5f));
        for (std::size_t i = 0; i < kCount; i += 997) ASSERT_EQ(big[i], float(i)) << i;
        EXPECT_EQ(big[kCount - 1], float(kCount - 1));
      },
      true);
}

// A receiver that never reads: the sender's ring fills, and the send fails with a TimeoutError
// that names the peer and the ring, after the communicator's timeout.
TEST(GlooSharedMemory, FullRingTimesOutNamingThePeer) {
  run_gloo(
      2, true,
      [&](Communicator& comm) {
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(milliseconds(900));
          return;
        }
        std::vector<float> big(1 << 20);
        auto work = comm.send(view(big, DType::kFloat32), 1, 2, OpContext{5, 0, 1, "SEND_F"});
        try {
          work->wait(kLong);
          ADD_FAILURE() << "expected TimeoutError";
        } catch (const TimeoutError& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("rank 0: send to rank 1 (SEND_F stage 0 microbatch 1 step 5): timed "
                             "out after 300 ms waiting for rank 1 to make room in its "
                             "shared-memory ring"),
                    std::string::npos)
              << msg;
        }
      },
      false, milliseconds(300));
}

// Issue 44: a wait cycle through a full ring. Rank 0 sends 1 MiB to rank 1 (16 times its 64 KiB
// ring) and then a small message to rank 2; rank 1 waits for rank 2 first; rank 2 waits for
// rank 0's small message and then sends to rank 1. Over TCP this finishes at once; a send that
// blocks until its ring has room deadlocks here, so sends never block (Note [Shared-memory
// point-to-point]).
TEST(GlooSharedMemory, ThreeRankWaitCycleThroughAFullRingCompletes) {
  for (bool shm : {false, true}) {
    run_gloo(
        3, shm,
        [&](Communicator& comm) {
          if (shm) {
            EXPECT_EQ(comm.shared_memory_peers().size(), 2u);
          }
          const auto start = std::chrono::steady_clock::now();
          std::vector<float> big(1 << 18), small(4, 7.0f), got_big(1 << 18), got_small(4);
          for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i % 1000);
          if (comm.rank() == 0) {
            auto a = comm.send(view(big, DType::kFloat32), 1, 1, {});
            auto b = comm.send(view(small, DType::kFloat32), 2, 2, {});
            a->wait(milliseconds(3000));
            b->wait(milliseconds(3000));
          } else if (comm.rank() == 1) {
            comm.recv(view(got_small, DType::kFloat32), 2, 3, {})->wait(milliseconds(3000));
            comm.recv(view(got_big, DType::kFloat32), 0, 1, {})->wait(milliseconds(3000));
            EXPECT_EQ(got_small, small);
            EXPECT_EQ(got_big, big);
          } else {
            comm.recv(view(got_small, DType::kFloat32), 0, 2, {})->wait(milliseconds(3000));
            comm.send(view(got_small, DType::kFloat32), 1, 3, {})->wait(milliseconds(3000));
          }
          EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000))
              << (shm ? "shared memory" : "TCP");
        },
        true, milliseconds(3000));
  }
}

// Random programs that complete under TCP's semantics (buffered sends), generated by running
// them: over 2-4 ranks, a random rank either sends a new message (random peer, 0 to 600 KB) or
// receives any one of the messages already sent to it, in random order (so a rank waits for one
// peer while another's earlier message is still unread: the wait cycles of issue 44). Each
// receive is waited at once or, sometimes, posted and waited at the end; sends are waited at the
// end. Random ring hints (the 64 KiB minimum up to 1 MiB): some messages fit, others go in many
// chunks. Shared memory and TCP must deliver the same bytes within the 5 s timeout.
TEST(GlooSharedMemory, RandomProgramsGiveTheSameBytesAsTcp) {
  struct Message {
    int src, dst;
    std::int64_t tag;
    std::size_t count;
  };
  struct Op {
    bool send;
    std::size_t msg;
  };
  for (unsigned seed = 1; seed <= 16; ++seed) {
    std::mt19937 rng(seed);
    const int n = 2 + static_cast<int>(rng() % 3);
    std::vector<Message> messages;
    std::vector<std::vector<Op>> program(static_cast<std::size_t>(n));
    std::vector<std::vector<std::size_t>> unread(static_cast<std::size_t>(n));
    const std::size_t m = 16 + rng() % 32;
    auto receive_one = [&](int r) {
      auto& pending = unread[static_cast<std::size_t>(r)];
      const std::size_t k = rng() % pending.size();
      program[static_cast<std::size_t>(r)].push_back(Op{false, pending[k]});
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
    };
    while (messages.size() < m) {
      const int r = static_cast<int>(rng() % static_cast<unsigned>(n));
      if (!unread[static_cast<std::size_t>(r)].empty() && rng() % 2 == 0) {
        receive_one(r);
        continue;
      }
      int dst = static_cast<int>(rng() % static_cast<unsigned>(n - 1));
      if (dst >= r) ++dst;
      const std::size_t count = rng() % 4 == 0 ? rng() % 100 : rng() % 300000;
      const std::size_t id = messages.size();
      // Unique tags: receives are waited in any order (repeated tags, matched in sending order,
      // are covered by MessagesBeforeTheirReceiveAndOfOneTag).
      messages.push_back(Message{r, dst, static_cast<std::int64_t>(id), count});
      program[static_cast<std::size_t>(r)].push_back(Op{true, id});
      unread[static_cast<std::size_t>(dst)].push_back(id);
    }
    for (int r = 0; r < n; ++r) {
      while (!unread[static_cast<std::size_t>(r)].empty()) receive_one(r);
    }
    std::vector<std::size_t> hint(static_cast<std::size_t>(n * n));
    for (auto& h : hint) h = rng() % 3 != 0 ? 0 : rng() % (1 << 20);
    std::vector<bool> wait_late(messages.size());
    for (std::size_t i = 0; i < messages.size(); ++i) wait_late[i] = rng() % 4 == 0;
    auto fill = [](std::size_t msg, std::size_t i) { return float(msg * 131 + i % 977); };

    for (bool shm : {false, true}) {
      MemoryStore store;
      run_threads(
          n,
          [&](int r) {
            WorldInfo w;
            w.rank = r;
            w.world_size = n;
            w.master_addr = "127.0.0.1";
            CommOptions opts;
            opts.timeout = milliseconds(5000);
            rendezvous(store, w, kLong);
            auto comm = make_communicator(Backend::kGloo, w, &store, opts);
            if (shm) {
              std::vector<P2PLink> links;
              for (int p = 0; p < n; ++p) {
                if (p == r) continue;
                links.push_back(P2PLink{p, hint[static_cast<std::size_t>(r * n + p)],
                                        hint[static_cast<std::size_t>(p * n + r)]});
              }
              comm->connect_p2p(links);
              EXPECT_EQ(comm->shared_memory_peers().size(), static_cast<std::size_t>(n - 1));
            }
            return comm;
          },
          [&](Communicator& comm) {
            const int me = comm.rank();
            std::vector<std::vector<float>> out(messages.size()), in(messages.size());
            std::vector<WorkPtr> later;
            for (const Op& op : program[static_cast<std::size_t>(me)]) {
              const auto& msg = messages[op.msg];
              if (op.send) {
                out[op.msg].resize(msg.count);
                for (std::size_t k = 0; k < msg.count; ++k) out[op.msg][k] = fill(op.msg, k);
                later.push_back(
                    comm.send(view(out[op.msg], DType::kFloat32), msg.dst, msg.tag, {}));
              } else {
                in[op.msg].assign(msg.count, -1.0f);
                auto work = comm.recv(view(in[op.msg], DType::kFloat32), msg.src, msg.tag, {});
                if (wait_late[op.msg]) {
                  later.push_back(std::move(work));
                } else {
                  work->wait(milliseconds(5000));
                }
              }
            }
            for (auto& w : later) w->wait(milliseconds(5000));
            for (std::size_t i = 0; i < messages.size(); ++i) {
              if (messages[i].dst != me) continue;
              for (std::size_t k = 0; k < messages[i].count; ++k) {
                ASSERT_EQ(in[i][k], fill(i, k))
                    << "seed " << seed << (shm ? " shared memory" : " TCP") << " message " << i
                    << " element " << k;
              }
            }
          },
          true);
    }
  }
}

}  // namespace
}  // namespace pipewright::exec
