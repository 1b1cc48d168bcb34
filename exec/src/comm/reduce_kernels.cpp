#include "comm/reduce_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace pipewright::exec::detail {

namespace {

template <typename T>
T apply(ReduceOp op, T a, T b) noexcept {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<T>(a + b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
  }
  return a;
}

template <typename T>
void reduce_typed(void* inout, const void* in, std::size_t count, ReduceOp op) noexcept {
  auto* dst = static_cast<T*>(inout);
  const auto* src = static_cast<const T*>(in);
  for (std::size_t i = 0; i < count; ++i) dst[i] = apply(op, dst[i], src[i]);
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void reduce_half(void* inout, const void* in, std::size_t count, ReduceOp op) noexcept {
  auto* dst = static_cast<std::uint16_t*>(inout);
  const auto* src = static_cast<const std::uint16_t*>(in);
  for (std::size_t i = 0; i < count; ++i) {
    dst[i] = FromFloat(apply(op, ToFloat(dst[i]), ToFloat(src[i])));
  }
}

std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bits_float(std::uint32_t u) noexcept {
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float bfloat16_to_float(std::uint16_t b) noexcept {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

std::uint16_t float_to_bfloat16(float f) noexcept {
  if (std::isnan(f)) return 0x7FC0;
  const std::uint32_t u = float_bits(f);
  const std::uint32_t rounding = 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1F;
  const std::uint32_t mantissa = h & 0x3FF;
  if (exponent == 0) {
    // Zero or subnormal: value = mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000 | (mantissa << 13));  // inf/NaN
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_half(float f) noexcept {
  const std::uint32_t u = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  if (std::isnan(f)) return static_cast<std::uint16_t>(sign | 0x7E00);
  const float magnitude = std::fabs(f);
  if (magnitude >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7C00);  // overflow: inf
  if (magnitude < 6.103515625e-05f) {
    // Subnormal range: quantise to multiples of 2^-24 (nearbyint rounds half to even).
    const auto m = static_cast<std::uint16_t>(std::nearbyint(std::ldexp(magnitude, 24)));
    return static_cast<std::uint16_t>(sign | m);
  }
  const std::uint32_t exponent = ((u >> 23) & 0xFF) - 112;
  std::uint32_t mantissa = u & 0x7FFFFF;
  std::uint32_t out = (exponent << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (out & 1))) ++out;  // may carry into the exponent
  return static_cast<std::uint16_t>(sign | out);
}

void sum_half_rounded_once(void* dst, const void* const* in, int n, std::size_t count,
                           DType dtype) noexcept {
  const bool bf16 = dtype == DType::kBFloat16;
  constexpr std::size_t kBlock = 1024;  // partial sums stay in L1
  float acc[kBlock];
  auto* out = static_cast<std::uint16_t*>(dst);
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    for (int k = 0; k < n; ++k) {
      const auto* src = static_cast<const std::uint16_t*>(in[k]) + base;
      for (std::size_t i = 0; i < len; ++i) {
        const float v = bf16 ? bfloat16_to_float(src[i]) : half_to_float(src[i]);
        acc[i] = k == 0 ? v : acc[i] + v;
      }
    }
    for (std::size_t i = 0; i < len; ++i) {
      out[base + i] = bf16 ? float_to_bfloat16(acc[i]) : float_to_half(acc[i]);
    }
  }
}

void reduce_into(void* inout, const void* in, std::size_t count, DType dtype,
                 ReduceOp op) noexcept {
  switch (dtype) {
    case DType::kFloat32:
      return reduce_typed<float>(inout, in, count, op);
    case DType::kFloat64:
      return reduce_typed<double>(inout, in, count, op);
    case DType::kInt64:
      return reduce_typed<std::int64_t>(inout, in, count, op);
    case DType::kInt32:
      return reduce_typed<std::int32_t>(inout, in, count, op);
    case DType::kUInt8:
      return reduce_typed<std::uint8_t>(inout, in, count, op);
    case DType::kFloat16:
      return reduce_half<half_to_float, float_to_half>(inout, in, count, op);
    case DType::kBFloat16:
      return reduce_half<bfloat16_to_float, float_to_bfloat16>(inout, in, count, op);
  }
}

std::shared_ptr<std::vector<float>> widen_half(const BufferView& buf) {
  auto wide = std::make_shared<std::vector<float>>(buf.count);
  const auto* h = static_cast<const std::uint16_t*>(buf.data);
  const bool bf16 = buf.dtype == DType::kBFloat16;
  for (std::size_t i = 0; i < buf.count; ++i) {
    (*wide)[i] = bf16 ? bfloat16_to_float(h[i]) : half_to_float(h[i]);
  }
  return wide;
}

void narrow_half(const BufferView& out, const std::vector<float>& wide) noexcept {
  auto* o = static_cast<std::uint16_t*>(out.data);
  const bool bf16 = out.dtype == DType::kBFloat16;
  for (std::size_t i = 0; i < out.count && i < wide.size(); ++i) {
    o[i] = bf16 ? float_to_bfloat16(wide[i]) : float_to_half(wide[i]);
  }
}

}  // namespace pipewright::exec::detail
