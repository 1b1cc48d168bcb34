// Stochastic Gradient Push (Assran et al. 2019, "Stochastic Gradient Push for Distributed Deep
// Learning", ICML) with fairscale's gossip semantics (fairscale/experimental/nn/data_parallel/
// gossip: GossipDataParallel over a DynamicDirectedExponentialGraph, PushSum mixing, one peer
// per iteration), synchronous variant; see docs/data-parallel.md.
//
// Note [SGP step]
// Replica i keeps a push-sum weight w_i (1 at start) and the de-biased parameters x_i (what the
// stages compute with); its push-sum numerator is z_i = w_i x_i. The exponential graph over n
// replicas has the distances 2^0, 2^1, ..., 2^floor(log2(n - 1)); after the optimizer step
// numbered s, with d = 2^(s mod number of distances), replica i sends (z_i / 2, w_i / 2) to
// replica (i + d) mod n and receives (z_j / 2, w_j / 2) from j = (i - d) mod n (uniform mixing
// with one peer: half kept, half pushed), then
//   z_i <- z_i / 2 + z_j / 2;  w_i <- w_i / 2 + w_j / 2;  x_i <- z_i / w_i  (de-biased).
// There is no gradient communication: the optimizer steps on x_i with the local gradient. At
// n = 2 the one peer is the other replica, so x_i becomes the average of the two replicas'
// parameters every step: with plain SGD that is DDP (to float rounding; test exec.dp.sgp).
//
// Note [Receive before send]
// A paired exchange (this SGP round; DiLoCo's bf16 scatter and gather) posts its receives before
// its sends. The order changes no result (each pair's messages still match in posting order),
// but over Gloo's TCP transport it decides whether the two directions move at once. Gloo's
// send/recv rendezvous (gloo/transport/tcp/pair.cc, unbound buffers): a receive sends the peer
// a NOTIFY_RECV_READY; a send whose peer's notification has already arrived writes its data at
// once, else it sends NOTIFY_SEND_READY and writes when the notification comes; a pair's
// messages leave in order on one socket. With the send first, the replica that comes later
// (its peer's notification is already there) writes its whole message and only then its own
// RECV_READY, which queues behind that message on the link, so the earlier replica's data
// starts only after the later one's has arrived: the two directions one after the other. With
// the receive first, both RECV_READYs cross before any data and both directions carry at once,
// however late either replica comes. Measured on two network-namespace nodes joined by a
// 100 Mbit/s link, two pairs exchanging 840 KB each way (SGP at pp 2 x dp 2): the late side's
// exchange 245-250 ms when it comes 10 ms late with the send first, 141-143 ms with the receive
// first (what the link needs for the bytes). In training (bench/fidelity.sh's shaped SGP cells)
// the step went from 333-364 ms to 260-314 ms (docs/simulator.md, the fidelity matrix).
// Gloo's ring collectives post receive first too (Note [TCP ring collectives]).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "dp/dp_algorithm.hpp"

namespace pipewright::exec {

// One synchronous push-sum round per call; shared by SGP and SlowMo's SGP base.
class PushSumGossip {
 public:
  // `dp` (size >= 2) must outlive this object.
  PushSumGossip(Communicator* dp, std::chrono::milliseconds timeout);

  // The replica replica `rank` sends to / receives from after step `step`.
  [[nodiscard]] static int out_peer(int rank, int n, std::int64_t step) noexcept;
  [[nodiscard]] static int in_peer(int rank, int n, std::int64_t step) noexcept;

  // Mixes the de-biased float32 parameters `x` (flat, updated in place) and the weight.
  void exchange(torch::Tensor& x, std::int64_t step, DataParallelStats& stats);
  [[nodiscard]] double weight() const noexcept { return weight_; }
  void set_weight(double w) noexcept { weight_ = w; }

 private:
  Communicator* dp_;
  std::chrono::milliseconds timeout_;
  double weight_ = 1.0;
};

class Sgp final : public DataParallelAlgorithm {
 public:
  Sgp(Communicator* dp, std::chrono::milliseconds timeout, std::int64_t check_replicas);

  void on_start(std::vector<StageParams>& stages) override;
  void before_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void reduce_grad(int /*stage*/) override {}
  void after_optimizer_step(std::int64_t step) override;
  [[nodiscard]] DataParallelStats stats() const override { return stats_; }
  // "sgp.weight": the push-sum weight (float64, one element).
  [[nodiscard]] std::map<std::string, torch::Tensor> state() const override;
  void load_state(const std::map<std::string, torch::Tensor>& state) override;

 private:
  Communicator* dp_;
  std::chrono::milliseconds timeout_;
  std::int64_t check_replicas_ = 0;
  PushSumGossip gossip_;
  std::vector<StageParams> stages_;
  std::vector<torch::Tensor> trainable_;
  DataParallelStats stats_;
};

namespace detail {
// The trainable float32 parameters of `stages` (stage order, then registration order); throws
// ConfigError naming `who` for a parameter of another type.
[[nodiscard]] std::vector<torch::Tensor> trainable_float_params(
    const std::vector<StageParams>& stages, const char* who);
[[nodiscard]] torch::Tensor flatten(const std::vector<torch::Tensor>& params);
void unflatten(const torch::Tensor& flat, std::vector<torch::Tensor>& params);
}  // namespace detail

}  // namespace pipewright::exec
