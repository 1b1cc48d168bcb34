// The one trace schema that both the simulator and the executor write, so that predicted and
// measured runs open side by side in Perfetto / chrome://tracing and can be compared.
//
// Chrome Trace Event JSON:
//   {"traceEvents": [...], "displayTimeUnit": "ms",
//    "otherData": {"source": "simulator"|"executor", "plan": ..., "schedule": ...}}
// - "X" complete events, one per action: name = action text ("1F3"), cat = kind ("F",
//   "SEND_F", "ALLREDUCE"...), pid = rank, tid = stream (see TraceStream), ts / dur in
//   microseconds (floating point), args {stage, microbatch, kind, step}.
// - "M" metadata events: process_name "rank N", thread_name per stream, sort indices.
// - Flow events "s" (on the send slice) / "f" (bp "e", on the receive slice) sharing an id.
// Slices on one (pid, tid) never overlap; TraceBuilder::to_json() asserts it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipewright::sched {

enum class TraceStream : std::int32_t {
  kCompute = 0,
  kSend = 1,
  kRecv = 2,
  kDpAllReduce = 3,
};
[[nodiscard]] std::string_view to_string(TraceStream stream) noexcept;

// One complete ("X") event.
struct TraceSlice {
  std::string name;      // action text, e.g. "1F3", "0SEND_F2", "1ALLREDUCE_BUCKET0"
  std::string category;  // kind: "F", "B", "I", "W", "SEND_F", "RECV_B", "ALLREDUCE", ...
  std::int32_t rank = 0;
  TraceStream stream = TraceStream::kCompute;
  double start_us = 0;
  double duration_us = 0;
  std::int32_t stage = -1;
  std::int32_t microbatch = -1;
  std::int64_t step = 0;
  friend bool operator==(const TraceSlice& a, const TraceSlice& b) noexcept {
    return a.name == b.name && a.category == b.category && a.rank == b.rank &&
           a.stream == b.stream && a.start_us == b.start_us && a.duration_us == b.duration_us &&
           a.stage == b.stage && a.microbatch == b.microbatch && a.step == b.step;
  }
};

struct TraceInfo {
  std::string source = "simulator";  // "simulator" or "executor"
  std::string plan;                  // plan file or a description ("1F1B p=4 m=8")
  std::string schedule;              // schedule name
};

struct Trace {
  TraceInfo info;
  std::int32_t ranks = 0;          // number of "rank N" processes named by metadata
  std::vector<TraceSlice> slices;  // the complete events, in file order
};

// Collects events; to_json() is deterministic (same events -> same bytes, whatever the order
// in which they were added).
class TraceBuilder {
 public:
  explicit TraceBuilder(TraceInfo info, std::int32_t ranks);

  // Returns the slice's index (for add_flow).
  std::size_t add_slice(TraceSlice slice);
  // An arrow from the send slice to the receive slice (both indices from add_slice).
  void add_flow(std::size_t send_slice, std::size_t recv_slice);

  [[nodiscard]] std::size_t size() const noexcept { return slices_.size(); }
  // Throws InternalError when two slices on the same (rank, stream) overlap.
  [[nodiscard]] std::string to_json() const;

 private:
  TraceInfo info_;
  std::int32_t ranks_ = 0;
  std::vector<TraceSlice> slices_;
  std::vector<std::pair<std::size_t, std::size_t>> flows_;
};

// Parses a trace written by TraceBuilder (or any Trace Event JSON with the required fields).
// Throws ParseError naming `origin` and the JSON pointer of a missing or malformed field.
[[nodiscard]] Trace parse_trace(std::string_view json_text, std::string_view origin);
[[nodiscard]] Trace load_trace(const std::string& path);

}  // namespace pipewright::sched
