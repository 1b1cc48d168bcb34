// Text grid and Graphviz dot views of plans.
#include <algorithm>
#include <cstdint>
#include <sstream>

#include "check/validate_detail.hpp"
#include "pipewright/sched/plan_io.hpp"

namespace pipewright::sched {
namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }

bool in_range(const PlanShape& sh, const Action& a) {
  if (a.stage < 0 || a.stage >= sh.stages) return false;
  if (has_microbatch(a.kind) && (a.microbatch < 0 || a.microbatch >= sh.microbatches)) return false;
  return !is_comm(a.kind) || (a.peer_stage >= 0 && a.peer_stage < sh.stages);
}

// Unit-time replay shared by both grids. `ready(rank, action)` decides from the state after the
// previous step; `done(rank, action)` records an action at the end of its step.
template <typename Ready, typename Done>
std::string grid(const std::vector<std::vector<Action>>& per_rank, Ready ready, Done done) {
  const std::size_t p = per_rank.size();
  std::vector<std::size_t> pc(p, 0);
  std::vector<std::vector<std::string>> cells(p);
  std::size_t width = 1;
  std::vector<const Action*> ran(p);
  while (true) {
    bool all_done = true;
    bool progress = false;
    for (std::size_t r = 0; r < p; ++r) {
      ran[r] = nullptr;
      if (pc[r] == per_rank[r].size()) continue;
      all_done = false;
      const Action& a = per_rank[r][pc[r]];
      if (ready(static_cast<std::int32_t>(r), a)) ran[r] = &a;
    }
    if (all_done) break;
    for (std::size_t r = 0; r < p; ++r) {
      if (pc[r] == per_rank[r].size()) {
        cells[r].emplace_back();
      } else if (ran[r] != nullptr) {
        done(static_cast<std::int32_t>(r), *ran[r]);
        cells[r].push_back(to_string(*ran[r]));
        width = std::max(width, cells[r].back().size());
        ++pc[r];
        progress = true;
      } else {
        cells[r].emplace_back(".");
      }
    }
    if (!progress) {
      for (auto& row : cells) row.pop_back();
      break;
    }
  }
  std::string out;
  const std::string last_label = "rank " + std::to_string(p == 0 ? 0 : p - 1) + ":";
  for (std::size_t r = 0; r < p; ++r) {
    std::string line = "rank " + std::to_string(r) + ":";
    line.append(last_label.size() - line.size(), ' ');
    for (const auto& c : cells[r]) {
      line += ' ';
      line += c;
      line.append(width - c.size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  }
  std::string stuck;
  for (std::size_t r = 0; r < p; ++r) {
    if (pc[r] < per_rank[r].size()) {
      stuck += " rank " + std::to_string(r) + " at " + to_string(per_rank[r][pc[r]]) + ";";
    }
  }
  if (!stuck.empty()) out += "stuck (waiting for inputs that never come):" + stuck + '\n';
  return out;
}

const char* fill_of(ActionKind k) {
  switch (k) {
    case ActionKind::kForward:
      return "#cfe2ff";
    case ActionKind::kFullBackward:
    case ActionKind::kBackwardInput:
      return "#f8d7da";
    case ActionKind::kBackwardWeight:
      return "#fff3cd";
    case ActionKind::kReduceGrad:
    case ActionKind::kOptimizerStep:
      return "#e2e3e5";
    case ActionKind::kUnshard:
    case ActionKind::kReshard:
      return "#d1e7dd";
    default:
      return "#ffffff";
  }
}

std::string node_id(std::size_t r, std::size_t i) {
  return "r" + std::to_string(r) + "s" + std::to_string(i);
}

void dot_nodes(std::ostringstream& os, const std::vector<std::vector<Action>>& per_rank) {
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    os << "  subgraph cluster_rank" << r << " {\n    label=\"rank " << r << "\";\n";
    for (std::size_t i = 0; i < per_rank[r].size(); ++i) {
      const Action& a = per_rank[r][i];
      os << "    " << node_id(r, i) << " [label=\"" << a << "\", fillcolor=\"" << fill_of(a.kind)
         << "\"];\n";
    }
    for (std::size_t i = 0; i + 1 < per_rank[r].size(); ++i) {
      os << "    " << node_id(r, i) << " -> " << node_id(r, i + 1)
         << " [style=dotted, color=gray50];\n";
    }
    os << "  }\n";
  }
}

const char* kDotHeader =
    "  rankdir=LR;\n  node [shape=box, style=filled, fontname=\"monospace\", fontsize=10];\n";

}  // namespace

// An action is ready when every fact it needs (plan_dag.hpp) has been produced.
template <typename Plan>
std::string grid_of(const Plan& plan, Level level) {
  const PlanRules rules(plan.shape, level);
  std::vector<bool> done(static_cast<std::size_t>(rules.ids()), false);
  return grid(
      plan.per_rank,
      [&](std::int32_t, const Action& a) {
        if (!in_range(plan.shape, a)) return false;
        for (const Fact& f : rules.needs(a)) {
          const std::int64_t id = rules.id(f, a.microbatch);
          if (id >= 0 && !done[static_cast<std::size_t>(id)]) return false;
        }
        return true;
      },
      [&](std::int32_t, const Action& a) {
        const auto f = produces(a);
        const std::int64_t id = f ? rules.id(*f, a.microbatch) : -1;
        if (id >= 0) done[static_cast<std::size_t>(id)] = true;
      });
}

std::string to_text_grid(const ComputePlan& plan) { return grid_of(plan, Level::kCompute); }

std::string to_text_grid(const LoweredPlan& plan) {
  // Only the messages order a lowered plan's grid (a rank's own actions keep program order).
  const PlanRules rules(plan.shape, Level::kLowered);
  std::vector<bool> sent(static_cast<std::size_t>(rules.ids()), false);
  return grid(
      plan.per_rank,
      [&](std::int32_t, const Action& a) {
        if (!in_range(plan.shape, a)) return false;
        if (!is_recv(a.kind)) return true;
        const std::int64_t id = rules.message_id(a);
        return id >= 0 && sent[static_cast<std::size_t>(id)];
      },
      [&](std::int32_t, const Action& a) {
        const std::int64_t id = is_send(a.kind) ? rules.message_id(a) : -1;
        if (id >= 0) sent[static_cast<std::size_t>(id)] = true;
      });
}

std::string to_dot(const ComputePlan& plan) {
  const PlanShape& sh = plan.shape;
  std::ostringstream os;
  os << "digraph plan {\n" << kDotHeader;
  dot_nodes(os, plan.per_rank);
  // Data edges between stages, per stage edge and microbatch: producer F -> consumer F (the
  // consumer's F needs it), consumer B/I -> producer B/I; positions from the plan's DAG.
  const PlanDag dag(plan);
  auto at = [&](FactKind kind, std::int32_t stage, std::int32_t k) {
    return dag.producer(Fact{kind, stage, -1}, k);
  };
  for (const auto& e : dag.rules().edges()) {
    for (std::int32_t k = 0; k < sh.microbatches; ++k) {
      const Position pf = at(FactKind::kForward, e.from, k), cf = at(FactKind::kForward, e.to, k);
      if (pf.valid() && cf.valid()) {
        os << "  " << node_id(idx(pf.rank), idx(pf.index)) << " -> "
           << node_id(idx(cf.rank), idx(cf.index)) << ";\n";
      }
      const Position cb = at(FactKind::kInputGrad, e.to, k);
      const Position pb = at(FactKind::kInputGrad, e.from, k);
      if (cb.valid() && pb.valid()) {
        os << "  " << node_id(idx(cb.rank), idx(cb.index)) << " -> "
           << node_id(idx(pb.rank), idx(pb.index)) << " [color=firebrick];\n";
      }
    }
  }
  os << "}\n";
  return os.str();
}

std::string to_dot(const LoweredPlan& plan) {
  std::ostringstream os;
  os << "digraph plan {\n" << kDotHeader;
  dot_nodes(os, plan.per_rank);
  const PlanDag dag(plan);
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    for (std::size_t i = 0; i < plan.per_rank[r].size(); ++i) {
      if (!is_send(plan.per_rank[r][i].kind)) continue;
      const Position recv = dag.match({static_cast<std::int32_t>(r), static_cast<std::int32_t>(i)});
      if (!recv.valid()) continue;
      os << "  " << node_id(r, i) << " -> " << node_id(idx(recv.rank), idx(recv.index))
         << " [color=blue, penwidth=2];\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace pipewright::sched
