#include "nccl/cuda_streams.hpp"

#include "nccl/nccl_check.hpp"
#include "nccl/nccl_device.hpp"

namespace pipewright::exec {

namespace {

class CudaEvent final : public GpuEvent {
 public:
  explicit CudaEvent(const CallSite& site) {
    PW_GPU_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), site);
  }
  ~CudaEvent() override { (void)cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  [[nodiscard]] cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

cudaEvent_t raw(const GpuEvent& event) {
  // Every GpuEvent a CudaStreams sees was made by a CudaStreams.
  return static_cast<const CudaEvent&>(event).get();
}

}  // namespace

CudaStreams::CudaStreams(int device, cudaStream_t compute, int rank)
    : device_(device), compute_(compute), rank_(rank) {
  use_device();
  int least = 0;
  int greatest = 0;
  PW_GPU_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), site());
  // Non-blocking: no implicit synchronisation with the legacy default stream (torch's compute
  // stream), which would serialise communication with backward. High priority: a ready
  // all-reduce kernel should not queue behind compute kernels.
  PW_GPU_CHECK(cudaStreamCreateWithPriority(&comm_, cudaStreamNonBlocking, greatest), site());
}

CudaStreams::~CudaStreams() {
  if (comm_ != nullptr) {
    (void)cudaSetDevice(device_);
    (void)cudaStreamDestroy(comm_);
  }
}

CallSite CudaStreams::site() const {
  CallSite s;
  s.rank = rank_;
  return s;
}

void CudaStreams::use_device() const { PW_GPU_CHECK(cudaSetDevice(device_), site()); }

GpuEventPtr CudaStreams::record(cudaStream_t stream) {
  use_device();
  auto event = std::make_shared<CudaEvent>(site());
  PW_GPU_CHECK(cudaEventRecord(event->get(), stream), site());
  return event;
}

GpuEventPtr CudaStreams::record_on_compute() { return record(compute_); }
GpuEventPtr CudaStreams::record_on_comm() { return record(comm_); }

void CudaStreams::comm_waits_for(const GpuEvent& event) {
  PW_GPU_CHECK(cudaStreamWaitEvent(comm_, raw(event), 0), site());
}

void CudaStreams::compute_waits_for(const GpuEvent& event) {
  use_device();
  PW_GPU_CHECK(cudaStreamWaitEvent(compute_, raw(event), 0), site());
}

bool CudaStreams::is_complete(const GpuEvent& event) {
  const cudaError_t result = cudaEventQuery(raw(event));
  if (result == cudaErrorNotReady) return false;
  gpu_check(result, "cudaEventQuery(event)", site());
  return true;
}

// Note [bf16 device check] (nccl_device.hpp).
std::optional<ComputeCapability> cuda_compute_capability(int device, std::string* why) {
  ComputeCapability cc;
  cudaError_t e = cudaDeviceGetAttribute(&cc.major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess) {
    e = cudaDeviceGetAttribute(&cc.minor, cudaDevAttrComputeCapabilityMinor, device);
  }
  if (e != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaDeviceGetAttribute: ") + cudaGetErrorString(e);
    return std::nullopt;
  }
  return cc;
}

}  // namespace pipewright::exec
