#include "pipewright/sim/cost_inputs.hpp"

#include <cmath>
#include <string>

#include "pipewright/graph/error.hpp"

namespace pipewright::sim {
namespace {

double pick(const std::vector<double>& values, std::int32_t stage, const char* flag,
            std::int32_t stages) {
  PW_CHECK(values.size() == 1 || values.size() == static_cast<std::size_t>(stages), ConfigError,
           flag << " needs one value or one per stage (" << stages << "), got " << values.size());
  const double v = values.size() == 1 ? values[0] : values[static_cast<std::size_t>(stage)];
  PW_CHECK(std::isfinite(v) && v >= 0, ConfigError,
           flag << " must be finite and >= 0, got " << v
                << (values.size() == 1 ? std::string() : " for stage " + std::to_string(stage)));
  return v;
}

}  // namespace

sched::CostTable what_if_costs(const WhatIfCosts& w, std::int32_t stages) {
  PW_CHECK(!w.forward_ms.empty(), ConfigError, "--forward-ms is required for what-if costs");
  PW_CHECK(!w.backward_ms.empty(), ConfigError, "--backward-ms is required for what-if costs");
  PW_CHECK(w.activation_bytes >= 0, ConfigError,
           "--activation-bytes must be >= 0, got " << w.activation_bytes);
  PW_CHECK(w.param_bytes >= 0, ConfigError, "--param-bytes must be >= 0, got " << w.param_bytes);
  PW_CHECK(w.output_bytes >= 0, ConfigError, "--output-bytes must be >= 0, got " << w.output_bytes);
  sched::CostTable t;
  t.source = "cli";
  for (std::int32_t s = 0; s < stages; ++s) {
    sched::StageCost c;
    c.stage = s;
    c.forward_ms = pick(w.forward_ms, s, "--forward-ms", stages);
    c.backward_ms = pick(w.backward_ms, s, "--backward-ms", stages);
    if (!w.weight_ms.empty()) {
      const double wt = pick(w.weight_ms, s, "--weight-ms", stages);
      PW_CHECK(wt <= c.backward_ms, ConfigError,
               "--weight-ms (" << wt << ") exceeds --backward-ms (" << c.backward_ms
                               << ") for stage " << s << "; backward is the full B = I + W");
      c.weight_grad_ms = wt;
      c.input_grad_ms = c.backward_ms - wt;
    }
    c.activation_bytes = w.activation_bytes;
    c.param_bytes = w.param_bytes;
    c.output_bytes = w.output_bytes;
    t.stages.push_back(c);
  }
  return t;
}

sched::CostTable costs_from_partition(const graph::Model& model,
                                      const graph::Partition& partition) {
  graph::check_partition_matches(partition, model);
  sched::CostTable t;
  t.source = "model:" + model.name;
  for (const auto& info : partition.graph.stages) {
    sched::StageCost c;
    c.stage = info.index;
    c.forward_ms = info.forward_ms;
    c.backward_ms = info.backward_ms;
    c.input_grad_ms = info.input_grad_ms;
    c.weight_grad_ms = info.weight_grad_ms;
    c.param_bytes = info.param_bytes;
    c.activation_bytes = info.activation_bytes;
    c.output_bytes = info.output_bytes;
    for (int n : info.nodes) {
      const auto bytes = model.nodes[static_cast<std::size_t>(n)].cost.param_bytes;
      if (bytes > 0) c.param_sizes_bytes.push_back(bytes);
    }
    t.stages.push_back(std::move(c));
  }
  sched::validate(t, "partition of " + model.name);
  return t;
}

}  // namespace pipewright::sim
