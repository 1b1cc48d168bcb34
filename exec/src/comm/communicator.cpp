#include "pipewright/exec/communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kFloat16:
      return 2;
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt64:
      return "int64";
    case DType::kInt32:
      return "int32";
    case DType::kUInt8:
      return "uint8";
  }
  return "?";
}

std::string OpContext::describe() const {
  std::ostringstream os;
  os << (what.empty() ? std::string("operation") : what);
  if (stage >= 0) os << " stage " << stage;
  if (microbatch >= 0) os << " microbatch " << microbatch;
  if (step >= 0) os << " step " << step;
  return os.str();
}

namespace {
class CompletedWork final : public Work {
 public:
  void wait(std::chrono::milliseconds /*timeout*/) override {}
  bool is_completed() override { return true; }
};
}  // namespace

WorkPtr completed_work() { return std::make_shared<CompletedWork>(); }

std::shared_ptr<void> Communicator::allocate_collective_buffer(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

WorkPtr Communicator::reduce_scatter(const BufferView& /*in*/, const BufferView& /*out*/,
                                     ReduceOp /*op*/, const OpContext& ctx) {
  throw BackendError("reduce_scatter (" + ctx.describe() + "): the " + backend_name() +
                     " backend has no reduce_scatter");
}

WorkPtr Communicator::all_gather(const BufferView& /*in*/, const BufferView& /*out*/,
                                 const OpContext& ctx) {
  throw BackendError("all_gather (" + ctx.describe() + "): the " + backend_name() +
                     " backend has no all_gather");
}

}  // namespace pipewright::exec
