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

// Note [Forward flows]: the receive is posted (its slice starts) long before the send; the arrow
// still starts at the send and ends at the data's arrival, inside the receive slice.
TEST(Trace, FlowsGoForwardInTimeAndReadBack) {
  TraceBuilder b = two_rank_trace(false);
  // Two replicas' REDUCE_GRAD of stage 0: replica 0 (rank 0) joins first.
  const auto r0 = b.add_slice(
      slice("0REDUCE_GRAD", "REDUCE_GRAD", 0, TraceStream::kDpAllReduce, 3000, 500, 0, -1));
  const auto r1 = b.add_slice(
      slice("0REDUCE_GRAD", "REDUCE_GRAD", 2, TraceStream::kDpAllReduce, 3200, 300, 0, -1));
  b.add_collective({r0, r1});
  b.add_memory(0, 0, 100);
  b.add_memory(0, 1000, 300);
  b.add_memory(1, 0, 50);
  const Trace t = parse_trace(b.to_json(), "t.json");
  ASSERT_EQ(t.flows.size(), 2U);
  for (const auto& f : t.flows) {
    EXPECT_TRUE(f.has_start && f.has_end) << f.id;
    EXPECT_LE(f.from_us, f.to_us) << f.id;
  }
  const TraceFlow& p2p = t.flows[0].category == "p2p" ? t.flows[0] : t.flows[1];
  const TraceFlow& dp = t.flows[0].category == "dp" ? t.flows[0] : t.flows[1];
  EXPECT_EQ(p2p.from_rank, 0);
  EXPECT_EQ(p2p.from_stream, TraceStream::kSend);
  EXPECT_DOUBLE_EQ(p2p.from_us, 1000);  // the send's start
  EXPECT_EQ(p2p.to_rank, 1);
  EXPECT_EQ(p2p.to_stream, TraceStream::kRecv);
  EXPECT_DOUBLE_EQ(p2p.to_us, 1010.5);  // the send's end: the data's arrival
  EXPECT_EQ(dp.category, "dp");
  EXPECT_EQ(dp.from_rank, 0);  // the replica that joined first
  EXPECT_DOUBLE_EQ(dp.from_us, 3000);
  EXPECT_EQ(dp.to_rank, 2);
  EXPECT_DOUBLE_EQ(dp.to_us, 3200);
  ASSERT_EQ(t.memory.size(), 3U);
  EXPECT_EQ(t.memory[1].rank, 0);
  EXPECT_DOUBLE_EQ(t.memory[1].time_us, 1000);
  EXPECT_EQ(t.memory[1].bytes, 300);
}

// A receive that ended before its send started (clocks of two hosts) gets no arrow.
TEST(Trace, FlowThatCannotGoForwardIsLeftOut) {
  TraceBuilder b(TraceInfo{}, 2);
  const auto send = b.add_slice(slice("0SEND_F0", "SEND_F", 0, TraceStream::kSend, 500, 10, 0, 0));
  const auto recv = b.add_slice(slice("1RECV_F0", "RECV_F", 1, TraceStream::kRecv, 100, 50, 1, 0));
  b.add_flow(send, recv);
  EXPECT_TRUE(parse_trace(b.to_json(), "t.json").flows.empty());
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

// Note [Send time] (exec/src/report/run_report.hpp): an executor SEND's send-call and drain
// times travel as args send_us / drain_us, and (Note [Compute CPU time]) a compute slice's thread
// CPU time as cpu_us, each written only when > 0 (simulator traces unchanged).
TEST(Trace, SendDrainAndCpuTimesReadBack) {
  TraceBuilder b(TraceInfo{"executor", "p", "1F1B"}, 1);
  TraceSlice s = slice("0SEND_F0", "SEND_F", 0, TraceStream::kSend, 0, 3000, 0, 0);
  s.send_us = 2200;
  s.drain_us = 700.5;
  b.add_slice(s);
  TraceSlice c = slice("0F1", "F", 0, TraceStream::kCompute, 0, 1000, 0, 1);
  c.cpu_us = 812.25;
  b.add_slice(c);
  const std::string json = b.to_json();
  EXPECT_EQ(json.find("send_us"), json.rfind("send_us"));  // the F has none
  EXPECT_EQ(json.find("cpu_us"), json.rfind("cpu_us"));    // the SEND has none
  const Trace t = parse_trace(json, "t.json");
  ASSERT_EQ(t.slices.size(), 2u);
  const auto& send = t.slices[0].name == "0SEND_F0" ? t.slices[0] : t.slices[1];
  EXPECT_EQ(send, s);
  EXPECT_EQ(send.cpu_us, 0.0);
  const auto& f = t.slices[0].name == "0F1" ? t.slices[0] : t.slices[1];
  EXPECT_EQ(f, c);
  EXPECT_EQ(f.send_us, 0.0);
  EXPECT_EQ(f.drain_us, 0.0);
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
