// Element-wise reduction kernels over raw buffers for every DType, used where the transport
// does not reduce for us: the fake backend, and the MPI backend's user-defined operations for
// float16/bfloat16 (MPI has no half-precision types). Half types are reduced in float32 and
// rounded back to nearest-even, as torch does on CPU. Private to exec/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec::detail {

// inout[i] = op(inout[i], in[i]) for i < count.
void reduce_into(void* inout, const void* in, std::size_t count, DType dtype, ReduceOp op) noexcept;

float half_to_float(std::uint16_t h) noexcept;
std::uint16_t float_to_half(float f) noexcept;
float bfloat16_to_float(std::uint16_t b) noexcept;
std::uint16_t float_to_bfloat16(float f) noexcept;

}  // namespace pipewright::exec::detail
