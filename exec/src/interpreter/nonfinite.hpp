// Non-finite losses and gradients (issue 20, item 8; Note [Non-finite steps] in nonfinite.cpp).
// Private to exec/.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pipewright/sched/job.hpp"

namespace pipewright::exec {

class Communicator;

// The L2 norm of every gradient the optimizer would apply (0 without gradients); NaN or Inf
// when any gradient is.
[[nodiscard]] double gradient_norm(const torch::optim::Optimizer& optimizer);

// The optimizer step of one stage at its OPTIM action: steps unless the gradient norm is not
// finite and `policy` is not kWarn (a non-finite step is never applied under error and
// skip-step). Returns the gradient norm.
double checked_optimizer_step(torch::optim::Optimizer& optimizer, sched::NanPolicy policy);

// What one rank saw in one step: the first local stage whose loss or gradient norm was not
// finite (-1: none) and the value.
struct NonFinite {
  int loss_stage = -1;
  double loss = 0;
  int grad_stage = -1;
  double grad_norm = 0;
};

// Collective over the world (every rank calls it once per step, in place of the loss
// all-reduce): sums `loss` over the ranks and gathers every rank's NonFinite. Returns the summed
// loss and, in `problem`, "" when every rank was finite, else one line naming the step, the
// first rank and its stage and value ("step 3: non-finite loss (nan) on rank 1, stage 1"; steps
// counted from 1 as in the logs), the same on every rank. `scratch`: loss_sync_doubles(world)
// doubles from world.allocate_collective_buffer (Note [Loss all-reduce in shared memory]).
double all_reduce_loss_checked(Communicator& world, double* scratch, double loss,
                               const NonFinite& mine, std::int64_t step,
                               std::chrono::milliseconds timeout, std::string* problem);

// The doubles all_reduce_loss_checked's scratch holds for `world`.
[[nodiscard]] std::size_t loss_sync_doubles(const Communicator& world);

}  // namespace pipewright::exec
