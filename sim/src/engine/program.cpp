#include "engine/program.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_dag.hpp"

namespace pipewright::sim {

using sched::Action;
using sched::ActionKind;

void check_inputs(const sched::LoweredPlan& plan, const sched::CostTable& costs,
                  const Cluster& cluster, const SimOptions& options) {
  const auto& shape = plan.shape;
  PW_CHECK(shape.ranks >= 1 && shape.stages >= 1 && shape.microbatches >= 1, InvalidPlanError,
           "plan: ranks, stages and microbatches must be >= 1 (got "
               << shape.ranks << ", " << shape.stages << ", " << shape.microbatches << ")");
  PW_CHECK(plan.per_rank.size() == static_cast<std::size_t>(shape.ranks), InvalidPlanError,
           "plan: has action lists for " << plan.per_rank.size()
                                         << " ranks but ranks = " << shape.ranks);
  PW_CHECK(shape.stage_to_rank.size() == static_cast<std::size_t>(shape.stages), InvalidPlanError,
           "plan: stage_to_rank has " << shape.stage_to_rank.size() << " entries for "
                                      << shape.stages << " stages");
  for (std::int32_t s = 0; s < shape.stages; ++s) {
    const auto r = shape.stage_to_rank[static_cast<std::size_t>(s)];
    PW_CHECK(r >= 0 && r < shape.ranks, InvalidPlanError,
             "plan: stage " << s << " is placed on unknown rank " << r);
  }
  PW_CHECK(costs.stages.size() == static_cast<std::size_t>(shape.stages), ConfigError,
           "costs (" << costs.source << "): /stages has " << costs.stages.size()
                     << " entries but the plan has " << shape.stages << " stages");
  sched::validate(costs, "costs (" + costs.source + ")");
  const auto& dp = options.dp;
  PW_CHECK(dp.replicas >= 1, ConfigError, "--dp must be >= 1, got " << dp.replicas);
  PW_CHECK(options.steps >= 1 && options.steps <= 100000, ConfigError,
           "--steps must be in [1, 100000], got " << options.steps);
  PW_CHECK(dp.localsgd_frequency >= 1, ConfigError,
           "--localsgd-frequency must be >= 1, got " << dp.localsgd_frequency);
  PW_CHECK(dp.slowmo_frequency >= 1, ConfigError,
           "--slowmo-frequency must be >= 1, got " << dp.slowmo_frequency);
  PW_CHECK(dp.sync_every >= 1 && dp.fragments >= 1 && dp.sync_every % dp.fragments == 0 &&
               dp.sync_delay >= 0 && dp.sync_delay < dp.sync_every / dp.fragments,
           ConfigError,
           "DiLoCo: --fragments " << dp.fragments << " must divide --sync-every " << dp.sync_every
                                  << " and --fragment-sync-delay " << dp.sync_delay
                                  << " be below their quotient");
  PW_CHECK(options.micro_batch_size >= 0, ConfigError,
           "--micro-batch-size must be >= 0, got " << options.micro_batch_size);
  if (!options.replay_durations_ns.empty()) {
    const auto want = static_cast<std::size_t>(shape.stages) * kReplaySlots *
                      static_cast<std::size_t>(shape.microbatches);
    PW_CHECK(options.replay_durations_ns.size() == want, ConfigError,
             "replay durations: " << options.replay_durations_ns.size() << " entries for a plan of "
                                  << shape.stages << " stages x " << shape.microbatches
                                  << " microbatches (want " << want << ")");
  }
  if (options.p2p_override_ms) {
    PW_CHECK(std::isfinite(*options.p2p_override_ms) && *options.p2p_override_ms >= 0, ConfigError,
             "--p2p-ms must be a finite number >= 0, got " << *options.p2p_override_ms);
  }
  cluster.check_fits(shape.ranks * dp.replicas, "cluster '" + cluster.name + "'");
}

Program decode(const sched::LoweredPlan& plan) {
  Program p;
  const auto& shape = plan.shape;
  const std::int32_t R = shape.ranks, S = shape.stages, M = shape.microbatches;
  p.edges = shape.edges();
  const auto& edges = p.edges;
  const auto E = static_cast<std::int32_t>(edges.size());
  p.in_edges.assign(static_cast<std::size_t>(S), {});
  p.out_edges.assign(static_cast<std::size_t>(S), {});
  for (std::int32_t e = 0; e < E; ++e) {
    const auto& ed = edges[static_cast<std::size_t>(e)];
    PW_CHECK(ed.from >= 0 && ed.from < S && ed.to >= 0 && ed.to < S && ed.from != ed.to,
             InvalidPlanError,
             "plan: stage edge " << ed.from << " -> " << ed.to << " is out of range");
    p.out_edges[static_cast<std::size_t>(ed.from)].push_back(e);
    p.in_edges[static_cast<std::size_t>(ed.to)].push_back(e);
  }
  auto find_edge = [&p](std::int32_t from, std::int32_t to) {
    for (auto e : p.out_edges[static_cast<std::size_t>(from)]) {
      if (p.edges[static_cast<std::size_t>(e)].to == to) return e;
    }
    return -1;
  };

  p.ops.assign(static_cast<std::size_t>(R), {});
  p.explicit_reduce.assign(static_cast<std::size_t>(R), std::vector<std::int32_t>(S, 0));
  for (std::int32_t r = 0; r < R; ++r) {
    const auto& list = plan.per_rank[static_cast<std::size_t>(r)];
    auto& ops = p.ops[static_cast<std::size_t>(r)];
    ops.reserve(list.size());
    std::vector<std::int64_t> last_grad(static_cast<std::size_t>(S), -1);
    bool prev_comm = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      auto where = [&] {
        std::ostringstream os;
        os << "plan: rank " << r << ", position " << i << ", action " << sched::to_string(a);
        return os.str();
      };
      PW_CHECK(
          a.stage >= 0 && a.stage < S, InvalidPlanError,
          where() << ": stage " << a.stage << " does not exist (the plan has " << S << " stages)");
      PW_CHECK(shape.stage_to_rank[static_cast<std::size_t>(a.stage)] == r, InvalidPlanError,
               where() << ": stage " << a.stage << " lives on rank "
                       << shape.stage_to_rank[static_cast<std::size_t>(a.stage)]);
      // An OVERLAP_F_B marker stays an op (positions are the plan's) that takes no time: its
      // sub-actions follow and run back to back on the rank's compute stream, as torch's runtime
      // runs them (docs/simulator.md, "OVERLAP_F_B").
      if (sched::has_microbatch(a.kind)) {
        PW_CHECK(a.microbatch >= 0 && a.microbatch < M, InvalidPlanError,
                 where() << ": microbatch " << a.microbatch << " is out of range [0, " << M << ")");
      }
      Op op{a.kind, a.stage, a.microbatch, -1, false, false};
      if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB ||
          a.kind == ActionKind::kRecvF || a.kind == ActionKind::kRecvB) {
        const bool to_consumer = a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB;
        op.edge = to_consumer ? find_edge(a.stage, a.peer_stage) : find_edge(a.peer_stage, a.stage);
        PW_CHECK(op.edge >= 0, InvalidPlanError,
                 where() << ": stage " << a.peer_stage << " is not a "
                         << (to_consumer ? "consumer" : "producer") << " of stage " << a.stage);
        const auto peer_rank = shape.stage_to_rank[static_cast<std::size_t>(a.peer_stage)];
        PW_CHECK(peer_rank != r, InvalidPlanError,
                 where() << ": stage " << a.peer_stage
                         << " is on the same rank; local data needs no send/recv");
      }
      if (sched::completes_weight_grad(a.kind)) {
        last_grad[static_cast<std::size_t>(a.stage)] = static_cast<std::int64_t>(i);
      }
      if (a.kind == ActionKind::kReduceGrad) {
        p.explicit_reduce[static_cast<std::size_t>(r)][static_cast<std::size_t>(a.stage)] = 1;
      }
      const bool comm = sched::is_comm(a.kind);
      op.batch_head = comm && !prev_comm;
      prev_comm = comm;
      ops.push_back(op);
    }
    for (std::int32_t s = 0; s < S; ++s) {
      if (last_grad[static_cast<std::size_t>(s)] >= 0)
        ops[static_cast<std::size_t>(last_grad[static_cast<std::size_t>(s)])].ddp_launch = true;
    }
  }
  return p;
}

}  // namespace pipewright::sim
