// Note [Receive before send] (dp/sgp.hpp): SGP's push-sum round and DiLoCo's bf16 scatter and
// gather post every receive of a paired exchange before its first send, and the exchange still
// mixes what Note [SGP step] says. A communicator that records the order of point-to-point
// posts wraps the fake backend.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <string>
#include <vector>

#include "dp/diloco.hpp"
#include "dp/sgp.hpp"
#include "dp_test_util.hpp"
#include "pipewright/exec/fake_communicator.hpp"

namespace pipewright::exec {
namespace {

using testing::Mlp;
using testing::run_replicas;

// Forwards to `inner` and records "recv <peer>", "send <peer>", "begin" and "end" in call order.
class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(Communicator& inner) : inner_(inner) {}

  int rank() const noexcept override { return inner_.rank(); }
  int size() const noexcept override { return inner_.size(); }
  std::string backend_name() const override { return inner_.backend_name(); }
  int global_rank(int r) const noexcept override { return inner_.global_rank(r); }
  WorkPtr send(const BufferView& buf, int dst, std::int64_t tag, const OpContext& ctx) override {
    log("send " + std::to_string(dst));
    return inner_.send(buf, dst, tag, ctx);
  }
  WorkPtr recv(const BufferView& buf, int src, std::int64_t tag, const OpContext& ctx) override {
    log("recv " + std::to_string(src));
    return inner_.recv(buf, src, tag, ctx);
  }
  WorkPtr all_reduce(const BufferView& buf, ReduceOp op, const OpContext& ctx) override {
    return inner_.all_reduce(buf, op, ctx);
  }
  WorkPtr reduce(const BufferView& buf, int root, ReduceOp op, const OpContext& ctx) override {
    return inner_.reduce(buf, root, op, ctx);
  }
  WorkPtr broadcast(const BufferView& buf, int root, const OpContext& ctx) override {
    return inner_.broadcast(buf, root, ctx);
  }
  WorkPtr barrier(const OpContext& ctx) override { return inner_.barrier(ctx); }
  void begin_p2p_batch() override {
    log("begin");
    inner_.begin_p2p_batch();
  }
  void end_p2p_batch() override {
    log("end");
    inner_.end_p2p_batch();
  }
  std::unique_ptr<Communicator> split(const std::vector<int>& members) override {
    return inner_.split(members);
  }

  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> guard(mu_);
    return events_;
  }

 private:
  void log(std::string e) {
    std::lock_guard<std::mutex> guard(mu_);
    events_.push_back(std::move(e));
  }
  Communicator& inner_;
  mutable std::mutex mu_;
  std::vector<std::string> events_;
};

// Fails unless every p2p batch in `events` posts all its receives before its first send; returns
// the number of batches.
int check_receives_first(const std::vector<std::string>& events, const std::string& who) {
  int batches = 0;
  bool in_batch = false, sent = false;
  for (const auto& e : events) {
    if (e == "begin") {
      EXPECT_FALSE(in_batch) << who;
      in_batch = true;
      sent = false;
      ++batches;
    } else if (e == "end") {
      in_batch = false;
    } else {
      EXPECT_TRUE(in_batch) << who << ": " << e << " outside a p2p batch";
      if (e.rfind("send", 0) == 0) sent = true;
      EXPECT_FALSE(sent && e.rfind("recv", 0) == 0) << who << ": " << e << " after a send";
    }
  }
  return batches;
}

TEST(SgpExchange, PostsTheReceiveBeforeTheSendAndMixesHalves) {
  for (int n : {2, 3, 5}) {
    std::vector<std::vector<std::string>> logs(static_cast<std::size_t>(n));
    std::vector<std::vector<torch::Tensor>> xs(static_cast<std::size_t>(n));
    constexpr int kRounds = 4;
    run_replicas(n, [&](int r, Communicator& fake) {
      RecordingCommunicator comm(fake);
      PushSumGossip gossip(&comm, std::chrono::seconds(10));
      DataParallelStats stats;
      torch::Tensor x = torch::full({6}, static_cast<float>(r + 1));
      for (int s = 0; s < kRounds; ++s) {
        gossip.exchange(x, s, stats);
        xs[static_cast<std::size_t>(r)].push_back(x.clone());
      }
      logs[static_cast<std::size_t>(r)] = comm.events();
    });
    // Reference: Note [SGP step] with z = w x, from x_r = r + 1, w_r = 1.
    std::vector<double> z(static_cast<std::size_t>(n)), w(static_cast<std::size_t>(n), 1.0);
    for (int r = 0; r < n; ++r) z[static_cast<std::size_t>(r)] = r + 1;
    for (int s = 0; s < kRounds; ++s) {
      std::vector<double> z2(z.size()), w2(w.size());
      for (int r = 0; r < n; ++r) {
        const auto j = static_cast<std::size_t>(PushSumGossip::in_peer(r, n, s));
        z2[static_cast<std::size_t>(r)] = z[static_cast<std::size_t>(r)] / 2 + z[j] / 2;
        w2[static_cast<std::size_t>(r)] = w[static_cast<std::size_t>(r)] / 2 + w[j] / 2;
      }
      z = z2;
      w = w2;
      for (int r = 0; r < n; ++r) {
        const double want = z[static_cast<std::size_t>(r)] / w[static_cast<std::size_t>(r)];
        EXPECT_NEAR(xs[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)][0].item<double>(),
                    want, 1e-5)
            << "dp " << n << " replica " << r << " round " << s;
      }
    }
    for (int r = 0; r < n; ++r) {
      const auto& log = logs[static_cast<std::size_t>(r)];
      const std::string who = "dp " + std::to_string(n) + " replica " + std::to_string(r);
      EXPECT_EQ(check_receives_first(log, who), kRounds) << who;
      ASSERT_EQ(log.size(), static_cast<std::size_t>(4 * kRounds)) << who;
      for (int s = 0; s < kRounds; ++s) {
        const auto i = static_cast<std::size_t>(4 * s);
        EXPECT_EQ(log[i + 1], "recv " + std::to_string(PushSumGossip::in_peer(r, n, s))) << who;
        EXPECT_EQ(log[i + 2], "send " + std::to_string(PushSumGossip::out_peer(r, n, s))) << who;
      }
    }
  }
}

TEST(DiLoCoBf16Exchange, PostsEveryReceiveBeforeTheFirstSend) {
  constexpr int kN = 3;
  std::vector<std::vector<std::string>> logs(kN);
  std::vector<std::vector<torch::Tensor>> finals(kN);
  const Mlp init = Mlp::init(5, 7, 2, 11);
  run_replicas(kN, [&](int r, Communicator& fake) {
    RecordingCommunicator comm(fake);
    DiLoCoOptions o;
    o.sync_every = 1;
    o.bf16 = true;
    o.timeout = std::chrono::seconds(10);
    DiLoCo diloco(&comm, o);
    Mlp m = init.clone();
    std::vector<StageParams> stages{m.stage_params()};
    diloco.on_start(stages);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : m.params) p.add_(0.01 * (r + 1));  // an inner step that differs by replica
    }
    diloco.after_optimizer_step(0);
    diloco.after_optimizer_step(1);
    for (const auto& p : m.params)
      finals[static_cast<std::size_t>(r)].push_back(p.detach().clone());
    logs[static_cast<std::size_t>(r)] = comm.events();
  });
  for (int r = 0; r < kN; ++r) {
    const std::string who = "replica " + std::to_string(r);
    // Two outer steps, each a scatter and a gather batch.
    EXPECT_EQ(check_receives_first(logs[static_cast<std::size_t>(r)], who), 4) << who;
    for (std::size_t i = 0; i < finals[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(finals[static_cast<std::size_t>(r)][i], finals[0][i])) << who;
    }
  }
}

}  // namespace
}  // namespace pipewright::exec
