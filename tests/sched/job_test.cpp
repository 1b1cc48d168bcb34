#include "pipewright/sched/job.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "pipewright/graph/error.hpp"
#include "pipewright/sched/plan_io.hpp"

namespace pipewright::sched {
namespace {

std::string config_error(const JobSpec& job) {
  try {
    validate_job(job);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_error(const JobSpec& job, const std::string& text) {
  const std::string got = config_error(job);
  EXPECT_NE(got.find(text), std::string::npos) << got;
}

TEST(Job, ParsesNames) {
  EXPECT_EQ(parse_dp_algorithm("ddp"), DpAlgorithm::kDdp);
  EXPECT_EQ(parse_dp_algorithm("slowmo"), DpAlgorithm::kSlowMo);
  EXPECT_EQ(parse_dp_algorithm("localsgd"), DpAlgorithm::kLocalSgd);
  EXPECT_EQ(parse_dp_algorithm("diloco"), DpAlgorithm::kDiLoCo);
  EXPECT_EQ(parse_dp_algorithm("sgp"), DpAlgorithm::kSgp);
  JobSpec sgp;
  sgp.data_parallel.algorithm = DpAlgorithm::kSgp;
  expect_error(sgp, "SGP needs --dp >= 2");
  sgp.dp = 2;
  EXPECT_EQ(config_error(sgp), "(no error)");
  sgp.data_parallel.slowmo_base = DpAlgorithm::kSgp;
  expect_error(sgp, "--slowmo-base is a SlowMo option");
  sgp.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  EXPECT_EQ(config_error(sgp), "(no error)");
  sgp.dp = 1;
  expect_error(sgp, "SGP needs --dp >= 2");
  EXPECT_THROW((void)parse_dp_algorithm("allreduce"), ConfigError);
  EXPECT_EQ(parse_optimizer("adamw"), Optimizer::kAdamW);
  EXPECT_THROW((void)parse_optimizer("sgd-momentum"), ConfigError);
}

// One set of defaults for run and simulate: fairscale's SlowMo defaults, torch's SGD.
TEST(Job, DefaultsAreOneSet) {
  JobSpec job;
  EXPECT_EQ(job.schedule, ScheduleKind::k1F1B);
  EXPECT_EQ(job.optimizer, Optimizer::kSgd);
  EXPECT_EQ(job.lr, 0.01);
  DataParallelSpec& c = job.data_parallel;
  c.algorithm = DpAlgorithm::kSlowMo;
  EXPECT_EQ(c.localsgd_frequency_or_default(), 3);
  EXPECT_EQ(c.slowmo_frequency_or_default(), 48);
  EXPECT_EQ(c.slowmo_momentum_or_default(), 0.5);
  EXPECT_EQ(c.slowmo_lr_or_default(), 1.0);
  EXPECT_TRUE(c.slowmo_memory_efficient_or_default());
  EXPECT_EQ(c.slowmo_num_shards_or_default(4), 4);
  EXPECT_EQ(c.slowmo_num_shards_or_default(64), 32);
  c.algorithm = DpAlgorithm::kLocalSgd;
  EXPECT_EQ(c.slowmo_momentum_or_default(), 0.0);
  EXPECT_EQ(c.slowmo_lr_or_default(), 1.0);
  job.pp = 2;
  job.dp = 4;
  validate_job(job);
}

TEST(Job, BadInputNamesTheFlag) {
  JobSpec ddp;
  ddp.dp = 2;
  ddp.data_parallel.slowmo_momentum = 0.3;
  expect_error(ddp, "--slowmo-momentum is a SlowMo option");
  ddp.data_parallel = {};
  ddp.data_parallel.localsgd_frequency = 2;
  expect_error(ddp, "--localsgd-frequency");
  ddp.data_parallel = {};
  ddp.data_parallel.slowmo_memory_efficient = false;
  expect_error(ddp, "--slowmo-memory-efficient");
  ddp.data_parallel = {};
  ddp.data_parallel.bucket_cap_mb = 0;
  expect_error(ddp, "--bucket-cap-mb");

  JobSpec s;
  s.dp = 4;
  s.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  s.data_parallel.slowmo_num_shards = 5;
  expect_error(s, "--slowmo-num-shards must be in 1..dp = 1..4, got 5");
  s.data_parallel = {};
  s.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  s.data_parallel.localsgd_frequency = 0;
  expect_error(s, "--localsgd-frequency must be >= 1, got 0");
  s.data_parallel = {};
  s.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  s.data_parallel.slowmo_frequency = -2;
  expect_error(s, "--slowmo-frequency must be >= 1, got -2");
  s.data_parallel = {};
  s.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  s.data_parallel.slowmo_momentum = 1.0;
  expect_error(s, "--slowmo-momentum");
  s.data_parallel = {};
  s.data_parallel.algorithm = DpAlgorithm::kLocalSgd;
  s.data_parallel.slowmo_lr = 0.5;
  expect_error(s, "--slowmo-lr is a SlowMo option");
  s.data_parallel = {};
  s.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  s.pp = 2;
  s.data_parallel.procs_per_node = 3;
  expect_error(s, "multiple of --pp 2");
  s.data_parallel.procs_per_node = 6;
  expect_error(s, "whole nodes");
  s.data_parallel.procs_per_node = 4;
  validate_job(s);

  JobSpec j;
  j.microbatches = 4;
  j.batch_size = 6;
  expect_error(j, "--batch-size 6 is not a multiple of --microbatches 4");
  j = {};
  j.momentum = 0.9;
  j.optimizer = Optimizer::kAdam;
  expect_error(j, "--momentum applies to --optimizer sgd only");
  j = {};
  j.pp = 0;
  expect_error(j, "--pp must be >= 1, got 0");
}

TEST(Job, JsonRoundTripsWithEveryDefault) {
  JobSpec job;
  job.model_path = "m.json";
  job.schedule = ScheduleKind::kInterleaved1F1B;
  job.pp = 2;
  job.dp = 2;
  job.stages_per_rank = 2;
  job.microbatches = 4;
  job.batch_size = 16;
  job.data_parallel.algorithm = DpAlgorithm::kSlowMo;
  job.data_parallel.slowmo_frequency = 6;
  const std::string text = to_json(job);
  EXPECT_NE(text.find("\"slowmo_frequency\": 6,\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\"localsgd_frequency\": 3,\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\"schedule\": \"Interleaved1F1B\",\n"), std::string::npos) << text;
  const JobSpec back = parse_job(text, "job.json");
  EXPECT_EQ(to_json(back), text);
  // Defaults written out and read back give the same job as defaults left unset.
  JobSpec ddp;
  EXPECT_EQ(to_json(parse_job(to_json(ddp), "d.json")), to_json(ddp));
}

TEST(Job, DiLoCoOptionsAreValidatedAndRoundTrip) {
  JobSpec j;
  j.dp = 2;
  j.data_parallel.sync_every = 4;
  expect_error(j, "--sync-every is a DiLoCo option; it has no effect with --dp-algorithm ddp");
  j.data_parallel.algorithm = DpAlgorithm::kLocalSgd;
  expect_error(j, "--sync-every is a DiLoCo option; it has no effect with --dp-algorithm localsgd");
  j.data_parallel.algorithm = DpAlgorithm::kDiLoCo;
  EXPECT_EQ(config_error(j), "(no error)");
  EXPECT_TRUE(j.data_parallel.outer_nesterov_or_default());
  EXPECT_EQ(j.data_parallel.sync_delay_or_default(), 0);
  j.data_parallel.fragments = 3;
  expect_error(j, "--fragments 3 must divide --sync-every 4");
  j.data_parallel.fragments = 2;
  EXPECT_EQ(j.data_parallel.sync_delay_or_default(), 1);  // overlapped by default when streaming
  j.data_parallel.sync_delay = 2;
  expect_error(j, "--fragment-sync-delay must be in 0..H/K-1 = 0..1, got 2");
  j.data_parallel.sync_delay.reset();
  j.data_parallel.outer_momentum = 0.0;
  EXPECT_FALSE(j.data_parallel.outer_nesterov_or_default());
  j.data_parallel.outer_nesterov = true;
  expect_error(j, "--outer-nesterov needs --outer-momentum > 0");
  j.data_parallel.outer_nesterov.reset();
  j.data_parallel.localsgd_frequency = 2;
  expect_error(j, "--localsgd-frequency is a SlowMo/LocalSGD option");
  j.data_parallel.localsgd_frequency.reset();
  j.data_parallel.outer_dtype = OuterDtype::kBf16;
  j.data_parallel.outer_lr = 0.5;
  const std::string text = to_json(j);
  EXPECT_NE(text.find("\"dp_algorithm\": \"diloco\",\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\"outer_dtype\": \"bf16\",\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\"fragment_sync_delay\": 1,\n"), std::string::npos) << text;
  EXPECT_EQ(to_json(parse_job(text, "d.json")), text);
  EXPECT_THROW((void)parse_outer_dtype("fp8"), ConfigError);
}

TEST(Job, JsonErrorsNameTheField) {
  JobSpec job;
  std::string text = to_json(job);
  const auto at = text.find("\"slowmo_frequency\": 48");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 22, "\"slowmo_frequency\": 12");
  try {
    (void)parse_job(text, "job.json");
    ADD_FAILURE();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("at /slowmo_frequency: has no effect with "
                                         "dp_algorithm ddp"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)parse_job("{\"format\": \"pipewright-job\"}", "j.json"), ParseError);
}

TEST(Job, MakePlanLowersAsRunAndChecksTheShape) {
  JobSpec job;
  job.schedule = ScheduleKind::kInterleavedZeroBubble;
  job.pp = 2;
  job.stages_per_rank = 2;
  job.microbatches = 4;
  const LoweredPlan plan = make_plan(job, nullptr);
  EXPECT_EQ(plan.shape.ranks, 2);
  EXPECT_EQ(plan.shape.stages, 4);
  for (const auto& list : plan.per_rank) {
    EXPECT_EQ(std::count_if(list.begin(), list.end(),
                            [](const Action& a) { return a.kind == ActionKind::kReduceGrad; }),
              2);
    EXPECT_EQ(list.back().kind, ActionKind::kOptimizerStep);
  }
  // A plan file of another shape is refused, naming the file.
  JobSpec other = job;
  other.plan_path = "p.csv";
  const AnyPlan loaded = lower_for_run(generate({ScheduleKind::k1F1B, 3, 4, 1, {}}));
  try {
    (void)make_plan(other, nullptr, &loaded);
    ADD_FAILURE();
  } catch (const InvalidPlanError& e) {
    EXPECT_NE(std::string(e.what()).find("p.csv: the plan has 3 ranks but --pp is 2"),
              std::string::npos)
        << e.what();
  }
  const JobSpec shaped = with_plan_shape(other, shape_of(loaded));
  EXPECT_EQ(shaped.pp, 3);
  EXPECT_EQ(to_json(make_plan(shaped, nullptr, &loaded)), to_json(std::get<LoweredPlan>(loaded)));
}

TEST(Job, PlanOutHoldsJobAndPlan) {
  JobSpec job;
  job.pp = 2;
  job.microbatches = 2;
  const LoweredPlan plan = make_plan(job, nullptr);
  const std::string out = plan_out_json(job, plan);
  EXPECT_EQ(out.rfind("{\"job\": {\n", 0), 0U) << out;
  EXPECT_NE(out.find("},\n\"plan\": {\n"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.size() - 3), "}}\n");
}

// Issue 22: recompute and forward-only in the job, the V schedules' shape rules, Chimera's plan.
TEST(Job, RecomputeForwardOnlyAndVSchedules) {
  EXPECT_EQ(parse_recompute("none"), RecomputeSpec{});
  EXPECT_EQ(parse_recompute("full").mode, RecomputeMode::kFull);
  // Issue 46: selective recompute recomputes no stage (the simulator's block model does it).
  const RecomputeSpec selective = parse_recompute("selective");
  EXPECT_TRUE(selective.selective());
  EXPECT_FALSE(selective.any());
  EXPECT_FALSE(selective.recomputes(0));
  EXPECT_EQ(to_string(selective), "selective");
  const RecomputeSpec list = parse_recompute("2,0,2");
  EXPECT_EQ(list.stages, (std::vector<int>{0, 2}));
  EXPECT_TRUE(list.recomputes(2));
  EXPECT_FALSE(list.recomputes(1));
  EXPECT_EQ(to_string(list), "0,2");
  for (const char* bad : {"", "0,", "x", "1,-2", "fulll"}) {
    EXPECT_THROW((void)parse_recompute(bad), ConfigError) << bad;
  }
  JobSpec j;
  j.pp = 2;
  j.microbatches = 4;
  j.recompute = parse_recompute("0,2");
  expect_error(j, "--recompute: stage 2 is out of range [0, 2)");
  j.recompute = parse_recompute("full");
  j.forward_only = true;
  expect_error(j, "--recompute has no effect with --forward-only");
  j.forward_only = false;
  j.schedule = ScheduleKind::kZBVZeroBubble;
  expect_error(j, "needs --stages-per-rank 2");
  j.stages_per_rank = 2;
  validate_job(j);
  j.schedule = ScheduleKind::kDualPipeV;
  j.microbatches = 3;
  expect_error(j, "DualPipeV requires at least as many microbatches as stages");
  j.schedule = ScheduleKind::kChimera;
  j.stages_per_rank = 1;
  j.pp = 3;
  j.microbatches = 6;
  j.recompute = {};
  expect_error(j, "Chimera needs an even --pp");
  // Job JSON keeps both fields and reads files written before them.
  j.pp = 2;
  j.recompute = parse_recompute("1");
  const std::string text = to_json(j);
  EXPECT_NE(text.find("\"recompute\": \"1\""), std::string::npos) << text;
  EXPECT_EQ(to_json(parse_job(text, "j.json")), text);
  // Chimera's plan: 2P plan stages over P model stages, forward-only as asked.
  const LoweredPlan chimera = make_plan(j, nullptr);
  EXPECT_EQ(chimera.shape.stages, 4);
  EXPECT_EQ(chimera.shape.model_stages(), 2);
  j.forward_only = true;
  j.recompute = {};
  const LoweredPlan inference = make_plan(j, nullptr);
  EXPECT_TRUE(inference.shape.forward_only);
  for (const auto& list : inference.per_rank) {
    for (const Action& a : list) {
      EXPECT_TRUE(a.kind == ActionKind::kForward || a.kind == ActionKind::kSendF ||
                  a.kind == ActionKind::kRecvF)
          << a;
    }
  }
}

TEST(Job, ZeroStage) {
  JobSpec job;
  job.dp = 4;
  job.zero_stage = 2;
  validate_job(job);
  EXPECT_EQ(job.effective_zero_stage(), 2);
  // In the job JSON, and read back.
  const std::string text = to_json(job);
  EXPECT_NE(text.find("\"zero_stage\": 2"), std::string::npos) << text;
  EXPECT_EQ(parse_job(text, "job.json").zero_stage, 2);
  // One replica: nothing to shard.
  job.dp = 1;
  EXPECT_EQ(job.effective_zero_stage(), 0);
  job.dp = 4;
  job.zero_stage = 4;
  expect_error(job, "--zero-stage must be 0, 1, 2 or 3, got 4");
  job.zero_stage = -1;
  expect_error(job, "--zero-stage must be 0, 1, 2 or 3, got -1");
  // Local-step algorithms keep whole replicas: refused, naming both flags.
  job.zero_stage = 1;
  job.data_parallel.algorithm = DpAlgorithm::kDiLoCo;
  expect_error(job,
               "--zero-stage 1 shards the state of synchronous data parallelism; "
               "--dp-algorithm diloco");
  job.data_parallel.algorithm = DpAlgorithm::kSgp;
  expect_error(job, "--dp-algorithm sgp");
  job.zero_stage = 0;
  EXPECT_EQ(config_error(job), "(no error)");
}

}  // namespace
}  // namespace pipewright::sched
