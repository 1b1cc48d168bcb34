// Round trips (action text, CSV, JSON), bad CSV / JSON with line and column, text grid and dot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

std::vector<ComputePlan> sample_plans() {
  std::vector<ComputePlan> plans;
  for (ScheduleKind kind : all_schedule_kinds()) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {4, 6, 8}) {
        const bool looped = kind != ScheduleKind::kGPipe && kind != ScheduleKind::k1F1B;
        for (int v : looped ? std::vector<int>{1, 2, 4} : std::vector<int>{1}) {
          try {
            plans.push_back(generate({kind, p, m, v, {}}));
          } catch (const ConfigError&) {
          }
        }
      }
    }
  }
  plans.push_back(generate({ScheduleKind::k1F1B, 4, 5, 1, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}}));
  plans.push_back(generate({ScheduleKind::kGPipe, 3, 2, 1, {{0, 1}, {0, 2}, {1, 2}}}));
  return plans;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ParseError& e) {
    return e.what();
  }
  return "<no ParseError>";
}

TEST(RoundTrip, ActionTextOfEveryGeneratedAction) {
  for (const auto& plan : sample_plans()) {
    for (const auto& lowered : {lower(plan), lower(plan, {true, true, true})}) {
      for (const auto& ops : lowered.per_rank) {
        for (const Action& a : ops) {
          if (is_overlap(a.kind)) continue;  // a container cell: to_cells / try_parse_cell
          ASSERT_EQ(parse_action(to_string(a)), a) << a;
        }
      }
    }
  }
}

TEST(RoundTrip, CsvKeepsActionsAndInfersTheShape) {
  for (const auto& plan : sample_plans()) {
    if (!csv_cannot_carry(plan).empty()) continue;  // the stage DAGs: RoundTrip.CsvRefusal...
    const AnyPlan back = parse_csv(to_csv(plan), "mem.csv");
    ASSERT_FALSE(is_lowered(back));
    const auto& c = std::get<ComputePlan>(back);
    EXPECT_EQ(c.per_rank, plan.per_rank);
    EXPECT_EQ(c.shape.ranks, plan.shape.ranks);
    EXPECT_EQ(c.shape.stages, plan.shape.stages);
    EXPECT_EQ(c.shape.microbatches, plan.shape.microbatches);
    EXPECT_EQ(c.shape.stage_to_rank, plan.shape.stage_to_rank);
    EXPECT_EQ(c.shape.schedule, "custom");
    EXPECT_EQ(to_csv(c), to_csv(plan));

    const LoweredPlan lowered = lower(plan, {false, true, true});
    if (plan.shape.ranks == 1) {
      // No SEND/RECV on one rank: a CSV could not tell it from a compute-only plan, so the
      // writer refuses it (Note [What a CSV carries]).
      EXPECT_THROW((void)to_csv(lowered), ConfigError);
      continue;
    }
    const AnyPlan lback = parse_csv(to_csv(lowered), "mem.csv");
    ASSERT_TRUE(is_lowered(lback));
    const auto& l = std::get<LoweredPlan>(lback);
    EXPECT_EQ(l.per_rank, lowered.per_rank);
    EXPECT_EQ(l.shape.stage_to_rank, lowered.shape.stage_to_rank);
    // Edges are recovered from "@peer" when every edge crosses ranks (true for these DAGs).
    // Chimera's two chains meet no "@peer" (neighbours only) and its replica map is not in a
    // CSV: JSON is its file format (docs/plan-format.md).
    if (!plan.shape.is_chain() && !plan.shape.has_replicas()) {
      EXPECT_EQ(l.shape.edges().size(), plan.shape.edges().size());
    }
  }
}

TEST(RoundTrip, JsonIsExact) {
  for (const auto& plan : sample_plans()) {
    const AnyPlan back = parse_json(to_json(plan), "mem.json");
    ASSERT_FALSE(is_lowered(back));
    EXPECT_EQ(std::get<ComputePlan>(back), plan);
    const LoweredPlan lowered = lower(plan, {true, true, true});
    const AnyPlan lback = parse_json(to_json(lowered), "mem.json");
    ASSERT_TRUE(is_lowered(lback));
    EXPECT_EQ(std::get<LoweredPlan>(lback), lowered);
  }
}

// UNSHARD / RESHARD (issue 43) in every format: JSON, CSV and torch's compute_comms CSV.
TEST(RoundTrip, UnshardAndReshardInEveryFormat) {
  const std::string csv =
      "0UNSHARD,0F0,0SEND_F0,0RESHARD,0RECV_B0,0UNSHARD,0B0,0RESHARD,0REDUCE_GRAD\n"
      "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1RESHARD,1REDUCE_GRAD\n";
  const AnyPlan plan = parse_csv(csv, "z3.csv");
  ASSERT_TRUE(is_lowered(plan));
  const LoweredPlan& lowered = std::get<LoweredPlan>(plan);
  ASSERT_EQ(lowered.per_rank[0].size(), 9U);
  EXPECT_EQ(lowered.per_rank[0][3], Action::stage_only(0, ActionKind::kReshard));
  EXPECT_EQ(to_csv(lowered), csv);
  EXPECT_EQ(std::get<LoweredPlan>(parse_json(to_json(lowered), "z3.json")), lowered);
  const std::string torch = to_torch_comms_csv(lowered);
  EXPECT_NE(torch.find("0UNSHARD,0F0,0SEND_F0,0RESHARD"), std::string::npos) << torch;
  EXPECT_EQ(std::get<LoweredPlan>(parse_csv(torch, "z3_torch.csv")), lowered);
  // A compute-only plan keeps them too.
  const AnyPlan compute = parse_csv("0UNSHARD,0F0,0B0,0RESHARD\n", "c.csv");
  ASSERT_FALSE(is_lowered(compute));
  EXPECT_EQ(std::get<ComputePlan>(compute).per_rank[0].front(),
            Action::stage_only(0, ActionKind::kUnshard));
}

TEST(Csv, TorchFormatDetails) {
  // Empty cells (torch's bubbles), CRLF, blanks, quotes and trailing empty lines are accepted.
  const AnyPlan plan = parse_csv("0F0,,0F1,0B0,0B1\r\n 1F0 ,\"1B0\",1F1,1B1\r\n\r\n", "t.csv");
  const auto& c = std::get<ComputePlan>(plan);
  EXPECT_EQ(c.shape.ranks, 2);
  EXPECT_EQ(c.shape.stages, 2);
  EXPECT_EQ(c.shape.microbatches, 2);
  EXPECT_EQ(to_csv(c), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  // Stage 2 on rank 0 with stage 0: looping placement is inferred from the rows.
  const AnyPlan looping = parse_csv("0F0,2F0\n1F0\n", "t.csv");
  const auto& l = std::get<ComputePlan>(looping);
  EXPECT_EQ(l.shape.stage_to_rank, (std::vector<std::int32_t>{0, 1, 0}));
}

TEST(Csv, BadInputNamesLineAndColumn) {
  EXPECT_NE(
      message_of([] { (void)parse_csv("0F0,0F1\n1F0,1X1\n", "bad.csv"); }).find("bad.csv:2:6: "),
      std::string::npos)
      << message_of([] { (void)parse_csv("0F0,0F1\n1F0,1X1\n", "bad.csv"); });
  const std::string unknown = message_of([] { (void)parse_csv("0F0,0F1\n1F0,1X1\n", "bad.csv"); });
  EXPECT_NE(unknown.find("unknown action kind"), std::string::npos) << unknown;
  const std::string garbage = message_of([] { (void)parse_csv("0F0\nhello world\n", "g.csv"); });
  EXPECT_NE(garbage.find("g.csv:2:1: "), std::string::npos) << garbage;
  const std::string two_rows = message_of([] { (void)parse_csv("0F0,1F0\n1B0\n", "t.csv"); });
  EXPECT_NE(two_rows.find("t.csv:2:1: stage 1 appears on rows 0 and 1"), std::string::npos)
      << two_rows;
  const std::string range = message_of([] {
    (void)parse_csv("0F0,0B0\n1F0,5F0\n", "r.csv", CsvOptions{2, -1});
  });
  EXPECT_NE(range.find("r.csv:2:5: 5F0: stage 5 is out of range [0, 2)"), std::string::npos)
      << range;
  const std::string mb = message_of([] {
    (void)parse_csv("0F0,0F7\n", "m.csv", CsvOptions{-1, 4});
  });
  EXPECT_NE(mb.find("m.csv:1:5: 0F7: microbatch 7 is out of range [0, 4)"), std::string::npos)
      << mb;
  const std::string peer = message_of([] { (void)parse_csv("0F0,0SEND_F0\n", "p.csv"); });
  EXPECT_NE(peer.find("p.csv:1:5: 0SEND_F0: peer stage 1 appears in no row"), std::string::npos)
      << peer;
  const std::string hole = message_of([] { (void)parse_csv("0F0\n2F0\n", "h.csv"); });
  EXPECT_NE(hole.find("stage 1 appears in no row"), std::string::npos) << hole;
  EXPECT_NE(message_of([] { (void)parse_csv("\n\n", "e.csv"); }).find("empty plan"),
            std::string::npos);
}

// Issue 20, item 7: sizes a plan implies are checked against documented limits while parsing,
// before anything of that size is allocated (an 18-byte CSV once took 5.5 GB and 28 s), and a
// stage index near INT32_MAX is an input error, not an internal one (it overflowed the count).
TEST(Csv, ImpliedSizesAreCheckedAgainstLimits) {
  const std::string mb = message_of([] { (void)parse_csv("0F0,0F10000000\n", "big.csv"); });
  EXPECT_NE(mb.find("big.csv:1:5: microbatch 10000000 is beyond the limit of 1048576 microbatches "
                    "(set PIPEWRIGHT_MAX_MICROBATCHES to raise it"),
            std::string::npos)
      << mb;
  const std::string st = message_of([] { (void)parse_csv("2147483647F0\n", "s.csv"); });
  EXPECT_NE(st.find("s.csv:1:1: stage 2147483647 is beyond the limit of 65536 stages"),
            std::string::npos)
      << st;
  const std::string cells = message_of([] {
    (void)parse_csv(
        "0F0,"
        "0F1000000\n1F0\n2F0\n3F0\n4F0\n5F0\n6F0\n7F0\n8F0\n9F0\n10F0\n11F0\n12F0\n13F0\n14F0\n15F0"
        "\n16F0\n",
        "c.csv");
  });
  EXPECT_NE(cells.find("c.csv: 17 stages x 1000001 microbatches is beyond the limit of 4194304"),
            std::string::npos)
      << cells;
  // The limits are overridable.
  ::setenv("PIPEWRIGHT_MAX_MICROBATCHES", "4", 1);
  EXPECT_NE(message_of([] {
              (void)parse_csv("0F0,0F4\n", "m.csv");
            }).find("microbatch 4 is beyond the limit of 4 microbatches"),
            std::string::npos);
  EXPECT_NO_THROW((void)parse_csv("0F0,0F3\n", "m.csv"));
  ::setenv("PIPEWRIGHT_MAX_MICROBATCHES", "lots", 1);
  EXPECT_THROW((void)parse_csv("0F0\n", "m.csv"), ConfigError);
  ::unsetenv("PIPEWRIGHT_MAX_MICROBATCHES");
}

TEST(Json, BadInputNamesLineColumnAndPointer) {
  const std::string syntax = message_of(
      [] { (void)parse_json("{\n  \"format\": \"pipewright-plan\",\n  oops\n}", "s.json"); });
  EXPECT_NE(syntax.find("s.json:3:3: "), std::string::npos) << syntax;
  const std::string doc =
      "{\"format\": \"pipewright-plan\", \"version\": 1,\n"
      " \"actions\": [[\"0F0\", \"0B0\"],\n"
      "             [\"1F0\", \"1Q0\"]]}\n";
  const std::string kind = message_of([&] { (void)parse_json(doc, "k.json"); });
  EXPECT_NE(kind.find("k.json:3:24: at /actions/1/1: "), std::string::npos) << kind;
  EXPECT_NE(kind.find("unknown action kind"), std::string::npos) << kind;
  const std::string ranged =
      "{\"format\": \"pipewright-plan\", \"version\": 1, \"stages\": 2,\n"
      " \"actions\": [[\"0F0\", \"0B0\"],\n"
      "             [\"1F0\", \"7B0\"]]}\n";
  const std::string range = message_of([&] { (void)parse_json(ranged, "r.json"); });
  EXPECT_NE(range.find("r.json:3:22: at /actions/1/1: 7B0: stage 7 is out of range [0, 2)"),
            std::string::npos)
      << range;
  const std::string missing = message_of(
      [] { (void)parse_json("{\"format\": \"pipewright-plan\", \"version\": 1}", "m.json"); });
  EXPECT_NE(missing.find("m.json:1:1: at (root): missing required field \"actions\""),
            std::string::npos)
      << missing;
  const std::string version = message_of(
      [] { (void)parse_json("{\"format\": \"pipewright-plan\",\n \"version\": 9}", "v.json"); });
  EXPECT_NE(version.find("v.json:2:13: at /version: unsupported version 9"), std::string::npos)
      << version;
  // The shared strict reader: duplicate keys are errors, not "the last one wins".
  const std::string dup = message_of([] {
    (void)parse_json("{\"format\": \"pipewright-plan\",\n \"version\": 1, \"version\": 1}",
                     "d.json");
  });
  EXPECT_NE(dup.find("d.json:2:27: at /version: duplicate key \"version\""), std::string::npos)
      << dup;
  const std::string format = message_of([] { (void)parse_json("[1, 2]", "f.json"); });
  EXPECT_NE(format.find("f.json:1:1: "), std::string::npos) << format;
  const std::string comm = message_of([] {
    (void)parse_json(
        "{\"format\": \"pipewright-plan\", \"version\": 1, \"kind\": \"compute\", "
        "\"actions\": [[\"0F0\", \"0SEND_F0\"], [\"1RECV_F0\"]]}",
        "c.json");
  });
  EXPECT_NE(comm.find("c.json:1:84: at /actions/0/1: 0SEND_F0 is a communication action"),
            std::string::npos)
      << comm;
}

// Note [Lazy error positions]: positions are computed only for the cell an error names, so they
// must still be right deep inside a large file (here the last cell of the last rank).
TEST(Json, ErrorPositionsDeepInALargePlan) {
  const ComputePlan plan = generate({ScheduleKind::kInterleaved1F1B, 8, 64, 2, {}});
  std::string text = to_json(plan);
  const std::string last = "\"" + to_string(plan.per_rank.back().back()) + "\"";
  const std::size_t at = text.rfind(last);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, last.size(), "\"99B0\"");
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  const std::string want = "big.json:" + std::to_string(line) + ":" +
                           std::to_string(at - line_start + 1) + ": at /actions/7/" +
                           std::to_string(plan.per_rank.back().size() - 1) +
                           ": 99B0: stage 99 is out of range [0, 16)";
  const std::string got = message_of([&] { (void)parse_json(text, "big.json"); });
  EXPECT_NE(got.find(want), std::string::npos) << got << "\nwant: " << want;
}

TEST(TextGrid, UnitStepsWithIdleDots) {
  const ComputePlan plan = generate({ScheduleKind::k1F1B, 2, 2, 1, {}});
  EXPECT_EQ(to_text_grid(plan),
            "rank 0: 0F0 0F1 .   0B0 .   0B1\n"
            "rank 1: .   1F0 1B0 1F1 1B1\n");
  // A plan that cannot finish says where it is stuck.
  ComputePlan stuck = plan;
  std::swap(stuck.per_rank[0][0], stuck.per_rank[0][2]);  // 0B0 first: waits for 1B0 forever
  EXPECT_NE(to_text_grid(stuck).find("stuck"), std::string::npos);
  const std::string lowered = to_text_grid(lower(plan));
  EXPECT_NE(lowered.find("0SEND_F0"), std::string::npos);
  EXPECT_EQ(lowered.find("stuck"), std::string::npos);
}

TEST(Dot, ClustersNodesAndEdges) {
  const ComputePlan plan = generate({ScheduleKind::kGPipe, 2, 2, 1, {}});
  const std::string dot = to_dot(plan);
  EXPECT_EQ(dot.rfind("digraph plan {", 0), 0U);
  EXPECT_NE(dot.find("subgraph cluster_rank1"), std::string::npos);
  EXPECT_NE(dot.find("r0s0 -> r1s0;"), std::string::npos) << dot;                   // 0F0 -> 1F0
  EXPECT_NE(dot.find("r1s2 -> r0s2 [color=firebrick]"), std::string::npos) << dot;  // 1B0 -> 0B0
  const std::string ldot = to_dot(lower(plan));
  EXPECT_NE(ldot.find("[color=blue, penwidth=2]"), std::string::npos);
}

// Issue 36, item 2: every plan a writer accepts reads back as the same plan, for every schedule,
// every format and a grid of shapes; a format that cannot carry a plan is refused (ConfigError,
// exit 2 in the CLI, naming JSON), never written as a file that means another plan.

struct GridCase {
  std::string name;  // "Chimera p=4 m=4 v=1 lowered(full)" for failure messages
  AnyPlan plan;
};

std::vector<GridCase> grid_of_plans() {
  std::vector<GridCase> out;
  const std::vector<std::vector<StageEdge>> chain = {{}};
  // Stage DAGs (GPipe, 1F1B): a diamond over 4 stages, a skip over 3, the diamond listed unsorted.
  const std::vector<std::vector<StageEdge>> dags = {{},
                                                    {{0, 1}, {0, 2}, {1, 3}, {2, 3}},
                                                    {{0, 1}, {0, 2}, {1, 2}},
                                                    {{0, 2}, {0, 1}, {2, 3}, {1, 3}}};
  LowerOptions full;
  full.merge_iw = full.reduce_grad = full.optimizer_step = true;
  for (ScheduleKind kind : all_schedule_kinds()) {
    const bool dag_ok = kind == ScheduleKind::kGPipe || kind == ScheduleKind::k1F1B;
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 6, 8, 16}) {
        for (int v : {1, 2, 3}) {
          for (bool forward_only : {false, true}) {
            for (const auto& edges : dag_ok ? dags : chain) {
              ScheduleSpec spec{kind, p, m, v, edges};
              spec.forward_only = forward_only;
              ComputePlan plan;
              try {
                plan = generate(spec);
              } catch (const ConfigError&) {
                continue;  // a shape the schedule rejects (tested in schedule_test.cpp)
              }
              std::string name = std::string(to_string(kind)) + " p=" + std::to_string(p) +
                                 " m=" + std::to_string(m) + " v=" + std::to_string(v) +
                                 (forward_only ? " forward-only" : "") +
                                 (edges.empty() ? "" : " dag" + std::to_string(edges.size()));
              out.push_back({name + " compute", plan});
              out.push_back({name + " lowered", lower(plan)});
              out.push_back({name + " lowered(full)", lower(plan, full)});
            }
          }
        }
      }
    }
  }
  return out;
}

bool has_comm(const AnyPlan& plan) {
  return std::visit(
      [](const auto& p) {
        for (const auto& ops : p.per_rank) {
          for (const Action& a : ops) {
            if (is_comm(a.kind)) return true;
          }
        }
        return false;
      },
      plan);
}

// The plans a CSV cannot carry (Note [What a CSV carries]), spelled out here independently of the
// writer's check, so that a refusal too many or too few fails.
bool csv_must_refuse(const AnyPlan& plan) {
  const PlanShape& sh = shape_of(plan);
  const auto edges = sh.stage_edges;
  const bool sorted = std::is_sorted(edges.begin(), edges.end(), [](const auto& a, const auto& b) {
    return a.from != b.from ? a.from < b.from : a.to < b.to;
  });
  return sh.has_replicas() || (is_lowered(plan) && !has_comm(plan)) ||
         (!is_lowered(plan) && !sh.is_chain()) || (is_lowered(plan) && !sorted);
}

void expect_same(const AnyPlan& got, const AnyPlan& want, const std::string& what) {
  ASSERT_EQ(is_lowered(got), is_lowered(want)) << what;
  EXPECT_TRUE(got == want) << what << ": read back as another plan";
  const auto diagnostics = std::visit([](const auto& p) { return validate(p); }, got);
  EXPECT_TRUE(diagnostics.empty()) << what << ":" << format_diagnostics(diagnostics);
}

TEST(RoundTrip, EveryScheduleFormatAndShapeReadsBackTheSame) {
  const auto grid = grid_of_plans();
  std::set<std::string> csv_kinds;  // the schedules some CSV carried
  int refused = 0;
  for (const auto& [name, plan] : grid) {
    const std::string json = std::visit([](const auto& p) { return to_json(p); }, plan);
    expect_same(parse_json(json, "grid.json"), plan, name + " (json)");

    std::string csv;
    try {
      csv = std::visit([](const auto& p) { return to_csv(p); }, plan);
    } catch (const ConfigError& e) {
      ++refused;
      EXPECT_TRUE(csv_must_refuse(plan)) << name << ": CSV refused: " << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot carry"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--format json"), std::string::npos) << e.what();
      continue;
    }
    EXPECT_FALSE(csv_must_refuse(plan)) << name << ": CSV written, but it cannot carry it";
    EXPECT_EQ(std::visit([](const auto& p) { return csv_cannot_carry(p); }, plan), "");
    AnyPlan back = parse_csv(csv, "grid.csv");
    // The schedule name is a label a CSV does not carry (the Python module compares the same way).
    EXPECT_EQ(shape_of(back).schedule, "custom") << name;
    std::visit([&plan](auto& p) { p.shape.schedule = shape_of(plan).schedule; }, back);
    expect_same(back, plan, name + " (csv)");
    csv_kinds.insert(shape_of(plan).schedule);

    // Text grids and dot are pictures: no reader takes them, and reading one says so.
    for (const std::string& picture :
         {std::visit([](const auto& p) { return to_text_grid(p); }, plan),
          std::visit([](const auto& p) { return to_dot(p); }, plan)}) {
      try {
        (void)parse_csv(picture, "picture.txt");
        ADD_FAILURE() << name << ": a picture read as a plan";
      } catch (const ParseError& e) {
        EXPECT_NE(std::string(e.what()).find("plans are read from --format csv or json"),
                  std::string::npos)
            << e.what();
      }
    }
  }
  // The grid covers every schedule, and CSV carries all but Chimera.
  EXPECT_GT(grid.size(), 1000U);
  EXPECT_GT(refused, 0);
  for (ScheduleKind kind : all_schedule_kinds()) {
    const std::string k(to_string(kind));
    EXPECT_EQ(csv_kinds.count(k), kind == ScheduleKind::kChimera ? 0U : 1U) << k;
  }
}

TEST(RoundTrip, PlanOutDocumentsReadBackAsTheirPlan) {
  // `run --plan-out` / `simulate --plan-out` write {"job": ..., "plan": ...}: the JSON reader
  // takes the plan, so `validate` and `simulate` read these files too.
  int read = 0;
  for (const auto& [name, plan] : grid_of_plans()) {
    if (!is_lowered(plan)) continue;
    const auto& lowered = std::get<LoweredPlan>(plan);
    expect_same(parse_json(plan_out_json(JobSpec{}, lowered), "out.json"), plan, name + " (out)");
    ++read;
  }
  EXPECT_GT(read, 500);
  const LoweredPlan plan = lower(generate({ScheduleKind::k1F1B, 2, 2, 1, {}}));
  std::string doc = plan_out_json(JobSpec{}, plan);
  doc.replace(doc.find("\"1F0\""), 5, "\"1Q0\"");
  const std::string bad = message_of([&doc] { (void)parse_json(doc, "out.json"); });
  EXPECT_NE(bad.find(": at /plan/actions/1/"), std::string::npos) << bad;
  doc = plan_out_json(JobSpec{}, plan);
  doc.replace(doc.rfind("\"version\": 1"), 12, "\"version\": 9");  // the plan's, after the job's
  const std::string version = message_of([&doc] { (void)parse_json(doc, "out.json"); });
  EXPECT_NE(version.find("at /plan/version: unsupported version 9"), std::string::npos) << version;
}

TEST(RoundTrip, CsvRefusalNamesTheFieldAndJson) {
  // The report of issue 36: Chimera p=4 m=4 was written as CSV, then rejected with 32 problems.
  const ComputePlan chimera = generate({ScheduleKind::kChimera, 4, 4, 1, {}});
  const std::string why = csv_cannot_carry(chimera);
  EXPECT_NE(why.find("stage_to_model_stage [0, 1, 2, 3, 0, 1, 2, 3]"), std::string::npos) << why;
  try {
    (void)to_csv(chimera);
    ADD_FAILURE() << "Chimera written as CSV";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("Chimera: torch's CSV cannot carry this plan: ", 0), 0U)
        << e.what();
  }
  const ComputePlan one_rank = generate({ScheduleKind::k1F1B, 1, 4, 1, {}});
  EXPECT_NE(csv_cannot_carry(lower(one_rank)).find("without SEND/RECV (1 rank)"),
            std::string::npos);
  EXPECT_EQ(csv_cannot_carry(one_rank), "");
  const ComputePlan dag =
      generate({ScheduleKind::kGPipe, 4, 4, 1, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}});
  EXPECT_NE(csv_cannot_carry(dag).find("(0:1,0:2,1:3,2:3) would read back as the chain"),
            std::string::npos)
      << csv_cannot_carry(dag);
  EXPECT_EQ(csv_cannot_carry(lower(dag)), "");
}

}  // namespace
}  // namespace pipewright::sched
