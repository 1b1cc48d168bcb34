// Gloo's sharded collectives on the TCP path (Note [TCP ring collectives], issue 43): shared
// memory turned off, so reduce_scatter and all_gather run as a ring over c10d send/recv, at 2, 3
// and 4 ranks (threads of this process, one communicator each, bound to 127.0.0.1): every dtype,
// odd piece sizes and pieces of several chunks, in place and out of place, the fixed summation
// order, the memory the collectives add (measured: VmHWM), and a rank that never arrives.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/reduce_kernels.hpp"
#include "pipewright/exec/backend.hpp"
#include "pipewright/exec/communicator.hpp"
#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong{30000};
using Body = std::function<void(Communicator&)>;

// One thread per rank, each with a Gloo communicator whose shared-memory paths are off (the
// collectives of ranks on different hosts). Returns each rank's error ("" when none).
std::vector<std::string> run_tcp(int n, const Body& body, milliseconds timeout = kLong,
                                 bool final_barrier = true) {
  MemoryStore store;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        WorldInfo w;
        w.rank = r;
        w.world_size = n;
        w.master_addr = "127.0.0.1";
        CommOptions opts;
        opts.timeout = timeout;
        opts.shm_collectives = false;
        opts.shm_p2p = false;
        rendezvous(store, w, kLong);
        auto comm = make_communicator(Backend::kGloo, w, &store, opts);
        body(*comm);
        if (final_barrier) comm->barrier({})->wait(kLong);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Rank `rank`'s input element i, exactly representable (and its sums too) in every dtype.
double value(int rank, std::size_t i, DType dtype) {
  if (dtype == DType::kUInt8) return double((rank + 1) * ((i * 7 + 3) % 5));
  return double((rank + 1) * static_cast<int>((i * 7 + 3) % 11)) - (rank == 1 ? 20.0 : 0.0);
}

void store_value(std::vector<std::byte>& buf, std::size_t i, DType dtype, double v) {
  std::byte* p = buf.data() + i * dtype_size(dtype);
  switch (dtype) {
    case DType::kFloat32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    case DType::kFloat64:
      std::memcpy(p, &v, 8);
      break;
    case DType::kFloat16:
    case DType::kBFloat16: {
      const std::uint16_t h = dtype == DType::kFloat16
                                  ? detail::float_to_half(static_cast<float>(v))
                                  : detail::float_to_bfloat16(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::kInt64: {
      const auto x = static_cast<std::int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DType::kInt32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DType::kUInt8: {
      const auto x = static_cast<std::uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
  }
}

double reduce(double a, double b, ReduceOp op) {
  return op == ReduceOp::kSum ? a + b : op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
}

std::vector<std::byte> buffer(std::size_t count, DType dtype) {
  return std::vector<std::byte>(count * dtype_size(dtype), std::byte{0x5a});
}

BufferView view(std::vector<std::byte>& b, std::size_t offset, std::size_t count, DType dtype) {
  return BufferView{b.data() + offset * dtype_size(dtype), count, dtype};
}

constexpr DType kAllDtypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                DType::kInt64,   DType::kInt32,   DType::kUInt8};

// Every dtype and op, out of place and in place, pieces of 0, 1, an odd count, and more than the
// two chunks in flight (kRingChunkBytes = 1 MiB: 262144 elements of float32 partial sums).
void check_every_dtype(int n) {
  expect_no_errors(run_tcp(n, [&](Communicator& comm) {
    const int me = comm.rank();
    for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, std::size_t{600011}}) {
      const std::size_t nk = k * static_cast<std::size_t>(n);
      for (DType dtype : kAllDtypes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
          if (k > 1001 && op != ReduceOp::kSum) continue;
          auto expected = buffer(k, dtype);
          for (std::size_t j = 0; j < k; ++j) {
            const std::size_t i = static_cast<std::size_t>(me) * k + j;
            double v = value(0, i, dtype);
            for (int r = 1; r < n; ++r) v = reduce(v, value(r, i, dtype), op);
            store_value(expected, j, dtype, v);
          }
          auto in = buffer(nk, dtype);
          for (std::size_t i = 0; i < nk; ++i) store_value(in, i, dtype, value(me, i, dtype));
          const auto original = in;
          auto out = buffer(k, dtype);
          comm.reduce_scatter(view(in, 0, nk, dtype), view(out, 0, k, dtype), op, {})->wait(kLong);
          const std::string what = std::string(to_string(dtype)) + " k=" + std::to_string(k) +
                                   " op " + std::to_string(static_cast<int>(op)) + " rank " +
                                   std::to_string(me);
          ASSERT_EQ(out, expected) << "out of place, " << what;
          ASSERT_EQ(in, original) << "out of place changed its input, " << what;
          // In place: `out` is piece rank() of `in` (ZeRO-3's CPU buckets).
          comm.reduce_scatter(view(in, 0, nk, dtype),
                              view(in, static_cast<std::size_t>(me) * k, k, dtype), op, {})
              ->wait(kLong);
          const std::size_t eb = dtype_size(dtype);
          ASSERT_TRUE(std::equal(expected.begin(), expected.end(),
                                 in.begin() + static_cast<std::ptrdiff_t>(me * k * eb)))
              << "in place, " << what;
          if (op != ReduceOp::kSum) continue;
          // all_gather of every rank's piece, out of place and in place.
          auto whole = buffer(nk, dtype);
          auto piece = buffer(k, dtype);
          for (std::size_t j = 0; j < k; ++j) {
            store_value(piece, j, dtype, value(me, static_cast<std::size_t>(me) * k + j, dtype));
          }
          comm.all_gather(view(piece, 0, k, dtype), view(whole, 0, nk, dtype), {})->wait(kLong);
          auto reference = buffer(nk, dtype);
          for (std::size_t i = 0; i < nk; ++i) {
            store_value(reference, i, dtype, value(static_cast<int>(i / k), i, dtype));
          }
          ASSERT_EQ(whole, reference) << "all_gather out of place, " << what;
          auto inplace = buffer(nk, dtype);
          std::memcpy(inplace.data() + me * k * eb, piece.data(), k * eb);
          comm.all_gather(view(inplace, static_cast<std::size_t>(me) * k, k, dtype),
                          view(inplace, 0, nk, dtype), {})
              ->wait(kLong);
          ASSERT_EQ(inplace, reference) << "all_gather in place, " << what;
        }
      }
    }
  }));
}

TEST(GlooRing, EveryDtypeAtTwoRanks) { check_every_dtype(2); }
TEST(GlooRing, EveryDtypeAtThreeRanks) { check_every_dtype(3); }
TEST(GlooRing, EveryDtypeAtFourRanks) { check_every_dtype(4); }

// Note [16-bit sums]: 16-bit inputs are summed in float32 and rounded once. 1 + 2^-8 is not a
// bfloat16 (nor 1 + 2^-11 a float16: a tie, rounded to even, 1); 1 + 2 x 2^-8 is. A ring that
// rounded its partial sums to 16 bits at each hop would lose both tiny values when the 1 comes
// first in the chain. Pieces of three chunks, at 3 and 4 ranks.
TEST(GlooRing, HalfPrecisionSumsInFloat32RoundedOnce) {
  for (int n : {3, 4}) {
    expect_no_errors(run_tcp(n, [&](Communicator& comm) {
      const int me = comm.rank();
      const std::size_t k = 600011, nk = k * static_cast<std::size_t>(n);
      for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
        const float tiny = dtype == DType::kBFloat16 ? 1.0f / 256 : 1.0f / 2048;
        // Piece q's chain starts at rank q+1 (hop 1) and ends at rank q (hop 0): the 1 first,
        // then the two tiny values.
        auto in = buffer(nk, dtype);
        for (std::size_t i = 0; i < nk; ++i) {
          const int q = static_cast<int>(i / k);
          const int hop = (me - q + n) % n;
          const bool tiny_here = hop == 2 || hop == 3 % n;
          store_value(in, i, dtype, hop == 1 ? 1.0 : tiny_here ? double(tiny) : 0.0);
        }
        auto out = buffer(k, dtype);
        comm.reduce_scatter(view(in, 0, nk, dtype), view(out, 0, k, dtype), ReduceOp::kSum, {})
            ->wait(kLong);
        auto want = buffer(1, dtype);
        store_value(want, 0, dtype, 1.0 + 2.0 * double(tiny));
        for (std::size_t j = 0; j < k; ++j) {
          ASSERT_EQ(std::memcmp(out.data() + 2 * j, want.data(), 2), 0)
              << to_string(dtype) << " element " << j << " rank " << me << " of " << n;
        }
      }
    }));
  }
}

// The result does not depend on arrival order: piece q is summed in ring order
// ((in_{q+1} + in_{q+2}) + ...) + in_q in float32 (Note [TCP ring collectives]), bit for bit,
// on random data where another order gives other bits; after an all-gather every rank holds the
// same bits.
TEST(GlooRing, FloatSumsFollowTheRingOrderBitForBit) {
  const int n = 4;
  const std::size_t k = 200003, nk = k * n;
  auto input = [&](int r) {
    std::mt19937 gen(1234 + static_cast<unsigned>(r));
    std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
    std::vector<float> v(nk);
    for (auto& x : v) x = dist(gen) * (r % 2 ? 1e-3f : 1.0f);
    return v;
  };
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(input(r));
  std::vector<float> ring_order(nk), rank_order(nk);
  for (std::size_t i = 0; i < nk; ++i) {
    const int q = static_cast<int>(i / k);
    float acc = inputs[static_cast<std::size_t>((q + 1) % n)][i];
    for (int h = 2; h <= n; ++h) acc = inputs[static_cast<std::size_t>((q + h) % n)][i] + acc;
    ring_order[i] = acc;
    float s = inputs[0][i];
    for (int r = 1; r < n; ++r) s += inputs[static_cast<std::size_t>(r)][i];
    rank_order[i] = s;
  }
  ASSERT_NE(ring_order, rank_order) << "the data must tell the orders apart";
  std::vector<std::vector<float>> gathered(n);
  expect_no_errors(run_tcp(n, [&](Communicator& comm) {
    const int me = comm.rank();
    std::vector<float> in = inputs[static_cast<std::size_t>(me)];
    std::vector<float> whole(nk);
    BufferView mine{whole.data() + static_cast<std::size_t>(me) * k, k, DType::kFloat32};
    comm.reduce_scatter(BufferView{in.data(), nk, DType::kFloat32}, mine, ReduceOp::kSum, {})
        ->wait(kLong);
    comm.all_gather(mine, BufferView{whole.data(), nk, DType::kFloat32}, {})->wait(kLong);
    gathered[static_cast<std::size_t>(me)] = std::move(whole);
  }));
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(gathered[static_cast<std::size_t>(r)] == ring_order) << "rank " << r;
  }
}

std::size_t status_kib(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1));
  }
  return 0;
}

// Issue 43 (ZeRO-3's memory): the ring adds two chunks per rank, not a receive buffer as large
// as the input (the all-to-all it replaced) nor a flat copy of the output (c10d's allgather).
// Measured: the peak resident set (VmHWM, reset through /proc/self/clear_refs) during one
// reduce-scatter and one all-gather of 48 MiB per rank, over the resident set before them, with
// every rank's buffers already touched. The all-to-all version rises by 2 x 48 MiB here.
TEST(GlooRing, PeakMemoryOfTheCollectivesIsFarBelowTheInput) {
  {
    std::ofstream probe("/proc/self/clear_refs");
    if (!probe) GTEST_SKIP() << "/proc/self/clear_refs is not writable here";
  }
  const int n = 2;
  const std::size_t nk = std::size_t{12} << 20, k = nk / n;  // 48 MiB of float32 per rank
  const std::size_t in_kib = nk * sizeof(float) / 1024;
  std::size_t before = 0, rs_peak = 0, ag_peak = 0;
  auto reset_peak = [&] {
    std::ofstream("/proc/self/clear_refs") << "5";
    return status_kib("VmRSS");
  };
  expect_no_errors(run_tcp(n, [&](Communicator& comm) {
    const int me = comm.rank();
    std::vector<float> in(nk, float(me + 1)), out(k, 0.0f), whole(nk, 0.0f);
    // A first, small pair of collectives connects the ring (its buffers are not what we measure).
    std::vector<float> a(n), b(1);
    comm.reduce_scatter(BufferView{a.data(), a.size(), DType::kFloat32},
                        BufferView{b.data(), 1, DType::kFloat32}, ReduceOp::kSum, {})
        ->wait(kLong);
    comm.barrier({})->wait(kLong);
    if (me == 0) before = reset_peak();
    comm.barrier({})->wait(kLong);
    comm.reduce_scatter(BufferView{in.data(), nk, DType::kFloat32},
                        BufferView{out.data(), k, DType::kFloat32}, ReduceOp::kSum, {})
        ->wait(kLong);
    comm.barrier({})->wait(kLong);
    if (me == 0) {
      rs_peak = status_kib("VmHWM");
      before = std::min(before, reset_peak());
    }
    comm.barrier({})->wait(kLong);
    comm.all_gather(BufferView{out.data(), k, DType::kFloat32},
                    BufferView{whole.data(), nk, DType::kFloat32}, {})
        ->wait(kLong);
    comm.barrier({})->wait(kLong);
    if (me == 0) ag_peak = status_kib("VmHWM");
    EXPECT_EQ(out[0], 3.0f);
    EXPECT_EQ(whole[nk - 1], 3.0f);
  }));
  const std::size_t rs_rise = rs_peak > before ? rs_peak - before : 0;
  const std::size_t ag_rise = ag_peak > before ? ag_peak - before : 0;
  std::printf(
      "ring over %d ranks, %zu KiB input per rank: reduce_scatter +%zu KiB, all_gather "
      "+%zu KiB of VmHWM\n",
      n, in_kib, rs_rise, ag_rise);
  EXPECT_LT(rs_rise, in_kib / 4) << "reduce_scatter";
  EXPECT_LT(ag_rise, in_kib / 4) << "all_gather";
}

// A rank that never joins a ring collective: its neighbours fail within the timeout with a
// TimeoutError naming the operation and the missing rank; the next collective fails at once.
TEST(GlooRing, AMissingRankIsNamedByItsNeighbours) {
  const int n = 3;
  std::vector<std::string> kinds(n);
  auto errors = run_tcp(
      n,
      [&](Communicator& comm) {
        const int me = comm.rank();
        std::vector<float> in(300, 1.0f), out(100);
        BufferView vin{in.data(), in.size(), DType::kFloat32};
        BufferView vout{out.data(), out.size(), DType::kFloat32};
        comm.reduce_scatter(vin, vout, ReduceOp::kSum, {})->wait(kLong);  // connects the ring
        if (me == 2) {  // absent, but alive: its neighbours must time out, not see it leave
          std::this_thread::sleep_for(milliseconds(4000));
          return;
        }
        OpContext ctx;
        ctx.step = 7;
        try {
          comm.reduce_scatter(vin, vout, ReduceOp::kSum, ctx)->wait(kLong);
          kinds[static_cast<std::size_t>(me)] = "completed";
        } catch (const TimeoutError& e) {
          kinds[static_cast<std::size_t>(me)] = std::string("timeout: ") + e.what();
        } catch (const std::exception& e) {
          kinds[static_cast<std::size_t>(me)] = std::string("other: ") + e.what();
        }
        try {
          comm.all_gather(vout, vin, {})->wait(kLong);
        } catch (const BackendError& e) {
          EXPECT_NE(std::string(e.what()).find("earlier ring collective"), std::string::npos)
              << e.what();
        }
      },
      milliseconds(1500), false);
  expect_no_errors(errors);
  for (int r : {0, 1}) {
    const std::string& k = kinds[static_cast<std::size_t>(r)];
    EXPECT_EQ(k.rfind("timeout: rank " + std::to_string(r) + ": reduce_scatter (", 0), 0) << k;
    EXPECT_NE(k.find("step 7"), std::string::npos) << k;
    EXPECT_NE(k.find("waiting for rank 2"), std::string::npos) << k;
  }
}

}  // namespace
}  // namespace pipewright::exec
