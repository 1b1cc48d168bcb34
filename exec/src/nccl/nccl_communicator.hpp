// The NCCL Communicator backend (built when PIPEWRIGHT_WITH_NCCL is ON). This header names no
// CUDA or NCCL type, so the factory and the executor can include it; the implementation
// (nccl_communicator.cpp) uses only the CUDA runtime and NCCL on BufferView pointers, never torch.
//
// Semantics beyond communicator.hpp:
//   - buffers are CUDA buffers on the communicator's device, used in place (another device is a
//     BackendError); a CPU buffer is staged through a temporary device buffer (synchronous
//     copies), which is for small start-up messages such as the interpreter's shape headers,
//     never for the hot path;
//   - NCCL matches point-to-point messages between a pair in posting order: `tag` is not sent,
//     so both sides must post their sends/recvs to each other in the same order (the lowered
//     plans do); paired p2p of one step go between begin_p2p_batch()/end_p2p_batch()
//     (ncclGroupStart/End) so that rendezvous sends cannot deadlock;
//   - ordering against the compute stream, Work completion, timeouts and aborts follow
//     Note [NCCL stream ordering] in nccl_ordering.hpp; after a timeout or a peer failure the
//     communicator is aborted and every later call throws the same error;
//   - split() uses ncclCommSplit (NCCL >= 2.18) or else a new unique id through the store.
// Not thread-safe: one thread at a time per communicator (as the interpreter uses it).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipewright/exec/communicator.hpp"

namespace pipewright::exec {

struct NcclOptions {
  int rank = 0;    // rank in the world communicator
  int size = 1;    // world size
  int device = 0;  // CUDA ordinal (resolve_device() in pipewright/exec/device_map.hpp)
  std::chrono::milliseconds timeout{300000};  // init, enqueue and teardown deadline
  // The rendezvous store: rank 0 publishes the NCCL unique id with `store_set`, the other ranks
  // read it with `store_get` (which blocks until the key exists or throws TimeoutError).
  std::function<void(const std::string& key, const std::string& value)> store_set;
  std::function<std::string(const std::string& key)> store_get;
  std::string key_prefix = "pipewright/nccl";
  // The compute stream (a cudaStream_t) that operations are ordered against; nullptr is the
  // device's legacy default stream, which is torch's default current stream.
  void* compute_stream = nullptr;
};

// Creates the world communicator (collective over all ranks). Throws TimeoutError when the
// unique id or a peer does not arrive in time, BackendError when CUDA or NCCL fail.
[[nodiscard]] std::unique_ptr<Communicator> make_nccl_communicator(const NcclOptions& options);

// One communicator per entry of `devices` (rank i on devices[i]) in this process, like
// ncclCommInitAll: the collective init runs on one thread per rank and the unique id goes
// through an in-process store. For single-process multi-GPU use (bench/nccl_bench, GPU tests);
// each returned communicator must then be driven by its own thread, since NCCL operations are
// collective. Rethrows the first rank's failure.
[[nodiscard]] std::vector<std::unique_ptr<Communicator>> make_local_nccl_communicators(
    const std::vector<int>& devices, std::chrono::milliseconds timeout);

// Number of CUDA devices visible to this process; 0 when there is no driver or no device, with
// the runtime's reason in *detail ("cudaErrorNoDevice: no CUDA-capable device is detected").
[[nodiscard]] int cuda_device_count(std::string* detail = nullptr);

// NCCL version of the linked library, "2.28.9".
[[nodiscard]] std::string nccl_version();

}  // namespace pipewright::exec
