// ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023, section 3.1): the handcrafted
// zero-bubble schedule with (2P-1) microbatches' activations per rank. Note [ZB-H2 order].
#include <cstdint>
#include <vector>

#include "schedules/schedule_detail.hpp"

namespace pipewright::sched::detail {

// Note [ZB-H2 order]
// ~~~~~~~~~~~~~~~~~~
// The paper draws ZB-H2 on the grid of unit times (T_F = T_I = T_W = 1, p2p free): more
// forwards in the warm-up than ZB-H1 (rank r runs up to 2(P - r) - 1 before its first input
// gradient arrives) and W passes moved into the tail, so that every rank's span from its first
// to its last pass is exactly 3M units (a parallelogram, no bubble) once M >= 2P - 1. The
// generator writes that picture down: it replays the grid, and at every unit each rank takes, of
// the passes it can start at that unit,
//   1. the input gradient I of its oldest microbatch whose gradient has arrived;
//   2. else the forward F of its next microbatch, when its input has arrived and the rank holds
//      fewer than 2P - 1 microbatches' activations (held from F to the end of W);
//   3. else the weight gradient W of its oldest microbatch past I (the deferred W that fills
//      what would otherwise be a bubble);
// ties between ranks do not matter (each rank's choice reads only the other ranks' earlier
// units). Only integer units: the order is a pure function of (P, M), the same for every cost.
// Rank 0 holds 2P - 1 microbatches at its peak (the paper's memory, twice ZB-H1's P less one);
// with the same unit grid, ZB-H1 spans 3M + P - 1 units and ZB-H2 3M for M >= 2P - 1.
std::vector<Ops> zb_h2(std::int32_t p, std::int32_t m) {
  const std::int32_t cap = 2 * p - 1;
  std::vector<Ops> out(static_cast<std::size_t>(p));
  // Per rank: next F / I / W microbatch, activations held, the unit at which the rank is free.
  std::vector<std::int32_t> nf(static_cast<std::size_t>(p), 0), ni(nf), nw(nf), held(nf);
  std::vector<std::int64_t> free_at(static_cast<std::size_t>(p), 0);
  // End unit of F and I per (rank, microbatch); -1 = not run yet.
  const auto cells = static_cast<std::size_t>(p) * static_cast<std::size_t>(m);
  std::vector<std::int64_t> end_f(cells, -1), end_i(cells, -1);
  auto at = [m](std::int32_t r, std::int32_t i) {
    return static_cast<std::size_t>(r) * static_cast<std::size_t>(m) + static_cast<std::size_t>(i);
  };
  const std::int64_t total = 3 * std::int64_t{p} * m;
  for (std::int64_t done = 0; done < total; ++done) {
    // The pass that starts earliest over all ranks (lowest rank on ties), by the priorities above.
    std::int64_t best_start = -1;
    std::int32_t best_rank = -1;
    ActionKind best_kind = ActionKind::kForward;
    for (std::int32_t r = 0; r < p; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      const std::int64_t now = free_at[ur];
      std::int64_t start = -1;
      ActionKind kind = ActionKind::kForward;
      auto offer = [&](std::int64_t ready, ActionKind k) {
        const std::int64_t s = ready > now ? ready : now;
        if (start < 0 ||
            s < start) {  // earlier wins; equal keeps the higher priority offered first
          start = s;
          kind = k;
        }
      };
      if (ni[ur] < nf[ur]) {
        const std::int64_t ready = r == p - 1 ? end_f[at(r, ni[ur])] : end_i[at(r + 1, ni[ur])];
        if (ready >= 0) offer(ready, ActionKind::kBackwardInput);
      }
      if (nf[ur] < m && held[ur] < cap) {
        const std::int64_t ready = r == 0 ? 0 : end_f[at(r - 1, nf[ur])];
        if (ready >= 0) offer(ready, ActionKind::kForward);
      }
      if (nw[ur] < ni[ur]) offer(now, ActionKind::kBackwardWeight);
      if (start >= 0 && (best_start < 0 || start < best_start)) {
        best_start = start;
        best_rank = r;
        best_kind = kind;
      }
    }
    // Some rank can always move: rank 0's forwards need nothing, and a full rank has a W or waits
    // for an I that the ranks after it produce.
    const auto ub = static_cast<std::size_t>(best_rank);
    std::int32_t mb = 0;
    switch (best_kind) {
      case ActionKind::kForward:
        mb = nf[ub]++;
        ++held[ub];
        end_f[at(best_rank, mb)] = best_start + 1;
        break;
      case ActionKind::kBackwardInput:
        mb = ni[ub]++;
        end_i[at(best_rank, mb)] = best_start + 1;
        break;
      default:
        mb = nw[ub]++;
        --held[ub];
        break;
    }
    free_at[ub] = best_start + 1;
    out[ub].push_back(Action::compute(best_rank, best_kind, mb));
  }
  return out;
}

}  // namespace pipewright::sched::detail
