#include "pipewright/sim/search.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
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
#include "search/parallel.hpp"
#include "search/rank.hpp"

namespace pipewright::sim {
namespace {

using sched::ScheduleKind;
using search_detail::Caches;
using search_detail::communication_free;
using search_detail::Evaluation;
using search_detail::has_shaped_blocks;
using search_detail::is_chain;
using search_detail::job_of;
using search_detail::MemKey;
using search_detail::Partitioned;
using search_detail::Pending;
using search_detail::place_fit;
using search_detail::prefetch;
using search_detail::search_threads;
using search_detail::Shape;
using search_detail::simulate_one;
using search_detail::Simulated;
using search_detail::steps_for;
using search_detail::time_key;
using search_detail::TimeKey;
using search_detail::Timing;
using search_detail::tp_divides;

bool is_looped(ScheduleKind k) { return k != ScheduleKind::kGPipe && k != ScheduleKind::k1F1B; }

}  // namespace

// Note [Search]
// Shapes are enumerated first, in a fixed order (tp, pp, micro-batch size, schedule, v, m), so
// the progress total is known and results are deterministic. Each shape is tried under every
// recompute mode (none; selective: a per-GPU model whose blocks keep Korthikanti's activations
// without the attention core; full: every stage keeps its inputs), precision, zero stage (DDP at
// dp > 1) and data-parallel variant: each combination is one candidate. What the issues asked of
// a search a user can trust:
//   - a shape whose plan cannot be built (a generator, the partitioner, the plan checks, a tp
//     that does not divide the heads) or whose simulation fails is a counted rejection with its
//     reason, never the end of the search;
//   - equivalent configurations are one row: at pp = 1 only 1F1B at v = 1 is built (every
//     schedule runs the same microbatches one after another; 1F1B holds the fewest), and a row
//     equal to a better-ranked one in everything but the schedule name (same step time and
//     peak) is dropped and counted in `collapsed`;
//   - synchronous training (DDP, its ZeRO stages) unless local-step algorithms are named; those
//     are marked (SearchCandidate::synchronous) and the best synchronous row is kept apart;
//   - memory first (Note [Search pruning]): a candidate over the limit by the closed-form bound
//     is dropped without a plan; then the plan's exact peak (sched::peak_memory, which the
//     simulator reports too) drops the rest over it, still without simulating;
// Note [Search cache]: what is built is cached by what it depends on: the per-GPU model by
// (micro-batch size, tp, selective), its partition and cost table by that and the stage count,
// a named schedule's plan by (schedule, pp, v, m) alone (make_plan reads no costs for a chain of
// stages), Auto's by its partition too, the exact peak by (plan, costs, precision, zero stage,
// recompute), and a simulation by what the timing reads: plan, costs, zero stage, recompute,
// precision (message bytes) and the data-parallel variant; without a cluster (free
// communication) precision and zero stages 0-2 do not change any time and share one simulation.
// Note [Parallel search]: the candidates that fit by the bound are evaluated in chunks
// (SearchOptions::jobs threads; 4 candidates per thread at first, doubling up to 256: the first
// ones, with the best bounds, fill the References that exclude most of the rest). For a chunk,
// prefetch (parallel.cpp) computes on the threads, into Caches::peak_specs and sim_specs, what its
// candidates may need: each new plan's PlanPeaks, each new MemKey's peak (ZeRO-3: kCompute's least
// peak, kFit's placement and its peak), each new TimeKey's simulation; all pure functions of their
// key. A candidate the References exclude at the chunk's start is skipped: References only grow, so
// the serial order excludes it too. Then the loop below runs the serial search unchanged, one
// candidate after another, taking a value from the specs where it would compute it (and rethrowing
// what computing it threw); so every decision, count, rejection and row is the serial one at every
// thread count, and a simulation the serial order would not run (its candidate bounded by one
// earlier in the chunk) is computed in vain and neither counted nor used. The threads share nothing
// mutable: each writes its own item's slot, reads the caches and References only while no one
// writes them, and the joins publish the slots before the main thread merges them.
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
  for (auto z : opt.zero_stages)
    PW_CHECK(z >= 0 && z <= 3, ConfigError, "--zero-stages values must be 0..3, got " << z);
  const auto schedules = !opt.named_schedules    ? std::vector<sched::ScheduleKind>{}
                         : opt.schedules.empty() ? sched::all_schedule_kinds()
                                                 : opt.schedules;
  const auto variants = opt.dp_variants.empty() ? default_dp_variants() : opt.dp_variants;
  const auto precisions = opt.precisions.empty()
                              ? std::vector<sched::Precision>{sched::Precision::kFp32}
                              : opt.precisions;
  const std::vector<std::int32_t> zeros =
      opt.zero_stages.empty() ? std::vector<std::int32_t>{0, 1, 2, 3} : opt.zero_stages;
  std::vector<LayerRecompute> recomputes =
      opt.recomputes.empty()
          ? std::vector<LayerRecompute>{LayerRecompute::kNone, LayerRecompute::kSelective,
                                        LayerRecompute::kFull}
          : opt.recomputes;
  // Selective recompute of a model without shaped blocks is no recompute: not a candidate.
  if (!has_shaped_blocks(model))
    recomputes.erase(std::remove(recomputes.begin(), recomputes.end(), LayerRecompute::kSelective),
                     recomputes.end());
  const bool free_comm = communication_free(cluster);
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
  const auto reject = [&result](const std::string& configuration, const std::string& reason) {
    if (result.rejections.size() < SearchResult::kMaxRejections)
      result.rejections.push_back(SearchRejection{configuration, reason});
  };
  const auto shape_text = [](const Shape& c) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s pp=%d dp=%d tp=%d v=%d m=%d mbs=%lld",
                  c.automatic ? "Auto" : std::string(sched::to_string(c.kind)).c_str(), c.pp, c.dp,
                  c.tp, c.v, c.m, static_cast<long long>(c.mbs));
    return std::string(buf);
  };

  // Enumerate shapes first (deterministic order), so the progress total is known.
  std::vector<Shape> shapes;
  for (auto tp : tps) {
    std::string why;
    if (opt.devices % tp != 0) {
      why = "--tp " + std::to_string(tp) + " does not divide the " + std::to_string(opt.devices) +
            " devices";
    } else if (tp > 1 && cluster.ranks_per_node > 0 && cluster.ranks_per_node % tp != 0) {
      why = "a TP group must lie inside a node: --tp " + std::to_string(tp) +
            " does not divide ranks_per_node " + std::to_string(cluster.ranks_per_node);
    } else if (!tp_divides(model, tp)) {
      why = "--tp " + std::to_string(tp) +
            " does not divide a transformer block's heads or hidden size";
    }
    if (!why.empty()) {
      reject("tp=" + std::to_string(tp), why);
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
              for (auto m : ms) shapes.push_back(Shape{pp, dp, tp, v, m, mbs, kind});
            }
          }
        }
        if (opt.try_auto && pp > 1 && pp <= nodes) {
          for (auto m : ms)
            shapes.push_back(Shape{pp, dp, tp, 1, m, mbs, ScheduleKind::k1F1B, true});
        }
      }
    }
  }

  // The data-parallel variants a (shape, zero stage) is tried with: at dp 1 one (none), once
  // (with the first zero stage listed, as 0: nothing to shard); DDP only from zero stage 1 on.
  const auto variants_of = [&](const Shape& c, std::int32_t zero) {
    std::vector<std::size_t> out;
    if (c.dp == 1) {
      if (zero == zeros.front()) out.push_back(SIZE_MAX);
      return out;
    }
    for (std::size_t k = 0; k < variants.size(); ++k)
      if (zero == 0 || variants[k].algorithm == DpAlgorithm::kDdp) out.push_back(k);
    return out;
  };
  const std::int64_t total = [&] {
    std::int64_t t = 0;
    for (const auto& c : shapes)
      for (auto z : zeros)
        t += static_cast<std::int64_t>(variants_of(c, z).size() * recomputes.size() *
                                       precisions.size());
    return t;
  }();
  std::int64_t done = 0;
  const auto advance = [&](std::int64_t n) {
    for (std::int64_t k = 0; k < n; ++k) {  // one call per configuration
      ++done;
      if (progress) progress(done, total);
    }
  };

  // Note [Search cache].
  using ModelKey = std::tuple<std::int64_t, std::int32_t, bool>;  // mbs, tp, selective
  std::map<ModelKey, std::shared_ptr<const graph::Model>> models;
  std::map<std::tuple<ModelKey, std::int32_t>, std::shared_ptr<const Partitioned>> partitions;
  // schedule, pp, v, m, Auto's partition (else null)
  using PlanKey = std::tuple<int, std::int32_t, std::int32_t, std::int32_t, const void*>;
  std::map<PlanKey, std::shared_ptr<const sched::LoweredPlan>> plans;
  Caches caches;  // the peaks and timings (Note [Search cache])
  auto& sharded_plans = caches.sharded_plans;
  auto& peaks = caches.peaks;
  auto& pk_least = caches.pk_least;
  auto& timings = caches.timings;
  const auto& peak_specs = caches.peak_specs;
  const auto& sim_specs = caches.sim_specs;
  std::map<std::int32_t, Cluster> clusters;
  std::vector<Pending> pending;
  // Note [Plan peaks] (sched/lower.hpp): each plan read once for all its peaks.
  auto& plan_peaks = caches.plan_peaks;
  const auto peaks_of =
      [&](const std::shared_ptr<const sched::LoweredPlan>& plan) -> const sched::PlanPeaks& {
    auto& slot = plan_peaks[plan.get()];
    if (!slot) slot = std::make_unique<const sched::PlanPeaks>(*plan);
    return *slot;
  };
  std::vector<SearchCandidate> fitting;

  // The plan of a shape (cached, Note [Search cache]); an error string when it cannot be built.
  std::map<PlanKey, std::string> plan_errors;
  const auto plan_of = [&](const Shape& c, const std::shared_ptr<const Partitioned>& parted,
                           const Cluster& cl,
                           std::string& error) -> std::shared_ptr<const sched::LoweredPlan> {
    // Auto's plan, and a plan over a stage DAG that is not a chain, read the partition.
    const void* auto_key =
        c.automatic || !parted->chain ? static_cast<const void*>(parted.get()) : nullptr;
    const auto key = std::make_tuple(static_cast<int>(c.kind), c.pp, c.v, c.m, auto_key);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    if (auto it = plan_errors.find(key); it != plan_errors.end()) {
      error = it->second;
      return nullptr;
    }
    try {
      sched::JobSpec job = job_of(c, opt);
      sched::LoweredPlan built;
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
        ao.cluster = cl;
        built = sched::lower_for_run(synthesize(parted->costs, ao).plan);
      } else {
        built = sched::make_plan(job, &parted->partition);
      }
      return plans.emplace(key, std::make_shared<const sched::LoweredPlan>(std::move(built)))
          .first->second;
    } catch (const Error& e) {
      // A generator, the plan checks or Auto refusing the shape.
      error = plan_errors.emplace(key, e.what()).first->second;
      return nullptr;
    }
  };
  for (const auto& c : shapes) {
    auto cit = clusters.find(c.tp);
    bool shape_rejected = false;  // its plan failed: one rejection names the shape
    std::int64_t shape_n = 0;
    for (auto z : zeros)
      shape_n += static_cast<std::int64_t>(variants_of(c, z).size() * precisions.size());
    for (const LayerRecompute rc : recomputes) {
      const bool selective = rc == LayerRecompute::kSelective;
      const bool full = rc == LayerRecompute::kFull;
      const ModelKey mkey{c.mbs, c.tp, selective};
      sched::JobSpec job = job_of(c, opt);
      if (full) job.recompute = sched::parse_recompute("full");
      std::shared_ptr<const Partitioned> parted;
      try {
        if (cit == clusters.end()) {
          Cluster cl = tp_cluster(cluster, c.tp);
          cl.device_memory_bytes = limit;
          cit = clusters.emplace(c.tp, std::move(cl)).first;
        }
        auto mit = models.find(mkey);
        if (mit == models.end()) {
          // The per-GPU model; its TP collectives move 16-bit activations (mixed precision, as
          // every tensor-parallel run does).
          ParallelModelSpec ps;
          ps.micro_batch_size = c.mbs;
          ps.tp = c.tp;
          ps.sequence_parallel = opt.sequence_parallel && c.tp > 1;
          ps.element_bytes = 2;
          ps.tp_link = cluster.collective_link(false);
          ps.device = cluster.device;  // Note [Roofline layer] when the cluster names its device
          ps.recompute = selective ? LayerRecompute::kSelective : LayerRecompute::kNone;
          mit =
              models
                  .emplace(mkey, std::make_shared<const graph::Model>(parallelize_model(model, ps)))
                  .first;
        }
        const std::int32_t stages = c.pp * c.v;
        auto pit = partitions.find({mkey, stages});
        if (pit == partitions.end()) {
          auto part = sched::resolve_partition(job, *mit->second);
          auto costs = sched::costs_from_partition(*mit->second, part);
          const bool chain = is_chain(part);
          pit = partitions
                    .emplace(std::make_tuple(mkey, stages),
                             std::make_shared<const Partitioned>(
                                 Partitioned{std::move(part), std::move(costs), chain}))
                    .first;
        }
        parted = pit->second;
      } catch (const Error& e) {
        // The per-GPU model or the partition refuses the shape: every candidate of it.
        result.enumerated += shape_n;
        result.rejected_shape += shape_n;
        reject(shape_text(c) + (rc == LayerRecompute::kNone ? "" : " recompute=" + to_string(rc)),
               e.what());
        advance(shape_n);
        continue;
      }
      const Cluster& cl = cit->second;
      const double model_flops =
          model_flops_per_iteration(model, static_cast<double>(c.mbs * c.m * c.dp));
      for (const auto precision : precisions) {
        for (const auto listed : zeros) {
          const auto ks = variants_of(c, listed);
          const std::int32_t zero = c.dp == 1 ? 0 : listed;
          if (ks.empty()) continue;
          const auto n = static_cast<std::int64_t>(ks.size());
          result.enumerated += n;
          SearchCandidate cand;
          cand.precision = precision;
          cand.pp = c.pp;
          cand.dp = c.dp;
          cand.tp = c.tp;
          cand.sequence_parallel = opt.sequence_parallel && c.tp > 1;
          cand.micro_batch_size = c.mbs;
          cand.v = c.v;
          cand.microbatches = c.m;
          cand.schedule = c.kind;
          cand.auto_schedule = c.automatic;
          cand.recompute = rc;
          cand.zero_stage = zero;
          const auto each = [&](const std::function<void(SearchCandidate&)>& f) {
            for (auto k : ks) {
              SearchCandidate x = cand;
              x.dp_variant = k == SIZE_MAX ? DpVariant{} : variants[k];
              f(x);
            }
          };
          sched::JobSpec zjob = job;
          zjob.precision = precision;
          zjob.zero_stage = zero;
          const sched::MemoryOptions mo = sched::memory_options(zjob);
          // Note [Search pruning]: the closed-form bound, before any plan.
          const std::int64_t bound = peak_memory_lower_bound(parted->costs, c.pp, mo);
          if (limit > 0 && bound > limit) {
            result.dropped_memory += n;
            result.pruned_memory += n;
            char why[160];
            std::snprintf(why, sizeof why,
                          "over the memory limit: peak at least %.2f GiB (closed-form bound) > "
                          "%.2f GiB",
                          static_cast<double>(bound) / (1 << 30),
                          static_cast<double>(limit) / (1 << 30));
            each([&](SearchCandidate& x) { reject(describe(x), why); });
            advance(n);
            continue;
          }
          {
            std::string plan_error;
            if (!plan_of(c, parted, cit->second, plan_error)) {
              // A generator, the plan checks or Auto refusing the shape.
              result.rejected_shape += n;
              if (!shape_rejected) reject(shape_text(c), plan_error);
              shape_rejected = true;
              advance(n);
              continue;
            }
          }
          // Fits by the bound: its exact peak and its time come below, best bound first (Note
          // [Search bounds]).
          const std::int64_t step_bound = search_detail::step_lower_bound_ns(
              parted->costs, c.kind, c.automatic, c.pp, c.v, c.m, full, parted->chain);
          const double samples = static_cast<double>(c.mbs) * c.m * c.dp;
          for (auto k : ks) {
            SearchCandidate x = cand;
            x.dp_variant = k == SIZE_MAX ? DpVariant{} : variants[k];
            pending.push_back(Pending{
                std::move(x), c, parted, &cl, mo, bound,
                step_bound > 0 ? samples / (static_cast<double>(step_bound) * 1e-9) : HUGE_VAL,
                model_flops, k});
          }
        }
      }
    }
  }
  // Note [Search bounds]: best bound first; a candidate that can be neither in the top rows nor
  // on the Pareto front is not simulated.
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return a.throughput_bound > b.throughput_bound;
  });
  search_detail::References all(opt.top_k), synchronous(opt.top_k);

  const std::int32_t threads = search_threads(opt.jobs);
  const Evaluation ev{&opt, limit, free_comm, threads, &all, &synchronous};
  // Note [Parallel search]: chunks of 4 candidates per thread at first, doubling to 256.
  const auto per_thread = static_cast<std::size_t>(threads);
  std::size_t chunk = threads <= 1 ? pending.size() : 4 * per_thread;
  for (std::size_t begin = 0, end = 0; begin < pending.size();
       begin = end, chunk = std::min(2 * chunk, 256 * per_thread)) {
    end = std::min(pending.size(), begin + chunk);
    if (threads > 1) {
      prefetch(caches, pending, begin, end, ev, [&](const Pending& p) {
        std::string plan_error;
        return plan_of(p.shape, p.parted, *p.cluster, plan_error);
      });
    }
    for (std::size_t i = begin; i < end; ++i) {
      auto& p = pending[i];
      SearchCandidate& x = p.cand;
      const auto& refs = x.synchronous() ? synchronous : all;
      if (refs.excludes(p.memory_bound, p.throughput_bound)) {  // whatever its exact peak
        ++result.bounded;
        advance(1);
        continue;
      }
      std::string plan_error;
      const auto plan = plan_of(p.shape, p.parted, *p.cluster, plan_error);
      if (!plan) {
        ++result.rejected_shape;
        reject(describe(x), plan_error);
        advance(1);
        continue;
      }
      // The exact peak (sched's memory model, with ZeRO-3's all-gathers placed to fit the limit).
      const bool full = x.recompute == LayerRecompute::kFull;
      const MemKey mkey{plan.get(),   p.parted.get(), x.dp,
                        x.zero_stage, full,           static_cast<int>(x.precision)};
      std::shared_ptr<const sched::LoweredPlan> run_plan = plan;
      try {
        if (x.zero_stage == 3 && x.dp > 1) {
          auto sit = sharded_plans.find(mkey);
          if (sit == sharded_plans.end() && pk_least.count(mkey) == 0) {
            // Note [Search bounds]: gathering around each compute action alone (kCompute) holds
            // the least; if even that peak is ruled out, the placement that fits is not needed.
            const auto ps = peak_specs.find(mkey);
            pk_least.emplace(
                mkey, ps != peak_specs.end() && ps->second.has_least
                          ? ps->second.least.get()
                          : peaks_of(plan).compute_placement_peak_bytes(p.parted->costs, p.memory));
          }
          if (sit == sharded_plans.end() && refs.excludes(pk_least[mkey], p.throughput_bound)) {
            ++result.bounded;
            advance(1);
            continue;
          }
          if (sit == sharded_plans.end() && limit > 0 && pk_least[mkey] > limit) {
            // Note [Search bounds]: a rank whose least placement is over the limit keeps it under
            // kFit (nothing merged or prefetched fits) and every other rank fits, so the exact
            // peak is the least one and the fitting placement is not built.
            peaks.emplace(mkey, pk_least[mkey]);
          } else if (sit == sharded_plans.end()) {
            const auto ps = peak_specs.find(mkey);
            sit = sharded_plans
                      .emplace(mkey, ps != peak_specs.end() && ps->second.has_sharded
                                         ? ps->second.sharded.get()
                                         : place_fit(*plan, p, limit))
                      .first;
          }
          if (sit != sharded_plans.end()) run_plan = sit->second;
        }
        auto pk = peaks.find(mkey);
        if (pk == peaks.end()) {
          std::int64_t peak = 0;
          const auto ps = peak_specs.find(mkey);
          if (ps != peak_specs.end() && ps->second.has_peak) {
            peak = ps->second.peak.get();
          } else if (run_plan == plan) {
            peak = peaks_of(plan).peak_bytes(p.parted->costs, p.memory);
          } else {  // ZeRO-3's placement: walked once
            for (const auto& rm : sched::peak_memory(*run_plan, p.parted->costs, p.memory))
              peak = std::max(peak, rm.peak_bytes);
          }
          pk = peaks.emplace(mkey, peak).first;
        }
        x.peak_memory_bytes = pk->second;
      } catch (const Error& e) {
        ++result.rejected_shape;
        reject(describe(x), e.what());
        advance(1);
        continue;
      }
      if (limit > 0 && x.peak_memory_bytes > limit) {
        ++result.dropped_memory;
        x.fits_memory = false;
        char why[128];
        std::snprintf(why, sizeof why, "over the memory limit: peak %.2f GiB > %.2f GiB",
                      static_cast<double>(x.peak_memory_bytes) / (1 << 30),
                      static_cast<double>(limit) / (1 << 30));
        reject(describe(x), why);
        advance(1);
        continue;
      }
      if (refs.excludes(x.peak_memory_bytes, p.throughput_bound)) {
        ++result.bounded;
        advance(1);
        continue;
      }
      // What the timing reads (Note [Search cache]).
      const TimeKey tkey = time_key(run_plan.get(), p, free_comm);
      auto ti = timings.find(tkey);
      if (ti != timings.end()) {
        ++result.cache_hits;
      } else {
        try {
          const auto si = sim_specs.find(tkey);
          const Simulated r =
              si != sim_specs.end() ? si->second.get() : simulate_one(p, *run_plan, opt);
          ++result.simulated;
          result.simulated_actions += r.actions;
          ti = timings.emplace(tkey, r.timing).first;
        } catch (const Error& e) {
          ++result.rejected_shape;
          reject(describe(x), e.what());
          advance(1);
          continue;
        }
      }
      x.step_ns = ti->second.step_ns;
      x.throughput_samples_per_s = ti->second.throughput;
      x.bubble_fraction = ti->second.bubble;
      if (x.step_ns > 0 && p.model_flops > 0) {
        x.model_tflops_per_gpu = p.model_flops / (static_cast<double>(x.step_ns) * 1e-9) /
                                 static_cast<double>(opt.devices) / 1e12;
        if (cluster.device && cluster.device->peak_tflops > 0)
          x.mfu = x.model_tflops_per_gpu / cluster.device->peak_tflops;
      }
      all.add(x.peak_memory_bytes, x.throughput_samples_per_s);
      if (x.synchronous()) synchronous.add(x.peak_memory_bytes, x.throughput_samples_per_s);
      fitting.push_back(std::move(x));
      advance(1);
    }
  }
  search_detail::rank_candidates(std::move(fitting), opt.top_k, result);
  return result;
}

}  // namespace pipewright::sim
