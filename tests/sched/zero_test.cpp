// ZeRO in the plan and the memory model (issue 43): Note [Sharded state] in sched/memory.hpp
// against Megatron's bytes-per-parameter table and the ZeRO paper's formulas, closed forms over a
// grid of d; Note [Where UNSHARD and RESHARD go] in sched/lower.hpp: every placement valid, the
// all-gathers each makes, torch's look-ahead, kFit against a limit; make_plan under zero stage 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/deadlock.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

// Parameters of a stage: divisible by every d of the grid and by 4 (fp32 bytes).
constexpr std::int64_t kParamsPerStage = 4 * 3 * 5 * 7 * 16;  // 6720 parameters
constexpr std::int64_t kParamBytes = 4 * kParamsPerStage;

CostTable costs(int stages, std::int64_t activation_bytes = 0) {
  CostTable t;
  t.source = "zero_test";
  for (int s = 0; s < stages; ++s) {
    StageCost c;
    c.stage = s;
    c.forward_ms = 1;
    c.backward_ms = 2;
    c.param_bytes = kParamBytes;
    c.activation_bytes = activation_bytes;
    t.stages.push_back(c);
  }
  return t;
}

JobSpec job(int pp, int dp, int zero, int m = 4, int v = 1,
            ScheduleKind kind = ScheduleKind::k1F1B) {
  JobSpec j;
  j.schedule = kind;
  j.pp = pp;
  j.dp = dp;
  j.stages_per_rank = v;
  j.microbatches = m;
  j.optimizer = Optimizer::kAdamW;
  j.zero_stage = zero;
  return j;
}

// Static bytes per parameter of rank 0 (one stage) under `layout`.
double static_per_param(int zero, int d, StateLayout layout) {
  const JobSpec j = job(2, d, zero);
  const LoweredPlan plan = make_plan(j, nullptr);
  MemoryOptions o = memory_options(j);
  o.layout = layout;
  const auto mem = peak_memory(plan, costs(2), o);
  return static_cast<double>(mem[0].static_bytes) / kParamsPerStage;
}

// Megatron-Core's table (docs of its distributed optimizer): bf16 parameters, fp32 gradients,
// fp32 master weights and Adam moments: 18 bytes per parameter, 6 + 12/d with the distributed
// optimizer (ZeRO-1).
TEST(ZeroMemory, MegatronBytesPerParameter) {
  for (int d : {2, 3, 4, 5, 6, 7, 8, 16}) {
    EXPECT_DOUBLE_EQ(static_per_param(0, d, StateLayout::kMegatron), 18.0) << d;
    EXPECT_DOUBLE_EQ(static_per_param(1, d, StateLayout::kMegatron), 6.0 + 12.0 / d) << d;
  }
}

// The ZeRO paper (Rajbhandari et al. 2020, Figure 1: K = 12 with mixed-precision Adam):
// baseline 2 + 2 + K = 16; P_os 2 + 2 + K/d; P_os+g 2 + (2 + K)/d; P_os+g+p (2 + 2 + K)/d.
TEST(ZeroMemory, ZeroPaperFormulas) {
  for (int d : {2, 3, 4, 5, 6, 7, 8, 16}) {
    EXPECT_DOUBLE_EQ(static_per_param(0, d, StateLayout::kZero), 16.0) << d;
    EXPECT_DOUBLE_EQ(static_per_param(1, d, StateLayout::kZero), 4.0 + 12.0 / d) << d;
    EXPECT_DOUBLE_EQ(static_per_param(2, d, StateLayout::kZero), 2.0 + 14.0 / d) << d;
    EXPECT_DOUBLE_EQ(static_per_param(3, d, StateLayout::kZero), 16.0 / d) << d;
  }
}

// pipewright's executor (fp32 parameters and gradients, fp32 Adam moments).
TEST(ZeroMemory, PipewrightFp32Table) {
  for (int d : {2, 3, 4, 5, 6, 7, 8, 16}) {
    EXPECT_DOUBLE_EQ(static_per_param(0, d, StateLayout::kAutocast), 16.0) << d;
    EXPECT_DOUBLE_EQ(static_per_param(1, d, StateLayout::kAutocast), 8.0 + 8.0 / d) << d;
    EXPECT_DOUBLE_EQ(static_per_param(2, d, StateLayout::kAutocast), 4.0 + 12.0 / d) << d;
    EXPECT_DOUBLE_EQ(static_per_param(3, d, StateLayout::kAutocast), 16.0 / d) << d;
  }
  // dp 1: nothing to shard, whatever the stage says.
  EXPECT_DOUBLE_EQ(static_per_param(3, 1, StateLayout::kAutocast), 16.0);
}

// The changing part: ZeRO-2 holds one backward's full gradients; ZeRO-3 also the gathered
// parameters of every open window, following the plan's UNSHARD / RESHARD.
TEST(ZeroMemory, WindowsAndTransientGradientsInThePeak) {
  const std::int64_t act = 1000;
  for (int d : {2, 4, 8}) {
    // One stage per rank, 1F1B: the peak is at the end of the last forward in flight, inside
    // the stage's window (kStep): parameters gathered, no backward running.
    JobSpec j = job(2, d, 3, 4);
    const auto mem3 = peak_memory(make_plan(j, nullptr), costs(2, act), memory_options(j));
    EXPECT_EQ(mem3[0].static_bytes, 16 * kParamsPerStage / d);
    EXPECT_EQ(mem3[0].peak_activation_bytes, 2 * act);  // rank 0 of 1F1B p=2: 2 in flight
    // The peak is F's activations + gathered parameters, or a B's with its gradients too.
    EXPECT_EQ(mem3[0].peak_sharded_bytes, 2 * kParamBytes) << "a backward: params + grads";
    // Note [Optimizer transient]: the backward's fresh weight gradient (one tensor: the stage).
    EXPECT_EQ(mem3[0].peak_transient_bytes, kParamBytes);
    EXPECT_EQ(mem3[0].peak_bytes, mem3[0].static_bytes + mem3[0].peak_activation_bytes +
                                      mem3[0].peak_sharded_bytes + kParamBytes);
    j.zero_stage = 2;
    const auto mem2 = peak_memory(make_plan(j, nullptr), costs(2, act), memory_options(j));
    EXPECT_EQ(mem2[0].static_bytes, 4 * kParamsPerStage + 12 * kParamsPerStage / d);
    EXPECT_EQ(mem2[0].peak_sharded_bytes, kParamBytes);  // one backward's full gradients
    j.zero_stage = 1;
    const auto mem1 = peak_memory(make_plan(j, nullptr), costs(2, act), memory_options(j));
    EXPECT_EQ(mem1[0].peak_sharded_bytes, 0);
    EXPECT_EQ(mem1[0].peak_bytes, mem1[0].static_bytes + 2 * act + kParamBytes);
  }
}

// Note [Optimizer transient]: AdamW's two temporaries of the largest tensor it steps (the
// largest parameter; with ZeRO the largest bucket piece, ceil(elements / d) x 4) during OPTIM,
// and with dp > 1 one fresh weight gradient of the largest parameter during a backward.
TEST(ZeroMemory, OptimizerAndGradientTransients) {
  CostTable t = costs(2);  // no activations: the peak is a transient
  for (auto& c : t.stages) c.param_sizes_bytes = {kParamBytes / 4, 3 * kParamBytes / 4};
  const std::int64_t largest = 3 * kParamBytes / 4;
  for (int d : {2, 4, 8}) {
    for (int zero : {0, 1, 2}) {
      JobSpec j = job(2, d, zero);
      const auto mem = peak_memory(make_plan(j, nullptr), t, memory_options(j));
      // One bucket (under 1 MiB) of both parameters, cut into d pieces.
      const std::int64_t stepped = zero == 0 ? largest : (kParamsPerStage + d - 1) / d * 4;
      const std::int64_t want = std::max(2 * stepped, largest + (zero >= 2 ? kParamBytes : 0));
      EXPECT_EQ(mem[0].peak_transient_bytes + mem[0].peak_sharded_bytes, want)
          << "d " << d << " zero " << zero;
      EXPECT_EQ(mem[0].peak_bytes, mem[0].static_bytes + want) << "d " << d << " zero " << zero;
      // bf16 autocast: the backward's fresh gradient is the 16-bit one, then its fp32 cast.
      j.precision = Precision::kBf16;
      const auto low = peak_memory(make_plan(j, nullptr), t, memory_options(j));
      const std::int64_t want_low =
          std::max(2 * stepped, largest + largest / 2 + (zero >= 2 ? kParamBytes : 0));
      EXPECT_EQ(low[0].peak_transient_bytes + low[0].peak_sharded_bytes, want_low)
          << "bf16 d " << d << " zero " << zero;
    }
    // SGD without weight decay steps in place; dp 1 moves the first gradient into .grad.
    JobSpec sgd = job(2, d, 0);
    sgd.optimizer = Optimizer::kSgd;
    EXPECT_EQ(peak_memory(make_plan(sgd, nullptr), t, memory_options(sgd))[0].peak_transient_bytes,
              largest);
    sgd.weight_decay = 0.1;  // d_p.add(p, wd): one temporary
    EXPECT_EQ(peak_memory(make_plan(sgd, nullptr), t, memory_options(sgd))[0].peak_transient_bytes,
              largest);
    sgd.dp = 1;
    sgd.weight_decay = 0;
    EXPECT_EQ(peak_memory(make_plan(sgd, nullptr), t, memory_options(sgd))[0].peak_transient_bytes,
              0);
  }
}

// Under bf16 autocast (pipewright's layout) ZeRO-3's autocast cache lives with the window.
TEST(ZeroMemory, AutocastCacheFollowsTheWindow) {
  JobSpec j = job(2, 4, 3, 2);
  j.precision = Precision::kBf16;
  const auto mem = peak_memory(make_plan(j, nullptr), costs(2), memory_options(j));
  EXPECT_EQ(mem[0].autocast_cache_bytes, 0);
  // Gathered fp32 parameters (4) + their bf16 cache (2) + one backward's gradients (4).
  EXPECT_EQ(mem[0].peak_sharded_bytes, 10 * kParamsPerStage);
  j.zero_stage = 1;
  const auto mem1 = peak_memory(make_plan(j, nullptr), costs(2), memory_options(j));
  EXPECT_EQ(mem1[0].autocast_cache_bytes, 2 * kParamsPerStage);
}

int count(const std::vector<Action>& ops, ActionKind kind) {
  return static_cast<int>(
      std::count_if(ops.begin(), ops.end(), [&](const Action& a) { return a.kind == kind; }));
}

// Every placement gives valid, deadlock-free plans; the all-gathers per rank and step are
// Note [Where UNSHARD and RESHARD go]'s counts.
TEST(ZeroPlacement, EveryPolicyIsValidWithItsAllGathers) {
  struct Case {
    ScheduleKind kind;
    int pp, m, v;
  };
  for (const Case c :
       {Case{ScheduleKind::k1F1B, 2, 4, 1}, Case{ScheduleKind::kGPipe, 4, 4, 1},
        Case{ScheduleKind::kInterleaved1F1B, 2, 4, 2}, Case{ScheduleKind::kZBVZeroBubble, 2, 4, 2},
        Case{ScheduleKind::kDualPipeV, 2, 4, 2}}) {
    for (const ShardPlacement p : {ShardPlacement::kFit, ShardPlacement::kStep,
                                   ShardPlacement::kCompute, ShardPlacement::kTorch}) {
      JobSpec j = job(c.pp, 2, 3, c.m, c.v, c.kind);
      j.shard_placement = p;
      const std::string what = std::string(to_string(c.kind)) + " " + std::string(to_string(p));
      const LoweredPlan plan = make_plan(j, nullptr);  // validates and dry-runs
      EXPECT_TRUE(validate(plan).empty()) << what;
      for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
        const auto& ops = plan.per_rank[r];
        const int unshards = count(ops, ActionKind::kUnshard);
        EXPECT_EQ(unshards, count(ops, ActionKind::kReshard)) << what;
        int computes = 0;
        for (const Action& a : ops) computes += is_compute(a.kind) ? 1 : 0;
        if (p == ShardPlacement::kStep || p == ShardPlacement::kFit) {
          EXPECT_EQ(unshards, c.v) << what << " rank " << r;  // one per stage
        } else if (p == ShardPlacement::kCompute) {
          EXPECT_EQ(unshards, computes) << what << " rank " << r;  // one per compute
        } else {
          EXPECT_GE(unshards, c.v) << what;  // torch: v <= 3 stages fit its look-ahead
          EXPECT_EQ(unshards, c.v) << what;
        }
        // Windows close before OPTIM (validate) and the plan still ends with them.
        EXPECT_EQ(ops.back().kind, ActionKind::kOptimizerStep) << what;
      }
    }
  }
}

// torch's _add_unshard_reshard with max_active_stages = 1 on a rank with two stages: every switch
// of stage reshards the other (its look-ahead holds one stage).
TEST(ZeroPlacement, TorchLookAheadOfOne) {
  const AnyPlan any = parse_csv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n", "v.csv");
  ComputePlan plan = std::get<ComputePlan>(any);
  const ComputePlan placed = place_shards(plan, ShardPlacement::kTorch, nullptr, 1);
  EXPECT_EQ(to_cells(placed.per_rank[0]),
            (std::vector<std::string>{"0UNSHARD", "0F0", "0RESHARD", "3UNSHARD", "3F0", "3B0",
                                      "3RESHARD", "0UNSHARD", "0B0", "0RESHARD"}));
  // Look-ahead 3: both stages gathered from the first compute; stage 3 leaves the look-ahead
  // (resharded) when no compute of it is left.
  const ComputePlan wide = place_shards(plan, ShardPlacement::kTorch, nullptr, 3);
  EXPECT_EQ(to_cells(wide.per_rank[0]),
            (std::vector<std::string>{"0UNSHARD", "3UNSHARD", "0F0", "3F0", "3B0", "3RESHARD",
                                      "0B0", "0RESHARD"}));
  EXPECT_TRUE(validate(wide).empty());
  EXPECT_THROW((void)place_shards(plan, ShardPlacement::kTorch, nullptr, 0), ConfigError);
}

// kStep prefetches: a stage's UNSHARD goes one compute before its first one; kCompute not.
TEST(ZeroPlacement, StepAndComputeWindows) {
  const ComputePlan plan =
      std::get<ComputePlan>(parse_csv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n", "v.csv"));
  EXPECT_EQ(to_cells(place_shards(plan, ShardPlacement::kStep).per_rank[0]),
            (std::vector<std::string>{"0UNSHARD", "3UNSHARD", "0F0", "3F0", "3B0", "3RESHARD",
                                      "0B0", "0RESHARD"}));
  EXPECT_EQ(
      to_cells(place_shards(plan, ShardPlacement::kCompute).per_rank[0]),
      (std::vector<std::string>{"0UNSHARD", "0F0", "0RESHARD", "3UNSHARD", "3F0", "3RESHARD",
                                "3UNSHARD", "3B0", "3RESHARD", "0UNSHARD", "0B0", "0RESHARD"}));
}

// kFit: the step windows when they fit; under a tighter limit fewer stages gathered at once, at
// the cost of more all-gathers; never over the limit when some placement fits.
TEST(ZeroPlacement, FitMergesWindowsUnderTheLimit) {
  JobSpec j = job(2, 4, 3, 4, 2, ScheduleKind::kInterleaved1F1B);
  const CostTable t = costs(4, 100);
  ShardFit fit{&t, memory_options(j), 0};
  const LoweredPlan base = make_plan(j, nullptr);
  const auto peak_of = [&](const LoweredPlan& p) {
    std::int64_t worst = 0;
    for (const auto& m : peak_memory(p, t, fit.memory)) worst = std::max(worst, m.peak_bytes);
    return worst;
  };
  const LoweredPlan step = place_shards(base, ShardPlacement::kStep);
  const LoweredPlan each = place_shards(base, ShardPlacement::kCompute);
  const std::int64_t high = peak_of(step), low = peak_of(each);
  ASSERT_LT(low, high);
  fit.limit_bytes = high;  // fits: the step windows
  EXPECT_EQ(place_shards(base, ShardPlacement::kFit, &fit), step);
  fit.limit_bytes = (low + high) / 2;  // in between: fits, with fewer all-gathers than kCompute
  const LoweredPlan mid = place_shards(base, ShardPlacement::kFit, &fit);
  EXPECT_TRUE(validate(mid).empty());
  EXPECT_LE(peak_of(mid), fit.limit_bytes);
  EXPECT_LT(count(mid.per_rank[0], ActionKind::kUnshard),
            count(each.per_rank[0], ActionKind::kUnshard));
  EXPECT_GT(count(mid.per_rank[0], ActionKind::kUnshard),
            count(step.per_rank[0], ActionKind::kUnshard));
  fit.limit_bytes = 1;  // nothing fits on any rank: the least memory
  EXPECT_EQ(place_shards(base, ShardPlacement::kFit, &fit), each);
}

// kFit's shortcuts (a merge that did not fit is closed; nothing merged when even the
// least-memory windows are over the limit) give the plain greedy's placement, on every rank,
// over a sweep of limits from below the least-memory peak to the step windows' peak.
TEST(ZeroPlacement, FitShortcutsGiveThePlainGreedysPlacement) {
  struct Case {
    ScheduleKind kind;
    int pp, m, v;
  };
  int merged = 0;  // limits where kFit is neither the step nor the compute windows
  for (const Case c :
       {Case{ScheduleKind::kInterleaved1F1B, 2, 8, 2},
        Case{ScheduleKind::kInterleaved1F1B, 2, 6, 3}, Case{ScheduleKind::kZBVZeroBubble, 2, 6, 2},
        Case{ScheduleKind::kLoopedBFS, 2, 4, 2}}) {
    JobSpec j = job(c.pp, 4, 3, c.m, c.v, c.kind);
    const CostTable t = costs(c.pp * c.v, 700);
    ShardFit fit{&t, memory_options(j), 0};
    const LoweredPlan base = make_plan(j, nullptr);
    const auto peak_of = [&](const LoweredPlan& p) {
      std::int64_t worst = 0;
      for (const auto& m : peak_memory(p, t, fit.memory)) worst = std::max(worst, m.peak_bytes);
      return worst;
    };
    const LoweredPlan step = place_shards(base, ShardPlacement::kStep);
    const LoweredPlan each = place_shards(base, ShardPlacement::kCompute);
    const std::int64_t high = peak_of(step), low = peak_of(each);
    ASSERT_LT(low, high) << to_string(c.kind);
    for (int k = -2; k <= 24; ++k) {
      fit.limit_bytes = low + (high - low) * k / 22;
      fit.plain = false;
      const LoweredPlan fast = place_shards(base, ShardPlacement::kFit, &fit);
      fit.plain = true;
      const LoweredPlan plain = place_shards(base, ShardPlacement::kFit, &fit);
      EXPECT_EQ(fast, plain) << to_string(c.kind) << " limit " << fit.limit_bytes;
      if (!(fast == step) && !(fast == each)) ++merged;
    }
  }
  EXPECT_GT(merged, 20);
}

// Note [Incremental peak] (shard.cpp): kFit's placement with the peak kept incrementally is the
// placement the greedy finds re-walking the rank's list for each trial, and the plain greedy's,
// for every schedule family at zero stage 3 (stages of unequal size, fp32 and bf16, with and
// without full recompute), over limits from below the least-memory peak to above the step
// windows'. The incremental peak is used where every change keeps the model's signs (checked
// here on each plan, so the comparison is not the re-walk against itself). PlanPeaks (Note [Plan
// peaks] in lower.hpp) gives peak_memory's peaks of the same plans, placed and not.
TEST(ZeroPlacement, IncrementalPeakGivesTheRewalksPlacement) {
  int merged = 0, plans = 0;
  for (const ScheduleKind kind : all_schedule_kinds()) {
    const int required = required_stages_per_rank(kind);
    const bool looped = kind != ScheduleKind::kGPipe && kind != ScheduleKind::k1F1B;
    const int v = required != 0 ? required : looped ? 2 : 1;
    for (const int pp : {2, 4}) {
      for (const bool full : {false, true}) {
        for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
          JobSpec j = job(pp, 4, 3, 2 * pp, v, kind);
          j.precision = precision;
          if (full) j.recompute = parse_recompute("full");
          CostTable t = costs(pp * v, 900);
          for (std::size_t s = 0; s < t.stages.size(); ++s)
            t.stages[s].param_bytes = kParamBytes * static_cast<std::int64_t>(1 + s % 3);
          LoweredPlan base;
          try {
            base = make_plan(j, nullptr);
          } catch (const Error& e) {
            ADD_FAILURE() << to_string(kind) << " pp " << pp << ": " << e.what();
            continue;
          }
          ++plans;
          ShardFit fit{&t, memory_options(j), 0};
          const MemoryModel model(base.shape, t, fit.memory);
          for (const auto& list : base.per_rank) {
            for (const Action& a : list) {
              const MemoryChange c = model.change(a.kind, a.stage);
              ASSERT_GE(c.at_start, 0) << to_string(kind) << " " << to_string(a);
              ASSERT_LE(c.at_end, 0) << to_string(kind) << " " << to_string(a);
            }
          }
          const auto peak_of = [&](const LoweredPlan& p) {
            std::int64_t worst = 0;
            for (const auto& m : peak_memory(p, t, fit.memory))
              worst = std::max(worst, m.peak_bytes);
            return worst;
          };
          const LoweredPlan step = place_shards(base, ShardPlacement::kStep);
          const LoweredPlan each = place_shards(base, ShardPlacement::kCompute);
          // Note [Plan peaks]: the same peaks as peak_memory's walk, at every zero stage.
          const PlanPeaks peaks(base);
          EXPECT_EQ(peaks.compute_placement_peak_bytes(t, fit.memory), peak_of(each));
          for (const int zero : {0, 1, 2, 3}) {
            MemoryOptions o = fit.memory;
            o.zero_stage = zero;
            const auto walked = [&](const LoweredPlan& p) {
              std::int64_t worst = 0;
              for (const auto& m : peak_memory(p, t, o)) worst = std::max(worst, m.peak_bytes);
              return worst;
            };
            EXPECT_EQ(peaks.peak_bytes(t, o), walked(base)) << to_string(kind) << " zero " << zero;
            EXPECT_EQ(PlanPeaks(step).peak_bytes(t, o), walked(step)) << to_string(kind);
          }
          // (One stage per rank may peak where its stage is gathered under both: low == high.)
          const std::int64_t high = peak_of(step), low = peak_of(each);
          ASSERT_LE(low, high) << to_string(kind);
          const std::int64_t spread = std::max<std::int64_t>(high - low, kParamBytes);
          for (int k = -1; k <= 17; ++k) {
            fit.limit_bytes = low + spread * k / 16;
            const std::string what = std::string(to_string(kind)) + " pp " + std::to_string(pp) +
                                     (full ? " full" : "") + " " +
                                     std::string(to_string(precision)) + " limit " +
                                     std::to_string(fit.limit_bytes);
            fit.rewalk = false;
            fit.plain = false;
            const LoweredPlan fast = place_shards(base, ShardPlacement::kFit, &fit);
            fit.rewalk = true;
            const LoweredPlan rewalked = place_shards(base, ShardPlacement::kFit, &fit);
            fit.plain = true;
            const LoweredPlan plain = place_shards(base, ShardPlacement::kFit, &fit);
            EXPECT_EQ(fast, rewalked) << what;
            EXPECT_EQ(fast, plain) << what;
            if (k >= 0 && k <= 16) {
              EXPECT_TRUE(validate(fast).empty()) << what;
            }
            if (!(fast == step) && !(fast == each)) ++merged;
            // Each rank fits, or holds kCompute's windows (the least; nothing fits there).
            const auto ranks = peak_memory(fast, t, fit.memory);
            for (std::size_t r = 0; r < ranks.size(); ++r) {
              if (!(fast.per_rank[r] == each.per_rank[r])) {
                EXPECT_LE(ranks[r].peak_bytes, fit.limit_bytes) << what << " rank " << r;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(plans, 4 * static_cast<int>(all_schedule_kinds().size()) * 2);
  EXPECT_GT(merged, 100);
}

// make_plan: zero stage 3 places windows; a plan file's own run as written; --shard-placement
// needs zero stage 3.
TEST(ZeroPlacement, MakePlan) {
  JobSpec j = job(2, 2, 3, 2);
  const LoweredPlan plan = make_plan(j, nullptr);
  EXPECT_EQ(plan.per_rank[0].front(), Action::stage_only(0, ActionKind::kUnshard));
  EXPECT_EQ(count(plan.per_rank[1], ActionKind::kUnshard), 1);
  j.zero_stage = 2;
  EXPECT_EQ(count(make_plan(j, nullptr).per_rank[0], ActionKind::kUnshard), 0);
  j.dp = 1;
  j.zero_stage = 3;  // effective 0
  EXPECT_EQ(count(make_plan(j, nullptr).per_rank[0], ActionKind::kUnshard), 0);
  JobSpec bad = job(2, 2, 1, 2);
  bad.shard_placement = ShardPlacement::kTorch;
  EXPECT_THROW(validate_job(bad), ConfigError);
  EXPECT_EQ(parse_shard_placement("compute"), ShardPlacement::kCompute);
  EXPECT_THROW((void)parse_shard_placement("lazy"), ConfigError);
  // The job file carries the placement of a ZeRO-3 job only.
  JobSpec z3 = job(2, 2, 3, 2);
  z3.shard_placement = ShardPlacement::kCompute;
  EXPECT_EQ(parse_job(to_json(z3), "z3.json").shard_placement, ShardPlacement::kCompute);
  EXPECT_EQ(to_json(job(2, 2, 1, 2)).find("shard_placement"), std::string::npos);
}

}  // namespace
}  // namespace pipewright::sched
