#include "dp/slowmo.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dp/sgp.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

SlowMo::SlowMo(Communicator* dp, SlowMoOptions options) : dp_(dp), options_(options) {
  PW_ASSERT(dp_ != nullptr, "SlowMo needs a data-parallel communicator");
  const int n = dp_->size();
  replica_ = dp_->rank();
  PW_CHECK(options_.localsgd_frequency >= 1, ConfigError,
           "--localsgd-frequency must be >= 1, got " << options_.localsgd_frequency);
  PW_CHECK(options_.slowmo_frequency >= 1, ConfigError,
           "--slowmo-frequency must be >= 1, got " << options_.slowmo_frequency);
  PW_CHECK(options_.num_shards >= 1 && options_.num_shards <= n, ConfigError,
           "--slowmo-num-shards must be in 1.." << n << ", got " << options_.num_shards);
  PW_CHECK(options_.replicas_per_node >= 1 && n % options_.replicas_per_node == 0, ConfigError,
           "--procs-per-node: " << options_.replicas_per_node
                                << " replicas per node do not divide dp = " << n);
  PW_CHECK(options_.learning_rate > 0, ConfigError,
           "SlowMo needs a positive optimizer learning rate (its gamma), got "
               << options_.learning_rate);
  nodes_ = n / options_.replicas_per_node;
  // fairscale: "slowmo being set to False is equivalent to slowmo_lr being set to 1 and
  // slowmo_momentum being set to 0".
  slowmo_ = options_.slowmo_lr != 1.0 || options_.momentum != 0.0;
  if (!options_.memory_efficient) options_.num_shards = 1;
}

SlowMo::~SlowMo() = default;

bool SlowMo::slow_step_after(std::int64_t step) const noexcept {
  return slowmo_ && (step + 1) % options_.slowmo_frequency == 0;
}

bool SlowMo::averages_after(std::int64_t step) const noexcept {
  if (options_.sgp_base) return false;
  const bool localsgd = nodes_ > 1 && (step + 1) % options_.localsgd_frequency == 0;
  return localsgd && !(options_.memory_efficient && slow_step_after(step));
}

bool SlowMo::is_owner() const noexcept {
  return !options_.memory_efficient || replica_ < options_.num_shards;
}

void SlowMo::on_start(std::vector<StageParams>& stages) {
  PW_ASSERT(stages_.empty(), "SlowMo on_start called twice");
  detail::broadcast_from_replica0(*dp_, stages, options_.timeout, stats_);
  stages_ = stages;
  if (options_.sgp_base) gossip_ = std::make_unique<PushSumGossip>(dp_, options_.timeout);
  for (const auto& sp : stages_) {
    for (const auto& p : sp.params) {
      if (!p.requires_grad()) continue;
      PW_CHECK(p.scalar_type() == torch::kFloat, ConfigError,
               "SlowMo: stage " << sp.stage << " has a " << p.scalar_type()
                                << " parameter; only float32 parameters are supported");
      trainable_.push_back(p);
      total_ += p.numel();
    }
  }
  // Node groups, created in node order on every replica (split is collective).
  const int per_node = options_.replicas_per_node;
  if (per_node > 1) {
    for (int node = 0; node < nodes_; ++node) {
      std::vector<int> members;
      for (int r = node * per_node; r < (node + 1) * per_node; ++r) members.push_back(r);
      auto c = dp_->split(members);
      if (c) node_comm_ = std::move(c);
    }
    if (nodes_ > 1) {
      std::vector<int> masters;
      for (int node = 0; node < nodes_; ++node) masters.push_back(node * per_node);
      master_comm_ = dp_->split(masters);
    }
    averaging_comm_ = master_comm_.get();
  } else {
    averaging_comm_ = dp_;
  }
  shard_len_ = (total_ + options_.num_shards - 1) / options_.num_shards;
  // Note [SlowMo sharded slow step]: one shard per replica runs as reduce-scatter + all-gather.
  const int n = dp_->size();
  if (slowmo_ && options_.memory_efficient && options_.num_shards == n && n > 1 && total_ > 0) {
    make_flat_buffer();
  }
  // x_old starts as the initial parameters (after the broadcast), u at zero.
  if (slowmo_ && is_owner()) {
    const std::int64_t begin = options_.memory_efficient ? replica_ * shard_len_ : 0;
    const std::int64_t end =
        options_.memory_efficient ? std::min(total_, begin + shard_len_) : total_;
    const std::int64_t len = std::max<std::int64_t>(0, end - begin);
    x_old_ = flat_params().narrow(0, std::min(begin, total_), len).clone();
    u_ = torch::zeros({len}, x_old_.options());
  }
}

torch::Tensor SlowMo::flat_params() const {
  torch::NoGradGuard no_grad;
  if (trainable_.empty()) return torch::zeros({0}, torch::kFloat);
  std::vector<torch::Tensor> parts;
  parts.reserve(trainable_.size());
  for (const auto& p : trainable_) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

void SlowMo::set_params(const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  std::int64_t off = 0;
  for (auto& p : trainable_) {
    p.detach().copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }
}

void SlowMo::reduce_grad(int stage) {
  if (!node_comm_) return;  // one replica per node: no gradient communication at all
  torch::NoGradGuard no_grad;
  for (auto& sp : stages_) {
    if (sp.stage != stage) continue;
    std::vector<torch::Tensor> params;
    std::vector<torch::Tensor> parts;
    for (auto& p : sp.params) {
      if (!p.requires_grad()) continue;
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      params.push_back(p);
      parts.push_back(p.grad().reshape({-1}));
    }
    if (params.empty()) return;
    torch::Tensor flat = torch::cat(parts);
    flat.div_(static_cast<double>(node_comm_->size()));
    OpContext ctx;
    ctx.stage = stage;
    ctx.what = "SlowMo intra-node gradient all-reduce";
    detail::timed_wait(
        detail::counted_all_reduce(*node_comm_, detail::view_of(flat), ReduceOp::kSum, ctx, stats_),
        options_.timeout, stats_);
    std::int64_t off = 0;
    for (auto& p : params) {
      p.mutable_grad().copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
      off += p.numel();
    }
    return;
  }
  PW_ASSERT(false, "SlowMo: stage " << stage << " is not local to this rank");
}

void SlowMo::average_parameters(std::int64_t step) {
  torch::Tensor flat = flat_params();
  OpContext ctx;
  ctx.step = step;
  if (averaging_comm_ != nullptr) {
    flat.div_(static_cast<double>(nodes_));
    ctx.what = "LocalSGD parameter all-reduce";
    detail::timed_wait(detail::counted_all_reduce(*averaging_comm_, detail::view_of(flat),
                                                  ReduceOp::kSum, ctx, stats_),
                       options_.timeout, stats_);
  }
  if (node_comm_) {
    ctx.what = "LocalSGD broadcast of the parameters within the node";
    detail::timed_wait(
        detail::counted_broadcast(*node_comm_, detail::view_of(flat), 0, ctx, stats_),
        options_.timeout, stats_);
  }
  set_params(flat);
}

void SlowMo::update_shard(torch::Tensor x, torch::Tensor x_old, torch::Tensor u) const {
  // u <- beta u + (x_old - x) / gamma;  x_old <- x_old - alpha gamma u;  x <- x_old.
  const double gamma = options_.learning_rate;
  u.mul_(options_.momentum).add_((x_old - x).div_(gamma));
  x_old.add_(u, -options_.slowmo_lr * gamma);
  x.copy_(x_old);
}

void SlowMo::make_flat_buffer() {
  torch::NoGradGuard no_grad;
  const torch::Device device = trainable_.front().device();
  for (const auto& p : trainable_) {
    if (p.device() != device) return;  // parameters on several devices: the per-shard path
  }
  const std::int64_t padded = shard_len_ * dp_->size();
  if (device.is_cpu()) {
    // Zero-filled, 64-byte aligned; shared memory among the replicas of one host (Gloo).
    std::shared_ptr<void> mem =
        dp_->allocate_collective_buffer(static_cast<std::size_t>(padded) * sizeof(float));
    void* data = mem.get();
    flat_ = torch::from_blob(
        data, {padded}, [mem = std::move(mem)](void*) mutable { mem.reset(); },
        torch::TensorOptions().dtype(torch::kFloat));
  } else {
    flat_ = torch::zeros({padded}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  }
  std::int64_t off = 0;
  for (auto& p : trainable_) {
    torch::Tensor slot = storage_alias(flat_, off, p.sizes());
    slot.copy_(p.detach());
    // A tensor listed twice stays in its first slot; the second is copied (sharded_slow_step).
    if (!p.is_alias_of(flat_)) p.set_(slot);
    slots_.push_back(std::move(slot));
    off += p.numel();
  }
}

void SlowMo::sharded_slow_step(std::int64_t step) {
  const int n = dp_->size();
  // Parameters that do not live in their slot are copied in here and out at the end.
  std::vector<bool> copied(trainable_.size());
  for (std::size_t i = 0; i < trainable_.size(); ++i) {
    copied[i] = trainable_[i].data_ptr() != slots_[i].data_ptr();
    if (copied[i]) slots_[i].copy_(trainable_[i].detach());
  }
  // The sum of x / dp is the average over replicas; the padding stays zero.
  flat_.div_(static_cast<double>(n));
  torch::Tensor mine = flat_.narrow(0, replica_ * shard_len_, shard_len_);
  // Counted as the reduce + broadcast of the parameters (Note [SlowMo sharded slow step]).
  const auto bytes = static_cast<double>(total_) * static_cast<double>(sizeof(float));
  auto count = [&] {
    ++stats_.collectives;
    stats_.payload_bytes += static_cast<std::uint64_t>(bytes);
    stats_.wire_bytes += bytes * static_cast<double>(n - 1) / n;
  };
  OpContext ctx;
  ctx.step = step;
  ctx.what = "SlowMo reduce-scatter of the parameters";
  count();
  detail::timed_wait(
      dp_->reduce_scatter(detail::view_of(flat_), detail::view_of(mine), ReduceOp::kSum, ctx),
      options_.timeout, stats_);
  if (x_old_.numel() > 0) update_shard(mine.narrow(0, 0, x_old_.numel()), x_old_, u_);
  ctx.what = "SlowMo all-gather of the parameters";
  count();
  detail::timed_wait(dp_->all_gather(detail::view_of(mine), detail::view_of(flat_), ctx),
                     options_.timeout, stats_);
  for (std::size_t i = 0; i < trainable_.size(); ++i) {
    if (copied[i]) trainable_[i].detach().copy_(slots_[i]);
  }
}

void SlowMo::slow_momentum_step(std::int64_t step) {
  torch::NoGradGuard no_grad;
  if (flat_.defined()) {
    sharded_slow_step(step);
    return;
  }
  torch::Tensor x = flat_params();
  if (!options_.memory_efficient) {
    update_shard(x, x_old_, u_);
    set_params(x);
    return;
  }
  OpContext ctx;
  ctx.step = step;
  // Reduce each shard to its owner: the sum of x / dp is the average over replicas.
  x.div_(static_cast<double>(dp_->size()));
  std::vector<WorkPtr> works;
  for (int k = 0; k < options_.num_shards; ++k) {
    const std::int64_t begin = std::min(total_, k * shard_len_);
    const std::int64_t len = std::min(total_, begin + shard_len_) - begin;
    if (len <= 0) continue;
    ctx.what = "SlowMo reduce of shard " + std::to_string(k);
    works.push_back(
        detail::counted_reduce(*dp_, detail::view_of(x.narrow(0, begin, len)), k, ctx, stats_));
  }
  for (auto& w : works) detail::timed_wait(w, options_.timeout, stats_);
  works.clear();
  if (is_owner() && x_old_.numel() > 0) {
    update_shard(x.narrow(0, replica_ * shard_len_, x_old_.numel()), x_old_, u_);
  }
  for (int k = 0; k < options_.num_shards; ++k) {
    const std::int64_t begin = std::min(total_, k * shard_len_);
    const std::int64_t len = std::min(total_, begin + shard_len_) - begin;
    if (len <= 0) continue;
    ctx.what = "SlowMo broadcast of shard " + std::to_string(k);
    works.push_back(
        detail::counted_broadcast(*dp_, detail::view_of(x.narrow(0, begin, len)), k, ctx, stats_));
  }
  for (auto& w : works) detail::timed_wait(w, options_.timeout, stats_);
  set_params(x);
}

void SlowMo::after_optimizer_step(std::int64_t step) {
  ++stats_.steps;
  const bool average = averages_after(step);
  const bool slow = slow_step_after(step);
  if (gossip_) {
    torch::NoGradGuard no_grad;
    torch::Tensor x = flat_params();
    gossip_->exchange(x, step, stats_);
    set_params(x);
  }
  if (average) average_parameters(step);
  if (slow) slow_momentum_step(step);
  if (options_.check_replicas > 0 && (step + 1) % options_.check_replicas == 0) {
    // Replicas are bit-identical only right after an averaging (see Note [SlowMo step]); other
    // steps are not checked.
    const bool identical =
        options_.sgp_base
            ? dp_->size() == 2 || (slow && options_.memory_efficient)
            : nodes_ == 1 || (average && !slow) || (slow && options_.memory_efficient);
    if (identical) detail::check_replicas_identical(*dp_, stages_, step, options_.timeout, stats_);
  }
}

std::map<std::string, torch::Tensor> SlowMo::state() const {
  std::map<std::string, torch::Tensor> out;
  if (x_old_.defined()) {
    out["slowmo.x_old"] = x_old_;
    out["slowmo.u"] = u_;
  }
  if (gossip_) out["slowmo.sgp_weight"] = torch::tensor({gossip_->weight()}, torch::kDouble);
  return out;
}

void SlowMo::load_state(const std::map<std::string, torch::Tensor>& state) {
  if (gossip_) {
    auto it = state.find("slowmo.sgp_weight");
    PW_CHECK(
        it != state.end() && it->second.numel() == 1 && it->second.scalar_type() == torch::kDouble,
        ConfigError, "checkpoint: no valid 'slowmo.sgp_weight' tensor");
    gossip_->set_weight(it->second.item<double>());
  }
  if (!x_old_.defined()) return;
  for (auto [name, dst] : {std::pair<const char*, torch::Tensor*>{"slowmo.x_old", &x_old_},
                           std::pair<const char*, torch::Tensor*>{"slowmo.u", &u_}}) {
    auto it = state.find(name);
    PW_CHECK(it != state.end(), ConfigError, "checkpoint: no '" << name << "' tensor");
    PW_CHECK(it->second.numel() == dst->numel() && it->second.scalar_type() == torch::kFloat,
             ConfigError,
             "checkpoint: '" << name << "' has " << it->second.numel() << " elements, expected "
                             << dst->numel() << " (was it written with other SlowMo options?)");
    dst->copy_(it->second.reshape({-1}));
  }
}

}  // namespace pipewright::exec
