// The discrete-event engine behind simulate() (private to sim/; simulator.cpp is the public
// API over it).
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
// change any result. Where streams share something (cores, Note [Shared cores]; node links,
// Note [Shared links]) those streams become activities of the sharing model instead, started by
// events at their start times and ended by its end events (engine_streams.cpp).
// The heap order makes the processing order, and with it every output, deterministic.
//
// Note [Slot layout]
// Slots are stored row by row: for each step, one row of M slots per fact kind and stage (F done,
// input gradient done) or edge (arrived / received, activation / gradient), slot = step base +
// row * M + microbatch. A rank walks its stages' microbatches in order, so each of its accesses
// lands next to its previous access of the same row: 8 slots share a cache line and the hardware
// prefetcher follows the rows. (Blocks per microbatch, the earlier layout, put every access of
// a p=64 plan on a different cache line: 2.2x slower at m=1024.) The facts are those of the
// dependency rules (sched/plan_dag.hpp) and the rows are their PlanRules::row() numbering:
// [F done: S][input gradient done: S][activation sent, received; gradient sent, received: E
// each], so a message's "received" row is E rows after its "sent" (arrived) row. What each op
// waits for and fills is asked of sched::PlanRules once per kind, stage and edge (deps_).
//
// The engine asks four replaceable models: the network model (network_model.hpp: message and
// collective times), the duration model (duration_model.hpp: compute and message durations,
// sampled or replayed), the core-sharing model (core_sharing.hpp, Note [Shared cores]:
// processor sharing when a host's ranks outnumber its cores) and the link-sharing model
// (link_sharing.hpp, Note [Shared links]: fair sharing of a node's link by concurrent transfers).
// The event queue (event_queue.hpp), the dependency slots (slots.hpp) and the decoded plan
// (program.hpp) are its private kernel.
//
// Dependencies are sched::PlanRules's (sched/plan_dag.hpp): F waits for its producers' F (same
// rank) or RECV_F, B/I for its own F and its consumers' B/I or RECV_B, W for its I, SEND_* for
// the local F or B/I it sends. A SEND starts when the rank's send stream is free (it never blocks
// compute) and fills the "arrived" slot at its end; RECV_* blocks compute until the arrival
// (posted receives: only the compute that needs it). A rank parked
// on a slot that only it could fill, or on a message nobody sends, is a deadlock: when the heap
// runs dry with unfinished ranks, simulate() throws InvalidPlanError naming each blocked rank,
// its action and what it waits for.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "costs/duration_model.hpp"
#include "engine/program.hpp"
#include "engine/slots.hpp"
#include "network/core_sharing.hpp"
#include "network/event_queue.hpp"
#include "network/network_model.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/plan_dag.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// When DDP bucket b of a stage is ready: gradients become final in reverse registration order,
// evenly by bytes over the last backward [start, end] (cum: cumulative bucket bytes).
inline std::int64_t ddp_bucket_ready_ns(const std::vector<std::int64_t>& cum, std::size_t b,
                                        std::int64_t start, std::int64_t end) noexcept {
  const std::int64_t total = cum.empty() ? 0 : cum.back();
  const long double frac =
      total > 0 ? static_cast<long double>(cum[b]) / static_cast<long double>(total) : 1.0L;
  return start +
         static_cast<std::int64_t>(std::llround(frac * static_cast<long double>(end - start)));
}

struct RankState {
  std::size_t pc = 0;          // index into the repeated program: step * len + position
  std::size_t pos = 0;         // pc % len
  std::int32_t step = 0;       // pc / len
  std::int64_t time = 0;       // compute stream free
  std::int64_t send_free = 0;  // send stream free
  // Note [Compute beside a send]: while its messages cross a loaded link ([load_from,
  // load_until), as posted), the rank computes at 1 / (1 + load) of its speed.
  std::int64_t load_from = 0, load_until = 0;
  double load = 0;
  std::int64_t dp_free = 0;        // dp-allreduce stream free
  std::int64_t last_compute = -1;  // record index of the action that set `time`
  std::int64_t last_send = -1;
  std::int64_t last_dp = -1;
  std::int64_t parked_slot = -1;
  std::int32_t next_waiter = -1;      // intrusive list of ranks parked on the same slot
  std::int64_t activation_bytes = 0;  // with record_memory_timeline (Note [Memory model])
  // Shared cores: the running compute action's start and predecessor.
  std::int64_t run_start = 0;
  std::int64_t run_pred = -1;
  bool finished = false;
  // Shared links (Note [Shared links]): the rank waits for its DDP buckets (at REDUCE_GRAD, or
  // at the end of the step for a stage without one: then step_end_wait).
  bool ddp_wait = false;
  bool step_end_wait = false;
  // Shared links: ZeRO-2/3 reduce-scatters queued on the links that the rank's next action waits
  // for (Note [Gradient waits]); after_wait: the action at pos ran, the rank moves on after them.
  std::int32_t zero_pending = 0;
  bool after_wait = false;
  // Shared cores (Note [Collectives on shared cores]): a LocalSGD / SlowMo / SGP / DiLoCo sync
  // running as the rank's compute-stream activity at the end of step core_step (its collective
  // core_kind, started at core_start after core_src); the rank waits for it.
  bool sync_on_core = false;
  Collective core_kind = Collective::kNone;
  std::int32_t core_step = 0;
  std::int64_t core_start = 0;
  std::int64_t core_src = -1;
  std::int64_t core_comm = 0;  // the collective's time alone
  // Note [Posted batches]: when the rank posted its current batch of SEND/RECV actions, and its
  // compute then.
  std::int64_t batch_post = 0;
  std::int64_t batch_pred = -1;
};

// The replaceable models (Note [Engine]); a null one is replaced by the default built from the
// plan, costs, cluster and options (make_analytical_network, make_table_durations,
// make_processor_sharing, make_fair_link_sharing).
struct EngineModels {
  std::unique_ptr<NetworkModel> network;
  std::unique_ptr<DurationModel> durations;
  std::unique_ptr<CoreSharing> cores;
  std::unique_ptr<LinkSharing> links;
};

class Engine {
 public:
  Engine(const sched::LoweredPlan& plan, const sched::CostTable& costs, const Cluster& cluster,
         const SimOptions& options, EngineModels models = {})
      : plan_(plan),
        costs_(costs),
        cluster_(cluster),
        opt_(options),
        network_(std::move(models.network)),
        durations_(std::move(models.durations)),
        cores_(std::move(models.cores)),
        links_(std::move(models.links)) {}

  // Runs the simulation once (simulate() in simulator.hpp has the contract).
  SimResult run();

 private:
  void resolve_deps();
  // Slot layout (Note [Slot layout]): per step, rows_per_step_ rows of M_ slots, one row per
  // fact kind and stage or edge; slot = step base + row * M_ + microbatch:
  //   rows [F done: S][input gradient done: S][edge rows: 4 x E]
  std::size_t slot_base(std::int32_t step) const noexcept {
    return static_cast<std::size_t>(step) * M_ * rows_per_step_;
  }
  std::size_t at(std::size_t row, std::int32_t mb) const noexcept {
    return row * static_cast<std::size_t>(M_) + static_cast<std::size_t>(mb);
  }
  // The slot (within a step) of need k of an op: deps_[k]'s row, microbatch mb.
  std::size_t row_slot(std::int32_t k, std::int32_t mb) const noexcept {
    return at(static_cast<std::size_t>(deps_[static_cast<std::size_t>(k)]), mb);
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
  void complete(std::int32_t r, std::uint32_t version);
  // Event-driven streams (engine_streams.cpp): which ones, from the plan (Note [Shared links]);
  // a rank's queued SENDs on shared cores or links; its DDP buckets on shared links.
  void plan_streams();
  void start_send(std::int32_t r);
  void complete_send(std::int32_t r, std::uint32_t version);
  void queue_ddp(std::int32_t r, const Op& op, std::int32_t step, std::int64_t start,
                 std::int64_t end, std::int64_t src);
  void start_dp(std::int32_t r);
  void complete_dp(std::int32_t r, std::uint32_t version);
  // Whether a stage of rank r without REDUCE_GRAD still waits for DDP buckets on shared links at
  // the end of `step`.
  bool ddp_pending(std::int32_t r, std::int32_t step) const;
  // Moves to the next action, or waits (false) at the end of a step for DDP buckets.
  bool advance(std::int32_t r, RankState& st);
  // true: its sync started on the shared cores (Note [Collectives on shared cores]).
  bool diloco_end_of_step(std::int32_t r, RankState& st, std::int32_t step);
  void step_forward(std::int32_t r, RankState& st);
  void end_of_step(std::int32_t r, RankState& st, std::int32_t step);
  // The end of a step after its sync: the step overhead, and when the step is over on the rank.
  void finish_step(RankState& st, std::int32_t step);
  // Note [Collectives on shared cores]: rank r's sync (the step's work and a collective of `ns`
  // alone) starts on its compute stream at now_; complete_sync ends it.
  void begin_sync_on_core(std::int32_t r, RankState& st, std::int32_t step, Collective kind,
                          std::int64_t ns);
  void complete_sync(std::int32_t r, RankState& st);
  void launch_ddp(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                  std::int64_t start, std::int64_t end, std::int64_t src);
  std::int64_t compute_ns(const Op& op, ComputeSlot slot, std::int32_t step) const noexcept {
    return durations_->compute_ns(op.stage, slot, op.mb, step);
  }
  std::int64_t message_ns(const Op& op, std::int32_t step) const noexcept {
    return durations_->message_ns(network_->message_ns(op.edge), op.edge,
                                  op.kind == sched::ActionKind::kSendF, op.mb, step);
  }
  // Note [Posted batches]
  // A rank posts a batch of consecutive SEND/RECV actions at once, after the batch's overhead
  // (NetworkModel::batch_overhead_ns), as the executor does (Note [p2p batches] in
  // exec/src/interpreter/interpreter.cpp): every send of the batch leaves then, even one listed
  // after a receive that blocks the compute stream (--blocking-recv), and the compute stream goes
  // on when the batch's receives have arrived. (Blocking at a receive and starting the sends after
  // it delayed 1F1B's SEND_B(i) behind RECV_F(i + 1) by a whole message: +30% on a 100 Mbit/s
  // link.)
  void post_batch(RankState& st, const Op& op) const noexcept {
    if (!op.batch_head) return;
    st.time += comm_overhead_ns_;
    st.batch_post = st.time;
    st.batch_pred = st.last_compute;
  }
  // Note [Send calls]: the executor's training thread calls the transport's send for each SEND,
  // and the call returns only when the transport has taken the bytes. Over loopback (shared
  // memory) that is 10-40 us; over TCP on a 100 Mbit/s veth link 0.1-0.3 ms for 32 KiB (the
  // kernel's TCP and veth path run in the caller), and 1-4 ms when the peer is not ready to
  // take them (bench/fidelity.sh, 2026-11-29: interleaved plans over the shaped link lost 2-3.5
  // ms per rank and step there). comm_overhead_ms leaves these calls out (Note [Comm overhead]
  // in exec/src/report/run_profile.cpp), so the simulator charges a draw of the profile's
  // measured send call (P2PCost::send_call_stats) on the compute stream after the SEND is
  // posted. The message itself still leaves when the batch is posted: the link's time is not
  // charged twice. With shared cores it is the median, not the mean nor a draw: there the calls'
  // tail is the thread waiting for a core (4 ranks on 2 cores: median 0.02 ms, mean 0.3-1.4 ms,
  // up to 6 ms), which the core sharing produces itself; charging the mean moved DDP's and
  // ZeRO-1's loopback cells +2..+4 points (bench/fidelity.sh, session 11). Only with the profile's
  // per-message cost (the network the calls were measured on): a cluster's link or --p2p-ms prices
  // another network, whose calls are not known.
  //
  // Note [Compute beside a send]
  // A message crossing a slow TCP link keeps the network stack busy on its sender's cores for as
  // long as it is on the wire (the kernel's TCP and qdisc work, Gloo's I/O thread), and the rank's
  // compute runs slower meanwhile. Measured on bench/fidelity.sh's shaped link (100 Mbit/s,
  // veth + tbf; session 10's final matrix, GPipe fp32): stage 0's first forward, with no message of
  // its own in flight, took 2.02 ms of CPU, the next three, each beside the previous one's 32 KiB
  // activation, 2.65-3.08 ms; stage 1's first backward 3.61 ms, the next three 4.64-5.20 ms
  // (loopback: 1.75-1.87 and 3.23-3.35 ms). A profile measured on that link holds this in its
  // compute times, so it applies only where the cluster's inter-node link prices the message
  // (Cluster::send_cpu_load, which `calibrate --network` measures), e.g. a loopback profile
  // simulated on the shaped cluster: after a SEND is posted its message is taken to be on the wire
  // from then (behind the rank's earlier ones) for its time alone, and a compute action of the rank
  // overlapping that runs at 1 / (1 + load) of its speed there. The receiving end's network
  // stack does the same work while the message arrives, so the receiver's compute overlapping
  // [start, end) of the message runs at that speed too (receive_load; it counts where the
  // receiver's compute is simulated after the send was posted, as in a pipeline where it waits
  // for that message's predecessor). On session 12's kept traces of bench/fidelity.sh, the shaped
  // `none` cells' transfers (loopback profiles) moved by +1..+6 points with the receiving end
  // (fp32: -11.0, +3.9, -11.3, -10.4% -> -9.3, +6.4, -6.7, -4.0%). Not with shared cores (the
  // core-sharing model's activities have no such load); data-parallel collectives: below.
  //
  // Note [Compute beside a collective]
  // A data-parallel collective whose group crosses nodes loads the network stacks of its ranks'
  // nodes the same way. A profile measured on one node (CostTable::nodes == 1) has none of this
  // in its compute times, so there the cluster's load (NetworkModel::collective_cpu_load) applies
  // while each of the rank's collectives across nodes is in flight: with dedicated cores to the
  // rank's own compute as a send's does (add_load); with shared cores as that much more demand on
  // the node's cores (CoreSharing::add_load, once per collective in flight, scheduled as kCpuLoad
  // events where the collective's interval is known ahead). A profile measured across nodes holds
  // it already (replay), and one whose nodes are not known is taken as it stands. Measured on
  // session 12's kept traces: the 64 shaped data-parallel transfers moved by 0..+1.3 points, every
  // one toward the measured step: in these plans little compute overlaps a collective across
  // nodes (ZeRO-1, 1F1B fp32: the pipeline's compute ends before the reduce-scatters start and the
  // next step's compute waits for the all-gathers). Those cells' compute is slower on the shaped
  // link all the same (CPU time of a B 4.5-4.9 ms where the loopback cell's is 3.5 ms) with no
  // collective in flight; that is not modelled (docs/simulator.md, "The matrix now").
  void after_send_posted(RankState& st, const Op& op, std::int32_t step) const noexcept {
    st.time += durations_->send_call_ns(op.edge, op.kind == sched::ActionKind::kSendF, op.mb, step);
    const double load = network_->send_cpu_load(op.edge);
    if (load <= 0) return;
    const std::int64_t from = std::max(st.batch_post, st.load_until);
    if (from > st.load_until) st.load_from = from;
    st.load_until = from + message_ns(op, step);
    st.load = load;
  }
  // Note [Compute beside a send], the receiving end: its network stack takes the same share
  // from the receiver's compute while the message [start, end) arrives.
  void receive_load(const Op& op, std::int64_t start, std::int64_t end) {
    const double load = network_->send_cpu_load(op.edge);
    if (load <= 0) return;
    const auto& ed = prog_.edges[static_cast<std::size_t>(op.edge)];
    const auto peer = plan_.shape.stage_to_rank[static_cast<std::size_t>(
        op.kind == sched::ActionKind::kSendF ? ed.to : ed.from)];
    add_load(ranks_[static_cast<std::size_t>(peer)], start, end, load);
  }
  // Note [Compute beside a collective], dedicated cores: [from, until) joins the rank's loaded
  // interval (their union where they meet; a later one that does not replaces it).
  static void add_load(RankState& st, std::int64_t from, std::int64_t until, double load) noexcept {
    if (until <= from || load <= 0) return;
    if (from > st.load_until) {
      st.load_from = from;
    } else {
      st.load_from = std::min(st.load_from, from);
    }
    st.load_until = std::max(st.load_until, until);
    st.load = load;
  }
  // Note [Compute beside a collective]: rank r's collective across nodes over [start, end).
  void collective_load(std::int32_t r, std::int64_t start, std::int64_t end) {
    const double load = network_->collective_cpu_load(r);
    if (load <= 0 || end <= start) return;
    if (!shared_) {
      add_load(ranks_[static_cast<std::size_t>(r)], start, end, load);
      return;
    }
    queue_.push(std::max(start, now_), r, EventKind::kCpuLoad, 1);
    queue_.push(std::max(end, now_), r, EventKind::kCpuLoad, 0);
  }
  // The end of `work` ns of compute started at `start` (Note [Compute beside a send]).
  static std::int64_t loaded_end(const RankState& st, std::int64_t start,
                                 std::int64_t work) noexcept {
    if (st.load <= 0 || st.load_until <= start) return start + work;
    const std::int64_t from = std::max(start, st.load_from);
    if (from - start >= work) return start + work;
    const double rest = static_cast<double>(work - (from - start));
    const double slow = static_cast<double>(st.load_until - from) / (1 + st.load);
    if (rest <= slow) return from + static_cast<std::int64_t>(std::llround(rest * (1 + st.load)));
    return st.load_until + static_cast<std::int64_t>(std::llround(rest - slow));
  }
  // Appends a timed action when recording; returns its index, or -1.
  std::int64_t record(const Op& op, std::int32_t r, std::int32_t step, Stream stream,
                      std::int64_t start, std::int64_t end, std::int64_t pred) {
    return record_ ? record_action(op, r, step, stream, start, end, pred) : -1;
  }
  std::int64_t record_action(const Op& op, std::int32_t r, std::int32_t step, Stream stream,
                             std::int64_t start, std::int64_t end, std::int64_t pred);
  // The memory timeline: the changes of sched::MemoryModel (Note [Memory model] in
  // sched/memory.hpp) placed at the compute action's start and end. The peaks are not tracked
  // here: they are sched::peak_memory's, the one function `run --dry-run` prints too.
  void memory_change(std::int32_t r, RankState& st, const Op& op, std::int64_t start,
                     std::int64_t end) {
    if (!opt_.record_memory_timeline) return;
    const sched::MemoryChange c = memory_->change(op.kind, op.stage);
    if (c.at_start != 0 || c.microbatches_at_start != 0) memory_point(r, st, start, c.at_start);
    if (c.at_end != 0 || c.microbatches_at_end != 0) memory_point(r, st, end, c.at_end);
  }
  void memory_point(std::int32_t r, RankState& st, std::int64_t t, std::int64_t delta) {
    st.activation_bytes += delta;
    auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
    const std::int64_t bytes = rr.static_memory_bytes + st.activation_bytes;
    auto& tl = rr.memory_timeline;
    if (!tl.empty() && tl.back().time_ns == t) {
      tl.back().bytes = bytes;
    } else {
      tl.push_back(MemoryPoint{t, bytes});
    }
  }
  // Note [ZeRO in the simulator] (engine_dp.cpp).
  void init_zero();
  // false: the stage's all-gather is still queued on shared links (the rank waits for it).
  bool wait_for_parameters(std::int32_t r, const Op& op, std::int64_t& start, std::int64_t& pred);
  void zero_after_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                          std::int64_t end, std::int64_t src);
  void shard_action(std::int32_t r, RankState& st, const Op& op, std::int32_t step);
  std::int64_t zero_collective(std::int32_t r, RankState& st, std::int32_t stage, std::int32_t step,
                               Collective kind, std::int64_t ready, std::int64_t ns,
                               std::int64_t src);
  [[noreturn]] void throw_deadlock() const;

  const sched::LoweredPlan& plan_;
  const sched::CostTable& costs_;
  const Cluster& cluster_;
  const SimOptions& opt_;

  // The models (Note [Engine]).
  std::unique_ptr<NetworkModel> network_;
  std::unique_ptr<DurationModel> durations_;
  std::unique_ptr<CoreSharing> cores_;
  std::unique_ptr<LinkSharing> links_;  // null unless some node link can be shared
  bool shared_ = false;                 // cores_->active()
  std::int64_t comm_overhead_ns_ = 0;   // network_->batch_overhead_ns()
  // CostTable::dp_sync_compute_ms at dp > 1: the data-parallel sync's own work (Note [Sync work
  // in the simulator] in engine_dp.cpp).
  std::int64_t dp_sync_compute_ns_ = 0;
  std::int64_t step_overhead_ns_ = 0;  // Note [Between steps] (engine_dp.cpp)

  std::int32_t R_ = 0, S_ = 0, M_ = 0, E_ = 0, K_ = 1, dp_ = 1;
  Program prog_;
  // The slot rows ops wait for (sched::PlanRules::needs as rows); op's are
  // deps_[op.deps_begin .. op.deps_end).
  std::vector<std::int32_t> deps_;
  sched::MemoryOptions memory_options_;
  std::optional<sched::MemoryModel> memory_;  // Note [Memory model] (sched/memory.hpp)
  // Per stage: the replica gradient all-reduce at REDUCE_GRAD (0 for stages without replicas).
  std::vector<std::int64_t> replica_reduce_ns_;

  std::size_t rows_per_step_ = 0;
  SlotArray slots_;
  std::vector<std::int64_t> slot_src_;     // record index that filled the slot
  std::vector<std::int64_t> recv_prev_;    // with record_: pending receive's predecessor
  std::vector<std::int64_t> recv_record_;  // with record_: pending receive's record index
  // ZeRO (Note [ZeRO in the simulator]): the effective zero stage (0 unless ddp with dp > 1), per
  // plan stage the all-gather and the whole-gradient reduce-scatter times, when its gathered
  // parameters are ready and the record index that made them so.
  std::int32_t zero_ = 0;
  std::vector<std::int64_t> zero_gather_ns_, zero_scatter_ns_, params_ready_, params_src_;
  std::vector<std::int64_t> zero_scatter_alone_ns_;  // unscaled: timed on shared links
  std::vector<std::int64_t> zero_gather_alone_ns_;   // unscaled: timed on shared links
  static constexpr std::int32_t kZeroScatter = -1;   // PendingBucket::bucket of a reduce-scatter
  static constexpr std::int32_t kZeroGather = -2;    // ... of an all-gather
  // params_ready_ of a stage whose all-gather is queued on shared links (Note [ZeRO in the
  // simulator]): its next compute waits for complete_dp.
  static constexpr std::int64_t kParamsPending = std::numeric_limits<std::int64_t>::max();
  // Queues a ZeRO all-gather of `stage` on rank r's data-parallel stream when its collectives
  // move on shared links (returns true), else false.
  bool queue_zero_gather(std::int32_t r, std::int32_t stage, std::int32_t step, std::int64_t ready,
                         std::int64_t src);
  std::vector<std::int64_t> ddp_done_;          // per (step, stage): all buckets reduced, or:
  static constexpr std::int64_t kUnknown = -1;  // not launched yet
  static constexpr std::int64_t kPending = -2;  // buckets queued on shared links
  static constexpr std::int64_t kAtReduce =
      -3;  // no overlap: gradients done, launched at REDUCE_GRAD

  std::vector<RankState> ranks_;
  std::int64_t now_ = 0;  // the event clock
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
  // Per rank: how its SENDs run (run ahead, or as activities of the core or link model), and
  // whether its data-parallel collectives (DDP's buckets, ZeRO's reduce-scatters and
  // all-gathers) are queued as activities of the link model (Note [Shared links]) or of the core
  // model (Note [Collectives on shared cores]), or take their time alone (0).
  enum class SendMode : std::uint8_t { kAhead, kCores, kLinks };
  std::vector<SendMode> send_mode_;
  static constexpr std::uint8_t kDpOnLinks = 1;
  static constexpr std::uint8_t kDpOnCores = 2;
  std::vector<std::uint8_t> dp_linked_;
  // Per rank: its LocalSGD / SlowMo / SGP / DiLoCo syncs run on the node's shared cores (Note
  // [Collectives on shared cores]).
  std::vector<char> sync_on_cores_;
  // Per rank, shared links: DDP buckets waiting for or on the data-parallel stream, in order.
  struct PendingBucket {
    std::int32_t stage;
    std::int32_t step;
    std::int32_t bucket;
    std::int64_t ready;  // its gradients are final
    std::int64_t src;    // record index of the backward that made them
  };
  std::vector<std::deque<PendingBucket>> dp_queue_;
  std::vector<std::uint8_t> dp_state_;  // 0 idle, 1 start event pending, 2 running
  std::vector<std::int64_t> dp_start_;
  EventQueue queue_;
  SimResult result_;
  bool record_ = true;
};

}  // namespace pipewright::sim
