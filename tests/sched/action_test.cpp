#include <gtest/gtest.h>

#include <unordered_set>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/action.hpp"
#include "pipewright/sched/plan.hpp"

namespace pipewright::sched {
namespace {

TEST(Action, TextFormMatchesTorchGrammar) {
  EXPECT_EQ(to_string(Action::compute(2, ActionKind::kForward, 0)), "2F0");
  EXPECT_EQ(to_string(Action::compute(3, ActionKind::kBackwardInput, 12)), "3I12");
  EXPECT_EQ(to_string(Action::comm(1, ActionKind::kSendF, 3, 2)), "1SEND_F3");
  EXPECT_EQ(to_string(Action::comm(0, ActionKind::kRecvB, 1, 1)), "0RECV_B1");
  EXPECT_EQ(to_string(Action::comm(1, ActionKind::kSendF, 3, 4)), "1SEND_F3@4");
  EXPECT_EQ(to_string(Action::stage_only(2, ActionKind::kReduceGrad)), "2REDUCE_GRAD");
  EXPECT_EQ(to_string(Action::stage_only(2, ActionKind::kOptimizerStep)), "2OPTIM");
  EXPECT_EQ(to_string(Action::stage_only(2, ActionKind::kUnshard)), "2UNSHARD");
  EXPECT_EQ(to_string(Action::stage_only(3, ActionKind::kReshard)), "3RESHARD");
}

// Note [UNSHARD and RESHARD]: stage-level actions, no microbatch, torch's names.
TEST(Action, UnshardAndReshardAreStageLevel) {
  EXPECT_EQ(parse_action("2UNSHARD"), Action::stage_only(2, ActionKind::kUnshard));
  EXPECT_EQ(parse_action(" 0RESHARD"), Action::stage_only(0, ActionKind::kReshard));
  EXPECT_FALSE(has_microbatch(ActionKind::kUnshard));
  EXPECT_FALSE(has_microbatch(ActionKind::kReshard));
  EXPECT_TRUE(is_shard(ActionKind::kUnshard) && is_shard(ActionKind::kReshard));
  EXPECT_FALSE(is_compute(ActionKind::kUnshard) || is_comm(ActionKind::kReshard));
  std::string err;
  EXPECT_FALSE(try_parse_action("2UNSHARD0", &err).has_value());
  EXPECT_NE(err.find("column 9: unexpected trailing characters"), std::string::npos) << err;
  EXPECT_FALSE(try_parse_action("2UNSHARE", &err).has_value());
  EXPECT_NE(err.find("UNSHARD or RESHARD"), std::string::npos) << err;
}

TEST(Action, EveryKindRoundTrips) {
  const char* texts[] = {"0F0",      "1B2",          "2I3",      "2W3",        "1SEND_F3",
                         "2RECV_F3", "2SEND_B4",     "1RECV_B4", "1SEND_F3@4", "4RECV_F3@1",
                         "12F1024",  "2REDUCE_GRAD", "0OPTIM",   "3UNSHARD",   "3RESHARD"};
  for (const char* t : texts) {
    EXPECT_EQ(to_string(parse_action(t)), t) << t;
  }
}

TEST(Action, ParseFillsChainPeers) {
  EXPECT_EQ(parse_action("1SEND_F3").peer_stage, 2);
  EXPECT_EQ(parse_action("1RECV_F3").peer_stage, 0);
  EXPECT_EQ(parse_action("1SEND_B3").peer_stage, 0);
  EXPECT_EQ(parse_action("1RECV_B3").peer_stage, 2);
  EXPECT_EQ(parse_action(" 1F3 "), Action::compute(1, ActionKind::kForward, 3));
}

TEST(Action, BadTextNamesTheColumn) {
  std::string err;
  EXPECT_FALSE(try_parse_action("1X0", &err));
  EXPECT_NE(err.find("column 2"), std::string::npos) << err;
  EXPECT_FALSE(try_parse_action("F0", &err));
  EXPECT_NE(err.find("column 1"), std::string::npos) << err;
  EXPECT_FALSE(try_parse_action("1F", &err));
  EXPECT_FALSE(try_parse_action("1F0x", &err));
  EXPECT_FALSE(try_parse_action("99999999999F0", &err));
  EXPECT_THROW((void)parse_action("1SEND_F3@"), ParseError);
}

TEST(Action, HashAndEqualityAgree) {
  std::unordered_set<Action> set;
  set.insert(parse_action("1F0"));
  set.insert(parse_action("1F0"));
  set.insert(parse_action("1B0"));
  EXPECT_EQ(set.size(), 2U);
}

TEST(PlanShape, ChainEdgesAndLoopingPlacement) {
  PlanShape shape;
  shape.ranks = 2;
  shape.stages = 4;
  shape.stage_to_rank = looping_placement(2, 4);
  EXPECT_EQ(shape.stage_to_rank, (std::vector<std::int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(shape.edges().size(), 3U);
  EXPECT_EQ(shape.producers(2), (std::vector<std::int32_t>{1}));
  EXPECT_EQ(shape.consumers(3), (std::vector<std::int32_t>{}));
  EXPECT_EQ(shape.stages_of_rank(1), (std::vector<std::int32_t>{1, 3}));
}

}  // namespace
}  // namespace pipewright::sched
