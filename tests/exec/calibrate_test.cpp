// `pipewright calibrate`'s measurements (exec/calibrate.hpp) on three Gloo ranks driven by
// threads of this process over pipewright's TCP store on loopback: every collective timed at
// every size, the sharded ones (ZeRO's reduce-scatter and all-gather, registered and private
// buffers) at sizes rounded to equal pieces, and their results checked by measure_communication
// itself (a wrong sum or gather throws BackendError, which fails the test).
#include "pipewright/exec/calibrate.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;

TEST(Calibrate, ShardedSizesAreRoundedToEqualFloatPieces) {
  EXPECT_EQ(sharded_calibration_sizes({4, 16, 64}, 2), (std::vector<std::int64_t>{8, 16, 64}));
  // 4 and 16 both round to 16 at 4 ranks: measured once.
  EXPECT_EQ(sharded_calibration_sizes({4, 16, 64}, 4), (std::vector<std::int64_t>{16, 64}));
  EXPECT_EQ(sharded_calibration_sizes({4, 16, 64, 1 << 20}, 3),
            (std::vector<std::int64_t>{12, 24, 72, (1 << 20) + 8}));
  for (const std::int64_t b : sharded_calibration_sizes(default_calibration_sizes(), 7))
    EXPECT_EQ(b % 28, 0) << b;
}

// Every timing of one collective: the sizes asked for, the repetitions of the config, and a
// distribution that is one (p10 <= median <= p90, positive, well below the timeout).
void expect_sane(const std::vector<SizeTiming>& got, const std::vector<std::int64_t>& sizes,
                 std::int64_t samples, const std::string& what) {
  ASSERT_EQ(got.size(), sizes.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const SizeTiming& t = got[i];
    EXPECT_EQ(t.bytes, sizes[i]) << what;
    EXPECT_EQ(t.samples, samples) << what << " " << t.bytes;
    EXPECT_TRUE(std::isfinite(t.median_ms)) << what << " " << t.bytes;
    EXPECT_GT(t.p10_ms, 0) << what << " " << t.bytes;
    EXPECT_LE(t.p10_ms, t.median_ms) << what << " " << t.bytes;
    EXPECT_LE(t.median_ms, t.p90_ms) << what << " " << t.bytes;
    EXPECT_LT(t.p90_ms, 10000) << what << " " << t.bytes;
  }
}

TEST(Calibrate, TimesEveryCollectiveOnThreeGlooRanks) {
  constexpr int kRanks = 3;
  const int port = find_free_port();
  CalibrationConfig cfg;
  cfg.backend = "gloo";
  cfg.timeout = milliseconds(30000);
  cfg.sizes = {4, 64, 1024, 16384, 262144};
  cfg.iterations = 5;
  std::vector<CommunicationMeasurements> results(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      CalibrationConfig mine = cfg;
      mine.world.rank = r;
      mine.world.world_size = kRanks;
      mine.world.local_rank = r;
      mine.world.local_world_size = kRanks;
      mine.world.master_addr = "127.0.0.1";
      mine.world.master_port = port;
      mine.world.job_id = "calibrate-test-" + std::to_string(port);
      try {
        // The store's host (rank 0) listens before the others connect.
        if (r != 0) std::this_thread::sleep_for(milliseconds(100));
        results[static_cast<std::size_t>(r)] = measure_communication(mine);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");

  const CommunicationMeasurements& m = results[0];
  EXPECT_EQ(m.world_size, kRanks);
  EXPECT_EQ(m.backend, "gloo");
  // reps(size) = max(5, min(iterations, 512 MiB / size)) = 5 here.
  expect_sane(m.p2p, cfg.sizes, 5, "p2p");
  expect_sane(m.allreduce, cfg.sizes, 5, "allreduce");
  // Rounded up to multiples of 4 * 3 bytes.
  const std::vector<std::int64_t> sharded{12, 72, 1032, 16392, 262152};
  EXPECT_EQ(sharded_calibration_sizes(cfg.sizes, kRanks), sharded);
  expect_sane(m.reduce_scatter, sharded, 5, "reduce_scatter");
  expect_sane(m.all_gather, sharded, 5, "all_gather");
  expect_sane(m.reduce_scatter_unregistered, sharded, 5, "reduce_scatter_unregistered");
  expect_sane(m.all_gather_unregistered, sharded, 5, "all_gather_unregistered");
  // The timings are complete on rank 0 only.
  for (int r = 1; r < kRanks; ++r) {
    const auto& o = results[static_cast<std::size_t>(r)];
    EXPECT_EQ(o.world_rank, r);
    EXPECT_TRUE(o.allreduce.empty() && o.reduce_scatter.empty() && o.all_gather.empty() &&
                o.reduce_scatter_unregistered.empty() && o.all_gather_unregistered.empty());
  }
}

}  // namespace
}  // namespace pipewright::exec
