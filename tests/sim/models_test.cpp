// The simulator's private event core and its replaceable models (sim/src/), through their narrow
// interfaces: the event queue's order, processor sharing's speeds, the default network and
// duration models, and an engine run with a model swapped in.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "costs/duration_model.hpp"
#include "engine/engine.hpp"
#include "network/core_sharing.hpp"
#include "network/event_queue.hpp"
#include "network/network_model.hpp"
#include "plan_fixtures.hpp"

namespace pipewright::sim {
namespace {

using testing::gpipe;
using testing::uniform_costs;

TEST(EventQueue, OrdersByTimeThenInsertion) {
  EventQueue q;
  q.push(5, 0, EventKind::kResume, 0);
  q.push(3, 1, EventKind::kResume, 0);
  q.push(5, 2, EventKind::kActivityDone, 7);
  q.push(3, 3, EventKind::kSendStart, 0);
  std::vector<std::int32_t> ids;
  while (!q.empty()) ids.push_back(q.pop().id);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 3, 0, 2}));
}

// Processor sharing of two ranks (dp 1) on one node of one core.
std::unique_ptr<CoreSharing> two_ranks_on_one_core() {
  Cluster cluster;
  cluster.cores_per_node = 1;
  return make_processor_sharing(cluster, sched::CostTable{}, /*ranks=*/2, /*dp=*/1);
}

TEST(CoreSharing, TwoRanksOnOneCoreRunAtHalfSpeed) {
  auto cores = two_ranks_on_one_core();
  ASSERT_TRUE(cores->active());
  EventQueue q;
  cores->begin(0, 100, 0, q);  // alone: ends at 100
  cores->begin(1, 100, 0, q);  // both at half speed: both end at 200
  std::vector<Event> events;
  while (!q.empty()) events.push_back(q.pop());
  ASSERT_EQ(events.size(), 3U);
  EXPECT_EQ(events[0].time_ns, 100);  // superseded
  EXPECT_FALSE(cores->current(events[0].id, events[0].version));
  EXPECT_EQ(events[1].time_ns, 200);
  EXPECT_EQ(events[2].time_ns, 200);
  EXPECT_TRUE(cores->current(events[1].id, events[1].version));
  cores->end(0, 200, q);  // rank 1 alone again, with no work left: ends now
  const Event last = q.pop();
  EXPECT_EQ(last.id, 1);
  EXPECT_EQ(last.time_ns, 200);
  // Dedicated devices: no sharing.
  Cluster cluster;
  cluster.cores_per_node = 2;
  EXPECT_FALSE(make_processor_sharing(cluster, sched::CostTable{}, 2, 1)->active());
}

// Note [Compute beside a collective]: a collective's load is demand on its rank's node besides
// the activities: 1 rank on 1 core with 0.5 of a core more runs at 1 / 1.5 of its speed.
TEST(CoreSharing, ACollectivesLoadSlowsTheNodesActivities) {
  auto cores = two_ranks_on_one_core();
  ASSERT_TRUE(cores->active());
  EventQueue q;
  cores->begin(0, 300, 0, q);  // alone: would end at 300
  (void)q.pop();
  cores->add_load(1, 0.5, 0, q);  // from 0: 300 of work at 2/3 speed
  Event e = q.pop();
  EXPECT_EQ(e.time_ns, 450);
  EXPECT_TRUE(cores->current(e.id, e.version));
  cores->add_load(1, -0.5, 150, q);  // 100 done by 150; the other 200 at full speed
  e = q.pop();
  EXPECT_EQ(e.time_ns, 350);
  EXPECT_TRUE(cores->current(e.id, e.version));
}

// Note [Compute beside a collective]: the cluster's load applies to a rank's collectives across
// nodes only where the profile was measured on one node.
TEST(NetworkModel, CollectiveLoadOnlyAcrossNodesForAOneNodeProfile) {
  Cluster cluster;
  cluster.nodes = 2;
  cluster.ranks_per_node = 1;
  cluster.send_cpu_load = 0.4;
  SimOptions opt;
  opt.dp.replicas = 2;
  const auto plan = gpipe(1, 1);
  auto costs = uniform_costs(1, 1, 2);
  costs.nodes = 1;
  EXPECT_DOUBLE_EQ(make_analytical_network(plan, costs, cluster, opt)->collective_cpu_load(0), 0.4);
  costs.nodes = 2;  // measured across nodes: its compute holds the load
  EXPECT_EQ(make_analytical_network(plan, costs, cluster, opt)->collective_cpu_load(0), 0.0);
  costs.nodes = 0;  // not known
  EXPECT_EQ(make_analytical_network(plan, costs, cluster, opt)->collective_cpu_load(0), 0.0);
  costs.nodes = 1;
  cluster.ranks_per_node = 2;  // both replicas on one node
  cluster.nodes = 1;
  EXPECT_EQ(make_analytical_network(plan, costs, cluster, opt)->collective_cpu_load(0), 0.0);
}

TEST(NetworkModel, MessageTimeFromTheLink) {
  Cluster cluster;
  cluster.intra_node = Link{0.5, 1.0};  // 0.5 ms + bytes / 1e9 per s
  const auto plan = gpipe(2, 2);
  const auto costs = uniform_costs(2, 1, 2, 0, 0, /*output_bytes=*/1'000'000);
  const auto network = make_analytical_network(plan, costs, cluster, SimOptions{});
  EXPECT_EQ(network->message_ns(0), 500'000 + 1'000'000);
  EXPECT_EQ(network->batch_overhead_ns(), 0);
  EXPECT_TRUE(network->bucket_ns(0).empty());  // dp = 1
}

TEST(DurationModel, TableAndReplay) {
  const auto plan = gpipe(2, 2);
  const auto costs = uniform_costs(2, 1, 2);
  SimOptions options;
  const auto table = make_table_durations(plan, costs, options, false);
  EXPECT_EQ(table->compute_ns(1, ComputeSlot::kForward, 0, 0), 1'000'000);
  EXPECT_EQ(table->compute_ns(1, ComputeSlot::kBackward, 1, 0), 2'000'000);
  EXPECT_EQ(table->compute_ns(1, ComputeSlot::kInputGrad, 1, 0), 1'000'000);  // B / 2
  EXPECT_EQ(table->message_ns(123, 0, true, 0, 0), 123);
  options.replay_durations_ns.assign(2 * kReplaySlots * 2, -1);
  options.replay_durations_ns[replay_index(1, 0, 1, 2)] = 42;
  const auto replay = make_table_durations(plan, costs, options, false);
  EXPECT_EQ(replay->compute_ns(1, ComputeSlot::kForward, 1, 0), 42);
  EXPECT_EQ(replay->compute_ns(1, ComputeSlot::kForward, 0, 0), 1'000'000);  // -1: the table
}

// Another duration model: every compute action takes `ns`, whatever the cost table says.
class ConstantDurations final : public DurationModel {
 public:
  explicit ConstantDurations(std::int64_t ns) : ns_(ns) {}
  std::int64_t compute_ns(std::int32_t, ComputeSlot, std::int32_t,
                          std::int32_t) const noexcept override {
    return ns_;
  }
  std::int64_t message_ns(std::int64_t network_ns, std::int32_t, bool, std::int32_t,
                          std::int32_t) const noexcept override {
    return network_ns;
  }
  std::int64_t send_call_ns(std::int32_t, bool, std::int32_t,
                            std::int32_t) const noexcept override {
    return 0;
  }

 private:
  std::int64_t ns_;
};

TEST(Engine, ADurationModelCanBeSwappedIn) {
  for (std::int32_t p : {2, 3, 4}) {
    for (std::int32_t m : {1, 4}) {
      EngineModels models;
      models.durations = std::make_unique<ConstantDurations>(1'000'000);
      const auto plan = gpipe(p, m);
      const auto costs = uniform_costs(p, 7, 9);  // ignored by the swapped-in model
      const SimResult r = Engine(plan, costs, Cluster{}, SimOptions{}, std::move(models)).run();
      // GPipe: (m + p - 1)(F + B) with F = B = 1 ms.
      EXPECT_EQ(r.makespan_ns, (m + p - 1) * 2'000'000LL) << "p=" << p << " m=" << m;
    }
  }
}

}  // namespace
}  // namespace pipewright::sim
