// PW_GPU_CHECK: the one macro through which every CUDA runtime and NCCL call of the NCCL backend
// goes. It throws BackendError (PeerError for ncclRemoteError / ncclSystemError) naming the
// call, the rank and the peer (nccl_errors.hpp builds the message), and returns true when a
// non-blocking NCCL communicator answered ncclInProgress (the caller then polls, see
// Note [NCCL stream ordering]). Needs the CUDA and NCCL headers: include only from exec/src
// files compiled with PIPEWRIGHT_WITH_NCCL (never from a torch TU or a public header).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "nccl/nccl_errors.hpp"

namespace pipewright::exec {

static_assert(ncclSuccess == nccl_code::kSuccess && ncclSystemError == nccl_code::kSystemError &&
                  ncclRemoteError == nccl_code::kRemoteError &&
                  ncclInProgress == nccl_code::kInProgress &&
                  ncclInvalidUsage == nccl_code::kInvalidUsage,
              "nccl_errors.hpp's copy of ncclResult_t is out of date");

inline bool gpu_check(cudaError_t result, const char* call, const CallSite& site) {
  if (result == cudaSuccess) return false;
  (void)cudaGetLastError();  // clear a non-sticky error so the next call does not report it
  throw_gpu_error(GpuApi::kCuda, classify_cuda_result(static_cast<int>(result)), call,
                  cudaGetErrorName(result), cudaGetErrorString(result), site);
}

inline bool gpu_check(ncclResult_t result, const char* call, const CallSite& site) {
  const GpuStatus status = classify_nccl_result(static_cast<int>(result));
  if (status == GpuStatus::kOk) return false;
  if (status == GpuStatus::kInProgress) return true;
  std::string detail = ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') detail += "; NCCL says: " + std::string(last);
  throw_gpu_error(GpuApi::kNccl, status, call, nccl_result_name(static_cast<int>(result)), detail,
                  site);
}

}  // namespace pipewright::exec

#define PW_GPU_CHECK(call, site) ::pipewright::exec::gpu_check((call), #call, (site))
