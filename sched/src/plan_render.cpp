// Text grid and Graphviz dot views of plans.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "pipewright/sched/plan_io.hpp"
#include "validate_detail.hpp"

namespace pipewright::sched {
namespace {

std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }

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

std::string to_text_grid(const ComputePlan& plan) {
  const PlanShape& sh = plan.shape;
  const std::size_t cells = idx(std::max(sh.stages, 0)) * idx(std::max(sh.microbatches, 0));
  std::vector<bool> fwd(cells, false), bwd(cells, false), inp(cells, false);
  auto cell = [&](std::int32_t s, std::int32_t k) {
    return idx(s) * idx(sh.microbatches) + idx(k);
  };
  const auto edges = sh.edges();
  return grid(
      plan.per_rank,
      [&](std::int32_t, const Action& a) {
        if (!in_range(sh, a) || !has_microbatch(a.kind)) return in_range(sh, a);
        const std::size_t c = cell(a.stage, a.microbatch);
        switch (a.kind) {
          case ActionKind::kForward:
            for (const auto& e : edges) {
              if (e.to == a.stage && !fwd[cell(e.from, a.microbatch)]) return false;
            }
            return true;
          case ActionKind::kFullBackward:
          case ActionKind::kBackwardInput:
            if (!fwd[c]) return false;
            for (const auto& e : edges) {
              if (e.from == a.stage && !bwd[cell(e.to, a.microbatch)]) return false;
            }
            return true;
          case ActionKind::kBackwardWeight:
            return bool(inp[c]);
          default:
            return true;
        }
      },
      [&](std::int32_t, const Action& a) {
        if (!has_microbatch(a.kind)) return;
        const std::size_t c = cell(a.stage, a.microbatch);
        if (a.kind == ActionKind::kForward) fwd[c] = true;
        if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput) {
          bwd[c] = true;
        }
        if (a.kind == ActionKind::kBackwardInput) inp[c] = true;
      });
}

std::string to_text_grid(const LoweredPlan& plan) {
  std::unordered_set<MessageKey, MessageKeyHash> sent;
  return grid(
      plan.per_rank,
      [&](std::int32_t, const Action& a) {
        if (!in_range(plan.shape, a)) return false;
        return !is_recv(a.kind) || sent.count(message_key(a)) > 0;
      },
      [&](std::int32_t, const Action& a) {
        if (is_send(a.kind)) sent.insert(message_key(a));
      });
}

std::string to_dot(const ComputePlan& plan) {
  const PlanShape& sh = plan.shape;
  std::ostringstream os;
  os << "digraph plan {\n" << kDotHeader;
  dot_nodes(os, plan.per_rank);
  // Data edges between stages: producer F -> consumer F, consumer B/I -> producer B/I.
  std::vector<std::pair<std::size_t, std::size_t>> f_at, b_at;  // (rank, step) per cell
  const std::size_t cells = idx(std::max(sh.stages, 0)) * idx(std::max(sh.microbatches, 0));
  f_at.assign(cells, {SIZE_MAX, 0});
  b_at.assign(cells, {SIZE_MAX, 0});
  auto cell = [&](std::int32_t s, std::int32_t k) {
    return idx(s) * idx(sh.microbatches) + idx(k);
  };
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    for (std::size_t i = 0; i < plan.per_rank[r].size(); ++i) {
      const Action& a = plan.per_rank[r][i];
      if (!in_range(sh, a) || !has_microbatch(a.kind)) continue;
      if (a.kind == ActionKind::kForward) f_at[cell(a.stage, a.microbatch)] = {r, i};
      if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardInput) {
        b_at[cell(a.stage, a.microbatch)] = {r, i};
      }
    }
  }
  for (const auto& e : sh.edges()) {
    if (e.from < 0 || e.from >= sh.stages || e.to < 0 || e.to >= sh.stages) continue;
    for (std::int32_t k = 0; k < sh.microbatches; ++k) {
      const auto pf = f_at[cell(e.from, k)], cf = f_at[cell(e.to, k)];
      if (pf.first != SIZE_MAX && cf.first != SIZE_MAX) {
        os << "  " << node_id(pf.first, pf.second) << " -> " << node_id(cf.first, cf.second)
           << ";\n";
      }
      const auto cb = b_at[cell(e.to, k)], pb = b_at[cell(e.from, k)];
      if (cb.first != SIZE_MAX && pb.first != SIZE_MAX) {
        os << "  " << node_id(cb.first, cb.second) << " -> " << node_id(pb.first, pb.second)
           << " [color=firebrick];\n";
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
  std::unordered_map<MessageKey, std::pair<std::size_t, std::size_t>, MessageKeyHash> recv_at;
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    for (std::size_t i = 0; i < plan.per_rank[r].size(); ++i) {
      if (is_recv(plan.per_rank[r][i].kind)) recv_at[message_key(plan.per_rank[r][i])] = {r, i};
    }
  }
  for (std::size_t r = 0; r < plan.per_rank.size(); ++r) {
    for (std::size_t i = 0; i < plan.per_rank[r].size(); ++i) {
      const Action& a = plan.per_rank[r][i];
      if (!is_send(a.kind)) continue;
      auto it = recv_at.find(message_key(a));
      if (it == recv_at.end()) continue;
      os << "  " << node_id(r, i) << " -> " << node_id(it->second.first, it->second.second)
         << " [color=blue, penwidth=2];\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace pipewright::sched
