// Note [libtorch versions]: the executor builds against Debian's libtorch 1.13 and against the
// libtorch inside pip torch 2.x wheels (cmake/PipewrightTorch.cmake). Every difference between
// them that pipewright's code meets is written here, once, so that no other file tests a torch
// version. What differs:
// - Autograd nodes are held by std::shared_ptr<Node> in 1.13 and by c10::intrusive_ptr<Node> in
//   2.x (Tensor::grad_fn(), impl::grad_accumulator(), Edge::function): use NodePtr.
// - c10d::Store gained pure virtuals in 2.x (clone()): a Store subclass adds
//   PW_C10D_STORE_CLONE(Self) to its body.
// - The version itself: kTorchVersion ("2.15.0"), compared with the torch that wrote a node file
//   (Note [Node files from a newer torch] in model/script_node.cpp).
// Torch headers only: include this from the .cpp files that already include torch.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

#include <type_traits>
#include <utility>

namespace pipewright::exec::compat {

inline constexpr int kTorchMajor = TORCH_VERSION_MAJOR;
inline constexpr int kTorchMinor = TORCH_VERSION_MINOR;
inline constexpr int kTorchPatch = TORCH_VERSION_PATCH;

// The owning pointer type of an autograd Node in this libtorch.
using NodePtr = std::decay_t<decltype(std::declval<const at::Tensor&>().grad_fn())>;

}  // namespace pipewright::exec::compat

#if TORCH_VERSION_MAJOR >= 2
// c10d::Store::clone(): a second handle on the same store, for c10d's background threads. The
// adapter is stateless beyond the store it forwards to, so a clone forwards to the same one.
#define PW_C10D_STORE_CLONE(Self) \
  c10::intrusive_ptr<c10d::Store> clone() override { return c10::make_intrusive<Self>(*this); }
#else
#define PW_C10D_STORE_CLONE(Self)
#endif
