// The engine's event-driven streams (Note [Engine]): a rank's SENDs when they share cores (Note
// [Shared cores]) or node links (Note [Shared links]), and its DDP bucket all-reduces when they
// share node links. Each such transfer is an activity of the sharing model, started by an event
// at its start time and ended by the model's end event.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "costs/data_parallel.hpp"
#include "engine/engine.hpp"

namespace pipewright::sim {

using sched::ActionKind;

// Which streams are event-driven: SENDs on shared cores when the profile says a transfer needs a
// core; otherwise, when the cluster has links_per_node = k > 0 and some node link can carry more
// than k flows at once (the flows of every stream that may use it added up; a stream runs one
// transfer at a time), the SENDs and DDP buckets of the ranks whose transfers cross nodes become
// link activities.
void Engine::plan_streams() {
  const auto R = static_cast<std::size_t>(R_);
  send_mode_.assign(R, shared_ && costs_.p2p_uses_core ? SendMode::kCores : SendMode::kAhead);
  dp_linked_.assign(R, 0);
  sync_on_cores_.assign(R, 0);
  sends_.assign(R, {});
  send_state_.assign(R, 0);
  send_start_.assign(R, 0);
  dp_queue_.assign(R, {});
  dp_state_.assign(R, 0);
  dp_start_.assign(R, 0);
  std::vector<std::int32_t> load;  // per link: flows of all streams that may use it
  auto add = [&](const std::vector<LinkUse>& uses) {
    for (const auto& u : uses) {
      const auto l = static_cast<std::size_t>(u.link);
      if (load.size() <= l) load.resize(l + 1, 0);
      load[l] += u.flows;
    }
  };
  std::vector<std::uint8_t> send_crosses(R, 0), dp_crosses(R, 0);
  const bool ddp = dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp;
  for (std::int32_t r = 0; r < R_; ++r) {
    const auto k = static_cast<std::size_t>(r);
    // Note [Collectives on shared cores]: the syncs of ranks whose replicas share their node.
    sync_on_cores_[k] = shared_ && dp_ > 1 && !dp_group(cluster_, r, R_, dp_).spans_nodes;
    if (send_mode_[k] == SendMode::kAhead) {
      std::vector<LinkUse> most;  // per link: the most flows one of the rank's messages puts on it
      // Each (edge, direction) once: its messages all use the same links.
      std::vector<std::uint8_t> seen(2 * prog_.edges.size(), 0);
      for (const Op& op : prog_.ops[k]) {
        if (op.kind != ActionKind::kSendF && op.kind != ActionKind::kSendB) continue;
        auto& once =
            seen[2 * static_cast<std::size_t>(op.edge) + (op.kind == ActionKind::kSendF ? 0 : 1)];
        if (once != 0) continue;
        once = 1;
        for (const auto& u : network_->message_links(op.edge, op.kind == ActionKind::kSendF)) {
          auto it = std::find_if(most.begin(), most.end(),
                                 [&](const LinkUse& m) { return m.link == u.link; });
          if (it == most.end()) {
            most.push_back(u);
          } else {
            it->flows = std::max(it->flows, u.flows);
          }
        }
      }
      send_crosses[k] = most.empty() ? 0 : 1;
      add(most);
    }
    if (ddp) {
      bool buckets = false;
      for (auto s : plan_.shape.stages_of_rank(r))
        buckets = buckets || !network_->bucket_ns(s).empty();
      const auto& uses = network_->collective_links(r);
      if (buckets && !uses.empty()) {
        dp_crosses[k] = 1;
        add(uses);
      }
      // Note [Collectives on shared cores]: on an oversubscribed CPU node, the data-parallel
      // collectives of a rank whose replicas share its node are activities of its
      // data-parallel stream on the node's cores.
      if (buckets && shared_ && !dp_group(cluster_, r, R_, dp_).spans_nodes)
        dp_linked_[k] = kDpOnCores;
    }
  }
  const std::int32_t k = cluster_.links_per_node;
  if (k <= 0 || std::none_of(load.begin(), load.end(), [&](std::int32_t l) { return l > k; }))
    return;
  if (!links_) links_ = make_fair_link_sharing(static_cast<std::int32_t>(load.size()), 2 * R_, k);
  for (std::size_t k = 0; k < R; ++k) {
    if (send_crosses[k] != 0) send_mode_[k] = SendMode::kLinks;
    if (dp_crosses[k] != 0) dp_linked_[k] = kDpOnLinks;
  }
}

// The next queued SEND of rank r takes the send stream when the rank has reached it and the
// previous send is done; it moves the bytes at the speed its node's load (cores) or the links
// it crosses leave it.
void Engine::start_send(std::int32_t r) {
  const auto k = static_cast<std::size_t>(r);
  if (send_state_[k] != 0 || sends_[k].empty()) return;
  auto& st = ranks_[k];
  const PendingSend& ps = sends_[k].front();
  const std::int64_t start = std::max(ps.ready, st.send_free);
  if (start > now_) {
    send_state_[k] = 1;
    queue_.push(start, r, EventKind::kSendStart, 0);
    return;
  }
  send_state_[k] = 2;
  send_start_[k] = now_;
  const Op& op = prog_.ops[k][ps.pos];
  if (send_mode_[k] == SendMode::kLinks) {
    links_->begin(r, message_ns(op, ps.step),
                  network_->message_links(op.edge, op.kind == ActionKind::kSendF), now_, queue_);
  } else {
    cores_->begin(R_ + r, message_ns(op, ps.step), now_, queue_);
  }
}

void Engine::complete_send(std::int32_t r, std::uint32_t version) {
  const auto k = static_cast<std::size_t>(r);
  if (send_mode_[k] == SendMode::kLinks) {
    if (!links_->current(r, version)) return;  // stale
    links_->end(r, now_, queue_);
  } else {
    if (!cores_->current(R_ + r, version)) return;  // stale
    cores_->end(R_ + r, now_, queue_);
  }
  const PendingSend ps = sends_[k].front();
  sends_[k].pop_front();
  send_state_[k] = 0;
  auto& st = ranks_[k];
  auto& rr = result_.per_rank[k];
  const Op& op = prog_.ops[k][ps.pos];
  const std::int64_t start = send_start_[k];
  const auto pred = st.send_free > ps.ready ? st.last_send : ps.pred;
  const auto idx = record(op, r, ps.step, Stream::kSend, start, now_, pred);
  st.send_free = now_;
  st.last_send = idx;
  rr.send_ns += now_ - start;
  auto& step_end = result_.step_end_ns[static_cast<std::size_t>(ps.step)];
  step_end = std::max(step_end, now_);
  if (st.finished) rr.finish_ns = std::max(rr.finish_ns, now_);
  set_slot(slot_base(ps.step) + at(static_cast<std::size_t>(op.out_row), op.mb), now_, idx);
  start_send(r);
}

// Shared links: the buckets of the backward [start, end] of op's stage join rank r's
// data-parallel queue, each ready when its gradients are (as launch_ddp times them).
void Engine::queue_ddp(std::int32_t r, const Op& op, std::int32_t step, std::int64_t start,
                       std::int64_t end, std::int64_t src) {
  const auto k = static_cast<std::size_t>(r);
  const auto& ns = network_->bucket_ns(op.stage);
  const auto& cum = network_->bucket_cumulative_bytes(op.stage);
  for (std::size_t b = 0; b < ns.size(); ++b) {
    dp_queue_[k].push_back(PendingBucket{op.stage, step, static_cast<std::int32_t>(b),
                                         ddp_bucket_ready_ns(cum, b, start, end), src});
    result_.per_rank[k].dp_comm_ns += ns[b];
  }
  start_dp(r);
}

void Engine::start_dp(std::int32_t r) {
  const auto k = static_cast<std::size_t>(r);
  if (dp_state_[k] != 0 || dp_queue_[k].empty()) return;
  const PendingBucket& pb = dp_queue_[k].front();
  const std::int64_t start = std::max(pb.ready, ranks_[k].dp_free);
  if (start > now_) {
    dp_state_[k] = 1;
    queue_.push(start, r, EventKind::kDpStart, 0);
    return;
  }
  dp_state_[k] = 2;
  dp_start_[k] = now_;
  const std::int64_t ns = pb.bucket == kZeroScatter
                              ? zero_scatter_alone_ns_[static_cast<std::size_t>(pb.stage)]
                          : pb.bucket == kZeroGather
                              ? zero_gather_alone_ns_[static_cast<std::size_t>(pb.stage)]
                              : network_->bucket_ns(pb.stage)[static_cast<std::size_t>(pb.bucket)];
  if (dp_linked_[k] == kDpOnCores) {
    cores_->begin(2 * R_ + r, ns, now_, queue_);
  } else {
    links_->begin(R_ + r, ns, network_->collective_links(r), now_, queue_);
    // Note [Compute beside a collective]: until complete_dp (with dedicated cores, for its time
    // alone: the rank's compute may be ahead of the links' clock).
    if (shared_) {
      if (network_->collective_cpu_load(r) > 0)
        cores_->add_load(r, network_->collective_cpu_load(r), now_, queue_);
    } else {
      collective_load(r, now_, now_ + ns);
    }
  }
}

void Engine::complete_dp(std::int32_t r, std::uint32_t version) {
  const auto k = static_cast<std::size_t>(r);
  if (dp_linked_[k] == kDpOnCores) {
    if (!cores_->current(2 * R_ + r, version)) return;  // stale
    cores_->end(2 * R_ + r, now_, queue_);
  } else {
    if (!links_->current(R_ + r, version)) return;  // stale
    links_->end(R_ + r, now_, queue_);
    if (shared_ && network_->collective_cpu_load(r) > 0)
      cores_->add_load(r, -network_->collective_cpu_load(r), now_, queue_);
  }
  const PendingBucket pb = dp_queue_[k].front();
  dp_queue_[k].pop_front();
  dp_state_[k] = 0;
  auto& st = ranks_[k];
  const auto pred = pb.ready >= st.dp_free ? pb.src : st.last_dp;
  const bool scatter = pb.bucket == kZeroScatter;
  const bool gather = pb.bucket == kZeroGather;
  if (record_) {
    const Op cop{ActionKind::kReduceGrad, pb.stage, -1, -1, false, false};
    const auto idx = record(cop, r, pb.step, Stream::kDpAllReduce, dp_start_[k], now_, pred);
    result_.actions[static_cast<std::size_t>(idx)].collective = scatter ? Collective::kReduceScatter
                                                                : gather ? Collective::kAllGather
                                                                         : Collective::kDdpBucket;
    if (!scatter && !gather) result_.actions[static_cast<std::size_t>(idx)].bucket = pb.bucket;
    st.last_dp = idx;
  }
  st.dp_free = now_;
  auto& rr = result_.per_rank[k];
  if (st.finished) rr.finish_ns = std::max(rr.finish_ns, now_);
  if (gather) {
    // Its stage's next compute may run now; the step is not over before it (Note [Between
    // steps]: after the rank's last action the all-gather may still be in flight).
    params_ready_[static_cast<std::size_t>(pb.stage)] = now_;
    params_src_[static_cast<std::size_t>(pb.stage)] = record_ ? st.last_dp : -1;
    auto& step_end = result_.step_end_ns[static_cast<std::size_t>(pb.step)];
    step_end = std::max(step_end, now_);
    if (st.ddp_wait && st.zero_pending == 0 && !st.step_end_wait) {
      st.ddp_wait = false;
      queue_.push(std::max(now_, st.time), r, EventKind::kResume, 0);
    }
    start_dp(r);
    return;
  }
  if (scatter) {
    // ZeRO-2/3: the rank's next action waits for its backward's reduce-scatters (Note [Gradient
    // waits]).
    ddp_done_[static_cast<std::size_t>(pb.step) * S_ + static_cast<std::size_t>(pb.stage)] = now_;
    if (--st.zero_pending == 0) {
      if (now_ > st.time) {
        rr.dp_exposed_ns += now_ - st.time;
        st.time = now_;
        st.last_compute = st.last_dp;
      }
      if (st.ddp_wait) {
        st.ddp_wait = false;
        queue_.push(std::max(now_, st.time), r, EventKind::kResume, 0);
      }
    }
    start_dp(r);
    return;
  }
  if (static_cast<std::size_t>(pb.bucket) + 1 == network_->bucket_ns(pb.stage).size()) {
    ddp_done_[static_cast<std::size_t>(pb.step) * S_ + static_cast<std::size_t>(pb.stage)] = now_;
    if (st.ddp_wait) {
      st.ddp_wait = false;
      queue_.push(std::max(now_, st.time), r, EventKind::kResume, 0);
    }
  }
  start_dp(r);
}

bool Engine::ddp_pending(std::int32_t r, std::int32_t step) const {
  if (dp_linked_[static_cast<std::size_t>(r)] == 0) return false;
  for (std::int32_t s = 0; s < S_; ++s) {
    if (plan_.shape.stage_to_rank[static_cast<std::size_t>(s)] != r ||
        prog_.explicit_reduce[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)] != 0)
      continue;
    if (ddp_done_[static_cast<std::size_t>(step) * S_ + static_cast<std::size_t>(s)] < -1)
      return true;  // kPending
  }
  return false;
}

bool Engine::advance(std::int32_t r, RankState& st) {
  if (st.zero_pending > 0) {  // complete_dp resumes the rank; resume() then moves it on
    st.after_wait = true;
    st.ddp_wait = true;
    return false;
  }
  if (st.pos + 1 == prog_.ops[static_cast<std::size_t>(r)].size() && ddp_pending(r, st.step)) {
    st.step_end_wait = true;
    st.ddp_wait = true;
    return false;
  }
  step_forward(r, st);
  // Note [Collectives on shared cores]: the step's sync runs on the cores; complete_sync
  // resumes the rank.
  return !st.sync_on_core;
}

}  // namespace pipewright::sim
