#include "pipewright/sched/plan_dag.hpp"

#include <algorithm>
#include <utility>

namespace pipewright::sched {
namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace

std::optional<Fact> produces(const Action& a) noexcept {
  switch (a.kind) {
    case ActionKind::kForward:
      return Fact{FactKind::kForward, a.stage, -1};
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput:
      return Fact{FactKind::kInputGrad, a.stage, -1};
    case ActionKind::kSendF:
      return Fact{FactKind::kActivationSent, a.stage, a.peer_stage};
    case ActionKind::kRecvF:
      return Fact{FactKind::kActivationReceived, a.peer_stage, a.stage};
    case ActionKind::kSendB:
      return Fact{FactKind::kGradientSent, a.peer_stage, a.stage};
    case ActionKind::kRecvB:
      return Fact{FactKind::kGradientReceived, a.stage, a.peer_stage};
    default:
      return std::nullopt;
  }
}

Action matching(const Action& a) noexcept {
  ActionKind k = ActionKind::kRecvF;
  switch (a.kind) {
    case ActionKind::kSendF:
      k = ActionKind::kRecvF;
      break;
    case ActionKind::kRecvF:
      k = ActionKind::kSendF;
      break;
    case ActionKind::kSendB:
      k = ActionKind::kRecvB;
      break;
    default:
      k = ActionKind::kSendB;
      break;
  }
  return Action{a.peer_stage, k, a.microbatch, a.stage};
}

PlanRules::PlanRules(const PlanShape& shape, Level level)
    : level_(level),
      stages_(std::max(shape.stages, 0)),
      microbatches_(std::max(shape.microbatches, 0)),
      stage_to_rank_(shape.stage_to_rank) {
  const auto S = idx(stages_);
  out_.resize(S);
  for (const auto& e : shape.edges()) {
    if (e.from < 0 || e.from >= stages_ || e.to < 0 || e.to >= stages_) continue;
    out_[idx(e.from)].push_back({e.to, static_cast<std::int32_t>(edges_.size())});
    edges_.push_back(e);
  }
  forward_.resize(S);
  backward_.resize(S);
  weight_.resize(S);
  sent_after_f_.resize(S);
  sent_after_b_.resize(S);
  for (std::int32_t s = 0; s < stages_; ++s) {
    backward_[idx(s)].push_back({FactKind::kForward, s, -1});
    weight_[idx(s)].push_back({FactKind::kInputGrad, s, -1});
  }
  for (const auto& e : edges_) {
    const bool local = level_ == Level::kCompute || same_rank(e.from, e.to);
    forward_[idx(e.to)].push_back(local ? Fact{FactKind::kForward, e.from, -1}
                                        : Fact{FactKind::kActivationReceived, e.from, e.to});
    backward_[idx(e.from)].push_back(local ? Fact{FactKind::kInputGrad, e.to, -1}
                                           : Fact{FactKind::kGradientReceived, e.from, e.to});
    send_f_.push_back({{FactKind::kForward, e.from, -1}});
    send_b_.push_back({{FactKind::kInputGrad, e.to, -1}});
    recv_f_.push_back({{FactKind::kActivationSent, e.from, e.to}});
    recv_b_.push_back({{FactKind::kGradientSent, e.from, e.to}});
    if (level_ == Level::kLowered && !same_rank(e.from, e.to)) {
      sent_after_f_[idx(e.from)].push_back({FactKind::kActivationSent, e.from, e.to});
      sent_after_b_[idx(e.to)].push_back({FactKind::kGradientSent, e.from, e.to});
    }
  }
}

bool PlanRules::same_rank(std::int32_t a, std::int32_t b) const noexcept {
  if (idx(a) >= stage_to_rank_.size() || idx(b) >= stage_to_rank_.size()) return false;
  return stage_to_rank_[idx(a)] == stage_to_rank_[idx(b)];
}

std::int32_t PlanRules::edge_index(std::int32_t from, std::int32_t to) const noexcept {
  if (from < 0 || from >= stages_) return -1;
  for (const auto& [t, e] : out_[idx(from)]) {
    if (t == to) return e;
  }
  return -1;
}

const std::vector<Fact>& PlanRules::needs(const Action& a) const noexcept {
  static const std::vector<Fact> kNone;
  if (a.stage < 0 || a.stage >= stages_) return kNone;
  const auto s = idx(a.stage);
  switch (a.kind) {
    case ActionKind::kForward:
      return forward_[s];
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput:
      return backward_[s];
    case ActionKind::kBackwardWeight:
      return weight_[s];
    case ActionKind::kSendF: {
      const auto e = edge_index(a.stage, a.peer_stage);
      return e < 0 ? kNone : send_f_[idx(e)];
    }
    case ActionKind::kSendB: {
      const auto e = edge_index(a.peer_stage, a.stage);
      return e < 0 ? kNone : send_b_[idx(e)];
    }
    case ActionKind::kRecvF: {
      const auto e = edge_index(a.peer_stage, a.stage);
      return e < 0 ? kNone : recv_f_[idx(e)];
    }
    case ActionKind::kRecvB: {
      const auto e = edge_index(a.stage, a.peer_stage);
      return e < 0 ? kNone : recv_b_[idx(e)];
    }
    default:
      return kNone;
  }
}

const std::vector<Fact>& PlanRules::sent_by(const Action& a) const noexcept {
  static const std::vector<Fact> kNone;
  if (a.stage < 0 || a.stage >= stages_) return kNone;
  if (a.kind == ActionKind::kForward) return sent_after_f_[idx(a.stage)];
  if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput) {
    return sent_after_b_[idx(a.stage)];
  }
  return kNone;
}

std::vector<Action> PlanRules::sends(const Action& a) const {
  std::vector<Action> out;
  for (const Fact& f : sent_by(a)) out.push_back(action_of(f, a.microbatch));
  return out;
}

Action PlanRules::action_of(const Fact& f, std::int32_t mb) noexcept {
  switch (f.kind) {
    case FactKind::kActivationSent:
      return Action{f.stage, ActionKind::kSendF, mb, f.peer};
    case FactKind::kActivationReceived:
      return Action{f.peer, ActionKind::kRecvF, mb, f.stage};
    case FactKind::kGradientSent:
      return Action{f.peer, ActionKind::kSendB, mb, f.stage};
    default:
      return Action{f.stage, ActionKind::kRecvB, mb, f.peer};
  }
}

std::int64_t PlanRules::row(const Fact& f) const noexcept {
  if (!f.is_message()) {
    if (f.stage < 0 || f.stage >= stages_) return -1;
    return (f.kind == FactKind::kForward ? 0 : stages_) + f.stage;
  }
  const std::int32_t e = edge_index(f.stage, f.peer);
  if (e < 0) return -1;
  const auto k =
      static_cast<std::int64_t>(f.kind) - static_cast<std::int64_t>(FactKind::kActivationSent);
  return 2 * static_cast<std::int64_t>(stages_) + k * edge_count() + e;
}

std::int64_t PlanRules::id(const Fact& f, std::int32_t mb) const noexcept {
  if (mb < 0 || mb >= microbatches_) return -1;
  const std::int64_t r = row(f);
  return r < 0 ? -1 : r * microbatches_ + mb;
}

std::int64_t PlanRules::message_id(const Action& comm) const noexcept {
  const auto f = produces(is_send(comm.kind) ? comm : matching(comm));
  return f ? id(*f, comm.microbatch) : -1;
}

PlanDag::PlanDag(const PlanShape& shape, const std::vector<std::vector<Action>>& per_rank,
                 Level level)
    : rules_(shape, level), per_rank_(per_rank), producer_(idx(rules_.ids())) {
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (std::size_t i = 0; i < per_rank[r].size(); ++i) {
      const auto f = produces(per_rank[r][i]);
      if (!f) continue;
      const std::int64_t id = rules_.id(*f, per_rank[r][i].microbatch);
      if (id >= 0) {
        producer_[idx(id)] = Position{static_cast<std::int32_t>(r), static_cast<std::int32_t>(i)};
      }
    }
  }
}

Position PlanDag::producer(const Fact& f, std::int32_t mb) const noexcept {
  const std::int64_t id = rules_.id(f, mb);
  return id < 0 ? Position{} : producer_[idx(id)];
}

std::vector<Position> PlanDag::deps(Position p) const {
  std::vector<Position> out;
  const Action& a = per_rank_[idx(p.rank)][idx(p.index)];
  for (const Fact& f : rules_.needs(a)) out.push_back(producer(f, a.microbatch));
  return out;
}

Position PlanDag::match(Position p) const noexcept {
  const Action& a = per_rank_[idx(p.rank)][idx(p.index)];
  if (!is_comm(a.kind)) return {};
  const auto f = produces(matching(a));
  return f ? producer(*f, a.microbatch) : Position{};
}

std::vector<ShardWindow> shard_windows(const std::vector<Action>& ops) {
  std::vector<ShardWindow> out;
  std::vector<std::pair<std::int32_t, std::size_t>> open;  // (stage, index into out)
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Action& a = ops[i];
    if (!is_shard(a.kind)) continue;
    const auto it =
        std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == a.stage; });
    if (a.kind == ActionKind::kUnshard) {
      if (it != open.end()) continue;
      open.emplace_back(a.stage, out.size());
      out.push_back({a.stage, static_cast<std::int32_t>(i), -1});
    } else if (it != open.end()) {
      out[it->second].reshard = static_cast<std::int32_t>(i);
      open.erase(it);
    }
  }
  return out;
}

}  // namespace pipewright::sched
