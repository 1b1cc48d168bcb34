#include "nccl/nccl_errors.hpp"

#include <sstream>

#include "pipewright/graph/error.hpp"

namespace pipewright::exec {

GpuStatus classify_nccl_result(int code) noexcept {
  switch (code) {
    case nccl_code::kSuccess:
      return GpuStatus::kOk;
    case nccl_code::kInProgress:
      return GpuStatus::kInProgress;
    case nccl_code::kRemoteError:
    case nccl_code::kSystemError:
      return GpuStatus::kPeerFailure;
    default:
      return GpuStatus::kError;
  }
}

GpuStatus classify_cuda_result(int code) noexcept {
  return code == 0 ? GpuStatus::kOk : GpuStatus::kError;
}

std::string nccl_result_name(int code) {
  switch (code) {
    case nccl_code::kSuccess:
      return "ncclSuccess";
    case nccl_code::kUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case nccl_code::kSystemError:
      return "ncclSystemError";
    case nccl_code::kInternalError:
      return "ncclInternalError";
    case nccl_code::kInvalidArgument:
      return "ncclInvalidArgument";
    case nccl_code::kInvalidUsage:
      return "ncclInvalidUsage";
    case nccl_code::kRemoteError:
      return "ncclRemoteError";
    case nccl_code::kInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult " + std::to_string(code);
  }
}

std::string gpu_call_message(GpuApi api, const std::string& call, const std::string& code_name,
                             const std::string& detail, const CallSite& site) {
  std::ostringstream os;
  if (site.rank >= 0) os << "rank " << site.rank << ": ";
  os << (api == GpuApi::kNccl ? "NCCL" : "CUDA") << " call " << call;
  if (site.peer >= 0) {
    os << " with peer rank " << site.peer;
  } else if (!site.group.empty()) {
    os << " in group [";
    for (std::size_t i = 0; i < site.group.size(); ++i) os << (i ? ", " : "") << site.group[i];
    os << "]";
  }
  if (site.ctx != nullptr) os << " (" << site.ctx->describe() << ")";
  os << " failed: " << code_name;
  if (!detail.empty()) os << " (" << detail << ")";
  return os.str();
}

void throw_gpu_error(GpuApi api, GpuStatus status, const std::string& call,
                     const std::string& code_name, const std::string& detail,
                     const CallSite& site) {
  const std::string message = gpu_call_message(api, call, code_name, detail, site);
  if (status == GpuStatus::kPeerFailure) throw PeerError(message);
  throw BackendError(message);
}

}  // namespace pipewright::exec
