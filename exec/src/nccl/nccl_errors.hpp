// Device-free half of the NCCL backend's error handling: how a CUDA or NCCL result code is
// classified and which pipewright exception (and message) it becomes. The macro that checks every
// call (PW_GPU_CHECK) lives in nccl_check.hpp, which needs the CUDA and NCCL headers; everything
// it decides is here, so it is unit-tested on machines without CUDA.
#pragma once

#include <string>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

enum class GpuApi : unsigned char { kCuda, kNccl };

// What a result code means for the caller.
enum class GpuStatus : unsigned char {
  kOk,           // success
  kInProgress,   // non-blocking NCCL communicator: the call is still being processed
  kPeerFailure,  // a remote rank failed or the network between us broke -> PeerError
  kError,        // anything else -> BackendError
};

// ncclResult_t values (nccl.h; nccl_check.hpp static_asserts that they match) so that this file
// needs no NCCL header.
namespace nccl_code {
inline constexpr int kSuccess = 0;
inline constexpr int kUnhandledCudaError = 1;
inline constexpr int kSystemError = 2;
inline constexpr int kInternalError = 3;
inline constexpr int kInvalidArgument = 4;
inline constexpr int kInvalidUsage = 5;
inline constexpr int kRemoteError = 6;
inline constexpr int kInProgress = 7;
}  // namespace nccl_code

// ncclRemoteError ("remote process exited or there was a network error") and ncclSystemError
// (a socket or other system call failed, which is how NCCL usually sees a peer that died) are
// peer failures; every CUDA error and every other NCCL error is a backend error.
[[nodiscard]] GpuStatus classify_nccl_result(int code) noexcept;
[[nodiscard]] GpuStatus classify_cuda_result(int code) noexcept;  // 0 = cudaSuccess
// "ncclRemoteError"; "ncclResult 42" for codes this version does not know.
[[nodiscard]] std::string nccl_result_name(int code);

// Where a checked call was made, for the message. Ranks are global (world) ranks.
struct CallSite {
  int rank = -1;           // this process
  int peer = -1;           // the peer of a point-to-point call, -1 for none / collectives
  std::vector<int> group;  // the communicator's members, named when there is no single peer
  const OpContext* ctx = nullptr;
};

// "rank 1: ncclSend(...) with peer rank 2 (SEND_F stage 1 microbatch 0 step 3) failed:
//  ncclRemoteError (remote process exited or there was a network error)"
[[nodiscard]] std::string gpu_call_message(GpuApi api, const std::string& call,
                                           const std::string& code_name, const std::string& detail,
                                           const CallSite& site);

// Throws PeerError for kPeerFailure and BackendError otherwise, with gpu_call_message().
[[noreturn]] void throw_gpu_error(GpuApi api, GpuStatus status, const std::string& call,
                                  const std::string& code_name, const std::string& detail,
                                  const CallSite& site);

}  // namespace pipewright::exec
