// ZeRO stages 1 and 2 (zero.hpp: Note [ZeRO flat buffers]).
#include "zero/zero.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <string>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "zero/zero_buckets.hpp"

namespace pipewright::exec {

namespace {

torch::Tensor zeros_for(Communicator& dp, std::int64_t numel, const torch::Device& device,
                        torch::ScalarType type = torch::kFloat) {
  if (device.is_cpu()) {
    // 64-byte aligned, zero-filled memory of the communicator's choice.
    std::shared_ptr<void> mem =
        dp.allocate_collective_buffer(static_cast<std::size_t>(numel) * c10::elementSize(type));
    void* data = mem.get();
    return torch::from_blob(
        data, {numel}, [mem = std::move(mem)](void*) mutable { mem.reset(); },
        torch::TensorOptions().dtype(type));
  }
  return torch::zeros({numel}, torch::TensorOptions().dtype(type).device(device));
}

}  // namespace

Zero::Zero(Communicator* dp, ZeroOptions options)
    : dp_(dp), options_(options), step_(options.first_step) {
  PW_ASSERT(dp_ != nullptr, "ZeRO needs a data-parallel communicator");
  PW_ASSERT(options_.stage == 1 || options_.stage == 2, "ZeRO stage " << options_.stage);
}

Zero::~Zero() {
  for (auto& st : stages_) {
    // Normally settle() left nothing in flight. On an error path, wait briefly (the all-gathers
    // write into P) but never hang the exit: the error is already on its way to the user.
    for (auto& w : st->gathers) {
      try {
        if (w) w->wait(std::chrono::milliseconds(1000));
      } catch (...) {  // NOLINT(bugprone-empty-catch)
      }
    }
    remove_grad_hooks(*st);
  }
}

void Zero::on_start(std::vector<StageParams>& stages) {
  PW_ASSERT(stages_.empty(), "ZeRO on_start called twice");
  // Replica 0's trainable parameters reach the others through P itself (one broadcast per
  // stage, no flat copy), after every parameter has moved into P (its old storage freed as it
  // moves), and G is allocated last: start-up holds at most 2x the parameters at once, below
  // the steady state, so the peak RSS is the training's. Buffers and frozen parameters as DDP.
  std::vector<StageParams> rest;
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
               "--zero-stage " << options_.stage << ": stage " << sp.stage << " has a "
                               << p.scalar_type()
                               << " parameter; only float32 parameters are supported");
      st->trainable.push_back(p);
      bytes.push_back(p.numel() * static_cast<std::int64_t>(sizeof(float)));
      dedicated.push_back(options_.dedicated.count(p.unsafeGetTensorImpl()) != 0);
    }
    if (st->trainable.empty()) {
      stages_.push_back(std::move(st));
      continue;
    }
    st->assignment = assign_zero_buckets(bytes, dedicated, options_.bucket_cap_bytes,
                                         options_.first_bucket_cap_bytes);
    st->buckets.resize(st->assignment.buckets.size());
    std::int64_t offset = 0, shard = 0;
    for (std::size_t b = 0; b < st->buckets.size(); ++b) {
      const std::int64_t n =
          st->assignment.buckets[b].bytes / static_cast<std::int64_t>(sizeof(float));
      Bucket& bk = st->buckets[b];
      bk.offset = offset;
      bk.piece = (n + d - 1) / d;
      bk.padded = bk.piece * d;
      bk.shard_offset = shard;
      offset += bk.padded;
      shard += bk.piece;
    }
    const auto device = st->trainable.front().device();
    st->flat_params = zeros_for(*dp_, offset, device);
    std::vector<std::int64_t> at_of(st->trainable.size());
    for (std::size_t i = 0; i < st->trainable.size(); ++i) {
      const std::size_t b = st->assignment.bucket_of_param[i];
      const auto& gb = st->assignment.buckets[b];
      const std::int64_t at =
          st->buckets[b].offset + gb.offsets_bytes[st->assignment.slot_of_param[i]] /
                                      static_cast<std::int64_t>(sizeof(float));
      torch::Tensor& p = st->trainable[i];
      torch::Tensor slot = storage_alias(st->flat_params, at, p.sizes());
      slot.copy_(p);
      p.set_(slot);  // the parameter is its slice of P from now on
      at_of[i] = at;
    }
    {
      const std::uint64_t payload0 = stats_.payload_bytes;
      const double wire0 = stats_.wire_bytes;
      OpContext ctx{-1, sp.stage, -1, "ZeRO broadcast of the initial parameters from replica 0"};
      detail::timed_wait(
          detail::counted_broadcast(*dp_, detail::view_of(st->flat_params), 0, ctx, stats_),
          options_.timeout, stats_);
      stats_.setup_payload_bytes += stats_.payload_bytes - payload0;
      stats_.setup_wire_bytes += stats_.wire_bytes - wire0;
      stats_.payload_bytes = payload0;
      stats_.wire_bytes = wire0;
    }
    st->flat_grads = zeros_for(*dp_, offset, device);
    st->shard_grads = torch::zeros({shard}, st->flat_params.options());
    if (options_.stage == 2) st->scratch = torch::zeros({shard}, st->flat_params.options());
    if (options_.bf16_reduce) {  // Note [ZeRO bf16 reduce-scatter]
      st->wire = zeros_for(*dp_, offset, device, torch::kBFloat16);
      st->wire_out = torch::zeros({shard}, st->flat_params.options().dtype(torch::kBFloat16));
    }
    st->grad_alias.resize(st->trainable.size());
    for (std::size_t i = 0; i < st->trainable.size(); ++i) {
      st->grad_alias[i] = storage_alias(st->flat_grads, at_of[i], st->trainable[i].sizes());
    }
    for (const Bucket& bk : st->buckets) {
      torch::Tensor w = storage_alias(st->flat_params, bk.offset + r * bk.piece, {bk.piece});
      w.requires_grad_(true);
      w.mutable_grad() = storage_alias(st->shard_grads, bk.shard_offset, {bk.piece});
      st->shard_params.push_back(std::move(w));
    }
    st->accumulations.assign(st->trainable.size(), 0);
    install_grad_hooks(this, *st);
    stages_.push_back(std::move(st));
  }
}

Zero::Stage& Zero::stage(int id) { return local_stage(stages_, id, "ZeRO"); }

std::int64_t Zero::shard_elements(int id) const {
  for (const auto& st : stages_) {
    if (st->params.stage == id) return st->shard_grads.defined() ? st->shard_grads.numel() : 0;
  }
  return 0;
}

std::vector<torch::Tensor> Zero::optimizer_params(int id) { return stage(id).shard_params; }

torch::Tensor Zero::optimizer_tensor_of(int id, const torch::Tensor& param) {
  Stage& st = stage(id);
  for (std::size_t i = 0; i < st.trainable.size(); ++i) {
    if (!st.trainable[i].is_same(param)) continue;
    const std::size_t b = st.assignment.bucket_of_param[i];
    if (st.assignment.buckets[b].params.size() == 1 &&
        options_.dedicated.count(param.unsafeGetTensorImpl()) != 0) {
      return st.shard_params[b];
    }
  }
  return param;
}

void Zero::wait_gathers(Stage& st) {
  for (auto& w : st.gathers) detail::timed_wait(w, options_.timeout, stats_);
  st.gathers.clear();
}

void Zero::settle() {
  for (auto& st : stages_) {
    finish_scatters(*st);
    wait_gathers(*st);
  }
}

void Zero::open_step(Stage& st) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < st.trainable.size(); ++i) {
    torch::Tensor& g = st.trainable[i].mutable_grad();
    if (!g.defined() || g.data_ptr() == st.grad_alias[i].data_ptr()) continue;
    st.grad_alias[i].copy_(g);
    g = st.grad_alias[i];
  }
  std::fill(st.accumulations.begin(), st.accumulations.end(), 0);
  for (std::size_t b = 0; b < st.buckets.size(); ++b) {
    st.buckets[b].pending = static_cast<std::int64_t>(st.assignment.buckets[b].params.size());
    st.buckets[b].launched = false;
    st.buckets[b].work.reset();
  }
  st.next_launch = 0;
  st.step_open = true;
}

void Zero::await_parameters(int stage_id) {
  rethrow_hook_error();
  wait_gathers(stage(stage_id));
}

void Zero::before_forward(int stage_id, int /*microbatch*/) { await_parameters(stage_id); }

void Zero::before_backward(int stage_id, int /*microbatch*/, bool /*last*/) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  wait_gathers(st);
  finish_scatters(st);  // nothing may still read G when this backward writes it
  if (!st.step_open) open_step(st);
}

void Zero::before_weight(int stage_id, int /*microbatch*/) {
  rethrow_hook_error();
  finish_scatters(stage(stage_id));
}

void Zero::on_grad_accumulated(Stage& st, std::size_t param) noexcept {
  if (!st.step_open || hook_error_) return;
  try {
    const int n = ++st.accumulations[param];
    torch::Tensor& g = st.trainable[param].mutable_grad();
    torch::Tensor& a = st.grad_alias[param];
    if (g.defined() && g.data_ptr() != a.data_ptr()) {
      torch::NoGradGuard no_grad;
      a.copy_(g);
      g = a;
    }
    if (options_.stage != 1 || n != options_.num_microbatches) return;
    Bucket& b = st.buckets[st.assignment.bucket_of_param[param]];
    if (--b.pending == 0) launch_ready(st);
  } catch (...) {
    hook_error_ = std::current_exception();
  }
}

void Zero::launch_ready(Stage& st) {
  while (st.next_launch < st.buckets.size() && st.buckets[st.next_launch].pending == 0) {
    launch(st, st.next_launch, st.shard_grads, true);
    ++st.next_launch;
  }
}

void Zero::launch(Stage& st, std::size_t b, const torch::Tensor& out, bool in_backward) {
  Bucket& bk = st.buckets[b];
  OpContext ctx;
  ctx.step = step_;
  ctx.stage = st.params.stage;
  ctx.what = "ZeRO-" + std::to_string(options_.stage) + " reduce-scatter of gradient bucket " +
             std::to_string(b);
  torch::Tensor in = st.flat_grads.narrow(0, bk.offset, bk.padded);
  torch::Tensor piece = out.narrow(0, bk.shard_offset, bk.piece);
  if (options_.bf16_reduce) {  // Note [ZeRO bf16 reduce-scatter]
    torch::NoGradGuard no_grad;
    torch::Tensor wire = st.wire.narrow(0, bk.offset, bk.padded);
    wire.copy_(in);
    in = wire;
    piece = st.wire_out.narrow(0, bk.shard_offset, bk.piece);
  }
  const auto bytes = static_cast<double>(in.numel()) * static_cast<double>(in.element_size());
  ++stats_.collectives;
  stats_.payload_bytes += static_cast<std::uint64_t>(bytes);
  stats_.wire_bytes += bytes * static_cast<double>(dp_->size() - 1) / dp_->size();
  bk.work = dp_->reduce_scatter(detail::view_of(in), detail::view_of(piece), ReduceOp::kSum, ctx);
  bk.launched = true;
  ++(in_backward ? stats_.buckets_in_backward : stats_.buckets_at_reduce);
}

void Zero::finish(Stage& st, std::size_t b, const torch::Tensor& out) {
  Bucket& bk = st.buckets[b];
  detail::timed_wait(bk.work, options_.timeout, stats_);
  bk.work.reset();
  if (options_.bf16_reduce) {  // the bfloat16 piece widened into the float32 one
    torch::NoGradGuard no_grad;
    out.narrow(0, bk.shard_offset, bk.piece)
        .copy_(st.wire_out.narrow(0, bk.shard_offset, bk.piece));
  }
}

void Zero::after_backward(int stage_id, int /*microbatch*/, bool /*last*/) {
  rethrow_hook_error();
  if (options_.stage != 2) return;
  Stage& st = stage(stage_id);
  if (st.buckets.empty()) return;
  // Note [ZeRO flat buffers], stage 2: this microbatch's gradients into the shard accumulator;
  // the interpreter's await_gradients (Note [Gradient waits]) finishes them after timing the
  // action, and nothing else runs in between.
  finish_scatters(st);
  for (std::size_t b = 0; b < st.buckets.size(); ++b) launch(st, b, st.scratch, true);
  st.scattering = true;
}

void Zero::await_gradients(int stage_id) {
  rethrow_hook_error();
  if (options_.stage == 2) finish_scatters(stage(stage_id));
}

void Zero::finish_scatters(Stage& st) {
  if (!st.scattering) return;
  st.scattering = false;
  for (std::size_t b = 0; b < st.buckets.size(); ++b) finish(st, b, st.scratch);
  torch::NoGradGuard no_grad;
  st.shard_grads.add_(st.scratch);
  st.flat_grads.zero_();
}

void Zero::reduce_grad(int stage_id) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  if (st.buckets.empty()) return;
  finish_scatters(st);
  if (!st.step_open) open_step(st);
  torch::NoGradGuard no_grad;
  if (options_.stage == 1) {
    for (std::size_t i = 0; i < st.trainable.size(); ++i) {
      if (st.accumulations[i] > 0) continue;
      torch::Tensor& g = st.trainable[i].mutable_grad();
      if (g.defined() && g.data_ptr() == st.grad_alias[i].data_ptr()) continue;
      st.grad_alias[i].zero_();
      g = st.grad_alias[i];
    }
    for (std::size_t b = st.next_launch; b < st.buckets.size(); ++b) {
      launch(st, b, st.shard_grads, false);
    }
    st.next_launch = st.buckets.size();
    for (std::size_t b = 0; b < st.buckets.size(); ++b) finish(st, b, st.shard_grads);
  }
  // The optimizer steps the shard: its tensors' .grad are pieces of Gs (set at on_start; an
  // optimizer's zero_grad may have reset them).
  for (std::size_t b = 0; b < st.buckets.size(); ++b) {
    torch::Tensor& g = st.shard_params[b].mutable_grad();
    if (!g.defined()) {
      g = storage_alias(st.shard_grads, st.buckets[b].shard_offset, {st.buckets[b].piece});
    }
  }
  st.step_open = false;
}

bool Zero::clear_gradients(int stage_id) {
  Stage& st = stage(stage_id);
  torch::NoGradGuard no_grad;
  if (options_.stage == 1) {
    for (auto& p : st.trainable) p.mutable_grad().reset();
  } else if (st.shard_grads.defined()) {
    st.shard_grads.zero_();  // G is zeroed after every microbatch's reduce-scatter
  }
  // The step's updated shard goes to every replica: in-place all-gathers, waited at first use.
  OpContext ctx;
  ctx.step = step_;
  ctx.stage = st.params.stage;
  const std::int64_t r = dp_->rank();
  for (std::size_t b = 0; b < st.buckets.size(); ++b) {
    const Bucket& bk = st.buckets[b];
    ctx.what = "ZeRO-" + std::to_string(options_.stage) + " all-gather of parameter bucket " +
               std::to_string(b);
    const torch::Tensor whole = st.flat_params.narrow(0, bk.offset, bk.padded);
    const torch::Tensor mine = whole.narrow(0, r * bk.piece, bk.piece);
    const auto bytes = static_cast<double>(whole.numel()) * sizeof(float);
    ++stats_.collectives;
    stats_.payload_bytes += static_cast<std::uint64_t>(bytes);
    stats_.wire_bytes += bytes * static_cast<double>(dp_->size() - 1) / dp_->size();
    st.gathers.push_back(dp_->all_gather(detail::view_of(mine), detail::view_of(whole), ctx));
  }
  return true;
}

void Zero::after_optimizer_step(std::int64_t step) {
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

namespace {
std::string join_longs(const torch::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s += (i == 0 ? "" : ", ") + std::to_string(t[i].item<std::int64_t>());
  }
  return s + "]";
}
}  // namespace

std::map<std::string, torch::Tensor> Zero::state() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& st : stages_) {
    if (st->buckets.empty()) continue;
    std::vector<std::int64_t> v{dp_->size(), dp_->rank(),
                                static_cast<std::int64_t>(st->buckets.size())};
    for (std::size_t b = 0; b < st->buckets.size(); ++b) {
      v.push_back(st->assignment.buckets[b].bytes / static_cast<std::int64_t>(sizeof(float)));
      v.push_back(st->buckets[b].padded);
      v.push_back(st->buckets[b].piece);
    }
    out["layout.stage" + std::to_string(st->params.stage)] = torch::tensor(v, torch::kLong);
  }
  return out;
}

void Zero::load_state(const std::map<std::string, torch::Tensor>& state) {
  for (const auto& [key, live] : this->state()) {
    const auto it = state.find(key);
    if (it == state.end()) continue;  // written before layouts were recorded
    const torch::Tensor saved = it->second.to(torch::kLong).flatten();
    PW_CHECK(saved.numel() == live.numel() && torch::equal(saved, live), ConfigError,
             "checkpoint: " << key.substr(7) << ": optimizer shard layout 'dp." << key
                            << "' (dp, rank, buckets, then n/padded/piece per bucket) is "
                            << join_longs(saved) << ", this run's is " << join_longs(live)
                            << " (resuming at another dp or bucket size is not supported)");
  }
}

void Zero::rethrow_hook_error() {
  if (hook_error_) {
    auto e = hook_error_;
    hook_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace pipewright::exec
