#include "pipewright/exec/rendezvous.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;

std::string config_error(const WorldFlags& flags, const EnvMap& env) {
  try {
    (void)resolve_world(flags, env);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ResolveWorld, DefaultsToASingleProcess) {
  const WorldInfo w = resolve_world({}, {{"HOME", "/root"}});
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_world_size, 1);
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_EQ(w.sources, "");
}

TEST(ResolveWorld, Torchrun) {
  const WorldInfo w = resolve_world({}, {{"RANK", "3"},
                                         {"WORLD_SIZE", "8"},
                                         {"LOCAL_RANK", "1"},
                                         {"LOCAL_WORLD_SIZE", "2"},
                                         {"MASTER_ADDR", "10.0.0.1"},
                                         {"MASTER_PORT", "1234"}});
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.master_addr, "10.0.0.1");
  EXPECT_EQ(w.master_port, 1234);
  EXPECT_EQ(w.sources, "torchrun");
}

TEST(ResolveWorld, EachLauncherAlone) {
  const WorldInfo ompi = resolve_world({}, {{"OMPI_COMM_WORLD_RANK", "2"},
                                            {"OMPI_COMM_WORLD_SIZE", "4"},
                                            {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(ompi.rank, 2);
  EXPECT_EQ(ompi.world_size, 4);
  EXPECT_EQ(ompi.local_rank, 0);
  EXPECT_EQ(ompi.local_world_size, 2);
  EXPECT_EQ(ompi.sources, "Open MPI");

  const WorldInfo pmi = resolve_world({}, {{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}});
  EXPECT_EQ(pmi.rank, 1);
  EXPECT_EQ(pmi.world_size, 3);
  EXPECT_EQ(pmi.local_rank, 1);  // defaults to rank (one node)
  EXPECT_EQ(pmi.local_world_size, 3);
  EXPECT_EQ(pmi.sources, "PMI");

  const WorldInfo slurm =
      resolve_world({}, {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.world_size, 6);
  EXPECT_EQ(slurm.local_rank, 1);
  EXPECT_EQ(slurm.sources, "Slurm");
}

// Issue 23: a multi-node Slurm job takes its master from the node list (it used 127.0.0.1), its
// node from SLURM_NODEID and its ranks per node from SLURM_TASKS_PER_NODE.
TEST(ResolveWorld, SlurmSeveralNodes) {
  const EnvMap env{{"SLURM_PROCID", "5"},
                   {"SLURM_NTASKS", "6"},
                   {"SLURM_LOCALID", "1"},
                   {"SLURM_NODEID", "2"},
                   {"SLURM_TASKS_PER_NODE", "2(x3)"},
                   {"SLURM_JOB_NODELIST", "gpu[07-09]-ib"}};
  const WorldInfo w = resolve_world({}, env);
  EXPECT_EQ(w.master_addr, "gpu07-ib");
  EXPECT_EQ(w.node_rank, 2);
  EXPECT_EQ(w.local_world_size, 2);
  EXPECT_EQ(w.rank, 5);
  // One node: loopback stays the default.
  const WorldInfo one = resolve_world(
      {}, {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "node01"}});
  EXPECT_EQ(one.master_addr, "127.0.0.1");
  // A MASTER_ADDR that is not the first host: an error naming both.
  EnvMap clash = env;
  clash["MASTER_ADDR"] = "gpu09-ib";
  EXPECT_NE(config_error({}, clash).find("master address: MASTER_ADDR=gpu09-ib (torchrun) but "
                                         "SLURM_JOB_NODELIST=gpu[07-09]-ib (Slurm: first host "
                                         "gpu07-ib)"),
            std::string::npos)
      << config_error({}, clash);
  EnvMap node_clash = env;
  node_clash["GROUP_RANK"] = "1";
  EXPECT_NE(config_error({}, node_clash)
                .find("node rank: GROUP_RANK=1 (torchrun) but "
                      "SLURM_NODEID=2 (Slurm)"),
            std::string::npos)
      << config_error({}, node_clash);
  EnvMap bad = env;
  bad["SLURM_JOB_NODELIST"] = "gpu[07-";
  EXPECT_NE(config_error({}, bad).find("SLURM_JOB_NODELIST"), std::string::npos);
}

TEST(ResolveWorld, SourcesThatAgreeCombineInPrecedenceOrder) {
  WorldFlags flags;
  flags.rank = 1;
  flags.master_port = 4000;
  const WorldInfo w = resolve_world(flags, {{"WORLD_SIZE", "2"},
                                            {"OMPI_COMM_WORLD_RANK", "1"},
                                            {"OMPI_COMM_WORLD_SIZE", "2"},
                                            {"SLURM_LOCALID", "0"},
                                            {"SLURM_PROCID", "1"}});
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.world_size, 2);
  EXPECT_EQ(w.local_rank, 0);  // only Slurm knows it
  EXPECT_EQ(w.master_port, 4000);
  EXPECT_EQ(w.sources, "flags, torchrun, Open MPI, Slurm");
}

TEST(ResolveWorld, DisagreeingSourcesAreAConfigError) {
  const std::string msg = config_error({}, {{"RANK", "1"},
                                            {"WORLD_SIZE", "2"},
                                            {"OMPI_COMM_WORLD_RANK", "0"},
                                            {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(msg.find("RANK=1 (torchrun) but OMPI_COMM_WORLD_RANK=0 (Open MPI)"), std::string::npos)
      << msg;
  WorldFlags flags;
  flags.world_size = 4;
  const std::string flag_msg = config_error(flags, {{"SLURM_NTASKS", "2"}});
  EXPECT_NE(flag_msg.find("--world-size 4 but SLURM_NTASKS=2 (Slurm)"), std::string::npos)
      << flag_msg;
  const std::string pmi_msg =
      config_error({}, {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"SLURM_PROCID", "1"}});
  EXPECT_NE(pmi_msg.find("PMI_RANK=0 (PMI) but SLURM_PROCID=1 (Slurm)"), std::string::npos)
      << pmi_msg;
}

TEST(ResolveWorld, BadValuesNameTheVariable) {
  EXPECT_NE(config_error({}, {{"RANK", "one"}}).find("RANK"), std::string::npos);
  EXPECT_NE(config_error({}, {{"SLURM_NTASKS", "2x"}}).find("SLURM_NTASKS (Slurm)='2x'"),
            std::string::npos);
  EXPECT_NE(config_error({}, {{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("rank 2 is outside"),
            std::string::npos);
  EXPECT_NE(config_error({}, {{"WORLD_SIZE", "0"}}).find("world size must be >= 1"),
            std::string::npos);
  EXPECT_NE(config_error({}, {{"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}}).find("local rank 3"),
            std::string::npos);
  EXPECT_NE(config_error({}, {{"MASTER_PORT", "70000"}}).find("master port 70000"),
            std::string::npos);
}

TEST(ResolveWorld, CurrentEnvironmentIsReadable) {
  const EnvMap env = current_environment();
  EXPECT_FALSE(env.empty());
}

TEST(MemoryStore, SetGetAddWaitErase) {
  MemoryStore store;
  store.set("a", {1, 2});
  EXPECT_EQ(store.get("a", milliseconds(10)), (std::vector<std::uint8_t>{1, 2}));
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -2), 3);
  EXPECT_TRUE(store.check({"a", "n"}));
  EXPECT_FALSE(store.check({"a", "b"}));
  try {
    store.wait({"a", "b"}, milliseconds(20));
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(20));
    store.set("b", {});
  });
  store.wait({"a", "b"}, milliseconds(5000));
  late.join();
  EXPECT_TRUE(store.erase("b"));
  EXPECT_FALSE(store.erase("b"));
  EXPECT_THROW(store.add("a", 1), BackendError);
}

TEST(Rendezvous, NamesTheRanksThatNeverJoined) {
  MemoryStore store;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  for (int r : {0, 1, 3}) {
    threads.emplace_back([&, r] {
      WorldInfo w;
      w.rank = r;
      w.world_size = 5;
      try {
        rendezvous(store, w, milliseconds(200));
      } catch (const TimeoutError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("ranks [2, 4] never joined (world size 5)"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
  }
}

// Note [Failing rendezvous together]: the store's host (rank 0) times out long before rank 1
// would; rank 1 still fails with the same TimeoutError (not a broken connection), at once, and
// rank 0 leaves only after rank 1 has seen it.
TEST(Rendezvous, RanksThatJoinedFailTogetherWhenTheFirstTimesOut) {
  const int port = find_free_port();
  std::vector<std::string> errors(2);
  std::vector<double> seconds(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      WorldInfo w;
      w.rank = r;
      w.world_size = 3;  // rank 2 never comes
      w.master_port = port;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        // Rank 1 connects once the store is up (a refused first connect makes c10d back off),
        // and rank 0's deadline leaves it time to join on a loaded host: the test is that rank 1
        // then fails with rank 0, long before its own 20 s deadline.
        if (r == 1) std::this_thread::sleep_for(milliseconds(100));
        auto store = make_tcp_store(w, milliseconds(10000));
        rendezvous(*store, w, milliseconds(r == 0 ? 2000 : 20000));
      } catch (const TimeoutError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("wrong error: ") + e.what();
      }
      seconds[static_cast<std::size_t>(r)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("ranks [2] never joined (world size 3)"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
  }
  EXPECT_LT(seconds[1], 6.0);  // rank 0's 2 s, not its own 20 s deadline
}

TEST(Rendezvous, CompletesWhenEveryoneJoinsOverTcp) {
  const int port = find_free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(3);
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      WorldInfo w;
      w.rank = r;
      w.world_size = 3;
      w.master_port = port;
      try {
        if (r != 0) std::this_thread::sleep_for(milliseconds(50 * r));  // clients may be late
        auto store = make_tcp_store(w, milliseconds(10000));
        rendezvous(*store, w, milliseconds(10000));
        EXPECT_GE(store->add("counter", 1), 1);
        // Rank 0 hosts the store: it leaves last, after every rank's final request (a set,
        // which expects no reply); a client still waiting for a reply when the host exits
        // would see a broken pipe.
        store->set("done/" + std::to_string(r), {1});
        if (r == 0) {
          store->wait({"done/0", "done/1", "done/2"}, milliseconds(10000));
          EXPECT_EQ(store->add("counter", 0), 3);
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(Rendezvous, MissingStoreHostIsATimeoutNamingRankZero) {
  WorldInfo w;
  w.rank = 1;
  w.world_size = 2;
  w.master_port = find_free_port();  // nobody listens there
  try {
    (void)make_tcp_store(w, milliseconds(300));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 never joined"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipewright::exec
