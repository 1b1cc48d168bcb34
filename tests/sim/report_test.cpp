// Outputs: metrics fields, the trace schema (Perfetto-loadable Trace Event JSON), SVG and text
// timelines, byte-identical across runs.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/trace.hpp"
#include "pipewright/sim/report.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

using nlohmann::json;

SimResult interleaved_with_everything() {
  sched::ScheduleSpec spec;
  spec.kind = sched::ScheduleKind::kInterleaved1F1B;
  spec.ranks = 4;
  spec.microbatches = 8;
  spec.stages_per_rank = 2;
  const auto plan = sched::lower(sched::generate(spec));
  auto costs = testing::uniform_costs(8, 1, 2, 1 << 20, 8 << 20, 1 << 20);
  Cluster c;
  c.nodes = 2;
  c.ranks_per_node = 4;
  c.intra_node = Link{0.002, 100};
  c.inter_node = Link{0.01, 10};
  c.device_memory_bytes = 1 << 30;
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.micro_batch_size = 2;
  opt.record_memory_timeline = true;
  return simulate(plan, costs, c, opt);
}

TEST(Report, MetricsHaveEveryListedField) {
  const auto r = interleaved_with_everything();
  const json j = json::parse(metrics_json(r));
  for (const char* k : {"makespan_ms", "bubble_fraction", "ranks", "communication",
                        "throughput_samples_per_s", "critical_path", "step_ms", "fits_memory"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_DOUBLE_EQ(j["makespan_ms"].get<double>(), static_cast<double>(r.makespan_ns) / 1e6);
  EXPECT_DOUBLE_EQ(j["bubble_fraction"].get<double>(), r.bubble_fraction());
  ASSERT_EQ(j["ranks"].size(), 4u);
  for (const auto& rr : j["ranks"]) {
    for (const char* k : {"rank", "busy_ms", "idle_ms", "peak_memory_bytes", "memory_timeline"})
      EXPECT_TRUE(rr.contains(k)) << k;
    EXPECT_NEAR(rr["busy_ms"].get<double>() + rr["idle_ms"].get<double>(),
                j["makespan_ms"].get<double>(), 1e-9);
  }
  for (const char* k : {"p2p_ms", "dp_comm_ms", "dp_exposed_ms"})
    EXPECT_TRUE(j["communication"].contains(k)) << k;
  EXPECT_GT(j["communication"]["dp_comm_ms"].get<double>(), 0);
  EXPECT_GT(j["throughput_samples_per_s"].get<double>(), 0);
  ASSERT_FALSE(j["critical_path"].empty());
  EXPECT_DOUBLE_EQ(j["critical_path"].back()["end_ms"].get<double>(),
                   j["makespan_ms"].get<double>());
}

TEST(Report, TraceFollowsTheSharedSchema) {
  const auto r = interleaved_with_everything();
  const std::string text = trace_json(r, "inline");
  const json j = json::parse(text);  // valid JSON
  ASSERT_TRUE(j["traceEvents"].is_array());
  EXPECT_EQ(j["otherData"]["source"], "simulator");
  EXPECT_EQ(j["otherData"]["schedule"], "Interleaved1F1B");
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::set<std::string> cats;
  std::map<std::int64_t, int> flow_ends;
  std::map<std::int64_t, double> flow_start, flow_end;
  std::set<int> memory_ranks;
  int process_names = 0, thread_names = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e.at("ph");
    EXPECT_TRUE(e.at("pid").is_number_integer());
    EXPECT_TRUE(e.at("tid").is_number_integer());
    if (ph == "X") {
      EXPECT_TRUE(e.at("name").is_string());
      EXPECT_TRUE(e.at("ts").is_number());
      EXPECT_GE(e.at("dur").get<double>(), 0);
      for (const char* k : {"stage", "microbatch", "kind", "step"})
        EXPECT_TRUE(e.at("args").contains(k)) << k;
      cats.insert(e.at("cat").get<std::string>());
      tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(e["ts"].get<double>(),
                                                                      e["dur"].get<double>());
    } else if (ph == "M") {
      process_names += e["name"] == "process_name";
      thread_names += e["name"] == "thread_name";
    } else if (ph == "s" || ph == "f") {
      flow_ends[e.at("id").get<std::int64_t>()] += ph == "s" ? 1 : 2;
      (ph == "s" ? flow_start : flow_end)[e.at("id").get<std::int64_t>()] = e.at("ts");
      if (ph == "f") {
        EXPECT_EQ(e.at("bp"), "e");
      }
    } else if (ph == "C") {
      EXPECT_EQ(e.at("name"), "memory");
      EXPECT_TRUE(e.at("args").at("bytes").is_number_integer());
      memory_ranks.insert(e.at("pid").get<int>());
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  // dp 2: both replicas are drawn, as world ranks replica x 4 + rank (Note [Replicas in the
  // simulated trace]).
  ASSERT_EQ(r.dp, 2);
  EXPECT_EQ(process_names, 8);
  EXPECT_EQ(thread_names, 32);
  for (const char* c : {"F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "ALLREDUCE"})
    EXPECT_TRUE(cats.count(c)) << c;
  EXPECT_FALSE(flow_ends.empty());
  for (const auto& [id, v] : flow_ends) EXPECT_EQ(v, 3) << "flow " << id;
  for (const auto& [id, ts] : flow_start) EXPECT_LE(ts, flow_end.at(id)) << "flow " << id;
  EXPECT_EQ(memory_ranks, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));  // a memory track per rank
  for (auto& [key, slices] : tracks) {
    std::sort(slices.begin(), slices.end());
    for (std::size_t i = 1; i < slices.size(); ++i)
      EXPECT_GE(slices[i].first + 1e-3, slices[i - 1].first + slices[i - 1].second)
          << "overlap on pid " << key.first << " tid " << key.second;
  }
  // The shared reader reads it back.
  const auto back = sched::parse_trace(text, "sim.json");
  EXPECT_EQ(back.ranks, 8);
  EXPECT_EQ(back.slices.size(), 2 * r.actions.size());
  // One "dp" flow per all-reduce of replica 0, to the same all-reduce of replica 1.
  std::size_t allreduces = 0;
  for (const auto& a : r.actions) allreduces += a.stream == Stream::kDpAllReduce;
  std::size_t dp_flows = 0;
  for (const auto& f : back.flows) {
    if (f.category != "dp") continue;
    ++dp_flows;
    EXPECT_EQ(f.to_rank % 4, f.from_rank % 4);
    EXPECT_NE(f.to_rank / 4, f.from_rank / 4);
  }
  EXPECT_GT(allreduces, 0u);
  EXPECT_EQ(dp_flows, allreduces);
}

// The memory chart: a curve per rank from the memory timeline, peaks in human units.
TEST(Report, MemorySvgHasEveryRank) {
  const auto r = interleaved_with_everything();
  const std::string svg = svg_memory(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(svg.find(">rank " + std::to_string(rank) + "<"), std::string::npos) << rank;
  EXPECT_NE(svg.find("<path d=\"M"), std::string::npos);
  EXPECT_NE(svg.find("MiB"), std::string::npos);
  EXPECT_NE(svg.find("device memory 1 GiB"), std::string::npos);
}

// The HTML report is one self-contained page: no external reference, inline SVG pictures.
TEST(Report, HtmlReportIsSelfContained) {
  const auto r = interleaved_with_everything();
  const std::string html =
      html_report(r, HtmlReportInputs{"Interleaved1F1B p=4", nullptr, nullptr});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(html.find("http://", html.find("<body")), html.find("http://www.w3.org/2000/svg"));
  for (const char* k : {"Summary", "Timeline", "Busy and idle per rank", "Memory over time",
                        "Critical path", "data-report-ready"})
    EXPECT_NE(html.find(k), std::string::npos) << k;
  EXPECT_NE(html.find("<svg"), std::string::npos);
}

TEST(Report, OutputsAreByteIdenticalAcrossRuns) {
  const auto a = interleaved_with_everything();
  const auto b = interleaved_with_everything();
  EXPECT_EQ(metrics_json(a), metrics_json(b));
  EXPECT_EQ(trace_json(a, "p"), trace_json(b, "p"));
  EXPECT_EQ(svg_timeline(a), svg_timeline(b));
  EXPECT_EQ(text_timeline(a), text_timeline(b));
}

TEST(Report, SvgAndTextTimelines) {
  const auto r = simulate(testing::one_f_one_b(2, 2), testing::uniform_costs(2, 1, 2), Cluster{},
                          SimOptions{});
  const std::string svg = svg_timeline(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("rank 1"), std::string::npos);
  EXPECT_NE(svg.find("<title>rank 0, stage 0, microbatch 0: 0F0 (forward)"), std::string::npos);
  EXPECT_NE(svg.find(">F0</text>"), std::string::npos);            // labelled
  EXPECT_NE(svg.find("marker-end"), std::string::npos);            // messages as arrows
  EXPECT_NE(svg.find("stroke-width=\"2.2\""), std::string::npos);  // critical path outlined
  EXPECT_EQ(svg.find("font-family"), svg.rfind("font-family"));    // one font, set once
  EXPECT_NE(svg.find("sans-serif"), std::string::npos);
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
  // 1F1B p=2 m=2, F=1, B=2: 9 ms; 18 columns of 0.5 ms each.
  const std::string text = text_timeline(r, 18);
  EXPECT_NE(text.find("r0  |FFFF....BBBB..BBBB|"), std::string::npos) << text;
  EXPECT_NE(text.find("r1  |..FFBBBBFFBBBB....|"), std::string::npos) << text;
}

}  // namespace
}  // namespace pipewright::sim
