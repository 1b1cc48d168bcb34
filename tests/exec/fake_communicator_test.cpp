#include "pipewright/exec/fake_communicator.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong{10000};
constexpr milliseconds kShort{50};

BufferView view(std::vector<float>& v) { return BufferView{v.data(), v.size(), DType::kFloat32}; }
BufferView view(std::vector<std::int64_t>& v) {
  return BufferView{v.data(), v.size(), DType::kInt64};
}

// Runs body(rank, comm) on one thread per rank and rethrows the first failure.
void run_ranks(int n, const std::function<void(int, Communicator&)>& body) {
  FakeWorld world(n);
  auto comms = world.communicators();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r, *comms[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(FakeCommunicator, SendRecvIsFifoPerTag) {
  run_ranks(2, [](int rank, Communicator& comm) {
    EXPECT_EQ(comm.backend_name(), "fake");
    EXPECT_EQ(comm.size(), 2);
    if (rank == 0) {
      for (float i = 0; i < 3; ++i) {
        std::vector<float> v{i, i + 10};
        comm.send(view(v), 1, 7, {})->wait(kLong);
      }
      std::vector<float> other{99};
      comm.send(view(other), 1, 8, {})->wait(kLong);
    } else {
      std::vector<float> other{0};
      comm.recv(view(other), 0, 8, {})->wait(kLong);  // tag 8 first: tags are independent
      EXPECT_EQ(other[0], 99);
      std::vector<std::vector<float>> got(3, std::vector<float>(2));
      std::vector<WorkPtr> works;
      for (auto& g : got) works.push_back(comm.recv(view(g), 0, 7, {}));
      for (auto& w : works) w->wait(kLong);
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(got[static_cast<std::size_t>(i)], (std::vector<float>{float(i), float(i + 10)}));
      }
    }
  });
}

TEST(FakeCommunicator, CollectivesOverGridOfSizes) {
  for (int n : {1, 2, 3, 5}) {
    for (int root = 0; root < n; ++root) {
      run_ranks(n, [n, root](int rank, Communicator& comm) {
        std::vector<float> v{float(rank), float(rank) * 2 + 1};
        comm.all_reduce(view(v), ReduceOp::kSum, {})->wait(kLong);
        const float sum = float(n * (n - 1) / 2);
        EXPECT_EQ(v, (std::vector<float>{sum, 2 * sum + float(n)}));

        std::vector<std::int64_t> m{rank, -rank};
        comm.all_reduce(view(m), ReduceOp::kMax, {})->wait(kLong);
        EXPECT_EQ(m, (std::vector<std::int64_t>{n - 1, 0}));

        std::vector<float> r{float(rank + 1)};
        comm.reduce(view(r), root, ReduceOp::kMin, {})->wait(kLong);
        if (rank == root) {
          EXPECT_EQ(r[0], 1.0f);
        }

        std::vector<float> b{rank == root ? 42.0f : -1.0f, float(rank)};
        comm.broadcast(view(b), root, {})->wait(kLong);
        EXPECT_EQ(b, (std::vector<float>{42.0f, float(root)}));

        comm.barrier({})->wait(kLong);
      });
    }
  }
}

TEST(FakeCommunicator, HalfPrecisionAllReduce) {
  run_ranks(2, [](int, Communicator& comm) {
    // 1.5 in float16 is 0x3E00, in bfloat16 0x3FC0; the sum is 3.0 (0x4200 / 0x4040).
    std::vector<std::uint16_t> h{0x3E00}, b{0x3FC0};
    comm.all_reduce(BufferView{h.data(), 1, DType::kFloat16}, ReduceOp::kSum, {})->wait(kLong);
    comm.all_reduce(BufferView{b.data(), 1, DType::kBFloat16}, ReduceOp::kSum, {})->wait(kLong);
    EXPECT_EQ(h[0], 0x4200);
    EXPECT_EQ(b[0], 0x4040);
  });
}

TEST(FakeCommunicator, SplitMakesIndependentGroups) {
  run_ranks(4, [](int rank, Communicator& comm) {
    // Even and odd groups, created by every rank in the same order.
    auto even = comm.split({0, 2});
    auto odd = comm.split({1, 3});
    Communicator* mine = rank % 2 == 0 ? even.get() : odd.get();
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ((rank % 2 == 0 ? odd : even), nullptr);
    EXPECT_EQ(mine->size(), 2);
    EXPECT_EQ(mine->rank(), rank / 2);
    EXPECT_EQ(mine->global_rank(1), 2 + rank % 2);
    std::vector<float> v{float(rank)};
    mine->all_reduce(view(v), ReduceOp::kSum, {})->wait(kLong);
    EXPECT_EQ(v[0], rank % 2 == 0 ? 2.0f : 4.0f);
    // Point-to-point inside the group uses group-local ranks.
    std::vector<float> p{float(rank)};
    if (mine->rank() == 0) {
      mine->send(view(p), 1, 0, {})->wait(kLong);
    } else {
      mine->recv(view(p), 0, 0, {})->wait(kLong);
      EXPECT_EQ(p[0], float(rank - 2));
    }
  });
}

TEST(FakeCommunicator, RecvTimesOutNamingPeerAndContext) {
  FakeWorld world(2);
  auto comms = world.communicators();
  std::vector<float> v(4);
  OpContext ctx{7, 3, 2, "RECV_F"};
  auto work = comms[0]->recv(view(v), 1, 0, ctx);
  try {
    work->wait(kShort);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0: recv from rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("RECV_F stage 3 microbatch 2 step 7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("timed out after 50 ms"), std::string::npos) << msg;
  }
  // A timeout is not sticky: the message can still arrive.
  std::vector<float> w{1, 2, 3, 4};
  comms[1]->send(view(w), 0, 0, {})->wait(kLong);
  work->wait(kLong);
  EXPECT_EQ(v, w);
  EXPECT_EQ(world.bytes_sent(1), 16u);
}

TEST(FakeCommunicator, CollectiveTimeoutListsMissingRanks) {
  FakeWorld world(4);
  auto comms = world.communicators();
  auto w0 = comms[0]->barrier({});
  auto w2 = comms[2]->barrier({});
  try {
    w0->wait(kShort);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks [1, 3]"), std::string::npos) << e.what();
  }
}

TEST(FakeCommunicator, KilledPeerFailsWaitersWithPeerError) {
  FakeWorld world(3);
  auto comms = world.communicators();
  std::vector<float> v(1);
  auto recv = comms[0]->recv(view(v), 2, 0, OpContext{1, 0, 4, "RECV_B"});
  auto all = comms[1]->all_reduce(view(v), ReduceOp::kSum, {});
  std::thread killer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    world.kill(2);
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    recv->wait(kLong);
    FAIL() << "expected PeerError";
  } catch (const PeerError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("peer rank 2 died"), std::string::npos) << msg;
    EXPECT_NE(msg.find("microbatch 4"), std::string::npos) << msg;
  }
  killer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  EXPECT_THROW(all->wait(kLong), PeerError);
  EXPECT_THROW(all->wait(kLong), PeerError);  // the error is stored
  EXPECT_FALSE(world.is_alive(2));
  // The dead rank's own operations fail; sends to it fail with PeerError.
  EXPECT_THROW(comms[2]->barrier({})->wait(kLong), BackendError);
  EXPECT_THROW(comms[0]->send(view(v), 2, 0, {})->wait(kLong), PeerError);
}

TEST(FakeCommunicator, DestroyedCommunicatorCountsAsLeaving) {
  FakeWorld world(2);
  auto c0 = world.communicator(0);
  auto c1 = world.communicator(1);
  std::vector<float> v{5};
  c1->send(view(v), 0, 0, {})->wait(kLong);
  c1.reset();
  // Data sent before leaving still arrives; anything else fails with PeerError.
  std::vector<float> got(1);
  c0->recv(view(got), 1, 0, {})->wait(kLong);
  EXPECT_EQ(got[0], 5.0f);
  try {
    c0->recv(view(got), 1, 0, {})->wait(kLong);
    FAIL() << "expected PeerError";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 left"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)world.communicator(1), ConfigError);
}

TEST(FakeCommunicator, MismatchedCollectivesFailOnEveryRank) {
  FakeWorld world(2);
  auto comms = world.communicators();
  std::vector<float> a(4), b(3);
  auto w0 = comms[0]->all_reduce(view(a), ReduceOp::kSum, {});
  auto w1 = comms[1]->all_reduce(view(b), ReduceOp::kSum, {});
  EXPECT_THROW(w0->wait(kLong), BackendError);
  try {
    w1->wait(kLong);
    FAIL();
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("count=4"), std::string::npos) << e.what();
  }
}

TEST(FakeCommunicator, SizeMismatchOnRecv) {
  FakeWorld world(2);
  auto comms = world.communicators();
  std::vector<float> a(4), b(3);
  comms[0]->send(view(a), 1, 0, {})->wait(kLong);
  EXPECT_THROW(comms[1]->recv(view(b), 0, 0, {})->wait(kLong), BackendError);
}

TEST(FakeCommunicator, BadArgumentsAreRejected) {
  EXPECT_THROW(FakeWorld(0), ConfigError);
  FakeWorld world(2);
  EXPECT_THROW((void)world.communicator(2), ConfigError);
  auto c = world.communicator(0);
  std::vector<float> v(1);
  EXPECT_THROW((void)c->send(view(v), 5, 0, {}), InternalError);
  EXPECT_THROW((void)c->split({1, 0}), InternalError);
}

}  // namespace
}  // namespace pipewright::exec
