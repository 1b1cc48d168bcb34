#include "dp/sgp.hpp"

#include <string>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

constexpr std::int64_t kGossipTag = 0x5607;

int distances(int n) noexcept {
  int k = 0;
  while ((1 << k) <= n - 1) ++k;  // 2^0 .. 2^floor(log2(n - 1))
  return k < 1 ? 1 : k;
}

int distance(int n, std::int64_t step) noexcept {
  return 1 << static_cast<int>(step % distances(n));
}

}  // namespace

namespace detail {

std::vector<torch::Tensor> trainable_float_params(const std::vector<StageParams>& stages,
                                                  const char* who) {
  std::vector<torch::Tensor> out;
  for (const auto& sp : stages) {
    for (const auto& p : sp.params) {
      if (!p.requires_grad()) continue;
      PW_CHECK(p.scalar_type() == torch::kFloat, ConfigError,
               who << ": stage " << sp.stage << " has a " << p.scalar_type()
                   << " parameter; only float32 parameters are supported");
      out.push_back(p);
    }
  }
  return out;
}

torch::Tensor flatten(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  if (params.empty()) return torch::zeros({0});
  std::vector<torch::Tensor> parts;
  parts.reserve(params.size());
  for (const auto& p : params) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

void unflatten(const torch::Tensor& flat, std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::int64_t off = 0;
  for (auto& p : params) {
    p.detach().copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }
}

}  // namespace detail

PushSumGossip::PushSumGossip(Communicator* dp, std::chrono::milliseconds timeout)
    : dp_(dp), timeout_(timeout) {
  PW_ASSERT(dp_ != nullptr, "SGP needs a data-parallel communicator");
  PW_CHECK(dp_->size() >= 2, ConfigError,
           "SGP needs --dp >= 2 (gossip between replicas), got --dp " << dp_->size());
}

int PushSumGossip::out_peer(int rank, int n, std::int64_t step) noexcept {
  return (rank + distance(n, step)) % n;
}

int PushSumGossip::in_peer(int rank, int n, std::int64_t step) noexcept {
  return ((rank - distance(n, step)) % n + n) % n;
}

void PushSumGossip::exchange(torch::Tensor& x, std::int64_t step, DataParallelStats& stats) {
  torch::NoGradGuard no_grad;
  const int n = dp_->size();
  const int me = dp_->rank();
  const std::int64_t len = x.numel();
  // [z / 2, w / 2] in one message; the weight travels as float32 (sums of halves of 1 stay
  // exact for the steps any run takes).
  torch::Tensor out = torch::empty({len + 1}, x.options());
  out.narrow(0, 0, len).copy_(x).mul_(weight_ * 0.5);
  out[len].fill_(weight_ * 0.5);
  torch::Tensor in = torch::empty_like(out);
  OpContext ctx;
  ctx.step = step;
  ctx.what = "SGP push-sum gossip";
  dp_->begin_p2p_batch();
  // Note [Receive before send]: the receive is posted first.
  auto recv = dp_->recv(detail::view_of(in), in_peer(me, n, step), kGossipTag, ctx);
  auto send = dp_->send(detail::view_of(out), out_peer(me, n, step), kGossipTag, ctx);
  dp_->end_p2p_batch();
  ++stats.collectives;
  stats.payload_bytes += static_cast<std::uint64_t>(out.numel()) * 4;
  stats.wire_bytes += static_cast<double>(out.numel()) * 4;
  detail::timed_wait(recv, timeout_, stats);
  detail::timed_wait(send, timeout_, stats);
  out.add_(in);  // our kept half equals the half we sent
  const double w = out[len].item<double>();
  weight_ = w;
  x.copy_(out.narrow(0, 0, len)).div_(w);
}

Sgp::Sgp(Communicator* dp, std::chrono::milliseconds timeout, std::int64_t check_replicas)
    : dp_(dp), timeout_(timeout), check_replicas_(check_replicas), gossip_(dp, timeout) {}

void Sgp::on_start(std::vector<StageParams>& stages) {
  PW_ASSERT(stages_.empty(), "SGP on_start called twice");
  trainable_ = detail::trainable_float_params(stages, "SGP");
  detail::broadcast_from_replica0(*dp_, stages, timeout_, stats_);
  stages_ = stages;
}

void Sgp::after_optimizer_step(std::int64_t step) {
  ++stats_.steps;
  torch::Tensor x = detail::flatten(trainable_);
  gossip_.exchange(x, step, stats_);
  detail::unflatten(x, trainable_);
  // Replicas agree after every round only at dp = 2 (the one peer is the other replica).
  if (check_replicas_ > 0 && dp_->size() == 2 && (step + 1) % check_replicas_ == 0)
    detail::check_replicas_identical(*dp_, stages_, step, timeout_, stats_);
}

std::map<std::string, torch::Tensor> Sgp::state() const {
  return {{"sgp.weight", torch::tensor({gossip_.weight()}, torch::kDouble)}};
}

void Sgp::load_state(const std::map<std::string, torch::Tensor>& state) {
  auto it = state.find("sgp.weight");
  PW_CHECK(it != state.end(), ConfigError, "checkpoint: no 'sgp.weight' tensor");
  PW_CHECK(it->second.numel() == 1 && it->second.scalar_type() == torch::kDouble, ConfigError,
           "checkpoint: 'sgp.weight' is malformed");
  gossip_.set_weight(it->second.item<double>());
}

}  // namespace pipewright::exec
