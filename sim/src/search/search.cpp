#include "pipewright/sim/search.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/synthesis.hpp"

namespace pipewright::sim {
namespace {

using sched::ScheduleKind;

bool is_looped(ScheduleKind k) { return k != ScheduleKind::kGPipe && k != ScheduleKind::k1F1B; }

// Steps needed to see each periodic collective at least once (amortised step time).
std::int32_t steps_for(const DpVariant& d) {
  switch (d.algorithm) {
    case DpAlgorithm::kDdp:
      return 1;
    case DpAlgorithm::kLocalSgd:
      return d.localsgd_frequency;
    case DpAlgorithm::kSlowMo:
      return std::max(d.localsgd_frequency, d.slowmo_frequency);
    case DpAlgorithm::kDiLoCo:
      return d.sync_every;
    case DpAlgorithm::kSgp:
      return 1;
  }
  return 1;
}

struct Config {
  std::int32_t pp, dp, v, m;
  ScheduleKind kind;
  bool automatic = false;  // Auto (synthesize) with the memory limit as its cap; kind is 1F1B's
};

}  // namespace

std::vector<DpVariant> default_dp_variants() {
  return {
      DpVariant{DpAlgorithm::kDdp, 1.0, 1, 1},
      DpVariant{DpAlgorithm::kDdp, 25.0, 1, 1},
      DpVariant{DpAlgorithm::kDdp, 100.0, 1, 1},
      DpVariant{DpAlgorithm::kLocalSgd, 25.0, 2, 1},
      DpVariant{DpAlgorithm::kSlowMo, 25.0, 2, 4},
      DpVariant{DpAlgorithm::kDiLoCo, 25.0, 1, 1, 8, 1},
      DpVariant{DpAlgorithm::kDiLoCo, 25.0, 1, 1, 8, 2},
      DpVariant{DpAlgorithm::kSgp, 25.0, 1, 1},
  };
}

std::string describe(const DpVariant& d) {
  char dp[64];
  switch (d.algorithm) {
    case DpAlgorithm::kDdp:
      std::snprintf(dp, sizeof dp, "ddp(%gMiB)", d.bucket_cap_mb);
      break;
    case DpAlgorithm::kLocalSgd:
      std::snprintf(dp, sizeof dp, "localsgd(every %d)", d.localsgd_frequency);
      break;
    case DpAlgorithm::kSlowMo:
      std::snprintf(dp, sizeof dp, "slowmo(avg %d, slow %d)", d.localsgd_frequency,
                    d.slowmo_frequency);
      break;
    case DpAlgorithm::kDiLoCo:
      if (d.fragments > 1) {
        std::snprintf(dp, sizeof dp, "streaming-diloco(every %d, %d fragments)", d.sync_every,
                      d.fragments);
      } else {
        std::snprintf(dp, sizeof dp, "diloco(every %d)", d.sync_every);
      }
      break;
    case DpAlgorithm::kSgp:
      std::snprintf(dp, sizeof dp, "sgp");
      break;
  }
  return dp;
}

std::string schedule_name(const SearchCandidate& c) {
  return c.auto_schedule ? "Auto" : std::string(sched::to_string(c.schedule));
}

std::string describe(const SearchCandidate& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s pp=%d dp=%d v=%d m=%d %s", schedule_name(c).c_str(), c.pp,
                c.dp, c.v, c.microbatches, c.dp == 1 ? "-" : describe(c.dp_variant).c_str());
  std::string out = std::string(buf) + (c.recompute ? " recompute=full" : "");
  if (c.precision != sched::Precision::kFp32)
    out += " precision=" + std::string(sched::to_string(c.precision));
  if (c.zero_stage > 0) out += " zero=" + std::to_string(c.zero_stage);
  return out;
}

SearchResult search(const graph::Model& model, const Cluster& cluster, const SearchOptions& opt,
                    const std::function<void(std::int64_t, std::int64_t)>& progress) {
  PW_CHECK(opt.devices >= 1, ConfigError, "--devices must be >= 1, got " << opt.devices);
  cluster.check_fits(opt.devices, "cluster '" + cluster.name + "'");
  PW_CHECK(!opt.global_batch || *opt.global_batch >= 1, ConfigError,
           "--global-batch must be >= 1, got " << *opt.global_batch);
  const std::int64_t limit =
      opt.memory_limit_bytes ? *opt.memory_limit_bytes : cluster.device_memory_bytes;
  PW_CHECK(limit >= 0, ConfigError, "--memory-limit must be >= 0, got " << limit);
  const auto schedules = !opt.named_schedules    ? std::vector<sched::ScheduleKind>{}
                         : opt.schedules.empty() ? sched::all_schedule_kinds()
                                                 : opt.schedules;
  const auto variants = opt.dp_variants.empty() ? default_dp_variants() : opt.dp_variants;
  const auto precisions = opt.precisions.empty()
                              ? std::vector<sched::Precision>{sched::Precision::kFp32}
                              : opt.precisions;
  const auto n_precisions = static_cast<std::int64_t>(precisions.size());
  const auto nodes = static_cast<std::int32_t>(model.nodes.size());
  const std::int64_t mbs = std::max<std::int64_t>(model.micro_batch_size, 1);

  // Enumerate shapes first (deterministic order), so the progress total is known.
  std::vector<Config> configs;
  for (std::int32_t pp = 1; pp <= opt.devices; ++pp) {
    if (opt.devices % pp != 0) continue;
    const std::int32_t dp = opt.devices / pp;
    std::vector<std::int32_t> ms;
    if (opt.global_batch) {
      if (*opt.global_batch % (dp * mbs) != 0) continue;
      ms.push_back(static_cast<std::int32_t>(*opt.global_batch / (dp * mbs)));
    } else {
      for (auto f : opt.microbatch_factors) ms.push_back(f * pp);
    }
    for (auto kind : schedules) {
      // The V-shaped schedules (ZBVZeroBubble, DualPipeV: 2; Chimera: 1) take one V only.
      const std::int32_t required = sched::required_stages_per_rank(kind);
      const std::vector<std::int32_t> vs = required != 0     ? std::vector<std::int32_t>{required}
                                           : is_looped(kind) ? opt.stages_per_rank
                                                             : std::vector<std::int32_t>{1};
      for (auto v : vs) {
        if (pp * v > nodes) continue;  // a stage needs at least one node
        for (auto m : ms) configs.push_back(Config{pp, dp, v, m, kind});
      }
    }
    if (opt.try_auto && pp <= nodes) {
      for (auto m : ms) configs.push_back(Config{pp, dp, 1, m, ScheduleKind::k1F1B, true});
    }
  }

  SearchResult result;
  std::vector<SearchCandidate> fitting;
  struct Partitioned {
    graph::Partition partition;
    sched::CostTable costs;
  };
  std::map<std::int32_t, std::shared_ptr<const Partitioned>> by_stages;
  const std::int64_t total = [&] {
    std::int64_t t = 0;
    for (const auto& c : configs)
      t += (c.dp > 1 ? static_cast<std::int64_t>(variants.size()) : 1) * n_precisions;
    return t;
  }();
  std::int64_t done = 0;
  for (const auto& c : configs) {
    const std::int64_t n_variants =
        (c.dp > 1 ? static_cast<std::int64_t>(variants.size()) : 1) * n_precisions;
    result.enumerated += n_variants;
    // The configuration as a job (its plan built as `run` builds it, over the partition's stage
    // DAG); the partition is cached per stage count. Shapes the generators reject are skipped.
    sched::JobSpec job;
    job.schedule = c.kind;
    job.pp = c.pp;
    job.dp = c.dp;
    job.stages_per_rank = c.v;
    job.microbatches = c.m;
    job.batch_size = mbs * c.m;
    job.optimizer = opt.optimizer;
    job.momentum = opt.momentum;
    std::shared_ptr<const Partitioned> parted;
    sched::LoweredPlan plan;
    try {
      const std::int32_t stages = c.pp * c.v;
      auto it = by_stages.find(stages);
      if (it == by_stages.end()) {
        auto part = sched::resolve_partition(job, model);
        auto costs = sched::costs_from_partition(model, part);
        it = by_stages
                 .emplace(stages, std::make_shared<const Partitioned>(
                                      Partitioned{std::move(part), std::move(costs)}))
                 .first;
      }
      parted = it->second;
      if (c.automatic) {
        // Note [Auto method] (sim/synthesis.hpp): the plan for this partition's costs with the
        // memory limit as the cap (none when the limit is 0); its memory at fp32.
        AutoOptions ao;
        ao.ranks = c.pp;
        ao.microbatches = c.m;
        if (limit > 0) ao.memory_limit_bytes = limit;
        ao.memory.optimizer = opt.optimizer;
        ao.memory.momentum = opt.momentum;
        ao.sim = sim_options(job);
        ao.sim.micro_batch_size = mbs;
        ao.cluster = cluster;
        plan = sched::lower_for_run(synthesize(parted->costs, ao).plan);
      } else {
        plan = sched::make_plan(job, &parted->partition);
      }
    } catch (const InputError&) {
      result.rejected_shape += n_variants;
      for (std::int64_t k = 0; k < n_variants; ++k) {  // one call per configuration
        ++done;
        if (progress) progress(done, total);
      }
      continue;
    }
    for (std::int64_t k = 0; k < n_variants; ++k) {
      const auto k_variant = static_cast<std::size_t>(k / n_precisions);
      const DpVariant variant = c.dp > 1 ? variants[k_variant] : DpVariant{};
      sched::JobSpec vjob = job;
      vjob.precision = precisions[static_cast<std::size_t>(k % n_precisions)];
      auto& d = vjob.data_parallel;
      d.algorithm = variant.algorithm;
      d.bucket_cap_mb = variant.bucket_cap_mb;
      if (variant.algorithm == DpAlgorithm::kLocalSgd || variant.algorithm == DpAlgorithm::kSlowMo)
        d.localsgd_frequency = variant.localsgd_frequency;
      if (variant.algorithm == DpAlgorithm::kDiLoCo) {
        d.sync_every = variant.sync_every;
        d.fragments = variant.fragments;
      }
      if (variant.algorithm == DpAlgorithm::kSlowMo) d.slowmo_frequency = variant.slowmo_frequency;
      vjob.steps = c.dp > 1 ? steps_for(variant) : 1;
      SimOptions so = sim_options(vjob);
      so.micro_batch_size = mbs;
      so.record_actions = false;
      Cluster cl = cluster;
      cl.device_memory_bytes = limit;
      SimResult r = simulate(plan, parted->costs, cl, so);
      ++result.simulated;
      result.simulated_actions += r.simulated_actions;
      bool recompute = false;
      // Memory is the constraint: try again with every stage recomputing its activations
      // (--recompute full), which trades a forward per backward for keeping stage inputs only.
      const auto over = [](const SimResult& x) {
        return std::any_of(x.per_rank.begin(), x.per_rank.end(),
                           [](const RankResult& rr) { return rr.exceeds_memory; });
      };
      // Issue 43: shard the state, the least sharding that fits (ZeRO-3 placed to fit).
      std::int32_t zero_stage = 0;
      if (opt.try_zero && over(r) && c.dp > 1 && variant.algorithm == DpAlgorithm::kDdp) {
        for (std::int32_t z = 1; z <= 3; ++z) {
          sched::JobSpec zjob = vjob;
          zjob.zero_stage = z;
          SimOptions zo = sim_options(zjob);
          zo.micro_batch_size = mbs;
          zo.record_actions = false;
          sched::LoweredPlan zplan;
          if (z == 3) {
            const sched::ShardFit fit{&parted->costs, sched::memory_options(zjob), limit};
            zplan = sched::place_shards(plan, sched::ShardPlacement::kFit, &fit);
          }
          SimResult again = simulate(z == 3 ? zplan : plan, parted->costs, cl, zo);
          ++result.simulated;
          result.simulated_actions += again.simulated_actions;
          if (!over(again)) {
            r = std::move(again);
            so = zo;
            zero_stage = z;
            ++result.sharded;
            break;
          }
        }
      }
      if (opt.try_recompute && over(r)) {
        so.recompute = sched::parse_recompute("full");
        SimResult again = simulate(plan, parted->costs, cl, so);
        ++result.simulated;
        result.simulated_actions += again.simulated_actions;
        if (!over(again)) {
          r = std::move(again);
          recompute = true;
          ++result.recomputed;
        }
      }
      SearchCandidate cand;
      cand.recompute = recompute;
      cand.zero_stage = zero_stage;
      cand.precision = vjob.precision;
      cand.pp = c.pp;
      cand.dp = c.dp;
      cand.v = c.v;
      cand.microbatches = c.m;
      cand.schedule = c.kind;
      cand.auto_schedule = c.automatic;
      cand.dp_variant = variant;
      cand.step_ns = r.makespan_ns / std::max(r.steps, 1);
      cand.throughput_samples_per_s = r.throughput_samples_per_s();
      cand.bubble_fraction = r.bubble_fraction();
      for (const auto& rr : r.per_rank) {
        cand.peak_memory_bytes = std::max(cand.peak_memory_bytes, rr.peak_memory_bytes);
        cand.fits_memory = cand.fits_memory && !rr.exceeds_memory;
      }
      if (cand.fits_memory) {
        fitting.push_back(cand);
      } else {
        ++result.dropped_memory;
      }
      ++done;
      if (progress) progress(done, total);
    }
  }
  // Best throughput first; ties by shorter step, then by the enumeration order (stable sort).
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const SearchCandidate& a, const SearchCandidate& b) {
                     if (a.throughput_samples_per_s != b.throughput_samples_per_s)
                       return a.throughput_samples_per_s > b.throughput_samples_per_s;
                     return a.step_ns < b.step_ns;
                   });
  if (opt.top_k > 0 && fitting.size() > static_cast<std::size_t>(opt.top_k))
    fitting.resize(static_cast<std::size_t>(opt.top_k));
  result.ranked = std::move(fitting);
  return result;
}

}  // namespace pipewright::sim
