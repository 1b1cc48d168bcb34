#include "dp/ddp.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <sstream>
#include <utility>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

Ddp::Ddp(Communicator* dp, DdpOptions options)
    : dp_(dp), options_(options), step_(options.first_step) {
  PW_ASSERT(dp_ != nullptr, "DDP needs a data-parallel communicator");
  PW_CHECK(options_.num_microbatches >= 1, ConfigError,
           "--microbatches must be >= 1, got " << options_.num_microbatches);
}

Ddp::~Ddp() {
  for (auto& st : stages_) remove_grad_hooks(*st);
}

void Ddp::on_start(std::vector<StageParams>& stages) {
  PW_ASSERT(stages_.empty(), "DDP on_start called twice");
  detail::broadcast_from_replica0(*dp_, stages, options_.timeout, stats_);
  torch::NoGradGuard no_grad;
  for (auto& sp : stages) {
    auto st = std::make_unique<Stage>();
    st->params = sp;
    std::vector<std::int64_t> bytes;
    for (const auto& p : sp.params) {
      if (!p.requires_grad()) continue;
      PW_CHECK(p.scalar_type() == torch::kFloat, ConfigError,
               "DDP: stage " << sp.stage << " has a " << p.scalar_type()
                             << " parameter; only float32 parameters are supported");
      st->trainable.push_back(p);
      bytes.push_back(p.numel() * static_cast<std::int64_t>(sizeof(float)));
    }
    st->assignment =
        sched::assign_buckets(bytes, options_.bucket_cap_bytes, options_.first_bucket_cap_bytes);
    st->buckets.resize(st->assignment.buckets.size());
    const auto device = st->trainable.front().device();
    for (std::size_t b = 0; b < st->buckets.size(); ++b) {
      const std::int64_t numel =
          st->assignment.buckets[b].bytes / static_cast<std::int64_t>(sizeof(float));
      if (device.is_cpu()) {
        // Memory the communicator chose (shared memory among replicas of one host with Gloo:
        // Note [Shared-memory all-reduce]), zero-filled; the tensor keeps it alive.
        std::shared_ptr<void> mem =
            dp_->allocate_collective_buffer(static_cast<std::size_t>(numel) * sizeof(float));
        void* data = mem.get();
        st->buckets[b].flat = torch::from_blob(
            data, {numel}, [mem = std::move(mem)](void*) mutable { mem.reset(); },
            torch::TensorOptions().dtype(torch::kFloat));
      } else {
        // On the parameters' device (cuda:<d> with --backend nccl): the gradients alias it.
        st->buckets[b].flat =
            torch::zeros({numel}, torch::TensorOptions().dtype(torch::kFloat).device(device));
      }
    }
    st->accumulations.assign(st->trainable.size(), 0);
    st->grad_alias.resize(st->trainable.size());
    for (std::size_t i = 0; i < st->trainable.size(); ++i) {
      const auto& gb = st->assignment.buckets[st->assignment.bucket_of_param[i]];
      const std::int64_t offset = gb.offsets_bytes[st->assignment.slot_of_param[i]] /
                                  static_cast<std::int64_t>(sizeof(float));
      torch::Tensor& flat = st->buckets[st->assignment.bucket_of_param[i]].flat;
      // An alias sharing the bucket's storage that autograd does not track as a view, so that
      // optimizers may detach_() and zero_() it like any gradient.
      const torch::Tensor& p = st->trainable[i];
      st->grad_alias[i] = torch::empty({0}, flat.options())
                              .set_(flat.storage(), flat.storage_offset() + offset, p.sizes(),
                                    p.contiguous().strides());
    }
    install_grad_hooks(this, *st);
    stages_.push_back(std::move(st));
  }
}

Ddp::Stage& Ddp::stage(int id) { return local_stage(stages_, id, "DDP"); }

const sched::BucketAssignment& Ddp::buckets_of(int id) const {
  return local_stage(stages_, id, "DDP").assignment;
}

void Ddp::open_step(Stage& st) {
  // A .grad that someone set to a tensor other than our alias is moved into the bucket, so no
  // accumulated value is lost; an undefined one stays undefined until the first accumulation
  // (Note [DDP gradient buckets]).
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

void Ddp::before_backward(int stage_id, int /*microbatch*/, bool /*last*/) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  if (!st.step_open) open_step(st);
}

void Ddp::on_grad_accumulated(Stage& st, std::size_t param) noexcept {
  if (!st.step_open || hook_error_) return;  // backward outside a training step: ignore
  try {
    const int n = ++st.accumulations[param];
    torch::Tensor& g = st.trainable[param].mutable_grad();
    torch::Tensor& alias = st.grad_alias[param];
    if (g.defined() && g.data_ptr() != alias.data_ptr()) {
      // First accumulation of the step into an undefined .grad: autograd made a new tensor.
      torch::NoGradGuard no_grad;
      alias.copy_(g);
      g = alias;
    }
    if (n != options_.num_microbatches) return;
    Bucket& b = st.buckets[st.assignment.bucket_of_param[param]];
    if (--b.pending == 0 && options_.overlap) launch_ready(st, /*in_backward=*/true);
  } catch (...) {
    hook_error_ = std::current_exception();
  }
}

void Ddp::launch_ready(Stage& st, bool in_backward) {
  while (st.next_launch < st.buckets.size() && st.buckets[st.next_launch].pending == 0) {
    launch(st, st.next_launch, in_backward);
    ++st.next_launch;
  }
}

void Ddp::launch(Stage& st, std::size_t b, bool in_backward) {
  Bucket& bucket = st.buckets[b];
  OpContext ctx;
  ctx.step = step_;
  ctx.stage = st.params.stage;
  ctx.what = "DDP all-reduce of gradient bucket " + std::to_string(b);
  // Note [DDP bf16 reduction]: the bucket goes to the all-reduce as bfloat16 (summed in float32
  // and rounded once on the CPU transports, Note [16-bit sums]) and is copied back into the
  // float32 gradients when it completes.
  if (options_.bf16_reduce) {
    torch::NoGradGuard no_grad;
    if (!bucket.wire.defined()) {
      if (bucket.flat.device().is_cpu()) {
        // Shared memory among one host's replicas, as the float32 bucket (Note [Shared-memory
        // all-reduce]): there the sum runs on bfloat16 buffers.
        std::shared_ptr<void> mem =
            dp_->allocate_collective_buffer(static_cast<std::size_t>(bucket.flat.numel()) * 2);
        void* data = mem.get();
        bucket.wire = torch::from_blob(
            data, {bucket.flat.numel()}, [mem = std::move(mem)](void*) mutable { mem.reset(); },
            torch::TensorOptions().dtype(torch::kBFloat16));
      } else {
        bucket.wire =
            torch::empty({bucket.flat.numel()}, bucket.flat.options().dtype(torch::kBFloat16));
      }
    }
    bucket.wire.copy_(bucket.flat);
  }
  bucket.work = detail::counted_all_reduce(
      *dp_, detail::view_of(options_.bf16_reduce ? bucket.wire : bucket.flat), ReduceOp::kSum, ctx,
      stats_);
  bucket.launched = true;
  ++(in_backward ? stats_.buckets_in_backward : stats_.buckets_at_reduce);
}

void Ddp::after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) { rethrow_hook_error(); }

void Ddp::reduce_grad(int stage_id) {
  rethrow_hook_error();
  Stage& st = stage(stage_id);
  if (!st.step_open) open_step(st);  // no backward ran this step: reduce zero gradients
  {
    // Parameters without a gradient this step contribute zeros.
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < st.trainable.size(); ++i) {
      if (st.accumulations[i] > 0) continue;
      torch::Tensor& g = st.trainable[i].mutable_grad();
      if (g.defined() && g.data_ptr() == st.grad_alias[i].data_ptr()) {
        continue;  // installed at open_step: holds what the user put there
      }
      st.grad_alias[i].zero_();
      g = st.grad_alias[i];
    }
  }
  // Whatever was not started during backward (unused parameters, or overlap off) starts now,
  // still in index order.
  for (std::size_t b = st.next_launch; b < st.buckets.size(); ++b) launch(st, b, false);
  st.next_launch = st.buckets.size();
  for (auto& bucket : st.buckets) {
    detail::timed_wait(bucket.work, options_.timeout, stats_);
    bucket.work.reset();
    if (options_.bf16_reduce) {
      torch::NoGradGuard no_grad;
      bucket.flat.copy_(bucket.wire);
    }
  }
  st.step_open = false;
}

bool Ddp::clear_gradients(int stage_id) {
  // set_to_none: the next step's first accumulation copies into the bucket instead of adding to
  // a zeroed one (libtorch 1.13's Optimizer::zero_grad() zeroes, one more pass over the bucket).
  for (auto& g : stage(stage_id).trainable) g.mutable_grad().reset();
  return true;
}

void Ddp::after_optimizer_step(std::int64_t step) {
  rethrow_hook_error();
  ++stats_.steps;
  step_ = step + 1;
  if (options_.check_replicas > 0 && (step + 1) % options_.check_replicas == 0) {
    std::vector<StageParams> sp;
    for (const auto& st : stages_) sp.push_back(st->params);
    detail::check_replicas_identical(*dp_, sp, step, options_.timeout, stats_);
  }
}

void Ddp::rethrow_hook_error() {
  if (hook_error_) {
    auto e = hook_error_;
    hook_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace pipewright::exec
