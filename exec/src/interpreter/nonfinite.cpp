// Note [Non-finite steps]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A run whose loss or gradients became NaN or Inf used to train on and exit 0 (issue 20, item 8).
// Now two places look, as torchtitan and DeepSpeed do: the loss, on the stage that computes it
// (summed over the step's microbatches), and the gradient norm of each stage, at its OPTIM
// action, after REDUCE_GRAD (so data-parallel replicas see the same averaged gradients and
// decide alike). A non-finite gradient norm skips that stage's optimizer step unless the policy
// is warn, so the weights stay finite. The per-step loss all-reduce over the world, which every
// rank already makes, carries each rank's findings, so every rank reaches the same verdict at
// the same step: under --nan-policy error every rank throws the same NumericalError (exit 1)
// naming the step, the first rank and its stage; under skip-step and warn the run goes on and
// rank 0 logs the line. Pipeline stages decide their skip independently (no extra collective
// inside the step): a NaN loss makes every stage's gradients non-finite through backward, so in
// practice they agree.
#include "interpreter/nonfinite.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

double gradient_norm(const torch::optim::Optimizer& optimizer) {
  double sum_sq = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const double n = p.grad().detach().norm().to(torch::kCPU).item<double>();
      sum_sq += n * n;
    }
  }
  return std::sqrt(sum_sq);
}

double checked_optimizer_step(torch::optim::Optimizer& optimizer, sched::NanPolicy policy) {
  const double norm = gradient_norm(optimizer);
  if (std::isfinite(norm) || policy == sched::NanPolicy::kWarn) optimizer.step();
  return norm;
}

// Note [Loss all-reduce in shared memory]: the per-step loss all-reduce works on a buffer from
// world.allocate_collective_buffer, allocated once before the first step, so that ranks of one
// host sum it in shared memory (Note [Shared-memory all-reduce]) as DDP's buckets are. Through
// Gloo's TCP (c10d's worker thread, then Gloo's device loop, then back) the same 40 bytes cost
// 0.2-3.6 ms per step on this 2-core host, bimodally (ranks waking each other's threads), a
// step-long wait that the trace did not show and the simulator could not know: a 5 ms DDP step
// spent up to 3 ms in it. Across hosts the buffer is heap memory and the all-reduce goes over
// TCP as before.
namespace {
// Per rank in the loss all-reduce: loss stage + 1, loss value, grad stage + 1, grad norm.
constexpr std::size_t kPerRank = 4;
}  // namespace

std::size_t loss_sync_doubles(const Communicator& world) {
  return 1 + kPerRank * static_cast<std::size_t>(world.size());
}

double all_reduce_loss_checked(Communicator& world, double* scratch, double loss,
                               const NonFinite& mine, std::int64_t step,
                               std::chrono::milliseconds timeout, std::string* problem) {
  // [loss, then per rank: loss stage + 1, loss value, grad stage + 1, grad norm]; each rank
  // fills its own slots, so the sum is every rank's report.
  const auto n = static_cast<std::size_t>(world.size());
  double* buf = scratch;
  const std::size_t count = loss_sync_doubles(world);
  std::fill(buf, buf + count, 0.0);
  buf[0] = loss;
  double* own = &buf[1 + kPerRank * static_cast<std::size_t>(world.rank())];
  own[0] = mine.loss_stage + 1;
  own[1] = mine.loss_stage >= 0 ? mine.loss : 0.0;
  own[2] = mine.grad_stage + 1;
  own[3] = mine.grad_stage >= 0 ? mine.grad_norm : 0.0;
  world
      .all_reduce(BufferView{buf, count, DType::kFloat64, {}}, ReduceOp::kSum,
                  OpContext{step, -1, -1, "loss all_reduce"})
      ->wait(timeout);
  problem->clear();
  for (std::size_t r = 0; r < n && problem->empty(); ++r) {
    const double* f = &buf[1 + kPerRank * r];
    std::ostringstream os;
    if (f[0] > 0) {
      os << "step " << step + 1 << ": non-finite loss (" << f[1] << ") on rank " << r << ", stage "
         << static_cast<int>(f[0]) - 1;
    } else if (f[2] > 0) {
      os << "step " << step + 1 << ": non-finite gradient norm (" << f[3] << ") on rank " << r
         << ", stage " << static_cast<int>(f[2]) - 1;
    }
    *problem = os.str();
  }
  return buf[0];
}

}  // namespace pipewright::exec
