// The parallel search's threads (Note [Parallel search], search.cpp) and a candidate's simulator
// options.
#include "search/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "search/rank.hpp"

namespace pipewright::sim::search_detail {

std::int32_t search_threads(std::int32_t jobs) noexcept {
  if (jobs >= 1) return jobs;
  return static_cast<std::int32_t>(std::max(1U, std::thread::hardware_concurrency()));
}

void parallel_for(std::size_t n, std::int32_t threads, const std::function<void(std::size_t)>& f) {
  const auto t = std::min<std::size_t>(static_cast<std::size_t>(std::max(threads, 1)), n);
  if (t <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed))
      f(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  for (std::size_t k = 1; k < t; ++k) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // no more threads: the ones started do the rest
      break;
    }
  }
  work();
  for (auto& th : pool) th.join();  // join's happens-before publishes every item's result
}

SimOptions candidate_sim_options(sched::JobSpec job, const SearchCandidate& x) {
  if (x.recompute == LayerRecompute::kFull) job.recompute = sched::parse_recompute("full");
  job.precision = x.precision;
  auto& d = job.data_parallel;
  d.algorithm = x.dp_variant.algorithm;
  d.bucket_cap_mb = x.dp_variant.bucket_cap_mb;
  if (d.algorithm == DpAlgorithm::kLocalSgd || d.algorithm == DpAlgorithm::kSlowMo)
    d.localsgd_frequency = x.dp_variant.localsgd_frequency;
  if (d.algorithm == DpAlgorithm::kDiLoCo) {
    d.sync_every = x.dp_variant.sync_every;
    d.fragments = x.dp_variant.fragments;
  }
  if (d.algorithm == DpAlgorithm::kSlowMo) d.slowmo_frequency = x.dp_variant.slowmo_frequency;
  job.zero_stage = d.algorithm == DpAlgorithm::kDdp ? x.zero_stage : 0;
  SimOptions so = sim_options(job);
  so.steps = steps_for(x.dp_variant);
  so.micro_batch_size = x.micro_batch_size;
  so.record_actions = false;
  return so;
}

sched::JobSpec job_of(const Shape& c, const SearchOptions& opt) {
  sched::JobSpec job;
  job.schedule = c.kind;
  job.pp = c.pp;
  job.dp = c.dp;
  job.stages_per_rank = c.v;
  job.microbatches = c.m;
  job.batch_size = c.mbs * c.m;
  job.optimizer = opt.optimizer;
  job.momentum = opt.momentum;
  return job;
}

TimeKey time_key(const void* run_plan, const Pending& p, bool free_comm) {
  const SearchCandidate& x = p.cand;
  const bool ddp = x.dp_variant.algorithm == DpAlgorithm::kDdp;
  return TimeKey{
      MemKey{run_plan, p.parted.get(), x.dp,
             free_comm && x.zero_stage < 3 ? 0 : (ddp ? x.zero_stage : 0),
             x.recompute == LayerRecompute::kFull, free_comm ? 0 : static_cast<int>(x.precision)},
      p.variant};
}

std::shared_ptr<const sched::LoweredPlan> place_fit(const sched::LoweredPlan& plan,
                                                    const Pending& p, std::int64_t limit) {
  const sched::ShardFit fit{&p.parted->costs, p.memory, limit};
  return std::make_shared<const sched::LoweredPlan>(
      sched::place_shards(plan, sched::ShardPlacement::kFit, &fit));
}

Simulated simulate_one(const Pending& p, const sched::LoweredPlan& run_plan,
                       const SearchOptions& opt) {
  const SimResult r = simulate(run_plan, p.parted->costs, *p.cluster,
                               candidate_sim_options(job_of(p.shape, opt), p.cand));
  return Simulated{Timing{r.makespan_ns / std::max(r.steps, 1), r.throughput_samples_per_s(),
                          r.bubble_fraction()},
                   r.simulated_actions};
}

void prefetch(
    Caches& c, const std::vector<Pending>& pending, std::size_t begin, std::size_t end,
    const Evaluation& ev,
    const std::function<std::shared_ptr<const sched::LoweredPlan>(const Pending&)>& plan_of) {
  // References only grow (add), so what they exclude at the chunk's start the loop excludes
  // too: only the rest is computed (some of it in vain, when a candidate before it in the
  // chunk excludes it; the loop counts it as the serial search does).
  struct Item {
    const Pending* p;
    std::shared_ptr<const sched::LoweredPlan> plan;
    MemKey mkey;
    bool zero3;
  };
  std::vector<Item> items;
  for (std::size_t i = begin; i < end; ++i) {
    const Pending& p = pending[i];
    const auto& refs = p.cand.synchronous() ? *ev.synchronous : *ev.all;
    if (refs.excludes(p.memory_bound, p.throughput_bound)) continue;
    auto plan = plan_of(p);
    if (!plan) continue;
    const MemKey mkey{plan.get(),
                      p.parted.get(),
                      p.cand.dp,
                      p.cand.zero_stage,
                      p.cand.recompute == LayerRecompute::kFull,
                      static_cast<int>(p.cand.precision)};
    items.push_back(Item{&p, std::move(plan), mkey, p.cand.zero_stage == 3 && p.cand.dp > 1});
  }
  // Each plan's PlanPeaks (a failure is left to the loop, which throws it where it would).
  std::vector<const sched::LoweredPlan*> new_plans;
  for (const auto& it : items)
    if (!c.plan_peaks[it.plan.get()] &&
        std::find(new_plans.begin(), new_plans.end(), it.plan.get()) == new_plans.end())
      new_plans.push_back(it.plan.get());
  std::vector<std::unique_ptr<const sched::PlanPeaks>> built(new_plans.size());
  parallel_for(new_plans.size(), ev.threads, [&](std::size_t k) {
    try {
      built[k] = std::make_unique<const sched::PlanPeaks>(*new_plans[k]);
    } catch (...) {  // rebuilt and thrown by the loop
    }
  });
  for (std::size_t k = 0; k < new_plans.size(); ++k)
    if (built[k]) c.plan_peaks[new_plans[k]] = std::move(built[k]);
  // The peaks, once per MemKey not known yet.
  std::vector<std::pair<const Item*, double>> peak_work;  // the item, its chunk's best bound
  std::map<MemKey, std::size_t> peak_index;
  for (const auto& it : items) {
    if (c.peaks.count(it.mkey) || c.peak_specs.count(it.mkey) || c.sharded_plans.count(it.mkey) ||
        !c.plan_peaks[it.plan.get()])
      continue;
    auto [pi, added] = peak_index.emplace(it.mkey, peak_work.size());
    if (added) peak_work.emplace_back(&it, it.p->throughput_bound);
    auto& w = peak_work[pi->second];
    w.second = std::max(w.second, it.p->throughput_bound);
  }
  // Keeps f's value or what it threw in `c`; whether it returned.
  const auto keep = [](auto& slot, const auto& f) {
    try {
      slot.value = f();
      return true;
    } catch (...) {  // thrown again by the loop, where it would have thrown it
      slot.error = std::current_exception();
      return false;
    }
  };
  std::vector<PeakSpec> peak_done(peak_work.size());
  parallel_for(peak_work.size(), ev.threads, [&](std::size_t k) {
    const Item& it = *peak_work[k].first;
    const Pending& p = *it.p;
    const sched::PlanPeaks& pp = *c.plan_peaks.find(it.plan.get())->second;
    PeakSpec& out = peak_done[k];
    if (!it.zero3) {
      out.has_peak = true;
      keep(out.peak, [&] { return pp.peak_bytes(p.parted->costs, p.memory); });
      return;
    }
    std::int64_t least = 0;
    if (const auto known = c.pk_least.find(it.mkey); known != c.pk_least.end()) {
      least = known->second;
    } else {
      out.has_least = true;
      if (!keep(out.least,
                [&] { return pp.compute_placement_peak_bytes(p.parted->costs, p.memory); }))
        return;
      least = out.least.value;
    }
    const auto& refs = p.cand.synchronous() ? *ev.synchronous : *ev.all;
    if ((ev.limit > 0 && least > ev.limit) || refs.excludes(least, peak_work[k].second)) return;
    out.has_sharded = true;
    if (!keep(out.sharded, [&] { return place_fit(*it.plan, p, ev.limit); })) return;
    out.has_peak = true;
    keep(out.peak, [&] {
      std::int64_t peak = 0;
      for (const auto& rm : sched::peak_memory(*out.sharded.value, p.parted->costs, p.memory))
        peak = std::max(peak, rm.peak_bytes);
      return peak;
    });
  });
  for (std::size_t k = 0; k < peak_work.size(); ++k)
    c.peak_specs.emplace(peak_work[k].first->mkey, std::move(peak_done[k]));
  // The simulations of the candidates whose peak is known, fits and is not excluded.
  std::vector<std::pair<const Item*, std::shared_ptr<const sched::LoweredPlan>>> sim_work;
  std::vector<TimeKey> sim_keys;
  for (const auto& it : items) {
    const Pending& p = *it.p;
    std::int64_t peak = 0;
    std::shared_ptr<const sched::LoweredPlan> run_plan = it.plan;
    const auto ps = c.peak_specs.find(it.mkey);
    if (const auto known = c.peaks.find(it.mkey); known != c.peaks.end()) {
      peak = known->second;
    } else if (ps != c.peak_specs.end() && ps->second.has_peak && !ps->second.peak.error) {
      peak = ps->second.peak.value;
    } else {
      continue;
    }
    if (it.zero3) {
      if (const auto sp = c.sharded_plans.find(it.mkey); sp != c.sharded_plans.end()) {
        run_plan = sp->second;
      } else if (ps != c.peak_specs.end() && ps->second.has_sharded && !ps->second.sharded.error) {
        run_plan = ps->second.sharded.value;
      } else {
        continue;
      }
    }
    const auto& refs = p.cand.synchronous() ? *ev.synchronous : *ev.all;
    if ((ev.limit > 0 && peak > ev.limit) || refs.excludes(peak, p.throughput_bound)) continue;
    const TimeKey tkey = time_key(run_plan.get(), p, ev.free_comm);
    if (c.timings.count(tkey) || c.sim_specs.count(tkey) ||
        std::find(sim_keys.begin(), sim_keys.end(), tkey) != sim_keys.end())
      continue;
    sim_keys.push_back(tkey);
    sim_work.emplace_back(&it, std::move(run_plan));
  }
  std::vector<Computed<Simulated>> sim_done(sim_work.size());
  parallel_for(sim_work.size(), ev.threads, [&](std::size_t k) {
    keep(sim_done[k],
         [&] { return simulate_one(*sim_work[k].first->p, *sim_work[k].second, *ev.opt); });
  });
  for (std::size_t k = 0; k < sim_work.size(); ++k)
    c.sim_specs.emplace(sim_keys[k], std::move(sim_done[k]));
}

}  // namespace pipewright::sim::search_detail
