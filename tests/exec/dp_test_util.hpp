// Helpers of the data-parallel unit tests (DDP, ZeRO-1/2, ZeRO-3, re-sharding): replicas as
// threads over the fake backend, a tiny MLP written with plain tensors so that a reference
// computation can reuse it, the one-process reference itself, and ZeRO's options.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "dp/dp_hooks.hpp"
#include "pipewright/exec/fake_communicator.hpp"
#include "zero/zero.hpp"

namespace pipewright::exec::testing {

// Runs body(replica, comm) on one thread per replica and rethrows the first failure.
inline void run_replicas(int n, const std::function<void(int, Communicator&)>& body,
                         FakeWorld* world_out = nullptr) {
  FakeWorld local(n);
  FakeWorld& world = world_out ? *world_out : local;
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

// y = W2 relu(W1 x + b1) + b2 (+ 0 * unused, when asked, to have a parameter without gradient).
struct Mlp {
  std::vector<torch::Tensor> params;  // W1, b1, W2, b2 [, unused]

  static Mlp init(int in, int hidden, int out, std::uint64_t seed, bool with_unused = false) {
    torch::manual_seed(seed);
    Mlp m;
    m.params = {torch::randn({hidden, in}) * 0.5, torch::randn({hidden}) * 0.1,
                torch::randn({out, hidden}) * 0.5, torch::randn({out}) * 0.1};
    if (with_unused) m.params.push_back(torch::randn({5}));
    for (auto& p : m.params) p.requires_grad_(true);
    return m;
  }
  [[nodiscard]] Mlp clone() const {
    Mlp m;
    for (const auto& p : params) m.params.push_back(p.detach().clone().requires_grad_(true));
    return m;
  }
  [[nodiscard]] torch::Tensor forward(const torch::Tensor& x) const {
    auto h = torch::relu(torch::matmul(x, params[0].t()) + params[1]);
    return torch::matmul(h, params[2].t()) + params[3];
  }
  [[nodiscard]] StageParams stage_params(int stage = 0) const {
    StageParams sp;
    sp.stage = stage;
    sp.params = params;
    return sp;
  }
};

// Deterministic data: rows of x [rows, in] and y [rows, out], from a seeded generator that is
// independent of torch's global one (threads).
inline std::pair<torch::Tensor, torch::Tensor> make_data(std::int64_t rows, int in, int out,
                                                         std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto x = at::randn({rows, in}, gen);
  auto y = at::randn({rows, out}, gen);
  return {x, y};
}

// The MLP and batch the algorithms' tests share: kIn -> kHidden -> kOut, kRowsPerReplica rows of
// each replica a step.
constexpr int kIn = 6;
constexpr int kHidden = 10;
constexpr int kOut = 3;
constexpr std::int64_t kRowsPerReplica = 6;

// Replica r's starting model: `init`, but off by one on every replica other than 0, so that a
// test fails unless the algorithm broadcasts replica 0's weights at start.
inline Mlp replica_model(const Mlp& init, int r) {
  Mlp m = init.clone();
  if (r != 0) {
    torch::NoGradGuard g;
    for (auto& p : m.params) p.add_(1.0);
  }
  return m;
}

// Replica r's rows of step `step`'s global batch of kRowsPerReplica x dp rows.
inline std::pair<torch::Tensor, torch::Tensor> replica_batch(int step, int r, int dp) {
  auto [x, y] = make_data(kRowsPerReplica * dp, kIn, kOut, 100 + static_cast<std::uint64_t>(step));
  return {x.narrow(0, r * kRowsPerReplica, kRowsPerReplica),
          y.narrow(0, r * kRowsPerReplica, kRowsPerReplica)};
}

// The reference: one process, the concatenated batch of every replica, one microbatch, `steps`
// steps of the optimizer make(params) builds.
template <typename MakeOptimizer>
std::vector<torch::Tensor> reference(const Mlp& init, int dp, int steps, MakeOptimizer make) {
  Mlp m = init.clone();
  auto opt = make(m.params);
  for (int step = 0; step < steps; ++step) {
    auto [x, y] =
        make_data(kRowsPerReplica * dp, kIn, kOut, 100 + static_cast<std::uint64_t>(step));
    torch::mse_loss(m.forward(x), y).backward();
    opt.step();
    opt.zero_grad();
  }
  return m.params;
}

// ZeRO's options of the unit tests: both bucket caps `cap_bytes`, a 20 s timeout.
inline ZeroOptions zero_options(int stage, int microbatches, std::int64_t cap_bytes) {
  ZeroOptions o;
  o.stage = stage;
  o.bucket_cap_bytes = cap_bytes;
  o.first_bucket_cap_bytes = cap_bytes;
  o.num_microbatches = microbatches;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

inline double max_abs_diff(const std::vector<torch::Tensor>& a,
                           const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, (a[i].detach() - b[i].detach()).abs().max().item<double>());
  }
  return m;
}

}  // namespace pipewright::exec::testing
