#include "synthesis/local_search.hpp"

#include <algorithm>
#include <utility>

namespace pipewright::sim::synthesis {
namespace {

using sched::Action;
using sched::ActionKind;

// Slots of the per-(stage, microbatch) end times: F, I, W.
int slot_of(ActionKind k) {
  return k == ActionKind::kForward ? 0 : (k == ActionKind::kBackwardInput ? 1 : 2);
}

bool under_cap(const ListProblem& pr, const std::vector<Action>& order, std::int64_t cap) {
  std::int64_t held = 0;
  for (const auto& a : order) {
    if (a.kind == ActionKind::kForward) held += pr.activation[static_cast<std::size_t>(a.stage)];
    if (a.kind == ActionKind::kBackwardInput) held -= input_grad_frees(pr, a.stage);
    if (a.kind == ActionKind::kBackwardWeight) held -= weight_grad_frees(pr, a.stage);
    if (held > cap) return false;
  }
  return true;
}

}  // namespace

Replay replay(const ListProblem& pr, const std::vector<std::vector<Action>>& orders) {
  const auto M = static_cast<std::size_t>(pr.microbatches);
  const auto cells = static_cast<std::size_t>(pr.stages) * M;
  std::vector<std::int64_t> end(3 * cells, -1);
  auto at = [&](int slot, std::int32_t s, std::int32_t i) {
    return static_cast<std::size_t>(slot) * cells + static_cast<std::size_t>(s) * M +
           static_cast<std::size_t>(i);
  };
  const auto P = orders.size();
  std::vector<std::size_t> next(P, 0);
  std::vector<std::int64_t> free_at(P, 0);
  std::vector<std::int64_t> first_start(P, -1);
  // Ranks waiting for an end time, by the slot they wait for.
  std::vector<std::vector<std::size_t>> waiters(3 * cells);
  std::vector<std::size_t> ready;
  for (std::size_t r = 0; r < P; ++r) ready.push_back(r);
  std::int64_t makespan = 0;
  std::size_t done = 0;
  std::size_t total = 0;
  for (const auto& o : orders) total += o.size();
  while (!ready.empty()) {
    const std::size_t r = ready.back();
    ready.pop_back();
    while (next[r] < orders[r].size()) {
      const Action& a = orders[r][next[r]];
      const auto us = static_cast<std::size_t>(a.stage);
      std::int64_t start = free_at[r];
      std::size_t missing = SIZE_MAX;
      auto need = [&](std::size_t slot, std::int64_t delay) {
        if (missing != SIZE_MAX) return;
        if (end[slot] < 0) {
          missing = slot;
        } else {
          start = std::max(start, end[slot] + delay);
        }
      };
      std::int64_t duration = 0;
      if (a.kind == ActionKind::kForward) {
        if (a.stage > 0) need(at(0, a.stage - 1, a.microbatch), pr.message_ns[us - 1]);
        duration = pr.forward_ns[us];
      } else if (a.kind == ActionKind::kBackwardInput) {
        need(at(0, a.stage, a.microbatch), 0);
        if (a.stage + 1 < pr.stages) need(at(1, a.stage + 1, a.microbatch), pr.message_ns[us]);
        duration = pr.input_grad_ns[us];
      } else {
        need(at(1, a.stage, a.microbatch), 0);
        duration = pr.weight_grad_ns[us];
      }
      if (missing != SIZE_MAX) {
        waiters[missing].push_back(r);
        break;
      }
      const std::size_t slot = at(slot_of(a.kind), a.stage, a.microbatch);
      end[slot] = start + duration;
      if (first_start[r] < 0) first_start[r] = start;
      free_at[r] = end[slot];
      makespan = std::max(makespan, end[slot]);
      ++next[r];
      ++done;
      for (std::size_t w : waiters[slot]) ready.push_back(w);
      waiters[slot].clear();
    }
  }
  Replay out;
  if (done != total) return out;
  out.step_ns = makespan;
  out.span_ns = 0;
  for (std::size_t r = 0; r < P; ++r) {
    if (first_start[r] >= 0) out.span_ns = std::max(out.span_ns, free_at[r] - first_start[r]);
  }
  return out;
}

std::vector<std::vector<Action>> improve(const ListProblem& pr,
                                         std::vector<std::vector<Action>> orders,
                                         SearchObjective objective, std::int64_t max_evaluations,
                                         std::chrono::steady_clock::time_point deadline) {
  // The objective's key: smaller is better; {-1, -1} for orders that cannot run.
  const auto key = [objective](const Replay& r) {
    return objective == SearchObjective::kStep ? std::pair{r.step_ns, r.span_ns}
                                               : std::pair{r.span_ns, r.step_ns};
  };
  auto best = key(replay(pr, orders));
  if (best.first < 0) return orders;
  std::int64_t evaluations = 0;
  bool improved = true;
  while (improved) {
    improved = false;
    for (std::size_t r = 0; r < orders.size(); ++r) {
      auto& order = orders[r];
      for (std::size_t k = 0; k + 1 < order.size(); ++k) {
        const bool w0 = order[k].kind == ActionKind::kBackwardWeight;
        const bool w1 = order[k + 1].kind == ActionKind::kBackwardWeight;
        if (w0 == w1) continue;  // one W and one F or I
        if (evaluations >= max_evaluations || std::chrono::steady_clock::now() > deadline)
          return orders;
        std::swap(order[k], order[k + 1]);
        ++evaluations;
        const auto t = under_cap(pr, order, pr.cap[r])
                           ? key(replay(pr, orders))
                           : std::pair<std::int64_t, std::int64_t>{-1, -1};
        if (t.first >= 0 && t < best) {
          best = t;
          improved = true;
        } else {
          std::swap(order[k], order[k + 1]);
        }
      }
    }
  }
  return orders;
}

}  // namespace pipewright::sim::synthesis
