// The memory model (memory.hpp, Note [Memory model]).
#include "pipewright/sched/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "pipewright/graph/error.hpp"

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
  return o;
}

MemoryModel::MemoryModel(const PlanShape& shape, const CostTable& costs,
                         const MemoryOptions& options)
    : shape_(shape),
      state_factor_(optimizer_state_factor(options.optimizer, options.momentum)),
      runtime_bytes_(costs.runtime_memory_bytes),
      precision_(options.precision) {
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
  for (std::int32_t s = 0; s < shape.stages; ++s) {
    const StageCost& c = cost_of(s);
    std::int64_t kept = at_job(c.activation_bytes);
    std::int64_t redo = 0;
    if (options.recompute.recomputes(shape.model_stage(s)) && !shape.forward_only) {
      kept = 0;
      for (std::int32_t q : shape.producers(s)) {
        if (q >= 0 && q < shape.stages) kept += at_job(cost_of(q).output_bytes);
      }
      redo = at_job(c.activation_bytes);
    }
    param_bytes_.push_back(c.param_bytes);
    kept_bytes_.push_back(kept);
    recompute_bytes_.push_back(redo);
  }
}

std::int64_t MemoryModel::static_bytes(std::int32_t rank) const {
  std::int64_t params = 0;
  for (std::int32_t s : shape_.stages_of_rank(rank))
    params += param_bytes_[static_cast<std::size_t>(s)];
  if (shape_.forward_only) return params;
  return 2 * params +
         static_cast<std::int64_t>(std::llround(state_factor_ * static_cast<double>(params)));
}

std::int64_t MemoryModel::autocast_cache_bytes(std::int32_t rank) const {
  if (precision_ == Precision::kFp32) return 0;
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
    case ActionKind::kBackwardInput:
      c.at_start = recompute_bytes_[s];  // held until the W
      break;
    case ActionKind::kBackwardWeight:
      c.at_end = -kept_bytes_[s] - recompute_bytes_[s];
      c.microbatches_at_end = -1;
      break;
    default:
      break;
  }
  return c;
}

std::vector<RankMemory> peak_memory(const LoweredPlan& plan, const CostTable& costs,
                                    const MemoryOptions& options) {
  const MemoryModel model(plan.shape, costs, options);
  std::vector<RankMemory> out;
  for (std::int32_t r = 0; r < plan.shape.ranks; ++r) {
    RankMemory m;
    m.rank = r;
    m.static_bytes = model.static_bytes(r);
    m.runtime_bytes = model.runtime_bytes();
    m.autocast_cache_bytes = model.autocast_cache_bytes(r);
    std::int64_t bytes = 0;
    std::int32_t microbatches = 0;
    if (static_cast<std::size_t>(r) < plan.per_rank.size()) {
      for (const Action& a : plan.per_rank[static_cast<std::size_t>(r)]) {
        const MemoryChange c = model.change(a.kind, a.stage);
        bytes += c.at_start;
        microbatches += c.microbatches_at_start;
        m.peak_activation_bytes = std::max(m.peak_activation_bytes, bytes);
        m.peak_activation_microbatches = std::max(m.peak_activation_microbatches, microbatches);
        bytes += c.at_end;
        microbatches += c.microbatches_at_end;
      }
    }
    m.peak_bytes =
        m.runtime_bytes + m.static_bytes + m.autocast_cache_bytes + m.peak_activation_bytes;
    out.push_back(m);
  }
  return out;
}

}  // namespace pipewright::sched
