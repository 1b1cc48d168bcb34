// TiedGradientSync (tied_sync.hpp): the copies of a tied parameter on two pipeline ranks (one of
// them holding two copies, as two stages of an interleaved plan) end with the sum of all copies'
// gradients; a plan that computes after an OPTIM is refused.
#include "dp/tied_sync.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "pipewright/exec/fake_communicator.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"

namespace pipewright::exec {
namespace {

sched::LoweredPlan interleaved_plan() {
  return sched::lower_for_run(
      sched::generate({sched::ScheduleKind::kInterleaved1F1B, 2, 4, 2, {}}));
}

torch::Tensor param_with_grad(float grad) {
  auto p = torch::zeros({2, 3}).requires_grad_(true);
  p.mutable_grad() = torch::full({2, 3}, grad);
  return p;
}

TEST(TiedGradientSync, EveryCopyGetsTheSumOfAllCopiesGradients) {
  FakeWorld world(2);
  auto comms = world.communicators();
  const std::vector<TiedGroup> groups = {{"wte.weight", {2, 3}, {0, 2, 3}}, {"other", {4}, {1, 2}}};
  const auto plan = interleaved_plan();
  std::vector<std::vector<torch::Tensor>> params(2);
  params[0] = {param_with_grad(1), param_with_grad(2)};                      // stages 0 and 2
  params[1] = {param_with_grad(4), torch::zeros({4}).requires_grad_(true)};  // stage 3; no grad
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        NoDataParallel inner;
        std::vector<TiedCopy> copies;
        if (r == 0) {
          copies = {{"wte.weight", params[0][0]}, {"wte.weight", params[0][1]}};
        } else {
          copies = {{"wte.weight", params[1][0]}, {"other", params[1][1]}};
        }
        TiedGradientSync sync(&inner, comms[static_cast<std::size_t>(r)].get(), groups, copies,
                              plan, torch::kCPU, std::chrono::milliseconds(10000));
        sync.before_optimizer_steps(0);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  for (const auto& t : {params[0][0], params[0][1], params[1][0]}) {
    EXPECT_TRUE(torch::equal(t.grad(), torch::full({2, 3}, 7.0f)));
  }
  // A copy without a gradient gets the (zero) sum as its gradient.
  ASSERT_TRUE(params[1][1].grad().defined());
  EXPECT_TRUE(torch::equal(params[1][1].grad(), torch::zeros({4})));
}

TEST(TiedGradientSync, RefusesPlansThatComputeAfterAnOptim) {
  FakeWorld world(1);
  auto comm = world.communicator(0);
  auto plan = interleaved_plan();
  // An OPTIM first on rank 0: its forwards would run after the exchange.
  auto& list = plan.per_rank[0];
  list.insert(list.begin(), sched::Action::stage_only(0, sched::ActionKind::kOptimizerStep));
  NoDataParallel inner;
  EXPECT_THROW(TiedGradientSync(&inner, comm.get(), {{"w", {1}, {0, 1}}}, {}, plan, torch::kCPU,
                                std::chrono::milliseconds(1000)),
               ConfigError);
}

}  // namespace
}  // namespace pipewright::exec
