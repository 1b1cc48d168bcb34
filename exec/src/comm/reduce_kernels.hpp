// Element-wise reduction kernels over raw buffers for every DType, used where the transport
// does not reduce for us: the fake backend, and the MPI backend's user-defined operations for
// float16/bfloat16 (MPI has no half-precision types). Half types are reduced in float32 and
// rounded back to nearest-even, as torch does on CPU. Private to exec/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

// inout[i] = op(inout[i], in[i]) for i < count.
void reduce_into(void* inout, const void* in, std::size_t count, DType dtype, ReduceOp op) noexcept;

// Note [16-bit sums] (issue 44): every CPU transport sums float16/bfloat16 buffers the same way:
// the n inputs widened to float32 and added in input order, the sum rounded once to nearest-even.
// dst[i] = round(in[0][i] + in[1][i] + ... + in[n-1][i]) for i < count; dst may alias an input;
// `dtype` is kFloat16 or kBFloat16. Gloo's TCP path widens the buffers and all-reduces float32
// (the same semantics; its ring adds in another order, which float32 rounding can show in the
// last float32 bit only).
void sum_half_rounded_once(void* dst, const void* const* in, int n, std::size_t count,
                           DType dtype) noexcept;

[[nodiscard]] constexpr bool is_half(DType dtype) noexcept {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

// Note [16-bit sums] for transports whose reduction rounds at every pairwise step (MPI's
// user-defined operations, NCCL): the 16-bit buffer `buf` (host memory) widened to float32, to
// be summed as float32 and rounded once by narrow_half(buf, wide) into `buf` (or another buffer
// of the same dtype).
[[nodiscard]] std::shared_ptr<std::vector<float>> widen_half(const BufferView& buf);
void narrow_half(const BufferView& out, const std::vector<float>& wide) noexcept;

float half_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_half(float f) noexcept;
float bfloat16_to_float(std::uint16_t b) noexcept;
std::uint16_t float_to_bfloat16(float f) noexcept;

}  // namespace pipewright::exec::detail
