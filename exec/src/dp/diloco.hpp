// DiLoCo and Streaming DiLoCo with torchft's semantics (torchft/local_sgd.py, class DiLoCo and
// _StreamingDiLoCoFragment); see docs/data-parallel.md.
//
// Note [DiLoCo step]
// The trainable float32 parameters of the rank's local stages (stage order, then registration
// order) are split into K fragments of whole tensors, contiguous in that order, of about equal
// element counts. Every replica runs the inner optimizer (--optimizer) each step; with H =
// --sync-every, P = H / K and tau = --fragment-sync-delay, after the optimizer step numbered n
// (0-based; as torchft's hook after inner step n + 1):
//   prepare  when (n + 1 + tau) % P == 0, fragment f = ((n + 1 + tau) / P - 1) % K:
//            g_f = (x_old_f - x_f) / dp (the outer gradient: parameters at the fragment's last
//            sync minus the current ones, pre-divided so that the sum is the average), and the
//            all-reduce (sum) of g_f is started without waiting;
//   perform  when (n + 1) % P == 0, same f: wait for that all-reduce (it overlapped the inner
//            steps n - tau + 1 .. n, none when tau = 0), then x_f <- x_old_f, one step of
//            torch.optim.SGD(lr, momentum, nesterov, dampening 0) on x_old_f with gradient g_f:
//              u <- mu u + g (u starts at 0, so the first step gives u = g, as torch's clone)
//              d <- g + mu u (Nesterov) or u;  x_old_f <- x_old_f - lr d;  x_f <- x_old_f.
// So fragment f is synced after steps (f + 1) P - 1 + m H: fragment i's sync is offset by i H/K.
// As torchft with fragment_update_alpha = 0, the inner steps a fragment took while its
// all-reduce was in flight are replaced by the outer result (replicas agree after each sync).
// With lr 1, momentum 0, K = 1: x = x_old - (x_old - avg x) = avg x, LocalSGD with frequency H
// (to rounding). --outer-dtype bf16 (torchft's should_quantize, with bfloat16): each replica
// rounds g_f to bfloat16 and sends chunk j to replica j (started at prepare); the owner of each
// chunk sums the dp chunks in float32 in replica order, rounds the sum to bfloat16 and sends it
// to every replica (at perform, blocking): half the bytes of a float32 ring all-reduce and the
// same result on every replica.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "dp/dp_algorithm.hpp"

namespace pipewright::exec {

struct DiLoCoOptions {
  std::int64_t sync_every = 100;  // H
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool nesterov = true;
  int fragments = 1;            // K, divides H
  std::int64_t sync_delay = 0;  // tau < H / K
  bool bf16 = false;            // --outer-dtype bf16
  std::int64_t check_replicas = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

class DiLoCo final : public DataParallelAlgorithm {
 public:
  // `dp` is the stage position's data-parallel group; it must outlive this object. Throws
  // ConfigError on invalid options.
  DiLoCo(Communicator* dp, DiLoCoOptions options);
  ~DiLoCo() override;

  // Throws ConfigError when there are fewer trainable tensors than fragments.
  void on_start(std::vector<StageParams>& stages) override;
  void before_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void after_backward(int /*stage*/, int /*microbatch*/, bool /*last*/) override {}
  void reduce_grad(int /*stage*/) override {}
  void after_optimizer_step(std::int64_t step) override;
  [[nodiscard]] DataParallelStats stats() const override { return stats_; }
  // "diloco.x_old", "diloco.u" (all fragments, flat), "diloco.pending" (the averaged outer
  // gradient of a fragment whose all-reduce was in flight, waited for here) and
  // "diloco.pending_fragment" (-1: none).
  [[nodiscard]] std::map<std::string, torch::Tensor> state() const override;
  void load_state(const std::map<std::string, torch::Tensor>& state) override;

  // The fragment whose all-reduce starts / which is synced after `step`, or -1.
  [[nodiscard]] int prepares_after(std::int64_t step) const noexcept;
  [[nodiscard]] int syncs_after(std::int64_t step) const noexcept;
  // [begin, end) of fragment f in the flat parameters (after on_start).
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> fragment_range(int f) const;

 private:
  void prepare(int fragment, std::int64_t step);
  void perform(int fragment, std::int64_t step);
  // Waits for the pending exchange and leaves the averaged outer gradient in pending_g_.
  void finish_exchange() const;
  [[nodiscard]] torch::Tensor flat_fragment(int f) const;
  void set_fragment(int f, const torch::Tensor& flat);

  Communicator* dp_;
  DiLoCoOptions options_;
  std::int64_t period_ = 1;  // P = H / K
  std::vector<StageParams> stages_;
  std::vector<torch::Tensor> trainable_;
  std::vector<std::int64_t> offsets_;      // flat offset of each trainable tensor (+ total)
  std::vector<std::size_t> first_tensor_;  // first tensor of each fragment (+ tensor count)
  torch::Tensor x_old_;                    // parameters at each fragment's last sync, flat
  torch::Tensor u_;                        // outer momentum, flat
  // The exchange in flight (mutable: state() completes it).
  mutable int pending_fragment_ = -1;
  mutable bool pending_done_ = false;
  mutable torch::Tensor pending_g_;              // float32: sum buffer / result
  mutable torch::Tensor send_bf16_, recv_bf16_;  // bf16 exchange buffers
  mutable std::vector<WorkPtr> works_;
  mutable DataParallelStats stats_;
};

}  // namespace pipewright::exec
