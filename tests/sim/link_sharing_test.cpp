// Shared node links (Note [Shared links]) and posted p2p batches (Note [Posted batches]): the
// fair-sharing model through its interface, the footprints of messages and all-reduces, and
// exact simulated times of contended and uncontended transfers.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <vector>

#include "network/event_queue.hpp"
#include "network/link_sharing.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sim/simulator.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

using sched::Action;
using sched::ActionKind;
constexpr std::int64_t kMs = 1'000'000;

// Pops events until activity `a`'s current end event; returns its time.
std::int64_t end_of(LinkSharing& links, EventQueue& q, std::int32_t a) {
  while (!q.empty()) {
    const Event ev = q.pop();
    if (ev.kind == EventKind::kLinkDone && ev.id == a && links.current(a, ev.version)) {
      links.end(a, ev.time_ns, q);
      return ev.time_ns;
    }
  }
  return -1;
}

TEST(LinkSharing, TwoFlowsOnOneLinkTakeTwiceAsLong) {
  const std::vector<LinkUse> egress0{{0, 1}, {3, 1}};  // node 0 -> node 1
  {
    auto links = make_fair_link_sharing(4, 2);
    EventQueue q;
    links->begin(0, 1000, egress0, 0, q);
    EXPECT_EQ(end_of(*links, q, 0), 1000);  // alone
  }
  auto links = make_fair_link_sharing(4, 2);
  EventQueue q;
  links->begin(0, 1000, egress0, 0, q);
  links->begin(1, 1000, egress0, 0, q);
  EXPECT_EQ(end_of(*links, q, 0), 2000);
  EXPECT_EQ(end_of(*links, q, 1), 2000);
}

TEST(LinkSharing, LaterFlowSharesThenSpeedsUp) {
  // Activity 0 alone for 400 ns (400 done), then both at half speed: 0 ends at 400 + 2 * 600 =
  // 1600, when 1 has 400 left at full speed: 2000 (the link was busy 2000 ns for 2000 ns of work).
  auto links = make_fair_link_sharing(4, 2);
  EventQueue q;
  const std::vector<LinkUse> uses{{0, 1}, {3, 1}};
  links->begin(0, 1000, uses, 0, q);
  links->begin(1, 1000, uses, 400, q);  // its end event at 1000 is superseded
  EXPECT_EQ(end_of(*links, q, 0), 1600);
  EXPECT_EQ(end_of(*links, q, 1), 2000);
}

TEST(LinkSharing, TwoLinksPerNodeCarryTwoFlowsAtFullSpeed) {
  const std::vector<LinkUse> uses{{0, 1}, {3, 1}};
  auto links = make_fair_link_sharing(4, 3, /*capacity=*/2);
  EventQueue q;
  links->begin(0, 1000, uses, 0, q);
  links->begin(1, 1000, uses, 0, q);
  EXPECT_EQ(end_of(*links, q, 0), 1000);
  EXPECT_EQ(end_of(*links, q, 1), 1000);
  // Three flows on two links: each at 2/3.
  for (std::int32_t a = 0; a < 3; ++a) links->begin(a, 1000, uses, 2000, q);
  for (std::int32_t a = 0; a < 3; ++a) EXPECT_EQ(end_of(*links, q, a), 3500);
}

TEST(LinkSharing, OppositeDirectionsAndOtherNodesDoNotContend) {
  auto links = make_fair_link_sharing(6, 3);
  EventQueue q;
  links->begin(0, 1000, {{0, 1}, {3, 1}}, 0, q);  // node 0 -> 1
  links->begin(1, 1000, {{2, 1}, {1, 1}}, 0, q);  // node 1 -> 0 (full duplex)
  links->begin(2, 1000, {}, 0, q);                // inside a node
  EXPECT_EQ(end_of(*links, q, 0), 1000);
  EXPECT_EQ(end_of(*links, q, 1), 1000);
  EXPECT_EQ(end_of(*links, q, 2), 1000);
}

Cluster two_nodes_of_two(Placement placement) {
  Cluster c;
  c.nodes = 2;
  c.ranks_per_node = 2;
  c.placement = placement;
  c.links_per_node = 1;           // one NIC per node
  c.intra_node = Link{0.0, 1.0};  // 1 byte per ns
  c.inter_node = Link{0.0, 1.0};
  return c;
}

TEST(LinkSharing, Footprints) {
  // Pipeline-major, pp=2 x dp=2: g = 2r + j; both replicas of rank 0 on node 0, of rank 1 on 1.
  const Cluster pm = two_nodes_of_two(Placement::kPipelineMajor);
  EXPECT_EQ(message_footprint(pm, 0, 1, 2, 2), (std::vector<LinkUse>{{0, 2}, {3, 2}}));
  EXPECT_EQ(message_footprint(pm, 1, 0, 2, 2), (std::vector<LinkUse>{{1, 2}, {2, 2}}));
  EXPECT_TRUE(collective_footprint(pm, 0, 2, 2).empty());
  // Replica-major: g = 2j + r; pipelines inside nodes, each rank's replicas across them.
  const Cluster rm = two_nodes_of_two(Placement::kReplicaMajor);
  EXPECT_TRUE(message_footprint(rm, 0, 1, 2, 2).empty());
  EXPECT_EQ(collective_footprint(rm, 1, 2, 2),
            (std::vector<LinkUse>{{0, 1}, {1, 1}, {2, 1}, {3, 1}}));
  EXPECT_TRUE(collective_footprint(rm, 1, 2, 1).empty());
}

TEST(SharedLinks, TwoReplicasSendingAcrossOneLinkTakeTwiceAsLong) {
  // GPipe pp=2 m=1, F 1 ms, B 2 ms, 1000 B messages at 1 B/ns, no parameters (no all-reduce):
  // F0 [0, 1], message, F1, B1, message, B0: 6 ms + 2 messages.
  const auto plan = testing::gpipe(2, 1);
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 0, 1000);
  SimOptions opt;
  opt.dp.replicas = 2;
  // Replica-major: each replica's messages stay in its node: 1000 ns each.
  EXPECT_EQ(simulate(plan, costs, two_nodes_of_two(Placement::kReplicaMajor), opt).makespan_ns,
            6 * kMs + 2000);
  // Pipeline-major: both replicas' copies cross node 0's link together: 2000 ns each.
  EXPECT_EQ(simulate(plan, costs, two_nodes_of_two(Placement::kPipelineMajor), opt).makespan_ns,
            6 * kMs + 4000);
  // Without links_per_node every transfer has its own link: 1000 ns.
  Cluster own = two_nodes_of_two(Placement::kPipelineMajor);
  own.links_per_node = 0;
  EXPECT_EQ(simulate(plan, costs, own, opt).makespan_ns, 6 * kMs + 2000);
  // Two links per node: both copies at full speed.
  own.links_per_node = 2;
  EXPECT_EQ(simulate(plan, costs, own, opt).makespan_ns, 6 * kMs + 2000);
  // One replica on the same cluster: one flow, 1000 ns.
  opt.dp.replicas = 1;
  Cluster one = two_nodes_of_two(Placement::kPipelineMajor);
  one.ranks_per_node = 1;
  EXPECT_EQ(simulate(plan, costs, one, opt).makespan_ns, 6 * kMs + 2000);
}

TEST(SharedLinks, ConcurrentAllReducesOfTwoStagesShareTheNodeLink) {
  // Replica-major 2 nodes x 2: stage 0's and stage 1's replicas talk across the same node links.
  // GPipe pp=2 m=1 (F 1 ms, B 2 ms, 1000 B messages inside nodes: 1000 ns): B1 ends at 4.001 ms,
  // B0 at 6.002 ms. Each stage all-reduces one 10 MB bucket: ring n=2, 10 ms alone.
  auto costs = testing::uniform_costs(2, 1, 2, 0, 10'000'000, 1000);
  SimOptions opt;
  opt.dp.replicas = 2;
  const auto plan = testing::gpipe(2, 1);
  const auto r = simulate(plan, costs, two_nodes_of_two(Placement::kReplicaMajor), opt);
  // Stage 1 alone from 4.001 to 6.002 ms (2.001 ms done), then both at half speed: stage 1 ends
  // at 6.002 + 2 * 7.999 = 22.000 ms; stage 0 then has 2.001 ms left alone: 24.001 ms.
  std::vector<std::pair<std::int64_t, std::int64_t>> ar(2, {-1, -1});
  for (const auto& a : r.actions) {
    if (a.collective == Collective::kDdpBucket)
      ar[static_cast<std::size_t>(a.action.stage)] = {a.start_ns, a.end_ns};
  }
  EXPECT_EQ(ar[1], std::make_pair(4 * kMs + 1000, 22 * kMs));
  EXPECT_EQ(ar[0], std::make_pair(6 * kMs + 2000, 24 * kMs + 1000));
  EXPECT_EQ(r.makespan_ns, 24 * kMs + 1000);
  EXPECT_EQ(r.per_rank[0].dp_comm_ns, 10 * kMs);  // the all-reduce's own time, uncontended
  // Two steps: step 2 starts when rank 0's step 1 ends (24.001 ms; no REDUCE_GRAD in the plan, so
  // the rank waits for its buckets at the end of the step) and repeats step 1: 48.002 ms.
  SimOptions two = opt;
  two.steps = 2;
  EXPECT_EQ(simulate(plan, costs, two_nodes_of_two(Placement::kReplicaMajor), two).makespan_ns,
            48 * kMs + 2000);
  // Pipeline-major: each stage's replicas share a node (all-reduce 10 ms alone); the messages
  // cross with both replicas' copies (2000 ns each): B0 ends at 6.004 ms, 16.004 ms.
  const auto pm = simulate(plan, costs, two_nodes_of_two(Placement::kPipelineMajor), opt);
  EXPECT_EQ(pm.makespan_ns, 16 * kMs + 4000);
}

TEST(SharedLinks, ExplicitReduceGradWaitsForTheContendedBuckets) {
  auto plan = testing::gpipe(2, 1);
  for (std::int32_t r = 0; r < 2; ++r) {
    plan.per_rank[static_cast<std::size_t>(r)].push_back(
        Action::stage_only(r, ActionKind::kReduceGrad));
    plan.per_rank[static_cast<std::size_t>(r)].push_back(
        Action::stage_only(r, ActionKind::kOptimizerStep));
  }
  auto costs = testing::uniform_costs(2, 1, 2, 0, 10'000'000, 1000);
  SimOptions opt;
  opt.dp.replicas = 2;
  const auto r = simulate(plan, costs, two_nodes_of_two(Placement::kReplicaMajor), opt);
  EXPECT_EQ(r.makespan_ns, 24 * kMs + 1000);
  EXPECT_EQ(r.per_rank[1].finish_ns, 22 * kMs);
  EXPECT_EQ(r.per_rank[0].dp_exposed_ns, 24 * kMs + 1000 - (6 * kMs + 2000));
}

// Note [Concurrent syncs on shared links]: LocalSGD's averages (and SlowMo's, SGP's and
// DiLoCo's syncs) of both pipeline ranks start at the end of the same step and cross the same
// node links (replica-major 2 x 2, one link per node): each takes twice its time alone.
TEST(SharedLinks, ConcurrentSyncCollectivesShareTheNodeLink) {
  const auto plan = testing::gpipe(2, 1);
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 10'000'000, 1000);
  for (const auto algo : {DpAlgorithm::kLocalSgd, DpAlgorithm::kSgp}) {
    SCOPED_TRACE(algo == DpAlgorithm::kSgp ? "sgp" : "localsgd");
    SimOptions opt;
    opt.dp.replicas = 2;
    opt.dp.algorithm = algo;
    opt.dp.localsgd_frequency = 1;
    Cluster own = two_nodes_of_two(Placement::kReplicaMajor);
    own.links_per_node = 0;
    const auto alone = simulate(plan, costs, own, opt);
    const auto shared = simulate(plan, costs, two_nodes_of_two(Placement::kReplicaMajor), opt);
    // 10 MB at 1 B/ns: the all-reduce (ring, n = 2) and SGP's message are 10 ms alone (+ 4 ns
    // for SGP's push-sum weight); B0 ends at 6.002 ms on rank 0, which then syncs.
    const std::int64_t one = algo == DpAlgorithm::kSgp ? 10 * kMs + 4 : 10 * kMs;
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(alone.per_rank[r].dp_comm_ns, one);
      EXPECT_EQ(shared.per_rank[r].dp_comm_ns, 2 * one);
    }
    EXPECT_EQ(alone.makespan_ns, 6 * kMs + 2000 + one);
    EXPECT_EQ(shared.makespan_ns, 6 * kMs + 2000 + 2 * one);
    // Pipeline-major: each stage's replicas share a node, nothing crosses for the sync.
    const auto pm = simulate(plan, costs, two_nodes_of_two(Placement::kPipelineMajor), opt);
    EXPECT_EQ(pm.per_rank[0].dp_comm_ns, one);
  }
}

// Note [SlowMo in the simulator]: SlowMo's slow step across nodes, a reduce-scatter and an
// all-gather on the registered inter-node sharded links, shares the node link like the others.
TEST(SharedLinks, SlowMoSlowStepsShareTheNodeLink) {
  const auto plan = testing::gpipe(2, 1);
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 10'000'000, 1000);
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.dp.algorithm = DpAlgorithm::kSlowMo;
  opt.dp.localsgd_frequency = 100;
  opt.dp.slowmo_frequency = 1;
  Cluster shared = two_nodes_of_two(Placement::kReplicaMajor);
  shared.sharded_links.reduce_scatter.inter_node = Link{0.0, 0.5};
  shared.sharded_links.all_gather.inter_node = Link{0.0, 2.0};
  Cluster own = shared;
  own.links_per_node = 0;
  // 10 MB: reduce-scatter 5 MB / 0.5 B/ns = 10 ms, all-gather 5 MB / 2 B/ns = 2.5 ms alone.
  const std::int64_t one = 12 * kMs + kMs / 2;
  const auto alone = simulate(plan, costs, own, opt);
  const auto both = simulate(plan, costs, shared, opt);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(alone.per_rank[r].dp_comm_ns, one);
    EXPECT_EQ(both.per_rank[r].dp_comm_ns, 2 * one);
  }
  EXPECT_EQ(both.makespan_ns, 6 * kMs + 2000 + 2 * one);
}

// Note [ZeRO in the simulator]: on shared node links ZeRO-2's per-backward reduce-scatters and
// the all-gathers after OPTIM move event by event, as DDP's buckets, so they share the link only
// while both run (5 MB each at 1 B/ns: 5 ms alone). Stage 1's reduce-scatter runs alone over
// [4.001, 9.001] ms and its SEND_B waits for it (Note [Gradient waits]), so stage 0's backward
// starts at 9.002 ms; stage 1's all-gather starts after its OPTIM at 9.001 ms, alone until stage
// 0's reduce-scatter joins at 11.002 ms, then both at half speed: the all-gather ends at 17.0 ms
// (7.999 ms), the reduce-scatter at 19.001 ms, and stage 0's all-gather runs alone after it.
// Priced as if all ran at once (before) every one took 10 ms.
// `plan` with each rank's OPTIM of its stage at the end (stage r on rank r).
sched::LoweredPlan with_optimizer(sched::LoweredPlan plan) {
  for (std::int32_t r = 0; r < plan.shape.ranks; ++r) {
    plan.per_rank[static_cast<std::size_t>(r)].push_back(
        sched::Action::stage_only(r, sched::ActionKind::kOptimizerStep));
  }
  return plan;
}

TEST(SharedLinks, ZeroCollectivesShareTheNodeLinkEventByEvent) {
  const auto plan = with_optimizer(testing::gpipe(2, 1));
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 10'000'000, 1000);
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.dp.zero_stage = 2;
  opt.record_actions = true;
  const auto r = simulate(plan, costs, two_nodes_of_two(Placement::kReplicaMajor), opt);
  std::map<std::int32_t, std::int64_t> end;
  std::vector<std::int64_t> gathers;
  for (const auto& a : r.actions) {
    if (a.collective == Collective::kReduceScatter) end[a.rank] = a.end_ns;
    if (a.collective == Collective::kAllGather) gathers.push_back(a.end_ns - a.start_ns);
  }
  EXPECT_EQ(gathers, (std::vector<std::int64_t>{8 * kMs - 1000, 5 * kMs}));
  ASSERT_EQ(end.size(), 2U);
  EXPECT_EQ(end[1], 9 * kMs + 1000);
  EXPECT_EQ(end[0], 19 * kMs + 1000);
  EXPECT_EQ(r.makespan_ns, 24 * kMs + 1000);  // the step ends with stage 0's all-gather
  for (std::size_t k = 0; k < 2; ++k) EXPECT_GE(r.per_rank[k].dp_comm_ns, 5 * kMs);
}

// Note [ZeRO in the simulator]: an all-gather on shared links is an event; the stage's next
// compute waits for it, across steps (ZeRO-1/2: after OPTIM, for the next step's forward) and at
// UNSHARD (ZeRO-3), and the simulation ends without a deadlock.
TEST(SharedLinks, ComputeWaitsForItsStagesAllGatherOnTheLinks) {
  const auto base = with_optimizer(testing::one_f_one_b(2, 4));
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 10'000'000, 1000);
  for (const std::int32_t zero : {1, 2, 3}) {
    const auto plan = zero == 3 ? sched::place_shards(base, sched::ShardPlacement::kStep) : base;
    SimOptions opt;
    opt.dp.replicas = 2;
    opt.dp.zero_stage = zero;
    opt.steps = 3;
    opt.record_actions = true;
    const auto r = simulate(plan, costs, two_nodes_of_two(Placement::kReplicaMajor), opt);
    std::map<std::int32_t, std::int64_t> gathered;  // stage -> end of its last all-gather
    std::vector<const TimedAction*> order;
    for (const auto& a : r.actions) order.push_back(&a);
    std::sort(order.begin(), order.end(),
              [](const TimedAction* a, const TimedAction* b) { return a->start_ns < b->start_ns; });
    int gathers = 0;
    for (const auto* a : order) {
      if (a->collective == Collective::kAllGather) {
        ++gathers;
        gathered[a->action.stage] = a->end_ns;
      } else if (a->stream == Stream::kCompute && sched::is_compute(a->action.kind) &&
                 gathered.count(a->action.stage) != 0) {
        EXPECT_GE(a->start_ns, gathered[a->action.stage])
            << "zero " << zero << " rank " << a->rank << " step " << a->step;
      }
    }
    EXPECT_GE(gathers, zero == 3 ? 6 : 4) << "zero " << zero;
    EXPECT_EQ(r.step_end_ns.size(), 3U);
  }
}

// Note [SGP's gossip link]: SGP's gossip is a point-to-point message, priced on the link between
// the replicas' nodes (calibrate's ping-pong; across nodes the both-ways all-gather's link when
// calibrated), not on the collective link (the all-reduce's fit) that LocalSGD's average uses.
TEST(SharedLinks, SgpGossipIsPricedOnThePointToPointLink) {
  const auto plan = testing::gpipe(2, 1);
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 10'000'000, 1000);
  Cluster c = two_nodes_of_two(Placement::kReplicaMajor);
  c.collective_inter_node = Link{0.0, 0.5};  // the all-reduce's fit: half the message rate
  SimOptions opt;
  opt.dp.replicas = 2;
  opt.dp.localsgd_frequency = 1;
  opt.dp.algorithm = DpAlgorithm::kSgp;
  const auto sgp = simulate(plan, costs, c, opt);
  opt.dp.algorithm = DpAlgorithm::kLocalSgd;
  const auto localsgd = simulate(plan, costs, c, opt);
  for (std::size_t r = 0; r < 2; ++r) {
    // 10 MB + 4 B at 1 B/ns, the node link shared by both pipeline ranks' syncs: twice that.
    EXPECT_EQ(sgp.per_rank[r].dp_comm_ns, 2 * (10 * kMs + 4));
    // LocalSGD's ring all-reduce (n = 2) of 10 MB on the 0.5 B/ns collective link, shared.
    EXPECT_EQ(localsgd.per_rank[r].dp_comm_ns, 2 * 20 * kMs);
  }
  // Across nodes, a calibrated all_gather_unregistered link (both directions at once, as the
  // gossip runs) prices it instead: 0.8 B/ns.
  c.sharded_links.all_gather_unregistered.inter_node = Link{0.0, 0.8};
  opt.dp.algorithm = DpAlgorithm::kSgp;
  EXPECT_EQ(simulate(plan, costs, c, opt).per_rank[0].dp_comm_ns, 2 * 12'500'005);
  // Pipeline-major: the replicas share a node, so the gossip takes the intra-node link (4 B/ns
  // here), whatever the collective links say.
  Cluster pm = two_nodes_of_two(Placement::kPipelineMajor);
  pm.intra_node = Link{0.0, 4.0};
  pm.collective_intra_node = Link{0.0, 0.5};
  pm.sharded_links.all_gather_unregistered.inter_node = Link{0.0, 0.8};
  EXPECT_EQ(simulate(plan, costs, pm, opt).per_rank[0].dp_comm_ns, (10 * kMs + 4) / 4);
}

TEST(PostedBatches, SendsLeaveWhenTheBatchIsPostedNotAfterItsReceives) {
  // Rank 1 lists RECV_F1 before SEND_B0 in one batch (torch's lowering can); the executor posts
  // both, so the gradient leaves while the activation is still on its way. 5 MB messages at
  // 1 B/ns (5 ms), F 1 ms, B 2 ms, blocking receives:
  //   rank 0: F0 [0,1], SEND_F0 [1,6], F1 [1,2], SEND_F1 [6,11]
  //   rank 1: F0 [6,7], B0 [7,9], batch posted at 9: SEND_B0 [9,14], RECV_F1 until 11,
  //           F1 [11,12], B1 [12,14], SEND_B1 [14,19]
  //   rank 0: B0 [14,16], B1 [19,21]
  sched::LoweredPlan plan = testing::gpipe(2, 2);
  plan.shape.schedule = "custom";
  plan.per_rank[0] = {Action::compute(0, ActionKind::kForward, 0),
                      Action::comm(0, ActionKind::kSendF, 0, 1),
                      Action::compute(0, ActionKind::kForward, 1),
                      Action::comm(0, ActionKind::kSendF, 1, 1),
                      Action::comm(0, ActionKind::kRecvB, 0, 1),
                      Action::compute(0, ActionKind::kFullBackward, 0),
                      Action::comm(0, ActionKind::kRecvB, 1, 1),
                      Action::compute(0, ActionKind::kFullBackward, 1)};
  plan.per_rank[1] = {
      Action::comm(1, ActionKind::kRecvF, 0, 0),        Action::compute(1, ActionKind::kForward, 0),
      Action::compute(1, ActionKind::kFullBackward, 0), Action::comm(1, ActionKind::kRecvF, 1, 0),
      Action::comm(1, ActionKind::kSendB, 0, 0),        Action::compute(1, ActionKind::kForward, 1),
      Action::compute(1, ActionKind::kFullBackward, 1), Action::comm(1, ActionKind::kSendB, 1, 0)};
  const auto costs = testing::uniform_costs(2, 1, 2, 0, 0, 5'000'000);
  Cluster c;
  c.intra_node = Link{0.0, 1.0};
  SimOptions opt;
  opt.blocking_recv = true;
  const auto r = simulate(plan, costs, c, opt);
  EXPECT_EQ(r.makespan_ns, 21 * kMs);
  for (const auto& a : r.actions) {
    if (a.action.kind == ActionKind::kSendB && a.action.microbatch == 0) {
      EXPECT_EQ(a.start_ns, 9 * kMs);
      EXPECT_EQ(a.end_ns, 14 * kMs);
    }
  }
}

}  // namespace
}  // namespace pipewright::sim
