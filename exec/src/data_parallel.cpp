#include "pipewright/exec/data_parallel.hpp"

#include <cmath>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

DpAlgorithm parse_dp_algorithm(const std::string& name) {
  if (name == "ddp") return DpAlgorithm::kDdp;
  if (name == "slowmo") return DpAlgorithm::kSlowMo;
  if (name == "localsgd") return DpAlgorithm::kLocalSgd;
  PW_CHECK(name != "sgp", ConfigError,
           "--dp-algorithm sgp: SlowMo's stochastic gradient push (gossip) base algorithm is not "
           "supported; use --dp-algorithm slowmo (LocalSGD base), localsgd or ddp");
  throw ConfigError("--dp-algorithm: unknown algorithm '" + name +
                    "' (expected ddp, slowmo or localsgd)");
}

const char* to_string(DpAlgorithm algorithm) noexcept {
  switch (algorithm) {
    case DpAlgorithm::kDdp:
      return "ddp";
    case DpAlgorithm::kSlowMo:
      return "slowmo";
    case DpAlgorithm::kLocalSgd:
      return "localsgd";
  }
  return "?";
}

int replicas_per_node(int procs_per_node, int pp) noexcept {
  if (procs_per_node > 1 && pp >= 1 && procs_per_node % pp == 0) return procs_per_node / pp;
  return 1;
}

void validate_data_parallel(const DataParallelConfig& c, int pp, int dp) {
  PW_CHECK(pp >= 1 && dp >= 1, ConfigError, "--pp and --dp must be >= 1");
  PW_CHECK(std::isfinite(c.bucket_cap_mb) && c.bucket_cap_mb > 0, ConfigError,
           "--bucket-cap-mb must be a positive number of MiB, got " << c.bucket_cap_mb);
  PW_CHECK(c.check_replicas >= 0, ConfigError,
           "--check-replicas must be >= 0 (0 = never), got " << c.check_replicas);
  PW_CHECK(c.checkpoint_every >= 0, ConfigError,
           "--checkpoint-every must be >= 0, got " << c.checkpoint_every);
  PW_CHECK(!c.resume || !c.checkpoint_dir.empty(), ConfigError, "--resume needs --checkpoint-dir");
  PW_CHECK(c.checkpoint_every == 0 || !c.checkpoint_dir.empty(), ConfigError,
           "--checkpoint-every needs --checkpoint-dir");

  const bool averaging = c.algorithm != DpAlgorithm::kDdp;
  const bool slowmo = c.algorithm == DpAlgorithm::kSlowMo;
  const char* algo = to_string(c.algorithm);
  // Options that only mean something for an algorithm that averages parameters.
  PW_CHECK(averaging || !c.localsgd_frequency, ConfigError,
           "--localsgd-frequency is a SlowMo/LocalSGD option; it has no effect with "
           "--dp-algorithm ddp");
  PW_CHECK(averaging || !c.procs_per_node, ConfigError,
           "--procs-per-node is a SlowMo/LocalSGD option; it has no effect with --dp-algorithm "
           "ddp");
  const struct {
    bool set;
    const char* flag;
  } slowmo_only[] = {
      {c.slowmo_frequency.has_value(), "--slowmo-frequency"},
      {c.slowmo_momentum.has_value(), "--slowmo-momentum"},
      {c.slowmo_lr.has_value(), "--slowmo-lr"},
      {c.slowmo_memory_efficient.has_value(), "--slowmo-memory-efficient"},
      {c.slowmo_num_shards.has_value(), "--slowmo-num-shards"},
  };
  for (const auto& o : slowmo_only) {
    PW_CHECK(slowmo || !o.set, ConfigError,
             o.flag << " is a SlowMo option; it has no effect with --dp-algorithm " << algo);
  }
  PW_CHECK(c.localsgd_frequency_or_default() >= 1, ConfigError,
           "--localsgd-frequency must be >= 1, got " << *c.localsgd_frequency);
  PW_CHECK(c.slowmo_frequency_or_default() >= 1, ConfigError,
           "--slowmo-frequency must be >= 1, got " << *c.slowmo_frequency);
  const double beta = c.slowmo_momentum_or_default();
  PW_CHECK(std::isfinite(beta) && beta >= 0 && beta < 1, ConfigError,
           "--slowmo-momentum must be in [0, 1), got " << beta);
  const double alpha = c.slowmo_lr_or_default();
  PW_CHECK(std::isfinite(alpha) && alpha > 0, ConfigError,
           "--slowmo-lr must be > 0, got " << alpha);
  const int shards = c.slowmo_num_shards_or_default(dp);
  PW_CHECK(shards >= 1 && shards <= dp, ConfigError,
           "--slowmo-num-shards must be in 1..dp = 1.." << dp << ", got " << shards);
  const int ppn = c.procs_per_node_or_default();
  PW_CHECK(ppn >= 1, ConfigError, "--procs-per-node must be >= 1, got " << ppn);
  if (ppn > 1) {
    PW_CHECK(ppn % pp == 0, ConfigError,
             "--procs-per-node " << ppn << " must be a multiple of --pp " << pp
                                 << " (each node holds whole pipeline replicas)");
    PW_CHECK(dp % (ppn / pp) == 0, ConfigError,
             "--procs-per-node " << ppn << " does not divide the world of pp x dp = " << pp << " x "
                                 << dp << " = " << pp * dp << " ranks into whole nodes");
  }
}

}  // namespace pipewright::exec
