// The engine's data-parallel communication (Note [Engine]): a stage's DDP buckets, launched by
// its last backward (event-driven on shared node links: engine_streams.cpp), and what ends a
// step on a rank: waiting for buckets without a REDUCE_GRAD, the blocking collectives of
// LocalSGD, SlowMo and SGP, and DiLoCo's overlapped fragment all-reduces; ZeRO's reduce-scatters
// and all-gathers (Note [ZeRO in the simulator]).
//
// Note [ZeRO in the simulator] (issue 43; docs/zero-contract semantics, docs/data-parallel.md):
// per plan stage over its d replicas, ring collectives on the data-parallel group's link
// (dp_group), each (d - 1) / d of its bytes plus (d - 1) latencies (reduce_ns), serialized on the
// rank's dp stream with DDP's buckets, exactly where the executor overlaps them:
//   1  REDUCE_GRAD: DDP's buckets, each reduce-scattered instead of all-reduced, launched by the
//      stage's last backward as DDP's (network_model.cpp); after the stage's OPTIM an all-gather
//      of its fp32 parameters P starts, and the stage's first compute of the next step waits for
//      it (overlapping whatever the rank computes before);
//   2  as 1, but every backward completing weight gradients (B or W) reduce-scatters the whole
//      gradient G (in the reduce dtype) when it ends: m reduce-scatters a step, and the rank's
//      next action waits for them (Note [Gradient waits] in exec/src/dp/dp_hooks.hpp: the
//      executor adds the reduced piece into the shard accumulator before it goes on);
//   3  gradients as 2; UNSHARD starts an all-gather of P (when the rank reaches it in its list),
//      the stage's compute waits for the latest; RESHARD frees (memory only); no all-gather
//      after OPTIM.
// Note [Sync work in the simulator]: LocalSGD, SlowMo, SGP and DiLoCo synchronise after the rank's
// last OPTIM, and besides their collectives the executor computes there (flattening, scaling and
// unflattening the parameters, the outer or slow optimizer step). A profile measures that work
// apart from the collectives' waits (CostTable::dp_sync_compute_ms, Note [Data-parallel sync
// work] in exec/src/report/run_profile.cpp; the executor times the sync outside OPTIM, Note
// [Data-parallel sync] in exec/src/report/run_report.hpp), and end_of_step charges it on the
// compute stream in every step whose sync communicates (SGP: every step; LocalSGD / SlowMo:
// averaging and slow steps; DiLoCo: where a fragment's all-reduce starts), before the collective
// (on an oversubscribed CPU node with the replicas in it, work and collective together share
// the cores: Note [Collectives on shared cores] in network/core_sharing.hpp).
//
// Waiting for parameters counts as exposed data-parallel time (RankResult::dp_exposed_ns). The
// bytes (SimResult::dp_wire_bytes_per_stage) come from the plan: data_parallel.hpp. On shared node
// links (Note [Shared links]) ZeRO-1's buckets, ZeRO-2/3's per-backward reduce-scatters and the
// all-gathers (after OPTIM, at UNSHARD) are queued on the links event by event as DDP's buckets
// are (the rank's next action waits for the reduce-scatters: advance / complete_dp; the stage's
// next compute waits for its all-gather: wait_for_parameters / complete_dp, so ZeRO-1/2's
// gathers after OPTIM may still be in flight when the rank's step ends, and the step ends when
// they do); on an oversubscribed CPU node whose cores the group shares they are queued the same
// way as activities on the cores (Note [Collectives on shared cores] in network/core_sharing.hpp);
// elsewhere they take their time alone scaled by the rank's share of the links, as the syncs do
// (Note [Concurrent syncs on shared links]). On bench/fidelity.sh's shaped link the
// scaled reduce-scatters predicted ZeRO-2 +5.5..+16.7% slow (they overlap only in part in a
// pipeline); event by event, -3.9..+4.1% on the same traces. The all-gathers event by event
// (2026-11-29, session 9) changed the 24 shaped ZeRO cells of two matrices' kept traces little
// (mean |error| 2.5 -> 2.8% and 7.5 -> 7.2%): the rest of those cells' error is not the
// gathers' sharing (docs/simulator.md, session 9): it was the calibration's (Note [Sharded
// calibration across nodes] in exec/calibrate.hpp). The reduce-scatters and
// all-gathers of ZeRO-1/2 run on registered buffers and those of ZeRO-3 on private ones, each
// priced on its own link of the cluster's sharded_collective_links when given (Note [Unregistered
// collectives] in network/network_model.cpp; init_zero).
#include <algorithm>
#include <cmath>

#include "costs/data_parallel.hpp"
#include "engine/engine.hpp"

namespace pipewright::sim {

using sched::ActionKind;

void Engine::launch_ddp(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                        std::int64_t start, std::int64_t end, std::int64_t src) {
  const auto s = static_cast<std::size_t>(op.stage);
  if (dp_linked_[static_cast<std::size_t>(r)] != 0) {
    queue_ddp(r, op, step, start, end, src);
    ddp_done_[static_cast<std::size_t>(step) * S_ + s] = kPending;
    return;
  }
  const auto& ns = network_->bucket_ns(op.stage);
  const auto& cum = network_->bucket_cumulative_bytes(op.stage);
  std::int64_t done = end;
  for (std::size_t b = 0; b < ns.size(); ++b) {
    const std::int64_t ready = ddp_bucket_ready_ns(cum, b, start, end);
    const std::int64_t bstart = std::max(ready, st.dp_free);
    const std::int64_t bend = bstart + ns[b];
    const std::int64_t pred = ready >= st.dp_free ? src : st.last_dp;
    st.dp_free = bend;
    done = bend;
    collective_load(r, bstart, bend);  // Note [Compute beside a collective]
    result_.per_rank[static_cast<std::size_t>(r)].dp_comm_ns += ns[b];
    if (record_) {
      Op cop{ActionKind::kReduceGrad, op.stage, -1, -1, false, false};
      const auto idx = record(cop, r, step, Stream::kDpAllReduce, bstart, bend, pred);
      result_.actions[static_cast<std::size_t>(idx)].collective = Collective::kDdpBucket;
      result_.actions[static_cast<std::size_t>(idx)].bucket = static_cast<std::int32_t>(b);
      st.last_dp = idx;
    }
  }
  ddp_done_[static_cast<std::size_t>(step) * S_ + s] = done;
}

void Engine::init_zero() {
  const auto S = static_cast<std::size_t>(S_);
  zero_gather_ns_.assign(S, 0);
  zero_scatter_ns_.assign(S, 0);
  zero_scatter_alone_ns_.assign(S, 0);
  zero_gather_alone_ns_.assign(S, 0);
  params_ready_.assign(S, 0);
  params_src_.assign(S, -1);
  if (zero_ == 0) return;
  const bool per_model_stage = costs_.stages.size() != S;
  for (std::int32_t s = 0; s < S_; ++s) {
    const auto& c =
        costs_.stages[static_cast<std::size_t>(per_model_stage ? plan_.shape.model_stage(s) : s)];
    const DpGroup group =
        dp_group(cluster_, plan_.shape.stage_to_rank[static_cast<std::size_t>(s)], R_, dp_);
    // Note [ZeRO in the simulator]: each collective on its own calibrated link.
    const Link& gather = zero_link(cluster_, group, ShardedCollective::kAllGather, zero_);
    const Link& scatter = zero_link(cluster_, group, ShardedCollective::kReduceScatter, zero_);
    // Where the rank's collectives are not event-driven, every pipeline rank's all-gathers
    // (after its OPTIM, or at UNSHARD) and per-backward reduce-scatters are scaled as the syncs
    // are (Note [Concurrent syncs on shared links]); where they are (dp_linked_), the unscaled
    // times move on the links.
    const double share =
        network_->sync_link_share(plan_.shape.stage_to_rank[static_cast<std::size_t>(s)]);
    auto shared = [share](std::int64_t ns) {
      return static_cast<std::int64_t>(std::llround(static_cast<double>(ns) * share));
    };
    zero_gather_alone_ns_[static_cast<std::size_t>(s)] = reduce_ns(gather, dp_, c.param_bytes);
    zero_gather_ns_[static_cast<std::size_t>(s)] =
        shared(zero_gather_alone_ns_[static_cast<std::size_t>(s)]);
    zero_scatter_alone_ns_[static_cast<std::size_t>(s)] =
        reduce_ns(scatter, dp_, gradient_wire_bytes(c.param_bytes, opt_.dp));
    zero_scatter_ns_[static_cast<std::size_t>(s)] =
        shared(zero_scatter_alone_ns_[static_cast<std::size_t>(s)]);
  }
}

std::int64_t Engine::zero_collective(std::int32_t r, RankState& st, std::int32_t stage,
                                     std::int32_t step, Collective kind, std::int64_t ready,
                                     std::int64_t ns, std::int64_t src) {
  const std::int64_t start = std::max(ready, st.dp_free);
  const std::int64_t end = start + ns;
  const std::int64_t pred = ready >= st.dp_free ? src : st.last_dp;
  st.dp_free = end;
  collective_load(r, start, end);  // Note [Compute beside a collective]
  result_.per_rank[static_cast<std::size_t>(r)].dp_comm_ns += ns;
  if (record_) {
    Op cop{ActionKind::kReduceGrad, stage, -1, -1, false, false};
    const auto idx = record(cop, r, step, Stream::kDpAllReduce, start, end, pred);
    result_.actions[static_cast<std::size_t>(idx)].collective = kind;
    st.last_dp = idx;
  }
  return end;
}

bool Engine::queue_zero_gather(std::int32_t r, std::int32_t stage, std::int32_t step,
                               std::int64_t ready, std::int64_t src) {
  const auto k = static_cast<std::size_t>(r);
  if (dp_linked_[k] == 0) return false;
  // Shared links: the all-gather joins the rank's data-parallel queue and moves at the speed the
  // node's links leave it, event by event (as the reduce-scatters and DDP's buckets); the
  // stage's next compute waits for it (wait_for_parameters, complete_dp).
  dp_queue_[k].push_back(PendingBucket{stage, step, kZeroGather, ready, src});
  result_.per_rank[k].dp_comm_ns += zero_gather_alone_ns_[static_cast<std::size_t>(stage)];
  params_ready_[static_cast<std::size_t>(stage)] = kParamsPending;
  params_src_[static_cast<std::size_t>(stage)] = -1;
  start_dp(r);
  return true;
}

bool Engine::wait_for_parameters(std::int32_t r, const Op& op, std::int64_t& start,
                                 std::int64_t& pred) {
  const auto s = static_cast<std::size_t>(op.stage);
  if (params_ready_[s] == kParamsPending) {  // its all-gather is still on the links
    ranks_[static_cast<std::size_t>(r)].ddp_wait = true;
    return false;
  }
  if (params_ready_[s] <= start) return true;
  result_.per_rank[static_cast<std::size_t>(r)].dp_exposed_ns += params_ready_[s] - start;
  start = params_ready_[s];
  pred = params_src_[s];
  return true;
}

void Engine::zero_after_compute(std::int32_t r, RankState& st, const Op& op, std::int32_t step,
                                std::int64_t end, std::int64_t src) {
  const auto s = static_cast<std::size_t>(op.stage);
  if (zero_ >= 2 && sched::completes_weight_grad(op.kind) &&
      dp_linked_[static_cast<std::size_t>(r)] != 0) {
    // Shared links: the reduce-scatter joins the rank's data-parallel queue and moves at the
    // speed the node's links leave it, event by event (as DDP's buckets); the rank's next
    // action waits for it (advance / complete_dp).
    const auto k = static_cast<std::size_t>(r);
    dp_queue_[k].push_back(PendingBucket{op.stage, step, kZeroScatter, end, src});
    result_.per_rank[k].dp_comm_ns += zero_scatter_alone_ns_[s];
    ddp_done_[static_cast<std::size_t>(step) * S_ + s] = kPending;
    ++st.zero_pending;
    start_dp(r);
  } else if (zero_ >= 2 && sched::completes_weight_grad(op.kind)) {
    const std::int64_t done = zero_collective(r, st, op.stage, step, Collective::kReduceScatter,
                                              end, zero_scatter_ns_[s], src);
    ddp_done_[static_cast<std::size_t>(step) * S_ + s] = done;
    // Note [Gradient waits]: the rank's next action waits for this backward's reduce-scatters.
    if (done > st.time) {
      result_.per_rank[static_cast<std::size_t>(r)].dp_exposed_ns += done - st.time;
      st.time = done;
      st.last_compute = st.last_dp;
    }
  }
  if (zero_ <= 2 && op.kind == ActionKind::kOptimizerStep &&
      !queue_zero_gather(r, op.stage, step, end, src)) {
    params_ready_[s] = zero_collective(r, st, op.stage, step, Collective::kAllGather, end,
                                       zero_gather_ns_[s], src);
    params_src_[s] = st.last_dp;
  }
}

void Engine::shard_action(std::int32_t r, RankState& st, const Op& op, std::int32_t step) {
  const auto s = static_cast<std::size_t>(op.stage);
  memory_change(r, st, op, st.time, st.time);
  if (op.kind != ActionKind::kUnshard) return;
  if (queue_zero_gather(r, op.stage, step, st.time, st.last_compute)) return;
  params_ready_[s] = zero_collective(r, st, op.stage, step, Collective::kAllGather, st.time,
                                     zero_gather_ns_[s], st.last_compute);
  params_src_[s] = st.last_dp;
}

void Engine::end_of_step(std::int32_t r, RankState& st, std::int32_t step) {
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  if (dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDdp) {
    // Stages whose plan has no REDUCE_GRAD: the step ends when their buckets are reduced.
    for (std::int32_t s = 0; s < S_; ++s) {
      if (plan_.shape.stage_to_rank[static_cast<std::size_t>(s)] != r ||
          prog_.explicit_reduce[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)] != 0)
        continue;
      const std::int64_t done = ddp_done_[static_cast<std::size_t>(step) * S_ + s];
      if (done > st.time) {
        rr.dp_exposed_ns += done - st.time;
        st.time = done;
        st.last_compute = st.last_dp;
      }
    }
  }
  if (dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDiLoCo && diloco_end_of_step(r, st, step))
    return;  // its sync runs on the cores; complete_sync finishes the step
  if (dp_ > 1 &&
      (opt_.dp.algorithm == DpAlgorithm::kLocalSgd || opt_.dp.algorithm == DpAlgorithm::kSlowMo ||
       opt_.dp.algorithm == DpAlgorithm::kSgp)) {
    const bool sgp =
        opt_.dp.algorithm == DpAlgorithm::kSgp ||
        (opt_.dp.algorithm == DpAlgorithm::kSlowMo && opt_.dp.slowmo_base == DpAlgorithm::kSgp);
    const std::int64_t n = opt_.first_step + step + 1;  // training steps done after this one
    const bool slowmo =
        opt_.dp.algorithm == DpAlgorithm::kSlowMo && n % opt_.dp.slowmo_frequency == 0;
    // The (memory-efficient) slow step's reduce + broadcast replaces that step's average, as in
    // the executor (exec/src/dp/slowmo.cpp) and the bytes (data_parallel.cpp).
    const bool average = !sgp && !slowmo && n % opt_.dp.localsgd_frequency == 0;
    auto blocking = [&](std::int64_t ns, Collective kind) {
      if (ns <= 0) return;
      const std::int64_t start = std::max(st.time, st.dp_free);
      const std::int64_t end = start + ns;
      collective_load(r, start, end);  // Note [Compute beside a collective]
      rr.dp_comm_ns += ns;
      rr.dp_exposed_ns += end - st.time;
      if (record_) {
        Op cop{ActionKind::kReduceGrad, -1, -1, -1, false, false};
        const auto idx = record(cop, r, step, Stream::kDpAllReduce, start, end, st.last_compute);
        result_.actions[static_cast<std::size_t>(idx)].collective = kind;
        st.last_dp = idx;
        st.last_compute = idx;
      }
      st.time = end;
      st.dp_free = end;
    };
    // (A rank whose clock is ahead of the event clock, e.g. after a receive's arrival, syncs
    // at full speed as before.)
    if ((sgp || average || slowmo) && sync_on_cores_[static_cast<std::size_t>(r)] != 0 &&
        st.time <= now_ && !prog_.ops[static_cast<std::size_t>(r)].empty()) {
      // Note [Collectives on shared cores]: the sync's work and its collectives, alone, are
      // the rank's compute-stream activity (SlowMo over SGP: the gossip and the slow step); the
      // rank waits for it (advance), then finish_step.
      const std::int64_t ns = (sgp ? network_->sgp_ns(r) : 0) +
                              (average ? network_->localsgd_ns(r) : 0) +
                              (slowmo ? network_->slowmo_ns(r) : 0);
      begin_sync_on_core(r, st, step,
                         slowmo    ? Collective::kSlowMo
                         : average ? Collective::kLocalSgd
                                   : Collective::kSgp,
                         ns);
      return;
    }
    // Note [Sync work in the simulator]: the sync's own work, before its collective.
    if (sgp || average || slowmo) st.time += dp_sync_compute_ns_;
    if (sgp) blocking(network_->sgp_ns(r), Collective::kSgp);
    if (average) blocking(network_->localsgd_ns(r), Collective::kLocalSgd);
    if (slowmo) blocking(network_->slowmo_ns(r), Collective::kSlowMo);
  }
  finish_step(st, step);
}

void Engine::begin_sync_on_core(std::int32_t r, RankState& st, std::int32_t step, Collective kind,
                                std::int64_t ns) {
  st.sync_on_core = true;
  st.core_step = step;
  st.core_start = now_;
  st.core_src = st.last_compute;
  st.core_kind = kind;
  st.core_comm = ns;
  result_.per_rank[static_cast<std::size_t>(r)].dp_comm_ns += ns;
  cores_->begin(r, dp_sync_compute_ns_ + ns, now_, queue_);
}

void Engine::complete_sync(std::int32_t r, RankState& st) {
  cores_->end(r, now_, queue_);
  st.sync_on_core = false;
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  // The collective's share of the activity is exposed (its work is compute, as elsewhere).
  const double comm = static_cast<double>(st.core_comm);
  rr.dp_exposed_ns += static_cast<std::int64_t>(
      std::llround(static_cast<double>(now_ - st.core_start) * comm /
                   std::max(1.0, comm + static_cast<double>(dp_sync_compute_ns_))));
  if (record_) {
    Op cop{ActionKind::kReduceGrad, -1, -1, -1, false, false};
    const auto idx =
        record(cop, r, st.core_step, Stream::kDpAllReduce, st.core_start, now_, st.core_src);
    result_.actions[static_cast<std::size_t>(idx)].collective = st.core_kind;
    st.last_dp = idx;
    st.last_compute = idx;
  }
  st.time = now_;
  st.dp_free = std::max(st.dp_free, now_);
  finish_step(st, st.core_step);
  queue_.push(st.time, r, EventKind::kResume, 0);
}

void Engine::finish_step(RankState& st, std::int32_t step) {
  // Note [Between steps]: after its last action the rank spends the profile's step overhead (the
  // executor's loss all-reduce, the step's barrier, and its bookkeeping: Note [Step overhead] in
  // exec/src/report/run_profile.cpp) before its next step. Data-parallel communication still in
  // flight (ZeRO-1/2's all-gathers after OPTIM, queued sends) runs on meanwhile: the step ends
  // at the later of the two. On a 100 Mbit/s link the measured overhead of a ZeRO-1 run holds
  // those all-gathers' drain (60-70 ms, bench/fidelity.sh), so a profile measured there and
  // simulated on a faster link over-predicts; a profile from a fast link predicts the slow one.
  // The sim's step used to end at the last action: ~0.2-0.7 ms short per step at dp 1 and ~1 ms
  // at dp 2 on this host's loopback runs, 3-8 ms with DDP on the shaped link.
  st.time += step_overhead_ns_;
  // The step is over on this rank when compute, sends and collectives are all done (an
  // outer all-reduce still in flight belongs to a later step).
  const std::int64_t dp_end =
      opt_.dp.algorithm == DpAlgorithm::kDiLoCo ? std::min(st.dp_free, st.time) : st.dp_free;
  const std::int64_t finish = std::max({st.time, st.send_free, dp_end});
  auto& end = result_.step_end_ns[static_cast<std::size_t>(step)];
  end = std::max(end, finish);
}

bool Engine::diloco_end_of_step(std::int32_t r, RankState& st, std::int32_t step) {
  // Note [DiLoCo step] (exec/src/dp/diloco.hpp): a fragment's all-reduce starts after step n with
  // (n + 1 + tau) % P == 0 on the dp stream, overlapping the compute of the next tau steps, and
  // the step with (n + 1) % P == 0 waits for it (tau = 0: it is fully exposed).
  const auto& d = opt_.dp;
  const std::int64_t period = std::max(1, d.sync_every / std::max(d.fragments, 1));
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  const std::int64_t n = opt_.first_step + step + 1;  // training steps done after this one
  if (d.sync_delay == 0 && n % period == 0 && sync_on_cores_[static_cast<std::size_t>(r)] != 0 &&
      st.time <= now_ && st.dp_free <= now_ && !prog_.ops[static_cast<std::size_t>(r)].empty()) {
    // Note [Collectives on shared cores]: tau = 0, the rank waits for the all-reduce at once:
    // the sync's work and the all-reduce are its compute-stream activity, as LocalSGD's.
    begin_sync_on_core(r, st, step, Collective::kDiLoCo, network_->diloco_ns(r));
    return true;
  }
  if ((n + d.sync_delay) % period == 0) {
    st.time += dp_sync_compute_ns_;  // Note [Sync work in the simulator]
    const std::int64_t ns = network_->diloco_ns(r);
    const std::int64_t start = std::max(st.time, st.dp_free);
    const std::int64_t end = start + ns;
    collective_load(r, start, end);  // Note [Compute beside a collective]
    rr.dp_comm_ns += ns;
    if (record_ && ns > 0) {
      Op cop{ActionKind::kReduceGrad, -1, -1, -1, false, false};
      const auto idx = record(cop, r, step, Stream::kDpAllReduce, start, end, st.last_compute);
      result_.actions[static_cast<std::size_t>(idx)].collective = Collective::kDiLoCo;
      st.last_dp = idx;
    }
    st.dp_free = end;
  }
  if (n % period == 0 && st.dp_free > st.time) {
    rr.dp_exposed_ns += st.dp_free - st.time;
    st.time = st.dp_free;
    st.last_compute = st.last_dp;
  }
  return false;
}

}  // namespace pipewright::sim
