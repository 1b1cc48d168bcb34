#include "pipewright/sim/search.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sim/cost_inputs.hpp"
#include "pipewright/sim/parallel_model.hpp"
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
  std::int32_t pp, dp, tp, v, m;
  std::int64_t mbs;
  ScheduleKind kind;
  bool automatic = false;  // Auto (synthesize) with the memory limit as its cap; kind is 1F1B's
};

// Whether a transformer block's heads and hidden size split over tp.
bool tp_divides(const graph::Model& model, std::int32_t tp) {
  for (const auto& n : model.nodes) {
    if (n.kind != graph::NodeKind::kTransformerBlock) continue;
    for (const char* key : {"heads", "hidden"}) {
      const auto it = n.params.find(key);
      if (it != n.params.end() && it->second % tp != 0) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<DpVariant> default_dp_variants() { return {DpVariant{DpAlgorithm::kDdp, 25.0, 1, 1}}; }

std::vector<DpVariant> dp_variants_for(const std::vector<DpAlgorithm>& algorithms) {
  std::vector<DpVariant> out;
  for (auto a : algorithms) {
    switch (a) {
      case DpAlgorithm::kDdp:
        out.push_back(DpVariant{DpAlgorithm::kDdp, 25.0, 1, 1});
        break;
      case DpAlgorithm::kLocalSgd:
        out.push_back(DpVariant{DpAlgorithm::kLocalSgd, 25.0, 2, 1});
        break;
      case DpAlgorithm::kSlowMo:
        out.push_back(DpVariant{DpAlgorithm::kSlowMo, 25.0, 2, 4});
        break;
      case DpAlgorithm::kDiLoCo:
        out.push_back(DpVariant{DpAlgorithm::kDiLoCo, 25.0, 1, 1, 8, 1});
        out.push_back(DpVariant{DpAlgorithm::kDiLoCo, 25.0, 1, 1, 8, 2});
        break;
      case DpAlgorithm::kSgp:
        out.push_back(DpVariant{DpAlgorithm::kSgp, 25.0, 1, 1});
        break;
    }
  }
  return out;
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
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s pp=%d dp=%d v=%d m=%d mbs=%lld %s", schedule_name(c).c_str(),
                c.pp, c.dp, c.v, c.microbatches, static_cast<long long>(c.micro_batch_size),
                c.dp == 1 ? "-" : describe(c.dp_variant).c_str());
  std::string out = buf;
  if (c.tp > 1) out += " tp=" + std::to_string(c.tp) + (c.sequence_parallel ? " sp" : "");
  if (c.recompute) out += " recompute=full";
  if (c.precision != sched::Precision::kFp32)
    out += " precision=" + std::string(sched::to_string(c.precision));
  if (c.zero_stage > 0) out += " zero=" + std::to_string(c.zero_stage);
  return out;
}

// Note [Search]
// Shapes are enumerated first, in a fixed order (tp, pp, micro-batch size, schedule, v, m), so
// the progress total is known and results are deterministic; each is built as a job
// (sched::make_plan over the partition of the per-GPU model, parallelize_model) and simulated
// under each data-parallel variant and precision. What the issue asked of a search a user can
// trust:
//   - a shape whose plan cannot be built (a generator, the partitioner, the plan checks, a tp
//     that does not divide the heads) or whose simulation fails is a counted rejection with its
//     reason, never the end of the search;
//   - equivalent configurations are one row: at pp = 1 only 1F1B at v = 1 is built (every
//     schedule runs the same microbatches one after another; 1F1B holds the fewest), and a row
//     equal to a better-ranked one in everything but the schedule name (same step time and
//     peak) is dropped and counted in `collapsed`;
//   - synchronous training (DDP, its ZeRO stages) unless local-step algorithms are named; those
//     are marked (SearchCandidate::synchronous) and the best synchronous row is kept apart.
SearchResult search(const graph::Model& model, const Cluster& cluster, const SearchOptions& opt,
                    const std::function<void(std::int64_t, std::int64_t)>& progress) {
  PW_CHECK(opt.devices >= 1, ConfigError, "--devices must be >= 1, got " << opt.devices);
  cluster.check_fits(opt.devices, "cluster '" + cluster.name + "'");
  PW_CHECK(!opt.global_batch || *opt.global_batch >= 1, ConfigError,
           "--global-batch must be >= 1, got " << *opt.global_batch);
  const std::int64_t limit =
      opt.memory_limit_bytes ? *opt.memory_limit_bytes : cluster.device_memory_bytes;
  PW_CHECK(limit >= 0, ConfigError, "--memory-limit must be >= 0, got " << limit);
  for (auto mbs : opt.micro_batch_sizes)
    PW_CHECK(mbs >= 1, ConfigError, "--micro-batch-sizes values must be >= 1, got " << mbs);
  for (auto tp : opt.tps) PW_CHECK(tp >= 1, ConfigError, "--tp values must be >= 1, got " << tp);
  const auto schedules = !opt.named_schedules    ? std::vector<sched::ScheduleKind>{}
                         : opt.schedules.empty() ? sched::all_schedule_kinds()
                                                 : opt.schedules;
  const auto variants = opt.dp_variants.empty() ? default_dp_variants() : opt.dp_variants;
  const auto precisions = opt.precisions.empty()
                              ? std::vector<sched::Precision>{sched::Precision::kFp32}
                              : opt.precisions;
  const auto n_precisions = static_cast<std::int64_t>(precisions.size());
  const auto nodes = static_cast<std::int32_t>(model.nodes.size());
  const std::int64_t model_mbs = std::max<std::int64_t>(model.micro_batch_size, 1);
  std::vector<std::int64_t> mbss = opt.micro_batch_sizes;
  if (mbss.empty()) {
    for (std::int64_t b = 1; b <= std::max<std::int64_t>(16, model_mbs); b *= 2) mbss.push_back(b);
    if (std::find(mbss.begin(), mbss.end(), model_mbs) == mbss.end()) mbss.push_back(model_mbs);
    std::sort(mbss.begin(), mbss.end());
  }
  const std::vector<std::int32_t> tps = opt.tps.empty() ? std::vector<std::int32_t>{1} : opt.tps;

  SearchResult result;
  const auto reject = [&result](std::string configuration, std::string reason) {
    if (result.rejections.size() < SearchResult::kMaxRejections)
      result.rejections.push_back(SearchRejection{std::move(configuration), std::move(reason)});
  };
  const auto shape_text = [](const Config& c) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s pp=%d dp=%d tp=%d v=%d m=%d mbs=%lld",
                  c.automatic ? "Auto" : std::string(sched::to_string(c.kind)).c_str(), c.pp, c.dp,
                  c.tp, c.v, c.m, static_cast<long long>(c.mbs));
    return std::string(buf);
  };

  // Enumerate shapes first (deterministic order), so the progress total is known.
  std::vector<Config> configs;
  for (auto tp : tps) {
    if (opt.devices % tp != 0) {
      reject("tp=" + std::to_string(tp), "--tp " + std::to_string(tp) + " does not divide the " +
                                             std::to_string(opt.devices) + " devices");
      ++result.rejected_shape;
      continue;
    }
    if (tp > 1 && cluster.ranks_per_node > 0 && cluster.ranks_per_node % tp != 0) {
      reject("tp=" + std::to_string(tp),
             "a TP group must lie inside a node: --tp " + std::to_string(tp) +
                 " does not divide ranks_per_node " + std::to_string(cluster.ranks_per_node));
      ++result.rejected_shape;
      continue;
    }
    if (!tp_divides(model, tp)) {
      reject("tp=" + std::to_string(tp), "--tp " + std::to_string(tp) +
                                             " does not divide a transformer block's heads or "
                                             "hidden size");
      ++result.rejected_shape;
      continue;
    }
    const std::int32_t groups = opt.devices / tp;
    for (std::int32_t pp = 1; pp <= groups; ++pp) {
      if (groups % pp != 0) continue;
      const std::int32_t dp = groups / pp;
      for (auto mbs : mbss) {
        std::vector<std::int32_t> ms;
        if (opt.global_batch) {
          if (*opt.global_batch % (dp * mbs) != 0) continue;
          const std::int64_t m = *opt.global_batch / (dp * mbs);
          if (m > (1 << 20)) continue;
          ms.push_back(static_cast<std::int32_t>(m));
        } else {
          for (auto f : opt.microbatch_factors) ms.push_back(f * pp);
        }
        // At pp = 1 every schedule runs the microbatches one after another: one row (1F1B).
        const auto kinds = pp == 1 ? std::vector<ScheduleKind>{ScheduleKind::k1F1B} : schedules;
        if (pp > 1 || opt.named_schedules) {
          for (auto kind : kinds) {
            // The V-shaped schedules (ZBVZeroBubble, DualPipeV: 2; Chimera: 1) take one V only.
            const std::int32_t required = sched::required_stages_per_rank(kind);
            const std::vector<std::int32_t> vs = pp == 1 ? std::vector<std::int32_t>{1}
                                                 : required != 0
                                                     ? std::vector<std::int32_t>{required}
                                                 : is_looped(kind) ? opt.stages_per_rank
                                                                   : std::vector<std::int32_t>{1};
            for (auto v : vs) {
              if (pp * v > nodes) continue;  // a stage needs at least one node
              for (auto m : ms) configs.push_back(Config{pp, dp, tp, v, m, mbs, kind});
            }
          }
        }
        if (opt.try_auto && pp > 1 && pp <= nodes) {
          for (auto m : ms)
            configs.push_back(Config{pp, dp, tp, 1, m, mbs, ScheduleKind::k1F1B, true});
        }
      }
    }
  }

  std::vector<SearchCandidate> fitting;
  struct Partitioned {
    graph::Partition partition;
    sched::CostTable costs;
  };
  // The per-GPU model (micro-batch size, tp) and its partitions, cached by shape.
  std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, std::shared_ptr<const Partitioned>>
      by_shape;
  std::map<std::tuple<std::int64_t, std::int32_t>, std::shared_ptr<const graph::Model>> models;
  std::map<std::int32_t, Cluster> clusters;
  const auto n_variants_of = [&](const Config& c) {
    return (c.dp > 1 ? static_cast<std::int64_t>(variants.size()) : 1) * n_precisions;
  };
  const std::int64_t total = [&] {
    std::int64_t t = 0;
    for (const auto& c : configs) t += n_variants_of(c);
    return t;
  }();
  std::int64_t done = 0;
  const auto advance = [&](std::int64_t n) {
    for (std::int64_t k = 0; k < n; ++k) {  // one call per configuration
      ++done;
      if (progress) progress(done, total);
    }
  };
  for (const auto& c : configs) {
    const std::int64_t n_variants = n_variants_of(c);
    result.enumerated += n_variants;
    // The configuration as a job (its plan built as `run` builds it, over the partition's stage
    // DAG); the partition is cached per shape. Shapes that cannot be built are rejections.
    sched::JobSpec job;
    job.schedule = c.kind;
    job.pp = c.pp;
    job.dp = c.dp;
    job.stages_per_rank = c.v;
    job.microbatches = c.m;
    job.batch_size = c.mbs * c.m;
    job.optimizer = opt.optimizer;
    job.momentum = opt.momentum;
    std::shared_ptr<const Partitioned> parted;
    sched::LoweredPlan plan;
    Cluster* tp_cl = nullptr;
    try {
      auto cit = clusters.find(c.tp);
      if (cit == clusters.end()) {
        Cluster cl = tp_cluster(cluster, c.tp);
        cl.device_memory_bytes = limit;
        cit = clusters.emplace(c.tp, std::move(cl)).first;
      }
      tp_cl = &cit->second;
      const std::int32_t stages = c.pp * c.v;
      // The per-GPU model; its TP collectives move 16-bit activations (mixed precision, as
      // every tensor-parallel run does).
      auto mit = models.find({c.mbs, c.tp});
      if (mit == models.end()) {
        ParallelModelSpec ps;
        ps.micro_batch_size = c.mbs;
        ps.tp = c.tp;
        ps.sequence_parallel = opt.sequence_parallel && c.tp > 1;
        ps.element_bytes = 2;
        ps.tp_link = cluster.collective_link(false);
        ps.device = cluster.device;  // Note [Roofline layer] when the cluster names its device
        mit = models
                  .emplace(std::make_tuple(c.mbs, c.tp),
                           std::make_shared<const graph::Model>(parallelize_model(model, ps)))
                  .first;
      }
      const graph::Model& gpu_model = *mit->second;
      auto it = by_shape.find({c.mbs, c.tp, stages});
      if (it == by_shape.end()) {
        auto part = sched::resolve_partition(job, gpu_model);
        auto costs = sched::costs_from_partition(gpu_model, part);
        it = by_shape
                 .emplace(std::make_tuple(c.mbs, c.tp, stages),
                          std::make_shared<const Partitioned>(
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
        ao.sim.micro_batch_size = c.mbs;
        ao.cluster = *tp_cl;
        plan = sched::lower_for_run(synthesize(parted->costs, ao).plan);
      } else {
        plan = sched::make_plan(job, &parted->partition);
      }
    } catch (const Error& e) {
      // Any failure to build the shape (a generator or partitioner refusing it, a plan check,
      // a cluster that cannot place the TP group) rejects this shape only.
      result.rejected_shape += n_variants;
      reject(shape_text(c), e.what());
      advance(n_variants);
      continue;
    }
    const double model_flops =
        model_flops_per_iteration(model, static_cast<double>(c.mbs * c.m * c.dp));
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
      SearchCandidate cand;
      cand.precision = vjob.precision;
      cand.pp = c.pp;
      cand.dp = c.dp;
      cand.tp = c.tp;
      cand.sequence_parallel = opt.sequence_parallel && c.tp > 1;
      cand.micro_batch_size = c.mbs;
      cand.v = c.v;
      cand.microbatches = c.m;
      cand.schedule = c.kind;
      cand.auto_schedule = c.automatic;
      cand.dp_variant = variant;
      try {
        SimOptions so = sim_options(vjob);
        so.steps = steps_for(variant);
        so.micro_batch_size = c.mbs;
        so.record_actions = false;
        const Cluster& cl = *tp_cl;
        SimResult r = simulate(plan, parted->costs, cl, so);
        ++result.simulated;
        result.simulated_actions += r.simulated_actions;
        // Memory is the constraint: try again with every stage recomputing its activations
        // (--recompute full), which trades a forward per backward for keeping stage inputs only.
        const auto over = [](const SimResult& x) {
          return std::any_of(x.per_rank.begin(), x.per_rank.end(),
                             [](const RankResult& rr) { return rr.exceeds_memory; });
        };
        // Issue 43: shard the state, the least sharding that fits (ZeRO-3 placed to fit).
        if (opt.try_zero && over(r) && c.dp > 1 && variant.algorithm == DpAlgorithm::kDdp) {
          for (std::int32_t z = 1; z <= 3; ++z) {
            sched::JobSpec zjob = vjob;
            zjob.zero_stage = z;
            SimOptions zo = sim_options(zjob);
            zo.steps = so.steps;
            zo.micro_batch_size = c.mbs;
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
              cand.zero_stage = z;
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
            cand.recompute = true;
            ++result.recomputed;
          }
        }
        cand.step_ns = r.makespan_ns / std::max(r.steps, 1);
        cand.throughput_samples_per_s = r.throughput_samples_per_s();
        cand.bubble_fraction = r.bubble_fraction();
        for (const auto& rr : r.per_rank) {
          cand.peak_memory_bytes = std::max(cand.peak_memory_bytes, rr.peak_memory_bytes);
          cand.fits_memory = cand.fits_memory && !rr.exceeds_memory;
        }
      } catch (const Error& e) {
        ++result.rejected_shape;
        reject(describe(cand), e.what());
        advance(1);
        continue;
      }
      if (cand.step_ns > 0 && model_flops > 0) {
        cand.model_tflops_per_gpu = model_flops / (static_cast<double>(cand.step_ns) * 1e-9) /
                                    static_cast<double>(opt.devices) / 1e12;
        if (cluster.device && cluster.device->peak_tflops > 0)
          cand.mfu = cand.model_tflops_per_gpu / cluster.device->peak_tflops;
      }
      if (cand.fits_memory) {
        fitting.push_back(cand);
      } else {
        ++result.dropped_memory;
        char why[128];
        std::snprintf(why, sizeof why, "over the memory limit: peak %.2f GiB > %.2f GiB",
                      static_cast<double>(cand.peak_memory_bytes) / (1 << 30),
                      static_cast<double>(limit) / (1 << 30));
        reject(describe(cand), why);
      }
      advance(1);
    }
  }
  // Best throughput first; ties by shorter step, then by lower peak memory, then by the
  // enumeration order (stable sort).
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const SearchCandidate& a, const SearchCandidate& b) {
                     if (a.throughput_samples_per_s != b.throughput_samples_per_s)
                       return a.throughput_samples_per_s > b.throughput_samples_per_s;
                     if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
                     return a.peak_memory_bytes < b.peak_memory_bytes;
                   });
  // Equivalent rows: equal but for the schedule (and v) in what a user runs and gets.
  std::vector<SearchCandidate> distinct;
  {
    using Key =
        std::tuple<std::int32_t, std::int32_t, std::int32_t, bool, std::int64_t, std::int32_t,
                   std::string, std::int32_t, bool, int, std::int64_t, std::int64_t>;
    std::set<Key> seen;
    for (auto& cand : fitting) {
      const Key key{cand.pp,
                    cand.dp,
                    cand.tp,
                    cand.sequence_parallel,
                    cand.micro_batch_size,
                    cand.microbatches,
                    cand.dp == 1 ? std::string("-") : describe(cand.dp_variant),
                    cand.zero_stage,
                    cand.recompute,
                    static_cast<int>(cand.precision),
                    cand.step_ns,
                    cand.peak_memory_bytes};
      if (!seen.insert(key).second) {
        ++result.collapsed;
        continue;
      }
      distinct.push_back(std::move(cand));
    }
  }
  const auto sync = std::find_if(distinct.begin(), distinct.end(),
                                 [](const SearchCandidate& x) { return x.synchronous(); });
  if (sync != distinct.end()) result.best_synchronous = *sync;
  if (opt.top_k > 0 && distinct.size() > static_cast<std::size_t>(opt.top_k))
    distinct.resize(static_cast<std::size_t>(opt.top_k));
  result.ranked = std::move(distinct);
  return result;
}

}  // namespace pipewright::sim
