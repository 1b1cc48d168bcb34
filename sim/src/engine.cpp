// The discrete-event engine behind simulate().
//
// Note [Engine]
// Each rank runs its lowered action list (repeated `steps` times) in program order. The state of
// the world is a set of "slots", one per (step, stage, microbatch) fact: F done, input gradient
// done (B or I), activation arrived / received on an edge, gradient arrived / received on an
// edge. A slot holds the integer nanosecond time the fact became true, or -1 while unknown.
//
// Events are (time_ns, insertion sequence, rank) in a binary heap. Popping an event resumes the
// rank, which executes actions until one needs a slot that is still unknown; the rank then parks
// on that slot and the action that fills it pushes a new event for the rank. Ranks "run ahead"
// of the event clock while their inputs are known: every resource a rank uses (its compute,
// send and dp-allreduce streams) is private to the rank, so an action's start time is a pure
// function of known slot times and the rank's own stream times, and processing it early cannot
// change any result. (A later shared-link contention model would process per action instead.)
// The heap order makes the processing order, and with it every output, deterministic.
//
// Note [Slot layout]
// Slots are stored row by row: for each step, one row of M slots per fact kind and stage (F done,
// input gradient done) or edge (arrived / received, activation / gradient), slot = step base +
// row * M + microbatch. A rank walks its stages' microbatches in order, so each of its accesses
// lands next to its previous access of the same row: 8 slots share a cache line and the hardware
// prefetcher follows the rows. (Blocks per microbatch, the earlier layout, put every access of
// a p=64 plan on a different cache line: 2.2x slower at m=1024.) The rows a stage's F and B wait
// on are resolved once per stage (deps_), not per action.
//
// Note [Shared cores]
// CPU ranks of one host share its cores: with C cores (Cluster::cores_per_node, else the
// profile's cores_per_node) and n ranks of a node inside a compute action (F, B, I, W, OPTIM),
// each computes at speed min(1, C / n) (processor sharing; co-located data-parallel replicas
// count too, as copies of their replica-0 rank). An action's cost is then its work at full
// speed, and its end depends on what other ranks do meanwhile, so ranks can no longer run ahead
// through compute: a rank whose next compute action can start at t > now yields until the event
// clock reaches t; starting or ending a compute action updates the node's running actions
// (progress so far at the old speed, then new end events at the new speed; superseded end
// events carry an old version and are dropped). A rank's send stream is an activity too: the
// bytes of a SEND move with its work at the same shared speed (a transfer's progress thread
// needs a core; measured on p = 4 runs, replay without it left ranks computing at half speed
// where the real ones mostly waited for messages), so arrivals are known only when the send
// completes (only when the profile says transfers need a core, CostTable::p2p_uses_core: with
// Open MPI the ranks' own polls make progress, and a message is a fixed delay; on p = 4 Open MPI
// runs, counting it as work over-predicted trace-driven replays by a further 4-15 points).
// Receives and the other communication actions still run ahead, as before. Without
// sharing (no cores given, or no node with more ranks than cores) none of this runs and results are
// those of dedicated devices, bit for bit. With sharing, each kind costs the mean of its measured
// distribution (KindStats::mean_ms) and sampled simulation draws nothing: on an oversubscribed host
// most of the spread of measured times is the OS scheduler's time slices, during which the other
// ranks run; sampling it on top of processor sharing counts that delay twice (p = 4 on 2 cores,
// bench/fidelity.sh: sampled replay +25..+42% against the measured step, medians -6..-28%, means
// -21..+1%).
//
// Dependencies: F(s, m) needs, for every producer stage q, F(q, m) when q is on the same rank
// and otherwise the rank's own RECV_F of that activation; B/I(s, m) need F(s, m) and, for every
// consumer stage c, B/I(c, m) locally or the RECV_B; W(s, m) needs I(s, m). SEND_* needs the
// local F or B/I it sends, starts when the rank's send stream is free (it never blocks compute)
// and fills the "arrived" slot at its end; RECV_* blocks compute until the arrival. A rank parked
// on a slot that only it could fill, or on a message nobody sends, is a deadlock: when the heap
// runs dry with unfinished ranks, simulate() throws InvalidPlanError naming each blocked rank,
// its action and what it waits for.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <sstream>
#include <vector>

#include "data_parallel.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/buckets.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {
namespace {

using sched::Action;
using sched::ActionKind;

constexpr std::int64_t kUnknown = -1;

// A plan action decoded once (the same list is replayed every step).
struct Op {
  ActionKind kind;
  std::int32_t stage;
  std::int32_t mb;
  std::int32_t edge;        // comm actions: the edge index; else -1
  bool ddp_launch;          // the last B/W of its stage on this rank: launches DDP buckets
  bool batch_head = false;  // first of a run of consecutive SEND/RECV actions (one p2p batch)
};

// One dependency fact in 8 bytes, zero meaning "unknown, nothing pending", so the array can come
// from zeroed memory (Note [Slot arena]):
//   value > 0: known, time = value - 1;  value == 0: unknown;
//   value < 0, kWaiters bit clear: unknown arrival slot with a receive posted at time -value - 1;
//   value < 0, kWaiters bit set: unknown, ranks are parked on it (the first is the low bits - 1;
//   the rest are chained through RankState::next_waiter).
// A slot never has a posted receive and parked ranks at once: receives are posted on "arrived"
// slots only with posted receives, and ranks park on "arrived" slots only with blocking ones.
using Slot = std::int64_t;
constexpr std::int64_t kWaiters = std::int64_t{1} << 62;

// Note [Slot arena]
// The slot array of a big plan is tens of MB and each simulate() touches every slot once or
// twice. Fresh anonymous memory costs a page fault and a kernel page clear per 4 KiB page (15%
// of the engine's time on the p=64, v=4, m=1024 benchmark); search and compare simulate many plans
// in a row. So each thread keeps its largest slot array and the next simulate() clears only the
// prefix it needs with memset, which is cheaper than the faults. Above kKeepBytes the memory goes
// back to the system after the run.
class SlotArray {
 public:
  SlotArray() = default;
  SlotArray(const SlotArray&) = delete;
  SlotArray& operator=(const SlotArray&) = delete;
  ~SlotArray() { release(); }
  // Zeroed memory for n slots; false if it cannot be had.
  bool allocate(std::size_t n) noexcept {
    release();
    const std::size_t need = std::max<std::size_t>(n * sizeof(Slot), 1);
    Cache& c = cache();
    if (c.data != nullptr && c.bytes >= need) {
      data_ = c.data;
      bytes_ = c.bytes;
      c.data = nullptr;
      c.bytes = 0;
      std::memset(data_, 0, need);
      return true;
    }
    void* p = ::mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    (void)::madvise(p, need, MADV_HUGEPAGE);  // a hint; ignored where THP is off
    data_ = static_cast<Slot*>(p);
    bytes_ = need;
    return true;
  }
  Slot* data() noexcept { return data_; }
  Slot& operator[](std::size_t i) noexcept { return data_[i]; }
  const Slot& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  static constexpr std::size_t kKeepBytes = std::size_t{256} << 20;
  struct Cache {
    Slot* data = nullptr;
    std::size_t bytes = 0;
    ~Cache() {
      if (data != nullptr) ::munmap(data, bytes);
    }
  };
  static Cache& cache() noexcept {
    thread_local Cache c;
    return c;
  }
  void release() noexcept {
    if (data_ == nullptr) return;
    Cache& c = cache();
    if (bytes_ <= kKeepBytes && bytes_ > c.bytes) {
      if (c.data != nullptr) ::munmap(c.data, c.bytes);
      c.data = data_;
      c.bytes = bytes_;
    } else {
      ::munmap(data_, bytes_);
    }
    data_ = nullptr;
    bytes_ = 0;
  }
  Slot* data_ = nullptr;
  std::size_t bytes_ = 0;
};

[[nodiscard]] inline bool slot_known(Slot v) noexcept { return v > 0; }
[[nodiscard]] inline std::int64_t slot_time(Slot v) noexcept { return v > 0 ? v - 1 : -1; }
// A posted receive's time, or -1.
[[nodiscard]] inline std::int64_t slot_posted(Slot v) noexcept {
  return v < 0 && ((-v) & kWaiters) == 0 ? -v - 1 : -1;
}

// kResume: run the rank from its current action; kDone: its running compute action (shared
// cores only) ends unless `version` is stale.
// kSendStart / kSendDone: the rank's send stream (shared cores only).
enum class EventKind : std::uint8_t { kResume, kDone, kSendStart, kSendDone };
struct Event {
  std::int64_t time_ns;
  std::int64_t seq;
  std::int32_t rank;
  EventKind kind;
  std::uint32_t version;
};
// std heap functions build a max-heap; "greater" puts the earliest (time, seq) on top.
struct EventLater {
  bool operator()(const Event& a, const Event& b) const noexcept {
    return a.time_ns != b.time_ns ? a.time_ns > b.time_ns : a.seq > b.seq;
  }
};

struct RankState {
  std::size_t pc = 0;              // index into the repeated program: step * len + position
  std::size_t pos = 0;             // pc % len
  std::int32_t step = 0;           // pc / len
  std::int64_t time = 0;           // compute stream free
  std::int64_t send_free = 0;      // send stream free
  std::int64_t dp_free = 0;        // dp-allreduce stream free
  std::int64_t last_compute = -1;  // record index of the action that set `time`
  std::int64_t last_send = -1;
  std::int64_t last_dp = -1;
  std::int64_t parked_slot = -1;
  std::int32_t next_waiter = -1;  // intrusive list of ranks parked on the same slot
  std::int64_t activation_bytes = 0;
  std::int32_t live_microbatches = 0;
  std::int64_t peak_activation_bytes = 0;
  std::int32_t peak_microbatches = 0;
  // Shared cores: the running compute action's start and predecessor.
  std::int64_t run_start = 0;
  std::int64_t run_pred = -1;
  bool finished = false;
};

// Shared cores: the computing ranks of one node (Note [Shared cores]).
struct Node {
  std::vector<std::int32_t> running;  // activities: rank r computing (r), sending (R + r)
  std::int32_t load = 0;              // busy activities, counting co-located replicas
  double rate = 1.0;                  // speed of each running action (work ns per ns)
  std::int64_t last = 0;              // time of the last change
};

class Engine {
 public:
  Engine(const sched::LoweredPlan& plan, const sched::CostTable& costs, const Cluster& cluster,
         const SimOptions& options)
      : plan_(plan), costs_(costs), cluster_(cluster), opt_(options) {}

  SimResult run();

 private:
  void validate_inputs() const;
  void decode_plan();
  void precompute_costs();
  // Slot layout (Note [Slot layout]): per step, rows_per_step_ rows of M_ slots, one row per
  // fact kind and stage or edge; slot = step base + row * M_ + microbatch:
  //   rows [F done: S][input gradient done: S][edge rows: 4 x E]
  std::size_t slot_base(std::int32_t step) const noexcept {
    return static_cast<std::size_t>(step) * M_ * rows_per_step_;
  }
  std::size_t at(std::size_t row, std::int32_t mb) const noexcept {
    return row * static_cast<std::size_t>(M_) + static_cast<std::size_t>(mb);
  }
  std::size_t fdone(std::int32_t s, std::int32_t mb) const noexcept {
    return at(static_cast<std::size_t>(s), mb);
  }
  std::size_t bdone(std::int32_t s, std::int32_t mb) const noexcept {
    return at(static_cast<std::size_t>(S_) + s, mb);
  }
  // Edge rows: kind 0 act arrived, 1 act received, 2 grad arrived, 3 grad received; the
  // "received" slot of a kind is E_ rows after its "arrived" slot.
  std::size_t erow(int kind, std::int32_t e) const noexcept {
    return 2 * static_cast<std::size_t>(S_) + static_cast<std::size_t>(kind) * E_ +
           static_cast<std::size_t>(e);
  }
  std::size_t eslot(int kind, std::int32_t e, std::int32_t mb) const noexcept {
    return at(erow(kind, e), mb);
  }
  std::string describe_slot(std::size_t slot) const;

  // Fills a slot and wakes what waits on it (the common case inline: nothing waits).
  void set_slot(std::size_t slot, std::int64_t t, std::int64_t src) {
    const Slot old = slots_[slot];
    slots_[slot] = t + 1;
    if (record_) slot_src_[slot] = src;
    if (old < 0) slot_pending(slot, old, t);
  }
  void slot_pending(std::size_t slot, std::int64_t old, std::int64_t t);
  void post_recv(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                 std::size_t arrived, std::size_t received);
  void complete_recv(std::size_t arrived, std::size_t received, std::int64_t post, std::int64_t idx,
                     std::int64_t prev);
  void park(std::int32_t r, std::size_t slot);
  void resume(std::int32_t r);
  bool execute(std::int32_t r, RankState& st, const Op& op, std::int32_t step);
  bool run_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                   std::int64_t start, std::int64_t pred, std::int64_t work);
  void finish_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                      std::int64_t start, std::int64_t end, std::int64_t pred);
  void push_event(std::int64_t t, std::int32_t r, EventKind kind, std::uint32_t version);
  void advance(Node& nd);
  void reschedule(Node& nd);
  void complete(std::int32_t r, std::uint32_t version);
  void start_send(std::int32_t r);
  void begin_activity(std::int32_t a, std::int64_t work);
  void end_activity(std::int32_t a);
  void complete_send(std::int32_t r, std::uint32_t version);
  void step_forward(std::int32_t r, RankState& st);
  void setup_shared_cores();
  void end_of_step(std::int32_t r, RankState& st, std::int32_t step);
  void launch_ddp(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                  std::int64_t start, std::int64_t end, std::int64_t src);
  // Appends a timed action when recording; returns its index, or -1.
  std::int64_t record(const Op& op, std::int32_t r, std::int32_t step, Stream stream,
                      std::int64_t start, std::int64_t end, std::int64_t pred) {
    return record_ ? record_action(op, r, step, stream, start, end, pred) : -1;
  }
  std::int64_t record_action(const Op& op, std::int32_t r, std::int32_t step, Stream stream,
                             std::int64_t start, std::int64_t end, std::int64_t pred);
  void memory_change(std::int32_t r, RankState& st, std::int64_t t, std::int64_t delta,
                     std::int32_t mb_delta) {
    st.activation_bytes += delta;
    st.live_microbatches += mb_delta;
    st.peak_activation_bytes = std::max(st.peak_activation_bytes, st.activation_bytes);
    st.peak_microbatches = std::max(st.peak_microbatches, st.live_microbatches);
    if (opt_.record_memory_timeline) memory_point(r, st, t);
  }
  void memory_point(std::int32_t r, RankState& st, std::int64_t t);
  [[noreturn]] void throw_deadlock() const;

  const sched::LoweredPlan& plan_;
  const sched::CostTable& costs_;
  const Cluster& cluster_;
  const SimOptions& opt_;

  std::int32_t R_ = 0, S_ = 0, M_ = 0, E_ = 0, K_ = 1, dp_ = 1;
  std::vector<sched::StageEdge> edges_;
  std::vector<std::vector<std::int32_t>> in_edges_, out_edges_;  // per stage: edge indices
  // The slot rows F (B/I) of a stage waits for: producers' F done (consumers' input gradient
  // done) on the same rank, the RECV_F (RECV_B) of the edge otherwise. Stage s's rows are
  // deps_[f_deps_begin_[s] .. f_deps_begin_[s + 1]) (b_deps_begin_ likewise).
  std::vector<std::int32_t> deps_, f_deps_begin_, b_deps_begin_;
  std::vector<std::vector<Op>> ops_;                        // per rank
  std::vector<std::vector<std::int32_t>> explicit_reduce_;  // per rank: stage has REDUCE_GRAD

  // Integer nanosecond costs.
  std::vector<std::int64_t> f_ns_, b_ns_, i_ns_, w_ns_, opt_ns_, act_bytes_;
  std::int64_t comm_overhead_ns_ = 0;
  // Sampled durations (Note [Sampled durations]): per stage and kind slot (0 F, 1 B, 2 I, 3 W,
  // 4 OPTIM), the (p10, median, p90) in ns, or median < 0 when the stage has no stats.
  struct Quantiles {
    std::int64_t p10 = 0, p50 = -1, p90 = 0;
    std::vector<std::int64_t> q;  // 21 empirical quantiles (0%, 5%, ..., 100%) or empty
  };
  std::vector<std::array<Quantiles, 5>> quantiles_;
  Quantiles p2p_quantiles_;  // the profile's per-message distribution (sampling only)
  std::int64_t sample(const Quantiles& q, std::uint64_t key) const noexcept;
  static std::int64_t at_quantile(const Quantiles& q, double u) noexcept;
  double uniform(std::uint64_t key) const noexcept;
  double normal(std::uint64_t key) const noexcept;
  double correlated_uniform(std::uint64_t key, std::int32_t step, std::int32_t rank) const noexcept;
  // Note [Correlated sampling]: the profile's step and rank-step correlations (0: independent).
  double rho_step_ = 0, rho_rank_step_ = 0;
  std::int64_t message_ns(const Op& op, std::int32_t step) const noexcept {
    return sample_ ? sampled_message_ns(op, step) : edge_ns_[static_cast<std::size_t>(op.edge)];
  }
  std::int64_t sampled_message_ns(const Op& op, std::int32_t step) const noexcept;
  bool sample_ = false;
  std::uint64_t seed_ = 0;
  // The fixed cost unless sampling (kept inline: the engine's hot path).
  std::int64_t duration(std::int64_t fixed, std::size_t s, int slot, std::int32_t mb,
                        std::int32_t step) const noexcept {
    if (!opt_.replay_durations_ns.empty()) {
      const std::int64_t v =
          opt_.replay_durations_ns[replay_index(static_cast<std::int32_t>(s), slot, mb, M_)];
      if (v >= 0) return v;
    }
    return sample_ ? sampled_duration(fixed, s, slot, mb, step) : fixed;
  }
  std::int64_t sampled_duration(std::int64_t fixed, std::size_t s, int slot, std::int32_t mb,
                                std::int32_t step) const noexcept;
  std::vector<std::int64_t> edge_ns_;  // one message on the edge (activation or gradient)
  std::vector<std::vector<std::int64_t>> bucket_ns_;   // per stage: all-reduce time per bucket
  std::vector<std::vector<std::int64_t>> bucket_cum_;  // per stage: cumulative bytes per bucket
  std::vector<std::int64_t> stage_param_bytes_;
  std::vector<std::int64_t> rank_localsgd_ns_, rank_slowmo_ns_;

  std::size_t rows_per_step_ = 0;
  SlotArray slots_;
  std::vector<std::int64_t> slot_src_;     // record index that filled the slot
  std::vector<std::int64_t> recv_prev_;    // with record_: pending receive's predecessor
  std::vector<std::int64_t> recv_record_;  // with record_: pending receive's record index
  std::vector<std::int64_t> ddp_done_;     // per (step, stage): all buckets reduced, or -1

  std::vector<RankState> ranks_;
  // Shared cores (Note [Shared cores]): on when some node has more computing ranks than cores.
  bool shared_ = false;
  std::int32_t cores_ = 0;
  std::int64_t now_ = 0;  // the event clock
  std::vector<Node> nodes_;
  std::vector<std::int32_t> node_of_;  // per rank: index into nodes_
  std::vector<std::int32_t> weight_;   // per rank: its replicas on the same node (itself included)
  // Per activity (compute of rank r: r; send stream of rank r: R + r): work left in ns at full
  // speed, and the version of its end event.
  std::vector<double> act_left_;
  std::vector<std::uint32_t> act_version_;
  // Per rank, shared cores: SEND actions waiting for or on the send stream, in order.
  struct PendingSend {
    std::size_t pos;  // index into the rank's ops
    std::int32_t step;
    std::int64_t ready;  // the rank reached it (after the batch overhead)
    std::int64_t pred;   // the rank's last compute then
  };
  std::vector<std::deque<PendingSend>> sends_;
  std::vector<std::uint8_t> send_state_;  // 0 idle, 1 start event pending, 2 running
  std::vector<std::int64_t> send_start_;
  std::vector<Event> heap_;
  std::int64_t seq_ = 0;
  SimResult result_;
  bool record_ = true;
};

void Engine::validate_inputs() const {
  const auto& shape = plan_.shape;
  PW_CHECK(shape.ranks >= 1 && shape.stages >= 1 && shape.microbatches >= 1, InvalidPlanError,
           "plan: ranks, stages and microbatches must be >= 1 (got "
               << shape.ranks << ", " << shape.stages << ", " << shape.microbatches << ")");
  PW_CHECK(plan_.per_rank.size() == static_cast<std::size_t>(shape.ranks), InvalidPlanError,
           "plan: has action lists for " << plan_.per_rank.size()
                                         << " ranks but ranks = " << shape.ranks);
  PW_CHECK(shape.stage_to_rank.size() == static_cast<std::size_t>(shape.stages), InvalidPlanError,
           "plan: stage_to_rank has " << shape.stage_to_rank.size() << " entries for "
                                      << shape.stages << " stages");
  for (std::int32_t s = 0; s < shape.stages; ++s) {
    const auto r = shape.stage_to_rank[static_cast<std::size_t>(s)];
    PW_CHECK(r >= 0 && r < shape.ranks, InvalidPlanError,
             "plan: stage " << s << " is placed on unknown rank " << r);
  }
  PW_CHECK(costs_.stages.size() == static_cast<std::size_t>(shape.stages), ConfigError,
           "costs (" << costs_.source << "): /stages has " << costs_.stages.size()
                     << " entries but the plan has " << shape.stages << " stages");
  sched::validate(costs_, "costs (" + costs_.source + ")");
  const auto& dp = opt_.dp;
  PW_CHECK(dp.replicas >= 1, ConfigError, "--dp must be >= 1, got " << dp.replicas);
  PW_CHECK(opt_.steps >= 1 && opt_.steps <= 100000, ConfigError,
           "--steps must be in [1, 100000], got " << opt_.steps);
  PW_CHECK(dp.localsgd_frequency >= 1, ConfigError,
           "--localsgd-frequency must be >= 1, got " << dp.localsgd_frequency);
  PW_CHECK(dp.slowmo_frequency >= 1, ConfigError,
           "--slowmo-frequency must be >= 1, got " << dp.slowmo_frequency);
  PW_CHECK(opt_.micro_batch_size >= 0, ConfigError,
           "--micro-batch-size must be >= 0, got " << opt_.micro_batch_size);
  if (!opt_.replay_durations_ns.empty()) {
    const auto want = static_cast<std::size_t>(shape.stages) * kReplaySlots *
                      static_cast<std::size_t>(shape.microbatches);
    PW_CHECK(opt_.replay_durations_ns.size() == want, ConfigError,
             "replay durations: " << opt_.replay_durations_ns.size() << " entries for a plan of "
                                  << shape.stages << " stages x " << shape.microbatches
                                  << " microbatches (want " << want << ")");
  }
  if (opt_.p2p_override_ms) {
    PW_CHECK(std::isfinite(*opt_.p2p_override_ms) && *opt_.p2p_override_ms >= 0, ConfigError,
             "--p2p-ms must be a finite number >= 0, got " << *opt_.p2p_override_ms);
  }
  cluster_.check_fits(shape.ranks * dp.replicas, "cluster '" + cluster_.name + "'");
}

void Engine::decode_plan() {
  const auto& shape = plan_.shape;
  R_ = shape.ranks;
  S_ = shape.stages;
  M_ = shape.microbatches;
  edges_ = shape.edges();
  E_ = static_cast<std::int32_t>(edges_.size());
  in_edges_.assign(static_cast<std::size_t>(S_), {});
  out_edges_.assign(static_cast<std::size_t>(S_), {});
  for (std::int32_t e = 0; e < E_; ++e) {
    const auto& ed = edges_[static_cast<std::size_t>(e)];
    PW_CHECK(ed.from >= 0 && ed.from < S_ && ed.to >= 0 && ed.to < S_ && ed.from != ed.to,
             InvalidPlanError,
             "plan: stage edge " << ed.from << " -> " << ed.to << " is out of range");
    out_edges_[static_cast<std::size_t>(ed.from)].push_back(e);
    in_edges_[static_cast<std::size_t>(ed.to)].push_back(e);
  }
  const auto& stage_rank = shape.stage_to_rank;
  auto same_rank = [&](std::int32_t a, std::int32_t b) {
    return stage_rank[static_cast<std::size_t>(a)] == stage_rank[static_cast<std::size_t>(b)];
  };
  deps_.clear();
  f_deps_begin_.assign(static_cast<std::size_t>(S_) + 1, 0);
  b_deps_begin_.assign(static_cast<std::size_t>(S_) + 1, 0);
  for (std::int32_t s = 0; s < S_; ++s) {
    f_deps_begin_[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(deps_.size());
    for (auto e : in_edges_[static_cast<std::size_t>(s)]) {
      const auto q = edges_[static_cast<std::size_t>(e)].from;
      deps_.push_back(static_cast<std::int32_t>(same_rank(q, s) ? q : erow(1, e)));
    }
  }
  f_deps_begin_[static_cast<std::size_t>(S_)] = static_cast<std::int32_t>(deps_.size());
  for (std::int32_t s = 0; s < S_; ++s) {
    b_deps_begin_[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(deps_.size());
    for (auto e : out_edges_[static_cast<std::size_t>(s)]) {
      const auto c = edges_[static_cast<std::size_t>(e)].to;
      deps_.push_back(static_cast<std::int32_t>(same_rank(c, s) ? S_ + c : erow(3, e)));
    }
  }
  b_deps_begin_[static_cast<std::size_t>(S_)] = static_cast<std::int32_t>(deps_.size());
  auto find_edge = [this](std::int32_t from, std::int32_t to) {
    for (auto e : out_edges_[static_cast<std::size_t>(from)]) {
      if (edges_[static_cast<std::size_t>(e)].to == to) return e;
    }
    return -1;
  };

  ops_.assign(static_cast<std::size_t>(R_), {});
  explicit_reduce_.assign(static_cast<std::size_t>(R_), std::vector<std::int32_t>(S_, 0));
  for (std::int32_t r = 0; r < R_; ++r) {
    const auto& list = plan_.per_rank[static_cast<std::size_t>(r)];
    auto& ops = ops_[static_cast<std::size_t>(r)];
    ops.reserve(list.size());
    std::vector<std::int64_t> last_grad(static_cast<std::size_t>(S_), -1);
    bool prev_comm = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      auto where = [&] {
        std::ostringstream os;
        os << "plan: rank " << r << ", position " << i << ", action " << sched::to_string(a);
        return os.str();
      };
      PW_CHECK(
          a.stage >= 0 && a.stage < S_, InvalidPlanError,
          where() << ": stage " << a.stage << " does not exist (the plan has " << S_ << " stages)");
      PW_CHECK(shape.stage_to_rank[static_cast<std::size_t>(a.stage)] == r, InvalidPlanError,
               where() << ": stage " << a.stage << " lives on rank "
                       << shape.stage_to_rank[static_cast<std::size_t>(a.stage)]);
      if (a.kind != ActionKind::kReduceGrad && a.kind != ActionKind::kOptimizerStep) {
        PW_CHECK(
            a.microbatch >= 0 && a.microbatch < M_, InvalidPlanError,
            where() << ": microbatch " << a.microbatch << " is out of range [0, " << M_ << ")");
      }
      Op op{a.kind, a.stage, a.microbatch, -1, false, false};
      if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB ||
          a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB) {
        const bool to_consumer = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB;
        op.edge = to_consumer ? find_edge(a.stage, a.peer_stage) : find_edge(a.peer_stage, a.stage);
        PW_CHECK(op.edge >= 0, InvalidPlanError,
                 where() << ": stage " << a.peer_stage << " is not a "
                         << (to_consumer ? "consumer" : "producer") << " of stage " << a.stage);
        const auto peer_rank = shape.stage_to_rank[static_cast<std::size_t>(a.peer_stage)];
        PW_CHECK(peer_rank != r, InvalidPlanError,
                 where() << ": stage " << a.peer_stage
                         << " is on the same rank; local data needs no send/recv");
      }
      if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardWeight) {
        last_grad[static_cast<std::size_t>(a.stage)] = static_cast<std::int64_t>(i);
      }
      if (a.kind == ActionKind::kReduceGrad) {
        explicit_reduce_[static_cast<std::size_t>(r)][static_cast<std::size_t>(a.stage)] = 1;
      }
      const bool comm = sched::is_comm(a.kind);
      op.batch_head = comm && !prev_comm;
      prev_comm = comm;
      ops.push_back(op);
    }
    for (std::int32_t s = 0; s < S_; ++s) {
      if (last_grad[static_cast<std::size_t>(s)] >= 0)
        ops[static_cast<std::size_t>(last_grad[static_cast<std::size_t>(s)])].ddp_launch = true;
    }
  }
}

// Note [Correlated sampling]: on a shared host the durations of one step are not independent:
// the host is slower or faster for a while, and one process more than the other. In the
// executor's profiles (bench/fidelity.sh, p = 2) 15-50% of the variance of log(duration / its
// kind's and stage's median) is common to a step and 15-70% to one rank's actions in one step
// (CostTable::step_correlation, rank_step_correlation). Independent draws then overstate a
// step's critical path (a max over sums of independent draws grows with their spread: sampled
// replay +6..+14% on those runs, while the medians alone gave -6..-19%). With correlations,
// an action's draw is at the quantile u = Phi(z) of its own distribution, z = sqrt(rs) z_step +
// sqrt(rr - rs) z_rank_step + sqrt(1 - rr) z_action (a Gaussian copula; the z are standard
// normals from the counter-based generator, keyed by the step, the (rank, step) and the action),
// so each kind keeps its measured distribution and the step shares its slowdowns. On the 24
// p = 2 runs of one bench/fidelity.sh, sampled replay MAPE went from 5.9% to 4.0% (max 14.0% to
// 10.4%). Message times stay independent: drawing them with the same copula made it 6.0%.
std::int64_t Engine::sampled_duration(std::int64_t fixed, std::size_t s, int slot, std::int32_t mb,
                                      std::int32_t step) const noexcept {
  const Quantiles& q = quantiles_[s][static_cast<std::size_t>(slot)];
  if (q.p50 < 0) return fixed;
  const std::uint64_t key = (static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ULL) ^
                            (static_cast<std::uint64_t>(s) << 40) ^
                            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(mb)) << 8) ^
                            static_cast<std::uint64_t>(slot);
  if (rho_rank_step_ <= 0) return sample(q, key);
  return at_quantile(q, correlated_uniform(key, step, plan_.shape.stage_to_rank[s]));
}

double Engine::correlated_uniform(std::uint64_t key, std::int32_t step,
                                  std::int32_t rank) const noexcept {
  const auto st = static_cast<std::uint64_t>(step) * 0xD6E8FEB86659FD93ULL;
  const auto r = static_cast<std::uint64_t>(rank);
  const double z = std::sqrt(rho_step_) * normal(st ^ 0x5354455053544550ULL) +
                   std::sqrt(rho_rank_step_ - rho_step_) * normal(st ^ ((r + 1) << 44)) +
                   std::sqrt(1 - rho_rank_step_) * normal(key);
  return std::clamp(0.5 * std::erfc(-z / std::sqrt(2.0)), 1e-12, 1 - 1e-12);
}

double Engine::normal(std::uint64_t key) const noexcept {  // Box-Muller
  return std::sqrt(-2 * std::log(uniform(key))) *
         std::cos(6.283185307179586 * uniform(key ^ 0xA0761D6478BD642FULL));
}

std::int64_t Engine::sampled_message_ns(const Op& op, std::int32_t step) const noexcept {
  const auto e = static_cast<std::size_t>(op.edge);
  if (p2p_quantiles_.p50 < 0) return edge_ns_[e];
  const std::uint64_t slot = op.kind == ActionKind::kSendF ? 5 : 6;
  const std::uint64_t key = (static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ULL) ^
                            (static_cast<std::uint64_t>(e) << 40) ^
                            (static_cast<std::uint64_t>(static_cast<std::uint32_t>(op.mb)) << 8) ^
                            slot;
  return sample(p2p_quantiles_, key);  // independent (Note [Correlated sampling])
}

double Engine::uniform(std::uint64_t key) const noexcept {
  // splitmix64 of (seed, the action's identity): a uniform u in (0, 1).
  std::uint64_t z = seed_ ^ key;
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
}

std::int64_t Engine::sample(const Quantiles& q, std::uint64_t key) const noexcept {
  return at_quantile(q, uniform(key));
}

std::int64_t Engine::at_quantile(const Quantiles& q, double u) noexcept {
  if (q.q.size() == 21) {  // the empirical quantile function, linear between 5% steps
    const double pos = u * 20;
    const auto lo = std::min<std::size_t>(static_cast<std::size_t>(pos), 19);
    const double frac = pos - static_cast<double>(lo);
    return q.q[lo] + static_cast<std::int64_t>(frac * static_cast<double>(q.q[lo + 1] - q.q[lo]));
  }
  // Piecewise-linear quantile function through (0.1, p10), (0.5, p50), (0.9, p90), extended
  // with the outer segments' slopes; never below half the p10.
  const double p10 = static_cast<double>(q.p10), p50 = static_cast<double>(q.p50),
               p90 = static_cast<double>(q.p90);
  const double v =
      u < 0.5 ? p50 + (u - 0.5) * (p50 - p10) / 0.4 : p50 + (u - 0.5) * (p90 - p50) / 0.4;
  return std::max(static_cast<std::int64_t>(v), q.p10 / 2);
}

void Engine::precompute_costs() {
  const std::int64_t overhead = ms_to_ns(costs_.compute_overhead_ms);
  comm_overhead_ns_ = ms_to_ns(costs_.comm_overhead_ms);
  f_ns_.resize(static_cast<std::size_t>(S_));
  b_ns_.resize(static_cast<std::size_t>(S_));
  i_ns_.resize(static_cast<std::size_t>(S_));
  w_ns_.resize(static_cast<std::size_t>(S_));
  opt_ns_.resize(static_cast<std::size_t>(S_));
  // Shared cores: means, not samples (Note [Shared cores]).
  sample_ = opt_.sample_durations_seed.has_value() && !shared_;
  seed_ = sample_ ? *opt_.sample_durations_seed : 0;
  if (sample_) quantiles_.assign(static_cast<std::size_t>(S_), {});
  rho_step_ = costs_.step_correlation;
  rho_rank_step_ = std::max(costs_.rank_step_correlation, rho_step_);
  act_bytes_.resize(static_cast<std::size_t>(S_));
  stage_param_bytes_.resize(static_cast<std::size_t>(S_));
  for (std::int32_t s = 0; s < S_; ++s) {
    const auto& c = costs_.stages[static_cast<std::size_t>(s)];
    const auto k = static_cast<std::size_t>(s);
    f_ns_[k] = ms_to_ns(c.forward_ms) + overhead;
    b_ns_[k] = ms_to_ns(c.backward_ms) + overhead;
    i_ns_[k] = ms_to_ns(c.input_grad_or_default_ms()) + overhead;
    w_ns_[k] = ms_to_ns(c.weight_grad_or_default_ms()) + overhead;
    opt_ns_[k] = c.optimizer_ms ? ms_to_ns(*c.optimizer_ms) : 0;
    if (shared_) {
      auto mean = [overhead](const std::optional<sched::KindStats>& st, std::int64_t& ns) {
        if (st && st->samples > 0) ns = ms_to_ns(st->mean_or_estimate_ms()) + overhead;
      };
      mean(c.forward_stats, f_ns_[k]);
      mean(c.backward_stats, b_ns_[k]);
      mean(c.input_grad_stats, i_ns_[k]);
      mean(c.weight_grad_stats, w_ns_[k]);
      if (c.optimizer_stats && c.optimizer_stats->samples > 0)
        opt_ns_[k] = ms_to_ns(c.optimizer_stats->mean_or_estimate_ms());
    }
    if (sample_) {
      auto q = [](const std::optional<sched::KindStats>& st, std::int64_t extra) {
        Quantiles out;
        if (st && st->samples > 0) {
          out.p10 = ms_to_ns(st->p10_ms) + extra;
          out.p50 = ms_to_ns(st->median_ms) + extra;
          out.p90 = ms_to_ns(st->p90_ms) + extra;
          for (double v : st->quantiles_ms) out.q.push_back(ms_to_ns(v) + extra);
        }
        return out;
      };
      quantiles_[k] = {q(c.forward_stats, overhead), q(c.backward_stats, overhead),
                       q(c.input_grad_stats, overhead), q(c.weight_grad_stats, overhead),
                       q(c.optimizer_stats, 0)};
    }
    act_bytes_[k] = c.activation_bytes;
    stage_param_bytes_[k] = c.param_bytes;
  }
  if (sample_ && !opt_.p2p_override_ms && costs_.p2p && costs_.p2p->per_message_ms &&
      costs_.p2p->stats && costs_.p2p->stats->samples > 0) {
    const auto& st = *costs_.p2p->stats;
    p2p_quantiles_.p10 = ms_to_ns(st.p10_ms);
    p2p_quantiles_.p50 = ms_to_ns(st.median_ms);
    p2p_quantiles_.p90 = ms_to_ns(st.p90_ms);
    for (double v : st.quantiles_ms) p2p_quantiles_.q.push_back(ms_to_ns(v));
  }
  edge_ns_.resize(static_cast<std::size_t>(E_));
  for (std::int32_t e = 0; e < E_; ++e) {
    const auto& ed = edges_[static_cast<std::size_t>(e)];
    const std::int64_t bytes = costs_.stages[static_cast<std::size_t>(ed.from)].output_bytes;
    edge_ns_[static_cast<std::size_t>(e)] =
        p2p_message_ns(plan_.shape, costs_, cluster_, opt_, ed, bytes);
  }
  // Data parallelism.
  bucket_ns_.assign(static_cast<std::size_t>(S_), {});
  bucket_cum_.assign(static_cast<std::size_t>(S_), {});
  rank_localsgd_ns_.assign(static_cast<std::size_t>(R_), 0);
  rank_slowmo_ns_.assign(static_cast<std::size_t>(R_), 0);
  if (dp_ <= 1) return;
  for (std::int32_t s = 0; s < S_; ++s) {
    const auto r = plan_.shape.stage_to_rank[static_cast<std::size_t>(s)];
    const DpGroup group = dp_group(cluster_, r, R_, dp_);
    if (opt_.dp.algorithm == DpAlgorithm::kDdp) {
      const auto plan = ddp_buckets(costs_.stages[static_cast<std::size_t>(s)], opt_.dp);
      for (std::size_t b = 0; b < plan.bytes.size(); ++b) {
        bucket_ns_[static_cast<std::size_t>(s)].push_back(
            allreduce_ns(cluster_.collective, group.link, dp_, plan.bytes[b]));
      }
      bucket_cum_[static_cast<std::size_t>(s)] = plan.cumulative_bytes;
    }
  }
  for (std::int32_t r = 0; r < R_; ++r) {
    std::int64_t bytes = 0;
    for (auto s : plan_.shape.stages_of_rank(r))
      bytes += stage_param_bytes_[static_cast<std::size_t>(s)];
    const DpGroup group = dp_group(cluster_, r, R_, dp_);
    rank_localsgd_ns_[static_cast<std::size_t>(r)] =
        allreduce_ns(cluster_.collective, group.link, dp_, bytes);
    rank_slowmo_ns_[static_cast<std::size_t>(r)] = 2 * reduce_ns(group.link, dp_, bytes);
  }
}

std::string Engine::describe_slot(std::size_t slot) const {
  const std::size_t per_step = rows_per_step_ * static_cast<std::size_t>(M_);
  const auto step = static_cast<std::int32_t>(slot / per_step);
  const auto mb = static_cast<std::int32_t>(slot % static_cast<std::size_t>(M_));
  std::size_t rest = (slot % per_step) / static_cast<std::size_t>(M_);
  std::ostringstream os;
  if (rest < static_cast<std::size_t>(S_)) {
    os << rest << "F" << mb;
  } else if (rest < 2 * static_cast<std::size_t>(S_)) {
    os << "the input gradient of stage " << rest - S_ << " microbatch " << mb << " (B or I)";
  } else {
    rest -= 2 * static_cast<std::size_t>(S_);
    const auto kind = static_cast<int>(rest / static_cast<std::size_t>(E_));
    const auto& ed = edges_[rest % static_cast<std::size_t>(E_)];
    static const char* kWhat[] = {"the activation message", "the RECV_F of the activation",
                                  "the gradient message", "the RECV_B of the gradient"};
    os << kWhat[kind] << " of microbatch " << mb << " on edge " << ed.from << " -> " << ed.to;
    const bool pending =
        kind % 2 == 1 && slot_posted(slots_[slot - static_cast<std::size_t>(E_) * M_]) >= 0;
    if (pending) os << " (posted, but the message never arrives";
    if (pending && kind == 1) os << ": " << ed.from << "SEND_F" << mb << " is missing?)";
    if (pending && kind == 3) os << ": " << ed.to << "SEND_B" << mb << " is missing?)";
    if (kind == 0) os << " (nobody sends it: " << ed.from << "SEND_F" << mb << " is missing?)";
    if (kind == 2) os << " (nobody sends it: " << ed.to << "SEND_B" << mb << " is missing?)";
  }
  os << ", step " << step;
  return os.str();
}

// A posted (non-blocking) receive: completes at max(post time, arrival), independently of other
// receives (torch posts them as batched irecv). The compute that consumes the data waits for the
// "received" slot; the rank itself goes on.
void Engine::post_recv(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                       std::size_t arrived, std::size_t received) {
  const auto idx = record(op, r, step, Stream::kRecv, st.time, st.time, st.last_compute);
  if (slot_known(slots_[arrived])) {
    complete_recv(arrived, received, st.time, idx, st.last_compute);
  } else {
    slots_[arrived] = -(st.time + 1);
    if (record_) {
      recv_prev_[arrived] = st.last_compute;
      recv_record_[arrived] = idx;
    }
  }
}

void Engine::complete_recv(std::size_t arrived, std::size_t received, std::int64_t post,
                           std::int64_t idx, std::int64_t prev) {
  const std::int64_t at = slot_time(slots_[arrived]);
  const std::int64_t done = std::max(post, at);
  if (record_) {
    auto& a = result_.actions[static_cast<std::size_t>(idx)];
    a.end_ns = done;
    a.match = slot_src_[arrived];
    a.pred = at > post ? slot_src_[arrived] : prev;
  }
  set_slot(received, done, idx);
}

void Engine::slot_pending(std::size_t slot, std::int64_t old, std::int64_t t) {
  if (((-old) & kWaiters) == 0) {
    // A receive was posted before the message arrived; the "received" slot is E_ rows later
    // (see erow()).
    const std::int64_t post = -old - 1;
    complete_recv(slot, slot + static_cast<std::size_t>(E_) * M_, post,
                  record_ ? recv_record_[slot] : -1, record_ ? recv_prev_[slot] : -1);
    return;
  }
  std::int32_t w = static_cast<std::int32_t>(((-old) & ~kWaiters) - 1);
  while (w >= 0) {
    auto& ws = ranks_[static_cast<std::size_t>(w)];
    const std::int32_t next = ws.next_waiter;
    ws.next_waiter = -1;
    ws.parked_slot = -1;
    push_event(std::max(t, ws.time), w, EventKind::kResume, 0);
    w = next;
  }
}

void Engine::park(std::int32_t r, std::size_t slot) {
  auto& st = ranks_[static_cast<std::size_t>(r)];
  const Slot old = slots_[slot];
  PW_ASSERT(old == 0 || (old < 0 && ((-old) & kWaiters) != 0),
            "engine: rank " << r << " parks on a slot with a posted receive");
  st.parked_slot = static_cast<std::int64_t>(slot);
  st.next_waiter = old == 0 ? -1 : static_cast<std::int32_t>(((-old) & ~kWaiters) - 1);
  slots_[slot] = -(kWaiters | (static_cast<std::int64_t>(r) + 1));
}

std::int64_t Engine::record_action(const Op& op, std::int32_t r, std::int32_t step, Stream stream,
                                   std::int64_t start, std::int64_t end, std::int64_t pred) {
  TimedAction t;
  t.action.stage = op.stage;
  t.action.kind = op.kind;
  t.action.microbatch = op.mb;
  if (op.edge >= 0) {
    const auto& ed = edges_[static_cast<std::size_t>(op.edge)];
    t.action.peer_stage = ed.from == op.stage ? ed.to : ed.from;
    t.peer_rank = plan_.shape.stage_to_rank[static_cast<std::size_t>(t.action.peer_stage)];
  }
  t.rank = r;
  t.step = step;
  t.stream = stream;
  t.start_ns = start;
  t.end_ns = end;
  t.pred = pred;
  result_.actions.push_back(t);
  return static_cast<std::int64_t>(result_.actions.size()) - 1;
}

void Engine::memory_point(std::int32_t r, RankState& st, std::int64_t t) {
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  const std::int64_t bytes = rr.static_memory_bytes + st.activation_bytes;
  auto& tl = rr.memory_timeline;
  if (!tl.empty() && tl.back().time_ns == t) {
    tl.back().bytes = bytes;
  } else {
    tl.push_back(MemoryPoint{t, bytes});
  }
}

void Engine::launch_ddp(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                        std::int64_t start, std::int64_t end, std::int64_t src) {
  const auto s = static_cast<std::size_t>(op.stage);
  const auto& ns = bucket_ns_[s];
  const auto& cum = bucket_cum_[s];
  const std::int64_t total = cum.empty() ? 0 : cum.back();
  std::int64_t done = end;
  for (std::size_t b = 0; b < ns.size(); ++b) {
    // Gradients become ready in reverse registration order, evenly by bytes over the backward.
    const long double frac =
        total > 0 ? static_cast<long double>(cum[b]) / static_cast<long double>(total) : 1.0L;
    const std::int64_t ready =
        start +
        static_cast<std::int64_t>(std::llround(frac * static_cast<long double>(end - start)));
    const std::int64_t bstart = std::max(ready, st.dp_free);
    const std::int64_t bend = bstart + ns[b];
    const std::int64_t pred = ready >= st.dp_free ? src : st.last_dp;
    st.dp_free = bend;
    done = bend;
    result_.per_rank[static_cast<std::size_t>(r)].dp_comm_ns += ns[b];
    if (record_) {
      Op cop{ActionKind::kReduceGrad, op.stage, -1, -1, false, false};
      const auto idx = record(cop, r, step, Stream::kDpAllReduce, bstart, bend, pred);
      result_.actions[static_cast<std::size_t>(idx)].collective = Collective::kDdpBucket;
      result_.actions[static_cast<std::size_t>(idx)].bucket = static_cast<std::int32_t>(b);
      st.last_dp = idx;
    }
  }
  ddp_done_[static_cast<std::size_t>(step) * S_ + s] = done;
}

// A compute action (F, B, I, W, OPTIM) whose inputs are known and which can start at `start`.
// With dedicated devices it ends at start + work. With shared cores (Note [Shared cores]) it
// starts when the event clock reaches `start` and ends when its work is done at the speed the
// node's other computing ranks leave it; returns false until then.
bool Engine::run_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                         std::int64_t start, std::int64_t pred, std::int64_t work) {
  if (!shared_) {
    finish_compute(r, st, op, step, start, start + work, pred);
    return true;
  }
  if (start > now_) {  // come back when the clock gets there (the rank is not parked)
    push_event(start, r, EventKind::kResume, 0);
    return false;
  }
  PW_ASSERT(start == now_, "engine: rank " << r << " starts a compute action at " << start
                                           << " ns, behind the event clock at " << now_ << " ns");
  st.run_start = start;
  st.run_pred = pred;
  begin_activity(r, work);
  return false;
}

// Activity a joins its node's running set with `work` ns at full speed.
void Engine::begin_activity(std::int32_t a, std::int64_t work) {
  const std::int32_t r = a % R_;
  Node& nd = nodes_[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(r)])];
  advance(nd);
  act_left_[static_cast<std::size_t>(a)] = static_cast<double>(work);
  nd.load += weight_[static_cast<std::size_t>(r)];
  nd.running.push_back(a);
  reschedule(nd);
}

void Engine::end_activity(std::int32_t a) {
  const std::int32_t r = a % R_;
  Node& nd = nodes_[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(r)])];
  advance(nd);
  nd.running.erase(std::find(nd.running.begin(), nd.running.end(), a));
  nd.load -= weight_[static_cast<std::size_t>(r)];
  ++act_version_[static_cast<std::size_t>(a)];
  reschedule(nd);
}

// Shared cores: the next queued SEND of rank r takes the send stream when the rank has reached
// it and the previous send is done; it moves the bytes at the speed its node's load leaves it.
void Engine::start_send(std::int32_t r) {
  const auto k = static_cast<std::size_t>(r);
  if (send_state_[k] != 0 || sends_[k].empty()) return;
  auto& st = ranks_[k];
  const PendingSend& ps = sends_[k].front();
  const std::int64_t start = std::max(ps.ready, st.send_free);
  if (start > now_) {
    send_state_[k] = 1;
    push_event(start, r, EventKind::kSendStart, 0);
    return;
  }
  send_state_[k] = 2;
  send_start_[k] = now_;
  begin_activity(R_ + r, message_ns(ops_[k][ps.pos], ps.step));
}

void Engine::complete_send(std::int32_t r, std::uint32_t version) {
  const auto k = static_cast<std::size_t>(r);
  const auto a = static_cast<std::size_t>(R_ + r);
  if (version != act_version_[a]) return;  // stale
  end_activity(R_ + r);
  const PendingSend ps = sends_[k].front();
  sends_[k].pop_front();
  send_state_[k] = 0;
  auto& st = ranks_[k];
  auto& rr = result_.per_rank[k];
  const Op& op = ops_[k][ps.pos];
  const std::int64_t start = send_start_[k];
  const auto pred = st.send_free > ps.ready ? st.last_send : ps.pred;
  const auto idx = record(op, r, ps.step, Stream::kSend, start, now_, pred);
  st.send_free = now_;
  st.last_send = idx;
  rr.send_ns += now_ - start;
  auto& step_end = result_.step_end_ns[static_cast<std::size_t>(ps.step)];
  step_end = std::max(step_end, now_);
  if (st.finished) rr.finish_ns = std::max(rr.finish_ns, now_);
  set_slot(slot_base(ps.step) + eslot(op.kind == ActionKind::kSendF ? 0 : 2, op.edge, op.mb), now_,
           idx);
  start_send(r);
}

void Engine::finish_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                            std::int64_t start, std::int64_t end, std::int64_t pred) {
  const std::size_t base = slot_base(step);
  const auto s = static_cast<std::size_t>(op.stage);
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  if (op.kind != ActionKind::kOptimizerStep) {
    rr.recv_wait_ns += start - st.time;
    rr.busy_ns += end - start;
  }
  const auto idx = record(op, r, step, Stream::kCompute, start, end, pred);
  st.time = end;
  st.last_compute = idx;
  switch (op.kind) {
    case ActionKind::kForward:
      memory_change(r, st, start, act_bytes_[s], 1);
      set_slot(base + fdone(op.stage, op.mb), end, idx);
      break;
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput: {
      const bool full = op.kind == ActionKind::kFullBackward;
      if (full) memory_change(r, st, end, -act_bytes_[s], -1);
      set_slot(base + bdone(op.stage, op.mb), end, idx);
      if (full && op.ddp_launch && dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp)
        launch_ddp(r, st, op, step, start, end, idx);
      break;
    }
    case ActionKind::kBackwardWeight:
      memory_change(r, st, end, -act_bytes_[s], -1);
      if (op.ddp_launch && dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp)
        launch_ddp(r, st, op, step, start, end, idx);
      break;
    default:
      break;
  }
}

void Engine::push_event(std::int64_t t, std::int32_t r, EventKind kind, std::uint32_t version) {
  heap_.push_back(Event{t, seq_++, r, kind, version});
  std::push_heap(heap_.begin(), heap_.end(), EventLater{});
}

// Progress of the node's running actions from its last change to now_ at the speed they had.
void Engine::advance(Node& nd) {
  if (!nd.running.empty() && now_ > nd.last) {
    const double done = static_cast<double>(now_ - nd.last) * nd.rate;
    for (auto a : nd.running) act_left_[static_cast<std::size_t>(a)] -= done;
  }
  nd.last = now_;
}

// New speed after the set of computing ranks changed; every running action gets a new end event
// (the old ones are recognised as stale by their version).
void Engine::reschedule(Node& nd) {
  nd.rate = nd.load > cores_ ? static_cast<double>(cores_) / static_cast<double>(nd.load) : 1.0;
  for (auto a : nd.running) {
    const auto k = static_cast<std::size_t>(a);
    const double left = std::max(0.0, act_left_[k]);
    push_event(now_ + static_cast<std::int64_t>(std::ceil(left / nd.rate)), a % R_,
               a < R_ ? EventKind::kDone : EventKind::kSendDone, ++act_version_[k]);
  }
}

// The end event of rank r's running compute action.
void Engine::complete(std::int32_t r, std::uint32_t version) {
  auto& st = ranks_[static_cast<std::size_t>(r)];
  if (version != act_version_[static_cast<std::size_t>(r)]) return;  // stale: the speed changed
  end_activity(r);
  finish_compute(r, st, ops_[static_cast<std::size_t>(r)][st.pos], st.step, st.run_start, now_,
                 st.run_pred);
  step_forward(r, st);
  resume(r);
}

// Executes op if its inputs are known; returns false (after parking) otherwise.
bool Engine::execute(std::int32_t r, RankState& st, const Op& op, std::int32_t step) {
  const std::size_t base = slot_base(step);
  const auto s = static_cast<std::size_t>(op.stage);
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  Slot* const slots = slots_.data() + base;
  auto need = [&](std::size_t slot) {
    if (slot_known(slots[slot])) return true;
    park(r, base + slot);
    return false;
  };
  // Like need(), and moves `start` (and its critical-path predecessor) past the slot's time.
  auto ready = [&](std::size_t slot, std::int64_t& start, std::int64_t& pred) {
    const Slot v = slots[slot];
    if (!slot_known(v)) {
      park(r, base + slot);
      return false;
    }
    if (v - 1 > start) {
      start = v - 1;
      pred = record_ ? slot_src_[base + slot] : -1;
    }
    return true;
  };
  switch (op.kind) {
    case ActionKind::kForward: {
      std::int64_t start = st.time;
      std::int64_t pred = st.last_compute;
      for (std::int32_t k = f_deps_begin_[s], n = f_deps_begin_[s + 1]; k < n; ++k) {
        if (!ready(at(static_cast<std::size_t>(deps_[static_cast<std::size_t>(k)]), op.mb), start,
                   pred))
          return false;
      }
      return run_compute(r, st, op, step, start, pred, duration(f_ns_[s], s, 0, op.mb, step));
    }
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput: {
      if (!need(fdone(op.stage, op.mb))) return false;
      std::int64_t start = st.time;
      std::int64_t pred = st.last_compute;
      for (std::int32_t k = b_deps_begin_[s], n = b_deps_begin_[s + 1]; k < n; ++k) {
        if (!ready(at(static_cast<std::size_t>(deps_[static_cast<std::size_t>(k)]), op.mb), start,
                   pred))
          return false;
      }
      const std::int64_t dur = op.kind == ActionKind::kFullBackward
                                   ? duration(b_ns_[s], s, 1, op.mb, step)
                                   : duration(i_ns_[s], s, 2, op.mb, step);
      return run_compute(r, st, op, step, start, pred, dur);
    }
    case ActionKind::kBackwardWeight: {
      if (!need(bdone(op.stage, op.mb))) return false;
      return run_compute(r, st, op, step, st.time, st.last_compute,
                         duration(w_ns_[s], s, 3, op.mb, step));
    }
    case ActionKind::kSendF:
    case ActionKind::kSendB: {
      const bool fwd = op.kind == ActionKind::kSendF;
      if (!need(fwd ? fdone(op.stage, op.mb) : bdone(op.stage, op.mb))) return false;
      st.time += comm_overhead_ns_ & -static_cast<std::int64_t>(op.batch_head);
      if (shared_ && costs_.p2p_uses_core) {  // competes for the node's cores (Note [Shared cores])
        sends_[static_cast<std::size_t>(r)].push_back(
            PendingSend{st.pos, step, st.time, st.last_compute});
        start_send(r);
        return true;
      }
      const std::int64_t start = std::max(st.time, st.send_free);
      const std::int64_t end = start + message_ns(op, step);
      const auto pred = st.send_free > st.time ? st.last_send : st.last_compute;
      const auto idx = record(op, r, step, Stream::kSend, start, end, pred);
      st.send_free = end;
      st.last_send = idx;
      rr.send_ns += end - start;
      set_slot(base + eslot(fwd ? 0 : 2, op.edge, op.mb), end, idx);
      return true;
    }
    case ActionKind::kRecvF:
    case ActionKind::kRecvB: {
      const bool fwd = op.kind == ActionKind::kRecvF;
      const std::size_t arrived = eslot(fwd ? 0 : 2, op.edge, op.mb);
      if (!opt_.blocking_recv) {
        st.time += comm_overhead_ns_ & -static_cast<std::int64_t>(op.batch_head);
        post_recv(r, st, op, step, base + arrived, base + eslot(fwd ? 1 : 3, op.edge, op.mb));
        return true;
      }
      if (!need(arrived)) return false;
      st.time += comm_overhead_ns_ & -static_cast<std::int64_t>(op.batch_head);
      const std::int64_t arrival = slot_time(slots[arrived]);
      const std::int64_t start = st.time;
      const std::int64_t end = std::max(start, arrival);
      const auto send_idx = record_ ? slot_src_[base + arrived] : -1;
      const auto idx = record(op, r, step, Stream::kRecv, start, end,
                              arrival > start ? send_idx : st.last_compute);
      if (record_) result_.actions[static_cast<std::size_t>(idx)].match = send_idx;
      rr.recv_wait_ns += end - start;
      st.time = end;
      st.last_compute = idx;
      set_slot(base + eslot(fwd ? 1 : 3, op.edge, op.mb), end, idx);
      return true;
    }
    case ActionKind::kReduceGrad: {
      std::int64_t end = st.time;
      std::int64_t pred = st.last_compute;
      if (dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp && !bucket_ns_[s].empty()) {
        const std::int64_t done = ddp_done_[static_cast<std::size_t>(step) * S_ + s];
        PW_CHECK(done != kUnknown, InvalidPlanError,
                 "plan: rank " << r << ": " << op.stage
                               << "REDUCE_GRAD comes before the last backward of stage "
                               << op.stage);
        if (done > end) {
          rr.dp_exposed_ns += done - end;
          end = done;
          pred = st.last_dp;
        }
      }
      const auto idx = record(op, r, step, Stream::kCompute, st.time, end, pred);
      st.time = end;
      st.last_compute = idx;
      return true;
    }
    case ActionKind::kOptimizerStep:
      // The stage's optimizer time (profiles measure it; 0 when the cost table has none).
      return run_compute(r, st, op, step, st.time, st.last_compute,
                         duration(opt_ns_[s], s, 4, -1, step));
  }
  return true;
}

void Engine::end_of_step(std::int32_t r, RankState& st, std::int32_t step) {
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  if (dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp) {
    // Stages whose plan has no REDUCE_GRAD: the step ends when their buckets are reduced.
    for (std::int32_t s = 0; s < S_; ++s) {
      if (plan_.shape.stage_to_rank[static_cast<std::size_t>(s)] != r ||
          explicit_reduce_[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)] != 0)
        continue;
      const std::int64_t done = ddp_done_[static_cast<std::size_t>(step) * S_ + s];
      if (done > st.time) {
        rr.dp_exposed_ns += done - st.time;
        st.time = done;
        st.last_compute = st.last_dp;
      }
    }
  }
  if (dp_ > 1 && opt_.dp.algorithm != DpAlgorithm::kDdp) {
    const bool average = (step + 1) % opt_.dp.localsgd_frequency == 0;
    const bool slowmo =
        opt_.dp.algorithm == DpAlgorithm::kSlowMo && (step + 1) % opt_.dp.slowmo_frequency == 0;
    auto blocking = [&](std::int64_t ns, Collective kind) {
      if (ns <= 0) return;
      const std::int64_t start = std::max(st.time, st.dp_free);
      const std::int64_t end = start + ns;
      rr.dp_comm_ns += ns;
      rr.dp_exposed_ns += end - st.time;
      if (record_) {
        Op cop{ActionKind::kReduceGrad, -1, -1, -1, false, false};
        const auto idx = record(cop, r, step, Stream::kDpAllReduce, start, end, st.last_compute);
        result_.actions[static_cast<std::size_t>(idx)].collective = kind;
        st.last_dp = idx;
        st.last_compute = idx;
      }
      st.time = end;
      st.dp_free = end;
    };
    if (average) blocking(rank_localsgd_ns_[static_cast<std::size_t>(r)], Collective::kLocalSgd);
    if (slowmo) blocking(rank_slowmo_ns_[static_cast<std::size_t>(r)], Collective::kSlowMo);
  }
  // The step is over on this rank when compute, sends and collectives are all done.
  const std::int64_t finish = std::max({st.time, st.send_free, st.dp_free});
  auto& end = result_.step_end_ns[static_cast<std::size_t>(step)];
  end = std::max(end, finish);
}

void Engine::step_forward(std::int32_t r, RankState& st) {
  ++st.pc;
  if (++st.pos == ops_[static_cast<std::size_t>(r)].size()) {
    end_of_step(r, st, st.step);
    st.pos = 0;
    ++st.step;
  }
}

void Engine::resume(std::int32_t r) {
  auto& st = ranks_[static_cast<std::size_t>(r)];
  const auto& ops = ops_[static_cast<std::size_t>(r)];
  const std::size_t len = ops.size();
  const std::size_t total = len * static_cast<std::size_t>(K_);
  while (st.pc < total) {
    if (!execute(r, st, ops[st.pos], st.step)) return;
    step_forward(r, st);
  }
  if (!st.finished) {
    st.finished = true;
    if (len == 0) {
      for (std::int32_t k = 0; k < K_; ++k) end_of_step(r, st, k);
    }
    auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
    rr.finish_ns = std::max({st.time, st.send_free, st.dp_free});
  }
}

void Engine::setup_shared_cores() {
  cores_ = cluster_.cores_per_node > 0 ? cluster_.cores_per_node : costs_.cores_per_node;
  shared_ = false;
  if (cores_ <= 0) return;
  node_of_.assign(static_cast<std::size_t>(R_), 0);
  weight_.assign(static_cast<std::size_t>(R_), 0);
  std::vector<std::int32_t> cluster_node;  // nodes_ index -> cluster node
  std::vector<std::int32_t> load;
  for (std::int32_t r = 0; r < R_; ++r) {
    const auto node = cluster_.node_of(cluster_.global_rank(r, 0, R_, dp_));
    std::int32_t w = 0;
    for (std::int32_t j = 0; j < dp_; ++j)
      w += cluster_.node_of(cluster_.global_rank(r, j, R_, dp_)) == node ? 1 : 0;
    auto it = std::find(cluster_node.begin(), cluster_node.end(), node);
    if (it == cluster_node.end()) {
      cluster_node.push_back(node);
      load.push_back(0);
      it = cluster_node.end() - 1;
    }
    const auto k = static_cast<std::size_t>(it - cluster_node.begin());
    node_of_[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(k);
    weight_[static_cast<std::size_t>(r)] = w;
    load[k] += w;
  }
  for (auto l : load) shared_ = shared_ || l > cores_;
  nodes_.assign(cluster_node.size(), Node{});
  act_left_.assign(2 * static_cast<std::size_t>(R_), 0.0);
  act_version_.assign(2 * static_cast<std::size_t>(R_), 0);
  sends_.assign(static_cast<std::size_t>(R_), {});
  send_state_.assign(static_cast<std::size_t>(R_), 0);
  send_start_.assign(static_cast<std::size_t>(R_), 0);
}

void Engine::throw_deadlock() const {
  std::ostringstream os;
  os << "plan deadlocks: ";
  bool first = true;
  for (std::int32_t r = 0; r < R_; ++r) {
    const auto& st = ranks_[static_cast<std::size_t>(r)];
    if (st.finished) continue;
    const auto& ops = ops_[static_cast<std::size_t>(r)];
    const std::size_t len = ops.size();
    const std::size_t pos = st.pc % len;
    const Action& a = plan_.per_rank[static_cast<std::size_t>(r)][pos];
    if (!first) os << "; ";
    first = false;
    os << "rank " << r << " is blocked at position " << pos << " (" << sched::to_string(a)
       << ", step " << st.pc / len << ") waiting for "
       << (st.parked_slot >= 0 ? describe_slot(static_cast<std::size_t>(st.parked_slot))
                               : std::string("?"));
  }
  throw InvalidPlanError(os.str());
}

SimResult Engine::run() {
  validate_inputs();
  dp_ = opt_.dp.replicas;
  K_ = opt_.steps;
  record_ = opt_.record_actions;
  decode_plan();
  setup_shared_cores();
  precompute_costs();

  rows_per_step_ = 2 * static_cast<std::size_t>(S_) + 4 * static_cast<std::size_t>(E_);
  const std::size_t slots =
      rows_per_step_ * static_cast<std::size_t>(M_) * static_cast<std::size_t>(K_);
  PW_CHECK(slots <= (std::size_t{1} << 31), ConfigError,
           "plan too large to simulate: " << slots
                                          << " dependency slots (stages x microbatches x steps)");
  // Every field -1; a byte fill is much cheaper than element-wise construction for millions.
  PW_CHECK(slots_.allocate(slots), ConfigError,
           "plan too large to simulate: cannot allocate " << slots << " dependency slots");
  if (record_) slot_src_.assign(slots, -1);
  if (!opt_.blocking_recv && record_) {
    recv_prev_.assign(slots, -1);
    recv_record_.assign(slots, -1);
  }
  ddp_done_.assign(static_cast<std::size_t>(K_) * S_, kUnknown);

  result_.schedule = plan_.shape.schedule;
  result_.ranks = R_;
  result_.stages = S_;
  result_.microbatches = M_;
  result_.dp = dp_;
  result_.steps = K_;
  result_.micro_batch_size = opt_.micro_batch_size;
  result_.device_memory_bytes = cluster_.device_memory_bytes;
  result_.step_end_ns.assign(static_cast<std::size_t>(K_), 0);
  result_.per_rank.resize(static_cast<std::size_t>(R_));
  std::size_t total_actions = 0;
  for (const auto& ops : ops_) total_actions += ops.size();
  result_.simulated_actions = static_cast<std::int64_t>(total_actions) * K_;
  if (record_) result_.actions.reserve(total_actions * static_cast<std::size_t>(K_) + 16);

  const double opt_factor = optimizer_state_factor(opt_.optimizer, opt_.momentum);
  for (std::int32_t r = 0; r < R_; ++r) {
    auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
    rr.rank = r;
    std::int64_t params = 0;
    for (auto s : plan_.shape.stages_of_rank(r))
      params += stage_param_bytes_[static_cast<std::size_t>(s)];
    // parameters + gradients (same dtype) + optimizer state.
    rr.static_memory_bytes =
        2 * params +
        static_cast<std::int64_t>(std::llround(opt_factor * static_cast<double>(params)));
    if (opt_.record_memory_timeline) rr.memory_timeline.push_back({0, rr.static_memory_bytes});
  }

  ranks_.assign(static_cast<std::size_t>(R_), RankState{});
  heap_.reserve(static_cast<std::size_t>(R_) * 2);
  for (std::int32_t r = 0; r < R_; ++r) heap_.push_back(Event{0, seq_++, r, EventKind::kResume, 0});
  std::make_heap(heap_.begin(), heap_.end(), EventLater{});
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), EventLater{});
    const Event ev = heap_.back();
    heap_.pop_back();
    now_ = ev.time_ns;
    switch (ev.kind) {
      case EventKind::kResume:
        resume(ev.rank);
        break;
      case EventKind::kDone:
        complete(ev.rank, ev.version);
        break;
      case EventKind::kSendStart:
        send_state_[static_cast<std::size_t>(ev.rank)] = 0;
        start_send(ev.rank);
        break;
      case EventKind::kSendDone:
        complete_send(ev.rank, ev.version);
        break;
    }
  }
  for (const auto& st : ranks_) {
    if (!st.finished) throw_deadlock();
  }
  for (std::int32_t r = 0; r < R_; ++r) {
    const auto& st = ranks_[static_cast<std::size_t>(r)];
    auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
    rr.peak_activation_bytes = st.peak_activation_bytes;
    rr.peak_activation_microbatches = st.peak_microbatches;
  }

  std::int64_t makespan = 0;
  for (const auto& rr : result_.per_rank) makespan = std::max(makespan, rr.finish_ns);
  result_.makespan_ns = makespan;
  for (auto& rr : result_.per_rank) {
    rr.idle_ns = makespan - rr.busy_ns;
    rr.peak_memory_bytes =
        costs_.runtime_memory_bytes + rr.static_memory_bytes + rr.peak_activation_bytes;
    rr.exceeds_memory =
        cluster_.device_memory_bytes > 0 && rr.peak_memory_bytes > cluster_.device_memory_bytes;
  }
  if (record_ && !result_.actions.empty()) {
    std::int64_t last = 0;
    for (std::size_t i = 1; i < result_.actions.size(); ++i) {
      if (result_.actions[i].end_ns > result_.actions[static_cast<std::size_t>(last)].end_ns)
        last = static_cast<std::int64_t>(i);
    }
    for (std::int64_t i = last; i >= 0; i = result_.actions[static_cast<std::size_t>(i)].pred)
      result_.critical_path.push_back(i);
    std::reverse(result_.critical_path.begin(), result_.critical_path.end());
  }
  return std::move(result_);
}

}  // namespace

double SimResult::bubble_fraction() const noexcept {
  if (makespan_ns <= 0 || per_rank.empty()) return 0.0;
  long double idle = 0;
  for (const auto& r : per_rank) idle += static_cast<long double>(r.idle_ns);
  return static_cast<double>(
      idle / (static_cast<long double>(per_rank.size()) * static_cast<long double>(makespan_ns)));
}

double SimResult::throughput_samples_per_s() const noexcept {
  if (micro_batch_size <= 0 || makespan_ns <= 0) return 0.0;
  const double samples = static_cast<double>(micro_batch_size) * microbatches * dp * steps;
  return samples / (static_cast<double>(makespan_ns) * 1e-9);
}

SimResult simulate(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                   const Cluster& cluster, const SimOptions& options) {
  return Engine(plan, costs, cluster, options).run();
}

double median_step_ms(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                      const Cluster& cluster, SimOptions options, std::int32_t steps,
                      std::uint64_t seed) {
  PW_CHECK(steps >= 1, ConfigError, "median_step_ms: steps must be >= 1, got " << steps);
  // Independent single steps: the executor ends every step with a loss all-reduce, so its steps
  // do not overlap across ranks as back-to-back simulated steps would.
  options.steps = 1;
  options.record_actions = false;
  options.record_memory_timeline = false;
  std::vector<double> ms;
  for (std::int32_t k = 0; k < steps; ++k) {
    options.sample_durations_seed = seed + static_cast<std::uint64_t>(k) * 0x632BE59BD9B4E019ULL;
    const SimResult r = simulate(plan, costs, cluster, options);
    ms.push_back(static_cast<double>(r.step_end_ns.empty() ? r.makespan_ns : r.step_end_ns[0]) /
                 1e6);
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

}  // namespace pipewright::sim
