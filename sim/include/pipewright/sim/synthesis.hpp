// Schedule synthesis (`pipewright schedule Auto`): the plan with the shortest simulated step for
// given per-stage costs under a per-rank memory cap (docs/schedules.md, "Auto").
//
// Note [Auto method]
// ~~~~~~~~~~~~~~~~~~
// Candidates, each an ordinary compute-only plan over P x V stages:
//   - list schedules built by a greedy of the Zero Bubble paper's kind (sim/src/synthesis/
//     list_scheduler.hpp, Note [Greedy list schedule]): split backward (I, W), W deferred to
//     fill what would be idle time, forwards admitted while the rank's activations stay under
//     the cap; over a few policies (I before F or F before I, a flat cap or one that steps down
//     with the rank) and, for V = 2, both the looping and the V-shaped placement;
//   - with one stage per rank, the Zero Bubble paper's own heuristic (sim/src/synthesis/
//     zb_heuristic.hpp, Note [Zero Bubble heuristic]) under its eight policies;
//   - the named schedules of the same shape that fit the cap (1F1B, ZB-H1, ZB-H2, GPipe; for
//     V > 1 the interleaved ones and ZBVZeroBubble), so Auto is never worse than the best of
//     them.
// Each candidate that fits is lowered as `run` lowers a plan (REDUCE_GRAD, OPTIM), validated,
// dry-run for deadlocks under both transports and simulated with the caller's simulator options
// and cluster; the best under the objective wins (Note [Auto objective]; ties: the order
// above). Then a local search (sim/src/synthesis/local_search.hpp, Note [Local search]) swaps
// adjacent passes around W on the winner's ranks while the objective's key on the greedy's
// clock gets better and the cap holds; its result is one more candidate, kept only if the simulator
// agrees. The greedy's own clock (exact F/I/W times, a fixed time per message) only orders actions;
// the simulator decides.
//
// Note [Auto objective]
// ~~~~~~~~~~~~~~~~~~~~~
// kStep (the default) ranks by the simulated step, which ends when the
// last rank finishes: pipewright's executor synchronises every step (the loss all-reduce), so
// that is the time a step takes there. kSpan ranks by the longest per-rank span (first compute
// pass to last), the Zero Bubble paper's cost and the bubble rate issue 45 states its targets in:
// the period of a runtime whose consecutive steps overlap (the paper's drops the sync between
// steps). Ties go to the other measure; the local search shortens the same key on its clock. On
// the paper's 12 profiled settings both objectives pick plans with ZB-2p's rates, the step ones
// also at the step's lower bound (docs/schedules.md, "Against the Zero Bubble paper's
// evaluation").
//
// Cost: each greedy is O(P V M x P V) (every pass scans the ranks' next passes), the paper's
// heuristic O(P^2 M), each simulation O(actions log actions), the local search at most ~2e7
// replayed passes; p = 32, m = 256 takes under a second (bench/auto_schedule.sh).
// Optimality: none is guaranteed (the paper follows its heuristic with an ILP; Auto does not). Each
// result carries lower_bound_ns, the largest over ranks of (the forward chain before the rank's
// first stage + the rank's compute), which no schedule beats; with T_F = T_I = T_W and free p2p the
// 2P-microbatch plan reaches it (gap 0). Deterministic: the same inputs give the same plan; only a
// time limit that expires makes the result depend on the machine's speed (then timed_out and note
// say so).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/memory.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sim/cluster.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// What Auto minimises (Note [Auto objective]).
enum class AutoObjective : std::uint8_t {
  kStep,  // the simulated step (then the span): pipewright's executor, which syncs every step
  kSpan,  // the longest per-rank span (then the step): the Zero Bubble paper's cost
};

struct AutoOptions {
  std::int32_t ranks = 1;            // P
  std::int32_t microbatches = 1;     // M
  std::int32_t stages_per_rank = 1;  // V: 1, or 2 (V-shaped or looping placement), or more
  // The per-rank cap, one of the two (neither: no cap):
  // bytes of device memory, compared with sched::peak_memory (static + runtime + activations);
  std::optional<std::int64_t> memory_limit_bytes;
  // or microbatches' activations per rank (the paper's pM_B is P, 2pM_B is 2P): K x the
  // activation bytes of one microbatch over the rank's stages (one unit per stage when the costs
  // carry no activation bytes). Either cap counts activation as the memory model does: an F adds
  // it, an I frees all but StageCost::weight_grad_keeps of it, the W the rest (Note
  // [Weight-gradient activation] in sched/memory.hpp; with weight_grad_keeps 32h / (34h + 5as)
  // this is the paper's M_B / M_W accounting, so K = 2P is its ZB-2p's memory).
  std::optional<double> max_inflight;
  // Wall-clock budget for the search (seconds); when it expires the best plan so far is returned.
  std::optional<double> time_limit_s;
  AutoObjective objective = AutoObjective::kStep;
  sched::MemoryOptions memory;  // optimizer state, precision (what the memory model reads)
  SimOptions sim;               // as `simulate` would take them (p2p override, receives, ...)
  Cluster cluster;
};

// One candidate the search looked at.
struct AutoCandidate {
  std::string name;  // "greedy(I>F>W, flat cap, looping)", "InterleavedZeroBubble", ...
  bool fits = false;
  std::string why_not;       // when !fits or refused: the reason
  std::int64_t step_ns = 0;  // simulated step (fits only)
  double span_bubble = 0;    // span_bubble_rate of its simulation
};

struct AutoResult {
  sched::ComputePlan plan;  // shape.schedule == "Auto"
  std::string chosen;       // the winning candidate's name
  std::int64_t step_ns = 0;
  double span_bubble = 0;  // the paper's bubble rate (span_bubble_rate)
  double idle_share = 0;   // pipewright's (SimResult::bubble_fraction: counts the first wait)
  std::int64_t lower_bound_ns = 0;
  // Per rank: peak activation in the cap's unit (bytes, or microbatches' activations without
  // activation bytes) and the cap it met.
  std::vector<double> peak_activation;
  std::vector<double> activation_cap;
  std::vector<AutoCandidate> candidates;  // in the order tried
  bool timed_out = false;
  std::string note;  // set when timed_out: how many candidates were tried
};

// The Auto plan (Note [Auto method]). `costs` has one stage per plan stage (P x V). Throws
// ConfigError for a cost table whose stage count is not P x V (naming both), a stage DAG, a cap
// below one microbatch in flight on some rank (naming the minimum), or non-positive sizes.
[[nodiscard]] AutoResult synthesize(const sched::CostTable& costs, const AutoOptions& options);

// The Zero Bubble paper's bubble rate of a recorded simulation (record_actions): cost = the
// longest span of a rank from the start of its first compute pass (F/B/I/W) to the end of its
// last, step 0; rate = (cost - the largest compute time of a rank) / cost. With equal stages
// this is the paper's (cost - m (T_F + T_B + T_W)) / cost; unlike bubble_fraction() it does not
// count a rank's wait for its first input.
[[nodiscard]] double span_bubble_rate(const SimResult& result);

}  // namespace pipewright::sim
