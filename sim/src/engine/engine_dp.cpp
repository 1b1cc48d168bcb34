// The engine's data-parallel communication (Note [Engine]): a stage's DDP buckets, launched by
// its last backward (event-driven on shared node links: engine_streams.cpp), and what ends a
// step on a rank: waiting for buckets without a REDUCE_GRAD, the blocking collectives of
// LocalSGD, SlowMo and SGP, and DiLoCo's overlapped fragment all-reduces.
#include <algorithm>

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
  if (dp_ > 1 && opt_.dp.algorithm == DpAlgorithm::kDiLoCo) diloco_end_of_step(r, st, step);
  if (dp_ > 1 &&
      (opt_.dp.algorithm == DpAlgorithm::kLocalSgd || opt_.dp.algorithm == DpAlgorithm::kSlowMo ||
       opt_.dp.algorithm == DpAlgorithm::kSgp)) {
    const bool sgp =
        opt_.dp.algorithm == DpAlgorithm::kSgp ||
        (opt_.dp.algorithm == DpAlgorithm::kSlowMo && opt_.dp.slowmo_base == DpAlgorithm::kSgp);
    const bool average = !sgp && (step + 1) % opt_.dp.localsgd_frequency == 0;
    const bool slowmo =
        opt_.dp.algorithm == DpAlgorithm::kSlowMo && (step + 1) % opt_.dp.slowmo_frequency == 0;
    auto blocking = [&](std::int64_t ns, Collective kind) {
      if (ns <= 0) return;
      const std::int64_t start = std::max(st.time, st.dp_free);
      const std::int64_t end = start + ns;
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
    if (sgp) blocking(network_->sgp_ns(r), Collective::kSgp);
    if (average) blocking(network_->localsgd_ns(r), Collective::kLocalSgd);
    if (slowmo) blocking(network_->slowmo_ns(r), Collective::kSlowMo);
  }
  // The step is over on this rank when compute, sends and collectives are all done (an
  // outer all-reduce still in flight belongs to a later step).
  const std::int64_t dp_end =
      opt_.dp.algorithm == DpAlgorithm::kDiLoCo ? std::min(st.dp_free, st.time) : st.dp_free;
  const std::int64_t finish = std::max({st.time, st.send_free, dp_end});
  auto& end = result_.step_end_ns[static_cast<std::size_t>(step)];
  end = std::max(end, finish);
}

void Engine::diloco_end_of_step(std::int32_t r, RankState& st, std::int32_t step) {
  // Note [DiLoCo step] (exec/src/dp/diloco.hpp): a fragment's all-reduce starts after step n with
  // (n + 1 + tau) % P == 0 on the dp stream, overlapping the compute of the next tau steps, and
  // the step with (n + 1) % P == 0 waits for it (tau = 0: it is fully exposed).
  const auto& d = opt_.dp;
  const std::int64_t period = std::max(1, d.sync_every / std::max(d.fragments, 1));
  auto& rr = result_.per_rank[static_cast<std::size_t>(r)];
  if ((step + 1 + d.sync_delay) % period == 0) {
    const std::int64_t ns = network_->diloco_ns(r);
    const std::int64_t start = std::max(st.time, st.dp_free);
    const std::int64_t end = start + ns;
    rr.dp_comm_ns += ns;
    if (record_ && ns > 0) {
      Op cop{ActionKind::kReduceGrad, -1, -1, -1, false, false};
      const auto idx = record(cop, r, step, Stream::kDpAllReduce, start, end, st.last_compute);
      result_.actions[static_cast<std::size_t>(idx)].collective = Collective::kDiLoCo;
      st.last_dp = idx;
    }
    st.dp_free = end;
  }
  if ((step + 1) % period == 0 && st.dp_free > st.time) {
    rr.dp_exposed_ns += st.dp_free - st.time;
    st.time = st.dp_free;
    st.last_compute = st.last_dp;
  }
}

}  // namespace pipewright::sim
