#include "pipewright/sched/lower.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "check/validate_detail.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::sched {
namespace {

using Ops = std::vector<Action>;

std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }

// Shape checks lower() needs to index its tables safely (validate() reports everything, this
// only refuses what cannot be lowered at all).
void check_lowerable(const ComputePlan& plan) {
  const PlanShape& sh = plan.shape;
  PW_CHECK(sh.ranks >= 1 && sh.stages >= 1 && sh.microbatches >= 1, InvalidPlanError,
           "plan shape must have ranks, stages and microbatches >= 1");
  PW_CHECK(plan.per_rank.size() == idx(sh.ranks), InvalidPlanError,
           "plan has " << plan.per_rank.size() << " rank lists for " << sh.ranks << " ranks");
  PW_CHECK(sh.stage_to_rank.size() == idx(sh.stages), InvalidPlanError,
           "plan placement has " << sh.stage_to_rank.size() << " entries for " << sh.stages
                                 << " stages");
  for (std::int32_t s = 0; s < sh.stages; ++s) {
    const std::int32_t r = sh.stage_to_rank[idx(s)];
    PW_CHECK(r >= 0 && r < sh.ranks, InvalidPlanError,
             "stage " << s << " is placed on rank " << r << ", outside [0, " << sh.ranks << ")");
  }
  for (const auto& e : sh.stage_edges) {
    PW_CHECK(e.from >= 0 && e.from < sh.stages && e.to >= 0 && e.to < sh.stages && e.from != e.to,
             InvalidPlanError, "stage edge " << e.from << " -> " << e.to << " is out of range");
  }
  for (std::int32_t r = 0; r < sh.ranks; ++r) {
    const auto& ops = plan.per_rank[idx(r)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Action& a = ops[i];
      PW_CHECK(!is_comm(a.kind), InvalidPlanError,
               "rank " << r << ", step " << i << ": " << a
                       << " is a communication action in a compute-only plan");
      PW_CHECK(a.stage >= 0 && a.stage < sh.stages, InvalidPlanError,
               "rank " << r << ", step " << i << ": " << a << " has stage " << a.stage
                       << " outside [0, " << sh.stages << ")");
      PW_CHECK(sh.stage_to_rank[idx(a.stage)] == r, InvalidPlanError,
               "rank " << r << ", step " << i << ": " << a << " belongs to rank "
                       << sh.stage_to_rank[idx(a.stage)]);
      PW_CHECK(!has_microbatch(a.kind) || (a.microbatch >= 0 && a.microbatch < sh.microbatches),
               InvalidPlanError,
               "rank " << r << ", step " << i << ": " << a << " has microbatch " << a.microbatch
                       << " outside [0, " << sh.microbatches << ")");
    }
  }
}

// How many entries the unit starting at ops[i] spans: 1 + kOverlapSubActions for an OVERLAP_F_B
// marker (Note [OVERLAP_F_B units]), else 1; clipped to the list.
std::size_t unit_size(const Ops& ops, std::size_t i) {
  const std::size_t n = is_overlap(ops[i].kind) ? 1 + kOverlapSubActions : 1;
  return std::min(n, ops.size() - i);
}

// torch's _merge_bw on one rank (an I inside an OVERLAP_F_B unit stays an I).
Ops merge_iw(const Ops& ops) {
  Ops out;
  out.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Action& a = ops[i];
    if (is_overlap(a.kind)) {
      const std::size_t n = unit_size(ops, i);
      out.insert(out.end(), ops.begin() + static_cast<std::ptrdiff_t>(i),
                 ops.begin() + static_cast<std::ptrdiff_t>(i + n));
      i += n - 1;
      continue;
    }
    if (a.kind == ActionKind::kBackwardInput && i + 1 < ops.size()) {
      const Action& n = ops[i + 1];
      if (n.kind == ActionKind::kBackwardWeight && n.stage == a.stage &&
          n.microbatch == a.microbatch) {
        out.push_back(Action::compute(a.stage, ActionKind::kFullBackward, a.microbatch));
        ++i;
        continue;
      }
    }
    out.push_back(a);
  }
  return out;
}

// torch's _add_reduce_grad on one rank: REDUCE_GRAD(s) right after the stage's last B or W (after
// the whole OVERLAP_F_B unit when that is inside one). Replicated stages (Chimera) all-reduce with
// their replicas on other ranks, so every rank must reach them in the same order: their
// REDUCE_GRADs go at the end of the list in model-stage order (Note [Stage replicas]).
Ops add_reduce_grad(const Ops& ops, const PlanShape& sh, std::int32_t rank) {
  std::vector<std::int32_t> count(idx(sh.stages), 0);
  std::vector<bool> has(idx(sh.stages), false);
  for (const Action& a : ops) {
    if (a.kind == ActionKind::kReduceGrad) has[idx(a.stage)] = true;
  }
  Ops out;
  out.reserve(ops.size() + 4);
  std::vector<std::int32_t> due;
  std::size_t unit_end = 0;  // index past the current OVERLAP_F_B unit
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Action& a = ops[i];
    if (is_overlap(a.kind)) unit_end = i + unit_size(ops, i);
    out.push_back(a);
    if (completes_weight_grad(a.kind) && !sh.has_replicas()) {
      const std::int32_t mbs = sh.microbatch_end(a.stage) - sh.microbatch_begin(a.stage);
      if (++count[idx(a.stage)] == mbs && !has[idx(a.stage)]) due.push_back(a.stage);
    }
    if (i + 1 >= unit_end) {
      for (std::int32_t s : due) out.push_back(Action::stage_only(s, ActionKind::kReduceGrad));
      due.clear();
    }
  }
  if (sh.has_replicas()) {
    auto local = sh.stages_of_rank(rank);
    std::stable_sort(local.begin(), local.end(), [&](std::int32_t x, std::int32_t y) {
      return sh.model_stage(x) < sh.model_stage(y);
    });
    for (std::int32_t s : local) {
      if (!has[idx(s)]) out.push_back(Action::stage_only(s, ActionKind::kReduceGrad));
    }
  }
  return out;
}

// The lock-step replay of Note [Where SEND and RECV go].
class SendRecvInserter {
 public:
  explicit SendRecvInserter(const PlanShape& sh)
      : sh_(sh),
        rules_(sh, Level::kLowered),
        done_(static_cast<std::size_t>(rules_.ids()), false) {}

  std::vector<Ops> run(const std::vector<Ops>& compute) {
    const std::size_t p = compute.size();
    std::vector<Ops> out(p);
    for (std::size_t r = 0; r < p; ++r) out[r].reserve(compute[r].size() * 2);
    std::vector<std::size_t> pc(p, 0);
    std::size_t remaining = 0;
    for (const auto& ops : compute) remaining += ops.size();
    while (remaining > 0) {
      bool progress = false;
      for (std::size_t r = 0; r < p; ++r) {
        if (pc[r] == compute[r].size()) continue;
        // An OVERLAP_F_B unit is taken whole, once all of its sub-actions are ready; its SENDs
        // follow the unit (torch's _add_send_recv).
        const std::size_t n = unit_size(compute[r], pc[r]);
        bool all_ready = true;
        for (std::size_t k = pc[r]; k < pc[r] + n; ++k)
          all_ready = all_ready && ready(compute[r][k]);
        if (!all_ready) continue;
        for (std::size_t k = pc[r]; k < pc[r] + n; ++k) {
          out[r].push_back(compute[r][k]);
          mark(produces(compute[r][k]), compute[r][k].microbatch);
        }
        for (std::size_t k = pc[r]; k < pc[r] + n; ++k) {
          emit_comm(compute[r][k], static_cast<std::int32_t>(r), out);
        }
        pc[r] += n;
        remaining -= n;
        progress = true;
      }
      if (!progress) throw stuck(compute, pc);
    }
    return out;
  }

 private:
  // Ready when every input from another stage (plan_dag.hpp) is there: a local producer's
  // F / B / I has run, a remote one's RECV has been placed. A stage's own F before its B/I and I
  // before its W are its rank's program order.
  bool ready(const Action& a) const {
    for (const Fact& f : rules_.needs(a)) {
      if (!f.is_message() && f.stage == a.stage) continue;
      const std::int64_t id = rules_.id(f, a.microbatch);
      if (id < 0 || !done_[static_cast<std::size_t>(id)]) return false;
    }
    return true;
  }

  void mark(const std::optional<Fact>& f, std::int32_t mb) {
    const std::int64_t id = f ? rules_.id(*f, mb) : -1;
    if (id >= 0) done_[static_cast<std::size_t>(id)] = true;
  }

  // The SENDs of a's output (in peer stage order) and, on the peers' ranks, their RECVs.
  void emit_comm(const Action& a, std::int32_t rank, std::vector<Ops>& out) {
    sends_.clear();
    for (const Fact& f : rules_.sent_by(a)) sends_.push_back(PlanRules::action_of(f, a.microbatch));
    if (sends_.size() > 1)
      std::sort(sends_.begin(), sends_.end(),
                [](const Action& x, const Action& y) { return x.peer_stage < y.peer_stage; });
    for (const Action& send : sends_) {
      const Action recv = matching(send);
      out[idx(rank)].push_back(send);
      out[idx(sh_.stage_to_rank[idx(recv.stage)])].push_back(recv);
      mark(produces(recv), recv.microbatch);
    }
  }

  InvalidPlanError stuck(const std::vector<Ops>& compute, const std::vector<std::size_t>& pc) {
    std::ostringstream os;
    os << "cannot lower the plan: every rank waits for another (a cross-rank dependency cycle "
          "or a missing action):";
    for (std::size_t r = 0; r < compute.size(); ++r) {
      if (pc[r] == compute[r].size()) continue;
      os << " rank " << r << " step " << pc[r] << " waits at " << compute[r][pc[r]] << ";";
    }
    return InvalidPlanError(os.str());
  }

  const PlanShape& sh_;
  const PlanRules rules_;
  std::vector<bool> done_;  // by PlanRules::id: local facts produced, RECVs placed
  Ops sends_;               // emit_comm's scratch list
};

// Just-in-time placement (Note [Where SEND and RECV go]): RECVs right before the compute that
// needs them, SENDs right after the compute that produced the data.
std::vector<Ops> insert_just_in_time(const PlanShape& sh, const std::vector<Ops>& compute) {
  // The RECVs an action needs and the SENDs of its output come from the dependency rules
  // (plan_dag.hpp); they are placed in peer stage order (actions with the same peer are equal).
  const PlanRules rules(sh, Level::kLowered);
  auto by_peer = [](const Action& x, const Action& y) { return x.peer_stage < y.peer_stage; };
  std::vector<Ops> out(compute.size());
  Ops comm;
  for (std::size_t r = 0; r < compute.size(); ++r) {
    const Ops& ops = compute[r];
    out[r].reserve(ops.size() * 2);
    // A unit is one action, or an OVERLAP_F_B marker with its sub-actions: the RECVs of all of
    // them go before it, the SENDs of all of them after it (torch's _add_send_recv).
    for (std::size_t i = 0; i < ops.size();) {
      const std::size_t n = unit_size(ops, i);
      for (std::size_t k = i; k < i + n; ++k) {
        comm.clear();
        for (const Fact& f : rules.needs(ops[k])) {
          if (f.is_message()) comm.push_back(PlanRules::action_of(f, ops[k].microbatch));
        }
        if (comm.size() > 1) std::sort(comm.begin(), comm.end(), by_peer);
        out[r].insert(out[r].end(), comm.begin(), comm.end());
      }
      out[r].insert(out[r].end(), ops.begin() + static_cast<std::ptrdiff_t>(i),
                    ops.begin() + static_cast<std::ptrdiff_t>(i + n));
      for (std::size_t k = i; k < i + n; ++k) {
        comm.clear();
        for (const Fact& f : rules.sent_by(ops[k])) {
          comm.push_back(PlanRules::action_of(f, ops[k].microbatch));
        }
        if (comm.size() > 1) std::sort(comm.begin(), comm.end(), by_peer);
        out[r].insert(out[r].end(), comm.begin(), comm.end());
      }
      i += n;
    }
  }
  return out;
}

// Runs `lists` with rendezvous sends and blocking receives and returns the order in which each
// rank executed its actions. Whenever every unfinished rank is stuck, the RECV matching the SEND
// of the lowest rank stuck at a SEND is executed right away (pulled forward on its rank). The
// input deadlocks with buffered sends exactly when, at some point, every stuck rank waits at a
// RECV (buffered sends would be stuck in that same state); then this returns nullopt.

std::optional<std::vector<Ops>> make_rendezvous_safe(const PlanShape& sh,
                                                     const std::vector<Ops>& lists) {
  const std::size_t p = lists.size();
  const PlanDag dag(sh, lists, Level::kLowered);
  std::vector<std::vector<std::uint8_t>> pulled(p);
  for (std::size_t r = 0; r < p; ++r) pulled[r].assign(lists[r].size(), 0);
  std::vector<std::size_t> pc(p, 0);
  std::vector<Ops> out(p);
  for (std::size_t r = 0; r < p; ++r) out[r].reserve(lists[r].size());
  auto head = [&](std::size_t r) -> const Action* {
    while (pc[r] < lists[r].size() && pulled[r][pc[r]]) ++pc[r];
    return pc[r] < lists[r].size() ? &lists[r][pc[r]] : nullptr;
  };
  std::vector<std::size_t> work;
  for (std::size_t r = p; r-- > 0;) work.push_back(r);
  // Ranks whose last run stopped at a SEND, lowest first; entries go stale when the peer completes
  // the SEND, so they are re-checked when popped.
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> at_send;
  while (true) {
    while (!work.empty()) {
      const std::size_t r = work.back();
      work.pop_back();
      while (const Action* a = head(r)) {
        if (!is_comm(a->kind)) {
          out[r].push_back(*a);
          ++pc[r];
          continue;
        }
        const auto peer = idx(sh.stage_to_rank[idx(a->peer_stage)]);
        const Action* other = head(peer);
        if (other == nullptr || *other != matching(*a)) {
          if (is_send(a->kind)) at_send.push(r);
          break;
        }
        out[r].push_back(*a);
        out[peer].push_back(*other);
        ++pc[r];
        ++pc[peer];
        work.push_back(peer);
      }
    }
    std::size_t sender = p;
    while (!at_send.empty()) {
      const std::size_t r = at_send.top();
      at_send.pop();
      const Action* a = head(r);
      if (a != nullptr && is_send(a->kind)) {
        sender = r;
        break;
      }
    }
    if (sender == p) {
      for (std::size_t r = 0; r < p; ++r) {
        if (head(r) != nullptr) return std::nullopt;  // waits at a RECV forever
      }
      break;
    }
    const Action& send = lists[sender][pc[sender]];
    PW_ASSERT(dag.rules().message_id(send) >= 0,
              "rendezvous fix-up: " << send << " is on no stage edge");
    const Position recv =
        dag.match({static_cast<std::int32_t>(sender), static_cast<std::int32_t>(pc[sender])});
    PW_ASSERT(recv.valid(), "rendezvous fix-up: no RECV for " << send);
    const auto peer = recv.rank;
    const auto at = static_cast<std::size_t>(recv.index);
    out[sender].push_back(send);
    ++pc[sender];
    out[idx(peer)].push_back(lists[idx(peer)][at]);
    pulled[idx(peer)][at] = 1;
    work.push_back(sender);
    work.push_back(idx(peer));
  }
  return out;
}

}  // namespace

LoweredPlan lower(const ComputePlan& plan, const LowerOptions& options) {
  check_lowerable(plan);
  const PlanShape& sh = plan.shape;
  std::vector<Ops> compute = plan.per_rank;
  // Forward-only plans have no gradients: no REDUCE_GRAD, no OPTIM.
  const bool training = !sh.forward_only;
  for (std::size_t r = 0; r < compute.size(); ++r) {
    auto& ops = compute[r];
    if (options.merge_iw) ops = merge_iw(ops);
    if (options.reduce_grad && training) {
      ops = add_reduce_grad(ops, sh, static_cast<std::int32_t>(r));
    }
  }
  LoweredPlan out;
  out.shape = sh;
  if (options.recv_placement == RecvPlacement::kTorchRounds) {
    out.per_rank = SendRecvInserter(sh).run(compute);
  } else {
    auto lists = make_rendezvous_safe(sh, insert_just_in_time(sh, compute));
    if (!lists) {
      // Only a plan whose ranks wait for each other (or for a missing action) gets here; the
      // compute-level dry run names the waiting chain.
      auto stuck = detail::compute_dry_run(sh, compute);
      throw InvalidPlanError("cannot lower the plan: " +
                             (stuck.empty() ? std::string("a rank waits for data never sent")
                                            : stuck.front().message));
    }
    out.per_rank = std::move(*lists);
  }
  if (options.optimizer_step && training) {
    for (std::int32_t r = 0; r < sh.ranks; ++r) {
      auto& ops = out.per_rank[idx(r)];
      std::vector<bool> has(idx(sh.stages), false);
      for (const Action& a : ops) {
        if (a.kind == ActionKind::kOptimizerStep) has[idx(a.stage)] = true;
      }
      for (std::int32_t s : sh.stages_of_rank(r)) {
        if (!has[idx(s)]) ops.push_back(Action::stage_only(s, ActionKind::kOptimizerStep));
      }
    }
  }
  return out;
}

ComputePlan compute_only(const LoweredPlan& plan) {
  ComputePlan out;
  out.shape = plan.shape;
  out.per_rank.reserve(plan.per_rank.size());
  for (const auto& ops : plan.per_rank) {
    Ops kept;
    kept.reserve(ops.size());
    for (const Action& a : ops) {
      if (!is_comm(a.kind)) kept.push_back(a);
    }
    out.per_rank.push_back(std::move(kept));
  }
  return out;
}

}  // namespace pipewright::sched
