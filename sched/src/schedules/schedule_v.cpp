#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "pipewright/graph/error.hpp"
#include "schedules/schedule_detail.hpp"

namespace pipewright::sched::detail {
namespace {

Action act(std::int32_t stage, ActionKind kind, std::int32_t mb) {
  return Action::compute(stage, kind, mb);
}

}  // namespace

// Note [ZB-V order]: a transcription of torch 2.11's ScheduleZBVZeroBubble: with
// n = max(2p - 1, m) microbatches, rank r (stages c0 = r, c1 = 2p - 1 - r) runs
//   warm-up   2(p - r) - 1 x F(c0); r x [F(c1), F(c0)]; (p - r) x [F(c1), I(c1), W(c1)]
//   steady    while F(c1) lags F(c0) or F(c0) < n: [F(c0) if any left], I(c0), W(c0), F(c1),
//             I(c1), W(c1)
//   cool-down r x [I(c0), I(c1)]; (p - r) x [I(c0), W(c0)]; the remaining W(c1), then W(c0)
// and every action of a microbatch >= m is dropped (torch blanks it to None).
Ops zbv_rank(std::int32_t p, std::int32_t m, std::int32_t rank) {
  const std::int32_t n = std::max(2 * p - 1, m);
  const std::int32_t c0 = rank;
  const std::int32_t c1 = 2 * p - 1 - rank;
  std::int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  Ops ops;
  ops.reserve(static_cast<std::size_t>(6 * n));
  for (std::int32_t i = 0; i < 2 * (p - rank) - 1; ++i)
    ops.push_back(act(c0, ActionKind::kForward, f0++));
  for (std::int32_t i = 0; i < rank; ++i) {
    ops.push_back(act(c1, ActionKind::kForward, f1++));
    ops.push_back(act(c0, ActionKind::kForward, f0++));
  }
  for (std::int32_t i = 0; i < p - rank; ++i) {
    ops.push_back(act(c1, ActionKind::kForward, f1++));
    ops.push_back(act(c1, ActionKind::kBackwardInput, b1));
    ops.push_back(act(c1, ActionKind::kBackwardWeight, b1++));
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) ops.push_back(act(c0, ActionKind::kForward, f0++));
    ops.push_back(act(c0, ActionKind::kBackwardInput, b0));
    ops.push_back(act(c0, ActionKind::kBackwardWeight, b0++));
    ops.push_back(act(c1, ActionKind::kForward, f1++));
    ops.push_back(act(c1, ActionKind::kBackwardInput, b1));
    ops.push_back(act(c1, ActionKind::kBackwardWeight, b1++));
  }
  std::int32_t w0 = b0, w1 = b1;
  for (std::int32_t i = 0; i < rank; ++i) {
    ops.push_back(act(c0, ActionKind::kBackwardInput, b0++));
    ops.push_back(act(c1, ActionKind::kBackwardInput, b1++));
  }
  for (std::int32_t i = 0; i < p - rank; ++i) {
    ops.push_back(act(c0, ActionKind::kBackwardInput, b0++));
    ops.push_back(act(c0, ActionKind::kBackwardWeight, w0++));
  }
  while (w1 < b1) ops.push_back(act(c1, ActionKind::kBackwardWeight, w1++));
  while (w0 < b0) ops.push_back(act(c0, ActionKind::kBackwardWeight, w0++));
  PW_ASSERT(w0 == b0 && b0 == f0 && w1 == b1 && b1 == f1, "ZB-V counts disagree on rank " << rank);
  ops.erase(
      std::remove_if(ops.begin(), ops.end(), [&](const Action& a) { return a.microbatch >= m; }),
      ops.end());
  return ops;
}

// Note [DualPipeV order]: a transcription of torch 2.11's ScheduleDualPipeV (from DeepSeek's
// DualPipeV), stages s0 = r and s1 = 2p - 1 - r of rank r, per-(stage, kind) microbatch counters
// where B advances the I counter, and a FIFO of I's waiting for their W:
//   1. 2(p - r - 1) x F(s0)            2. (r + 1) x [F(s0), F(s1)]
//   3. (p - r - 1) x [I(s1), W(oldest pending), F(s1)]
//   4. (m - 2p + r + 1) x [(F(s0);B(s1)) (plain F(s0), B(s1) the first time on the last rank),
//                          (F(s1);B(s0))]
//   5. (p - r - 1) x [B(s1), (F(s1);B(s0))]
//   6. (r + 1) x [X(s1), X(s0)] with X = B, switching to I from the middle iteration on (odd
//      ranks switch before X(s1), even ranks before X(s0))
//   7. (p - r - 1) x [W(oldest pending), X(s0)]       8. (r + 1) x W(oldest pending)
Ops dualpipev_rank(std::int32_t p, std::int32_t m, std::int32_t rank) {
  const std::int32_t s0 = rank;
  const std::int32_t s1 = 2 * p - 1 - rank;
  std::map<std::pair<std::int32_t, ActionKind>, std::int32_t> counter;
  std::deque<std::pair<std::int32_t, std::int32_t>> weights;  // (stage, mb) of I's without W
  Ops ops;
  auto next = [&](std::int32_t stage, ActionKind kind) -> std::int32_t& {
    return counter[{stage, kind == ActionKind::kFullBackward ? ActionKind::kBackwardInput : kind}];
  };
  auto add = [&](std::int32_t stage, ActionKind kind) {
    const std::int32_t mb = next(stage, kind)++;
    ops.push_back(act(stage, kind, mb));
    if (kind == ActionKind::kBackwardInput) weights.emplace_back(stage, mb);
  };
  auto add_weight = [&]() {
    if (weights.empty()) return;
    ops.push_back(act(weights.front().first, ActionKind::kBackwardWeight, weights.front().second));
    weights.pop_front();
  };
  auto add_overlap = [&](std::int32_t fwd, std::int32_t bwd) {
    ops.push_back(Action::overlap(fwd));
    ops.push_back(act(fwd, ActionKind::kForward, next(fwd, ActionKind::kForward)++));
    ops.push_back(act(bwd, ActionKind::kFullBackward, next(bwd, ActionKind::kFullBackward)++));
  };
  for (std::int32_t i = 0; i < (p - rank - 1) * 2; ++i) add(s0, ActionKind::kForward);
  for (std::int32_t i = 0; i < rank + 1; ++i) {
    add(s0, ActionKind::kForward);
    add(s1, ActionKind::kForward);
  }
  for (std::int32_t i = 0; i < p - rank - 1; ++i) {
    add(s1, ActionKind::kBackwardInput);
    add_weight();
    add(s1, ActionKind::kForward);
  }
  for (std::int32_t i = 0; i < m - 2 * p + rank + 1; ++i) {
    if (i == 0 && rank == p - 1) {
      add(s0, ActionKind::kForward);
      add(s1, ActionKind::kFullBackward);
    } else {
      add_overlap(s0, s1);
    }
    add_overlap(s1, s0);
  }
  for (std::int32_t i = 0; i < p - rank - 1; ++i) {
    add(s1, ActionKind::kFullBackward);
    add_overlap(s1, s0);
  }
  const std::int32_t step6 = rank + 1;
  bool zb = false;
  auto backward = [&]() { return zb ? ActionKind::kBackwardInput : ActionKind::kFullBackward; };
  for (std::int32_t i = 0; i < step6; ++i) {
    if (i == step6 / 2 && rank % 2 == 1) zb = true;
    add(s1, backward());
    if (i == step6 / 2 && rank % 2 == 0) zb = true;
    add(s0, backward());
  }
  for (std::int32_t i = 0; i < p - rank - 1; ++i) {
    add_weight();
    add(s0, backward());
  }
  for (std::int32_t i = 0; i < rank + 1; ++i) add_weight();
  return ops;
}

// Note [Chimera order]: Li & Hoefler (SC'21) give Chimera as a picture, not a formula: two
// 1F1B pipelines in opposite directions (down: stage i on worker i; up: stage i on worker P-1-i),
// each worker running one stage of each, every worker starting its first forward as soon as its
// input exists and preferring backwards, with the forward:backward cost ratio 1:2 that the paper
// assumes. We derive the order by list-scheduling exactly those rules in unit time (F = 1,
// B = 2): at each time step every idle rank starts one ready action of its two stages,
//   - a backward before a forward;
//   - a forward of a stage at depth d of its pipeline only while the stage has fewer than P - d
//     microbatches in flight (1F1B's bound: P - d forwards before the first backward returns);
//   - each stage takes its microbatches in order (down: [0, ceil(M/2)), up: [ceil(M/2), M));
//   - between the two stages, the action whose input became ready first, ties to the down
//     pipeline.
// For M = P this reproduces the paper's Figure 3 shape (both pipelines fill from their ends, the
// middle ranks interleave them); for M > P the units concatenate as the paper's "direct
// concatenation". docs/schedules.md shows P = 4, M = 4.
std::vector<Ops> chimera(std::int32_t p, std::int32_t m) {
  const std::int32_t stages = 2 * p;
  const std::int32_t half = (m + 1) / 2;
  auto depth = [&](std::int32_t s) { return s < p ? s : s - p; };
  auto rank_of = [&](std::int32_t s) { return s < p ? s : 2 * p - 1 - s; };
  auto begin = [&](std::int32_t s) { return s < p ? 0 : half; };
  auto end = [&](std::int32_t s) { return s < p ? half : m; };
  constexpr std::int64_t kNever = -1;
  // Finish times per (stage, mb) of F and B; next microbatch to forward / backward per stage.
  std::vector<std::vector<std::int64_t>> f_done(static_cast<std::size_t>(stages)),
      b_done(static_cast<std::size_t>(stages));
  std::vector<std::int32_t> next_f(static_cast<std::size_t>(stages)),
      next_b(static_cast<std::size_t>(stages));
  for (std::int32_t s = 0; s < stages; ++s) {
    f_done[static_cast<std::size_t>(s)].assign(static_cast<std::size_t>(m), kNever);
    b_done[static_cast<std::size_t>(s)].assign(static_cast<std::size_t>(m), kNever);
    next_f[static_cast<std::size_t>(s)] = begin(s);
    next_b[static_cast<std::size_t>(s)] = begin(s);
  }
  auto done_by = [](std::int64_t finish, std::int64_t t) {
    return finish != kNever && finish <= t;
  };
  // Ready time of the next forward / backward of stage s at time t, or kNever.
  auto f_ready = [&](std::int32_t s, std::int64_t t) -> std::int64_t {
    const auto i = static_cast<std::size_t>(s);
    const std::int32_t k = next_f[i];
    if (k >= end(s)) return kNever;
    if (k - next_b[i] >= p - depth(s)) return kNever;  // 1F1B's in-flight bound
    if (depth(s) == 0) return 0;
    const std::int64_t in = f_done[i - 1][static_cast<std::size_t>(k)];
    return done_by(in, t) ? in : kNever;
  };
  auto b_ready = [&](std::int32_t s, std::int64_t t) -> std::int64_t {
    const auto i = static_cast<std::size_t>(s);
    const std::int32_t k = next_b[i];
    if (k >= end(s) || k >= next_f[i]) return kNever;
    const std::int64_t own = f_done[i][static_cast<std::size_t>(k)];
    if (!done_by(own, t)) return kNever;
    if (depth(s) == p - 1) return own;
    const std::int64_t in = b_done[i + 1][static_cast<std::size_t>(k)];
    return done_by(in, t) ? in : kNever;
  };
  std::vector<Ops> per_rank(static_cast<std::size_t>(p));
  std::vector<std::int64_t> busy(static_cast<std::size_t>(p), 0);
  std::int64_t remaining = 2 * std::int64_t{m} * p;
  for (std::int64_t t = 0; remaining > 0; ++t) {
    PW_ASSERT(t <= 8 * (std::int64_t{m} + p) * p + 16, "Chimera list scheduling made no progress");
    for (std::int32_t r = 0; r < p; ++r) {
      if (busy[static_cast<std::size_t>(r)] > t) continue;
      const std::int32_t local[2] = {r, 2 * p - 1 - r};  // down stage first (ties)
      std::int32_t pick = -1;
      bool backward = false;
      std::int64_t best = kNever;
      for (const bool bwd : {true, false}) {
        for (const std::int32_t s : local) {
          const std::int64_t ready = bwd ? b_ready(s, t) : f_ready(s, t);
          if (ready != kNever && (pick < 0 || ready < best)) {
            pick = s;
            best = ready;
            backward = bwd;
          }
        }
        if (pick >= 0) break;
      }
      if (pick < 0) continue;
      PW_ASSERT(rank_of(pick) == r, "Chimera: stage " << pick << " is not on rank " << r);
      const auto i = static_cast<std::size_t>(pick);
      if (backward) {
        const std::int32_t k = next_b[i]++;
        b_done[i][static_cast<std::size_t>(k)] = t + 2;
        busy[static_cast<std::size_t>(r)] = t + 2;
        per_rank[static_cast<std::size_t>(r)].push_back(act(pick, ActionKind::kFullBackward, k));
      } else {
        const std::int32_t k = next_f[i]++;
        f_done[i][static_cast<std::size_t>(k)] = t + 1;
        busy[static_cast<std::size_t>(r)] = t + 1;
        per_rank[static_cast<std::size_t>(r)].push_back(act(pick, ActionKind::kForward, k));
      }
      --remaining;
    }
  }
  return per_rank;
}

Ops forward_only(const Ops& ops) {
  Ops out;
  out.reserve(ops.size() / 2 + 1);
  for (const Action& a : ops) {
    if (a.kind == ActionKind::kForward) out.push_back(a);
  }
  return out;
}

}  // namespace pipewright::sched::detail
