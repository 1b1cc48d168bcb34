// Cross-rank agreement on the job (agreement.hpp) and the output checks run before any work
// (file_io.hpp): the pure comparison, the exchange over the fake backend, and the file probes.
#include "store/agreement.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "data/file_io.hpp"
#include "pipewright/exec/fake_communicator.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

namespace fs = std::filesystem;
constexpr std::chrono::milliseconds kLong{10000};

JobFingerprint fields(std::int64_t microbatches, std::uint64_t seed) {
  return {
      {"pp", "2"}, {"microbatches", std::to_string(microbatches)}, {"seed", std::to_string(seed)}};
}

TEST(DescribeDisagreements, EmptyWhenEveryRankAgrees) {
  EXPECT_TRUE(describe_disagreements({fields(4, 1), fields(4, 1), fields(4, 1)}).empty());
  EXPECT_TRUE(describe_disagreements({fields(4, 1)}).empty());
  EXPECT_TRUE(describe_disagreements({}).empty());
}

TEST(DescribeDisagreements, NamesTheFieldAndGroupsTheRanks) {
  const auto lines = describe_disagreements({fields(4, 1), fields(4, 1), fields(8, 1)});
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0], "microbatches: ranks 0,1 have 4, rank 2 has 8");
}

TEST(DescribeDisagreements, EveryDifferingFieldInRankZerosOrder) {
  const auto lines =
      describe_disagreements({fields(4, 1), fields(8, 2), fields(4, 3), fields(8, 1)});
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(lines[0], "microbatches: ranks 0,2 have 4, ranks 1,3 have 8");
  EXPECT_EQ(lines[1], "seed: ranks 0,3 have 1, rank 1 has 2, rank 2 has 3");
}

TEST(DescribeDisagreements, AMissingFieldIsAbsent) {
  auto extra = fields(4, 1);
  extra.push_back({"dataset", "sonnets"});
  const auto lines = describe_disagreements({fields(4, 1), extra});
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0], "dataset: rank 0 has (absent), rank 1 has sonnets");
}

TEST(EncodeFingerprint, RoundTripsAnyValue) {
  const JobFingerprint f{{"a", "x=y"}, {"b", "line\nbreak \\ back"}, {"c", ""}};
  EXPECT_EQ(decode_fingerprint(encode_fingerprint(f)), f);
}

// Runs body(rank, comm) on one thread per rank; returns each rank's error text ("" if none).
std::vector<std::string> run_ranks(int n, const std::function<void(int, Communicator&)>& body) {
  FakeWorld world(n);
  auto comms = world.communicators();
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r, *comms[static_cast<std::size_t>(r)]);
      } catch (const ConfigError& e) {
        errors[static_cast<std::size_t>(r)] = std::string("ConfigError: ") + e.what();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("other: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(AgreeOnJob, ReturnsWhenEveryRankAgrees) {
  const auto errors =
      run_ranks(3, [](int, Communicator& comm) { agree_on_job(comm, fields(4, 7), kLong); });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(AgreeOnJob, EveryRankFailsWithTheSameMessage) {
  const auto errors = run_ranks(3, [](int rank, Communicator& comm) {
    agree_on_job(comm, fields(rank == 2 ? 8 : 4, 7), kLong);
  });
  for (const auto& e : errors) {
    EXPECT_EQ(e, errors[0]);
    EXPECT_NE(e.find("ConfigError: ranks disagree on the job"), std::string::npos) << e;
    EXPECT_NE(e.find("microbatches: ranks 0,1 have 4, rank 2 has 8"), std::string::npos) << e;
  }
}

TEST(AgreeOnJob, FieldListsOfDifferentLengths) {
  const auto errors = run_ranks(2, [](int rank, Communicator& comm) {
    auto f = fields(4, 7);
    if (rank == 1) f.push_back({"init", std::string(100, 'w')});
    agree_on_job(comm, f, kLong);
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("init: rank 0 has (absent), rank 1 has wwww"), std::string::npos) << e;
  }
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "pw_agree_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& text) {
    const std::string path = (fs::path(dir_) / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path dir_;
};

using FileDigest = TempDir;
TEST_F(FileDigest, DependsOnContentNotPath) {
  const auto a = file("a.json", "{\"x\": 1}");
  const auto b = file("b.json", "{\"x\": 1}");
  const auto c = file("c.json", "{\"x\": 2}");
  EXPECT_EQ(file_digest(a, "--model"), file_digest(b, "--model"));
  EXPECT_NE(file_digest(a, "--model"), file_digest(c, "--model"));
  EXPECT_NE(file_digest(a, "--model").find(", 8 bytes"), std::string::npos);
  EXPECT_THROW((void)file_digest((dir_ / "missing").string(), "--model"), ConfigError);
}

using JobFingerprintTest = TempDir;
TEST_F(JobFingerprintTest, ComparesContentsNotPaths) {
  RunConfig a;
  a.model_path = file("m1.json", "model");
  a.data_x = file("x.npy", "xx");
  a.data_y = file("y.npy", "yy");
  a.microbatches = 2;
  RunConfig b = a;
  b.model_path = file("m2.json", "model");  // same content elsewhere
  const sched::LoweredPlan plan;
  EXPECT_TRUE(
      describe_disagreements({job_fingerprint(a, plan, "mse"), job_fingerprint(b, plan, "mse")})
          .empty());
  b.timeout_s = 5;                        // how a rank waits is not part of the job
  b.save_path = "elsewhere.safetensors";  // nor where an output goes (only whether it is given)
  a.save_path = "w.safetensors";
  EXPECT_TRUE(
      describe_disagreements({job_fingerprint(a, plan, "mse"), job_fingerprint(b, plan, "mse")})
          .empty());
  b.data_x = file("x2.npy", "xX");  // same size, other content
  const auto data_lines =
      describe_disagreements({job_fingerprint(a, plan, "mse"), job_fingerprint(b, plan, "mse")});
  ASSERT_EQ(data_lines.size(), 1U);
  EXPECT_EQ(data_lines[0].rfind("data_x: rank 0 has fnv1a64 ", 0), 0U) << data_lines[0];
  b.microbatches = 4;
  b.seed = 9;
  b.model_path = file("m3.json", "other model");
  const auto lines = describe_disagreements(
      {job_fingerprint(a, plan, "mse"), job_fingerprint(b, plan, "cross-entropy")});
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("microbatches: rank 0 has 2, rank 1 has 4"), std::string::npos) << all;
  EXPECT_NE(all.find("seed: rank 0 has 0, rank 1 has 9"), std::string::npos) << all;
  EXPECT_NE(all.find("model: rank 0 has fnv1a64 "), std::string::npos) << all;
  EXPECT_NE(all.find("loss: rank 0 has mse, rank 1 has cross-entropy"), std::string::npos) << all;
}

using OutputChecks = TempDir;
TEST_F(OutputChecks, AcceptWritableTargets) {
  EXPECT_NO_THROW(check_output_file((dir_ / "w.safetensors").string(), "--save"));
  EXPECT_NO_THROW(check_output_file(file("old.json", "{}"), "--trace"));
  EXPECT_NO_THROW(check_output_file("/dev/null", "--profile"));
  EXPECT_NO_THROW(check_output_dir((dir_ / "ckpt" / "deeper").string(), "--checkpoint-dir", 0));
  EXPECT_TRUE(fs::is_directory(dir_ / "ckpt" / "deeper"));
  EXPECT_TRUE(fs::is_empty(dir_ / "ckpt" / "deeper"));  // the probe is gone
}

TEST_F(OutputChecks, NameTheFlagPathAndReason) {
  const auto plain = file("plain", "not a folder");
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string under_file = plain + "/w.safetensors";
  EXPECT_NE(message([&] {
              check_output_file(under_file, "--save");
            }).find("--save " + under_file + ": " + plain + " is not a folder"),
            std::string::npos);
  const std::string missing = (dir_ / "nope" / "t.json").string();
  EXPECT_NE(message([&] { check_output_file(missing, "--trace"); }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(message([&] {
              check_output_file(dir_.string(), "--profile");
            }).find("--profile " + dir_.string() + ": is a folder"),
            std::string::npos);
  EXPECT_NE(message([&] {
              check_output_dir(plain + "/ckpt", "--checkpoint-dir", 1);
            }).find("--checkpoint-dir " + plain + "/ckpt: cannot be created"),
            std::string::npos);
}

}  // namespace
}  // namespace pipewright::exec
