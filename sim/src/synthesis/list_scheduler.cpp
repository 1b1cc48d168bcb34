#include "synthesis/list_scheduler.hpp"

#include <algorithm>
#include <deque>
#include <string>

#include "pipewright/graph/error.hpp"

namespace pipewright::sim::synthesis {
namespace {

using sched::Action;
using sched::ActionKind;

constexpr std::int64_t kNotYet = -1;

struct Choice {
  std::int64_t start = -1;
  ActionKind kind = ActionKind::kForward;
  std::int32_t stage = 0;
  int rank_of_kind = 0;  // the policy's priority (lower first)
};

}  // namespace

std::int64_t input_grad_frees(const ListProblem& pr, std::int32_t stage) {
  const auto s = static_cast<std::size_t>(stage);
  return pr.input_grad_frees.empty() ? 0 : pr.input_grad_frees[s];
}

std::int64_t weight_grad_frees(const ListProblem& pr, std::int32_t stage) {
  return pr.activation[static_cast<std::size_t>(stage)] - input_grad_frees(pr, stage);
}

std::vector<std::vector<Action>> list_schedule(const ListProblem& pr, const ListPolicy& policy) {
  const auto S = static_cast<std::size_t>(pr.stages);
  const auto M = static_cast<std::size_t>(pr.microbatches);
  const auto P = static_cast<std::size_t>(pr.ranks);
  std::vector<std::vector<std::int32_t>> local(P);
  for (std::int32_t s = 0; s < pr.stages; ++s)
    local[static_cast<std::size_t>(pr.stage_to_rank[static_cast<std::size_t>(s)])].push_back(s);
  // Per rank: one microbatch's activation over its stages, and its cap under the policy.
  std::vector<std::int64_t> unit(P, 0), cap(P, 0), held(P, 0), free_at(P, 0);
  for (std::size_t r = 0; r < P; ++r) {
    for (auto s : local[r]) unit[r] += pr.activation[static_cast<std::size_t>(s)];
    const std::int64_t stepped =
        pr.cap[r] - std::int64_t{policy.step_down} * static_cast<std::int64_t>(r) * unit[r];
    cap[r] = std::max(stepped, std::min(pr.cap[r], unit[r]));
  }
  std::vector<std::int32_t> nf(S, 0), ni(S, 0);
  std::vector<std::int64_t> end_f(S * M, kNotYet), end_i(S * M, kNotYet);
  std::vector<std::deque<Action>> pending_w(P);  // I done, W not yet, in I order
  auto at = [M](std::int32_t s, std::int32_t i) {
    return static_cast<std::size_t>(s) * M + static_cast<std::size_t>(i);
  };
  const int prio_i = policy.forward_first ? 1 : 0;
  const int prio_f = policy.forward_first ? 0 : 1;
  std::vector<std::vector<Action>> out(P);
  const std::int64_t total = 3 * static_cast<std::int64_t>(S) * pr.microbatches;
  for (std::int64_t done = 0; done < total; ++done) {
    Choice best;
    std::size_t best_rank = 0;
    for (std::size_t r = 0; r < P; ++r) {
      Choice c;
      auto offer = [&](std::int64_t ready, ActionKind kind, std::int32_t stage, int prio) {
        const std::int64_t start = std::max(ready, free_at[r]);
        // Earlier first; then the policy's kind; then the older microbatch, the deeper stage.
        const bool better = c.start < 0 || start < c.start ||
                            (start == c.start && (prio < c.rank_of_kind ||
                                                  (prio == c.rank_of_kind && stage > c.stage)));
        if (better) c = Choice{start, kind, stage, prio};
      };
      for (const std::int32_t s : local[r]) {
        const auto us = static_cast<std::size_t>(s);
        if (ni[us] < nf[us]) {
          const std::int32_t i = ni[us];
          std::int64_t ready = end_f[at(s, i)];
          if (s + 1 < pr.stages) {
            const std::int64_t g = end_i[at(s + 1, i)];
            ready = g == kNotYet ? kNotYet : std::max(ready, g + pr.message_ns[us]);
          }
          if (ready != kNotYet) offer(ready, ActionKind::kBackwardInput, s, prio_i);
        }
        if (nf[us] < pr.microbatches) {
          const std::int32_t i = nf[us];
          const bool admits = s == local[r].front();
          if (!admits || held[r] + unit[r] <= cap[r]) {
            std::int64_t ready = 0;
            if (s > 0) {
              const std::int64_t x = end_f[at(s - 1, i)];
              ready = x == kNotYet ? kNotYet : x + pr.message_ns[us - 1];
            }
            if (ready != kNotYet) offer(ready, ActionKind::kForward, s, prio_f);
          }
        }
      }
      if (!pending_w[r].empty()) offer(free_at[r], ActionKind::kBackwardWeight, -1, 2);
      // Among passes of the same start and kind the older microbatch comes first: the per-stage
      // counters offer only the next one, and stages tie toward the deeper one.
      if (c.start >= 0 && (best.start < 0 || c.start < best.start)) {
        best = c;
        best_rank = r;
      }
    }
    PW_CHECK(best.start >= 0, InvalidPlanError,
             "Auto: no pass can start after " << done << " of " << total
                                              << " (the memory cap admits no microbatch)");
    const std::size_t r = best_rank;
    std::int64_t duration = 0;
    Action a;
    if (best.kind == ActionKind::kBackwardWeight) {
      a = pending_w[r].front();
      pending_w[r].pop_front();
      duration = pr.weight_grad_ns[static_cast<std::size_t>(a.stage)];
      held[r] -= weight_grad_frees(pr, a.stage);
    } else {
      const auto us = static_cast<std::size_t>(best.stage);
      if (best.kind == ActionKind::kForward) {
        const std::int32_t i = nf[us]++;
        a = Action::compute(best.stage, ActionKind::kForward, i);
        duration = pr.forward_ns[us];
        end_f[at(best.stage, i)] = best.start + duration;
        // Admission reserves the whole microbatch on this rank (Note [Greedy list schedule]).
        if (best.stage == local[r].front()) held[r] += unit[r];
      } else {
        const std::int32_t i = ni[us]++;
        a = Action::compute(best.stage, ActionKind::kBackwardInput, i);
        duration = pr.input_grad_ns[us];
        end_i[at(best.stage, i)] = best.start + duration;
        held[r] -= input_grad_frees(pr, best.stage);
        pending_w[r].push_back(Action::compute(best.stage, ActionKind::kBackwardWeight, i));
      }
    }
    free_at[r] = best.start + duration;
    out[r].push_back(a);
  }
  return out;
}

}  // namespace pipewright::sim::synthesis
