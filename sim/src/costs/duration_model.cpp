#include "costs/duration_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <vector>

namespace pipewright::sim {
namespace {

// Note [Correlated sampling]: on a shared host the durations of one step are not independent:
// the host is slower or faster for a while, and one process more than the other. In the
// executor's profiles (bench/fidelity.sh, p = 2) 15-50% of the variance of log(duration / its
// kind's and stage's median) is common to a step and 15-70% to one rank's actions in one step
// (CostTable::step_correlation, rank_step_correlation). Independent draws then overstate a
// step's critical path (a max over sums of independent draws grows with their spread: sampled
// replay +6..+14% on those runs, while the medians alone gave -6..-19%). With correlations,
// an action's draw is at the quantile u = Phi(z) of its own distribution, z = sqrt(rs) z_step +
// sqrt(rr - rs) z_rank_step + sqrt(1 - rr) z_action (a Gaussian copula; the z are standard
// normals from the counter-based generator, keyed by the step, the (rank, step) and the action),
// so each kind keeps its measured distribution and the step shares its slowdowns. On the 24
// p = 2 runs of one bench/fidelity.sh, sampled replay MAPE went from 5.9% to 4.0% (max 14.0% to
// 10.4%). Message times stay independent: drawing them with the same copula made it 6.0%.

// A measured distribution in ns: (p10, median, p90), or median < 0 when there is none.
struct Quantiles {
  std::int64_t p10 = 0, p50 = -1, p90 = 0;
  std::vector<std::int64_t> q;  // 21 empirical quantiles (0%, 5%, ..., 100%) or empty
};

class TableDurations final : public DurationModel {
 public:
  TableDurations(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                 const SimOptions& options, bool shared_cores);

  std::int64_t compute_ns(std::int32_t stage, ComputeSlot slot, std::int32_t mb,
                          std::int32_t step) const noexcept override {
    const auto s = static_cast<std::size_t>(stage);
    const int k = static_cast<int>(slot);
    if (!replay_.empty()) {
      const std::int64_t v = replay_[replay_index(stage, k, mb, microbatches_)];
      if (v >= 0) return v;
    }
    const std::int64_t fixed = fixed_[s][static_cast<std::size_t>(k)];
    return sample_ ? sampled_duration(fixed, s, k, mb, step) : fixed;
  }
  std::int64_t message_ns(std::int64_t network_ns, std::int32_t edge, bool forward, std::int32_t mb,
                          std::int32_t step) const noexcept override;
  std::int64_t send_call_ns(std::int32_t edge, bool forward, std::int32_t mb,
                            std::int32_t step) const noexcept override;

 private:
  static std::uint64_t message_key(std::int32_t edge, bool forward, std::int32_t mb,
                                   std::int32_t step, std::uint64_t salt) noexcept {
    return (static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ULL) ^
           (static_cast<std::uint64_t>(edge) << 40) ^
           (static_cast<std::uint64_t>(static_cast<std::uint32_t>(mb)) << 8) ^ (forward ? 5 : 6) ^
           salt;
  }
  std::int64_t sampled_duration(std::int64_t fixed, std::size_t s, int slot, std::int32_t mb,
                                std::int32_t step) const noexcept;
  std::int64_t sample(const Quantiles& q, std::uint64_t key) const noexcept {
    return at_quantile(q, uniform(key));
  }
  static std::int64_t at_quantile(const Quantiles& q, double u) noexcept;
  double uniform(std::uint64_t key) const noexcept;
  double normal(std::uint64_t key) const noexcept;
  double correlated_uniform(std::uint64_t key, std::int32_t step, std::int32_t rank) const noexcept;

  std::int32_t microbatches_ = 0;
  std::vector<std::int32_t> stage_to_rank_;
  const std::vector<std::int64_t>& replay_;
  // Per stage and kind slot: the fixed duration, and (sampling only) its distribution.
  std::vector<std::array<std::int64_t, kReplaySlots>> fixed_;
  std::vector<std::array<Quantiles, kReplaySlots>> quantiles_;
  Quantiles p2p_quantiles_;  // the profile's per-message distribution (sampling only)
  // Note [Send calls] (engine.hpp): the fixed send call (the median, also with shared cores) and
  // its distribution (sampling only); 0 and none without the profile's measured one.
  std::int64_t send_call_fixed_ = 0;
  Quantiles send_call_quantiles_;
  // Note [Correlated sampling]: the profile's step and rank-step correlations (0: independent).
  double rho_step_ = 0, rho_rank_step_ = 0;
  bool sample_ = false;
  std::uint64_t seed_ = 0;
};

TableDurations::TableDurations(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                               const SimOptions& options, bool shared_cores)
    : microbatches_(plan.shape.microbatches),
      stage_to_rank_(plan.shape.stage_to_rank),
      replay_(options.replay_durations_ns) {
  const auto stages = static_cast<std::size_t>(plan.shape.stages);
  const std::int64_t overhead = ms_to_ns(costs.compute_overhead_ms);
  fixed_.resize(stages);
  // Shared cores: means, not samples (Note [Shared cores]).
  sample_ = options.sample_durations_seed.has_value() && !shared_cores;
  seed_ = sample_ ? *options.sample_durations_seed : 0;
  if (sample_) quantiles_.assign(stages, {});
  rho_step_ = costs.step_correlation;
  rho_rank_step_ = std::max(costs.rank_step_correlation, rho_step_);
  for (std::size_t k = 0; k < stages; ++k) {
    const auto& c = costs.stages[k];
    auto& f = fixed_[k];
    f[0] = ms_to_ns(c.forward_ms) + overhead;
    f[1] = ms_to_ns(c.backward_ms) + overhead;
    f[2] = ms_to_ns(c.input_grad_or_default_ms()) + overhead;
    f[3] = ms_to_ns(c.weight_grad_or_default_ms()) + overhead;
    f[4] = c.optimizer_ms ? ms_to_ns(*c.optimizer_ms) : 0;
    if (shared_cores) {
      auto mean = [overhead](const std::optional<sched::KindStats>& st, std::int64_t& ns) {
        if (st && st->samples > 0) ns = ms_to_ns(st->mean_or_estimate_ms()) + overhead;
      };
      mean(c.forward_stats, f[0]);
      mean(c.backward_stats, f[1]);
      mean(c.input_grad_stats, f[2]);
      mean(c.weight_grad_stats, f[3]);
      if (c.optimizer_stats && c.optimizer_stats->samples > 0)
        f[4] = ms_to_ns(c.optimizer_stats->mean_or_estimate_ms());
    }
    // Activation recompute (Note [Recompute] in sched/memory.hpp): B and I re-run the stage's
    // forward.
    const bool recomputed =
        options.recompute.recomputes(plan.shape.model_stage(static_cast<std::int32_t>(k)));
    const std::int64_t redo = recomputed ? f[0] - overhead : 0;
    f[1] += redo;
    f[2] += redo;
    if (sample_) {
      auto q = [](const std::optional<sched::KindStats>& st, std::int64_t extra) {
        Quantiles out;
        if (st && st->samples > 0) {
          out.p10 = ms_to_ns(st->p10_ms) + extra;
          out.p50 = ms_to_ns(st->median_ms) + extra;
          out.p90 = ms_to_ns(st->p90_ms) + extra;
          for (double v : st->quantiles_ms) out.q.push_back(ms_to_ns(v) + extra);
        }
        return out;
      };
      quantiles_[k] = {q(c.forward_stats, overhead), q(c.backward_stats, overhead + redo),
                       q(c.input_grad_stats, overhead + redo), q(c.weight_grad_stats, overhead),
                       q(c.optimizer_stats, 0)};
    }
  }
  if (sample_ && !options.p2p_override_ms && costs.p2p && costs.p2p->per_message_ms &&
      costs.p2p->stats && costs.p2p->stats->samples > 0) {
    const auto& st = *costs.p2p->stats;
    p2p_quantiles_.p10 = ms_to_ns(st.p10_ms);
    p2p_quantiles_.p50 = ms_to_ns(st.median_ms);
    p2p_quantiles_.p90 = ms_to_ns(st.p90_ms);
    for (double v : st.quantiles_ms) p2p_quantiles_.q.push_back(ms_to_ns(v));
  }
  // Note [Send calls]: only where the profile's per-message cost prices the messages, i.e. on
  // the network the send calls were measured on.
  if (!options.p2p_override_ms && costs.p2p && costs.p2p->per_message_ms &&
      costs.p2p->send_call_stats && costs.p2p->send_call_stats->samples > 0) {
    const auto& st = *costs.p2p->send_call_stats;
    send_call_fixed_ = ms_to_ns(st.median_ms);
    if (sample_) {
      send_call_quantiles_.p10 = ms_to_ns(st.p10_ms);
      send_call_quantiles_.p50 = ms_to_ns(st.median_ms);
      send_call_quantiles_.p90 = ms_to_ns(st.p90_ms);
      for (double v : st.quantiles_ms) send_call_quantiles_.q.push_back(ms_to_ns(v));
    }
  }
}

std::int64_t TableDurations::sampled_duration(std::int64_t fixed, std::size_t s, int slot,
                                              std::int32_t mb, std::int32_t step) const noexcept {
  const Quantiles& q = quantiles_[s][static_cast<std::size_t>(slot)];
  if (q.p50 < 0) return fixed;
  const std::uint64_t key = (static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ULL) ^
                            (static_cast<std::uint64_t>(s) << 40) ^
                            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(mb)) << 8) ^
                            static_cast<std::uint64_t>(slot);
  if (rho_rank_step_ <= 0) return sample(q, key);
  return at_quantile(q, correlated_uniform(key, step, stage_to_rank_[s]));
}

double TableDurations::correlated_uniform(std::uint64_t key, std::int32_t step,
                                          std::int32_t rank) const noexcept {
  const auto st = static_cast<std::uint64_t>(step) * 0xD6E8FEB86659FD93ULL;
  const auto r = static_cast<std::uint64_t>(rank);
  const double z = std::sqrt(rho_step_) * normal(st ^ 0x5354455053544550ULL) +
                   std::sqrt(rho_rank_step_ - rho_step_) * normal(st ^ ((r + 1) << 44)) +
                   std::sqrt(1 - rho_rank_step_) * normal(key);
  return std::clamp(0.5 * std::erfc(-z / std::sqrt(2.0)), 1e-12, 1 - 1e-12);
}

double TableDurations::normal(std::uint64_t key) const noexcept {  // Box-Muller
  return std::sqrt(-2 * std::log(uniform(key))) *
         std::cos(6.283185307179586 * uniform(key ^ 0xA0761D6478BD642FULL));
}

std::int64_t TableDurations::message_ns(std::int64_t network_ns, std::int32_t edge, bool forward,
                                        std::int32_t mb, std::int32_t step) const noexcept {
  if (!sample_ || p2p_quantiles_.p50 < 0) return network_ns;
  // independent (Note [Correlated sampling])
  return sample(p2p_quantiles_, message_key(edge, forward, mb, step, 0));
}

std::int64_t TableDurations::send_call_ns(std::int32_t edge, bool forward, std::int32_t mb,
                                          std::int32_t step) const noexcept {
  if (send_call_quantiles_.p50 < 0) return send_call_fixed_;
  return sample(send_call_quantiles_, message_key(edge, forward, mb, step, 0x5E4DC0117ULL << 12));
}

double TableDurations::uniform(std::uint64_t key) const noexcept {
  // splitmix64 of (seed, the action's identity): a uniform u in (0, 1).
  std::uint64_t z = seed_ ^ key;
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
}

std::int64_t TableDurations::at_quantile(const Quantiles& q, double u) noexcept {
  if (q.q.size() == 21) {  // the empirical quantile function, linear between 5% steps
    const double pos = u * 20;
    const auto lo = std::min<std::size_t>(static_cast<std::size_t>(pos), 19);
    const double frac = pos - static_cast<double>(lo);
    return q.q[lo] + static_cast<std::int64_t>(frac * static_cast<double>(q.q[lo + 1] - q.q[lo]));
  }
  // Piecewise-linear quantile function through (0.1, p10), (0.5, p50), (0.9, p90), extended
  // with the outer segments' slopes; never below half the p10.
  const double p10 = static_cast<double>(q.p10), p50 = static_cast<double>(q.p50),
               p90 = static_cast<double>(q.p90);
  const double v =
      u < 0.5 ? p50 + (u - 0.5) * (p50 - p10) / 0.4 : p50 + (u - 0.5) * (p90 - p50) / 0.4;
  return std::max(static_cast<std::int64_t>(v), q.p10 / 2);
}

}  // namespace

std::unique_ptr<DurationModel> make_table_durations(const sched::LoweredPlan& plan,
                                                    const sched::CostTable& costs,
                                                    const SimOptions& options, bool shared_cores) {
  return std::make_unique<TableDurations>(plan, costs, options, shared_cores);
}

}  // namespace pipewright::sim
