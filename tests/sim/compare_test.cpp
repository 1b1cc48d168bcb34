#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// A "measured" trace made of two steps: step 0 (warm-up, twice as slow) and step 1 equal to the
// prediction scaled by `scale`, shifted in time as a real run would be.
sched::Trace measured_from(const SimResult& r, double scale) {
  sched::Trace pred = sched::parse_trace(trace_json(r, "test"), "pred");
  sched::Trace out;
  out.info = pred.info;
  out.info.source = "executor";
  out.ranks = pred.ranks;
  for (int step = 0; step < 2; ++step) {
    const double k = step == 0 ? 2 * scale : scale;
    const double offset = step == 0 ? 1000.0 : 50000.0;
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

}  // namespace
}  // namespace pipewright::sim
