// The prefetching data loader (exec/src/data/prefetch.hpp, issue 24 item 5): batches and stream
// positions independent of the read-ahead depth, a bad sample's error in its step's turn naming
// the source and the sample, seek, and destruction while the loader thread waits on a full queue.
#include "data/prefetch.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/sharding.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

constexpr std::int64_t kRows = 10;
constexpr std::int64_t kBatch = 4;

ArrayDataset make_data(std::int64_t nan_row = -1) {
  auto x = torch::arange(kRows * 3, torch::kFloat).reshape({kRows, 3});
  if (nan_row >= 0) x[nan_row][1] = std::numeric_limits<float>::quiet_NaN();
  return ArrayDataset(x, torch::arange(kRows, torch::kFloat), "'x.npy'", "'y.npy'");
}

ShardedBatches stream() { return ShardedBatches(kRows, 2, 1, 7, true, kBatch); }

// The nice values of this process's threads (Linux: field 19 of /proc/self/task/TID/stat).
std::vector<int> thread_nice_values() {
  std::vector<int> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string f;
    for (int k = 3; k <= 19 && fields >> f; ++k) {
      if (k == 19) out.push_back(std::stoi(f));
    }
  }
  closedir(dir);
  return out;
}

// Note [Loader priority]: the loader thread runs at nice 19, the training thread is untouched.
TEST(BatchLoader, LoaderThreadRunsAtNice19) {
  const ArrayDataset data = make_data();
  const auto before = thread_nice_values();
  ASSERT_FALSE(before.empty());
  const auto nice19_before = std::count(before.begin(), before.end(), 19);
  errno = 0;
  const int training_nice = getpriority(PRIO_PROCESS, 0);
  BatchLoader loader(data, stream(), torch::kCPU, 1, 1, false);
  (void)loader.next(0);  // the thread has started and set its priority before delivering
  const auto during = thread_nice_values();
  // At least the loader (a thread it starts inherits its nice value).
  EXPECT_GE(std::count(during.begin(), during.end(), 19), nice19_before + 1);
  errno = 0;
  EXPECT_EQ(getpriority(PRIO_PROCESS, 0), training_nice);  // the training thread is untouched
}

TEST(BatchLoader, SameBatchesAndPositionsAtEveryDepth) {
  const ArrayDataset data = make_data();
  ShardedBatches reference = stream();
  std::vector<StepBatch> want;
  std::vector<DataPosition> positions;
  for (int s = 0; s < 7; ++s) {  // several epochs of the 5-row shard
    auto [x, y] = data.batch(reference.next_batch());
    StepBatch b;
    for (auto& [mx, my] : split_microbatches(x, y, 2)) {
      b.xs.push_back(mx);
      b.ys.push_back(my);
    }
    want.push_back(b);
    positions.push_back(reference.position());
  }
  for (std::int64_t depth : {0, 1, 3}) {
    BatchLoader loader(data, stream(), torch::kCPU, 2, depth, true);
    for (int s = 0; s < 7; ++s) {
      const StepBatch got = loader.next(s);
      ASSERT_EQ(got.xs.size(), 2U);
      for (std::size_t m = 0; m < 2; ++m) {
        EXPECT_TRUE(torch::equal(got.xs[m], want[s].xs[m])) << "depth " << depth << " step " << s;
        EXPECT_TRUE(torch::equal(got.ys[m], want[s].ys[m])) << "depth " << depth << " step " << s;
      }
      // The training thread's position, not the loader's read-ahead.
      EXPECT_EQ(loader.position(), positions[s]) << "depth " << depth << " step " << s;
    }
    ASSERT_EQ(loader.waits().size(), 7U);
    EXPECT_EQ(loader.waits()[6].step, 6);
    EXPECT_LE(loader.waits()[6].start_ns, loader.waits()[6].end_ns);
  }
}

TEST(BatchLoader, BadSampleFailsInItsStepNamingFileAndSample) {
  // Unshuffled, one replica: step s reads rows 4s..4s+3, so row 9 is in step 2.
  const ArrayDataset data = make_data(9);
  for (std::int64_t depth : {0, 2}) {
    BatchLoader loader(data, ShardedBatches(kRows, 1, 0, 0, false, kBatch), torch::kCPU, 1, depth,
                       false);
    (void)loader.next(0);
    (void)loader.next(1);
    for (int attempt = 0; attempt < 2; ++attempt) {  // it stays failed
      try {
        (void)loader.next(2);
        ADD_FAILURE() << "depth " << depth << ": no error";
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("data x 'x.npy': sample 9 has a non-finite value"),
                  std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(loader.position(), (DataPosition{0, 8}));
  }
}

TEST(BatchLoader, SeekDropsReadAhead) {
  const ArrayDataset data = make_data();
  BatchLoader loader(data, stream(), torch::kCPU, 1, 2, false);
  (void)loader.next(0);
  (void)loader.next(1);
  const DataPosition at{1, 2};
  loader.seek(at);
  EXPECT_EQ(loader.position(), at);
  ShardedBatches reference = stream();
  reference.seek(at);
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = data.batch(reference.next_batch());
    const StepBatch got = loader.next(s);
    EXPECT_TRUE(torch::equal(got.xs.at(0), x));
    EXPECT_TRUE(torch::equal(got.ys.at(0), y));
  }
  EXPECT_THROW(loader.seek(DataPosition{0, 99}), ConfigError);
}

TEST(BatchLoader, DestroyedWhileTheLoaderWaitsOnAFullQueue) {
  // The training thread stops (an exception) with the queue full: the destructor closes it and
  // joins. A hang here is this test's timeout.
  const ArrayDataset data = make_data();
  for (int i = 0; i < 20; ++i) {
    BatchLoader loader(data, stream(), torch::kCPU, 1, 1, false);
    (void)loader.next(0);
  }
  EXPECT_THROW(BatchLoader(data, stream(), torch::kCPU, 1, -1, false), ConfigError);
}

}  // namespace
}  // namespace pipewright::exec
