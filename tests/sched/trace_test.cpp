#include "pipewright/sched/trace.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "pipewright/graph/error.hpp"

namespace pipewright::sched {
namespace {

TraceSlice slice(std::string name, std::string cat, int rank, TraceStream st, double ts, double dur,
                 int stage, int mb) {
  TraceSlice s;
  s.name = std::move(name);
  s.category = std::move(cat);
  s.rank = rank;
  s.stream = st;
  s.start_us = ts;
  s.duration_us = dur;
  s.stage = stage;
  s.microbatch = mb;
  return s;
}

TraceBuilder two_rank_trace(bool reversed) {
  TraceBuilder b(TraceInfo{"simulator", "plan.json", "1F1B"}, 2);
  std::vector<TraceSlice> slices = {
      slice("0F0", "F", 0, TraceStream::kCompute, 0, 1000, 0, 0),
      slice("0SEND_F0", "SEND_F", 0, TraceStream::kSend, 1000, 10.5, 0, 0),
      slice("1RECV_F0", "RECV_F", 1, TraceStream::kRecv, 0, 1010.5, 1, 0),
      slice("1F0", "F", 1, TraceStream::kCompute, 1010.5, 1000, 1, 0),
  };
  if (reversed) std::reverse(slices.begin(), slices.end());
  std::vector<std::size_t> ids;
  for (auto& s : slices) ids.push_back(b.add_slice(s));
  if (reversed) {
    b.add_flow(ids[2], ids[1]);
  } else {
    b.add_flow(ids[1], ids[2]);
  }
  return b;
}

TEST(Trace, SchemaHasRequiredFields) {
  const auto j = nlohmann::json::parse(two_rank_trace(false).to_json());
  ASSERT_TRUE(j["traceEvents"].is_array());
  EXPECT_EQ(j["otherData"]["source"], "simulator");
  EXPECT_EQ(j["otherData"]["plan"], "plan.json");
  EXPECT_EQ(j["otherData"]["schedule"], "1F1B");
  int complete = 0, flow_s = 0, flow_f = 0;
  std::set<std::string> process_names;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    ASSERT_TRUE(e["pid"].is_number_integer());
    ASSERT_TRUE(e["tid"].is_number_integer());
    if (ph == "X") {
      ++complete;
      for (const char* k : {"name", "cat", "ts", "dur", "args"}) EXPECT_TRUE(e.contains(k)) << k;
      for (const char* k : {"stage", "microbatch", "kind", "step"})
        EXPECT_TRUE(e["args"].contains(k)) << k;
    } else if (ph == "M") {
      if (e["name"] == "process_name") process_names.insert(e["args"]["name"].get<std::string>());
    } else if (ph == "s") {
      ++flow_s;
      EXPECT_EQ(e["pid"], 0);
      EXPECT_EQ(e["tid"], 1);
    } else if (ph == "f") {
      ++flow_f;
      EXPECT_EQ(e["bp"], "e");
      EXPECT_EQ(e["pid"], 1);
      EXPECT_EQ(e["tid"], 2);
    }
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(flow_s, 1);
  EXPECT_EQ(flow_f, 1);
  EXPECT_EQ(process_names, (std::set<std::string>{"rank 0", "rank 1"}));
}

TEST(Trace, OutputIndependentOfInsertionOrder) {
  EXPECT_EQ(two_rank_trace(false).to_json(), two_rank_trace(true).to_json());
}

TEST(Trace, OverlappingSlicesOnOneStreamAreAnInternalError) {
  TraceBuilder b(TraceInfo{}, 1);
  b.add_slice(slice("0F0", "F", 0, TraceStream::kCompute, 0, 10, 0, 0));
  b.add_slice(slice("0F1", "F", 0, TraceStream::kCompute, 5, 10, 0, 1));
  EXPECT_THROW((void)b.to_json(), InternalError);
  // Touching slices and overlap across streams are fine.
  TraceBuilder ok(TraceInfo{}, 1);
  ok.add_slice(slice("0F0", "F", 0, TraceStream::kCompute, 0, 10, 0, 0));
  ok.add_slice(slice("0F1", "F", 0, TraceStream::kCompute, 10, 10, 0, 1));
  ok.add_slice(slice("0SEND_F0", "SEND_F", 0, TraceStream::kSend, 5, 10, 0, 0));
  EXPECT_NO_THROW((void)ok.to_json());
}

TEST(Trace, LoadReturnsCompleteEvents) {
  const std::string path = ::testing::TempDir() + "/pw_trace_test.json";
  {
    std::ofstream out(path);
    out << two_rank_trace(false).to_json();
  }
  const Trace t = load_trace(path);
  std::remove(path.c_str());
  EXPECT_EQ(t.info.source, "simulator");
  EXPECT_EQ(t.ranks, 2);
  ASSERT_EQ(t.slices.size(), 4u);
  EXPECT_EQ(t.slices[0], slice("0F0", "F", 0, TraceStream::kCompute, 0, 1000, 0, 0));
  // Sorted by (rank, stream, start): rank 1's compute slice precedes its receive slice.
  EXPECT_EQ(t.slices[2].name, "1F0");
  EXPECT_DOUBLE_EQ(t.slices[2].start_us, 1010.5);
  EXPECT_EQ(t.slices[3].name, "1RECV_F0");
}

TEST(Trace, MalformedEventsNameThePointer) {
  try {
    (void)parse_trace(R"({"traceEvents":[{"ph":"X","name":"a","pid":0,"tid":0,"dur":1}]})",
                      "t.json");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(
        std::string(e.what()).find("t.json:1:17: at /traceEvents/0/ts: is missing or not a number"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)parse_trace("{}", "t.json"), ParseError);
  EXPECT_THROW((void)parse_trace("not json", "t.json"), ParseError);
}

// The streaming reader is as strict as the shared one: syntax errors with line:column, duplicate
// keys, nesting limits, each naming file, position and JSON pointer.
TEST(Trace, StrictLikeTheSharedReader) {
  const auto error = [](const std::string& text) {
    try {
      (void)parse_trace(text, "t.json");
    } catch (const ParseError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("{\"traceEvents\": [\n  {\"ph\": \"X\",\n   \"ph\": \"M\"}]}"),
            "t.json:3:10: at /traceEvents/0/ph: duplicate key \"ph\"");
  EXPECT_NE(error("{\"traceEvents\": [\n  oops]}").find("t.json:2:3: invalid JSON: "),
            std::string::npos);
  std::string deep = "{\"traceEvents\": [], \"otherData\": ";
  for (int i = 0; i < 40; ++i) deep += "[";
  EXPECT_NE(error(deep).find("nesting deeper than the limit of 32"), std::string::npos)
      << error(deep);
  EXPECT_EQ(error("[]"), "t.json:1:1: at (root): expected an object, got array");
  EXPECT_EQ(error("{\"traceEvents\": 3}"), "t.json:1:17: at /traceEvents: must be an array");
}

}  // namespace
}  // namespace pipewright::sched
