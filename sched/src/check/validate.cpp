#include "pipewright/sched/validate.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <utility>

#include "check/validate_detail.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/schedule.hpp"

namespace pipewright::sched {
namespace {

std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }

struct Pos {
  std::int32_t rank = -1;
  std::int32_t step = -1;
  [[nodiscard]] bool present() const { return step >= 0; }
};

class Validator {
 public:
  Validator(const PlanShape& shape, const std::vector<std::vector<Action>>& per_rank, bool lowered)
      : sh_(shape), per_rank_(per_rank), lowered_(lowered) {}

  std::vector<Diagnostic> run() {
    if (check_shape()) {
      index_actions();
      check_counts_and_order();
      check_shard_windows();
      if (lowered_) {
        check_messages();
        check_data_order();
      } else if (out_.empty()) {
        check_cycles();
      }
    }
    if (suppressed_ > 0) {
      out_.push_back({"... and " + std::to_string(suppressed_) + " more problems (only the first " +
                          std::to_string(kMaxDiagnostics) + " are kept)",
                      -1, -1});
    }
    return std::move(out_);
  }

 private:
  template <typename... Args>
  void diag(std::int32_t rank, std::int32_t step, const Args&... parts) {
    // A broken plan can have a problem per (stage, microbatch): keep the first ones only.
    if (out_.size() >= kMaxDiagnostics) {
      ++suppressed_;
      return;
    }
    std::ostringstream os;
    (os << ... << parts);
    out_.push_back({os.str(), rank, step});
  }

  bool check_shape() {
    bool ok = true;
    if (sh_.ranks < 1 || sh_.stages < 1 || sh_.microbatches < 1) {
      diag(-1, -1, "plan shape needs ranks, stages and microbatches >= 1, got ranks ", sh_.ranks,
           ", stages ", sh_.stages, ", microbatches ", sh_.microbatches);
      return false;
    }
    if (per_rank_.size() != idx(sh_.ranks)) {
      diag(-1, -1, "plan has ", per_rank_.size(), " rank lists for ", sh_.ranks, " ranks");
      ok = false;
    }
    if (sh_.stage_to_rank.size() != idx(sh_.stages)) {
      diag(-1, -1, "placement has ", sh_.stage_to_rank.size(), " entries for ", sh_.stages,
           " stages");
      return false;
    }
    for (std::int32_t s = 0; s < sh_.stages; ++s) {
      const std::int32_t r = sh_.stage_to_rank[idx(s)];
      if (r < 0 || r >= sh_.ranks) {
        diag(-1, -1, "stage ", s, " is placed on rank ", r, ", outside [0, ", sh_.ranks, ")");
        ok = false;
      }
    }
    try {
      check_stage_edges(sh_.stage_edges, sh_.stages);
    } catch (const ConfigError& e) {
      diag(-1, -1, e.what());
      ok = false;
    }
    if (ok) rules_.emplace(sh_, lowered_ ? Level::kLowered : Level::kCompute);
    return ok;
  }

  std::size_t cell(std::int32_t stage, std::int32_t mb) const {
    return idx(stage) * idx(sh_.microbatches) + idx(mb);
  }

  // Records the first position of every (stage, mb, kind); flags misplaced, out-of-range and
  // duplicated actions.
  void index_actions() {
    const std::size_t cells = idx(sh_.stages) * idx(sh_.microbatches);
    for (auto* v : {&f_, &b_, &i_, &w_}) v->assign(cells, Pos{});
    reduce_.assign(idx(sh_.stages), Pos{});
    optim_.assign(idx(sh_.stages), Pos{});
    sharded_.assign(idx(sh_.stages), false);
    usable_.resize(per_rank_.size());
    for (std::size_t r = 0; r < per_rank_.size(); ++r) {
      const auto rank = static_cast<std::int32_t>(r);
      usable_[r].assign(per_rank_[r].size(), false);
      for (std::size_t i = 0; i < per_rank_[r].size(); ++i) {
        const auto step = static_cast<std::int32_t>(i);
        const Action& a = per_rank_[r][i];
        if (a.stage < 0 || a.stage >= sh_.stages) {
          diag(rank, step, a, ": stage ", a.stage, " is out of range [0, ", sh_.stages, ")");
          continue;
        }
        if (sh_.stage_to_rank[idx(a.stage)] != rank) {
          diag(rank, step, a, ": stage ", a.stage, " is placed on rank ",
               sh_.stage_to_rank[idx(a.stage)], ", not on rank ", rank);
          continue;
        }
        if (has_microbatch(a.kind) && (a.microbatch < 0 || a.microbatch >= sh_.microbatches)) {
          diag(rank, step, a, ": microbatch ", a.microbatch, " is out of range [0, ",
               sh_.microbatches, ")");
          continue;
        }
        if (has_microbatch(a.kind) && !sh_.runs_microbatch(a.stage, a.microbatch)) {
          diag(rank, step, a, ": stage ", a.stage, " runs microbatches [",
               sh_.microbatch_begin(a.stage), ", ", sh_.microbatch_end(a.stage),
               ") only (it is a replica; plan.hpp Note [Stage replicas])");
          continue;
        }
        if (sh_.forward_only && a.kind != ActionKind::kForward && !is_comm(a.kind) &&
            !is_shard(a.kind)) {
          diag(rank, step, a,
               ": a forward-only plan has only F (and SEND_F / RECV_F, UNSHARD / RESHARD) "
               "actions");
          continue;
        }
        if (is_overlap(a.kind)) {
          check_unit(rank, step);
          continue;
        }
        if (is_shard(a.kind)) {  // checked per stage by check_shard_windows()
          sharded_[idx(a.stage)] = true;
          usable_[r][i] = true;
          continue;
        }
        if (is_comm(a.kind)) {
          if (sh_.forward_only && (a.kind == ActionKind::kSendB || a.kind == ActionKind::kRecvB)) {
            diag(rank, step, a, ": a forward-only plan sends no gradients");
            continue;
          }
          if (!lowered_) {
            diag(rank, step, a, ": communication action in a compute-only plan");
            continue;
          }
          if (a.peer_stage < 0 || a.peer_stage >= sh_.stages) {
            diag(rank, step, a, ": peer stage ", a.peer_stage, " is out of range [0, ", sh_.stages,
                 ")");
            continue;
          }
          usable_[r][i] = true;
          continue;
        }
        Pos* slot = nullptr;
        switch (a.kind) {
          case ActionKind::kForward:
            slot = &f_[cell(a.stage, a.microbatch)];
            break;
          case ActionKind::kFullBackward:
            slot = &b_[cell(a.stage, a.microbatch)];
            break;
          case ActionKind::kBackwardInput:
            slot = &i_[cell(a.stage, a.microbatch)];
            break;
          case ActionKind::kBackwardWeight:
            slot = &w_[cell(a.stage, a.microbatch)];
            break;
          case ActionKind::kReduceGrad:
            slot = &reduce_[idx(a.stage)];
            break;
          case ActionKind::kOptimizerStep:
            slot = &optim_[idx(a.stage)];
            break;
          default:
            break;
        }
        if (slot->present()) {
          diag(rank, step, "duplicate ", a, " (first at rank ", slot->rank, ", step ", slot->step,
               ")");
          continue;
        }
        *slot = Pos{rank, step};
        usable_[r][i] = true;
      }
    }
  }

  // Note [OVERLAP_F_B units] (action.hpp): the marker at (rank, step) is followed by a forward
  // of its stage and a backward (B or I) of another stage of the same rank.
  void check_unit(std::int32_t rank, std::int32_t step) {
    const auto& ops = per_rank_[idx(rank)];
    const Action& m = ops[idx(step)];
    const std::size_t first = idx(step) + 1;
    if (first + 1 >= ops.size()) {
      diag(rank, step, m, ": OVERLAP_F_B needs a forward and a backward after it");
      return;
    }
    const Action& f = ops[first];
    const Action& b = ops[first + 1];
    if (f.kind != ActionKind::kForward || f.stage != m.stage) {
      diag(rank, step, "OVERLAP_F_B unit: the first sub-action must be a forward of stage ",
           m.stage, ", got ", f);
    } else if (b.kind != ActionKind::kFullBackward && b.kind != ActionKind::kBackwardInput) {
      diag(rank, step, "OVERLAP_F_B unit (", f, "; ", b,
           "): the second sub-action must be a backward (B or I)");
    } else if (b.stage == f.stage) {
      diag(rank, step, "OVERLAP_F_B unit (", f, "; ", b,
           "): the forward and the backward must be of different stages");
    }
  }

  void check_counts_and_order() {
    for (std::int32_t s = 0; s < sh_.stages; ++s) {
      const std::int32_t owner = sh_.stage_to_rank[idx(s)];
      Pos last_backward;  // the latest action completing a weight gradient (B, W) of the stage
      for (std::int32_t k = sh_.microbatch_begin(s); k < sh_.microbatch_end(s); ++k) {
        const std::size_t c = cell(s, k);
        const Pos f = f_[c], b = b_[c], in = i_[c], w = w_[c];
        if (!f.present())
          diag(owner, -1, "stage ", s, " microbatch ", k, " has no forward (", s, "F", k, ")");
        if (sh_.forward_only) continue;
        if (b.present() && (in.present() || w.present())) {
          diag(owner, b.step, "stage ", s, " microbatch ", k,
               " has both a full backward (B) and a split backward (I/W)");
        } else if (!b.present() && !in.present() && !w.present()) {
          diag(owner, -1, "stage ", s, " microbatch ", k, " has no backward (", s, "B", k, " or ",
               s, "I", k, " + ", s, "W", k, ")");
        } else if (in.present() && !w.present()) {
          diag(owner, in.step, "stage ", s, " microbatch ", k, " has I without W (", s, "W", k,
               " missing)");
        } else if (w.present() && !in.present()) {
          diag(owner, w.step, "stage ", s, " microbatch ", k, " has W without I (", s, "I", k,
               " missing)");
        }
        // A stage's own inputs (plan_dag.hpp: B/I need its F, W its input gradient, here its I)
        // come earlier on its rank.
        for (const Pos& p : {b.present() ? b : in, w}) {
          if (!p.present()) continue;
          const Action& a = per_rank_[idx(owner)][idx(p.step)];
          for (const Fact& need : rules_->needs(a)) {
            if (need.is_message() || need.stage != s) continue;
            const Pos src = need.kind == FactKind::kForward ? f : in;
            if (!src.present() || p.step >= src.step) continue;
            if (a.kind == ActionKind::kBackwardWeight) {
              diag(owner, p.step, s, "W", k, " runs before ", s, "I", k, " (step ", src.step, ")");
            } else {
              diag(owner, p.step, a, " runs before its forward ", s, "F", k, " (step ", src.step,
                   ")");
            }
          }
        }
        for (const Pos& p : {b, in, w}) {
          if (!p.present() || !completes_weight_grad(per_rank_[idx(owner)][idx(p.step)].kind))
            continue;
          if (p.step > last_backward.step) last_backward = p;
        }
      }
      const Pos red = reduce_[idx(s)];
      const Pos opt = optim_[idx(s)];
      if (red.present() && last_backward.present() && red.step < last_backward.step) {
        diag(owner, red.step, s, "REDUCE_GRAD runs before the stage's last backward ",
             per_rank_[idx(owner)][idx(last_backward.step)], " (step ", last_backward.step, ")");
      }
      if (opt.present() && last_backward.present() && opt.step < last_backward.step) {
        diag(owner, opt.step, s, "OPTIM runs before the stage's last backward ",
             per_rank_[idx(owner)][idx(last_backward.step)], " (step ", last_backward.step, ")");
      }
      if (opt.present() && red.present() && opt.step < red.step) {
        diag(owner, opt.step, s, "OPTIM runs before ", s, "REDUCE_GRAD (step ", red.step, ")");
      }
    }
  }

  // Note [UNSHARD and RESHARD] (action.hpp): a stage with any UNSHARD / RESHARD runs its compute
  // inside a window and its OPTIM outside one; windows alternate and close.
  void check_shard_windows() {
    for (std::size_t r = 0; r < per_rank_.size(); ++r) {
      const auto rank = static_cast<std::int32_t>(r);
      const auto& ops = per_rank_[r];
      // Per stage: the step of the open UNSHARD (-1: closed) and of the last RESHARD (-1: none).
      std::vector<std::int32_t> open(idx(sh_.stages), -1), closed(idx(sh_.stages), -1);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Action& a = ops[i];
        const auto step = static_cast<std::int32_t>(i);
        if (!usable_[r][i] || a.stage < 0 || a.stage >= sh_.stages || !sharded_[idx(a.stage)]) {
          continue;
        }
        std::int32_t& o = open[idx(a.stage)];
        std::int32_t& c = closed[idx(a.stage)];
        if (a.kind == ActionKind::kUnshard) {
          if (o >= 0) {
            diag(rank, step, a, ": stage ", a.stage, " is already unsharded by ", a, " at step ", o,
                 " (no ", a.stage, "RESHARD between them)");
          } else {
            o = step;
          }
        } else if (a.kind == ActionKind::kReshard) {
          if (o < 0) {
            diag(rank, step, a, ": no open ", a.stage, "UNSHARD before it to close");
          } else {
            o = -1;
            c = step;
          }
        } else if (needs_parameters(a.kind) && o < 0) {
          if (c >= 0) {
            diag(rank, step, a, " runs outside stage ", a.stage,
                 "'s UNSHARD..RESHARD window: ", a.stage, "RESHARD at step ", c,
                 " freed its parameters before it");
          } else {
            diag(rank, step, a, " runs before ", a.stage, "UNSHARD: stage ", a.stage,
                 "'s parameters are sharded (no UNSHARD..RESHARD window holds it)");
          }
        } else if (a.kind == ActionKind::kOptimizerStep && o >= 0) {
          diag(rank, step, a, " runs inside stage ", a.stage, "'s window (", a.stage,
               "UNSHARD at step ", o, "): ", a.stage, "RESHARD first");
        }
      }
      for (std::int32_t s = 0; s < sh_.stages; ++s) {
        if (open[idx(s)] >= 0) {
          diag(rank, open[idx(s)], s, "UNSHARD has no ", s, "RESHARD after it");
        }
      }
    }
  }

  // --- lowered plans ---------------------------------------------------------------------------

  struct Message {
    Pos send;
    Pos recv;
  };

  void check_messages() {
    messages_.assign(static_cast<std::size_t>(rules_->ids()), Message{});
    for (std::size_t r = 0; r < per_rank_.size(); ++r) {
      const auto rank = static_cast<std::int32_t>(r);
      for (std::size_t i = 0; i < per_rank_[r].size(); ++i) {
        const Action& a = per_rank_[r][i];
        if (!usable_[r][i] || !is_comm(a.kind)) continue;
        const auto step = static_cast<std::int32_t>(i);
        const bool to_consumer = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB;
        if (rules_->message_id(a) < 0) {
          diag(rank, step, a, ": stage ", a.peer_stage, " is not a ",
               to_consumer ? "consumer" : "producer", " of stage ", a.stage);
          usable_[r][i] = false;
          continue;
        }
        if (sh_.stage_to_rank[idx(a.peer_stage)] == rank) {
          diag(rank, step, a, ": stages ", a.stage, " and ", a.peer_stage, " are both on rank ",
               rank, " and exchange in memory; no SEND/RECV between them");
          usable_[r][i] = false;
          continue;
        }
        Message& m = messages_[static_cast<std::size_t>(rules_->message_id(a))];
        Pos& slot = is_send(a.kind) ? m.send : m.recv;
        if (slot.present()) {
          diag(rank, step, "duplicate ", a, " (first at rank ", slot.rank, ", step ", slot.step,
               ")");
          usable_[r][i] = false;
          continue;
        }
        slot = Pos{rank, step};
      }
    }
    // Unmatched sends / receives, reported at the action that has no partner.
    std::vector<std::pair<Pos, std::string>> unmatched;
    for (const Message& m : messages_) {
      if (m.send.present() && !m.recv.present()) {
        const Action& a = per_rank_[idx(m.send.rank)][idx(m.send.step)];
        const Action want = matching(a);
        unmatched.push_back({m.send, to_string(a) + ": no matching " + to_string(want) +
                                         " on rank " +
                                         std::to_string(sh_.stage_to_rank[idx(want.stage)])});
      } else if (m.recv.present() && !m.send.present()) {
        const Action& a = per_rank_[idx(m.recv.rank)][idx(m.recv.step)];
        const Action want = matching(a);
        unmatched.push_back({m.recv, to_string(a) + ": no matching " + to_string(want) +
                                         " on rank " +
                                         std::to_string(sh_.stage_to_rank[idx(want.stage)])});
      }
    }
    std::sort(unmatched.begin(), unmatched.end(), [](const auto& x, const auto& y) {
      return std::make_pair(x.first.rank, x.first.step) <
             std::make_pair(y.first.rank, y.first.step);
    });
    for (const auto& [pos, text] : unmatched) diag(pos.rank, pos.step, text);
  }

  // Every compute after its inputs, every SEND after the compute producing its data.
  void check_data_order() {
    for (std::size_t r = 0; r < per_rank_.size(); ++r) {
      const auto rank = static_cast<std::int32_t>(r);
      for (std::size_t i = 0; i < per_rank_[r].size(); ++i) {
        if (!usable_[r][i]) continue;
        const Action& a = per_rank_[r][i];
        const auto step = static_cast<std::int32_t>(i);
        if (is_recv(a.kind)) continue;  // matched with its SEND by check_messages()
        for (const Fact& f : rules_->needs(a)) {
          if (f.is_message()) {  // another rank's data: the local RECV
            need_recv(rank, step, a, PlanRules::action_of(f, a.microbatch));
            continue;
          }
          const Pos src = producer(f, a.microbatch);
          if (f.stage != a.stage) {
            need_local(rank, step, a, src);
          } else if (is_send(a.kind) && src.present() && src.step > step) {
            diag(rank, step, a, " is sent before it is computed by ", per_rank_[r][idx(src.step)],
                 " (step ", src.step, ")");
          }  // a B/I after its own F, a W after its own I: check_counts_and_order()
        }
      }
    }
  }

  // Where the kForward / kInputGrad fact `f` of microbatch mb is computed (a B before an I).
  Pos producer(const Fact& f, std::int32_t mb) const {
    const std::size_t c = cell(f.stage, mb);
    if (f.kind == FactKind::kForward) return f_[c];
    return b_[c].present() ? b_[c] : i_[c];
  }

  void need_local(std::int32_t rank, std::int32_t step, const Action& a, Pos src) {
    if (src.present() && src.step > step) {
      diag(rank, step, a, " runs before its local input ", per_rank_[idx(rank)][idx(src.step)],
           " (step ", src.step, ")");
    }
  }

  void need_recv(std::int32_t rank, std::int32_t step, const Action& a, const Action& recv) {
    const Message& m = messages_[static_cast<std::size_t>(rules_->message_id(recv))];
    if (!m.recv.present()) {
      diag(rank, step, a, " has no ", recv, " on rank ", rank);
    } else if (m.recv.step > step) {
      diag(rank, step, a, " runs before ", recv, " (step ", m.recv.step, ")");
    }
  }

  // --- compute-only cross-rank cycles ------------------------------------------------------------

  void check_cycles() {
    auto stuck = detail::compute_dry_run(sh_, per_rank_);
    if (!stuck.empty()) diag(stuck.front().rank, stuck.front().step, stuck.front().message);
  }

  const PlanShape& sh_;
  const std::vector<std::vector<Action>>& per_rank_;
  bool lowered_;
  static constexpr std::size_t kMaxDiagnostics = 1000;
  std::vector<Diagnostic> out_;
  std::size_t suppressed_ = 0;
  std::optional<PlanRules> rules_;  // the dependency rules (plan_dag.hpp), once the shape is valid
  std::vector<Pos> f_, b_, i_, w_, reduce_, optim_;
  std::vector<bool> sharded_;  // per stage: the plan holds an UNSHARD or RESHARD of it
  std::vector<std::vector<bool>> usable_;
  std::vector<Message> messages_;  // by PlanRules::message_id
};

}  // namespace

std::string format_diagnostics(const std::vector<Diagnostic>& diags, std::size_t max_shown) {
  std::string out;
  for (std::size_t i = 0; i < diags.size() && i < max_shown; ++i)
    out += "\n  " + to_string(diags[i]);
  if (diags.size() > max_shown) {
    out += "\n  ... and " + std::to_string(diags.size() - max_shown) + " more (not shown)";
  }
  return out;
}

std::string to_string(const Diagnostic& d) {
  std::string out;
  if (d.rank >= 0) out += "rank " + std::to_string(d.rank);
  if (d.step >= 0) out += (out.empty() ? "step " : ", step ") + std::to_string(d.step);
  if (!out.empty()) out += ": ";
  return out + d.message;
}

std::vector<Diagnostic> validate(const ComputePlan& plan) {
  return Validator(plan.shape, plan.per_rank, false).run();
}

std::vector<Diagnostic> validate(const LoweredPlan& plan) {
  return Validator(plan.shape, plan.per_rank, true).run();
}

void check_valid(const ComputePlan& plan, const std::string& origin) {
  auto diags = validate(plan);
  PW_CHECK(
      diags.empty(), InvalidPlanError,
      origin << ": invalid plan (" << diags.size() << " problems):" << format_diagnostics(diags));
}

void check_valid(const LoweredPlan& plan, const std::string& origin) {
  auto diags = validate(plan);
  PW_CHECK(
      diags.empty(), InvalidPlanError,
      origin << ": invalid plan (" << diags.size() << " problems):" << format_diagnostics(diags));
}

}  // namespace pipewright::sched
