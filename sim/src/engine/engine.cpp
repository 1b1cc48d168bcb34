#include "engine/engine.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "costs/data_parallel.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::sim {

using sched::Action;
using sched::ActionKind;

// The slot rows an op waits for and fills are the dependency rules' fact rows (Note [Slot
// layout]); ops of the same kind, stage and edge share one range of deps_.
void Engine::resolve_deps() {
  const sched::PlanRules rules(plan_.shape, sched::Level::kLowered);
  deps_.clear();
  const auto S = static_cast<std::size_t>(S_), E = static_cast<std::size_t>(E_);
  // Per (kind, stage) or (kind, edge): its deps_ range and the row it fills (the same for all
  // its ops: the fact an op produces depends on its kind, stage and edge only).
  struct Range {
    std::int32_t first = -1, second = -1, out_row = -1;
  };
  std::vector<Range> ranges(4 * S + 4 * E);
  const auto out_row = [&](const Action& a) {
    const auto fact = sched::produces(a);
    return fact ? static_cast<std::int32_t>(rules.row(*fact)) : -1;
  };
  for (std::int32_t r = 0; r < R_; ++r) {
    auto& ops = prog_.ops[static_cast<std::size_t>(r)];
    const auto& list = plan_.per_rank[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      Op& op = ops[i];
      const Action& a = list[i];
      const auto kind = static_cast<std::size_t>(a.kind);  // F, B, I, W, SEND_F, RECV_F, ...
      if (!has_microbatch(a.kind)) {                       // REDUCE_GRAD, OPTIM: program order only
        op.out_row = out_row(a);
        continue;
      }
      auto& range = sched::is_comm(a.kind)
                        ? ranges[4 * S + (kind - 4) * E + static_cast<std::size_t>(op.edge)]
                        : ranges[kind * S + static_cast<std::size_t>(op.stage)];
      if (range.first < 0) {
        range.first = static_cast<std::int32_t>(deps_.size());
        for (const auto& f : rules.needs(a))
          deps_.push_back(static_cast<std::int32_t>(rules.row(f)));
        range.second = static_cast<std::int32_t>(deps_.size());
        range.out_row = out_row(a);
      }
      op.out_row = range.out_row;
      op.deps_begin = range.first;
      op.deps_end = range.second;
    }
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
    const auto& ed = prog_.edges[rest % static_cast<std::size_t>(E_)];
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
    // (Note [Slot layout]).
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
    queue_.push(std::max(t, ws.time), w, EventKind::kResume, 0);
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
    const auto& ed = prog_.edges[static_cast<std::size_t>(op.edge)];
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

// A compute action (F, B, I, W, OPTIM) whose inputs are known and which can start at `start`.
// With dedicated devices it ends at start + work. With shared cores (Note [Shared cores]) it
// starts when the event clock reaches `start` and ends when its work is done at the speed the
// node's other computing ranks leave it; returns false until then.
bool Engine::run_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                         std::int64_t start, std::int64_t pred, std::int64_t work) {
  if (!shared_) {
    finish_compute(r, st, op, step, start, loaded_end(st, start, work), pred);
    return true;
  }
  if (start > now_) {  // come back when the clock gets there (the rank is not parked)
    queue_.push(start, r, EventKind::kResume, 0);
    return false;
  }
  PW_ASSERT(start == now_, "engine: rank " << r << " starts a compute action at " << start
                                           << " ns, behind the event clock at " << now_ << " ns");
  st.run_start = start;
  st.run_pred = pred;
  cores_->begin(r, work, now_, queue_);
  return false;
}

void Engine::finish_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                            std::int64_t start, std::int64_t end, std::int64_t pred) {
  const std::size_t base = slot_base(step);
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  if (op.kind != ActionKind::kOptimizerStep) {
    rr.recv_wait_ns += start - st.time;
    rr.busy_ns += end - start;
  }
  const auto idx = record(op, r, step, Stream::kCompute, start, end, pred);
  st.time = end;
  st.last_compute = idx;
  memory_change(r, st, op, start, end);
  if (zero_ > 0) zero_after_compute(r, st, op, step, end, idx);
  const bool produces = op.kind == ActionKind::kForward || op.kind == ActionKind::kFullBackward ||
                        op.kind == ActionKind::kBackwardInput;
  if (produces) set_slot(base + at(static_cast<std::size_t>(op.out_row), op.mb), end, idx);
  // DDP's buckets start with the stage's last gradients: after its last B, or its last W.
  const bool grads = op.kind == ActionKind::kFullBackward || op.kind == ActionKind::kBackwardWeight;
  if (grads && op.ddp_launch && dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp && zero_ < 2) {
    // --no-ddp-overlap: buckets wait for the stage's REDUCE_GRAD (a plan without one: as before).
    if (zero_ == 0 && !opt_.dp.overlap &&
        prog_.explicit_reduce[static_cast<std::size_t>(r)][static_cast<std::size_t>(op.stage)] !=
            0) {
      ddp_done_[static_cast<std::size_t>(step) * S_ + static_cast<std::size_t>(op.stage)] =
          kAtReduce;
    } else {
      launch_ddp(r, st, op, step, start, end, idx);
    }
  }
}

void Engine::complete(std::int32_t r, std::uint32_t version) {
  auto& st = ranks_[static_cast<std::size_t>(r)];
  if (!cores_->current(r, version)) return;  // stale: the speed changed
  if (st.sync_on_core) {                     // Note [Collectives on shared cores]
    complete_sync(r, st);
    return;
  }
  cores_->end(r, now_, queue_);
  finish_compute(r, st, prog_.ops[static_cast<std::size_t>(r)][st.pos], st.step, st.run_start, now_,
                 st.run_pred);
  if (advance(r, st)) resume(r);
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
    case ActionKind::kForward:
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardWeight: {
      // Starts after its inputs (a stage's own F or I ran earlier on this rank and never moves
      // the start) and the rank's previous compute.
      std::int64_t start = st.time;
      std::int64_t pred = st.last_compute;
      for (std::int32_t k = op.deps_begin; k < op.deps_end; ++k) {
        if (!ready(row_slot(k, op.mb), start, pred)) return false;
      }
      if (zero_ > 0 && !wait_for_parameters(r, op, start, pred)) return false;
      static constexpr ComputeSlot kSlot[] = {ComputeSlot::kForward, ComputeSlot::kBackward,
                                              ComputeSlot::kInputGrad, ComputeSlot::kWeightGrad};
      return run_compute(r, st, op, step, start, pred,
                         compute_ns(op, kSlot[static_cast<int>(op.kind)], step));
    }
    case ActionKind::kSendF:
    case ActionKind::kSendB: {
      for (std::int32_t k = op.deps_begin; k < op.deps_end; ++k) {
        if (!need(row_slot(k, op.mb))) return false;
      }
      post_batch(st, op);
      after_send_posted(st, op, step);
      if (send_mode_[static_cast<std::size_t>(r)] != SendMode::kAhead) {  // shares cores or links
        sends_[static_cast<std::size_t>(r)].push_back(
            PendingSend{st.pos, step, st.batch_post, st.batch_pred});
        start_send(r);
        return true;
      }
      const std::int64_t start = std::max(st.batch_post, st.send_free);
      const std::int64_t end = start + message_ns(op, step);
      receive_load(op, start, end);  // Note [Compute beside a send]
      const auto pred = st.send_free > st.batch_post ? st.last_send : st.batch_pred;
      const auto idx = record(op, r, step, Stream::kSend, start, end, pred);
      st.send_free = end;
      st.last_send = idx;
      rr.send_ns += end - start;
      set_slot(base + at(static_cast<std::size_t>(op.out_row), op.mb), end, idx);
      return true;
    }
    case ActionKind::kRecvF:
    case ActionKind::kRecvB: {
      const std::size_t arrived = row_slot(op.deps_begin, op.mb);  // the message (one need)
      const std::size_t received = at(static_cast<std::size_t>(op.out_row), op.mb);
      if (!opt_.blocking_recv) {
        post_batch(st, op);
        post_recv(r, st, op, step, base + arrived, base + received);
        return true;
      }
      if (!need(arrived)) return false;
      post_batch(st, op);
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
      set_slot(base + received, end, idx);
      return true;
    }
    case ActionKind::kReduceGrad: {
      std::int64_t end = st.time + (op.stage >= 0 ? replica_reduce_ns_[s] : 0);
      std::int64_t pred = st.last_compute;
      if (dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp &&
          !network_->bucket_ns(op.stage).empty()) {
        std::int64_t done = ddp_done_[static_cast<std::size_t>(step) * S_ + s];
        if (done == kAtReduce) {  // --no-ddp-overlap: every bucket starts here
          launch_ddp(r, st, op, step, st.time, st.time, st.last_compute);
          done = ddp_done_[static_cast<std::size_t>(step) * S_ + s];
        }
        if (done == kPending) {  // Note [Shared links]: complete_dp resumes the rank
          st.ddp_wait = true;
          return false;
        }
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
                         compute_ns(op, ComputeSlot::kOptim, step));
    case ActionKind::kOverlapFB:
      return true;  // a marker: no time; its sub-actions are the next two ops
    case ActionKind::kUnshard:
    case ActionKind::kReshard:
      // Note [ZeRO in the simulator]; no-ops below zero stage 3 (Note [UNSHARD and RESHARD]).
      if (zero_ == 3) shard_action(r, st, op, step);
      return true;
  }
  return true;
}

void Engine::step_forward(std::int32_t r, RankState& st) {
  ++st.pc;
  if (++st.pos == prog_.ops[static_cast<std::size_t>(r)].size()) {
    end_of_step(r, st, st.step);
    st.pos = 0;
    ++st.step;
  }
}

void Engine::resume(std::int32_t r) {
  auto& st = ranks_[static_cast<std::size_t>(r)];
  const auto& ops = prog_.ops[static_cast<std::size_t>(r)];
  const std::size_t len = ops.size();
  const std::size_t total = len * static_cast<std::size_t>(K_);
  if (st.sync_on_core) return;  // complete_sync resumes it
  if (st.after_wait) {          // the action at pos ran; its ZeRO reduce-scatters were pending
    if (st.zero_pending > 0) {
      st.ddp_wait = true;
      return;
    }
    st.after_wait = false;
    if (!advance(r, st)) return;
  }
  if (st.step_end_wait) {  // the last action of the step ran; its DDP buckets were pending
    if (ddp_pending(r, st.step)) {
      st.ddp_wait = true;
      return;
    }
    st.step_end_wait = false;
    step_forward(r, st);
  }
  while (st.pc < total) {
    if (!execute(r, st, ops[st.pos], st.step)) return;
    if (!advance(r, st)) return;
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

void Engine::throw_deadlock() const {
  std::ostringstream os;
  os << "plan deadlocks: ";
  bool first = true;
  for (std::int32_t r = 0; r < R_; ++r) {
    const auto& st = ranks_[static_cast<std::size_t>(r)];
    if (st.finished) continue;
    const auto& ops = prog_.ops[static_cast<std::size_t>(r)];
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
  check_inputs(plan_, costs_, cluster_, opt_);
  dp_ = opt_.dp.replicas;
  zero_ = dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp ? opt_.dp.zero_stage : 0;
  K_ = opt_.steps;
  record_ = opt_.record_actions;
  R_ = plan_.shape.ranks;
  S_ = plan_.shape.stages;
  M_ = plan_.shape.microbatches;
  prog_ = decode(plan_);
  E_ = static_cast<std::int32_t>(prog_.edges.size());
  resolve_deps();
  if (!cores_) cores_ = make_processor_sharing(cluster_, costs_, R_, dp_);
  shared_ = cores_->active();
  if (!durations_) durations_ = make_table_durations(plan_, costs_, opt_, shared_);
  if (!network_) network_ = make_analytical_network(plan_, costs_, cluster_, opt_);
  comm_overhead_ns_ = network_->batch_overhead_ns();
  dp_sync_compute_ns_ = dp_ > 1 ? ms_to_ns(costs_.dp_sync_compute_ms) : 0;
  step_overhead_ns_ = ms_to_ns(costs_.step_overhead_ms);
  plan_streams();
  memory_options_ = sched::MemoryOptions{opt_.optimizer, opt_.momentum, opt_.recompute,
                                         opt_.precision, zero_,         std::max(dp_, 1)};
  memory_.emplace(plan_.shape, costs_, memory_options_);
  const auto& shape = plan_.shape;
  for (std::int32_t s = 0; s < static_cast<std::int32_t>(costs_.stages.size()); ++s) {
    const auto& c = costs_.stages[static_cast<std::size_t>(s)];
    // Chimera: REDUCE_GRAD also sums the gradients with the stage's replica on another rank, a
    // two-rank ring all-reduce (reduce-scatter + all-gather of half the gradient each), costed
    // on the rank's compute stream (the partner's arrival is not waited for: a lower bound).
    std::int64_t reduce = 0;
    if (shape.has_replicas()) {
      for (std::int32_t other : shape.replicas_of(shape.model_stage(s))) {
        if (other == s) continue;
        reduce += 2 * p2p_message_ns(shape, costs_, cluster_, opt_, sched::StageEdge{s, other},
                                     gradient_wire_bytes(c.param_bytes, opt_.dp) / 2);
      }
    }
    replica_reduce_ns_.push_back(reduce);
  }

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
  result_.dp_wire_bytes_per_step = dp_wire_bytes_per_step(costs_, opt_.dp);
  result_.dp_wire_bytes_per_stage = dp_wire_bytes_per_stage(plan_, costs_, opt_.dp);
  if (zero_ > 0) {  // Note [ZeRO in the simulator]: the plan's collectives, summed
    result_.dp_wire_bytes_per_step = 0;
    for (double b : result_.dp_wire_bytes_per_stage) result_.dp_wire_bytes_per_step += b;
  }
  init_zero();
  result_.micro_batch_size = opt_.micro_batch_size;
  result_.device_memory_bytes = cluster_.device_memory_bytes;
  result_.step_end_ns.assign(static_cast<std::size_t>(K_), 0);
  result_.per_rank.resize(static_cast<std::size_t>(R_));
  std::size_t total_actions = 0;
  for (const auto& ops : prog_.ops) total_actions += ops.size();
  result_.simulated_actions = static_cast<std::int64_t>(total_actions) * K_;
  if (record_) result_.actions.reserve(total_actions * static_cast<std::size_t>(K_) + 16);

  // Memory (Note [Memory model] in sched/memory.hpp): the peaks are sched::peak_memory's, the one
  // function `run --dry-run` prints too; the timeline places the same changes on the clock.
  const std::vector<sched::RankMemory> memory = sched::peak_memory(plan_, costs_, memory_options_);
  for (std::int32_t r = 0; r < R_; ++r) {
    auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
    const auto& m = memory[static_cast<std::size_t>(r)];
    rr.rank = r;
    rr.static_memory_bytes = m.static_bytes;
    rr.peak_activation_bytes = m.peak_activation_bytes;
    rr.peak_activation_microbatches = m.peak_activation_microbatches;
    rr.peak_memory_bytes = m.peak_bytes;
    rr.exceeds_memory =
        cluster_.device_memory_bytes > 0 && rr.peak_memory_bytes > cluster_.device_memory_bytes;
    rr.autocast_cache_bytes = m.autocast_cache_bytes;
    // The autocast cache (Note [Precision bytes]) is held for the whole step, as static memory is.
    if (opt_.record_memory_timeline)
      rr.memory_timeline.push_back({0, rr.static_memory_bytes + rr.autocast_cache_bytes});
  }

  ranks_.assign(static_cast<std::size_t>(R_), RankState{});
  queue_.reserve(static_cast<std::size_t>(R_) * 2);
  for (std::int32_t r = 0; r < R_; ++r) queue_.push(0, r, EventKind::kResume, 0);
  while (!queue_.empty()) {
    const Event ev = queue_.pop();
    now_ = ev.time_ns;
    switch (ev.kind) {
      case EventKind::kResume:
        resume(ev.id);
        break;
      case EventKind::kActivityDone:  // activities: compute r, send R + r, data-parallel 2R + r
        if (ev.id < R_) {
          complete(ev.id, ev.version);
        } else if (ev.id < 2 * R_) {
          complete_send(ev.id - R_, ev.version);
        } else {
          complete_dp(ev.id - 2 * R_, ev.version);
        }
        break;
      case EventKind::kSendStart:
        send_state_[static_cast<std::size_t>(ev.id)] = 0;
        start_send(ev.id);
        break;
      case EventKind::kLinkDone:  // activities: send stream r, data-parallel stream R + r
        if (ev.id < R_) {
          complete_send(ev.id, ev.version);
        } else {
          complete_dp(ev.id - R_, ev.version);
        }
        break;
      case EventKind::kDpStart:
        dp_state_[static_cast<std::size_t>(ev.id)] = 0;
        start_dp(ev.id);
        break;
      case EventKind::kCpuLoad:  // Note [Compute beside a collective] (engine.hpp)
        cores_->add_load(ev.id, (ev.version != 0 ? 1 : -1) * network_->collective_cpu_load(ev.id),
                         now_, queue_);
        break;
    }
  }
  for (const auto& st : ranks_) {
    if (!st.finished) throw_deadlock();
  }
  std::int64_t makespan = 0;
  for (const auto& rr : result_.per_rank) makespan = std::max(makespan, rr.finish_ns);
  result_.makespan_ns = makespan;
  for (auto& rr : result_.per_rank) rr.idle_ns = makespan - rr.busy_ns;
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

}  // namespace pipewright::sim
