#include "pipewright/sim/search.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/graph/generators.hpp"
#include "pipewright/graph/partition.hpp"
#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/memory.hpp"

namespace pipewright::sim {
namespace {

graph::Model small_gpt(std::int64_t micro_batch_size = 1) {
  graph::GptSpec spec;
  spec.layers = 6;
  spec.hidden = 256;
  spec.heads = 4;
  spec.seq = 128;
  spec.vocab = 1000;
  spec.micro_batch_size = micro_batch_size;
  return graph::make_gpt(spec);
}

// A cluster of `nodes` x `per_node` ranks with NVLink-like links inside a node and slower ones
// between nodes.
Cluster nodes_of(std::int32_t nodes, std::int32_t per_node) {
  Cluster c;
  c.nodes = nodes;
  c.ranks_per_node = per_node;
  c.intra_node = Link{0.005, 100};
  c.inter_node = Link{0.02, 1};
  return c;
}

// The options most tests start from: `devices`, a global batch, every row kept; zero stages and
// recompute at their plain values unless a test sweeps them.
SearchOptions options(std::int32_t devices, std::optional<std::int64_t> global_batch = {}) {
  SearchOptions opt;
  opt.devices = devices;
  opt.global_batch = global_batch;
  opt.top_k = 100000;
  opt.zero_stages = {0};
  opt.recomputes = {LayerRecompute::kNone};
  return opt;
}

// One schedule, one micro-batch size, no Auto: a small fixed set of shapes.
SearchOptions one_schedule(std::int32_t devices, std::int64_t global_batch) {
  SearchOptions opt = options(devices, global_batch);
  opt.schedules = {sched::ScheduleKind::k1F1B};
  opt.micro_batch_sizes = {1};
  opt.try_auto = false;
  return opt;
}

TEST(Search, RanksFittingConfigurationsByThroughput) {
  const auto model = small_gpt();
  Cluster c;
  c.nodes = 1;
  c.ranks_per_node = 8;
  c.intra_node = Link{0.005, 50};
  const SearchOptions opt = options(8);
  std::int64_t calls = 0, last_total = 0;
  const auto r = search(model, c, opt, [&](std::int64_t done, std::int64_t total) {
    ++calls;
    EXPECT_LE(done, total);
    last_total = total;
  });
  EXPECT_EQ(calls, r.enumerated);
  EXPECT_EQ(last_total, r.enumerated);
  EXPECT_EQ(r.simulated + r.cache_hits + r.bounded + r.rejected_shape, r.enumerated);
  EXPECT_GT(r.simulated, 100);
  ASSERT_FALSE(r.ranked.empty());
  for (std::size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_GE(r.ranked[i - 1].throughput_samples_per_s, r.ranked[i].throughput_samples_per_s);
  for (const auto& cand : r.ranked) EXPECT_EQ(cand.pp * cand.dp, 8);
  // Deterministic.
  const auto again = search(model, c, opt);
  ASSERT_EQ(again.ranked.size(), r.ranked.size());
  for (std::size_t i = 0; i < r.ranked.size(); ++i)
    EXPECT_EQ(describe(again.ranked[i]), describe(r.ranked[i]));
}

TEST(Search, MemoryLimitDropsConfigurations) {
  const auto model = small_gpt();
  SearchOptions opt = options(4);
  const auto unlimited = search(model, Cluster{}, opt);
  EXPECT_EQ(unlimited.dropped_memory, 0);
  std::int64_t smallest = INT64_MAX, largest = 0;
  for (const auto& c : unlimited.ranked) {
    smallest = std::min(smallest, c.peak_memory_bytes);
    largest = std::max(largest, c.peak_memory_bytes);
  }
  opt.memory_limit_bytes = (smallest + largest) / 2;
  const auto limited = search(model, Cluster{}, opt);
  EXPECT_GT(limited.dropped_memory, 0);
  for (const auto& c : limited.ranked) EXPECT_LE(c.peak_memory_bytes, *opt.memory_limit_bytes);
}

// Issue 46 item 1 (issue 43 item 5): zero stage and recompute are dimensions of the search; a
// DDP configuration over the limit at zero stage 0 that fits at 1 is found and ranked, marked
// with its zero stage; without a limit every zero stage and recompute mode is a row.
TEST(Search, ZeroStageAndRecomputeAreDimensions) {
  const auto model = small_gpt();
  SearchOptions opt = one_schedule(2, 4);
  opt.optimizer = Optimizer::kAdamW;
  opt.zero_stages = {};  // 0, 1, 2, 3
  opt.recomputes = {};   // none, selective, full
  const auto all = search(model, Cluster{}, opt);
  std::set<std::pair<std::int32_t, LayerRecompute>> seen;
  std::int64_t ddp_peak = 0;
  for (const auto& c : all.ranked) {
    if (c.dp == 2) seen.insert({c.zero_stage, c.recompute});
    if (c.dp == 2 && c.zero_stage == 0 && c.recompute == LayerRecompute::kNone)
      ddp_peak = c.peak_memory_bytes;
    if (c.dp == 1) {
      EXPECT_EQ(c.zero_stage, 0) << describe(c);  // nothing to shard over
    }
  }
  EXPECT_EQ(seen.size(), 12u);
  ASSERT_GT(ddp_peak, 0);
  opt.recomputes = {LayerRecompute::kNone};
  opt.memory_limit_bytes = ddp_peak - 1;
  const auto limited = search(model, Cluster{}, opt);
  bool zero1 = false;
  for (const auto& c : limited.ranked) {
    EXPECT_FALSE(c.dp == 2 && c.zero_stage == 0) << describe(c);
    EXPECT_LE(c.peak_memory_bytes, *opt.memory_limit_bytes);
    if (c.dp == 2 && c.zero_stage == 1) {
      zero1 = true;
      EXPECT_NE(describe(c).find("zero=1"), std::string::npos) << describe(c);
    }
  }
  EXPECT_TRUE(zero1);
}

// Selective recompute keeps less than none and, with two microbatches in flight on the first
// rank, more than full (which keeps stage inputs only), and costs less time than full:
// Korthikanti's trade.
TEST(Search, SelectiveRecomputeSitsBetweenNoneAndFull) {
  SearchOptions opt = one_schedule(2, 8);
  opt.recomputes = {};
  const auto r = search(small_gpt(), Cluster{}, opt);
  std::map<LayerRecompute, const SearchCandidate*> by;
  for (const auto& c : r.ranked)
    if (c.pp == 2) by[c.recompute] = &c;
  ASSERT_EQ(by.size(), 3u);
  const auto& none = *by[LayerRecompute::kNone];
  const auto& sel = *by[LayerRecompute::kSelective];
  const auto& full = *by[LayerRecompute::kFull];
  EXPECT_LT(sel.peak_memory_bytes, none.peak_memory_bytes);
  EXPECT_GT(sel.peak_memory_bytes, full.peak_memory_bytes);
  EXPECT_GT(sel.step_ns, none.step_ns);
  EXPECT_LT(sel.step_ns, full.step_ns);
  EXPECT_NE(describe(sel).find("recompute=selective"), std::string::npos);
}

// Note [Search pruning]: what the closed-form bound drops would be over the limit by the exact
// peak too (the bound is below every plan's peak), and it drops something.
TEST(Search, PruningDropsOnlyWhatCannotFit) {
  SearchOptions opt = options(4, 16);
  opt.try_auto = false;  // Auto's plan is built for the limit: another plan under each
  opt.optimizer = Optimizer::kAdam;
  opt.zero_stages = {};
  opt.recomputes = {};
  opt.precisions = {sched::Precision::kFp32, sched::Precision::kBf16};
  const auto unlimited = search(small_gpt(), Cluster{}, opt);
  std::map<std::string, std::int64_t> peak;
  for (const auto& c : unlimited.ranked) peak[describe(c)] = c.peak_memory_bytes;
  std::vector<std::int64_t> peaks;
  for (const auto& [d, p] : peak) peaks.push_back(p);
  std::sort(peaks.begin(), peaks.end());
  opt.memory_limit_bytes = peaks[peaks.size() / 3];
  const auto limited = search(small_gpt(), Cluster{}, opt);
  EXPECT_GT(limited.pruned_memory, 0);
  EXPECT_LT(limited.simulated, unlimited.simulated);
  int checked = 0;
  for (const auto& x : limited.rejections) {
    if (x.reason.find("closed-form bound") == std::string::npos) continue;
    const auto it = peak.find(x.configuration);
    if (it == peak.end()) continue;  // collapsed in the unlimited ranking
    ++checked;
    EXPECT_GT(it->second, *opt.memory_limit_bytes) << x.configuration;
  }
  EXPECT_GT(checked, 0);
  // The same fitting rows either way, but for ZeRO-3, whose all-gathers are placed to fit the
  // limit (more fit with it).
  std::set<std::string> fit;
  for (const auto& c : unlimited.ranked)
    if (c.peak_memory_bytes <= *opt.memory_limit_bytes && c.zero_stage < 3) fit.insert(describe(c));
  std::set<std::string> got;
  for (const auto& c : limited.ranked)
    if (c.zero_stage < 3) got.insert(describe(c));
  for (const auto& d : got) EXPECT_TRUE(fit.count(d)) << "only with the limit: " << d;
  for (const auto& d : fit) EXPECT_TRUE(got.count(d)) << "only without the limit: " << d;
}

// Note [Search pruning] under bf16 (issue 47 item 4): the bound counts a stage's activations as
// the memory model keeps them, the fp32 part (Note [Autocast bytes]) at 4 bytes, so it is higher
// than plain halving's and still at most the exact peak of every plan; at pp 1 with one
// microbatch (plain SGD, dp 1) it is that peak.
TEST(Search, MemoryBoundKeepsTheAutocastFp32Activations) {
  const graph::Model model = small_gpt(4);
  for (const sched::Precision precision : {sched::Precision::kFp32, sched::Precision::kBf16}) {
    for (const std::int32_t pp : {1, 2, 4}) {
      sched::JobSpec job;
      job.pp = pp;
      job.microbatches = pp == 1 ? 1 : 8;
      job.precision = precision;
      const graph::Partition part = sched::resolve_partition(job, model);
      const sched::CostTable costs = sched::costs_from_partition(model, part);
      const sched::MemoryOptions mo = sched::memory_options(job);
      const std::int64_t bound = peak_memory_lower_bound(costs, pp, mo);
      sched::CostTable halved = costs;  // what the bound counted before: no fp32 part
      for (auto& st : halved.stages) st.activation_fp32_bytes = 0;
      if (precision == sched::Precision::kBf16) {
        EXPECT_GT(bound, peak_memory_lower_bound(halved, pp, mo)) << "pp " << pp;
      } else {
        EXPECT_EQ(bound, peak_memory_lower_bound(halved, pp, mo)) << "pp " << pp;
      }
      for (const auto kind : {sched::ScheduleKind::k1F1B, sched::ScheduleKind::kGPipe}) {
        job.schedule = kind;
        std::int64_t peak = 0;
        for (const auto& r : sched::peak_memory(sched::make_plan(job, &part), costs, mo))
          peak = std::max(peak, r.peak_bytes);
        EXPECT_LE(bound, peak) << sched::to_string(kind) << " pp " << pp;
        if (pp == 1) {
          EXPECT_EQ(bound, peak) << sched::to_string(kind);
        }
      }
    }
  }
}

// Note [Parallel search]: every row, the Pareto front, every rejection and every count are the
// serial search's at any thread count; the progress calls too, in order. A search with a limit
// (pruned, over it by the exact peak, ZeRO-3 placed to fit), a small top (bounded candidates), a
// cluster and a rejected tp.
TEST(Search, ThreadsDoNotChangeTheResult) {
  SearchOptions opt = options(8, 32);
  opt.top_k = 3;
  opt.optimizer = Optimizer::kAdam;
  opt.zero_stages = {};
  opt.recomputes = {};
  opt.tps = {1, 2, 3};
  opt.precisions = {sched::Precision::kFp32, sched::Precision::kBf16};
  const auto model = small_gpt();
  const Cluster cluster = nodes_of(2, 4);
  opt.jobs = 1;
  const auto unlimited = search(model, cluster, opt);
  ASSERT_FALSE(unlimited.ranked.empty());
  opt.memory_limit_bytes = unlimited.ranked.front().peak_memory_bytes * 3 / 4;
  const auto text = [](const SearchCandidate& c) {
    char buf[160];
    std::snprintf(buf, sizeof buf, " %lld %.17g %.17g %lld %d %d %.17g %.17g",
                  static_cast<long long>(c.step_ns), c.throughput_samples_per_s, c.bubble_fraction,
                  static_cast<long long>(c.peak_memory_bytes), c.fits_memory ? 1 : 0,
                  c.pareto ? 1 : 0, c.model_tflops_per_gpu, c.mfu);
    return describe(c) + buf;
  };
  const auto dump = [&](const SearchResult& r) {
    std::string out;
    for (const auto& c : r.ranked) out += "row " + text(c) + "\n";
    for (const auto& c : r.pareto) out += "pareto " + text(c) + "\n";
    if (r.best_synchronous) out += "best " + text(*r.best_synchronous) + "\n";
    for (const auto& x : r.rejections)
      out += "rejected " + x.configuration + ": " + x.reason + "\n";
    for (const auto n : {r.enumerated, r.simulated, r.rejected_shape, r.collapsed, r.dropped_memory,
                         r.pruned_memory, r.cache_hits, r.bounded, r.simulated_actions})
      out += std::to_string(n) + " ";
    return out;
  };
  std::vector<std::int64_t> serial_progress;
  const auto serial = search(model, cluster, opt, [&](std::int64_t done, std::int64_t total) {
    serial_progress.push_back(done * 1000000 + total);
  });
  EXPECT_GT(serial.pruned_memory, 0);
  EXPECT_GT(serial.dropped_memory, serial.pruned_memory);
  EXPECT_GT(serial.bounded, 0);
  EXPECT_GT(serial.rejected_shape, 0);
  // ZeRO-3 candidates reach their exact peak (kFit's placement): ranked or over the limit.
  bool zero3 = false;
  for (const auto& c : serial.pareto) zero3 = zero3 || c.zero_stage == 3;
  for (const auto& x : serial.rejections)
    zero3 = zero3 || (x.configuration.find("zero=3") != std::string::npos &&
                      x.reason.find("limit: peak ") != std::string::npos);
  EXPECT_TRUE(zero3);
  for (const std::int32_t jobs : {2, 4, 7}) {
    opt.jobs = jobs;
    std::vector<std::int64_t> progress;
    const auto parallel = search(model, cluster, opt, [&](std::int64_t done, std::int64_t total) {
      progress.push_back(done * 1000000 + total);
    });
    EXPECT_EQ(dump(parallel), dump(serial)) << "jobs " << jobs;
    EXPECT_EQ(progress, serial_progress) << "jobs " << jobs;
  }
}

// Note [Search cache]: without a cluster communication is free, so precision and zero stages
// 0-2 share one simulation; with one they do not.
TEST(Search, CandidatesTheTimingDoesNotSeeShareASimulation) {
  SearchOptions opt = one_schedule(2, 8);
  opt.zero_stages = {0, 1, 2};
  opt.precisions = {sched::Precision::kFp32, sched::Precision::kBf16};
  const auto free = search(small_gpt(), Cluster{}, opt);
  EXPECT_GT(free.cache_hits, 0);
  EXPECT_EQ(free.simulated + free.cache_hits + free.bounded + free.rejected_shape, free.enumerated);
  std::map<std::int32_t, std::set<std::int64_t>> steps;  // pp -> step times
  for (const auto& c : free.ranked) steps[c.pp].insert(c.step_ns);
  for (const auto& [pp, s] : steps) EXPECT_EQ(s.size(), 1u) << "pp " << pp;
  const auto timed = search(small_gpt(), nodes_of(1, 2), opt);
  EXPECT_EQ(timed.cache_hits, 0);
}

// Issue 46 item 4: the Pareto front of throughput against peak memory.
TEST(Search, ParetoFrontOfThroughputAndMemory) {
  SearchOptions opt = options(4, 16);
  opt.zero_stages = {};
  opt.recomputes = {};
  opt.top_k = 5;
  const auto r = search(small_gpt(), Cluster{}, opt);
  ASSERT_GE(r.pareto.size(), 2u);
  for (std::size_t i = 1; i < r.pareto.size(); ++i) {
    EXPECT_GE(r.pareto[i - 1].throughput_samples_per_s, r.pareto[i].throughput_samples_per_s);
    EXPECT_GE(r.pareto[i - 1].peak_memory_bytes, r.pareto[i].peak_memory_bytes);
  }
  EXPECT_EQ(describe(r.pareto.front()), describe(r.ranked.front()));  // the fastest is on it
  EXPECT_TRUE(r.ranked.front().pareto);
  // No fitting row beats a front row in both; every other row is beaten by a front row.
  opt.top_k = 100000;
  const auto all = search(small_gpt(), Cluster{}, opt);
  EXPECT_EQ(all.bounded, 0);
  // Note [Search bounds]: with --top 5 candidates that cannot reach the top rows or the front
  // are not simulated; the top rows and the front are the same.
  EXPECT_GT(r.bounded, 0);
  EXPECT_LT(r.simulated, all.simulated);
  ASSERT_EQ(r.pareto.size(), all.pareto.size());
  for (std::size_t i = 0; i < r.pareto.size(); ++i)
    EXPECT_EQ(describe(r.pareto[i]), describe(all.pareto[i]));
  for (std::size_t i = 0; i < r.ranked.size(); ++i)
    EXPECT_EQ(describe(r.ranked[i]), describe(all.ranked[i]));
  for (const auto& c : all.ranked) {
    bool dominated = false;
    for (const auto& f : all.pareto) {
      const bool beats = f.throughput_samples_per_s >= c.throughput_samples_per_s &&
                         f.peak_memory_bytes <= c.peak_memory_bytes &&
                         (f.throughput_samples_per_s > c.throughput_samples_per_s ||
                          f.peak_memory_bytes < c.peak_memory_bytes);
      dominated = dominated || beats;
    }
    EXPECT_EQ(c.pareto, !dominated) << describe(c);
  }
}

TEST(Search, GlobalBatchFixesMicrobatches) {
  const auto r = search(small_gpt(), Cluster{}, options(4, 32));
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& c : r.ranked) EXPECT_EQ(c.microbatches * c.dp * c.micro_batch_size, 32);
}

// Issue 46: a shape whose plan fails (Chimera with one microbatch per replica: REDUCE_GRAD before
// the last backward) is a counted rejection with its reason; the search goes on.
TEST(Search, AFailingCandidateIsARejection) {
  SearchOptions opt = one_schedule(4, 2);
  opt.schedules = {sched::ScheduleKind::kChimera, sched::ScheduleKind::kGPipe};
  const auto r = search(small_gpt(), Cluster{}, opt);
  EXPECT_GT(r.rejected_shape, 0);
  ASSERT_FALSE(r.rejections.empty());
  bool chimera = false;
  for (const auto& x : r.rejections) {
    EXPECT_FALSE(x.reason.empty()) << x.configuration;
    chimera = chimera || x.configuration.rfind("Chimera", 0) == 0;
  }
  EXPECT_TRUE(chimera);
  ASSERT_FALSE(r.ranked.empty());  // pp = 1 (and GPipe at pp = 2 with m = 1) still rank
  EXPECT_EQ(r.simulated + r.cache_hits + r.bounded + r.rejected_shape, r.enumerated);
}

// Issue 46: the micro-batch size is swept, so a schedule that needs m >= pp finds shapes even
// when the model file's micro-batch size leaves too few microbatches; costs scale with it.
TEST(Search, SweepsTheMicroBatchSize) {
  const auto model = small_gpt(8);
  SearchOptions opt = one_schedule(4, 16);
  opt.micro_batch_sizes = {8};
  const auto fixed = search(model, Cluster{}, opt);
  for (const auto& c : fixed.ranked) EXPECT_LT(c.pp, 4) << describe(c);  // m = 2 at pp 4
  opt.micro_batch_sizes = {};
  const auto swept = search(model, Cluster{}, opt);
  std::set<std::int64_t> sizes;
  bool pp4 = false;
  std::int64_t step_mbs1 = 0, step_mbs2 = 0;
  for (const auto& c : swept.ranked) {
    sizes.insert(c.micro_batch_size);
    pp4 = pp4 || c.pp == 4;
    if (c.pp == 1 && c.dp == 4 && c.micro_batch_size == 1) step_mbs1 = c.step_ns;
    if (c.pp == 1 && c.dp == 4 && c.micro_batch_size == 2) step_mbs2 = c.step_ns;
  }
  EXPECT_TRUE(pp4);
  EXPECT_GE(sizes.size(), 3u);
  // pp = 1, dp = 4: 4 samples per replica either way; the compute is the same work.
  EXPECT_NEAR(static_cast<double>(step_mbs1), static_cast<double>(step_mbs2),
              1e-6 * static_cast<double>(step_mbs1) + 16);
}

// Issue 46: at pp = 1 every schedule is the same run: one row, 1F1B; rows equal but for the
// schedule collapse.
TEST(Search, EquivalentConfigurationsAreOneRow) {
  const auto r = search(small_gpt(), Cluster{}, options(4, 32));
  std::set<std::string> seen;
  for (const auto& c : r.ranked) {
    if (c.pp == 1) {
      EXPECT_EQ(c.schedule, sched::ScheduleKind::k1F1B);
      EXPECT_FALSE(c.auto_schedule);
      EXPECT_EQ(c.v, 1);
    }
    char key[128];
    std::snprintf(key, sizeof key, "%d %d %d %d %lld %lld %lld", c.pp, c.dp, c.tp, c.microbatches,
                  static_cast<long long>(c.micro_batch_size), static_cast<long long>(c.step_ns),
                  static_cast<long long>(c.peak_memory_bytes));
    EXPECT_TRUE(seen.insert(key).second) << describe(c);
  }
}

// Issue 46: synchronous training unless local-step algorithms are named; then they are marked,
// and the best synchronous configuration is kept apart.
TEST(Search, SynchronousUnlessLocalStepAlgorithmsAreNamed) {
  const Cluster c = nodes_of(2, 2);
  SearchOptions opt = options(4, 32);
  const auto sync = search(small_gpt(), c, opt);
  ASSERT_FALSE(sync.ranked.empty());
  for (const auto& x : sync.ranked) EXPECT_TRUE(x.synchronous()) << describe(x);
  ASSERT_TRUE(sync.best_synchronous);
  EXPECT_EQ(describe(*sync.best_synchronous), describe(sync.ranked.front()));
  opt.dp_variants = dp_variants_for({DpAlgorithm::kDdp, DpAlgorithm::kDiLoCo});
  const auto both = search(small_gpt(), c, opt);
  int local = 0;
  for (const auto& x : both.ranked) local += x.synchronous() ? 0 : 1;
  EXPECT_GT(local, 0);
  ASSERT_TRUE(both.best_synchronous);
  EXPECT_TRUE(both.best_synchronous->synchronous());
  EXPECT_EQ(describe(*both.best_synchronous), describe(sync.ranked.front()));
}

// Tensor parallelism in the search: every rank is (pp, dp, tp) with pp x dp x tp devices; a tp
// that does not divide ranks_per_node is a rejection naming the node.
TEST(Search, SearchesTensorParallelSizes) {
  Cluster c;
  c.nodes = 2;
  c.ranks_per_node = 4;
  c.intra_node = Link{0.002, 300};
  c.inter_node = Link{0.01, 25};
  SearchOptions opt = options(8, 16);
  opt.tps = {1, 2, 4, 8};
  const auto r = search(small_gpt(), c, opt);
  std::set<std::int32_t> tps;
  for (const auto& x : r.ranked) {
    EXPECT_EQ(x.pp * x.dp * x.tp, 8) << describe(x);
    tps.insert(x.tp);
  }
  EXPECT_EQ(tps, (std::set<std::int32_t>{1, 2, 4}));
  bool node = false;
  for (const auto& x : r.rejections)
    node = node || x.reason.find("inside a node") != std::string::npos;
  EXPECT_TRUE(node);
}

// Each configuration at each precision: bf16 candidates hold other memory (16-bit activations,
// autocast's parameter copy) and are described with their precision.
TEST(Search, SearchesOverPrecision) {
  SearchOptions opt = options(4, 32);
  const auto fp32 = search(small_gpt(), Cluster{}, opt);
  opt.precisions = {sched::Precision::kFp32, sched::Precision::kBf16};
  const auto both = search(small_gpt(), Cluster{}, opt);
  EXPECT_EQ(both.enumerated, 2 * fp32.enumerated);
  std::map<std::string, std::int64_t> peak;  // description without the precision -> fp32 peak
  for (const auto& c : both.ranked)
    if (c.precision == sched::Precision::kFp32) peak[describe(c)] = c.peak_memory_bytes;
  int bf16 = 0, lower = 0;
  for (const auto& c : both.ranked) {
    if (c.precision != sched::Precision::kBf16) continue;
    ++bf16;
    const std::string d = describe(c);
    const std::string suffix = " precision=bf16";
    ASSERT_EQ(d.substr(d.size() - suffix.size()), suffix);
    const auto it = peak.find(d.substr(0, d.size() - suffix.size()));
    ASSERT_NE(it, peak.end()) << d;
    // Half the activations, plus the autocast copy of the parameters: lower unless few
    // activations are held (pp = 1 with many stages per rank).
    EXPECT_NE(c.peak_memory_bytes, it->second) << d;
    lower += c.peak_memory_bytes < it->second ? 1 : 0;
  }
  EXPECT_GT(bf16, 0);
  EXPECT_GT(lower, 0);
}

TEST(Search, BadOptions) {
  SearchOptions opt = options(0);
  EXPECT_THROW((void)search(small_gpt(), Cluster{}, opt), ConfigError);
  opt.devices = 4;
  EXPECT_THROW((void)search(small_gpt(), nodes_of(1, 2), opt), ConfigError);
  opt.devices = 2;
  opt.zero_stages = {4};
  EXPECT_THROW((void)search(small_gpt(), Cluster{}, opt), ConfigError);
  EXPECT_THROW((void)parse_layer_recompute("partial"), ConfigError);
}

}  // namespace
}  // namespace pipewright::sim
