// The plan interpreter in one process: every rank is a thread with a FakeWorld communicator.
// Pipelined training of a small MLP must give the same weights as full-batch training of the same
// model in one piece, for every schedule; faults surface as pipewright errors with context.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <map>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dp/dp_hooks.hpp"
#include "interpreter/interpreter.hpp"
#include "pipewright/exec/fake_communicator.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/job.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"

namespace pipewright::exec {
namespace {

constexpr int kWidth = 6;

// y = relu?(x W^T + b) for one layer; the last layer has no ReLU.
class LayerBody final : public StageBody {
 public:
  LayerBody(const torch::Tensor& w, const torch::Tensor& b, bool relu, bool add_second_input)
      : w_(w.clone().set_requires_grad(true)),
        b_(b.clone().set_requires_grad(true)),
        relu_(relu),
        add_(add_second_input) {}
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& in) override {
    auto x = add_ ? in.at(0) + in.at(1) : in.at(0);
    auto y = torch::addmm(b_, x, w_.t());
    return {relu_ ? torch::relu(y) : y};
  }
  std::vector<torch::Tensor> parameters() override { return {w_, b_}; }

 private:
  torch::Tensor w_, b_;
  bool relu_;
  bool add_;
};

struct Weights {
  std::vector<torch::Tensor> w, b;
};

Weights init_weights(int layers) {
  torch::manual_seed(7);
  Weights out;
  for (int i = 0; i < layers; ++i) {
    out.w.push_back(torch::randn({kWidth, kWidth}) * 0.4);
    out.b.push_back(torch::randn({kWidth}) * 0.1);
  }
  return out;
}

torch::Tensor mse(const torch::Tensor& out, const torch::Tensor& y) {
  return torch::mse_loss(out, y);
}

// Reference: the whole chain (with an optional skip from layer 0's output into layer `skip_to`)
// trained on the full batch, SGD with momentum.
Weights reference(const Weights& init, const torch::Tensor& x, const torch::Tensor& y, int steps,
                  int skip_to) {
  std::vector<torch::Tensor> w, b;
  for (std::size_t i = 0; i < init.w.size(); ++i) {
    w.push_back(init.w[i].clone().set_requires_grad(true));
    b.push_back(init.b[i].clone().set_requires_grad(true));
  }
  std::vector<torch::Tensor> params;
  for (std::size_t i = 0; i < w.size(); ++i) {
    params.push_back(w[i]);
    params.push_back(b[i]);
  }
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  const int n = static_cast<int>(w.size());
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto h = x;
    torch::Tensor h0;
    for (int i = 0; i < n; ++i) {
      if (i == skip_to) h = h + h0;
      h = torch::addmm(b[static_cast<std::size_t>(i)], h, w[static_cast<std::size_t>(i)].t());
      if (i + 1 < n) h = torch::relu(h);
      if (i == 0) h0 = h;
    }
    mse(h, y).backward();
    opt.step();
  }
  Weights out;
  for (int i = 0; i < n; ++i) {
    out.w.push_back(w[static_cast<std::size_t>(i)].detach());
    out.b.push_back(b[static_cast<std::size_t>(i)].detach());
  }
  return out;
}

struct RunResult {
  Weights weights;
  std::vector<double> losses;  // per step, from the loss stage's rank
  // Smallest heap growth recorded for an F action (Note [Measured activation memory]).
  std::int64_t min_forward_kept_bytes = std::numeric_limits<std::int64_t>::max();
  // Recorded actions per (step, kind).
  std::map<std::pair<std::int64_t, sched::ActionKind>, int> recorded;
  // Note [Send time] / Note [Data-parallel sync] (report/run_report.hpp).
  std::int64_t max_optimizer_ns = 0;
  std::int64_t max_compute_ns = 0;    // F, B, I, W (Note [Parameter waits])
  std::vector<std::int64_t> sync_ns;  // every rank's recorded syncs
  int sends = 0;                      // remote SEND actions recorded
  int timed_sends = 0;                // ... with 0 < send_ns <= their interval and drain_ns >= 0
  // Note [Compute CPU time] (report/run_report.hpp): compute actions and OPTIMs, those with
  // 0 < cpu_ns <= their interval (+ 0.1 ms for the clock reads), and other actions with cpu_ns.
  int computes = 0;
  int cpu_timed_computes = 0;
  int others_with_cpu = 0;
};

// Runs `plan` with one thread per rank; stage s is layer s. skip_to >= 0 adds an input from
// stage 0 to stage skip_to.
RunResult run_pipelined(const sched::LoweredPlan& plan, const Weights& init, const torch::Tensor& x,
                        const torch::Tensor& y, int steps, int skip_to,
                        bool prepost_receives = false, std::int64_t split_backward_step = -1,
                        bool recompute = false,
                        sched::Precision precision = sched::Precision::kFp32,
                        DataParallelHooks* dp_hooks = nullptr) {
  const int ranks = plan.shape.ranks;
  const int stages = plan.shape.stages;
  const int m = plan.shape.microbatches;
  FakeWorld world(ranks);
  auto comms = world.communicators();
  RunResult result;
  result.weights.w.resize(static_cast<std::size_t>(stages));
  result.weights.b.resize(static_cast<std::size_t>(stages));
  result.losses.assign(static_cast<std::size_t>(steps), 0.0);
  std::mutex mu;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  auto xs = x.chunk(m);
  auto ys = y.chunk(m);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::vector<StageSetup> setups;
        for (int s : plan.shape.stages_of_rank(r)) {
          StageSetup st;
          st.stage = s;
          const bool add = s == skip_to;
          st.body =
              std::make_shared<LayerBody>(init.w[static_cast<std::size_t>(s)],
                                          init.b[static_cast<std::size_t>(s)], s + 1 < stages, add);
          st.inputs = {InputSource{s - 1, 0}};
          if (add) st.inputs.push_back(InputSource{0, 0});
          st.num_outputs = 1;
          st.consumers.resize(1);
          if (s + 1 < stages) st.consumers[0].emplace_back(s + 1, 0);
          if (s == 0 && skip_to > 0) st.consumers[0].emplace_back(skip_to, 1);
          st.loss_output = s + 1 == stages ? 0 : -1;
          st.recompute = recompute;
          st.optimizer = std::make_unique<torch::optim::SGD>(
              st.body->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
          setups.push_back(std::move(st));
        }
        NoDataParallel hooks;
        InterpreterOptions opts;
        opts.timeout = std::chrono::milliseconds(20'000);
        opts.world_rank = r;
        opts.prepost_receives = prepost_receives;
        opts.split_backward_step = split_backward_step;
        opts.record_timings = true;
        opts.precision = precision;
        Interpreter interp(plan, r, std::move(setups), comms[static_cast<std::size_t>(r)].get(),
                           dp_hooks != nullptr ? dp_hooks : &hooks, mse, opts);
        interp.agree_shapes(xs[0]);
        for (int step = 0; step < steps; ++step) {
          auto res = interp.run_step(step, xs, ys);
          if (res.has_loss) {
            std::lock_guard<std::mutex> lock(mu);
            result.losses[static_cast<std::size_t>(step)] = res.loss;
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& t : interp.timings()) {
          ++result.recorded[{t.step, t.action.kind}];
          if (t.action.kind == sched::ActionKind::kForward) {
            result.min_forward_kept_bytes = std::min(result.min_forward_kept_bytes, t.bytes);
          }
          if (t.action.kind == sched::ActionKind::kOptimizerStep) {
            result.max_optimizer_ns = std::max(result.max_optimizer_ns, t.end_ns - t.start_ns);
          }
          if (sched::is_compute(t.action.kind)) {
            result.max_compute_ns = std::max(result.max_compute_ns, t.end_ns - t.start_ns);
          }
          if (sched::is_compute(t.action.kind) ||
              t.action.kind == sched::ActionKind::kOptimizerStep) {
            ++result.computes;
            if (t.cpu_ns > 0 && t.cpu_ns <= t.end_ns - t.start_ns + 100'000)
              ++result.cpu_timed_computes;
          } else if (t.cpu_ns != 0) {
            ++result.others_with_cpu;
          }
          if (sched::is_send(t.action.kind) && t.bytes > 0) {
            ++result.sends;
            if (t.send_ns > 0 && t.send_ns <= t.end_ns - t.start_ns && t.drain_ns >= 0)
              ++result.timed_sends;
          }
        }
        for (const auto& y : interp.sync_timings()) result.sync_ns.push_back(y.end_ns - y.start_ns);
        for (const auto& sp : interp.stage_params()) {
          result.weights.w[static_cast<std::size_t>(sp.stage)] = sp.params[0].detach();
          result.weights.b[static_cast<std::size_t>(sp.stage)] = sp.params[1].detach();
        }
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return result;
}

double max_diff(const Weights& a, const Weights& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.w.size(); ++i) {
    d = std::max(d, (a.w[i] - b.w[i]).abs().max().item<double>());
    d = std::max(d, (a.b[i] - b.b[i]).abs().max().item<double>());
  }
  return d;
}

struct Case {
  sched::ScheduleKind kind;
  int ranks;
  int v;
  int m;
};

class InterpreterEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(InterpreterEquivalence, MatchesFullBatchTraining) {
  torch::set_num_threads(1);
  const auto c = GetParam();
  sched::ScheduleSpec spec;
  spec.kind = c.kind;
  spec.ranks = c.ranks;
  spec.microbatches = c.m;
  spec.stages_per_rank = c.v;
  const auto plan = sched::lower_for_run(sched::generate(spec));
  const int layers = c.ranks * c.v;
  const auto init = init_weights(layers);
  torch::manual_seed(11);
  auto x = torch::randn({4 * c.m, kWidth});
  auto y = torch::randn({4 * c.m, kWidth});
  constexpr int kSteps = 3;
  const auto got = run_pipelined(plan, init, x, y, kSteps, -1);
  const auto want = reference(init, x, y, kSteps, -1);
  EXPECT_LE(max_diff(got.weights, want), 1e-5);
  // Note [Pre-posted receives]: every receive of a step posted when it starts.
  const auto pre = run_pipelined(plan, init, x, y, kSteps, -1, /*prepost_receives=*/true);
  EXPECT_LE(max_diff(pre.weights, want), 1e-5);
  EXPECT_GT(max_diff(init, want), 1e-3);  // training moved the weights
  EXPECT_GT(got.losses[0], got.losses[kSteps - 1]);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(sched::to_string(info.param.kind)) + "_p" + std::to_string(info.param.ranks) +
         "_v" + std::to_string(info.param.v) + "_m" + std::to_string(info.param.m);
}

using sched::ScheduleKind;
INSTANTIATE_TEST_SUITE_P(Schedules, InterpreterEquivalence,
                         ::testing::Values(Case{ScheduleKind::kGPipe, 2, 1, 4},
                                           Case{ScheduleKind::kGPipe, 4, 1, 4},
                                           Case{ScheduleKind::k1F1B, 2, 1, 4},
                                           Case{ScheduleKind::k1F1B, 4, 1, 8},
                                           Case{ScheduleKind::kInterleaved1F1B, 2, 2, 4},
                                           Case{ScheduleKind::kInterleaved1F1B, 4, 2, 8},
                                           Case{ScheduleKind::kLoopedBFS, 2, 2, 4},
                                           Case{ScheduleKind::kLoopedBFS, 4, 2, 8},
                                           Case{ScheduleKind::kInterleavedZeroBubble, 2, 2, 4},
                                           Case{ScheduleKind::kInterleavedZeroBubble, 4, 2, 8}),
                         case_name);

// Note [Measured activation memory]: with timings on, each F records the heap bytes it left
// allocated, at least its output (the heap is process-wide, so one rank: no other thread's
// allocations in between).
TEST(Interpreter, ForwardRecordsTheHeapBytesItKeeps) {
  torch::set_num_threads(1);
  sched::ScheduleSpec spec;
  spec.kind = ScheduleKind::kGPipe;
  spec.ranks = 1;
  spec.microbatches = 4;
  const auto plan = sched::lower_for_run(sched::generate(spec));
  const auto init = init_weights(1);
  torch::manual_seed(5);
  auto x = torch::randn({16, kWidth});
  auto y = torch::randn({16, kWidth});
  const auto got = run_pipelined(plan, init, x, y, 2, -1);
  EXPECT_GE(got.min_forward_kept_bytes, 4 * kWidth * static_cast<std::int64_t>(sizeof(float)));
  EXPECT_LT(got.min_forward_kept_bytes, std::numeric_limits<std::int64_t>::max());
}

// Two steps of a `kind` plan over `ranks` ranks (4 microbatches of an MLP) with data-parallel
// hooks `hooks`.
RunResult run_with_hooks(ScheduleKind kind, int ranks, DataParallelHooks* hooks) {
  torch::set_num_threads(1);
  sched::ScheduleSpec spec;
  spec.kind = kind;
  spec.ranks = ranks;
  spec.microbatches = 4;
  const auto plan = sched::lower_for_run(sched::generate(spec));
  torch::manual_seed(5);
  auto x = torch::randn({16, kWidth});
  auto y = torch::randn({16, kWidth});
  return run_pipelined(plan, init_weights(ranks), x, y, 2, -1, false, -1, false,
                       sched::Precision::kFp32, hooks);
}

// Note [Data-parallel sync] (report/run_report.hpp): the algorithm's work after the last OPTIM
// (here a 30 ms sleep) is timed apart, once per step, not inside the OPTIM; Note [Send time]:
// every remote SEND records the time of its send calls, inside its interval.
class SlowSync final : public DataParallelHooks {
 public:
  void on_start(std::vector<StageParams>& /*stages*/) override {}
  void before_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void reduce_grad(int /*stage*/) override {}
  void after_optimizer_step(std::int64_t /*step*/) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
};

TEST(Interpreter, DataParallelSyncAndSendCallsAreTimedApart) {
  SlowSync sync;
  const auto got = run_with_hooks(ScheduleKind::k1F1B, 2, &sync);
  ASSERT_EQ(got.sync_ns.size(), 4U);  // 2 ranks x 2 steps
  for (auto ns : got.sync_ns) EXPECT_GE(ns, 30'000'000);
  EXPECT_LT(got.max_optimizer_ns, 30'000'000);
  EXPECT_EQ(got.sends, 2 * 2 * 4);  // per step: 4 SEND_F on rank 0, 4 SEND_B on rank 1
  EXPECT_EQ(got.timed_sends, got.sends);
  // Note [Compute CPU time]: every compute action and OPTIM carries its thread's CPU time.
  EXPECT_GT(got.computes, 0);
  EXPECT_EQ(got.cpu_timed_computes, got.computes);
  EXPECT_EQ(got.others_with_cpu, 0);
}

// Note [Parameter waits]: a compute action's wait for its stage's parameters (ZeRO's all-gathers;
// here a 30 ms sleep in await_parameters, once per stage per step) is taken before the action is
// timed, so no F/B is recorded that long; the wait happens once per compute action.
class SlowParameters final : public DataParallelHooks {
 public:
  void on_start(std::vector<StageParams>& /*stages*/) override {}
  void await_parameters(int /*stage*/) override {
    ++awaited;
    if (waited_steps.insert(step).second)
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  void before_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void reduce_grad(int /*stage*/) override {}
  void after_optimizer_step(std::int64_t /*s*/) override { ++step; }
  std::atomic<int> awaited{0};
  std::int64_t step = 0;
  std::set<std::int64_t> waited_steps;
};

TEST(Interpreter, ParameterWaitsAreNotTimedAsCompute) {
  SlowParameters params;
  const auto got = run_with_hooks(ScheduleKind::kGPipe, 1, &params);
  EXPECT_EQ(params.awaited.load(), 2 * 8);  // 2 steps x (4 F + 4 B)
  EXPECT_EQ(params.waited_steps.size(), 2U);
  EXPECT_GT(got.max_compute_ns, 0);
  EXPECT_LT(got.max_compute_ns, 30'000'000);
}

// Note [Gradient waits]: the wait for a backward's own collectives (ZeRO-2/3's reduce-scatters;
// here a 30 ms sleep in await_gradients, once per step) comes right after the B is timed, after
// its after_backward and before the rank's next action, so no B is recorded that long.
class SlowGradients final : public DataParallelHooks {
 public:
  void on_start(std::vector<StageParams>& /*stages*/) override {}
  void before_forward(int /*stage*/, int /*microbatch*/) override { check_no_wait_pending(); }
  void before_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {
    check_no_wait_pending();
  }
  void after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {
    check_no_wait_pending();
    pending = true;
  }
  void await_gradients(int /*stage*/) override {
    ++awaited;
    if (!pending) ++out_of_order;
    pending = false;
    if (waited_steps.insert(step).second)
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  void reduce_grad(int /*stage*/) override { check_no_wait_pending(); }
  void after_optimizer_step(std::int64_t /*s*/) override { ++step; }
  void check_no_wait_pending() {
    if (pending) ++out_of_order;
  }
  int awaited = 0;
  int out_of_order = 0;
  bool pending = false;
  std::int64_t step = 0;
  std::set<std::int64_t> waited_steps;
};

TEST(Interpreter, GradientWaitsAreNotTimedAsCompute) {
  SlowGradients grads;
  const auto got = run_with_hooks(ScheduleKind::kGPipe, 1, &grads);
  EXPECT_EQ(grads.awaited, 2 * 4);  // 2 steps x 4 B, each right after its after_backward
  EXPECT_EQ(grads.out_of_order, 0);
  EXPECT_EQ(grads.waited_steps.size(), 2U);
  EXPECT_GT(got.max_compute_ns, 0);
  EXPECT_LT(got.max_compute_ns, 30'000'000);
}

// Note [Measured split backward]: in the split step, even microbatches' B run as I then W
// (recorded as such), with the same training result.
TEST(Interpreter, SplitBackwardStepRecordsInputAndWeightGradients) {
  torch::set_num_threads(1);
  sched::ScheduleSpec spec;
  spec.kind = ScheduleKind::k1F1B;
  spec.ranks = 2;
  spec.microbatches = 4;
  const auto plan = sched::lower_for_run(sched::generate(spec));
  const auto init = init_weights(2);
  torch::manual_seed(7);
  auto x = torch::randn({8, kWidth});
  auto y = torch::randn({8, kWidth});
  const auto got = run_pipelined(plan, init, x, y, 3, -1, false, /*split_backward_step=*/1);
  const auto want = reference(init, x, y, 3, -1);
  EXPECT_LE(max_diff(got.weights, want), 1e-5);
  using K = sched::ActionKind;
  auto count = [&](std::int64_t step, K k) {
    auto it = got.recorded.find({step, k});
    return it == got.recorded.end() ? 0 : it->second;
  };
  EXPECT_EQ(count(0, K::kFullBackward), 8);  // 2 stages x 4 microbatches
  EXPECT_EQ(count(0, K::kBackwardInput), 0);
  EXPECT_EQ(count(1, K::kFullBackward), 4);  // odd microbatches
  EXPECT_EQ(count(1, K::kBackwardInput), 4);
  EXPECT_EQ(count(1, K::kBackwardWeight), 4);
  EXPECT_EQ(count(2, K::kBackwardWeight), 0);
}

// Note [Activation recompute]: recomputing every stage's forward inside B / I trains to the
// same weights (bit for bit) and losses as keeping the activations.
TEST(Interpreter, RecomputeGivesTheSameWeights) {
  torch::set_num_threads(1);
  for (const auto& [kind, v] :
       {std::pair{ScheduleKind::k1F1B, 1}, std::pair{ScheduleKind::kInterleavedZeroBubble, 2}}) {
    sched::ScheduleSpec spec;
    spec.kind = kind;
    spec.ranks = 2;
    spec.stages_per_rank = v;
    spec.microbatches = 4;
    const auto plan = sched::lower_for_run(sched::generate(spec));
    const auto init = init_weights(2 * v);
    torch::manual_seed(9);
    auto x = torch::randn({16, kWidth});
    auto y = torch::randn({16, kWidth});
    const auto keep = run_pipelined(plan, init, x, y, 3, -1);
    const auto again = run_pipelined(plan, init, x, y, 3, -1, false, -1, /*recompute=*/true);
    EXPECT_EQ(max_diff(keep.weights, again.weights), 0.0) << sched::to_string(kind);
    EXPECT_EQ(keep.losses, again.losses) << sched::to_string(kind);
    EXPECT_GT(max_diff(init, keep.weights), 1e-3);
  }
}

// Issue 44, item 9: the interpreter's mixed-precision path (Note [Mixed precision]). bf16 over
// 2 ranks (autocast forwards, 16-bit activations and gradients between the stages, float32 master
// weights) trains, is deterministic, differs from fp32 (so autocast really ran), and stays within
// bf16's precision of it: each loss within 1% of fp32's (8 significant bits: 0.4% per rounding).
TEST(Interpreter, Bf16TrainsWithinItsPrecisionOfFp32) {
  torch::set_num_threads(1);
  sched::ScheduleSpec spec;
  spec.kind = ScheduleKind::k1F1B;
  spec.ranks = 2;
  spec.microbatches = 4;
  const auto plan = sched::lower_for_run(sched::generate(spec));
  const auto init = init_weights(2);
  torch::manual_seed(9);
  auto x = torch::randn({16, kWidth});
  auto y = torch::randn({16, kWidth});
  const auto fp32 = run_pipelined(plan, init, x, y, 3, -1);
  const auto bf16 =
      run_pipelined(plan, init, x, y, 3, -1, false, -1, false, sched::Precision::kBf16);
  const auto again =
      run_pipelined(plan, init, x, y, 3, -1, false, -1, false, sched::Precision::kBf16);
  EXPECT_EQ(max_diff(bf16.weights, again.weights), 0.0);
  EXPECT_GT(max_diff(fp32.weights, bf16.weights), 0.0);
  EXPECT_GT(max_diff(init, bf16.weights), 1e-3);
  for (std::size_t s = 0; s < fp32.losses.size(); ++s) {
    EXPECT_NE(bf16.losses[s], fp32.losses[s]) << "step " << s;
    EXPECT_LT(std::abs(bf16.losses[s] - fp32.losses[s]), 0.01 * std::abs(fp32.losses[s]))
        << "step " << s;
  }
}

TEST(Interpreter, SkipEdgeDag) {
  torch::set_num_threads(1);
  sched::ScheduleSpec spec;
  spec.kind = ScheduleKind::kGPipe;
  spec.ranks = 3;
  spec.microbatches = 3;
  spec.stage_edges = {{0, 1}, {1, 2}, {0, 2}};
  const auto plan = sched::lower_for_run(sched::generate(spec));
  const auto init = init_weights(3);
  torch::manual_seed(3);
  auto x = torch::randn({9, kWidth});
  auto y = torch::randn({9, kWidth});
  const auto got = run_pipelined(plan, init, x, y, 3, 2);
  const auto want = reference(init, x, y, 3, 2);
  EXPECT_LE(max_diff(got.weights, want), 1e-5);
  const auto pre = run_pipelined(plan, init, x, y, 3, 2, /*prepost_receives=*/true);
  EXPECT_LE(max_diff(pre.weights, want), 1e-5);
}

// The last of two stages (layer 1, loss on its output), for tests that play rank 0 by hand.
std::vector<StageSetup> last_stage(const Weights& init) {
  StageSetup st;
  st.stage = 1;
  st.body = std::make_shared<LayerBody>(init.w[1], init.b[1], false, false);
  st.inputs = {InputSource{0, 0}};
  st.consumers.resize(1);
  st.loss_output = 0;
  std::vector<StageSetup> setups;
  setups.push_back(std::move(st));
  return setups;
}

// Tag of a message between stage 0 and stage 1 of a 2-stage, 2-microbatch plan (see
// Interpreter::tag): direction 0 activation, 1 gradient, 2 start-up shapes.
std::int64_t stage01_tag(int direction, int mb) {
  return ((((0 * 2 + 1) * 3 + direction) * 2 + mb) * 16);
}

// Stage 0's start-up shape message to stage 1: one float tensor [2, kWidth].
void send_shapes(Communicator& rank0) {
  auto header = torch::zeros({64}, torch::kLong);
  auto* h = header.data_ptr<std::int64_t>();
  h[0] = 1;
  h[1] = static_cast<std::int64_t>(torch::kFloat);
  h[2] = 2;
  h[3] = 2;
  h[4] = kWidth;
  rank0.send(BufferView{header.data_ptr(), 64, DType::kInt64, {}}, 1, stage01_tag(2, 0), {})
      ->wait(std::chrono::milliseconds(1000));
}

// Note [Receives wait at their consumer]: rank 1's plan lists RECV_F of microbatch 1 before
// F of microbatch 0 (as lowered plans place receives early). Rank 0 (played by this thread)
// sends microbatch 1 late. With pre-posted receives F(0) runs before that data arrives and the
// wait is recorded as the RECV, right before F(1); posted at the action, the RECV blocks F(0).
TEST(Interpreter, LateReceiveDoesNotDelayReadyCompute) {
  torch::set_num_threads(1);
  using K = sched::ActionKind;
  sched::ScheduleSpec spec;
  spec.kind = ScheduleKind::kGPipe;
  spec.ranks = 2;
  spec.microbatches = 2;
  auto plan = sched::lower_for_run(sched::generate(spec));
  auto& list = plan.per_rank[1];
  auto find = [&](K kind, int mb) {
    return std::find_if(list.begin(), list.end(), [&](const sched::Action& a) {
      return a.kind == kind && a.microbatch == mb;
    });
  };
  const sched::Action late = *find(K::kRecvF, 1);
  list.erase(find(K::kRecvF, 1));
  list.insert(find(K::kForward, 0), late);
  const auto init = init_weights(2);
  torch::manual_seed(4);
  const auto x = torch::randn({4, kWidth}).chunk(2);
  const auto y = torch::randn({4, kWidth}).chunk(2);
  constexpr auto kDelay = std::chrono::milliseconds(300);
  for (const bool prepost : {true, false}) {
    FakeWorld world(2);
    auto comms = world.communicators();
    std::vector<ActionTiming> timings;
    std::exception_ptr err;
    std::thread rank1([&] {
      try {
        NoDataParallel hooks;
        InterpreterOptions opts;
        opts.world_rank = 1;
        opts.prepost_receives = prepost;
        opts.record_timings = true;
        Interpreter interp(plan, 1, last_stage(init), comms[1].get(), &hooks, mse, opts);
        interp.agree_shapes(x[0], 0);
        (void)interp.run_step(0, x, y);
        timings = interp.timings();
      } catch (...) {
        err = std::current_exception();
      }
    });
    // Rank 0's messages: the shapes, microbatch 0's activation, and microbatch 1's after kDelay.
    send_shapes(*comms[0]);
    const auto wait = std::chrono::milliseconds(1000);
    auto act0 = torch::randn({2, kWidth});
    auto act1 = torch::randn({2, kWidth});
    comms[0]
        ->send(BufferView{act0.data_ptr(), 2 * kWidth, DType::kFloat32, {}}, 1, stage01_tag(0, 0),
               {})
        ->wait(wait);
    std::this_thread::sleep_for(kDelay);
    const std::int64_t sent1 = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count();
    comms[0]
        ->send(BufferView{act1.data_ptr(), 2 * kWidth, DType::kFloat32, {}}, 1, stage01_tag(0, 1),
               {})
        ->wait(wait);
    auto g0 = torch::empty({2, kWidth});
    auto g1 = torch::empty({2, kWidth});
    comms[0]
        ->recv(BufferView{g1.data_ptr(), 2 * kWidth, DType::kFloat32, {}}, 1, stage01_tag(1, 1), {})
        ->wait(std::chrono::milliseconds(20'000));
    comms[0]
        ->recv(BufferView{g0.data_ptr(), 2 * kWidth, DType::kFloat32, {}}, 1, stage01_tag(1, 0), {})
        ->wait(std::chrono::milliseconds(20'000));
    rank1.join();
    if (err) std::rethrow_exception(err);
    auto at = [&](K kind, int mb) {
      auto it = std::find_if(timings.begin(), timings.end(), [&](const ActionTiming& t) {
        return t.action.kind == kind && t.action.microbatch == mb;
      });
      EXPECT_NE(it, timings.end()) << sched::to_string(kind) << " " << mb;
      return it == timings.end() ? ActionTiming{} : *it;
    };
    const auto f0 = at(K::kForward, 0);
    const auto f1 = at(K::kForward, 1);
    const auto recv1 = at(K::kRecvF, 1);
    EXPECT_GE(recv1.end_ns, sent1) << "prepost " << prepost;  // it waited for the data
    EXPECT_EQ(recv1.bytes, 2 * kWidth * 4);
    if (prepost) {
      EXPECT_LT(f0.end_ns, sent1);           // F(0) did not wait for microbatch 1
      EXPECT_GE(recv1.start_ns, f0.end_ns);  // the wait is recorded where F(1) needed the data
      EXPECT_LE(recv1.end_ns, f1.start_ns);
    } else {
      EXPECT_GE(f0.start_ns, sent1);  // blocked at the RECV action
    }
  }
}

TEST(Interpreter, MissingPeerTimesOutNamingStageMicrobatchStep) {
  sched::ScheduleSpec spec;
  spec.kind = ScheduleKind::kGPipe;
  spec.ranks = 2;
  spec.microbatches = 2;
  const auto plan = sched::lower_for_run(sched::generate(spec));
  FakeWorld world(2);
  auto comm1 = world.communicator(1);
  auto comm0 = world.communicator(0);  // rank 0 never runs
  NoDataParallel hooks;
  InterpreterOptions opts;
  opts.timeout = std::chrono::milliseconds(200);
  opts.world_rank = 1;
  Interpreter interp(plan, 1, last_stage(init_weights(2)), comm1.get(), &hooks, mse, opts);
  try {
    interp.agree_shapes(torch::zeros({2, kWidth}), 0);
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1"), std::string::npos) << e.what();
  }
}

TEST(Interpreter, DeadPeerRaisesPeerError) {
  sched::ScheduleSpec spec;
  spec.kind = ScheduleKind::k1F1B;
  spec.ranks = 2;
  spec.microbatches = 2;
  const auto plan = sched::lower_for_run(sched::generate(spec));
  const auto init = init_weights(2);
  torch::manual_seed(1);
  auto x = torch::randn({4, kWidth});
  auto y = torch::randn({4, kWidth});
  FakeWorld world(2);
  auto comms = world.communicators();
  std::exception_ptr err;
  std::thread t([&] {
    try {
      NoDataParallel hooks;
      InterpreterOptions opts;
      opts.timeout = std::chrono::milliseconds(20'000);
      opts.world_rank = 1;
      Interpreter interp(plan, 1, last_stage(init), comms[1].get(), &hooks, mse, opts);
      interp.agree_shapes(x.chunk(2)[0], 0);
      for (int step = 0; step < 100; ++step) (void)interp.run_step(step, x.chunk(2), y.chunk(2));
    } catch (...) {
      err = std::current_exception();
    }
  });
  send_shapes(*comms[0]);  // rank 0 sends its shapes, then dies before the first activation
  world.kill(0);
  t.join();
  ASSERT_TRUE(err);
  try {
    std::rethrow_exception(err);
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage 1"), std::string::npos) << what;
    EXPECT_NE(what.find("microbatch 0"), std::string::npos) << what;
    EXPECT_NE(what.find("step 0"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace pipewright::exec
