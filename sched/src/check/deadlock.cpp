#include "pipewright/sched/deadlock.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>

#include "check/validate_detail.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::sched {
namespace {

std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }

// Follows waits_for from the lowest blocked rank until a rank repeats (a cycle) or the chain
// reaches a rank that is not blocked (it finished without acting). `label(rank)` names the rank's
// blocking action.
template <typename Label>
std::string waiting_chain(const std::vector<int>& waits_for, const std::vector<bool>& blocked,
                          Label label) {
  int start = -1;
  for (std::size_t r = 0; r < blocked.size(); ++r) {
    if (blocked[r]) {
      start = static_cast<int>(r);
      break;
    }
  }
  if (start < 0) return {};
  std::vector<int> order;
  std::vector<int> seen_at(blocked.size(), -1);
  int r = start;
  while (r >= 0 && blocked[idx(r)] && seen_at[idx(r)] < 0) {
    seen_at[idx(r)] = static_cast<int>(order.size());
    order.push_back(r);
    r = waits_for[idx(r)];
  }
  std::string out;
  if (r >= 0 && blocked[idx(r)]) {  // cycle: print it from its first member, closing it
    for (std::size_t i = idx(seen_at[idx(r)]); i < order.size(); ++i) {
      out += label(order[i]) + " -> ";
    }
    return out + label(r);
  }
  for (int x : order) out += label(x) + " -> ";
  return out + std::to_string(r) + ":(finished)";
}

// Rank x step grid; stuck cells are drawn as [action]. Long plans show only windows of steps
// around the stuck cells.
std::string stuck_grid(const std::vector<std::vector<Action>>& per_rank,
                       const std::vector<StuckRank>& stuck) {
  std::size_t steps = 0;
  for (const auto& ops : per_rank) steps = std::max(steps, ops.size());
  std::vector<int> stuck_step(per_rank.size(), -1);
  for (const auto& s : stuck) stuck_step[idx(s.rank)] = s.step;
  std::vector<bool> show(steps, steps <= 48);
  for (const auto& s : stuck) {
    const std::size_t lo = idx(std::max(0, s.step - 6));
    const std::size_t hi = std::min(steps, idx(s.step) + 3);
    for (std::size_t c = lo; c < hi; ++c) show[c] = true;
  }
  auto cell_text = [&](std::size_t r, std::size_t c) -> std::string {
    if (c >= per_rank[r].size()) return "";
    std::string t = to_string(per_rank[r][c]);
    if (stuck_step[r] == static_cast<int>(c)) return "[" + t + "]";
    return t;
  };
  std::size_t width = 4;
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (std::size_t c = 0; c < steps; ++c) {
      if (show[c]) width = std::max(width, cell_text(r, c).size());
    }
  }
  const std::string rank_label = "rank " + std::to_string(per_rank.size() - 1);
  auto pad = [](std::string s, std::size_t w) {
    if (s.size() < w) s.append(w - s.size(), ' ');
    return s;
  };
  std::string out = pad("step", rank_label.size() + 1);
  for (std::size_t c = 0; c < steps; ++c) {
    if (show[c]) {
      out += " " + pad(std::to_string(c), width);
    } else if (c == 0 || show[c - 1]) {
      out += " ...";
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += "\n";
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    std::string line = pad("rank " + std::to_string(r) + ":", rank_label.size() + 1);
    for (std::size_t c = 0; c < steps; ++c) {
      if (show[c]) {
        line += " " + pad(cell_text(r, c), width);
      } else if (c == 0 || show[c - 1]) {
        line += " ...";
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string_view to_string(Transport transport) noexcept {
  return transport == Transport::kBuffered ? "buffered" : "rendezvous";
}

Transport parse_transport(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "buffered") return Transport::kBuffered;
  if (lower == "rendezvous") return Transport::kRendezvous;
  throw ConfigError("unknown transport '" + std::string(name) +
                    "'; valid transports: buffered, rendezvous");
}

std::string DeadlockReport::message() const {
  if (ok) return {};
  return "deadlock under " + std::string(to_string(transport)) + " sends: " + cycle +
         "\n[x] marks where each rank is stuck:\n" + grid;
}

DeadlockReport dry_run(const LoweredPlan& plan, Transport transport) {
  const PlanShape& sh = plan.shape;
  const auto& per_rank = plan.per_rank;
  PW_CHECK(per_rank.size() == idx(sh.ranks) && sh.stage_to_rank.size() == idx(sh.stages),
           InvalidPlanError, "dry run: plan lists or placement do not match the shape");
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (std::size_t i = 0; i < per_rank[r].size(); ++i) {
      const Action& a = per_rank[r][i];
      const bool ok_stage = a.stage >= 0 && a.stage < sh.stages;
      const bool ok_peer = !is_comm(a.kind) || (a.peer_stage >= 0 && a.peer_stage < sh.stages);
      PW_CHECK(ok_stage && ok_peer, InvalidPlanError,
               "dry run: rank " << r << ", step " << i << ": " << a << " names a stage outside [0, "
                                << sh.stages << ")");
    }
  }
  for (std::int32_t s = 0; s < sh.stages; ++s) {
    PW_CHECK(sh.stage_to_rank[idx(s)] >= 0 && sh.stage_to_rank[idx(s)] < sh.ranks, InvalidPlanError,
             "dry run: stage " << s << " is placed outside the ranks");
  }

  const std::size_t p = per_rank.size();
  std::vector<std::size_t> pc(p, 0);
  const PlanRules rules(sh, Level::kLowered);
  std::vector<int> mailbox(static_cast<std::size_t>(rules.ids()), 0);  // sent, not yet received
  std::vector<std::int32_t> work;
  std::vector<bool> queued(p, true);
  for (std::size_t r = p; r-- > 0;) work.push_back(static_cast<std::int32_t>(r));
  auto wake = [&](std::int32_t r) {
    if (!queued[idx(r)]) {
      queued[idx(r)] = true;
      work.push_back(r);
    }
  };
  auto head = [&](std::int32_t r) -> const Action* {
    return pc[idx(r)] < per_rank[idx(r)].size() ? &per_rank[idx(r)][pc[idx(r)]] : nullptr;
  };
  while (!work.empty()) {
    const std::int32_t r = work.back();
    work.pop_back();
    queued[idx(r)] = false;
    while (const Action* a = head(r)) {
      if (!is_comm(a->kind)) {
        ++pc[idx(r)];
        continue;
      }
      const std::int32_t peer = sh.stage_to_rank[idx(a->peer_stage)];
      if (transport == Transport::kBuffered) {
        // A message on an edge that does not exist can never be delivered (validate() says so).
        const std::int64_t id = rules.message_id(*a);
        if (id < 0) break;
        int& box = mailbox[static_cast<std::size_t>(id)];
        if (is_send(a->kind)) {
          ++box;
          ++pc[idx(r)];
          wake(peer);
          continue;
        }
        if (box == 0) break;
        --box;
        ++pc[idx(r)];
        continue;
      }
      // Rendezvous: complete together with the peer when the peer's next action is the partner.
      const Action* other = peer == r ? nullptr : head(peer);
      if (other != nullptr && *other == matching(*a)) {
        ++pc[idx(r)];
        ++pc[idx(peer)];
        wake(peer);
        continue;
      }
      break;
    }
  }

  DeadlockReport report;
  report.transport = transport;
  std::vector<int> waits_for(p, -1);
  std::vector<bool> blocked(p, false);
  for (std::size_t r = 0; r < p; ++r) {
    if (pc[r] == per_rank[r].size()) continue;
    const Action& a = per_rank[r][pc[r]];
    StuckRank s;
    s.rank = static_cast<int>(r);
    s.step = static_cast<int>(pc[r]);
    s.action = a;
    s.waits_for = sh.stage_to_rank[idx(a.peer_stage)];
    waits_for[r] = s.waits_for;
    blocked[r] = true;
    report.stuck.push_back(s);
  }
  if (report.stuck.empty()) return report;
  report.ok = false;
  report.cycle = waiting_chain(waits_for, blocked, [&](int r) {
    return std::to_string(r) + ":" + to_string(per_rank[idx(r)][pc[idx(r)]]);
  });
  report.grid = stuck_grid(per_rank, report.stuck);
  return report;
}

namespace detail {

std::vector<Diagnostic> compute_dry_run(const PlanShape& sh,
                                        const std::vector<std::vector<Action>>& per_rank) {
  const std::size_t p = per_rank.size();
  const PlanRules rules(sh, Level::kCompute);
  std::vector<bool> done(static_cast<std::size_t>(rules.ids()), false);  // by PlanRules::id
  // The unmet input of `a` from another stage (its own F before a B/I, its own I before a W are
  // program order on its rank, which validate() checks): its fact id and stage, or id -1.
  struct Unmet {
    std::int64_t id = -1;
    std::int32_t stage = -1;
    bool forward = false;
  };
  auto unmet = [&](const Action& a) -> Unmet {
    for (const Fact& f : rules.needs(a)) {
      if (f.stage == a.stage) continue;
      const std::int64_t id = rules.id(f, a.microbatch);
      if (id >= 0 && !done[static_cast<std::size_t>(id)]) {
        return {id, f.stage, f.kind == FactKind::kForward};
      }
    }
    return {};
  };
  std::vector<std::size_t> pc(p, 0);
  // Waiters per fact: ranks to re-examine when that input appears, as intrusive lists (a rank
  // waits for one input at a time).
  std::vector<std::int32_t> first_waiter(done.size(), -1);
  std::vector<std::int32_t> next_waiter(p, -1);
  std::vector<std::int32_t> work;
  for (std::size_t r = p; r-- > 0;) work.push_back(static_cast<std::int32_t>(r));
  while (!work.empty()) {
    const std::int32_t r = work.back();
    work.pop_back();
    auto& ops = per_rank[idx(r)];
    while (pc[idx(r)] < ops.size()) {
      const Action& a = ops[pc[idx(r)]];
      const Unmet u = unmet(a);
      if (u.id >= 0) {
        const auto w = static_cast<std::size_t>(u.id);
        next_waiter[idx(r)] = first_waiter[w];
        first_waiter[w] = r;
        break;
      }
      ++pc[idx(r)];
      const auto fact = produces(a);
      const std::int64_t id = fact ? rules.id(*fact, a.microbatch) : -1;
      if (id >= 0) {
        const auto w = static_cast<std::size_t>(id);
        done[w] = true;
        for (std::int32_t x = first_waiter[w]; x >= 0;) {
          const std::int32_t next = next_waiter[idx(x)];
          work.push_back(x);
          x = next;
        }
        first_waiter[w] = -1;
      }
    }
  }
  std::vector<int> waits_for(p, -1);
  std::vector<bool> blocked(p, false);
  std::vector<std::string> needs(p);
  bool any = false;
  for (std::size_t r = 0; r < p; ++r) {
    if (pc[r] == per_rank[r].size()) continue;
    const Action& a = per_rank[r][pc[r]];
    const Unmet u = unmet(a);
    if (u.id < 0) continue;  // cannot happen: a runnable head would have run
    any = true;
    blocked[r] = true;
    waits_for[r] = sh.stage_to_rank[idx(u.stage)];
    needs[r] = std::to_string(u.stage) + (u.forward ? "F" : "B/I") + std::to_string(a.microbatch);
  }
  if (!any) return {};
  std::string chain = waiting_chain(waits_for, blocked, [&](int r) {
    return std::to_string(r) + ":" + to_string(per_rank[idx(r)][pc[idx(r)]]);
  });
  std::string detail;
  int first = -1;
  for (std::size_t r = 0; r < p; ++r) {
    if (!blocked[r]) continue;
    if (first < 0) first = static_cast<int>(r);
    detail += "; rank " + std::to_string(r) + " waits at " + to_string(per_rank[r][pc[r]]) +
              " for " + needs[r];
  }
  return {Diagnostic{"ranks wait for each other in a cycle: " + chain + detail, first,
                     static_cast<int>(pc[idx(first)])}};
}

}  // namespace detail
}  // namespace pipewright::sched
