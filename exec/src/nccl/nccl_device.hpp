// The CUDA device of this rank with --backend nccl, decided before any stage is built or any
// peer is contacted, so that a node without enough devices (or a build without NCCL) fails with
// exit 2 and the reason before training.
#pragma once

#include <optional>
#include <string>

namespace pipewright::exec {

// Throws ConfigError: "pipewright was built without NCCL ..." in a build without NCCL;
// "--backend nccl needs 2 CUDA devices on this node for 2 local ranks; found 0 (...)" when the
// node has fewer CUDA devices than local ranks; a bad --device-map (parse_device_map()).
[[nodiscard]] int nccl_rank_device(int local_rank, int local_world_size,
                                   const std::string& device_map_spec);

// Note [bf16 device check] (issue 44): --precision bf16 on a CUDA device needs compute capability
// 8.0 or newer (Ampere: bf16 tensor cores), torch.cuda.is_bf16_supported()'s rule. The check
// reads the capability from the CUDA runtime where the build has it (PIPEWRIGHT_WITH_NCCL); a
// bf16 matmul that merely runs is no proof, since libtorch may emulate bf16 on older devices.
// Builds without the CUDA toolkit fall back to that probe (run_setup.cpp).
struct ComputeCapability {
  int major = 0;
  int minor = 0;
};

// The capability of CUDA device `device` from the CUDA runtime; std::nullopt in a build without
// the CUDA toolkit, or when the runtime cannot answer (`why`, when given, says which).
[[nodiscard]] std::optional<ComputeCapability> cuda_compute_capability(int device,
                                                                       std::string* why = nullptr);

// Empty when `cc` computes in bfloat16 (>= 8.0); otherwise the ConfigError message for
// --precision bf16 on CUDA device `device`, naming the capability found and the need.
[[nodiscard]] std::string bf16_capability_refusal(int device, ComputeCapability cc);

}  // namespace pipewright::exec
