// The plan interpreter (see interpreter.hpp, Note [Interpreter actions]).
#include "runtime/interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "dp/dp_algorithm.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/action.hpp"
#include "report/run_report.hpp"
#include "runtime/interpreter_state.hpp"

namespace pipewright::exec {

namespace {

using Clock = std::chrono::steady_clock;
using detail::view_of;  // one torch -> BufferView mapping for every exchange (dp_algorithm.hpp)
using sched::Action;
using sched::ActionKind;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Start-up shape messages: [n, then per tensor: dtype, ndim, dims...], padded to this size.
constexpr std::int64_t kHeaderInts = 64;
// Upper bound on tensors per (producer, consumer) edge; part of the tag layout.
constexpr std::int64_t kMaxTensorsPerEdge = 16;

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << c10::toString(t.scalar_type());
  return os.str();
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

// Tag layout: (((producer * S + consumer) * 3 + direction) * M + microbatch) * K + k, with
// direction 0 = activation, 1 = gradient, 2 = start-up shape message.
std::int64_t Interpreter::tag(int producer, int consumer, bool backward, int mb, int k) const {
  const std::int64_t s = plan_.shape.stages;
  const std::int64_t m = std::max<std::int64_t>(plan_.shape.microbatches, 1);
  const std::int64_t dir = mb < 0 ? 2 : (backward ? 1 : 0);
  return ((((producer * s + consumer) * 3 + dir) * m + std::max(mb, 0)) * kMaxTensorsPerEdge) + k;
}

namespace {

// Input slots of `consumer` fed by `producer`, ascending, with the producer's output slot.
std::vector<std::pair<int, int>> edge_slots(const StageSetup& consumer, int producer) {
  std::vector<std::pair<int, int>> out;  // (consumer input slot, producer output slot)
  for (std::size_t j = 0; j < consumer.inputs.size(); ++j) {
    if (consumer.inputs[j].producer_stage == producer) {
      out.emplace_back(static_cast<int>(j), consumer.inputs[j].producer_output);
    }
  }
  return out;
}

// Output slots of `producer` read by `consumer`, ordered by the consumer's input slot.
std::vector<std::pair<int, int>> edge_outputs(const StageSetup& producer, int consumer) {
  std::vector<std::pair<int, int>> out;  // (consumer input slot, producer output slot)
  for (std::size_t k = 0; k < producer.consumers.size(); ++k) {
    for (const auto& [c, slot] : producer.consumers[k]) {
      if (c == consumer) out.emplace_back(slot, static_cast<int>(k));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> topological_stages(const sched::PlanShape& shape) {
  std::vector<int> indeg(static_cast<std::size_t>(shape.stages), 0);
  const auto edges = shape.edges();
  for (const auto& e : edges) ++indeg[static_cast<std::size_t>(e.to)];
  std::set<int> ready;
  for (int s = 0; s < shape.stages; ++s) {
    if (indeg[static_cast<std::size_t>(s)] == 0) ready.insert(s);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int s = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(s);
    for (const auto& e : edges) {
      if (e.from == s && --indeg[static_cast<std::size_t>(e.to)] == 0) ready.insert(e.to);
    }
  }
  PW_CHECK(static_cast<int>(order.size()) == shape.stages, InvalidPlanError,
           "the plan's stage edges contain a cycle");
  return order;
}

}  // namespace

void Interpreter::agree_shapes(const torch::Tensor& x_example, std::int64_t step_for_messages) {
  torch::NoGradGuard no_grad;
  std::map<int, std::vector<TensorMeta>> out_meta;  // local stage -> output metas
  std::vector<Pending> sends;
  for (int s : topological_stages(plan_.shape)) {
    if (stage_index_.count(s) == 0) continue;
    auto& st = local(s);
    std::vector<torch::Tensor> inputs(st.inputs.size());
    std::set<int> producers;
    for (const auto& in : st.inputs) producers.insert(in.producer_stage);
    for (int p : producers) {
      const auto slots = edge_slots(st, p);
      if (p == -1) {
        for (const auto& [j, k] : slots) inputs[static_cast<std::size_t>(j)] = x_example;
        continue;
      }
      std::vector<TensorMeta> metas;
      if (rank_of(p) == pipe_rank_) {
        const auto& pm = out_meta.at(p);
        for (const auto& [j, k] : slots) metas.push_back(pm.at(static_cast<std::size_t>(k)));
      } else {
        auto header = torch::zeros({kHeaderInts}, torch::kLong);
        OpContext ctx{step_for_messages, s, -1, "shape agreement with stage " + std::to_string(p)};
        pipe_->recv(view_of(header), rank_of(p), tag(p, s, false, -1, 0), ctx)
            ->wait(options_.timeout);
        const auto* h = header.data_ptr<std::int64_t>();
        std::int64_t pos = 1;
        PW_CHECK(h[0] == static_cast<std::int64_t>(slots.size()), ConfigError,
                 "stage " << s << " expects " << slots.size() << " tensor(s) from stage " << p
                          << " but stage " << p << " sends " << h[0]);
        for (std::int64_t i = 0; i < h[0]; ++i) {
          TensorMeta m;
          m.dtype = static_cast<torch::ScalarType>(h[pos++]);
          const auto ndim = h[pos++];
          for (std::int64_t d = 0; d < ndim; ++d) m.shape.push_back(h[pos++]);
          metas.push_back(m);
        }
        edge_meta_[{p, s}] = metas;
      }
      for (std::size_t i = 0; i < slots.size(); ++i) {
        inputs[static_cast<std::size_t>(slots[i].first)] = torch::zeros(
            metas[i].shape, torch::TensorOptions().dtype(metas[i].dtype).device(options_.device));
      }
    }
    std::vector<torch::Tensor> outputs;
    try {
      outputs = st.body->forward(inputs);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::ostringstream os;
      os << "stage " << s << " cannot run on inputs of shape";
      for (const auto& t : inputs) os << " " << shape_text(t);
      os << " (data/model shape mismatch?): " << e.what();
      throw ConfigError(os.str());
    }
    PW_CHECK(
        static_cast<int>(outputs.size()) == st.num_outputs, InternalError,
        "stage " << s << " produced " << outputs.size() << " outputs, expected " << st.num_outputs);
    auto& metas = out_meta[s];
    for (const auto& t : outputs) {
      metas.push_back(TensorMeta{t.scalar_type(), t.sizes().vec()});
    }
    std::set<int> consumers;
    for (const auto& list : st.consumers) {
      for (const auto& [c, slot] : list) consumers.insert(c);
    }
    for (int c : consumers) {
      if (rank_of(c) == pipe_rank_) continue;
      const auto outs = edge_outputs(st, c);
      PW_CHECK(static_cast<std::int64_t>(outs.size()) <= kMaxTensorsPerEdge, ConfigError,
               "stage " << s << " sends " << outs.size() << " tensors to stage " << c
                        << "; at most " << kMaxTensorsPerEdge << " are supported");
      auto header = torch::zeros({kHeaderInts}, torch::kLong);
      auto* h = header.data_ptr<std::int64_t>();
      std::int64_t pos = 0;
      h[pos++] = static_cast<std::int64_t>(outs.size());
      auto& sent = edge_meta_[{s, c}];  // the shapes of the gradients that will come back
      sent.clear();
      for (const auto& [slot, k] : outs) sent.push_back(metas.at(static_cast<std::size_t>(k)));
      for (const auto& [slot, k] : outs) {
        const auto& m = metas.at(static_cast<std::size_t>(k));
        PW_CHECK(pos + 2 + static_cast<std::int64_t>(m.shape.size()) <= kHeaderInts, ConfigError,
                 "stage " << s << ": too many dimensions in the tensors sent to stage " << c);
        h[pos++] = static_cast<std::int64_t>(m.dtype);
        h[pos++] = static_cast<std::int64_t>(m.shape.size());
        for (auto d : m.shape) h[pos++] = d;
      }
      OpContext ctx{step_for_messages, s, -1, "shape agreement with stage " + std::to_string(c)};
      auto work = pipe_->send(view_of(header), rank_of(c), tag(s, c, false, -1, 0), ctx);
      sends.push_back(Pending{work, header, ctx});
    }
  }
  for (auto& p : sends) p.work->wait(options_.timeout);
  shapes_agreed_ = true;
}

const std::vector<TensorMeta>& Interpreter::edge_meta(int producer, int consumer) const {
  auto it = edge_meta_.find({producer, consumer});
  PW_ASSERT(it != edge_meta_.end(),
            "no agreed shapes for stage " << producer << " -> " << consumer);
  return it->second;
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
    ActionTiming timing{a, step, 0, 0, 0};
    // Note [Measured activation memory]
    const bool measure_heap = options_.record_timings && a.kind == ActionKind::kForward;
    const std::int64_t heap_before = measure_heap ? heap_bytes_in_use() : 0;
    timing.start_ns = options_.record_timings ? now_ns() : 0;
    exec_action(a, step, x_mbs, y_mbs, &timing);
    if (options_.record_timings) {
      timing.end_ns = now_ns();
      if (measure_heap) timing.bytes = heap_bytes_in_use() - heap_before;
      timings_.push_back(timing);
    }
  }
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
          ActionTiming input{a, step, timing->start_ns, now_ns(), 0};
          input.action.kind = ActionKind::kBackwardInput;
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
      case ActionKind::kOptimizerStep: {
        // before_optimizer_steps / after_optimizer_step run once per step, before the rank's
        // first OPTIM / after its last.
        const auto optim = [](const Action& b) { return b.kind == ActionKind::kOptimizerStep; };
        if (&*std::find_if(actions_.begin(), actions_.end(), optim) == &a) {
          hooks_->before_optimizer_steps(step);
        }
        auto& st = local(a.stage);
        if (st.optimizer) {
          const double norm = checked_optimizer_step(*st.optimizer, options_.nan_policy);
          if (!std::isfinite(norm) && nonfinite_.grad_stage < 0)
            nonfinite_ = {-1, 0, a.stage, norm};
          if (!hooks_->clear_gradients(a.stage)) st.optimizer->zero_grad();
        }
        if (&*std::find_if(actions_.rbegin(), actions_.rend(), optim) == &a) {
          hooks_->after_optimizer_step(step);
        }
        break;
      }
    }
  });
}

void Interpreter::do_send(const Action& a, std::int64_t step, ActionTiming* timing) {
  const int peer = a.peer_stage;
  if (rank_of(peer) == pipe_rank_) return;  // handed over in memory
  auto& st = local(a.stage);
  auto& ms = state(a.stage, a.microbatch);
  const auto ctx = context(a, step);
  const bool backward = a.kind == ActionKind::kSendB;
  std::vector<torch::Tensor> payload;
  if (!backward) {
    PW_CHECK(ms.forward_done, InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": " << sched::to_string(a)
                     << " before the forward it sends");
    for (const auto& [slot, k] : edge_outputs(st, peer)) {
      payload.push_back(ms.outputs[static_cast<std::size_t>(k)].detach().contiguous());
    }
  } else {
    PW_CHECK(ms.input_grads_done, InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": " << sched::to_string(a)
                     << " before the backward that computes it");
    for (const auto& [j, k] : edge_slots(st, peer)) {
      auto g = ms.input_grads[static_cast<std::size_t>(j)];
      PW_ASSERT(g.defined(), "stage " << a.stage << " has no gradient for input " << j);
      payload.push_back(g.detach().contiguous());
    }
  }
  const int producer = backward ? peer : a.stage;
  const int consumer = backward ? a.stage : peer;
  for (std::size_t i = 0; i < payload.size(); ++i) {
    auto work =
        pipe_->send(view_of(payload[i]), rank_of(peer),
                    tag(producer, consumer, backward, a.microbatch, static_cast<int>(i)), ctx);
    timing->bytes += payload[i].numel() * static_cast<std::int64_t>(payload[i].element_size());
    pending_.push_back(Pending{work, payload[i], ctx});
  }
  // Free what the peer no longer needs from us once the gradient went out.
  if (backward) {
    for (const auto& [j, k] : edge_slots(st, peer)) {
      ms.input_grads[static_cast<std::size_t>(j)] = torch::Tensor();
    }
  }
}

void Interpreter::do_recv(const Action& a, std::int64_t step, ActionTiming* timing) {
  const int peer = a.peer_stage;
  auto& st = local(a.stage);
  auto& ms = state(a.stage, a.microbatch);
  const bool backward = a.kind == ActionKind::kRecvB;
  if (rank_of(peer) == pipe_rank_) return;  // handed over in memory when it was produced
  if (backward) {
    PW_CHECK(ms.forward_done, InvalidPlanError,
             "rank " << pipe_rank_ << " step " << step << ": " << sched::to_string(a)
                     << " before its forward");
  }
  Posted posted;
  const auto index = static_cast<std::size_t>(&a - actions_.data());
  if (&a >= actions_.data() && index < posted_.size() && !posted_[index].works.empty()) {
    posted = std::move(posted_[index]);  // Note [Pre-posted receives]
    posted_[index] = Posted{};
  } else {
    posted = post_receive(a, step);
  }
  std::vector<torch::Tensor> bufs = std::move(posted.bufs);
  std::vector<WorkPtr> works = std::move(posted.works);
  auto finish = [this, &st, &ms, backward, peer, timing, bufs, works] {
    for (const auto& w : works) w->wait(options_.timeout);
    for (const auto& b : bufs) {
      timing->bytes += b.numel() * static_cast<std::int64_t>(b.element_size());
    }
    if (!backward) {
      const auto slots = edge_slots(st, peer);
      for (std::size_t i = 0; i < slots.size(); ++i) {
        auto t = bufs[i];
        if (t.is_floating_point()) t.requires_grad_(true);
        ms.inputs[static_cast<std::size_t>(slots[i].first)] = t;
      }
    } else {
      const auto outs = edge_outputs(st, peer);
      for (std::size_t i = 0; i < outs.size(); ++i) {
        ms.out_grads.emplace_back(outs[i].second, bufs[i]);
      }
    }
  };
  if (deferred_recvs_ != nullptr) {
    deferred_recvs_->push_back(std::move(finish));
  } else {
    finish();
  }
}

// Note [Pre-posted receives]: Gloo's transport is a rendezvous: a send's data leaves only once
// the receiver's matching receive has been posted and its "ready" message has been handled by
// the sender's I/O thread. Posting each receive at its RECV action therefore delays every
// message that arrives early until the receiver gets there, plus a round trip through two I/O
// threads that, with all cores busy computing, wait for a time slice (~4-5 ms measured here).
// Posting the whole step's receives when the step starts lets data flow as soon as it is sent,
// which is also what the simulator assumes. Buffers are allocated from the agreed shapes (a
// gradient has its activation's shape and dtype); each RECV action then only waits.
void Interpreter::prepost_receives(std::int64_t step) {
  posted_.assign(actions_.size(), Posted{});
  for (std::size_t i = 0; i < actions_.size(); ++i) {
    const Action& a = actions_[i];
    if ((a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB) && is_remote_p2p(a)) {
      posted_[i] = post_receive(a, step);
    }
  }
}

// Buffers of the agreed shapes for one remote RECV_F / RECV_B, and their posted receives.
Interpreter::Posted Interpreter::post_receive(const Action& a, std::int64_t step) {
  const bool backward = a.kind == ActionKind::kRecvB;
  const int peer = a.peer_stage;
  const auto ctx = context(a, step);
  const auto opts = torch::TensorOptions().device(options_.device);
  Posted p;
  // Forward: what `peer` sends to this stage; backward: gradients of what this stage sent it
  // (edge_outputs order, like the sender's).
  const auto& metas = backward ? edge_meta(a.stage, peer) : edge_meta(peer, a.stage);
  for (std::size_t k = 0; k < metas.size(); ++k) {
    p.bufs.push_back(torch::empty(metas[k].shape, opts.dtype(metas[k].dtype)));
    const std::int64_t t = backward ? tag(a.stage, peer, true, a.microbatch, static_cast<int>(k))
                                    : tag(peer, a.stage, false, a.microbatch, static_cast<int>(k));
    p.works.push_back(pipe_->recv(view_of(p.bufs.back()), rank_of(peer), t, ctx));
  }
  return p;
}

bool Interpreter::is_remote_p2p(const Action& a) const {
  const bool p2p = a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB ||
                   a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB;
  return p2p && rank_of(a.peer_stage) != pipe_rank_;
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
      timings.push_back(ActionTiming{actions_[i], step, start, 0, 0});
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

void Interpreter::wait_pending(std::int64_t /*step*/) {
  for (auto& p : pending_) p.work->wait(options_.timeout);
  pending_.clear();
}

std::vector<StageParams> Interpreter::stage_params() const {
  std::vector<StageParams> out;
  for (const auto& st : stages_) {
    out.push_back(StageParams{st.stage, st.body->parameters(), st.body->buffers()});
  }
  return out;
}

}  // namespace pipewright::exec
