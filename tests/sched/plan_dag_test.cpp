// The dependency rules (PlanRules) and the per-plan DAG (PlanDag): the table in plan_dag.hpp on
// small shapes, dense fact numbering, and DAG invariants over a grid of generated plans.
#include "pipewright/sched/plan_dag.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/schedule.hpp"

namespace pipewright::sched {
namespace {

std::size_t idx(std::int64_t i) { return static_cast<std::size_t>(i); }
Fact fwd(std::int32_t s) { return {FactKind::kForward, s, -1}; }
Fact grad(std::int32_t s) { return {FactKind::kInputGrad, s, -1}; }
Fact msg(FactKind k, std::int32_t from, std::int32_t to) { return {k, from, to}; }

PlanShape chain(std::int32_t ranks, std::int32_t stages, std::int32_t mb) {
  PlanShape sh;
  sh.ranks = ranks;
  sh.stages = stages;
  sh.microbatches = mb;
  sh.stage_to_rank = looping_placement(ranks, stages);
  return sh;
}

TEST(PlanRules, ProducesAndMatching) {
  EXPECT_EQ(*produces(Action::compute(2, ActionKind::kForward, 3)), fwd(2));
  EXPECT_EQ(*produces(Action::compute(2, ActionKind::kFullBackward, 3)), grad(2));
  EXPECT_EQ(*produces(Action::compute(2, ActionKind::kBackwardInput, 3)), grad(2));
  EXPECT_FALSE(produces(Action::compute(2, ActionKind::kBackwardWeight, 3)));
  EXPECT_FALSE(produces(Action::stage_only(2, ActionKind::kOptimizerStep)));
  const Action send_f = Action::comm(0, ActionKind::kSendF, 1, 1);
  const Action recv_f = Action::comm(1, ActionKind::kRecvF, 1, 0);
  const Action send_b = Action::comm(1, ActionKind::kSendB, 1, 0);
  const Action recv_b = Action::comm(0, ActionKind::kRecvB, 1, 1);
  EXPECT_EQ(matching(send_f), recv_f);
  EXPECT_EQ(matching(recv_f), send_f);
  EXPECT_EQ(matching(send_b), recv_b);
  EXPECT_EQ(matching(recv_b), send_b);
  // Message facts name the stage edge 0 -> 1 whatever the direction of the data.
  EXPECT_EQ(*produces(send_f), msg(FactKind::kActivationSent, 0, 1));
  EXPECT_EQ(*produces(recv_f), msg(FactKind::kActivationReceived, 0, 1));
  EXPECT_EQ(*produces(send_b), msg(FactKind::kGradientSent, 0, 1));
  EXPECT_EQ(*produces(recv_b), msg(FactKind::kGradientReceived, 0, 1));
  for (const Action& a : {send_f, recv_f, send_b, recv_b}) {
    EXPECT_EQ(PlanRules::action_of(*produces(a), 1), a) << to_string(a);
  }
}

TEST(PlanRules, ChainLoweredAndComputeLevels) {
  const PlanShape sh = chain(2, 2, 4);
  const PlanRules low(sh, Level::kLowered);
  const PlanRules comp(sh, Level::kCompute);
  using V = std::vector<Fact>;
  EXPECT_EQ(low.needs(Action::compute(0, ActionKind::kForward, 0)), V{});
  EXPECT_EQ(low.needs(Action::compute(1, ActionKind::kForward, 0)),
            V{msg(FactKind::kActivationReceived, 0, 1)});
  EXPECT_EQ(comp.needs(Action::compute(1, ActionKind::kForward, 0)), V{fwd(0)});
  EXPECT_EQ(low.needs(Action::compute(0, ActionKind::kFullBackward, 0)),
            (V{fwd(0), msg(FactKind::kGradientReceived, 0, 1)}));
  EXPECT_EQ(comp.needs(Action::compute(0, ActionKind::kBackwardInput, 0)), (V{fwd(0), grad(1)}));
  EXPECT_EQ(low.needs(Action::compute(1, ActionKind::kBackwardWeight, 0)), V{grad(1)});
  EXPECT_EQ(low.needs(Action::comm(0, ActionKind::kSendF, 0, 1)), V{fwd(0)});
  EXPECT_EQ(low.needs(Action::comm(1, ActionKind::kSendB, 0, 0)), V{grad(1)});
  EXPECT_EQ(low.needs(Action::comm(1, ActionKind::kRecvF, 0, 0)),
            V{msg(FactKind::kActivationSent, 0, 1)});
  EXPECT_EQ(low.needs(Action::comm(0, ActionKind::kRecvB, 0, 1)),
            V{msg(FactKind::kGradientSent, 0, 1)});
  EXPECT_EQ(low.needs(Action::stage_only(0, ActionKind::kReduceGrad)), V{});
  // Nothing can provide a message on no stage edge, or an action on no stage.
  EXPECT_EQ(low.needs(Action::comm(1, ActionKind::kRecvF, 0, 3)), V{});
  EXPECT_EQ(low.needs(Action::compute(7, ActionKind::kForward, 0)), V{});
  EXPECT_EQ(low.message_id(Action::comm(1, ActionKind::kRecvF, 0, 3)), -1);
  EXPECT_EQ(low.message_id(Action::comm(1, ActionKind::kRecvF, 4, 0)), -1);  // microbatch 4
  EXPECT_EQ(low.message_id(Action::comm(0, ActionKind::kSendF, 2, 1)),
            low.message_id(Action::comm(1, ActionKind::kRecvF, 2, 0)));
  EXPECT_EQ(low.sends(Action::compute(0, ActionKind::kForward, 3)),
            std::vector<Action>{Action::comm(0, ActionKind::kSendF, 3, 1)});
  EXPECT_EQ(low.sends(Action::compute(1, ActionKind::kBackwardInput, 3)),
            std::vector<Action>{Action::comm(1, ActionKind::kSendB, 3, 0)});
  EXPECT_TRUE(low.sends(Action::compute(1, ActionKind::kForward, 3)).empty());  // last stage
  EXPECT_TRUE(comp.sends(Action::compute(0, ActionKind::kForward, 3)).empty());
  EXPECT_EQ(low.sent_by(Action::compute(0, ActionKind::kForward, 3)),
            std::vector<Fact>{msg(FactKind::kActivationSent, 0, 1)});
  EXPECT_EQ(low.sent_by(Action::compute(1, ActionKind::kFullBackward, 3)),
            std::vector<Fact>{msg(FactKind::kGradientSent, 0, 1)});
  EXPECT_TRUE(low.sent_by(Action::compute(1, ActionKind::kBackwardWeight, 3)).empty());
}

TEST(PlanRules, StagesOnOneRankExchangeInMemory) {
  const PlanShape sh = chain(1, 2, 2);  // both stages on rank 0
  const PlanRules low(sh, Level::kLowered);
  EXPECT_EQ(low.needs(Action::compute(1, ActionKind::kForward, 0)), std::vector<Fact>{fwd(0)});
  EXPECT_EQ(low.needs(Action::compute(0, ActionKind::kFullBackward, 0)),
            (std::vector<Fact>{fwd(0), grad(1)}));
  EXPECT_TRUE(low.sends(Action::compute(0, ActionKind::kForward, 0)).empty());
}

TEST(PlanRules, StageDagInEdgeOrder) {
  PlanShape sh = chain(4, 4, 1);
  sh.stage_edges = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  const PlanRules low(sh, Level::kLowered);
  EXPECT_EQ(low.needs(Action::compute(3, ActionKind::kForward, 0)),
            (std::vector<Fact>{msg(FactKind::kActivationReceived, 1, 3),
                               msg(FactKind::kActivationReceived, 2, 3)}));
  EXPECT_EQ(low.needs(Action::compute(0, ActionKind::kFullBackward, 0)),
            (std::vector<Fact>{fwd(0), msg(FactKind::kGradientReceived, 0, 1),
                               msg(FactKind::kGradientReceived, 0, 2)}));
  EXPECT_EQ(low.sends(Action::compute(0, ActionKind::kForward, 0)),
            (std::vector<Action>{Action::comm(0, ActionKind::kSendF, 0, 1),
                                 Action::comm(0, ActionKind::kSendF, 0, 2)}));
  EXPECT_EQ(low.edge_index(2, 3), 3);
  EXPECT_EQ(low.edge_index(3, 2), -1);
}

TEST(PlanRules, RowsAreDenseAndDistinct) {
  PlanShape sh = chain(2, 4, 3);
  sh.stage_edges = {{0, 1}, {1, 2}, {0, 3}, {2, 3}};
  const PlanRules rules(sh, Level::kLowered);
  ASSERT_EQ(rules.rows(), 2 * 4 + 4 * 4);
  std::set<std::int64_t> seen;
  for (std::int32_t s = 0; s < 4; ++s) {
    seen.insert(rules.row(fwd(s)));
    seen.insert(rules.row(grad(s)));
  }
  for (const auto& e : rules.edges()) {
    for (FactKind k : {FactKind::kActivationSent, FactKind::kActivationReceived,
                       FactKind::kGradientSent, FactKind::kGradientReceived}) {
      seen.insert(rules.row(msg(k, e.from, e.to)));
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(rules.rows()));
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), rules.rows() - 1);
  EXPECT_EQ(rules.row(fwd(4)), -1);
  EXPECT_EQ(rules.row(msg(FactKind::kActivationSent, 1, 3)), -1);  // no edge 1 -> 3
  EXPECT_EQ(rules.id(fwd(1), 2), rules.row(fwd(1)) * 3 + 2);
  EXPECT_EQ(rules.id(fwd(1), 3), -1);
}

// Over generated and lowered plans: every action's needs are produced somewhere, every SEND and
// RECV match each other, and a need is produced by an action that produces exactly that fact.
TEST(PlanDag, GeneratedPlansAreClosed) {
  for (ScheduleKind kind : all_schedule_kinds()) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {4, 8}) {
        const bool looped = kind != ScheduleKind::kGPipe && kind != ScheduleKind::k1F1B;
        ComputePlan compute;
        try {
          compute = generate({kind, p, m, looped ? 2 : 1, {}});
        } catch (const ConfigError&) {
          continue;  // a shape torch rejects
        }
        const LoweredPlan lowered = lower(compute, {false, true, true, {}});
        const std::string name =
            std::string(to_string(kind)) + " p=" + std::to_string(p) + " m=" + std::to_string(m);
        for (int level = 0; level < 2; ++level) {
          const auto& per_rank = level == 0 ? compute.per_rank : lowered.per_rank;
          const PlanDag dag(compute.shape, per_rank,
                            level == 0 ? Level::kCompute : Level::kLowered);
          for (std::size_t r = 0; r < per_rank.size(); ++r) {
            for (std::size_t i = 0; i < per_rank[r].size(); ++i) {
              const Action& a = per_rank[r][i];
              const Position here{static_cast<std::int32_t>(r), static_cast<std::int32_t>(i)};
              const auto& needs = dag.rules().needs(a);
              const auto deps = dag.deps(here);
              ASSERT_EQ(deps.size(), needs.size()) << name << " " << to_string(a);
              for (std::size_t k = 0; k < deps.size(); ++k) {
                ASSERT_TRUE(deps[k].valid()) << name << ": nothing produces need " << k << " of "
                                             << to_string(a) << " (rank " << r << ")";
                const Action& src = per_rank[idx(deps[k].rank)][idx(deps[k].index)];
                EXPECT_EQ(*produces(src), needs[k]) << name << " " << to_string(a);
                // Data of another stage on the same rank comes earlier in program order.
                if (deps[k].rank == here.rank) {
                  EXPECT_LT(deps[k].index, here.index) << name;
                }
              }
              if (is_comm(a.kind)) {
                const Position other = dag.match(here);
                ASSERT_TRUE(other.valid()) << name << " " << to_string(a);
                EXPECT_EQ(per_rank[idx(other.rank)][idx(other.index)], matching(a)) << name;
                EXPECT_EQ(dag.match(other), here) << name;
              }
            }
          }
        }
      }
    }
  }
}

TEST(PlanDag, MissingProducerIsAnInvalidPosition) {
  const PlanShape sh = chain(2, 2, 1);
  const std::vector<std::vector<Action>> per_rank = {
      {Action::compute(0, ActionKind::kForward, 0)},
      {Action::comm(1, ActionKind::kRecvF, 0, 0), Action::compute(1, ActionKind::kForward, 0)}};
  const PlanDag dag(sh, per_rank, Level::kLowered);
  const auto deps = dag.deps({1, 0});  // the RECV_F: nobody sends
  ASSERT_EQ(deps.size(), 1U);
  EXPECT_FALSE(deps[0].valid());
  EXPECT_FALSE(dag.match({1, 0}).valid());
  EXPECT_EQ(dag.deps({1, 1}), (std::vector<Position>{Position{1, 0}}));  // F waits for its RECV_F
  EXPECT_EQ(dag.producer(fwd(0), 0), (Position{0, 0}));
}

}  // namespace
}  // namespace pipewright::sched

namespace pipewright::sched {
namespace {

TEST(ShardWindows, PairsEachUnshardWithTheNextReshardOfItsStage) {
  const auto a = [](const char* t) { return parse_action(t); };
  const std::vector<Action> ops = {a("0UNSHARD"), a("2UNSHARD"), a("0F0"),      a("0RESHARD"),
                                   a("2F0"),      a("2RESHARD"), a("0RESHARD"), a("0UNSHARD"),
                                   a("0UNSHARD"), a("0B0")};
  const std::vector<ShardWindow> want = {{0, 0, 3}, {2, 1, 5}, {0, 7, -1}};
  EXPECT_EQ(shard_windows(ops), want);
  EXPECT_TRUE(needs_parameters(ActionKind::kBackwardWeight));
  EXPECT_FALSE(needs_parameters(ActionKind::kRecvF));
  EXPECT_FALSE(needs_parameters(ActionKind::kOptimizerStep));
}

}  // namespace
}  // namespace pipewright::sched
