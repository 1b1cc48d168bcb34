// The interpreter's point-to-point messages (interpreter.hpp): the tag layout, the start-up
// agreement on the shapes each pipeline edge carries, SEND and RECV actions (where a pipeline
// activation or gradient leaves for, and arrives from, another rank), the receive buffers of
// Note [Pre-posted receives] (interpreter.cpp), and the wait for outstanding sends at the end
// of a step. The step loop and the p2p batches that group these actions are in interpreter.cpp.
#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "dp/dp_algorithm.hpp"
#include "interpreter/interpreter.hpp"
#include "interpreter/interpreter_state.hpp"
#include "pipewright/graph/error.hpp"
#include "pipewright/sched/action.hpp"

namespace pipewright::exec {

namespace {

using detail::view_of;  // one torch -> BufferView mapping for every exchange (dp_algorithm.hpp)
using sched::Action;
using sched::ActionKind;

// Start-up shape messages: [n, then per tensor: dtype, ndim, dims...], padded to this size.
constexpr std::int64_t kHeaderInts = 64;
// Upper bound on tensors per (producer, consumer) edge; part of the tag layout.
constexpr std::int64_t kMaxTensorsPerEdge = 16;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string shape_text(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << c10::toString(t.scalar_type());
  return os.str();
}

}  // namespace

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
      outputs = run_body(st, inputs);
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
      sends.push_back(Pending{work, header, ctx, Action{}});
    }
  }
  for (auto& p : sends) p.work->wait(options_.timeout);
  connect_peers();
  shapes_agreed_ = true;
}

// The pipeline peers of this rank and a step's bytes each way, so that the communicator can
// open a faster channel to them (Note [Shared-memory point-to-point] in gloo/shm_p2p.hpp): each
// remote SEND / RECV moves one message per tensor of its edge, of the agreed shapes.
void Interpreter::connect_peers() {
  std::map<int, P2PLink> links;
  for (const auto& a : actions_) {
    if (!is_remote_p2p(a)) continue;
    const bool out = a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB;
    const bool activation = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvF;
    // An activation travels producer -> consumer; its gradient comes back with the same shapes.
    const bool this_produces = out == activation;
    const auto& metas =
        this_produces ? edge_meta(a.stage, a.peer_stage) : edge_meta(a.peer_stage, a.stage);
    std::size_t bytes = 0;
    for (const auto& m : metas) {
      std::int64_t numel = 1;
      for (auto d : m.shape) numel *= d;
      bytes += 128 + static_cast<std::size_t>(numel) * c10::elementSize(m.dtype);
    }
    auto& link = links[rank_of(a.peer_stage)];
    link.peer = rank_of(a.peer_stage);
    (out ? link.send_bytes : link.recv_bytes) += bytes;
  }
  std::vector<P2PLink> list;
  for (const auto& [peer, link] : links) list.push_back(link);
  pipe_->connect_p2p(list);
}

const std::vector<TensorMeta>& Interpreter::edge_meta(int producer, int consumer) const {
  auto it = edge_meta_.find({producer, consumer});
  PW_ASSERT(it != edge_meta_.end(),
            "no agreed shapes for stage " << producer << " -> " << consumer);
  return it->second;
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
    // Note [Send time]: the send call alone, apart from the action's other work.
    const std::int64_t call_start = options_.record_timings ? steady_ns() : 0;
    auto work =
        pipe_->send(view_of(payload[i]), rank_of(peer),
                    tag(producer, consumer, backward, a.microbatch, static_cast<int>(i)), ctx);
    if (options_.record_timings) timing->send_ns += steady_ns() - call_start;
    timing->bytes += payload[i].numel() * static_cast<std::int64_t>(payload[i].element_size());
    pending_.push_back(Pending{work, payload[i], ctx, a});
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
  const bool preposted =
      &a >= actions_.data() && index < posted_.size() && !posted_[index].works.empty();
  if (preposted) {
    posted = std::move(posted_[index]);  // Note [Pre-posted receives]
    posted_[index] = Posted{};
  } else {
    posted = post_receive(a, step);
  }
  std::vector<torch::Tensor> bufs = std::move(posted.bufs);
  std::vector<WorkPtr> works = std::move(posted.works);
  auto finish = [this, &st, &ms, backward, peer, bufs, works](ActionTiming* timing) {
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
  if (preposted) {
    // Note [Receives wait at their consumer] (interpreter.cpp): its F, B or I waits for it.
    awaiting_[{a.stage, a.microbatch, backward}].push_back(Awaiting{a, std::move(finish)});
  } else if (deferred_recvs_ != nullptr) {
    deferred_recvs_->push_back([finish, timing] { finish(timing); });
  } else {
    finish(timing);
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

// Note [Send time]: each wait is added to the drain_ns of the SEND that posted it (recorded by
// now: a step's actions have all run).
void Interpreter::wait_pending(std::int64_t step) {
  for (auto& p : pending_) {
    const std::int64_t start = options_.record_timings ? steady_ns() : 0;
    p.work->wait(options_.timeout);
    const bool send = p.action.kind == ActionKind::kSendF || p.action.kind == ActionKind::kSendB;
    if (!options_.record_timings || !send) continue;
    const std::int64_t waited = steady_ns() - start;
    for (auto it = timings_.rbegin(); it != timings_.rend() && it->step == step; ++it) {
      if (it->action == p.action) {
        it->drain_ns += waited;
        break;
      }
    }
  }
  pending_.clear();
}

}  // namespace pipewright::exec
