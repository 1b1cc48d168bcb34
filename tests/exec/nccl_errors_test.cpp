// Error mapping of the NCCL backend: result classification and messages (device-free).
#include <gtest/gtest.h>

#include <string>

#include "nccl/nccl_errors.hpp"
#include "pipewright/graph/error.hpp"

namespace pipewright::exec {
namespace {

TEST(NcclErrors, Classification) {
  EXPECT_EQ(classify_nccl_result(nccl_code::kSuccess), GpuStatus::kOk);
  EXPECT_EQ(classify_nccl_result(nccl_code::kInProgress), GpuStatus::kInProgress);
  EXPECT_EQ(classify_nccl_result(nccl_code::kRemoteError), GpuStatus::kPeerFailure);
  EXPECT_EQ(classify_nccl_result(nccl_code::kSystemError), GpuStatus::kPeerFailure);
  for (int code : {nccl_code::kUnhandledCudaError, nccl_code::kInternalError,
                   nccl_code::kInvalidArgument, nccl_code::kInvalidUsage, 8, 42}) {
    EXPECT_EQ(classify_nccl_result(code), GpuStatus::kError) << code;
  }
  EXPECT_EQ(classify_cuda_result(0), GpuStatus::kOk);
  EXPECT_EQ(classify_cuda_result(100), GpuStatus::kError);  // cudaErrorNoDevice
  EXPECT_EQ(classify_cuda_result(2), GpuStatus::kError);    // cudaErrorMemoryAllocation
}

TEST(NcclErrors, ResultNames) {
  EXPECT_EQ(nccl_result_name(nccl_code::kRemoteError), "ncclRemoteError");
  EXPECT_EQ(nccl_result_name(nccl_code::kInvalidUsage), "ncclInvalidUsage");
  EXPECT_EQ(nccl_result_name(99), "ncclResult 99");
}

TEST(NcclErrors, MessageNamesCallRankPeerAndContext) {
  OpContext ctx;
  ctx.step = 7;
  ctx.stage = 3;
  ctx.microbatch = 2;
  ctx.what = "SEND_F";
  CallSite site;
  site.rank = 1;
  site.peer = 2;
  site.ctx = &ctx;
  EXPECT_EQ(gpu_call_message(GpuApi::kNccl, "ncclSend(buf, n, t, 2, comm, s)", "ncclRemoteError",
                             "remote process exited", site),
            "rank 1: NCCL call ncclSend(buf, n, t, 2, comm, s) with peer rank 2 (SEND_F stage 3 "
            "microbatch 2 step 7) failed: ncclRemoteError (remote process exited)");
}

TEST(NcclErrors, CollectiveMessageNamesTheGroup) {
  CallSite site;
  site.rank = 0;
  site.group = {0, 2, 4};
  EXPECT_EQ(gpu_call_message(GpuApi::kCuda, "cudaMalloc(&p, 4)", "cudaErrorMemoryAllocation",
                             "out of memory", site),
            "rank 0: CUDA call cudaMalloc(&p, 4) in group [0, 2, 4] failed: "
            "cudaErrorMemoryAllocation (out of memory)");
  EXPECT_EQ(
      gpu_call_message(GpuApi::kCuda, "cudaSetDevice(3)", "cudaErrorInvalidDevice", "", CallSite{}),
      "CUDA call cudaSetDevice(3) failed: cudaErrorInvalidDevice");
}

TEST(NcclErrors, PeerFailureIsPeerErrorAndExitsThree) {
  CallSite site;
  site.rank = 3;
  site.peer = 0;
  try {
    throw_gpu_error(GpuApi::kNccl, GpuStatus::kPeerFailure, "ncclRecv(...)", "ncclRemoteError", "",
                    site);
  } catch (const PeerError& e) {
    EXPECT_EQ(exit_code_for(e), 3);
    EXPECT_NE(std::string(e.what()).find("rank 3: NCCL call ncclRecv(...) with peer rank 0"),
              std::string::npos);
  }
  try {
    throw_gpu_error(GpuApi::kNccl, GpuStatus::kError, "ncclAllReduce(...)", "ncclInvalidUsage", "",
                    site);
  } catch (const PeerError&) {
    ADD_FAILURE() << "a usage error is not a peer failure";
  } catch (const BackendError& e) {
    EXPECT_EQ(exit_code_for(e), 1);
  }
}

}  // namespace
}  // namespace pipewright::exec
