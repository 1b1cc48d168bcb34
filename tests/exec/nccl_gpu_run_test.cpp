// GPU suites of the executor over --backend nccl (label gpu): the equivalence suite (pipelined
// training on NCCL gives the weights of single-process training) and the DDP suite (dp replicas
// on NCCL give the weights of one process on the concatenated batch). Each rank is a real
// `pipewright run` process on its own GPU (rank, world and rendezvous given as flags, as a
// launcher would set them), bound to 127.0.0.1 with a free port; every run has a deadline and is
// killed after it. Skipped with "no CUDA device: skipped" unless the machine has enough devices.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl/nccl_communicator.hpp"

namespace pipewright::exec {
namespace {

const std::string kBin = std::string(PIPEWRIGHT_BIN_DIR) + "/pipewright";
const std::string kData = std::string(PIPEWRIGHT_SOURCE_DIR) + "/tests/exec/data/";
constexpr auto kRunDeadline = std::chrono::seconds(300);

#define PW_REQUIRE_DEVICES(needed)                                                             \
  do {                                                                                         \
    std::string why_;                                                                          \
    const int found_ = cuda_device_count(&why_);                                               \
    if (found_ < (needed)) {                                                                   \
      GTEST_SKIP() << "no CUDA device: skipped (needs " << (needed) << " CUDA devices, found " \
                   << found_ << (why_.empty() ? "" : "; " + why_) << ")";                      \
    }                                                                                          \
  } while (false)

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 29500 + static_cast<int>(::getpid() % 1000);
  }
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string work_dir() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/pw_nccl_gpu_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

// Starts one `pipewright run` per rank (args + rank flags), waits for all until the deadline
// (then kills them), and returns "" on success or a description with every failing rank's log.
std::string run_world(const std::vector<std::string>& args, int world_size, int local_world_size,
                      const std::string& dir, const std::string& tag) {
  const int port = free_port();
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int r = 0; r < world_size; ++r) {
    std::vector<std::string> argv = {kBin};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const std::string& s :
         {std::string("--rank"), std::to_string(r), std::string("--world-size"),
          std::to_string(world_size), std::string("--local-rank"),
          std::to_string(r % local_world_size), std::string("--local-world-size"),
          std::to_string(local_world_size), std::string("--master-addr"), std::string("127.0.0.1"),
          std::string("--master-port"), std::to_string(port), std::string("--timeout"),
          std::string("60")}) {
      argv.push_back(s);
    }
    logs.push_back(dir + "/" + tag + ".rank" + std::to_string(r) + ".log");
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      ::execv(kBin.c_str(), cargv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + kRunDeadline;
  std::vector<int> status(pids.size(), -1);
  std::size_t done = 0;
  while (done < pids.size() && std::chrono::steady_clock::now() < deadline) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (status[i] != -1) continue;
      int st = 0;
      if (::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st;
        ++done;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ostringstream failures;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (status[i] == -1) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], nullptr, 0);
      failures << "rank " << i << " did not finish within the deadline\n";
    } else if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0) {
      failures << "rank " << i << " failed (status " << status[i] << ")\n";
    } else {
      continue;
    }
    std::ifstream in(logs[i]);
    failures << "--- " << logs[i] << "\n" << in.rdbuf() << "\n";
  }
  return failures.str();
}

// safetensors (F32 only, which is what pipewright saves for these models): name -> values.
std::map<std::string, std::vector<float>> load_weights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, info] : nlohmann::json::parse(header).items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(info.at("dtype"), "F32") << path << " " << name;
    const auto begin = info.at("data_offsets")[0].get<std::size_t>();
    const auto end = info.at("data_offsets")[1].get<std::size_t>();
    std::vector<float> v((end - begin) / sizeof(float));
    std::memcpy(v.data(), body.data() + begin, end - begin);
    out[name] = std::move(v);
  }
  return out;
}

void expect_same_weights(const std::string& ref_path, const std::string& got_path,
                         double tolerance) {
  const auto ref = load_weights(ref_path);
  const auto got = load_weights(got_path);
  ASSERT_FALSE(ref.empty()) << ref_path;
  ASSERT_EQ(ref.size(), got.size()) << got_path;
  for (const auto& [name, values] : ref) {
    ASSERT_TRUE(got.count(name)) << got_path << " lacks " << name;
    const auto& other = got.at(name);
    ASSERT_EQ(values.size(), other.size()) << name;
    double max_diff = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(values[i]) - other[i]));
    }
    EXPECT_LE(max_diff, tolerance) << name << " in " << got_path;
  }
}

std::vector<std::string> training_args(int batch_size) {
  return {"run",
          "--model",
          kData + "nccl_mlp_deep.json",
          "--data-x",
          kData + "nccl_x.npy",
          "--data-y",
          kData + "nccl_y.npy",
          "--loss",
          "mse",
          "--optimizer",
          "sgd",
          "--lr",
          "0.05",
          "--momentum",
          "0.9",
          "--steps",
          "5",
          "--microbatches",
          "4",
          "--batch-size",
          std::to_string(batch_size),
          "--no-shuffle",
          "--seed",
          "7",
          "--backend",
          "nccl"};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

struct ScheduleCase {
  const char* schedule;
  int stages_per_rank;
};

// Pipelined == single process, for every schedule, at pp = 2 (and pp = 4 with 4 GPUs).
TEST(NcclGpuRun, PipelinedTrainingEqualsSingleProcess) {
  PW_REQUIRE_DEVICES(2);
  const std::string dir = work_dir();
  const std::string ref = dir + "/ref.safetensors";
  const std::string fail =
      run_world(with(training_args(8), {"--pp", "1", "--save", ref}), 1, 1, dir, "ref");
  ASSERT_EQ(fail, "");
  std::vector<int> pps = {2};
  if (cuda_device_count() >= 4) pps.push_back(4);
  for (int pp : pps) {
    for (const ScheduleCase sc :
         {ScheduleCase{"GPipe", 1}, ScheduleCase{"1F1B", 1}, ScheduleCase{"Interleaved1F1B", 2},
          ScheduleCase{"LoopedBFS", 2}, ScheduleCase{"InterleavedZeroBubble", 2}}) {
      const std::string tag = std::string(sc.schedule) + ".pp" + std::to_string(pp);
      const std::string out = dir + "/" + tag + ".safetensors";
      const std::string f =
          run_world(with(training_args(8),
                         {"--schedule", sc.schedule, "--pp", std::to_string(pp),
                          "--stages-per-rank", std::to_string(sc.stages_per_rank), "--save", out}),
                    pp, pp, dir, tag);
      ASSERT_EQ(f, "") << tag;
      expect_same_weights(ref, out, 1e-5);
    }
  }
}

// DDP over NCCL == one process on the concatenated batch; and pp x dp = 2 x 2 with 4 GPUs.
TEST(NcclGpuRun, DdpEqualsSingleProcessOnConcatenatedBatch) {
  PW_REQUIRE_DEVICES(2);
  const std::string dir = work_dir();
  const std::string ref = dir + "/ddp_ref.safetensors";
  ASSERT_EQ(run_world(with(training_args(8), {"--pp", "1", "--save", ref}), 1, 1, dir, "ddp_ref"),
            "");
  for (const char* bucket_mb : {"25", "0.0001"}) {
    const std::string tag = std::string("ddp.dp2.bucket") + bucket_mb;
    const std::string out = dir + "/" + tag + ".safetensors";
    ASSERT_EQ(run_world(with(training_args(4), {"--pp", "1", "--dp", "2", "--bucket-cap-mb",
                                                bucket_mb, "--save", out}),
                        2, 2, dir, tag),
              "")
        << tag;
    expect_same_weights(ref, out, 1e-5);
  }
  if (cuda_device_count() >= 4) {
    const std::string out = dir + "/ddp.pp2dp2.safetensors";
    ASSERT_EQ(run_world(with(training_args(4),
                             {"--schedule", "1F1B", "--pp", "2", "--dp", "2", "--save", out}),
                        4, 4, dir, "ddp.pp2dp2"),
              "");
    expect_same_weights(ref, out, 1e-5);
  }
}

}  // namespace
}  // namespace pipewright::exec
