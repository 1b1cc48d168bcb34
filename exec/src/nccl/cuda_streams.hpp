// The real StreamOps (nccl_ordering.hpp): a communicator's own high-priority, non-blocking
// communication stream on one device, the caller's compute stream, and CUDA events without
// timing. CUDA runtime only; include only from files compiled with PIPEWRIGHT_WITH_NCCL.
#pragma once

#include <cuda_runtime_api.h>

#include "nccl/nccl_ordering.hpp"

namespace pipewright::exec {

class CudaStreams final : public StreamOps {
 public:
  // Creates the communication stream on `device`. `rank` is for error messages.
  CudaStreams(int device, cudaStream_t compute, int rank);
  ~CudaStreams() override;
  CudaStreams(const CudaStreams&) = delete;
  CudaStreams& operator=(const CudaStreams&) = delete;

  [[nodiscard]] GpuEventPtr record_on_compute() override;
  [[nodiscard]] GpuEventPtr record_on_comm() override;
  void comm_waits_for(const GpuEvent& event) override;
  void compute_waits_for(const GpuEvent& event) override;
  [[nodiscard]] bool is_complete(const GpuEvent& event) override;

  [[nodiscard]] cudaStream_t comm_stream() const noexcept { return comm_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  // Makes `device_` current on the calling thread (every entry point calls it: the interpreter
  // and autograd threads may have another device current).
  void use_device() const;

 private:
  GpuEventPtr record(cudaStream_t stream);
  [[nodiscard]] CallSite site() const;

  int device_;
  cudaStream_t compute_;
  cudaStream_t comm_ = nullptr;
  int rank_;
};

}  // namespace pipewright::exec
