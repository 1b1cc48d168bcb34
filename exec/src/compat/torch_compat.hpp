// Note [libtorch versions]: the executor builds against Debian's libtorch 1.13 and against the
// libtorch inside pip torch 2.x wheels (cmake/PipewrightTorch.cmake). Every difference between
// them that pipewright's code meets is written here, once, so that no other file tests a torch
// version. What differs:
// - Autograd nodes are held by std::shared_ptr<Node> in 1.13 and by c10::intrusive_ptr<Node> in
//   2.x (Tensor::grad_fn(), impl::grad_accumulator(), Edge::function): use NodePtr.
// - c10d::Store gained pure virtuals in 2.x (clone()): a Store subclass adds
//   PW_C10D_STORE_CLONE(Self) to its body.
// - Autocast's thread-local switches: per device type in 2.x (set_autocast_enabled(kCPU, ...)),
//   one function per device in 1.13 (set_cpu_enabled): use AutocastGuard.
// - Optimizer::state() is keyed by the TensorImpl's address printed as a string in 1.13 and by
//   the address itself in 2.x: use optimizer_state_key(param).
// - The version itself: kTorchVersion ("2.15.0"), compared with the torch that wrote a node file
//   (Note [Node files from a newer torch] in model/script_node.cpp).
// Torch headers only: include this from the .cpp files that already include torch.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace pipewright::exec::compat {

inline constexpr int kTorchMajor = TORCH_VERSION_MAJOR;
inline constexpr int kTorchMinor = TORCH_VERSION_MINOR;
inline constexpr int kTorchPatch = TORCH_VERSION_PATCH;

// The owning pointer type of an autograd Node in this libtorch.
using NodePtr = std::decay_t<decltype(std::declval<const at::Tensor&>().grad_fn())>;

// Whether CPU autocast can compute in float16: 1.13's CPU autocast knows bfloat16 only (and its
// CPU kernels lack float16 matmuls); 2.x has both.
inline constexpr bool kCpuAutocastFp16 = TORCH_VERSION_MAJOR >= 2;

// torch.autocast(device_type, dtype) as a scope: sets the thread's autocast state for `device`
// (CPU or CUDA), and on leaving restores it and, when it was the outermost autocast scope,
// clears the cache of casted weights, as torch.autocast.__exit__ does. `enabled` false: no-op.
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device, at::ScalarType dtype, bool enabled)
      : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    prev_enabled_ = is_enabled(device_);
    prev_dtype_ = get_dtype(device_);
    set_dtype(device_, dtype);
    set_enabled(device_, true);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_enabled(device_, prev_enabled_);
    set_dtype(device_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
#if TORCH_VERSION_MAJOR >= 2
  static bool is_enabled(at::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
  static void set_enabled(at::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
  static at::ScalarType get_dtype(at::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
  static void set_dtype(at::DeviceType d, at::ScalarType t) {
    at::autocast::set_autocast_dtype(d, t);
  }
#else
  static bool is_enabled(at::DeviceType d) {
    return d == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
  }
  static void set_enabled(at::DeviceType d, bool on) {
    if (d == at::kCUDA) {
      at::autocast::set_enabled(on);
    } else {
      at::autocast::set_cpu_enabled(on);
    }
  }
  static at::ScalarType get_dtype(at::DeviceType d) {
    return d == at::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                          : at::autocast::get_autocast_cpu_dtype();
  }
  static void set_dtype(at::DeviceType d, at::ScalarType t) {
    if (d == at::kCUDA) {
      at::autocast::set_autocast_gpu_dtype(t);
    } else {
      at::autocast::set_autocast_cpu_dtype(t);
    }
  }
#endif
  at::DeviceType device_;
  bool enabled_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kFloat;
};

// One autocast cache for a whole scope (a training step): while it lives, leaving an
// AutocastGuard does not clear the cache of 16-bit weight copies, so the forwards of every
// microbatch share them; they are cleared when it ends (the weights change at OPTIM).
class AutocastCacheScope {
 public:
  explicit AutocastCacheScope(bool enabled) : enabled_(enabled) {
    if (enabled_) at::autocast::increment_nesting();
  }
  ~AutocastCacheScope() {
    if (enabled_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  }
  AutocastCacheScope(const AutocastCacheScope&) = delete;
  AutocastCacheScope& operator=(const AutocastCacheScope&) = delete;

 private:
  bool enabled_;
};

using OptimizerStateKey =
    typename std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

// The key of `param`'s entry in Optimizer::state() (what libtorch's own optimizers use).
template <typename Key = OptimizerStateKey>
Key optimizer_state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << static_cast<const void*>(param.unsafeGetTensorImpl());
    return os.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace pipewright::exec::compat

#if TORCH_VERSION_MAJOR >= 2
// c10d::Store::clone(): a second handle on the same store, for c10d's background threads. The
// adapter is stateless beyond the store it forwards to, so a clone forwards to the same one.
#define PW_C10D_STORE_CLONE(Self) \
  c10::intrusive_ptr<c10d::Store> clone() override { return c10::make_intrusive<Self>(*this); }
#else
#define PW_C10D_STORE_CLONE(Self)
#endif
