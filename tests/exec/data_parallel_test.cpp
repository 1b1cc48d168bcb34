#include "pipewright/exec/data_parallel.hpp"

#include <gtest/gtest.h>

#include <string>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

void expect_config_error(const DataParallelConfig& c, int pp, int dp, const std::string& text) {
  try {
    validate_data_parallel(c, pp, dp);
    ADD_FAILURE() << "expected a ConfigError mentioning '" << text << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(DataParallelConfig, ParsesAlgorithmsAndRejectsSgp) {
  EXPECT_EQ(parse_dp_algorithm("ddp"), DpAlgorithm::kDdp);
  EXPECT_EQ(parse_dp_algorithm("slowmo"), DpAlgorithm::kSlowMo);
  EXPECT_EQ(parse_dp_algorithm("localsgd"), DpAlgorithm::kLocalSgd);
  try {
    (void)parse_dp_algorithm("sgp");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos);
  }
  EXPECT_THROW((void)parse_dp_algorithm("allreduce"), ConfigError);
}

TEST(DataParallelConfig, DefaultsAreFairscales) {
  DataParallelConfig c;
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
  validate_data_parallel(c, 2, 4);
}

TEST(DataParallelConfig, BadInputNamesTheFlag) {
  DataParallelConfig ddp;
  ddp.slowmo_momentum = 0.3;
  expect_config_error(ddp, 1, 2, "--slowmo-momentum is a SlowMo option");
  ddp = {};
  ddp.localsgd_frequency = 2;
  expect_config_error(ddp, 1, 2, "--localsgd-frequency");
  ddp = {};
  ddp.slowmo_memory_efficient = false;
  expect_config_error(ddp, 1, 2, "--slowmo-memory-efficient");
  ddp = {};
  ddp.bucket_cap_mb = 0;
  expect_config_error(ddp, 1, 2, "--bucket-cap-mb");
  ddp = {};
  ddp.check_replicas = -1;
  expect_config_error(ddp, 1, 2, "--check-replicas");
  ddp = {};
  ddp.resume = true;
  expect_config_error(ddp, 1, 2, "--resume needs --checkpoint-dir");

  DataParallelConfig s;
  s.algorithm = DpAlgorithm::kSlowMo;
  s.slowmo_num_shards = 5;
  expect_config_error(s, 1, 4, "--slowmo-num-shards must be in 1..dp = 1..4, got 5");
  s = {};
  s.algorithm = DpAlgorithm::kSlowMo;
  s.localsgd_frequency = 0;
  expect_config_error(s, 1, 4, "--localsgd-frequency must be >= 1, got 0");
  s = {};
  s.algorithm = DpAlgorithm::kSlowMo;
  s.slowmo_frequency = -2;
  expect_config_error(s, 1, 4, "--slowmo-frequency must be >= 1, got -2");
  s = {};
  s.algorithm = DpAlgorithm::kSlowMo;
  s.slowmo_momentum = 1.0;
  expect_config_error(s, 1, 4, "--slowmo-momentum");
  s = {};
  s.algorithm = DpAlgorithm::kLocalSgd;
  s.slowmo_lr = 0.5;
  expect_config_error(s, 1, 4, "--slowmo-lr is a SlowMo option");
  s = {};
  s.algorithm = DpAlgorithm::kSlowMo;
  s.procs_per_node = 3;
  expect_config_error(s, 2, 4, "multiple of --pp 2");
  s.procs_per_node = 6;
  expect_config_error(s, 2, 4, "whole nodes");
  s.procs_per_node = 4;
  validate_data_parallel(s, 2, 4);
  EXPECT_EQ(replicas_per_node(4, 2), 2);
  EXPECT_EQ(replicas_per_node(1, 2), 1);
}

}  // namespace
}  // namespace pipewright::exec
