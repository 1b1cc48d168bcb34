// The duration model of the simulator: how long each compute action and each message takes.
// The engine (engine.cpp) asks it once per action; another model (a learned one, a roofline)
// can be swapped in by implementing DurationModel.
#pragma once

#include <cstdint>
#include <memory>

#include "pipewright/sched/costs.hpp"
#include "pipewright/sched/plan.hpp"
#include "pipewright/sim/simulator.hpp"

namespace pipewright::sim {

// Compute kind slots, as in replay_index(): F 0, B 1, I 2, W 3, OPTIM 4.
enum class ComputeSlot : int {
  kForward = 0,
  kBackward = 1,
  kInputGrad = 2,
  kWeightGrad = 3,
  kOptim = 4
};

class DurationModel {
 public:
  virtual ~DurationModel() = default;
  // Work of one compute action in ns (at full speed when cores are shared): stage `stage`,
  // microbatch `mb` (-1 for OPTIM), simulated step `step`.
  [[nodiscard]] virtual std::int64_t compute_ns(std::int32_t stage, ComputeSlot slot,
                                                std::int32_t mb,
                                                std::int32_t step) const noexcept = 0;
  // One message on stage edge `edge` (index into PlanShape::edges()) whose network cost is
  // `network_ns`: an activation (`forward`) or a gradient of microbatch `mb` in step `step`.
  [[nodiscard]] virtual std::int64_t message_ns(std::int64_t network_ns, std::int32_t edge,
                                                bool forward, std::int32_t mb,
                                                std::int32_t step) const noexcept = 0;
  // How long the sender's compute stream stays in the send call of that message (Note [Send
  // calls] in engine.hpp); 0 without a measured distribution.
  [[nodiscard]] virtual std::int64_t send_call_ns(std::int32_t edge, bool forward, std::int32_t mb,
                                                  std::int32_t step) const noexcept = 0;
};

// The cost table's durations: per stage and kind, the table's time (+ compute_overhead_ms; with
// `shared_cores`, the mean of the measured distribution, Note [Shared cores]), replaced by
// options.replay_durations_ns where given (Note [Trace-driven replay]) and drawn from the
// measured distributions with options.sample_durations_seed (Note [Sampled durations]; never
// with shared cores). Preconditions: costs.stages.size() == plan.shape.stages and the replay
// table, when given, has the size replay_index() needs (the engine checks both).
[[nodiscard]] std::unique_ptr<DurationModel> make_table_durations(const sched::LoweredPlan& plan,
                                                                  const sched::CostTable& costs,
                                                                  const SimOptions& options,
                                                                  bool shared_cores);

}  // namespace pipewright::sim
