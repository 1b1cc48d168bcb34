// The plan interpreter (see interpreter.hpp, Note [Interpreter actions]): its construction, the
// step loop, the actions' dispatch, pre-posted receives and p2p batches. The compute actions
// F, B, I, W are in interpreter_compute.cpp, the messages (SEND, RECV, shapes) in
// interpreter_p2p.cpp.
#include "interpreter/interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "compat/torch_compat.hpp"
#include "dp/dp_algorithm.hpp"
#include "interpreter/interpreter_state.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/action.hpp"
#include "report/run_report.hpp"

namespace pipewright::exec {

namespace {

using Clock = std::chrono::steady_clock;
using sched::Action;
using sched::ActionKind;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The calling thread's CPU time, ns (Note [Compute CPU time] in report/run_report.hpp).
std::int64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Runs `fn`, turning a non-pipewright exception into an InternalError that names the action.
template <typename Fn>
void with_context(const std::string& where, Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw InternalError(where + ": " + e.what());
  }
}

}  // namespace

Interpreter::Interpreter(const sched::LoweredPlan& plan, int pipe_rank,
                         std::vector<StageSetup> stages, Communicator* pipe,
                         DataParallelHooks* hooks, LossFn loss, InterpreterOptions options)
    : plan_(plan),
      pipe_rank_(pipe_rank),
      stages_(std::move(stages)),
      pipe_(pipe),
      hooks_(hooks),
      loss_(std::move(loss)),
      options_(options) {
  const auto& shape = plan_.shape;
  PW_CHECK(pipe_rank_ >= 0 && pipe_rank_ < shape.ranks, InvalidPlanError,
           "pipeline rank " << pipe_rank_ << " is outside the plan's " << shape.ranks << " ranks");
  PW_CHECK(static_cast<int>(plan_.per_rank.size()) == shape.ranks, InvalidPlanError,
           "plan has " << plan_.per_rank.size() << " rank lists for " << shape.ranks << " ranks");
  PW_ASSERT(pipe_ != nullptr && hooks_ != nullptr, "interpreter needs a communicator and hooks");
  PW_CHECK(pipe_->size() == shape.ranks, ConfigError,
           "the plan has " << shape.ranks << " pipeline ranks but the pipeline group has "
                           << pipe_->size() << " processes");
  const auto expected = shape.stages_of_rank(pipe_rank_);
  std::vector<int> got;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    got.push_back(stages_[i].stage);
    stage_index_[stages_[i].stage] = i;
    PW_ASSERT(stages_[i].body != nullptr, "stage " << stages_[i].stage << " has no body");
    PW_ASSERT(static_cast<int>(stages_[i].consumers.size()) == stages_[i].num_outputs,
              "stage " << stages_[i].stage << " consumer table size");
  }
  std::sort(got.begin(), got.end());
  PW_CHECK(got == std::vector<int>(expected.begin(), expected.end()), InvalidPlanError,
           "rank " << pipe_rank_ << ": the plan places " << expected.size()
                   << " stage(s) on this rank but " << got.size() << " were built");

  actions_ = plan_.per_rank[static_cast<std::size_t>(pipe_rank_)];
  std::set<int> has_reduce;
  std::set<int> has_optim;
  for (const auto& a : actions_) {
    PW_CHECK(stage_index_.count(a.stage) != 0, InvalidPlanError,
             "rank " << pipe_rank_ << ": action " << sched::to_string(a) << " names stage "
                     << a.stage << ", which the plan places on rank "
                     << (a.stage >= 0 && a.stage < shape.stages
                             ? shape.stage_to_rank[static_cast<std::size_t>(a.stage)]
                             : -1));
    if (a.kind == ActionKind::kReduceGrad) has_reduce.insert(a.stage);
    if (a.kind == ActionKind::kOptimizerStep) has_optim.insert(a.stage);
    if (sched::is_comm(a.kind)) {
      PW_CHECK(a.peer_stage >= 0 && a.peer_stage < shape.stages, InvalidPlanError,
               "rank " << pipe_rank_ << ": action " << sched::to_string(a)
                       << " has no valid peer stage");
    }
    if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardWeight) {
      last_backward_mb_[a.stage] = a.microbatch;
    }
  }
  // Plans come from sched::make_plan / lower_for_run, which give every stage its REDUCE_GRAD
  // and OPTIM; the interpreter adds no actions of its own.
  for (int s : got) {
    if (plan_.shape.forward_only) break;  // inference: no gradients, no optimizer
    PW_CHECK(has_reduce.count(s) != 0 && has_optim.count(s) != 0, InvalidPlanError,
             "rank " << pipe_rank_ << ": the plan has no "
                     << (has_reduce.count(s) == 0 ? "REDUCE_GRAD" : "OPTIM") << " for stage " << s
                     << " (build plans with sched::make_plan or sched::lower_for_run)");
  }
  // Note [Global gradient norm]: the recipe's collective runs at the first OPTIM, so nothing
  // after it may wait for another rank.
  if (options_.recipe != nullptr && options_.recipe->needs_collective()) {
    bool optim_seen = false;
    for (const auto& a : actions_) {
      optim_seen = optim_seen || a.kind == ActionKind::kOptimizerStep;
      PW_CHECK(
          !optim_seen || a.kind == ActionKind::kOptimizerStep, ConfigError,
          "rank "
              << pipe_rank_ << ": the plan runs " << sched::to_string(a)
              << " after an OPTIM action; --clip-grad-norm, --precision fp16 and "
                 "--metrics need every OPTIM after the rank's compute, messages and REDUCE_GRADs");
    }
  }
  for (const auto& st : stages_) {
    for (const auto& in : st.inputs) {
      PW_CHECK(in.producer_stage >= -1 && in.producer_stage < shape.stages, InvalidPlanError,
               "stage " << st.stage << " reads from stage " << in.producer_stage
                        << ", outside the plan's " << shape.stages << " stages");
    }
  }
}

Interpreter::~Interpreter() = default;

StageSetup& Interpreter::local(int stage) {
  auto it = stage_index_.find(stage);
  PW_ASSERT(it != stage_index_.end(), "stage " << stage << " is not local");
  return stages_[it->second];
}

torch::optim::Optimizer* Interpreter::replace_optimizer(
    int stage, std::unique_ptr<torch::optim::Optimizer> optimizer) {
  auto& st = local(stage);
  st.optimizer = std::move(optimizer);
  return st.optimizer.get();
}

Interpreter::MbState& Interpreter::state(int stage, int mb) {
  auto& slot = states_[{stage, mb}];
  if (!slot) {
    slot = std::make_unique<MbState>();
    const auto& st = local(stage);
    slot->inputs.resize(st.inputs.size());
    slot->input_grads.resize(st.inputs.size());
  }
  return *slot;
}

int Interpreter::rank_of(int stage) const {
  return plan_.shape.stage_to_rank[static_cast<std::size_t>(stage)];
}

OpContext Interpreter::context(const Action& a, std::int64_t step) const {
  OpContext ctx;
  ctx.step = step;
  ctx.stage = a.stage;
  ctx.microbatch = a.microbatch;
  ctx.what = std::string(sched::to_string(a.kind));
  if (sched::is_comm(a.kind)) ctx.what += " (peer stage " + std::to_string(a.peer_stage) + ")";
  return ctx;
}

StepResult Interpreter::run_step(std::int64_t step, const std::vector<torch::Tensor>& x_mbs,
                                 const std::vector<torch::Tensor>& y_mbs) {
  PW_ASSERT(shapes_agreed_, "agree_shapes() must run before run_step()");
  PW_CHECK(static_cast<int>(x_mbs.size()) == plan_.shape.microbatches &&
               static_cast<int>(y_mbs.size()) == plan_.shape.microbatches,
           ConfigError,
           "step " << step << ": " << x_mbs.size() << " input microbatches for a plan of "
                   << plan_.shape.microbatches);
  loss_sum_ = 0;
  loss_count_ = 0;
  predictions_.assign(static_cast<std::size_t>(plan_.shape.microbatches), torch::Tensor());
  nonfinite_ = NonFinite{};
  phase_ = OptimizerPhase{};
  if (options_.recipe != nullptr) phase_.loss_scale = options_.recipe->loss_scale();
  // Note [Mixed precision]: autocast's 16-bit copies of the weights are made once per step and
  // shared by every microbatch's forward (and kept by their graphs), not once per microbatch.
  compat::AutocastCacheScope autocast_cache(options_.precision != sched::Precision::kFp32);
  awaiting_.clear();
  if (options_.prepost_receives) prepost_receives(step);
  for (std::size_t i = 0; i < actions_.size(); ++i) {
    std::size_t run_end = i;
    while (run_end < actions_.size() && is_remote_p2p(actions_[run_end])) ++run_end;
    if (run_end - i >= 2) {
      run_p2p_batch(i, run_end, step, x_mbs, y_mbs);
      i = run_end - 1;
      continue;
    }
    const auto& a = actions_[i];
    if (waits_at_consumer(i)) {
      // Note [Receives wait at their consumer]: recorded where the consumer waits for it.
      exec_action(a, step, x_mbs, y_mbs, nullptr);
      continue;
    }
    if (a.kind == ActionKind::kForward || a.kind == ActionKind::kFullBackward ||
        a.kind == ActionKind::kBackwardInput) {
      await_receives(&a, step);
    }
    if (sched::is_compute(a.kind)) {
      // Note [Parameter waits]: ZeRO's all-gathers are waited for before the action is timed;
      // the wait is data-parallel time (the algorithm's exposed-wait counter holds it), and the
      // simulator places the all-gathers itself (Note [ZeRO in the simulator]).
      hooks_->await_parameters(a.stage);
    }
    ActionTiming timing{a, step, 0, 0, 0, 0, 0};
    // Note [Measured activation memory]
    const bool measure_heap = options_.record_timings && a.kind == ActionKind::kForward;
    const std::int64_t heap_before = measure_heap ? heap_bytes_in_use() : 0;
    // Note [Compute CPU time]: compute actions on CPU devices.
    const bool measure_cpu = options_.record_timings && options_.device.is_cpu() &&
                             (sched::is_compute(a.kind) || a.kind == ActionKind::kOptimizerStep);
    timing.start_ns = options_.record_timings ? now_ns() : 0;
    cpu_start_ns_ = measure_cpu ? thread_cpu_ns() : 0;
    exec_action(a, step, x_mbs, y_mbs, &timing);
    if (options_.record_timings) {
      timing.end_ns = now_ns();
      if (measure_cpu) timing.cpu_ns = std::max<std::int64_t>(0, thread_cpu_ns() - cpu_start_ns_);
      if (measure_heap) timing.bytes = heap_bytes_in_use() - heap_before;
      timings_.push_back(timing);
    }
    if (a.kind == ActionKind::kFullBackward || a.kind == ActionKind::kBackwardWeight) {
      hooks_->await_gradients(a.stage);  // Note [Gradient waits] (dp/dp_hooks.hpp)
    }
    if (a.kind == ActionKind::kOptimizerStep && is_last_optimizer_step(a)) {
      // Note [Data-parallel sync] (report/run_report.hpp): after the OPTIM, timed on its own.
      SyncTiming sync{step, options_.record_timings ? now_ns() : 0, 0};
      with_context("rank " + std::to_string(options_.world_rank) + ": data-parallel sync (step " +
                       std::to_string(step) + ")",
                   [&] { hooks_->after_optimizer_step(step); });
      if (options_.record_timings) {
        sync.end_ns = now_ns();
        sync_timings_.push_back(sync);
      }
    }
  }
  await_receives(nullptr, step);  // none is left unless a RECV has no consumer on this rank
  wait_pending(step);
  for (const auto& [key, st] : states_) {
    PW_CHECK(st->weight_grads_done || !st->forward_done || plan_.shape.forward_only,
             InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": stage " << key.first << " microbatch "
                     << key.second << " ran forward but never backward");
  }
  states_.clear();
  StepResult r;
  r.has_loss = loss_count_ > 0;
  r.loss = loss_count_ > 0 ? loss_sum_ / plan_.shape.microbatches : 0.0;
  r.nonfinite = nonfinite_;
  if (r.has_loss && !std::isfinite(r.loss)) r.nonfinite.loss_stage = loss_stage_;
  r.nonfinite.loss = r.loss;
  r.optimizer = phase_;
  return r;
}

void Interpreter::exec_action(const Action& a, std::int64_t step,
                              const std::vector<torch::Tensor>& x_mbs,
                              const std::vector<torch::Tensor>& y_mbs, ActionTiming* timing) {
  std::ostringstream where;
  where << "rank " << options_.world_rank << ": " << sched::to_string(a) << " (stage " << a.stage;
  if (a.microbatch >= 0) where << " microbatch " << a.microbatch;
  where << " step " << step << ")";
  with_context(where.str(), [&] {
    switch (a.kind) {
      case ActionKind::kForward:
        do_forward(a, step, x_mbs, y_mbs);
        break;
      case ActionKind::kFullBackward:
        if (step == options_.split_backward_step && a.microbatch % 2 == 0 &&
            options_.record_timings && timing != nullptr) {
          // Note [Measured split backward]: I, recorded here, then W in the caller's timing.
          do_backward(a, step, true, false);
          ActionTiming input{a, step, timing->start_ns, now_ns(), 0, 0, 0};
          input.action.kind = ActionKind::kBackwardInput;
          if (cpu_start_ns_ > 0) {  // Note [Compute CPU time]
            const std::int64_t cpu = thread_cpu_ns();
            input.cpu_ns = std::max<std::int64_t>(0, cpu - cpu_start_ns_);
            cpu_start_ns_ = cpu;
          }
          timings_.push_back(input);
          timing->action.kind = ActionKind::kBackwardWeight;
          timing->start_ns = now_ns();
          do_backward(a, step, false, true);
        } else {
          do_backward(a, step, true, true);
        }
        break;
      case ActionKind::kBackwardInput:
        do_backward(a, step, true, false);
        break;
      case ActionKind::kBackwardWeight:
        do_backward(a, step, false, true);
        break;
      case ActionKind::kSendF:
      case ActionKind::kSendB:
        do_send(a, step, timing);
        break;
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:
        do_recv(a, step, timing);
        break;
      case ActionKind::kOverlapFB:
        // OVERLAP_F_B marker: its two sub-actions follow and run in order, which is what torch's
        // runtime does without a custom overlap function (sched/action.hpp).
        break;
      case ActionKind::kReduceGrad:
        hooks_->reduce_grad(a.stage);
        break;
      case ActionKind::kOptimizerStep:
        do_optimizer_step(a, step);
        break;
      // Note [UNSHARD and RESHARD] (sched/action.hpp): ZeRO-3 gathers / frees the stage's
      // parameters (zero/zero3.hpp); below zero stage 3 the parameters are whole: no-ops.
      case ActionKind::kUnshard:
        hooks_->unshard(a.stage);
        break;
      case ActionKind::kReshard:
        hooks_->reshard(a.stage);
        break;
    }
  });
}

void Interpreter::do_optimizer_step(const Action& a, std::int64_t step) {
  // before_optimizer_steps runs once per step, inside the rank's first OPTIM, and the recipe's
  // collective right after it (Note [Global gradient norm] in recipe.hpp); after_optimizer_step
  // runs after the last OPTIM, outside its timing (run_step, Note [Data-parallel sync]).
  const auto optim = [](const Action& b) { return b.kind == ActionKind::kOptimizerStep; };
  if (&*std::find_if(actions_.begin(), actions_.end(), optim) == &a) {
    hooks_->before_optimizer_steps(step);
    if (options_.recipe != nullptr) {
      std::vector<torch::optim::Optimizer*> optimizers;
      for (auto& st : stages_) optimizers.push_back(st.optimizer.get());
      phase_ = options_.recipe->before_optimizer(step, optimizers);
    }
  }
  auto& st = local(a.stage);
  if (st.optimizer) {
    if (!phase_.skipped) {  // Note [Loss scaling]: an fp16 overflow skips every stage's step
      const double norm = checked_optimizer_step(*st.optimizer, options_.nan_policy);
      if (!std::isfinite(norm) && nonfinite_.grad_stage < 0) nonfinite_ = {-1, 0, a.stage, norm};
    }
    if (!hooks_->clear_gradients(a.stage)) st.optimizer->zero_grad();
  }
}

// The rank's last OPTIM of a step, after which the data-parallel algorithm synchronises
// (DataParallelHooks::after_optimizer_step; run_step calls it outside the OPTIM's timing).
bool Interpreter::is_last_optimizer_step(const Action& a) const {
  const auto optim = [](const Action& b) { return b.kind == ActionKind::kOptimizerStep; };
  const auto it = std::find_if(actions_.rbegin(), actions_.rend(), optim);
  return it != actions_.rend() && &*it == &a;
}

// Note [Pre-posted receives]: Gloo's transport is a rendezvous: a send's data leaves only once
// the receiver's matching receive has been posted and its "ready" message has been handled by
// the sender's I/O thread. Posting each receive at its RECV action therefore delays every
// message that arrives early until the receiver gets there, plus a round trip through two I/O
// threads that, with all cores busy computing, wait for a time slice (~4-5 ms measured here).
// Posting the whole step's receives when the step starts lets data flow as soon as it is sent,
// which is also what the simulator assumes. Buffers are allocated from the agreed shapes (a
// gradient has its activation's shape and dtype); the data's consumer then only waits (Note
// [Receives wait at their consumer]).
void Interpreter::prepost_receives(std::int64_t step) {
  posted_.assign(actions_.size(), Posted{});
  for (std::size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    if ((a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB) && is_remote_p2p(a)) {
      posted_[i] = post_receive(a, step);
    }
  }
}

// Note [Receives wait at their consumer]
// Lowered plans place a RECV well before the action that reads its data (1F1B and the
// interleaved schedules post the next microbatch's receive with the current one's send), and
// waiting at the RECV blocked compute that was ready: an Interleaved1F1B rank waited 48 ms at
// `1RECV_B1`, which only `1B1` needs, before running `1B0`, and gained nothing over 1F1B. With
// pre-posted receives the RECV action therefore waits for nothing: it hands its posted receive
// to its consumer, the F (RECV_F) or the B / I (RECV_B) of the same stage and microbatch, which
// waits for it right before it runs, as torch's runtime waits for its batched irecvs only when
// the stage needs the data. The wait is recorded as the RECV action at the time it happens
// (start: when the consumer began to wait, end: when the data was there), so traces, profiles
// and `compare` see each wait where it cost compute time; this is the simulator's default
// (posted) receive model. Without pre-posted receives (NCCL, --no-prepost-receives) a RECV
// still blocks at its action or at the end of its p2p batch.
void Interpreter::await_receives(const Action* consumer, std::int64_t step) {
  if (awaiting_.empty()) return;
  std::vector<Awaiting> due;
  if (consumer == nullptr) {
    for (auto& [key, list] : awaiting_) {
      for (auto& w : list) due.push_back(std::move(w));
    }
    awaiting_.clear();
  } else {
    auto it = awaiting_.find(
        {consumer->stage, consumer->microbatch, consumer->kind != ActionKind::kForward});
    if (it == awaiting_.end()) return;
    due = std::move(it->second);
    awaiting_.erase(it);
  }
  for (auto& w : due) {
    ActionTiming timing{w.action, step, options_.record_timings ? now_ns() : 0, 0, 0, 0, 0};
    with_context("rank " + std::to_string(options_.world_rank) + ": " + sched::to_string(w.action) +
                     " (step " + std::to_string(step) + ")",
                 [&] { w.finish(&timing); });
    if (options_.record_timings) {
      timing.end_ns = now_ns();
      timings_.push_back(timing);
    }
  }
}

bool Interpreter::waits_at_consumer(std::size_t index) const {
  return index < posted_.size() && !posted_[index].works.empty();
}

// Note [p2p batches]
// A rank's consecutive remote SEND/RECV actions are posted between begin_p2p_batch() and
// end_p2p_batch() and the receives are waited for only after it. On a rendezvous transport
// (NCCL: ncclGroupStart/End, unbuffered sends executed in order on one stream) this is what keeps
// 1F1B's SEND_F(i+1) + RECV_B(i) on one rank against SEND_B(i) + RECV_F(i+1) on its neighbour
// from deadlocking, as torch.distributed.pipelining's batch_isend_irecv does. Buffered backends
// (Gloo, MPI, fake) ignore the batch; posting every receive before waiting is harmless there.
void Interpreter::run_p2p_batch(std::size_t first, std::size_t last, std::int64_t step,
                                const std::vector<torch::Tensor>& x_mbs,
                                const std::vector<torch::Tensor>& y_mbs) {
  std::vector<ActionTiming> timings;
  timings.reserve(last - first);
  std::vector<std::function<void()>> finish;
  const std::int64_t start = options_.record_timings ? now_ns() : 0;
  pipe_->begin_p2p_batch();
  deferred_recvs_ = &finish;
  try {
    for (std::size_t i = first; i < last; ++i) {
      if (waits_at_consumer(i)) {  // Note [Receives wait at their consumer]
        exec_action(actions_[i], step, x_mbs, y_mbs, nullptr);
        continue;
      }
      timings.push_back(ActionTiming{actions_[i], step, start, 0, 0, 0, 0});
      exec_action(actions_[i], step, x_mbs, y_mbs, &timings.back());
    }
  } catch (...) {
    deferred_recvs_ = nullptr;
    pipe_->end_p2p_batch();
    throw;
  }
  deferred_recvs_ = nullptr;
  pipe_->end_p2p_batch();
  for (auto& f : finish) {
    with_context("rank " + std::to_string(options_.world_rank) + " step " + std::to_string(step),
                 f);
  }
  if (options_.record_timings) {
    const std::int64_t end = now_ns();
    for (auto& t : timings) {
      t.end_ns = end;
      timings_.push_back(t);
    }
  }
}

std::vector<StageParams> Interpreter::stage_params() const {
  std::vector<StageParams> out;
  for (const auto& st : stages_) {
    out.push_back(StageParams{st.stage, st.body->parameters(), st.body->buffers()});
  }
  return out;
}

}  // namespace pipewright::exec
