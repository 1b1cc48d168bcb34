// ZeRO stage 3 (zero3.hpp: Note [ZeRO-3 sharded parameters]).
#include "zero/zero3.hpp"

#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <string>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "zero/zero_buckets.hpp"

namespace pipewright::exec {

namespace {

constexpr std::int64_t kMaxInFlight = 2;  // bucket reduce-scatters per stage

}  // namespace

Zero3::Zero3(Communicator* dp, ZeroOptions options, int world_rank)
    : dp_(dp), options_(options), world_rank_(world_rank), step_(options.first_step) {
  PW_ASSERT(dp_ != nullptr, "ZeRO-3 needs a data-parallel communicator");
  PW_ASSERT(options_.stage == 3, "Zero3 with ZeRO stage " << options_.stage);
}

Zero3::~Zero3() {
  for (auto& st : stages_) {
    // On an error path, wait briefly for what still writes into our buffers, never hang.
    for (auto& w : st->gathers) {
      try {
        if (w) w->wait(std::chrono::milliseconds(1000));
      } catch (...) {  // NOLINT(bugprone-empty-catch)
      }
    }
    for (auto& f : st->in_flight) {
      try {
        if (f.work) f.work->wait(std::chrono::milliseconds(1000));
      } catch (...) {  // NOLINT(bugprone-empty-catch)
      }
    }
    remove_grad_hooks(*st);
  }
}

void Zero3::allocate(Stage& st) {
  c10::StorageImpl* impl = st.flat.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(st.total) * sizeof(float);
  if (impl->nbytes() == bytes) return;
  impl->set_data_ptr_noswap(st.allocator->allocate(bytes));
  impl->set_nbytes(bytes);
}

void Zero3::release(Stage& st) {
  // The memory goes back to the allocator; the StorageImpl (shared by every parameter) stays.
  c10::StorageImpl* impl = st.flat.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, st.flat.device()));
  impl->set_nbytes(0);
  st.state = Params::kSharded;
}

void Zero3::on_start(std::vector<StageParams>& stages) {
  PW_ASSERT(stages_.empty(), "ZeRO-3 on_start called twice");
  std::vector<StageParams> rest;  // buffers and frozen parameters: replica 0's, as DDP
  for (const auto& sp : stages) {
    StageParams o;
    o.stage = sp.stage;
    o.buffers = sp.buffers;
    for (const auto& p : sp.params) {
      if (!p.requires_grad()) o.params.push_back(p);
    }
    rest.push_back(std::move(o));
  }
  detail::broadcast_from_replica0(*dp_, rest, options_.timeout, stats_);
  torch::NoGradGuard no_grad;
  const std::int64_t d = dp_->size();
  const std::int64_t r = dp_->rank();
  for (auto& sp : stages) {
    auto st = std::make_unique<Stage>();
    st->params = sp;
    std::vector<std::int64_t> bytes;
    std::vector<bool> dedicated;
    for (const auto& p : sp.params) {
      if (!p.requires_grad()) continue;
      PW_CHECK(p.scalar_type() == torch::kFloat, ConfigError,
               "--zero-stage 3: stage " << sp.stage << " has a " << p.scalar_type()
                                        << " parameter; only float32 parameters are supported");
      st->trainable.push_back(p);
      bytes.push_back(p.numel() * static_cast<std::int64_t>(sizeof(float)));
      dedicated.push_back(options_.dedicated.count(p.unsafeGetTensorImpl()) != 0);
    }
    if (st->trainable.empty()) {
      st->state = Params::kGathered;  // nothing to shard: always "whole"
      stages_.push_back(std::move(st));
      continue;
    }
    // Tied parameters (and Chimera's replicated stages) a bucket of their own each, cut the same
    // way in every stage that holds a copy (Note [ZeRO tied parameters]).
    const auto assignment = assign_zero_buckets(bytes, dedicated, options_.bucket_cap_bytes,
                                                options_.first_bucket_cap_bytes);
    st->buckets.resize(assignment.buckets.size());
    std::int64_t offset = 0, shard = 0;
    for (std::size_t b = 0; b < st->buckets.size(); ++b) {
      Bucket& bk = st->buckets[b];
      bk.elements = assignment.buckets[b].bytes / static_cast<std::int64_t>(sizeof(float));
      bk.offset = offset;
      bk.piece = (bk.elements + d - 1) / d;
      bk.padded = bk.piece * d;
      bk.shard_offset = shard;
      bk.params = assignment.buckets[b].params;
      offset += bk.padded;
      shard += bk.piece;
    }
    st->total = offset;
    const auto options = st->trainable.front().options().requires_grad(false);
    st->flat = torch::zeros({offset}, options);  // P, whole during start-up
    st->allocator = st->flat.storage().unsafeGetStorageImpl()->allocator();
    PW_ASSERT(st->allocator != nullptr, "ZeRO-3: P's storage has no allocator");
    st->at.resize(st->trainable.size());
    st->bucket_of.resize(st->trainable.size());
    for (std::size_t i = 0; i < st->trainable.size(); ++i) {
      const std::size_t b = assignment.bucket_of_param[i];
      const auto& gb = assignment.buckets[b];
      st->at[i] = st->buckets[b].offset + gb.offsets_bytes[assignment.slot_of_param[i]] /
                                              static_cast<std::int64_t>(sizeof(float));
      st->bucket_of[i] = b;
      torch::Tensor& p = st->trainable[i];
      torch::Tensor slot = storage_alias(st->flat, st->at[i], p.sizes());
      slot.copy_(p);
      p.set_(slot);  // the parameter is its slice of P from now on (one StorageImpl)
    }
    {  // replica 0's parameters to every replica (start-up, not counted per step)
      const std::uint64_t payload0 = stats_.payload_bytes;
      const double wire0 = stats_.wire_bytes;
      OpContext ctx{-1, sp.stage, -1, "ZeRO-3 broadcast of the initial parameters from replica 0"};
      detail::timed_wait(detail::counted_broadcast(*dp_, detail::view_of(st->flat), 0, ctx, stats_),
                         options_.timeout, stats_);
      stats_.setup_payload_bytes += stats_.payload_bytes - payload0;
      stats_.setup_wire_bytes += stats_.wire_bytes - wire0;
      stats_.payload_bytes = payload0;
      stats_.wire_bytes = wire0;
    }
    st->shard = torch::empty({shard}, options);
    st->shard_grads = torch::zeros({shard}, options);
    for (const Bucket& bk : st->buckets) {
      st->shard.narrow(0, bk.shard_offset, bk.piece)
          .copy_(st->flat.narrow(0, bk.offset + r * bk.piece, bk.piece));
      torch::Tensor w = storage_alias(st->shard, bk.shard_offset, {bk.piece});
      w.requires_grad_(true);
      w.mutable_grad() = storage_alias(st->shard_grads, bk.shard_offset, {bk.piece});
      st->shard_params.push_back(std::move(w));
    }
    release(*st);  // from now on P exists only inside the plan's windows
    st->got.assign(st->trainable.size(), false);
    for (auto& bk : st->buckets) bk.pending = static_cast<std::int64_t>(bk.params.size());
    for (auto& p : st->trainable) p.mutable_grad().reset();
    install_grad_hooks(this, *st);
    stages_.push_back(std::move(st));
  }
}

Zero3::Stage& Zero3::stage(int id) { return local_stage(stages_, id, "ZeRO-3"); }

std::int64_t Zero3::shard_elements(int id) const {
  for (const auto& st : stages_) {
    if (st->params.stage == id) return st->shard.defined() ? st->shard.numel() : 0;
  }
  return 0;
}

std::int64_t Zero3::gathered_bytes(int id) const {
  for (const auto& st : stages_) {
    if (st->params.stage == id && st->flat.defined()) {
      return static_cast<std::int64_t>(st->flat.storage().unsafeGetStorageImpl()->nbytes());
    }
  }
  return 0;
}

std::vector<torch::Tensor> Zero3::optimizer_params(int id) { return stage(id).shard_params; }

torch::Tensor Zero3::optimizer_tensor_of(int id, const torch::Tensor& param) {
  Stage& st = stage(id);
  if (options_.dedicated.count(param.unsafeGetTensorImpl()) == 0) return param;
  for (std::size_t i = 0; i < st.trainable.size(); ++i) {
    if (!st.trainable[i].is_same(param)) continue;
    const std::size_t b = st.bucket_of[i];
    if (st.buckets[b].params.size() == 1) return st.shard_params[b];
  }
  return param;
}

void Zero3::start_gathers(Stage& st) {
  allocate(st);
  OpContext ctx;
  ctx.step = step_;
  ctx.stage = st.params.stage;
  for (std::size_t b = 0; b < st.buckets.size(); ++b) {
    const Bucket& bk = st.buckets[b];
    ctx.what = "ZeRO-3 all-gather of parameter bucket " + std::to_string(b);
    const torch::Tensor whole = st.flat.narrow(0, bk.offset, bk.padded);
    const torch::Tensor mine = st.shard.narrow(0, bk.shard_offset, bk.piece);
    const auto bytes = static_cast<double>(whole.numel()) * sizeof(float);
    ++stats_.collectives;
    stats_.payload_bytes += static_cast<std::uint64_t>(bytes);
    stats_.wire_bytes += bytes * static_cast<double>(dp_->size() - 1) / dp_->size();
    st.gathers.push_back(dp_->all_gather(detail::view_of(mine), detail::view_of(whole), ctx));
  }
  st.state = Params::kGathering;
}

void Zero3::wait_gathers(Stage& st) {
  for (auto& w : st.gathers) detail::timed_wait(w, options_.timeout, stats_);
  st.gathers.clear();
  if (st.state == Params::kGathering) st.state = Params::kGathered;
}

void Zero3::unshard(int stage_id) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  if (st.buckets.empty()) return;
  PW_CHECK(st.state != Params::kGathering && st.state != Params::kGathered, InvalidPlanError,
           "rank " << world_rank_ << ": " << stage_id << "UNSHARD (step " << step_ << "): stage "
                   << stage_id
                   << " is unsharded already (UNSHARD without a RESHARD since the last one)");
  if (st.state == Params::kSettled) {
    // Gathered by settle() (and perhaps loaded from a checkpoint since): P is current, and the
    // shard takes its piece back from it.
    torch::NoGradGuard no_grad;
    const std::int64_t r = dp_->rank();
    for (const Bucket& bk : st.buckets) {
      st.shard.narrow(0, bk.shard_offset, bk.piece)
          .copy_(st.flat.narrow(0, bk.offset + r * bk.piece, bk.piece));
    }
    st.state = Params::kGathered;
    return;
  }
  start_gathers(st);
}

void Zero3::reshard(int stage_id) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  if (st.buckets.empty()) return;
  PW_CHECK(st.state == Params::kGathering || st.state == Params::kGathered, InvalidPlanError,
           "rank " << world_rank_ << ": " << stage_id << "RESHARD (step " << step_ << "): stage "
                   << stage_id << " is not unsharded (RESHARD without an UNSHARD before it)");
  wait_gathers(st);  // nothing may still write into the memory given back
  release(st);
}

void Zero3::require_gathered(Stage& st, const char* what, int microbatch) {
  rethrow_hook_error();
  if (st.buckets.empty()) return;
  PW_CHECK(st.state == Params::kGathering || st.state == Params::kGathered, InvalidPlanError,
           "rank " << world_rank_ << ": " << st.params.stage << what << microbatch << " (stage "
                   << st.params.stage << " microbatch " << microbatch << " step " << step_
                   << ") runs outside stage " << st.params.stage
                   << "'s UNSHARD..RESHARD window: its parameters are sharded here (--zero-stage "
                      "3; the plan needs an UNSHARD of the stage before it)");
  wait_gathers(st);
}

void Zero3::await_parameters(int stage_id) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  if (st.state == Params::kGathering) wait_gathers(st);  // outside a window: before_* names it
}

void Zero3::before_forward(int stage_id, int microbatch) {
  require_gathered(stage(stage_id), "F", microbatch);
}

void Zero3::before_backward(int stage_id, int microbatch, bool /*last*/) {
  require_gathered(stage(stage_id), "B", microbatch);
}

void Zero3::before_weight(int stage_id, int microbatch) {
  require_gathered(stage(stage_id), "W", microbatch);
}

void Zero3::on_grad_accumulated(Stage& st, std::size_t param) noexcept {
  if (hook_error_) return;
  try {
    const std::size_t b = st.bucket_of[param];
    if (b < st.next_launch) {
      throw InternalError("ZeRO-3: stage " + std::to_string(st.params.stage) + ": parameter " +
                          std::to_string(param) + " got a gradient after its bucket " +
                          std::to_string(b) + " was reduce-scattered in this backward");
    }
    if (!st.got[param]) {
      st.got[param] = true;
      --st.buckets[b].pending;
    }
    launch_ready(st);
  } catch (...) {
    hook_error_ = std::current_exception();
  }
}

void Zero3::launch_ready(Stage& st) {
  while (st.next_launch < st.buckets.size() && st.buckets[st.next_launch].pending == 0) {
    launch(st, st.next_launch);
    ++st.next_launch;
  }
}

void Zero3::launch(Stage& st, std::size_t b) {
  torch::NoGradGuard no_grad;
  finish(st, kMaxInFlight - 1);
  Bucket& bk = st.buckets[b];
  InFlight f;
  f.bucket = b;
  // Note [ZeRO bf16 reduce-scatter]: with --reduce-dtype bf16 the bucket travels as bfloat16
  // (each replica's gradient rounded once, summed in float32, the sum rounded once); finish()
  // adds the reduced piece into the float32 Gs.
  f.in = torch::zeros({bk.padded}, st.shard.options().dtype(options_.bf16_reduce ? torch::kBFloat16
                                                                                 : torch::kFloat));
  for (std::size_t i : bk.params) {
    torch::Tensor& g = st.trainable[i].mutable_grad();
    if (g.defined()) {
      f.in.narrow(0, st.at[i] - bk.offset, g.numel()).copy_(g.reshape({-1}));
      g.reset();  // the full gradient is gone once it is in the bucket
    }
  }
  // Note [ZeRO-3 sharded parameters]: on CPU the sum lands in place, in this replica's piece of
  // the bucket (no separate piece-sized buffer: the bucket is scratch after the collective).
  f.out = st.shard.device().is_cpu() ? storage_alias(f.in, dp_->rank() * bk.piece, {bk.piece})
                                     : torch::empty({bk.piece}, f.in.options());
  OpContext ctx;
  ctx.step = step_;
  ctx.stage = st.params.stage;
  ctx.what = "ZeRO-3 reduce-scatter of gradient bucket " + std::to_string(b);
  const auto bytes = static_cast<double>(bk.padded) * static_cast<double>(f.in.element_size());
  ++stats_.collectives;
  stats_.payload_bytes += static_cast<std::uint64_t>(bytes);
  stats_.wire_bytes += bytes * static_cast<double>(dp_->size() - 1) / dp_->size();
  ++stats_.buckets_in_backward;
  f.work = dp_->reduce_scatter(detail::view_of(f.in), detail::view_of(f.out), ReduceOp::kSum, ctx);
  st.in_flight.push_back(std::move(f));
}

void Zero3::finish(Stage& st, std::size_t keep) {
  torch::NoGradGuard no_grad;
  while (st.in_flight.size() > keep) {
    InFlight& f = st.in_flight.front();
    detail::timed_wait(f.work, options_.timeout, stats_);
    const Bucket& bk = st.buckets[f.bucket];
    st.shard_grads.narrow(0, bk.shard_offset, bk.piece).add_(f.out);
    st.in_flight.pop_front();
  }
}

void Zero3::after_backward(int stage_id, int /*microbatch*/, bool /*last*/) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  if (st.buckets.empty()) return;
  // Buckets with a parameter that got no gradient in this backward: zeros for it. The last
  // (at most kMaxInFlight) are finished by await_gradients right after the interpreter timed the
  // action (Note [Gradient waits] in dp/dp_hooks.hpp), or by the next launch or reduce_grad.
  for (; st.next_launch < st.buckets.size(); ++st.next_launch) launch(st, st.next_launch);
  st.next_launch = 0;
  std::fill(st.got.begin(), st.got.end(), false);
  for (auto& bk : st.buckets) bk.pending = static_cast<std::int64_t>(bk.params.size());
}

void Zero3::await_gradients(int stage_id) {
  rethrow_hook_error();
  finish(stage(stage_id), 0);
}

void Zero3::reduce_grad(int stage_id) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  finish(st, 0);
  // Every backward reduce-scattered its gradients already; the optimizer's tensors' .grad are
  // pieces of Gs (an optimizer's zero_grad may have reset them).
  for (std::size_t b = 0; b < st.buckets.size(); ++b) {
    torch::Tensor& g = st.shard_params[b].mutable_grad();
    if (!g.defined()) {
      g = storage_alias(st.shard_grads, st.buckets[b].shard_offset, {st.buckets[b].piece});
    }
  }
}

bool Zero3::clear_gradients(int stage_id) {
  Stage& st = stage(stage_id);
  torch::NoGradGuard no_grad;
  if (st.shard_grads.defined()) st.shard_grads.zero_();
  // The optimizer stepped the shard: a P gathered outside a window is stale now. (validate()
  // keeps OPTIM outside the windows; a plan file that does not is caught at the next compute.)
  if (st.state == Params::kSettled) release(st);
  return true;
}

void Zero3::settle() {
  for (auto& st : stages_) {
    if (st->buckets.empty()) continue;
    finish(*st, 0);
    if (st->state == Params::kGathering) wait_gathers(*st);
    if (st->state != Params::kSharded) continue;
    const std::uint64_t payload0 = stats_.payload_bytes;
    const double wire0 = stats_.wire_bytes;
    const std::int64_t collectives0 = stats_.collectives;
    start_gathers(*st);
    wait_gathers(*st);
    stats_.setup_payload_bytes += stats_.payload_bytes - payload0;
    stats_.setup_wire_bytes += stats_.wire_bytes - wire0;
    stats_.payload_bytes = payload0;
    stats_.wire_bytes = wire0;
    stats_.collectives = collectives0;
    st->state = Params::kSettled;
  }
}

void Zero3::after_optimizer_step(std::int64_t step) {
  rethrow_hook_error();
  ++stats_.steps;
  step_ = step + 1;
  if (options_.check_replicas > 0 && (step + 1) % options_.check_replicas == 0) {
    settle();
    std::vector<StageParams> sp;
    for (const auto& st : stages_) sp.push_back(st->params);
    detail::check_replicas_identical(*dp_, sp, step, options_.timeout, stats_);
  }
}

std::map<std::string, torch::Tensor> Zero3::state() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& st : stages_) {
    if (st->buckets.empty()) continue;
    std::vector<std::int64_t> v{dp_->size(), dp_->rank(),
                                static_cast<std::int64_t>(st->buckets.size())};
    for (const Bucket& bk : st->buckets) {
      v.push_back(bk.elements);
      v.push_back(bk.padded);
      v.push_back(bk.piece);
    }
    const std::string s = "stage" + std::to_string(st->params.stage);
    out["layout." + s] = torch::tensor(v, torch::kLong);
    out["param_shard." + s] = st->shard.detach();
  }
  return out;
}

void Zero3::load_state(const std::map<std::string, torch::Tensor>& state) {
  // The layouts first: a shard is only meaningful in the layout it was cut from.
  const auto live_state = this->state();
  for (const auto& [key, live] : live_state) {
    if (key.rfind("layout.", 0) != 0) continue;
    const auto it = state.find(key);
    PW_CHECK(it != state.end(), ConfigError,
             "checkpoint: " << key.substr(7) << ": the ZeRO-3 shard layout 'dp." << key
                            << "' is missing");
    const torch::Tensor saved = it->second.to(torch::kLong).flatten();
    PW_CHECK(saved.numel() == live.numel() && torch::equal(saved, live), ConfigError,
             "checkpoint: " << key.substr(7) << ": parameter shard layout 'dp." << key
                            << "' differs from this run's (another model or bucket size; "
                               "a checkpoint of another dp re-shards on load instead)");
  }
  torch::NoGradGuard no_grad;
  for (auto& st : stages_) {
    if (st->buckets.empty()) continue;
    const std::string key = "param_shard.stage" + std::to_string(st->params.stage);
    const auto it = state.find(key);
    PW_CHECK(it != state.end(), ConfigError,
             "checkpoint: stage" << st->params.stage << ": the parameter shard 'dp." << key
                                 << "' is missing");
    PW_CHECK(it->second.sizes() == st->shard.sizes() &&
                 it->second.scalar_type() == st->shard.scalar_type(),
             ConfigError,
             "checkpoint: stage" << st->params.stage << ": parameter shard 'dp." << key
                                 << "' has shape " << it->second.sizes() << ", this run's has "
                                 << st->shard.sizes());
    st->shard.copy_(it->second);
    // Whatever P holds now predates the checkpoint: the next UNSHARD (or settle) gathers.
    wait_gathers(*st);
    if (st->state != Params::kSharded) release(*st);
  }
}

std::int64_t Zero3::resident_state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& st : stages_) {
    for (const auto& p : st->params.params) {
      if (!p.requires_grad() || st->buckets.empty()) bytes += p.numel() * p.element_size();
    }
    if (st->buckets.empty()) continue;
    bytes += st->shard.nbytes() + st->shard_grads.nbytes() + gathered_bytes(st->params.stage);
  }
  return bytes;
}

void Zero3::rethrow_hook_error() {
  if (hook_error_) {
    auto e = hook_error_;
    hook_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace pipewright::exec
