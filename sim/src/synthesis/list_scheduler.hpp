// Private: the greedy list scheduler that builds Auto's candidate orders (Note [Greedy list
// schedule]); synthesize() (synthesis.cpp) times them with the simulator.
#pragma once

#include <cstdint>
#include <vector>

#include "pipewright/sched/action.hpp"

namespace pipewright::sim::synthesis {

// A chain of `stages` stages over `ranks` ranks; times in ns, activation in any unit.
struct ListProblem {
  std::int32_t ranks = 1;
  std::int32_t stages = 1;
  std::int32_t microbatches = 1;
  std::vector<std::int32_t> stage_to_rank;
  std::vector<std::int64_t> forward_ns, input_grad_ns, weight_grad_ns;  // per stage
  std::vector<std::int64_t> message_ns;  // per stage s < stages - 1: s <-> s + 1 (0: same rank)
  std::vector<std::int64_t> activation;  // per stage: held from F, until the end of its W
  // per stage: the part of `activation` an I frees at its end, the rest at its W (Note
  // [Weight-gradient activation] in sched/memory.hpp); empty: none (W frees everything).
  std::vector<std::int64_t> input_grad_frees;
  std::vector<std::int64_t> cap;  // per rank: the most activation it may hold
};

struct ListPolicy {
  bool forward_first = false;  // F before I when both can start at the same time
  // The cap of rank r is cap[r] - step_down x r x (one microbatch's activation on rank r),
  // never below one microbatch: 1 gives ZB-H1's staircase, 0 a flat cap.
  std::int32_t step_down = 0;
};

// What an I of `stage` frees (ListProblem::input_grad_frees), and what its W frees.
[[nodiscard]] std::int64_t input_grad_frees(const ListProblem& problem, std::int32_t stage);
[[nodiscard]] std::int64_t weight_grad_frees(const ListProblem& problem, std::int32_t stage);

// Note [Greedy list schedule]: replays the pipeline on the greedy's own clock. At every step the
// pass that can start earliest over all ranks is placed (lowest rank on ties), each rank taking,
// of the passes it can start first: its oldest I whose gradient has arrived, a forward whose
// input has arrived (oldest microbatch, deeper stage on ties) if a new microbatch still fits
// under the cap (a microbatch is admitted at the rank's first stage with the activation of all
// the rank's stages reserved, so a V-shaped rank can always finish what it admitted; an I
// returns what it frees, a W the rest), else the W
// of its oldest I (deferred W fills time the rank would wait). policy.forward_first swaps the
// first two. Throws InvalidPlanError if no pass can start (a cap below one microbatch).
[[nodiscard]] std::vector<std::vector<sched::Action>> list_schedule(const ListProblem& problem,
                                                                    const ListPolicy& policy);

}  // namespace pipewright::sim::synthesis
