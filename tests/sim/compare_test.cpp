#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sim/compare.hpp"
#include "pipewright/sim/report.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

SimResult simulate_1f1b(double f_ms, double b_ms) {
  auto plan = testing::one_f_one_b(2, 4);
  auto costs = testing::uniform_costs(2, f_ms, b_ms);
  return simulate(plan, costs, Cluster{}, SimOptions{});
}

// Skewed measured distributions for every stage: F median 1 ms (p10 `p10_ms`, p90 2.5 ms), B
// twice that.
void give_skewed_stats(sched::CostTable& costs, double p10_ms) {
  for (auto& c : costs.stages) {
    sched::KindStats f;
    f.median_ms = 1.0;
    f.p10_ms = p10_ms;
    f.p90_ms = 2.5;
    f.samples = 100;
    c.forward_stats = f;
    c.backward_stats = f.scaled(2.0);
  }
}

// A "measured" trace made of two steps: step 0 (warm-up, twice as slow) and step 1 equal to the
// prediction scaled by `scale`, shifted in time as a real run would be: step 1 starts `gap_us`
// after step 0's last slice (Note [Measured step period]).
sched::Trace measured_from(const SimResult& r, double scale, double gap_us = 0) {
  sched::Trace pred = sched::parse_trace(trace_json(r, "test"), "pred");
  sched::Trace out;
  out.info = pred.info;
  out.info.source = "executor";
  out.ranks = pred.ranks;
  const double makespan_us = static_cast<double>(r.makespan_ns) / 1e3;
  for (int step = 0; step < 2; ++step) {
    const double k = step == 0 ? 2 * scale : scale;
    const double offset = step == 0 ? 1000.0 : 1000.0 + 2 * scale * makespan_us + gap_us;
    for (auto s : pred.slices) {
      s.start_us = offset + s.start_us * k;
      s.duration_us *= k;
      s.step = step;
      out.slices.push_back(s);
    }
  }
  return out;
}

TEST(Compare, IdenticalTimelinesHaveZeroError) {
  SimResult r = simulate_1f1b(1.0, 2.0);
  sched::Trace m = measured_from(r, 1.0);
  CompareReport rep = compare(r, m, nullptr, CompareOptions{});
  EXPECT_EQ(rep.steps_used, 1);
  EXPECT_NEAR(rep.predicted_step_ms, rep.measured_step_ms, 1e-6);
  EXPECT_NEAR(rep.step_error(), 0.0, 1e-9);
  EXPECT_EQ(rep.matched_actions, 16);  // 2 ranks x 4 microbatches x (F + B)
  for (const auto& rc : rep.per_rank) {
    EXPECT_NEAR(rc.predicted_busy_ms, rc.measured_busy_ms, 1e-6);
    EXPECT_NEAR(rc.predicted_idle_ms, rc.measured_idle_ms, 1e-6);
  }
  for (const auto& a : rep.largest) EXPECT_NEAR(a.end_error_ms(), 0.0, 1e-6);
}

// Note [Measured step period]: what runs between two steps (the loss all-reduce, ZeRO-1's
// all-gathers) belongs to the step before; the last step takes the median of the others' gaps.
TEST(Compare, MeasuredStepRunsToTheNextStepsStart) {
  SimResult r = simulate_1f1b(1.0, 2.0);
  const double makespan_ms = static_cast<double>(r.makespan_ns) / 1e6;
  sched::Trace m = measured_from(r, 1.0, 4000.0);  // 4 ms between step 0's end and step 1
  CompareOptions opt;
  opt.skip_steps = 0;
  CompareReport rep = compare(r, m, nullptr, opt);
  ASSERT_EQ(rep.per_step_measured_ms.size(), 2U);
  EXPECT_NEAR(rep.per_step_measured_ms[0], 2 * makespan_ms + 4.0, 1e-6);
  EXPECT_NEAR(rep.per_step_measured_ms[1], makespan_ms + 4.0, 1e-6);  // its span + the median gap
  // The default skips the warm-up step; idle time holds the gap too.
  rep = compare(r, m, nullptr, CompareOptions{});
  EXPECT_NEAR(rep.measured_step_ms, makespan_ms + 4.0, 1e-6);
  for (const auto& rc : rep.per_rank) {
    EXPECT_NEAR(rc.measured_idle_ms, rc.predicted_idle_ms + 4.0, 1e-6);
  }
  TraceReplay replay = replay_from_trace(m, 2, 4, 0, {}, opt);
  ASSERT_EQ(replay.measured_step_ms.size(), 2U);
  EXPECT_NEAR(replay.measured_step_ms[0], 2 * makespan_ms + 4.0, 1e-6);
}

TEST(Compare, SlowerMeasurementGivesNegativeErrorAndRanksLargestLast) {
  SimResult r = simulate_1f1b(1.0, 2.0);
  sched::Trace m = measured_from(r, 1.25);  // the real run is 25% slower
  CompareOptions opt;
  opt.top_k = 3;
  CompareReport rep = compare(r, m, nullptr, opt);
  EXPECT_NEAR(rep.measured_step_ms, 1.25 * rep.predicted_step_ms, 1e-6);
  EXPECT_NEAR(rep.step_error(), 1.0 / 1.25 - 1.0, 1e-9);
  ASSERT_EQ(rep.largest.size(), 3U);
  // The action that ends last has the largest absolute end error.
  EXPECT_NEAR(std::fabs(rep.largest[0].end_error_ms()), 0.25 * rep.predicted_step_ms, 1e-6);
  EXPECT_GE(std::fabs(rep.largest[0].end_error_ms()), std::fabs(rep.largest[2].end_error_ms()));
  const std::string text = to_text(rep);
  EXPECT_NE(text.find("error -20.00%"), std::string::npos) << text;
  const std::string json = to_json(rep);
  EXPECT_NE(json.find("\"step_error\""), std::string::npos);
}

TEST(Compare, MismatchedRankCountIsAnInputError) {
  SimResult r = simulate_1f1b(1.0, 2.0);
  sched::Trace m = measured_from(r, 1.0);
  m.ranks = 3;
  try {
    (void)compare(r, m, nullptr, CompareOptions{});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("2 ranks but the measured trace has 3"), std::string::npos)
        << e.what();
  }
}

// Issue 47 item 1: a measured run with dp 2 has 2 x pp world ranks (replica-major); every replica
// is compared with the predicted pipeline, and the data-parallel rows pair the predicted bytes and
// times per step with the profile's measured ones (Note [Data-parallel comparison]).
TEST(Compare, DataParallelRunsCompareEveryReplica) {
  auto plan = testing::one_f_one_b(2, 4);
  auto costs = testing::uniform_costs(2, 1.0, 2.0);
  for (auto& st : costs.stages) st.param_bytes = 1000000;
  Cluster cluster;
  cluster.intra_node =
      Link{0.01, 1.0};  // 1 GB/s: a 1 MB ring all-reduce over 2 is 1 ms + 2 latencies
  SimOptions so;
  so.dp.replicas = 2;
  const SimResult r = simulate(plan, costs, cluster, so);
  ASSERT_EQ(r.dp, 2);
  sched::Trace m = measured_from(r, 1.0);
  ASSERT_EQ(m.ranks, 4);  // the simulated trace draws both replicas, as the executor's has them
  CompareReport rep = compare(r, m, nullptr, CompareOptions{});
  EXPECT_EQ(rep.replicas, 2);
  EXPECT_EQ(rep.matched_actions, 32);  // 2 replicas x 2 ranks x 4 microbatches x (F + B)
  ASSERT_EQ(rep.per_rank.size(), 4U);
  for (const auto& rc : rep.per_rank) {
    EXPECT_EQ(rc.replica, rc.rank / 2);
    EXPECT_NEAR(rc.predicted_busy_ms, rc.measured_busy_ms, 1e-6);
  }
  EXPECT_NEAR(rep.step_error(), 0.0, 1e-9);

  costs.data_parallel = {{0, 4, 1, 1e6, 1e6, 0.5}, {3, 4, 1, 1e6, 1e6, 0.25}};
  add_data_parallel(rep, plan, costs, cluster, so);
  EXPECT_EQ(rep.dp_algorithm, "ddp");
  EXPECT_EQ(rep.dp_period_steps, 1);
  ASSERT_EQ(rep.data_parallel.size(), 4U);
  for (const auto& d : rep.data_parallel) {
    EXPECT_EQ(d.stages, std::vector<std::int32_t>{d.rank % 2});
    EXPECT_DOUBLE_EQ(d.predicted_wire_bytes, 1e6);  // 2 (n - 1) / n of 1 MB
    // One bucket of 1 MB (first_bucket_bytes 1 MiB): 2 (n-1)/n x 1 MB / 1 GB/s + 2 (n-1) x 0.01.
    EXPECT_NEAR(d.predicted_comm_ms, 1.0 + 0.02, 1e-6);
  }
  ASSERT_TRUE(rep.data_parallel[0].measured_exposed_ms.has_value());
  EXPECT_DOUBLE_EQ(*rep.data_parallel[0].measured_exposed_ms, 0.5);
  EXPECT_FALSE(rep.data_parallel[1].measured_wire_bytes.has_value());  // no profile entry
  EXPECT_DOUBLE_EQ(*rep.data_parallel[3].measured_wire_bytes, 1e6);
  const std::string text = to_text(rep);
  EXPECT_NE(text.find("data parallel (ddp, 2 replicas, period 1 step(s))"), std::string::npos)
      << text;
  EXPECT_NE(to_json(rep).find("\"predicted_wire_bytes_per_step\""), std::string::npos);

  // LocalSGD every 2 steps: one all-reduce of all parameters per period of 2.
  so.dp.algorithm = DpAlgorithm::kLocalSgd;
  so.dp.localsgd_frequency = 2;
  CompareReport local;
  local.replicas = 2;
  add_data_parallel(local, plan, costs, cluster, so);
  EXPECT_EQ(local.dp_period_steps, 2);
  ASSERT_EQ(local.data_parallel.size(), 4U);
  EXPECT_DOUBLE_EQ(local.data_parallel[0].predicted_wire_bytes, 1e6 / 2);
  EXPECT_GT(local.data_parallel[0].predicted_exposed_ms, 0.0);  // blocking: all of it exposed

  // 4 world ranks are not 2 ranks x 3 replicas.
  SimResult three = r;
  three.dp = 3;
  try {
    (void)compare(three, m, nullptr, CompareOptions{});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("2 ranks x 3 replicas = 6 ranks but the measured trace "
                                         "has 4"),
              std::string::npos)
        << e.what();
  }
}

// Note [Periodic syncs in compare]: LocalSGD every 2 steps: the measured headline is the mean
// over the last whole periods, the predicted one the simulated step plus the mean of what each
// step of the period adds (here the averaging after every second step: 1.02 ms / 2).
TEST(Compare, PeriodicSyncsCompareMeansOverWholePeriods) {
  auto plan = testing::one_f_one_b(2, 4);
  auto costs = testing::uniform_costs(2, 1.0, 2.0);
  for (auto& st : costs.stages) st.param_bytes = 1000000;
  Cluster cluster;
  cluster.intra_node = Link{0.01, 1.0};
  SimOptions so;
  so.dp.replicas = 2;
  so.dp.algorithm = DpAlgorithm::kLocalSgd;
  so.dp.localsgd_frequency = 2;
  // One step alone as training step 0 does not average; as training step 1 it does.
  const SimResult step0 = simulate(plan, costs, cluster, so);
  SimOptions at1 = so;
  at1.first_step = 1;
  const SimResult step1 = simulate(plan, costs, cluster, at1);
  EXPECT_NEAR(static_cast<double>(step1.makespan_ns - step0.makespan_ns) / 1e6, 1.02, 1e-6);
  EXPECT_EQ(dp_period_steps(so.dp), 2);
  EXPECT_NEAR(periodic_sync_ms(plan, costs, cluster, so), 0.51, 1e-6);
  CompareReport rep;
  rep.replicas = 2;
  rep.prediction = "sampled";
  rep.predicted_step_ms = 10.0;
  rep.step_numbers = {2, 3, 4, 5, 6};
  rep.per_step_measured_ms = {99.0, 10.0, 20.0, 12.0, 22.0};  // the first is left out
  rep.measured_step_ms = 20.0;                                // their median
  add_data_parallel(rep, plan, costs, cluster, so);
  EXPECT_EQ(rep.dp_period_steps, 2);
  EXPECT_DOUBLE_EQ(rep.measured_step_ms, 16.0);
  EXPECT_NEAR(rep.predicted_step_ms, 10.0 + 0.51, 1e-6);
  EXPECT_EQ(rep.prediction, "sampled, period mean");
  // Trace-driven replay simulated every measured step as itself: left as it is.
  CompareReport replay = rep;
  replay.prediction = "trace";
  replay.predicted_step_ms = 10.0;
  replay.measured_step_ms = 20.0;
  add_data_parallel(replay, plan, costs, cluster, so);
  EXPECT_DOUBLE_EQ(replay.predicted_step_ms, 10.0);
  EXPECT_DOUBLE_EQ(replay.measured_step_ms, 20.0);
  // DDP (period 1): the medians stay.
  so.dp.algorithm = DpAlgorithm::kDdp;
  CompareReport ddp = rep;
  ddp.prediction = "sampled";
  ddp.predicted_step_ms = 10.0;
  ddp.measured_step_ms = 20.0;
  add_data_parallel(ddp, plan, costs, cluster, so);
  EXPECT_DOUBLE_EQ(ddp.measured_step_ms, 20.0);
  EXPECT_DOUBLE_EQ(ddp.predicted_step_ms, 10.0);
}

TEST(Compare, MissingOrExtraActionsNameTheAction) {
  SimResult r = simulate_1f1b(1.0, 2.0);
  sched::Trace m = measured_from(r, 1.0);
  // Drop rank 1's "1B3" from step 1.
  sched::Trace missing = m;
  missing.slices.erase(
      std::remove_if(missing.slices.begin(), missing.slices.end(),
                     [](const sched::TraceSlice& s) { return s.step == 1 && s.name == "1B3"; }),
      missing.slices.end());
  EXPECT_THROW((void)compare(r, missing, nullptr, CompareOptions{}), ConfigError);
  sched::Trace extra = m;
  sched::TraceSlice s = extra.slices.front();
  s.name = "0F9";
  s.category = "F";
  s.stream = sched::TraceStream::kCompute;
  s.step = 1;
  extra.slices.push_back(s);
  try {
    (void)compare(r, extra, nullptr, CompareOptions{});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("0F9"), std::string::npos) << e.what();
  }
}

TEST(Compare, SvgHasBothPanels) {
  SimResult r = simulate_1f1b(1.0, 2.0);
  sched::Trace m = measured_from(r, 1.1);
  CompareReport rep = compare(r, m, nullptr, CompareOptions{});
  const std::string svg = compare_svg(r, m, rep);
  EXPECT_EQ(svg.rfind("<svg", 0), 0U);
  EXPECT_NE(svg.find("predicted ("), std::string::npos);
  EXPECT_NE(svg.find("measured (step 1"), std::string::npos);
  EXPECT_EQ(svg.find("<svg", 1), std::string::npos);  // one document, panels are groups
}

// Trace-driven replay (Note [Trace-driven replay]): a step simulated with the durations of a
// measured step reproduces that step, whatever the costs say.
TEST(TraceReplay, EachStepIsPredictedFromItsOwnDurations) {
  auto plan = testing::one_f_one_b(2, 4);
  auto truth = testing::uniform_costs(2, 1.0, 2.0);
  truth.stages[1].forward_ms = 1.5;  // not what the replay's costs say
  SimResult r = simulate(plan, truth, Cluster{}, SimOptions{});
  sched::Trace m = measured_from(r, 1.25);  // step 0: 2.5x (warm-up), step 1: 1.25x
  CompareOptions opt;
  opt.skip_steps = 0;
  TraceReplay replay = replay_from_trace(m, 2, 4, 0, {}, opt);
  ASSERT_EQ(replay.steps.size(), 2U);
  EXPECT_EQ(replay.steps[1], 1);
  const double makespan_ms = static_cast<double>(r.makespan_ns) / 1e6;
  EXPECT_NEAR(replay.measured_step_ms[1], 1.25 * makespan_ms, 1e-6);
  // F of stage 1, microbatch 2 in step 1: 1.5 ms x 1.25.
  EXPECT_EQ(replay.durations_ns[1][replay_index(1, 0, 2, 4)], 1875000);
  EXPECT_EQ(replay.durations_ns[1][replay_index(0, 1, 3, 4)], 2500000);  // B: 2 ms x 1.25
  EXPECT_EQ(replay.durations_ns[1][replay_index(0, 2, 0, 4)], -1);       // no I in a 1F1B plan
  const auto wrong = testing::uniform_costs(2, 7.0, 9.0);
  for (std::size_t k = 0; k < 2; ++k) {
    SimOptions so;
    so.replay_durations_ns = replay.durations_ns[k];
    const SimResult p = simulate(plan, wrong, Cluster{}, so);
    EXPECT_NEAR(static_cast<double>(p.makespan_ns) / 1e6, replay.measured_step_ms[k], 1e-5)
        << "step " << k;
  }
  // Without the override the wrong costs give a different step.
  const SimResult plain = simulate(plan, wrong, Cluster{}, SimOptions{});
  EXPECT_GT(static_cast<double>(plain.makespan_ns) / 1e6, 2 * replay.measured_step_ms[1]);
}

TEST(TraceReplay, SharedCoresTurnWallTimeIntoWork) {
  // Three ranks on one node with 2 cores, each computing one F over [0, 3 ms] of step 0: each
  // did 2 ms of work (3 ms at 2/3 speed). Rank 2's second F runs alone: its wall time is work.
  sched::Trace m;
  m.ranks = 3;
  auto add = [&](int rank, int mb, double start_us, double dur_us) {
    sched::TraceSlice s;
    s.name = std::to_string(rank) + "F" + std::to_string(mb);
    s.category = "F";
    s.rank = rank;
    s.stage = rank;
    s.microbatch = mb;
    s.step = 0;
    s.start_us = start_us;
    s.duration_us = dur_us;
    m.slices.push_back(s);
  };
  for (int r = 0; r < 3; ++r) add(r, 0, 0, 3000);
  add(2, 1, 3000, 1000);
  CompareOptions opt;
  opt.skip_steps = 0;
  TraceReplay shared = replay_from_trace(m, 3, 2, 2, {0, 0, 0}, opt);
  EXPECT_EQ(shared.durations_ns[0][replay_index(0, 0, 0, 2)], 2000000);
  EXPECT_EQ(shared.durations_ns[0][replay_index(2, 0, 0, 2)], 2000000);
  EXPECT_EQ(shared.durations_ns[0][replay_index(2, 0, 1, 2)], 1000000);
  // One rank per node, or no core count: wall time.
  TraceReplay own = replay_from_trace(m, 3, 2, 2, {0, 1, 2}, opt);
  EXPECT_EQ(own.durations_ns[0][replay_index(0, 0, 0, 2)], 3000000);
  TraceReplay none = replay_from_trace(m, 3, 2, 0, {0, 0, 0}, opt);
  EXPECT_EQ(none.durations_ns[0][replay_index(1, 0, 0, 2)], 3000000);
  // A stage or microbatch the plan does not have is named.
  try {
    (void)replay_from_trace(m, 2, 2, 0, {}, opt);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 2 (2F0"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)replay_from_trace(m, 3, 1, 0, {}, opt), ConfigError);
  try {
    (void)replay_from_trace(m, 3, 2, 2, {0, 0}, opt);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("2 ranks but the measured trace has 3"), std::string::npos)
        << e.what();
  }
  // A table of the wrong size is rejected by the simulator.
  SimOptions so;
  so.replay_durations_ns.assign(3, 0);
  EXPECT_THROW(
      (void)simulate(testing::one_f_one_b(2, 4), testing::uniform_costs(2, 1, 2), Cluster{}, so),
      ConfigError);
}

// End to end: steps measured at 1x, 1.5x and 1.1x the truth, replayed with the wrong costs:
// each step is predicted exactly, the median step is the 1.1x one, and its replay is recorded.
TEST(TraceReplay, CompareReplaysEveryStepAndShowsTheMedianOne) {
  auto plan = testing::one_f_one_b(2, 4);
  SimResult r = simulate(plan, testing::uniform_costs(2, 1.0, 2.0), Cluster{}, SimOptions{});
  sched::Trace pred = sched::parse_trace(trace_json(r, "test"), "pred");
  sched::Trace m;
  m.info = pred.info;
  m.ranks = pred.ranks;
  const double scale[] = {1.0, 1.5, 1.1};
  double t0 = 0;  // back to back (Note [Measured step period])
  for (int step = 0; step < 3; ++step) {
    if (step > 0) t0 += static_cast<double>(r.makespan_ns) / 1e3 * scale[step - 1];
    for (auto s : pred.slices) {
      s.start_us = t0 + s.start_us * scale[step];
      s.duration_us *= scale[step];
      s.step = step;
      m.slices.push_back(s);
    }
  }
  CompareOptions opt;
  opt.skip_steps = 0;
  SimOptions so;
  const auto got =
      compare_trace_replay(plan, testing::uniform_costs(2, 5.0, 5.0), Cluster{}, so, m, opt);
  const double makespan_ms = static_cast<double>(r.makespan_ns) / 1e6;
  ASSERT_EQ(got.report.per_step_predicted_ms.size(), 3U);
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(got.report.per_step_predicted_ms[k], scale[k] * makespan_ms, 1e-5) << k;
  EXPECT_NEAR(got.report.predicted_step_ms, 1.1 * makespan_ms, 1e-5);
  EXPECT_NEAR(got.report.step_error(), 0.0, 1e-6);
  EXPECT_NEAR(got.report.per_step_mape(), 0.0, 1e-6);
  EXPECT_EQ(got.report.prediction, "trace");
  EXPECT_NEAR(static_cast<double>(got.predicted.makespan_ns) / 1e6, 1.1 * makespan_ms, 1e-5);
  EXPECT_FALSE(got.predicted.actions.empty());
}

// Note [Periodic syncs in compare]: trace-driven replay simulates every measured step as the
// training step it was, so LocalSGD's averaging (every 2 steps) falls on steps 1 and 3, and the
// headline compares means over the two whole periods.
TEST(TraceReplay, PeriodicSyncsFallOnTheirOwnStepsAndCompareMeans) {
  auto plan = testing::one_f_one_b(2, 4);
  auto costs = testing::uniform_costs(2, 1.0, 2.0);
  for (auto& st : costs.stages) st.param_bytes = 1000000;
  Cluster cluster;
  cluster.intra_node = Link{0.01, 1.0};  // the 1 MB average: 1 ms + 2 latencies
  SimOptions so;
  so.dp.replicas = 2;
  so.dp.algorithm = DpAlgorithm::kLocalSgd;
  so.dp.localsgd_frequency = 2;
  const SimResult r = simulate(plan, costs, cluster, so);  // training step 0: no averaging
  sched::Trace pred = sched::parse_trace(trace_json(r, "test"), "pred");
  ASSERT_EQ(pred.ranks, 4);
  sched::Trace m;
  m.info = pred.info;
  m.ranks = pred.ranks;
  for (int step = 0; step < 4; ++step) {
    for (auto s : pred.slices) {
      s.start_us += 100000.0 * step;
      s.step = step;
      m.slices.push_back(s);
    }
  }
  CompareOptions opt;
  opt.skip_steps = 0;
  const auto got = compare_trace_replay(plan, costs, cluster, so, m, opt);
  const double base = static_cast<double>(r.makespan_ns) / 1e6;
  ASSERT_EQ(got.report.per_step_predicted_ms.size(), 4U);
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(got.report.per_step_predicted_ms[k], base + (k % 2 == 1 ? 1.02 : 0.0), 1e-5) << k;
  }
  EXPECT_EQ(got.report.prediction, "trace, period mean");
  EXPECT_NEAR(got.report.predicted_step_ms, base + 0.51, 1e-5);
}

// Note [One prediction]: with sampled durations the headline, the per-rank table, the per-action
// lines and the SVG all come from one simulated step (before, the headline was the sampled median
// while the table and the SVG showed the plain simulation with median costs).
TEST(Compare, SampledHeadlineTableAndSvgShowOneSimulation) {
  auto plan = testing::one_f_one_b(2, 4);
  sched::CostTable costs = testing::uniform_costs(2, 1.0, 2.0);
  give_skewed_stats(costs, 0.9);  // sampled steps are longer than medians
  const SimResult plain = simulate(plan, costs, Cluster{}, SimOptions{});
  sched::Trace m = measured_from(plain, 1.2);
  CompareOptions opt;
  const auto got = compare_sampled(plan, costs, Cluster{}, SimOptions{}, 31, m, opt);
  const CompareReport& rep = got.report;
  EXPECT_EQ(rep.prediction, "sampled");
  const double step_ms = static_cast<double>(got.predicted.step_end_ns.at(0)) / 1e6;
  EXPECT_EQ(rep.predicted_step_ms, step_ms);
  EXPECT_DOUBLE_EQ(rep.predicted_step_ms, median_step_ms(plan, costs, Cluster{}, SimOptions{}, 31));
  EXPECT_NE(got.predicted.makespan_ns, plain.makespan_ns);  // the draws matter here
  for (const auto& rc : rep.per_rank)
    EXPECT_NEAR(rc.predicted_busy_ms + rc.predicted_idle_ms, rep.predicted_step_ms, 1e-9);
  // Every predicted action line is the recorded step's own action.
  for (const auto& a : rep.largest) {
    bool found = false;
    for (const auto& t : got.predicted.actions) {
      if (t.rank == a.rank && action_name(t) == a.name && t.stream == Stream::kCompute) {
        found = true;
        EXPECT_EQ(a.predicted_start_ms, static_cast<double>(t.start_ns) / 1e6) << a.name;
      }
    }
    EXPECT_TRUE(found) << a.name;
  }
  // The text headline and the SVG's titles print the same figures.
  char head[64];
  std::snprintf(head, sizeof head, "predicted %.3f ms", rep.predicted_step_ms);
  EXPECT_NE(to_text(rep).find(head), std::string::npos) << to_text(rep);
  char err[64];
  std::snprintf(err, sizeof err, "error %+.2f%%", 100 * rep.step_error());
  EXPECT_NE(to_text(rep).find(err), std::string::npos) << to_text(rep);
  const std::string svg = compare_svg(got.predicted, m, rep);
  char title[64];
  std::snprintf(title, sizeof title, "step %.3f ms", rep.predicted_step_ms);
  EXPECT_NE(svg.find(title), std::string::npos);
  EXPECT_NE(svg.find(err), std::string::npos);
}

// Note [Replica skew]: with sampled distributions, the slowest of d replicas' steps is longer
// than one replica's, the more so the more replicas; without distributions, or at dp 1, nothing.
TEST(ReplicaSkew, SlowestOfTheReplicasIsTheStep) {
  auto plan = testing::one_f_one_b(2, 4);
  sched::CostTable costs = testing::uniform_costs(2, 1.0, 2.0);
  SimOptions dp1;
  EXPECT_EQ(replica_skew_ms(plan, costs, Cluster{}, dp1, 31), 0.0);
  SimOptions dp2;
  dp2.dp.replicas = 2;
  dp2.dp.algorithm = sched::DpAlgorithm::kLocalSgd;
  EXPECT_EQ(replica_skew_ms(plan, costs, Cluster{}, dp2, 31), 0.0);  // no distributions
  give_skewed_stats(costs, 0.5);
  EXPECT_EQ(replica_skew_ms(plan, costs, Cluster{}, dp1, 31), 0.0);
  const double two = replica_skew_ms(plan, costs, Cluster{}, dp2, 31);
  SimOptions dp4 = dp2;
  dp4.dp.replicas = 4;
  const double four = replica_skew_ms(plan, costs, Cluster{}, dp4, 31);
  EXPECT_GT(two, 0.0);
  EXPECT_GT(four, two);
  // Shared cores leave the skew as on dedicated cores (draws ignore processor sharing).
  costs.cores_per_node = 1;
  EXPECT_DOUBLE_EQ(replica_skew_ms(plan, costs, Cluster{}, dp2, 31), two);
  costs.cores_per_node = 0;
  // compare's sampled headline is the median sampled step plus the skew (plus nothing else for
  // LocalSGD at its default frequency: Note [Periodic syncs in compare] needs 3 steps here).
  const SimResult plain = simulate(plan, costs, Cluster{}, dp2);
  const sched::Trace m = measured_from(plain, 1.0);  // both replicas' ranks
  const auto got = compare_sampled(plan, costs, Cluster{}, dp2, 31, m, CompareOptions{});
  EXPECT_NEAR(got.report.predicted_step_ms, median_step_ms(plan, costs, Cluster{}, dp2, 31) + two,
              1e-9);
}

TEST(TraceReplay, ReportListsEveryStep) {
  CompareReport rep;
  rep.prediction = "trace";
  rep.step_numbers = {2, 3};
  rep.per_step_predicted_ms = {10.0, 22.0};
  rep.per_step_measured_ms = {10.0, 20.0};
  EXPECT_NEAR(rep.per_step_mape(), 0.05, 1e-12);
  const std::string json = to_json(rep);
  EXPECT_NE(json.find("\"per_step_mape\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"prediction\": \"trace\""), std::string::npos) << json;
  EXPECT_NE(to_text(rep).find("mean absolute per-step error 5.00%"), std::string::npos);
}

}  // namespace
}  // namespace pipewright::sim
