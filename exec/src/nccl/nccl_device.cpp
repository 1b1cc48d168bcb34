#include "nccl/nccl_device.hpp"

#include "pipewright/exec/device_map.hpp"
#include "pipewright/graph/error.hpp"
#if PIPEWRIGHT_WITH_NCCL
#include "nccl/nccl_communicator.hpp"
#endif

namespace pipewright::exec {

int nccl_rank_device(int local_rank, int local_world_size, const std::string& device_map_spec) {
#if PIPEWRIGHT_WITH_NCCL
  std::string why_none;
  const int device_count = cuda_device_count(&why_none);
  return resolve_device(device_map_spec, local_rank, local_world_size, device_count, why_none);
#else
  (void)local_rank;
  (void)local_world_size;
  (void)device_map_spec;
  throw ConfigError(
      "--backend nccl: pipewright was built without NCCL (PIPEWRIGHT_WITH_NCCL=OFF); rebuild "
      "with the CUDA toolkit and NCCL installed (docs/gpu.md)");
#endif
}

std::string bf16_capability_refusal(int device, ComputeCapability cc) {
  if (cc.major >= 8) return "";
  return "--precision bf16: CUDA device " + std::to_string(device) + " has compute capability " +
         std::to_string(cc.major) + "." + std::to_string(cc.minor) +
         "; bfloat16 needs 8.0 or newer (Ampere); use --precision fp16 or fp32";
}

#if !PIPEWRIGHT_WITH_NCCL
// The CUDA runtime's answer is in cuda_streams.cpp, compiled only with PIPEWRIGHT_WITH_NCCL.
std::optional<ComputeCapability> cuda_compute_capability(int device, std::string* why) {
  (void)device;
  if (why != nullptr) *why = "pipewright was built without the CUDA toolkit";
  return std::nullopt;
}
#endif

}  // namespace pipewright::exec
