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
// - Flow events "s" / "f" (bp "e") sharing an id, in time order (Note [Forward flows]):
//   cat "p2p": from the send slice (at its start) to the matching receive slice (at the data's
//   arrival: the send's end, clamped into the receive slice); cat "dp": a data-parallel
//   collective, from the replica that joined first (at its start) to every other replica's slice
//   of the same collective (at its start).
// - Counter events "C" named "memory", one track per rank (pid): args {"bytes": N}, the rank's
//   memory from that time on.
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
  // Executor SENDs (Note [Send time] in exec/src/report/run_report.hpp): time inside the
  // transport's send calls (within the slice) and waiting for completion at the end of the step
  // (after it); args "send_us" / "drain_us", written when > 0, 0 when absent.
  double send_us = 0;
  double drain_us = 0;
  // Executor compute actions on CPUs (Note [Compute CPU time] in exec/src/report/run_report.hpp):
  // the computing thread's CPU time within the slice; arg "cpu_us", written when > 0.
  double cpu_us = 0;
  friend bool operator==(const TraceSlice& a, const TraceSlice& b) noexcept {
    return a.name == b.name && a.category == b.category && a.rank == b.rank &&
           a.stream == b.stream && a.start_us == b.start_us && a.duration_us == b.duration_us &&
           a.stage == b.stage && a.microbatch == b.microbatch && a.step == b.step &&
           a.send_us == b.send_us && a.drain_us == b.drain_us && a.cpu_us == b.cpu_us;
  }
};

struct TraceInfo {
  std::string source = "simulator";  // "simulator" or "executor"
  std::string plan;                  // plan file or a description ("1F1B p=4 m=8")
  std::string schedule;              // schedule name
};

// One flow arrow as read back: its "s" and "f" events (has_start / has_end say which were found).
struct TraceFlow {
  std::int64_t id = 0;
  std::string category;  // "p2p" or "dp"
  bool has_start = false;
  bool has_end = false;
  std::int32_t from_rank = 0;
  TraceStream from_stream = TraceStream::kCompute;
  double from_us = 0;
  std::int32_t to_rank = 0;
  TraceStream to_stream = TraceStream::kCompute;
  double to_us = 0;
};

// One sample of a rank's memory counter track.
struct TraceCounter {
  std::int32_t rank = 0;
  double time_us = 0;
  std::int64_t bytes = 0;
};

struct Trace {
  TraceInfo info;
  std::int32_t ranks = 0;            // number of "rank N" processes named by metadata
  std::vector<TraceSlice> slices;    // the complete events, in file order
  std::vector<TraceFlow> flows;      // by id, ascending
  std::vector<TraceCounter> memory;  // "memory" counter samples, in file order
};

// Collects events; to_json() is deterministic (same events -> same bytes, whatever the order
// in which they were added).
class TraceBuilder {
 public:
  explicit TraceBuilder(TraceInfo info, std::int32_t ranks);

  // Returns the slice's index (for add_flow).
  std::size_t add_slice(TraceSlice slice);
  // An arrow from the send slice to the receive slice (both indices from add_slice). Written in
  // time order (Note [Forward flows]); dropped when the receive ended before the send started.
  void add_flow(std::size_t send_slice, std::size_t recv_slice);
  // The slices of one data-parallel collective on its replicas (indices from add_slice): arrows
  // from the replica that joined last to each other one.
  void add_collective(const std::vector<std::size_t>& slices);
  // A sample of `rank`'s memory counter: `bytes` from `time_us` on.
  void add_memory(std::int32_t rank, double time_us, std::int64_t bytes);

  [[nodiscard]] std::size_t size() const noexcept { return slices_.size(); }
  // Throws InternalError when two slices on the same (rank, stream) overlap.
  [[nodiscard]] std::string to_json() const;

 private:
  TraceInfo info_;
  std::int32_t ranks_ = 0;
  std::vector<TraceSlice> slices_;
  struct Flow {
    std::size_t from, to;
    bool collective;
  };
  std::vector<Flow> flows_;
  std::vector<TraceCounter> memory_;
};

// Parses a trace written by TraceBuilder (or any Trace Event JSON with the required fields).
// Throws ParseError naming `origin` and the JSON pointer of a missing or malformed field.
[[nodiscard]] Trace parse_trace(std::string_view json_text, std::string_view origin);
[[nodiscard]] Trace load_trace(const std::string& path);

}  // namespace pipewright::sched
