#include "dp/diloco.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

// Tags of the bf16 exchange on the data-parallel communicator (nothing else sends there).
constexpr std::int64_t kScatterTag = 0x5D1C0001;
constexpr std::int64_t kGatherTag = 0x5D1C0002;

// Chunk j of a length-`len` buffer split over n replicas: [begin, end).
std::pair<std::int64_t, std::int64_t> chunk(std::int64_t len, int n, int j) {
  const std::int64_t c = (len + n - 1) / n;
  const std::int64_t b = std::min(len, c * j);
  return {b, std::min(len, b + c)};
}

void count_sent(DataParallelStats& stats, std::uint64_t bytes) {
  ++stats.collectives;
  stats.payload_bytes += bytes;
  stats.wire_bytes += static_cast<double>(bytes);
}

}  // namespace

DiLoCo::DiLoCo(Communicator* dp, DiLoCoOptions options) : dp_(dp), options_(options) {
  PW_ASSERT(dp_ != nullptr, "DiLoCo needs a data-parallel communicator");
  const std::int64_t h = options_.sync_every;
  const int k = options_.fragments;
  PW_CHECK(h >= 1, ConfigError, "--sync-every must be >= 1, got " << h);
  PW_CHECK(k >= 1 && k <= h && h % k == 0, ConfigError,
           "--fragments " << k << " must divide --sync-every " << h);
  period_ = h / k;
  PW_CHECK(
      options_.sync_delay >= 0 && options_.sync_delay < period_, ConfigError,
      "--fragment-sync-delay must be in 0.." << period_ - 1 << ", got " << options_.sync_delay);
}

DiLoCo::~DiLoCo() {
  // A run that stops with an exchange in flight: let it finish (bounded by the timeout) so that
  // no communicator operation outlives the buffers it writes.
  for (auto& w : works_) {
    try {
      w->wait(options_.timeout);
    } catch (...) {  // the run is already failing; its own error is the one reported
    }
  }
}

int DiLoCo::prepares_after(std::int64_t step) const noexcept {
  const std::int64_t t = step + 1 + options_.sync_delay;
  if (t % period_ != 0) return -1;
  return static_cast<int>((t / period_ - 1) % options_.fragments);
}

int DiLoCo::syncs_after(std::int64_t step) const noexcept {
  const std::int64_t t = step + 1;
  if (t % period_ != 0) return -1;
  return static_cast<int>((t / period_ - 1) % options_.fragments);
}

std::pair<std::int64_t, std::int64_t> DiLoCo::fragment_range(int f) const {
  const auto i = static_cast<std::size_t>(f);
  return {offsets_[first_tensor_[i]], offsets_[first_tensor_[i + 1]]};
}

void DiLoCo::on_start(std::vector<StageParams>& stages) {
  PW_ASSERT(stages_.empty(), "DiLoCo on_start called twice");
  // Checked before any communication: every replica of this position has the same tensors.
  std::vector<torch::Tensor> trainable;
  for (const auto& sp : stages) {
    for (const auto& p : sp.params) {
      if (!p.requires_grad()) continue;
      PW_CHECK(p.scalar_type() == torch::kFloat, ConfigError,
               "DiLoCo: stage " << sp.stage << " has a " << p.scalar_type()
                                << " parameter; only float32 parameters are supported");
      trainable.push_back(p);
    }
  }
  const int k = options_.fragments;
  PW_CHECK(static_cast<std::size_t>(k) <= trainable.size(), ConfigError,
           "--fragments " << k << " is larger than the number of parameter tensors on this rank ("
                          << trainable.size() << "); a fragment is a group of whole tensors");
  detail::broadcast_from_replica0(*dp_, stages, options_.timeout, stats_);
  stages_ = stages;
  trainable_ = std::move(trainable);
  offsets_.assign(1, 0);
  for (const auto& p : trainable_) offsets_.push_back(offsets_.back() + p.numel());
  // Fragment boundaries: fragment f ends at the first tensor where the running element count
  // reaches (f + 1) / K of the total, leaving at least one tensor for every later fragment.
  const std::int64_t total = offsets_.back();
  const std::size_t nt = trainable_.size();
  first_tensor_.assign(1, 0);
  for (int f = 0; f + 1 < k; ++f) {
    std::size_t end = first_tensor_.back() + 1;  // at least one tensor
    const std::int64_t target = total * (f + 1) / k;
    while (end < nt - static_cast<std::size_t>(k - f - 1) && offsets_[end] < target) ++end;
    first_tensor_.push_back(end);
  }
  first_tensor_.push_back(nt);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const auto& p : trainable_) parts.push_back(p.detach().reshape({-1}));
  x_old_ = parts.empty() ? torch::zeros({0}) : torch::cat(parts).clone();
  u_ = torch::zeros_like(x_old_);
}

torch::Tensor DiLoCo::flat_fragment(int f) const {
  std::vector<torch::Tensor> parts;
  const auto i = static_cast<std::size_t>(f);
  for (std::size_t t = first_tensor_[i]; t < first_tensor_[i + 1]; ++t) {
    parts.push_back(trainable_[t].detach().reshape({-1}));
  }
  return torch::cat(parts);
}

void DiLoCo::set_fragment(int f, const torch::Tensor& flat) {
  const auto i = static_cast<std::size_t>(f);
  std::int64_t off = 0;
  for (std::size_t t = first_tensor_[i]; t < first_tensor_[i + 1]; ++t) {
    auto& p = trainable_[t];
    p.detach().copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }
}

void DiLoCo::prepare(int fragment, std::int64_t step) {
  torch::NoGradGuard no_grad;
  PW_ASSERT(pending_fragment_ < 0, "DiLoCo: fragment " << pending_fragment_ << " still in flight");
  const auto [begin, len_end] = fragment_range(fragment);
  const std::int64_t len = len_end - begin;
  torch::Tensor g = x_old_.narrow(0, begin, len) - flat_fragment(fragment);
  pending_fragment_ = fragment;
  pending_done_ = false;
  const int n = dp_->size();
  OpContext ctx;
  ctx.step = step;
  if (!options_.bf16) {
    pending_g_ = g.div_(static_cast<double>(n));
    ctx.what = "DiLoCo outer all-reduce of fragment " + std::to_string(fragment);
    works_.push_back(
        detail::counted_all_reduce(*dp_, detail::view_of(pending_g_), ReduceOp::kSum, ctx, stats_));
    return;
  }
  // bf16 scatter: chunk j of every replica's outer gradient to replica j.
  const int me = dp_->rank();
  send_bf16_ = g.to(torch::kBFloat16);
  const auto [mb, me_end] = chunk(len, n, me);
  const std::int64_t mine = me_end - mb;
  recv_bf16_ = torch::zeros({n, mine}, send_bf16_.options());
  recv_bf16_[me].copy_(send_bf16_.narrow(0, mb, mine));
  ctx.what = "DiLoCo bf16 scatter of fragment " + std::to_string(fragment);
  std::uint64_t sent = 0;
  dp_->begin_p2p_batch();
  // Note [Receive before send] (sgp.hpp): every receive is posted before the first send.
  for (int r = 0; r < n && mine > 0; ++r) {
    if (r != me) works_.push_back(dp_->recv(detail::view_of(recv_bf16_[r]), r, kScatterTag, ctx));
  }
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const auto [rb, re] = chunk(len, n, r);
    if (re > rb) {
      auto part = send_bf16_.narrow(0, rb, re - rb);
      works_.push_back(dp_->send(detail::view_of(part), r, kScatterTag, ctx));
      sent += static_cast<std::uint64_t>(part.numel()) * 2;
    }
  }
  dp_->end_p2p_batch();
  count_sent(stats_, sent);
}

void DiLoCo::finish_exchange() const {
  if (pending_fragment_ < 0 || pending_done_) return;
  for (auto& w : works_) detail::timed_wait(w, options_.timeout, stats_);
  works_.clear();
  pending_done_ = true;
  if (!options_.bf16) return;
  torch::NoGradGuard no_grad;
  // Owner's sum in float32, replica order, then rounded once to bfloat16 and gathered.
  const int n = dp_->size();
  const int me = dp_->rank();
  const auto [begin, end] = fragment_range(pending_fragment_);
  const std::int64_t len = end - begin;
  torch::Tensor acc = torch::zeros({recv_bf16_.size(1)}, recv_bf16_.options().dtype(torch::kFloat));
  for (int r = 0; r < n; ++r) acc.add_(recv_bf16_[r].to(torch::kFloat));
  acc.div_(static_cast<double>(n));
  torch::Tensor out = torch::empty({len}, send_bf16_.options());
  const auto [mb, me_end] = chunk(len, n, me);
  out.narrow(0, mb, me_end - mb).copy_(acc.to(torch::kBFloat16));
  OpContext ctx;
  ctx.what = "DiLoCo bf16 gather of fragment " + std::to_string(pending_fragment_);
  std::uint64_t sent = 0;
  std::vector<WorkPtr> works;
  dp_->begin_p2p_batch();
  // Note [Receive before send] (sgp.hpp): every receive is posted before the first send.
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const auto [rb, re] = chunk(len, n, r);
    if (re > rb)
      works.push_back(dp_->recv(detail::view_of(out.narrow(0, rb, re - rb)), r, kGatherTag, ctx));
  }
  for (int r = 0; r < n && me_end > mb; ++r) {
    if (r == me) continue;
    works.push_back(dp_->send(detail::view_of(out.narrow(0, mb, me_end - mb)), r, kGatherTag, ctx));
    sent += static_cast<std::uint64_t>(me_end - mb) * 2;
  }
  dp_->end_p2p_batch();
  count_sent(stats_, sent);
  for (auto& w : works) detail::timed_wait(w, options_.timeout, stats_);
  pending_g_ = out.to(torch::kFloat);
  send_bf16_ = torch::Tensor();
  recv_bf16_ = torch::Tensor();
}

void DiLoCo::perform(int fragment, std::int64_t step) {
  PW_ASSERT(pending_fragment_ == fragment, "DiLoCo: step " << step << " syncs fragment " << fragment
                                                           << " but fragment " << pending_fragment_
                                                           << " was prepared");
  finish_exchange();
  torch::NoGradGuard no_grad;
  const auto [begin, end] = fragment_range(fragment);
  torch::Tensor x_old = x_old_.narrow(0, begin, end - begin);
  torch::Tensor u = u_.narrow(0, begin, end - begin);
  const torch::Tensor& g = pending_g_;
  // torch.optim.SGD (dampening 0, no weight decay) on x_old with gradient g.
  const double mu = options_.outer_momentum;
  if (mu != 0) {
    u.mul_(mu).add_(g);
    if (options_.nesterov) {
      x_old.add_(g.add(u, mu), -options_.outer_lr);
    } else {
      x_old.add_(u, -options_.outer_lr);
    }
  } else {
    x_old.add_(g, -options_.outer_lr);
  }
  set_fragment(fragment, x_old);
  pending_fragment_ = -1;
  pending_g_ = torch::Tensor();
}

void DiLoCo::after_optimizer_step(std::int64_t step) {
  ++stats_.steps;
  // Perform before prepare: with tau = 0 both fall on one step, for the same fragment.
  const int prep = prepares_after(step);
  if (prep >= 0) prepare(prep, step);
  const int sync = syncs_after(step);
  if (sync >= 0) perform(sync, step);
  if (options_.check_replicas > 0 && (step + 1) % options_.check_replicas == 0 && sync >= 0 &&
      options_.fragments == 1 && options_.sync_delay == 0) {
    // Only then are all the parameters equal on every replica (Note [DiLoCo step]).
    detail::check_replicas_identical(*dp_, stages_, step, options_.timeout, stats_);
  }
}

std::map<std::string, torch::Tensor> DiLoCo::state() const {
  finish_exchange();
  std::map<std::string, torch::Tensor> out;
  out["diloco.x_old"] = x_old_;
  out["diloco.u"] = u_;
  out["diloco.pending_fragment"] = torch::tensor({static_cast<std::int64_t>(pending_fragment_)});
  out["diloco.pending"] = pending_fragment_ >= 0 ? pending_g_ : torch::zeros({0}, x_old_.options());
  return out;
}

void DiLoCo::load_state(const std::map<std::string, torch::Tensor>& state) {
  auto get = [&state](const char* name) -> const torch::Tensor& {
    auto it = state.find(name);
    PW_CHECK(it != state.end(), ConfigError, "checkpoint: no '" << name << "' tensor");
    return it->second;
  };
  for (auto [name, dst] : {std::pair<const char*, torch::Tensor*>{"diloco.x_old", &x_old_},
                           std::pair<const char*, torch::Tensor*>{"diloco.u", &u_}}) {
    const torch::Tensor& t = get(name);
    PW_CHECK(t.numel() == dst->numel() && t.scalar_type() == torch::kFloat, ConfigError,
             "checkpoint: '" << name << "' has " << t.numel() << " elements, expected "
                             << dst->numel() << " (was it written with other DiLoCo options?)");
    dst->copy_(t.reshape({-1}));
  }
  const torch::Tensor& pf = get("diloco.pending_fragment");
  PW_CHECK(pf.numel() == 1 && pf.scalar_type() == torch::kLong, ConfigError,
           "checkpoint: 'diloco.pending_fragment' is malformed");
  const auto f = pf.item<std::int64_t>();
  PW_CHECK(f >= -1 && f < options_.fragments, ConfigError,
           "checkpoint: 'diloco.pending_fragment' is " << f << ", expected -1.."
                                                       << options_.fragments - 1);
  pending_fragment_ = static_cast<int>(f);
  pending_done_ = f >= 0;
  if (f >= 0) {
    const auto [begin, end] = fragment_range(static_cast<int>(f));
    const torch::Tensor& g = get("diloco.pending");
    PW_CHECK(
        g.numel() == end - begin && g.scalar_type() == torch::kFloat, ConfigError,
        "checkpoint: 'diloco.pending' has " << g.numel() << " elements, expected " << end - begin);
    pending_g_ = g.reshape({-1}).to(x_old_.device()).clone();
  }
}

}  // namespace pipewright::exec
