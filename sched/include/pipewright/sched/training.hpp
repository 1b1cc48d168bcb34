// The training recipe of a job beyond its optimizer (issue 33; docs/executor.md, "Training
// recipe"): numeric precision, gradient clipping and the learning-rate schedule. Value types and
// pure functions, shared by `pipewright run` (which applies them) and `pipewright simulate` /
// `partition` / `search` (which model the bytes a precision moves and keeps).
#pragma once

#include <cstdint>
#include <string_view>

namespace pipewright::sched {

// Compute precision (Megatron's --bf16 / --fp16, torch autocast):
//   kFp32  everything in float32;
//   kBf16  forward and backward under autocast to bfloat16, master weights and optimizer state
//          in float32, activations and their gradients cross stage boundaries in bfloat16;
//   kFp16  as kBf16 with float16, plus dynamic loss scaling (torch.amp.GradScaler semantics).
enum class Precision : std::uint8_t { kFp32, kBf16, kFp16 };
// "fp32", "bf16", "fp16"; anything else is a ConfigError naming `flag`.
[[nodiscard]] Precision parse_precision(std::string_view name,
                                        std::string_view flag = "--precision");
[[nodiscard]] std::string_view to_string(Precision precision) noexcept;
// Bytes of one element: 4 for fp32, 2 for bf16 and fp16.
[[nodiscard]] int element_bytes(Precision precision) noexcept;
// `bytes` of floating-point tensors held or sent at precision `from`, as the same tensors at
// precision `to` (bytes x element_bytes(to) / element_bytes(from)): Note [Precision bytes] in
// sched/memory.hpp.
[[nodiscard]] std::int64_t bytes_at_precision(std::int64_t bytes, Precision from,
                                              Precision to) noexcept;
// Activation bytes kept for the backward, `bytes` measured or estimated at precision `from`, of
// which `fp32_bytes` are tensors autocast keeps in fp32 (Note [Autocast bytes] in
// graph/model.hpp), at precision `to`: the fp32 part unchanged, the rest by bytes_at_precision.
[[nodiscard]] std::int64_t activation_bytes_at_precision(std::int64_t bytes,
                                                         std::int64_t fp32_bytes, Precision from,
                                                         Precision to) noexcept;

// Megatron's --lr-decay-style.
enum class LrDecayStyle : std::uint8_t { kConstant, kLinear, kCosine };
// "constant", "linear", "cosine"; anything else is a ConfigError naming --lr-decay-style.
[[nodiscard]] LrDecayStyle parse_lr_decay_style(std::string_view name);
[[nodiscard]] std::string_view to_string(LrDecayStyle style) noexcept;

// Note [Learning-rate schedule]: Megatron-LM's OptimizerParamScheduler.get_lr with
// lr_warmup_init = 0, evaluated at the number of optimizer steps already taken, so step 0 of a
// warm-up trains at lr 0 exactly as Megatron's first iteration does:
//   s <= warmup (warmup > 0):  lr = max_lr * s / warmup
//   constant:                  lr = max_lr
//   s > decay_steps:           lr = min_lr
//   else, r = (s - warmup) / (decay_steps - warmup):
//     linear  lr = min_lr + (max_lr - min_lr) * (1 - r)
//     cosine  lr = min_lr + (max_lr - min_lr) * 0.5 * (cos(pi r) + 1)
// It is a pure function of the step, so a run resumed from a checkpoint continues the schedule
// bit-exactly; checkpoints also record it and a resume under another schedule is refused.
struct LrSchedule {
  std::int64_t warmup_steps = 0;                       // --lr-warmup-steps
  LrDecayStyle decay_style = LrDecayStyle::kConstant;  // --lr-decay-style
  std::int64_t decay_steps = 0;                        // --lr-decay-steps; 0: the job's --steps
  double min_lr = 0;                                   // --lr-min

  // decay_steps, or `steps` when it is 0.
  [[nodiscard]] std::int64_t decay_steps_or(std::int64_t steps) const noexcept {
    return decay_steps > 0 ? decay_steps : steps;
  }
  friend bool operator==(const LrSchedule& a, const LrSchedule& b) noexcept {
    return a.warmup_steps == b.warmup_steps && a.decay_style == b.decay_style &&
           a.decay_steps == b.decay_steps && a.min_lr == b.min_lr;
  }
};

// The learning rate of optimizer step `step` (0-based: the steps already taken) for a peak
// learning rate `max_lr` and a job of `steps` steps (the default decay length).
[[nodiscard]] double learning_rate_at(const LrSchedule& schedule, double max_lr, std::int64_t steps,
                                      std::int64_t step) noexcept;

// Checks the schedule against the peak learning rate and the job's steps; ConfigError naming the
// flag (--lr-warmup-steps, --lr-decay-steps, --lr-min).
void validate_lr_schedule(const LrSchedule& schedule, double max_lr, std::int64_t steps);

}  // namespace pipewright::sched
