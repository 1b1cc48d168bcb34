// torch's compute_comms CSV (plan_io.hpp): what torch's runtime writes reads as the plan, and
// what pipewright writes is what torch's lowering (_add_wait_send, _add_reduce_grad) would.
#include <gtest/gtest.h>

#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/lower.hpp"
#include "pipewright/sched/plan_io.hpp"
#include "pipewright/sched/schedule.hpp"
#include "pipewright/sched/validate.hpp"

namespace pipewright::sched {
namespace {

LoweredPlan lowered(ScheduleKind kind, int p, int m, int v, const LowerOptions& opt) {
  ScheduleSpec spec;
  spec.kind = kind;
  spec.ranks = p;
  spec.microbatches = m;
  spec.stages_per_rank = v;
  return lower(generate(spec), opt);
}

// What torch 2.15's _PipelineScheduleRuntime._dump_csv(format="compute_comms") wrote for
// pipewright's 1F1B p=2 m=2 compute-only CSV (UNSHARD/RESHARD included, "\r\n" line ends).
constexpr const char* kTorchDump =
    "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1,"
    "0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD\r\n"
    "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,"
    "1WAIT_REDUCE_GRAD,1RESHARD,1WAIT_SEND_B0,1WAIT_SEND_B1\r\n";

TEST(TorchComms, TorchsDumpReadsAsALoweredPlan) {
  const AnyPlan any = parse_csv(kTorchDump, "torch.csv");
  ASSERT_TRUE(is_lowered(any));
  const LoweredPlan& plan = std::get<LoweredPlan>(any);
  EXPECT_EQ(plan.shape.ranks, 2);
  EXPECT_EQ(plan.shape.microbatches, 2);
  // The waits are checked and dropped; UNSHARD / RESHARD are plan actions (issue 43), kept.
  ASSERT_EQ(plan.per_rank[0].size(), 11u);
  EXPECT_EQ(plan.per_rank[0].front(), Action::stage_only(0, ActionKind::kUnshard));
  EXPECT_EQ(plan.per_rank[0][9], Action::stage_only(0, ActionKind::kReduceGrad));
  EXPECT_EQ(plan.per_rank[0].back(), Action::stage_only(0, ActionKind::kReshard));
  EXPECT_EQ(plan.per_rank[1].back(), Action::stage_only(1, ActionKind::kReshard));
  EXPECT_TRUE(validate(plan).empty()) << format_diagnostics(validate(plan));
  // Written back: torch's file as it was (the same waits in the same places).
  std::string want = kTorchDump;
  for (std::size_t at = want.find("\r\n"); at != std::string::npos; at = want.find("\r\n"))
    want.erase(at, 1);
  EXPECT_EQ(to_torch_comms_csv(plan), want);
}

TEST(TorchComms, RoundTripsOverSchedules) {
  LowerOptions opt;
  opt.reduce_grad = true;
  int written = 0;
  for (const auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
                          ScheduleKind::kInterleavedZeroBubble, ScheduleKind::kZBVZeroBubble,
                          ScheduleKind::kDualPipeV}) {
    for (const int p : {1, 2, 4}) {
      const int v = required_stages_per_rank(kind) != 0 ? required_stages_per_rank(kind) : 2;
      const bool looped =
          kind == ScheduleKind::kInterleaved1F1B || kind == ScheduleKind::kInterleavedZeroBubble;
      const LoweredPlan plan = lowered(kind, p, 2 * p, looped || v == 2 ? v : 1, opt);
      if (!torch_comms_cannot_carry(plan).empty()) continue;  // e.g. p = 1: no SEND/RECV
      const std::string text = to_torch_comms_csv(plan);
      const AnyPlan back = parse_csv(text, "plan.csv");
      ASSERT_TRUE(is_lowered(back)) << text;
      LoweredPlan want = plan;
      want.shape.schedule = "custom";  // a CSV carries no schedule name
      EXPECT_EQ(std::get<LoweredPlan>(back), want) << to_string(kind) << " p=" << p << "\n" << text;
      EXPECT_EQ(to_torch_comms_csv(std::get<LoweredPlan>(back)), text);
      ++written;
    }
  }
  EXPECT_GE(written, 12);  // p = 2 and 4 of every schedule
}

void expect_parse_error(const std::string& text, const std::string& where,
                        const std::string& what) {
  try {
    (void)parse_csv(text, "t.csv");
    FAIL() << text << ": no error";
  } catch (const ParseError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(where, 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(TorchComms, WaitsWithoutTheirSendAreErrorsAtTheirCell) {
  expect_parse_error("0F0,0WAIT_SEND_F0,0SEND_F0\n1RECV_F0,1F0\n",
                     "t.csv:1:5:", "0WAIT_SEND_F0: no SEND_F of stage 0, microbatch 0 before it");
  expect_parse_error("0F0,0SEND_F0,0WAIT_SEND_B0\n1RECV_F0,1F0\n",
                     "t.csv:1:14:", "no SEND_B of stage 0");
  expect_parse_error("0F0,0SEND_F0\n1RECV_F0,1F0, 1WAIT_REDUCE_GRAD\n",
                     "t.csv:2:15:", "no REDUCE_GRAD of stage 1");
  // A wait retires one send: the second wait of the same send has none.
  expect_parse_error("0F0,0SEND_F0,0WAIT_SEND_F0,0WAIT_SEND_F0\n1RECV_F0,1F0\n",
                     "t.csv:1:28:", "no SEND_F");
  // Not a runtime action either: the action parser's error.
  expect_parse_error("0F0,0WAIT_SEND_X0\n", "t.csv:1:", "0WAIT_SEND_X0");
}

TEST(TorchComms, WriterRefusesWhatTorchCannotLoad) {
  LowerOptions opt;
  opt.reduce_grad = true;
  opt.optimizer_step = true;
  const LoweredPlan with_optim = lowered(ScheduleKind::k1F1B, 2, 2, 1, opt);
  EXPECT_NE(torch_comms_cannot_carry(with_optim).find("no optimizer action"), std::string::npos);
  EXPECT_THROW((void)to_torch_comms_csv(with_optim), ConfigError);
  ScheduleSpec dag;
  dag.kind = ScheduleKind::k1F1B;
  dag.ranks = 4;
  dag.microbatches = 4;
  dag.stage_edges = {{0, 1}, {0, 2}, {1, 3}, {2, 3}};
  const LoweredPlan skip = lower(generate(dag));
  EXPECT_NE(torch_comms_cannot_carry(skip).find("not a chain neighbour"), std::string::npos);
}

}  // namespace
}  // namespace pipewright::sched
