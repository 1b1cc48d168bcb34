// The sharded collectives' shared parts (sharded_collectives.hpp).
#include "comm/sharded_collectives.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "comm/reduce_kernels.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec::detail {

void check_sharded(const BufferView& in, const BufferView& out, int size, bool gather,
                   const std::string& prefix) {
  PW_ASSERT(in.dtype == out.dtype, prefix << ": input is " << to_string(in.dtype)
                                          << " but output is " << to_string(out.dtype));
  PW_ASSERT(in.device.kind == out.device.kind && in.device.index == out.device.index,
            prefix << ": input and output are on different devices");
  const std::size_t whole = gather ? out.count : in.count;
  const std::size_t piece = gather ? in.count : out.count;
  PW_ASSERT(whole == piece * static_cast<std::size_t>(size),
            prefix << ": " << (gather ? "output" : "input") << " has " << whole << " elements, not "
                   << size << " x the " << piece << " of the " << (gather ? "input" : "output"));
}

bool gather_in_place(const BufferView& in, const BufferView& out, int rank) noexcept {
  return static_cast<const std::byte*>(out.data) + static_cast<std::size_t>(rank) * in.bytes() ==
         static_cast<const std::byte*>(in.data);
}

bool scatter_in_place(const BufferView& in, const BufferView& out, int rank) noexcept {
  return gather_in_place(out, in, rank);
}

namespace {

float load16(const void* base, std::size_t i, DType dtype) noexcept {
  std::uint16_t h = 0;
  std::memcpy(&h, static_cast<const std::byte*>(base) + 2 * i, 2);
  return dtype == DType::kBFloat16 ? bfloat16_to_float(h) : half_to_float(h);
}

}  // namespace

void reduce_pieces(void* out, const std::vector<const void*>& pieces, std::size_t count,
                   DType dtype, ReduceOp op) {
  PW_ASSERT(!pieces.empty(), "reduce_pieces: no pieces");
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    // Sum in float32, round once (as NCCL and torch reduce 16-bit buffers).
    std::vector<float> acc(count);
    for (std::size_t i = 0; i < count; ++i) acc[i] = load16(pieces[0], i, dtype);
    for (std::size_t p = 1; p < pieces.size(); ++p) {
      for (std::size_t i = 0; i < count; ++i) {
        const float v = load16(pieces[p], i, dtype);
        acc[i] = op == ReduceOp::kSum   ? acc[i] + v
                 : op == ReduceOp::kMax ? std::max(acc[i], v)
                                        : std::min(acc[i], v);
      }
    }
    auto* o = static_cast<std::byte*>(out);
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint16_t h =
          dtype == DType::kBFloat16 ? float_to_bfloat16(acc[i]) : float_to_half(acc[i]);
      std::memcpy(o + 2 * i, &h, 2);
    }
    return;
  }
  const std::size_t bytes = count * dtype_size(dtype);
  std::vector<unsigned char> acc(static_cast<const unsigned char*>(pieces[0]),
                                 static_cast<const unsigned char*>(pieces[0]) + bytes);
  for (std::size_t p = 1; p < pieces.size(); ++p) {
    reduce_into(acc.data(), pieces[p], count, dtype, op);
  }
  if (bytes > 0) std::memcpy(out, acc.data(), bytes);
}

}  // namespace pipewright::exec::detail
