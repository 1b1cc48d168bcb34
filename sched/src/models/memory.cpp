// The memory model (memory.hpp, Note [Memory model]).
#include "pipewright/sched/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/buckets.hpp"
#include "pipewright/sched/plan_dag.hpp"

namespace pipewright::sched {

double optimizer_state_factor(Optimizer optimizer, double momentum) noexcept {
  switch (optimizer) {
    case Optimizer::kSgd:
      return momentum > 0 ? 1.0 : 0.0;
    case Optimizer::kAdam:
    case Optimizer::kAdamW:
      return 2.0;
  }
  return 0.0;
}

MemoryOptions memory_options(const JobSpec& job) {
  MemoryOptions o;
  o.optimizer = job.optimizer;
  o.momentum = job.momentum;
  o.recompute = job.recompute;
  o.precision = job.precision;
  o.zero_stage = job.effective_zero_stage();
  o.dp = job.dp;
  o.weight_decay = job.weight_decay;
  o.bucket_cap_bytes = bucket_cap_bytes_from_mb(job.data_parallel.bucket_cap_mb);
  return o;
}

namespace {

// Note [Optimizer transient]: tensors of a stepped parameter's size alive at once in a step.
int optimizer_temporaries(Optimizer optimizer, double weight_decay) noexcept {
  switch (optimizer) {
    case Optimizer::kSgd:
      return weight_decay > 0 ? 1 : 0;
    case Optimizer::kAdam:
      return weight_decay > 0 ? 3 : 2;
    case Optimizer::kAdamW:
      return 2;
  }
  return 0;
}

std::int64_t largest_param_bytes(const StageCost& c) {
  if (c.param_sizes_bytes.empty()) return c.param_bytes;
  return *std::max_element(c.param_sizes_bytes.begin(), c.param_sizes_bytes.end());
}

// The largest tensor (bytes) the optimizer steps for a stage: its largest parameter, or with
// ZeRO its largest bucket piece (Note [ZeRO flat buffers] in exec/src/zero/zero.hpp).
std::int64_t largest_stepped_bytes(const StageCost& c, int zero_stage, int dp,
                                   std::int64_t bucket_cap_bytes) {
  if (zero_stage == 0) return largest_param_bytes(c);
  std::vector<std::int64_t> sizes = c.param_sizes_bytes;
  if (sizes.empty()) sizes.push_back(c.param_bytes);
  const std::vector<std::int64_t> buckets =
      bucket_bytes(sizes, bucket_cap_bytes > 0 ? bucket_cap_bytes
                                               : bucket_cap_bytes_from_mb(kDefaultBucketCapMb));
  std::int64_t largest = 0;
  for (const std::int64_t bytes : buckets) {
    const std::int64_t elems = bytes / 4;
    largest = std::max(largest, (elems + dp - 1) / dp * 4);
  }
  return largest;
}

}  // namespace

MemoryModel::MemoryModel(const PlanShape& shape, const CostTable& costs,
                         const MemoryOptions& options)
    : shape_(shape),
      state_factor_(optimizer_state_factor(options.optimizer, options.momentum)),
      runtime_bytes_(costs.runtime_memory_bytes),
      precision_(options.precision),
      zero_stage_(options.dp > 1 ? options.zero_stage : 0),
      dp_(std::max(options.dp, 1)) {
  PW_CHECK(zero_stage_ >= 0 && zero_stage_ <= 3, ConfigError,
           "--zero-stage must be 0, 1, 2 or 3, got " << zero_stage_);
  switch (options.layout) {
    case StateLayout::kAutocast:
      param_x_ = 1.0, grad_x_ = 1.0, optim_x_ = state_factor_;
      break;
    case StateLayout::kMegatron:
      param_x_ = 0.5, grad_x_ = 1.0, optim_x_ = 1.0 + state_factor_;
      break;
    case StateLayout::kZero:
      param_x_ = 0.5, grad_x_ = 0.5, optim_x_ = 1.0 + state_factor_;
      break;
  }
  const auto n = costs.stages.size();
  const bool per_model_stage =
      shape.has_replicas() && n == static_cast<std::size_t>(shape.model_stages());
  PW_CHECK(n == static_cast<std::size_t>(shape.stages) || per_model_stage, ConfigError,
           "costs (" << costs.source << "): /stages has " << n << " entries but the plan has "
                     << shape.stages << " stages");
  const auto cost_of = [&](std::int32_t s) -> const StageCost& {
    return costs.stages[static_cast<std::size_t>(per_model_stage ? shape.model_stage(s) : s)];
  };
  // Note [Precision bytes]: activation and message bytes at the job's precision.
  const auto at_job = [&](std::int64_t bytes) {
    return bytes_at_precision(bytes, costs.precision, options.precision);
  };
  const std::vector<StageEdge> edges = shape.edges();
  for (std::int32_t s = 0; s < shape.stages; ++s) {
    const StageCost& c = cost_of(s);
    // Note [Autocast bytes]: what autocast keeps in fp32 does not shrink.
    std::int64_t kept = activation_bytes_at_precision(c.activation_bytes, c.activation_fp32_bytes,
                                                      costs.precision, options.precision);
    std::int64_t redo = 0;
    if (options.recompute.recomputes(shape.model_stage(s)) && !shape.forward_only) {
      kept = 0;
      for (const StageEdge& e : edges) {  // s's producers
        if (e.to == s && e.from >= 0 && e.from < shape.stages)
          kept += at_job(cost_of(e.from).output_bytes);
      }
      redo = activation_bytes_at_precision(c.activation_bytes, c.activation_fp32_bytes,
                                           costs.precision, options.precision);
    }
    param_bytes_.push_back(c.param_bytes);
    optimizer_transient_.push_back(
        c.param_bytes > 0 && !shape.forward_only
            ? optimizer_temporaries(options.optimizer, options.weight_decay) *
                  largest_stepped_bytes(c, zero_stage_, dp_, options.bucket_cap_bytes)
            : 0);
    // Under bf16 / fp16 the fresh weight gradient is first the autocast matmul's 16-bit one,
    // alive while autograd casts it to the fp32 one (Note [Optimizer transient]).
    const std::int64_t largest = largest_param_bytes(c);
    const std::int64_t low = options.precision == Precision::kFp32
                                 ? 0
                                 : bytes_at_precision(largest, Precision::kFp32, options.precision);
    grad_transient_.push_back(shape.forward_only || dp_ < 2 ? 0 : largest + low);
    kept_bytes_.push_back(kept);
    recompute_bytes_.push_back(redo);
    // Note [Weight-gradient activation]: a recomputed stage keeps what it recomputed until W.
    const double keeps = redo > 0 || !c.weight_grad_keeps ? 1.0 : *c.weight_grad_keeps;
    input_grad_frees_.push_back(kept - std::llround(keeps * static_cast<double>(kept)));
  }
}

std::int64_t MemoryModel::share(double bytes) const noexcept {
  return static_cast<std::int64_t>(std::ceil(bytes / dp_ - 1e-9));
}

std::int64_t MemoryModel::static_bytes(std::int32_t rank) const {
  std::int64_t total = 0;
  for (std::int32_t s : shape_.stages_of_rank(rank)) {
    const auto p = static_cast<double>(param_bytes_[static_cast<std::size_t>(s)]);
    const double a = param_x_ * p, g = grad_x_ * p, o = optim_x_ * p;
    if (shape_.forward_only) {  // Note [Forward-only memory]: parameters only
      total += zero_stage_ == 3 ? share(a) : std::llround(a);
      continue;
    }
    switch (zero_stage_) {  // Note [Sharded state]
      case 0:
        total += std::llround(a + g + o);
        break;
      case 1:
        total += std::llround(a + g) + share(o);
        break;
      case 2:
        total += std::llround(a) + share(g) + share(o);
        break;
      default:
        total += share(a) + share(g) + share(o);
        break;
    }
  }
  return total;
}

std::int64_t MemoryModel::autocast_cache_bytes(std::int32_t rank) const {
  // ZeRO-3 caches the gathered parameters only while a window holds them (change()).
  if (precision_ == Precision::kFp32 || zero_stage_ == 3 || param_x_ != 1.0) return 0;
  std::int64_t params = 0;  // fp32 master weights
  for (std::int32_t s : shape_.stages_of_rank(rank))
    params += param_bytes_[static_cast<std::size_t>(s)];
  return bytes_at_precision(params, Precision::kFp32, precision_);
}

MemoryChange MemoryModel::change(ActionKind kind, std::int32_t stage) const noexcept {
  MemoryChange c;
  if (stage < 0 || stage >= static_cast<std::int32_t>(kept_bytes_.size())) return c;
  const auto s = static_cast<std::size_t>(stage);
  switch (kind) {
    case ActionKind::kForward:
      c.at_start = kept_bytes_[s];
      c.microbatches_at_start = 1;
      if (shape_.forward_only) {
        c.at_end = -kept_bytes_[s];
        c.microbatches_at_end = -1;
      }
      break;
    case ActionKind::kFullBackward:
      c.at_start = recompute_bytes_[s];
      c.at_end = -recompute_bytes_[s] - kept_bytes_[s];
      c.microbatches_at_end = -1;
      break;
    case ActionKind::kUnshard:
    case ActionKind::kReshard:
      if (zero_stage_ == 3) {
        const auto p = static_cast<double>(param_bytes_[s]);
        std::int64_t gathered = std::llround(param_x_ * p);
        if (precision_ != Precision::kFp32 && param_x_ == 1.0)
          gathered += bytes_at_precision(param_bytes_[s], Precision::kFp32, precision_);
        if (kind == ActionKind::kUnshard) {
          c.sharded_at_start = gathered;
        } else {
          c.sharded_at_end = -gathered;
        }
      }
      break;
    case ActionKind::kBackwardInput:
      c.at_start = recompute_bytes_[s];  // held until the W
      c.at_end = -input_grad_frees_[s];  // Note [Weight-gradient activation]
      break;
    case ActionKind::kOptimizerStep:  // Note [Optimizer transient]
      c.transient_at_start = optimizer_transient_[s];
      c.transient_at_end = -optimizer_transient_[s];
      break;
    case ActionKind::kBackwardWeight:
      c.at_end = -(kept_bytes_[s] - input_grad_frees_[s]) - recompute_bytes_[s];
      c.microbatches_at_end = -1;
      break;
    default:
      break;
  }
  // Note [Optimizer transient]: a backward's fresh weight gradient, before it is added into .grad.
  if (!shape_.forward_only && completes_weight_grad(kind)) {
    c.transient_at_start += grad_transient_[s];
    c.transient_at_end -= grad_transient_[s];
  }
  // ZeRO-2 / 3: the full gradients of one backward, until it reduce-scatters them.
  if (zero_stage_ >= 2 && !shape_.forward_only && completes_weight_grad(kind)) {
    const std::int64_t g = std::llround(grad_x_ * static_cast<double>(param_bytes_[s]));
    c.sharded_at_start += g;
    c.sharded_at_end -= g;
  }
  c.at_start += c.sharded_at_start + c.transient_at_start;
  c.at_end += c.sharded_at_end + c.transient_at_end;
  return c;
}

namespace {

// The model's change of each (stage, kind), computed once (a plan has many actions of few kinds
// and stages).
class ChangeCache {
 public:
  explicit ChangeCache(const MemoryModel& model) : model_(model) {}
  const MemoryChange& operator()(const Action& a) {
    const auto k = static_cast<std::size_t>(a.kind);
    const auto s = static_cast<std::size_t>(a.stage < 0 ? 0 : a.stage + 1);  // all < 0 alike
    if (s >= changes_.size()) changes_.resize(s + 1);
    auto& row = changes_[s];
    if (k >= row.size()) row.resize(k + 1);
    auto& slot = row[k];
    if (!slot) slot = model_.change(a.kind, a.stage);
    return *slot;
  }

 private:
  const MemoryModel& model_;
  std::vector<std::vector<std::optional<MemoryChange>>> changes_;  // [stage + 1][kind]
};

}  // namespace

std::vector<RankMemory> peak_memory(const LoweredPlan& plan, const CostTable& costs,
                                    const MemoryOptions& options) {
  const MemoryModel model(plan.shape, costs, options);
  ChangeCache change(model);
  std::vector<RankMemory> out;
  for (std::int32_t r = 0; r < plan.shape.ranks; ++r) {
    RankMemory m;
    m.rank = r;
    m.static_bytes = model.static_bytes(r);
    m.runtime_bytes = model.runtime_bytes();
    m.autocast_cache_bytes = model.autocast_cache_bytes(r);
    std::int64_t bytes = 0;      // activations and sharded bytes
    std::int64_t sharded = 0;    // Note [Sharded state]'s part
    std::int64_t transient = 0;  // Note [Optimizer transient]'s part
    std::int64_t peak = 0;
    std::int32_t microbatches = 0;
    if (static_cast<std::size_t>(r) < plan.per_rank.size()) {
      for (const Action& a : plan.per_rank[static_cast<std::size_t>(r)]) {
        const MemoryChange& c = change(a);
        bytes += c.at_start;
        sharded += c.sharded_at_start;
        transient += c.transient_at_start;
        microbatches += c.microbatches_at_start;
        if (bytes > peak) {
          peak = bytes;
          m.peak_activation_bytes = bytes - sharded - transient;
          m.peak_sharded_bytes = sharded;
          m.peak_transient_bytes = transient;
        }
        m.peak_activation_microbatches = std::max(m.peak_activation_microbatches, microbatches);
        bytes += c.at_end;
        sharded += c.sharded_at_end;
        transient += c.transient_at_end;
        microbatches += c.microbatches_at_end;
      }
    }
    m.peak_bytes = m.runtime_bytes + m.static_bytes + m.autocast_cache_bytes + peak;
    out.push_back(m);
  }
  return out;
}

}  // namespace pipewright::sched
