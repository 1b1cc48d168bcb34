// The rendezvous store's job identity and failure reporting (issue 20, items 1 and 5; Note
// [Store protocol] in exec/src/store/tcp_store_server.cpp): it listens on the master address only,
// refuses processes of another job without disturbing its own, reports a port in use as a
// ConfigError naming the port, ends a rendezvous at once naming a rank that died, names ranks
// that stopped answering, and gives up on an absent rank 0 within the timeout (not twice it).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/exec/rendezvous.hpp"
#include "pipewright/exec/store.hpp"
#include "pipewright/graph/error.hpp"
#include "store/store_wire.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

WorldInfo world_of(int rank, int size, int port, const std::string& job_id) {
  WorldInfo w;
  w.rank = rank;
  w.world_size = size;
  w.master_port = port;
  w.job_id = job_id;
  return w;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A raw TCP connection to addr:port; -1 if refused.
int raw_connect(const char* addr, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, addr, &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// c10d's TCPStore listened on *:PORT; ours only on the master address (127.0.0.1 here), so the
// same port on another local address (127.0.0.2 is loopback too) refuses connections.
TEST(TcpStore, ListensOnTheMasterAddressOnly) {
  const int port = find_free_port();
  auto host = make_tcp_store(world_of(0, 1, port, "a"), milliseconds(5000));
  const int same = raw_connect("127.0.0.1", port);
  EXPECT_GE(same, 0);
  if (same >= 0) ::close(same);
  const int other = raw_connect("127.0.0.2", port);
  EXPECT_LT(other, 0) << "the store accepted a connection on 127.0.0.2";
  if (other >= 0) ::close(other);
}

// Two jobs on one port: the second job's process is refused with a clear message, and the first
// job's rendezvous and keys are untouched.
TEST(TcpStore, RefusesAnotherJobAndLeavesTheRunningJobUntouched) {
  const int port = find_free_port();
  auto host = make_tcp_store(world_of(0, 2, port, "job-a"), milliseconds(5000));
  host->set("key", {7});
  for (const auto& [job, size] : {std::pair<std::string, int>{"job-b", 2}, {"job-a", 3}, {"", 2}}) {
    try {
      (void)make_tcp_store(world_of(1, size, port, job), milliseconds(5000));
      FAIL() << "a process of another job (" << job << ", " << size << ") was let in";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rendezvous store at 127.0.0.1:" + std::to_string(port) +
                          " refused this process"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("another job on this port"), std::string::npos) << what;
    }
  }
  std::thread rank1([&] {
    auto store = make_tcp_store(world_of(1, 2, port, "job-a"), milliseconds(5000));
    rendezvous(*store, world_of(1, 2, port, "job-a"), milliseconds(5000));
    store->set("done/1", {1});
  });
  rendezvous(*host, world_of(0, 2, port, "job-a"), milliseconds(5000));
  host->wait({"done/1"}, milliseconds(5000));
  rank1.join();
  EXPECT_EQ(host->get("key", milliseconds(100)), std::vector<std::uint8_t>{7});
  // Once rank 1 is connected, a second "rank 1" of the same job id is refused too.
  auto rank1_again = make_tcp_store(world_of(1, 2, port, "job-a"), milliseconds(5000));
  EXPECT_THROW((void)make_tcp_store(world_of(1, 2, port, "job-a"), milliseconds(5000)),
               ConfigError);
}

TEST(TcpStore, PortInUseIsAConfigErrorNamingThePort) {
  const int port = find_free_port();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  try {
    (void)make_tcp_store(world_of(0, 2, port, "x"), milliseconds(1000));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("port " + std::to_string(port) + " is already in use"),
              std::string::npos)
        << e.what();
  }
  ::close(fd);
}

// Issue 20, item 5: with rank 0 absent, a rank gives up after its timeout, not about twice it.
TEST(TcpStore, AbsentRankZeroEndsWithinTheTimeout) {
  const auto t0 = Clock::now();
  try {
    (void)make_tcp_store(world_of(1, 2, find_free_port(), ""), milliseconds(2000));
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("within 2000 ms: rank 0 never joined"), std::string::npos)
        << e.what();
  }
  const double s = seconds_since(t0);
  EXPECT_GE(s, 1.9);
  EXPECT_LT(s, 3.0);
}

// A rank whose process ends (its connection closes without a goodbye) during the rendezvous is
// named at once by the others, who do not wait for their 20 s deadline.
TEST(TcpStore, ARankThatDiesDuringTheRendezvousIsNamedAtOnce) {
  const int port = find_free_port();
  std::vector<std::string> errors(2);
  std::vector<double> secs(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      const auto t0 = Clock::now();
      try {
        auto store = make_tcp_store(world_of(r, 3, port, "j"), milliseconds(20000));
        rendezvous(*store, world_of(r, 3, port, "j"), milliseconds(20000));
      } catch (const PeerError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("wrong error: ") + e.what();
      }
      secs[static_cast<std::size_t>(r)] = seconds_since(t0);
    });
  }
  std::this_thread::sleep_for(milliseconds(300));
  try {  // rank 2 connects, then fails before joining: its store closes while unwinding
    auto store = make_tcp_store(world_of(2, 3, port, "j"), milliseconds(20000));
    throw std::runtime_error("rank 2 dies");
  } catch (const std::runtime_error&) {
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    const auto& e = errors[static_cast<std::size_t>(r)];
    EXPECT_NE(e.find("ranks [2] left before every rank joined"), std::string::npos) << e;
    EXPECT_LT(secs[static_cast<std::size_t>(r)], 5.0);
  }
}

// A rank that stays connected but says nothing (SIGSTOP: its ping thread stops too) is named by
// unresponsive_ranks once it has been silent for longer than asked; live ranks are not.
TEST(TcpStore, NamesARankThatStoppedAnswering) {
  const int port = find_free_port();
  auto host = make_tcp_store(world_of(0, 3, port, "j"), milliseconds(5000));
  auto live = make_tcp_store(world_of(1, 3, port, "j"), milliseconds(5000));
  const int silent = raw_connect("127.0.0.1", port);
  ASSERT_GE(silent, 0);
  wire::Writer hello;
  hello.u8(static_cast<std::uint8_t>(wire::Op::kHello))
      .str(wire::kMagic)
      .str("j")
      .i64(3)
      .str("")
      .i64(2);
  ASSERT_TRUE(wire::send_all(silent, hello.frame()));
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(host->unresponsive_ranks(milliseconds(1000)), std::vector<int>{2});
  EXPECT_EQ(live->unresponsive_ranks(milliseconds(5000)), std::vector<int>{});
  ::close(silent);
}

// When the store is gone (rank 0 failed because another rank died), a rank still names rank 0
// and the ranks the store had reported gone in its last answer to a ping.
TEST(TcpStore, RemembersTheRanksGoneWhenTheStoreIsGone) {
  const int port = find_free_port();
  auto host = make_tcp_store(world_of(0, 3, port, "j"), milliseconds(5000));
  auto live = make_tcp_store(world_of(1, 3, port, "j"), milliseconds(5000));
  try {  // rank 2 connects, then dies (its store closes while unwinding: no goodbye)
    auto store = make_tcp_store(world_of(2, 3, port, "j"), milliseconds(5000));
    throw std::runtime_error("rank 2 dies");
  } catch (const std::runtime_error&) {
  }
  std::this_thread::sleep_for(milliseconds(1200));  // at least one ping answered since
  host.reset();
  EXPECT_EQ(live->unresponsive_ranks(milliseconds(2000)), (std::vector<int>{0, 2}));
}

}  // namespace
}  // namespace pipewright::exec
