// The training recipe's value types (pipewright/sched/training.hpp).
#include "pipewright/sched/training.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipewright/graph/error.hpp"

namespace pipewright::sched {

Precision parse_precision(std::string_view name, std::string_view flag) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw ConfigError(std::string(flag) + " must be fp32, bf16 or fp16, got '" + std::string(name) +
                    "'");
}

std::string_view to_string(Precision precision) noexcept {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

int element_bytes(Precision precision) noexcept { return precision == Precision::kFp32 ? 4 : 2; }

std::int64_t bytes_at_precision(std::int64_t bytes, Precision from, Precision to) noexcept {
  if (from == to) return bytes;
  return bytes * element_bytes(to) / element_bytes(from);
}

std::int64_t activation_bytes_at_precision(std::int64_t bytes, std::int64_t fp32_bytes,
                                           Precision from, Precision to) noexcept {
  if (from == to) return bytes;
  const std::int64_t kept = std::clamp<std::int64_t>(fp32_bytes, 0, bytes);
  return kept + bytes_at_precision(bytes - kept, from, to);
}

LrDecayStyle parse_lr_decay_style(std::string_view name) {
  if (name == "constant") return LrDecayStyle::kConstant;
  if (name == "linear") return LrDecayStyle::kLinear;
  if (name == "cosine") return LrDecayStyle::kCosine;
  throw ConfigError("--lr-decay-style must be constant, linear or cosine, got '" +
                    std::string(name) + "'");
}

std::string_view to_string(LrDecayStyle style) noexcept {
  switch (style) {
    case LrDecayStyle::kConstant:
      return "constant";
    case LrDecayStyle::kLinear:
      return "linear";
    case LrDecayStyle::kCosine:
      return "cosine";
  }
  return "?";
}

// Note [Learning-rate schedule] (training.hpp): Megatron's arithmetic, in double.
double learning_rate_at(const LrSchedule& s, double max_lr, std::int64_t steps,
                        std::int64_t step) noexcept {
  if (s.warmup_steps > 0 && step <= s.warmup_steps) {
    return max_lr * static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  }
  if (s.decay_style == LrDecayStyle::kConstant) return max_lr;
  const std::int64_t decay = s.decay_steps_or(steps);
  if (step > decay) return s.min_lr;
  const double ratio =
      static_cast<double>(step - s.warmup_steps) / static_cast<double>(decay - s.warmup_steps);
  const double coeff =
      s.decay_style == LrDecayStyle::kLinear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return s.min_lr + coeff * (max_lr - s.min_lr);
}

void validate_lr_schedule(const LrSchedule& s, double max_lr, std::int64_t steps) {
  PW_CHECK(s.warmup_steps >= 0, ConfigError,
           "--lr-warmup-steps must be >= 0, got " << s.warmup_steps);
  PW_CHECK(s.decay_steps >= 0, ConfigError,
           "--lr-decay-steps must be >= 1 (or 0: --steps), got " << s.decay_steps);
  PW_CHECK(std::isfinite(s.min_lr) && s.min_lr >= 0 && s.min_lr <= max_lr, ConfigError,
           "--lr-min must be in [0, --lr " << max_lr << "], got " << s.min_lr);
  if (s.decay_style == LrDecayStyle::kConstant) return;
  const std::int64_t decay = s.decay_steps_or(steps);
  PW_CHECK(decay > s.warmup_steps, ConfigError,
           "--lr-decay-steps " << decay << (s.decay_steps == 0 ? " (default: --steps)" : "")
                               << " must be longer than --lr-warmup-steps " << s.warmup_steps
                               << " (decay counts from step 0, warm-up included, as in "
                                  "Megatron)");
}

}  // namespace pipewright::sched
