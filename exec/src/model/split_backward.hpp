// The zero-bubble backward split (issue 22 item 6): I computes a stage's input gradients and
// keeps only what W needs; W computes the weight gradients from it. Private to exec/ (names
// torch types).
//
// Note [Split backward]
// Every path in the autograd graph from a root (a stage output, or the loss) to a parameter's
// AccumulateGrad node crosses the boundary between S -- the nodes whose forward value depends on
// a stage input, i.e. from which an input's gradient edge is reachable -- and the rest, exactly
// once: a node that depends on an input makes everything computed from it depend on it too, so
// S is closed towards the roots. The weight gradient is therefore the sum, over the boundary
// edges (n in S) -> (m not in S), of n's full output gradient pushed through n's local
// derivative into m and on to the parameters, plus, for roots outside S (a stage whose output
// does not depend on a differentiable input, such as the first stage on token ids), the root
// gradient pushed all the way down.
//
// I (backward_input) runs autograd::grad on the inputs with the graph retained; a pre-hook on
// every boundary node n records n's output gradients as they arrive (the engine calls it once,
// after all contributions are summed). Then it cuts n's edges into S (they are invalid from then
// on), so W cannot walk into S again, the graph above the boundary nodes is freed as soon as the
// caller drops its outputs, and n computes only its parameter-side outputs when W re-runs it
// (every generated backward asks task_should_compute_output per edge). W (backward_weight) runs
// the engine once from the boundary nodes (and the roots outside S) with the recorded gradients
// to the parameters, accumulating into .grad, and frees the rest of the graph.
//
// This is torch.distributed.pipelining's stage_backward_input / stage_backward_weight
// (_backward.py), with two differences: one engine call for all of W (torch calls autograd.grad
// per parameter group), and the cut, which also keeps W exact when one parameter feeds two
// boundary nodes of which one lies below the other in S (torch would push the upper one's
// gradient through S into the lower one a second time). Cost: I + W does the work of B plus one
// graph walk and the boundary nodes' dispatch twice (docs/executor.md has the measurement).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace pipewright::exec {

// What W needs after I: the engine roots (boundary nodes and roots outside S) with their
// gradients and the parameters' gradient edges. Holding it keeps the graph below the boundary
// alive; destroying it (or backward_weight) frees it.
class WeightBackward {
 public:
  WeightBackward();
  ~WeightBackward();
  WeightBackward(WeightBackward&&) noexcept;
  WeightBackward& operator=(WeightBackward&&) noexcept;
  WeightBackward(const WeightBackward&) = delete;
  WeightBackward& operator=(const WeightBackward&) = delete;

  // True when backward_weight has nothing to do (no parameter is reachable).
  [[nodiscard]] bool empty() const noexcept;

 private:
  friend std::vector<torch::Tensor> backward_input(const std::vector<torch::Tensor>&,
                                                   const std::vector<torch::Tensor>&,
                                                   const std::vector<torch::Tensor>&,
                                                   const std::vector<torch::Tensor>&,
                                                   WeightBackward*);
  friend void backward_weight(WeightBackward& pending);
  struct State;
  std::unique_ptr<State> state_;
};

// I: the gradients of `inputs` (one per entry; undefined for an input that does not require grad
// or that the roots do not depend on), with `roots` (tensors requiring grad) seeded by `grads`
// (an undefined entry: ones, for a scalar loss). `params` are the tensors W differentiates.
// Fills `pending` for backward_weight. After it, the roots' graph must not be used for anything
// but backward_weight (Note [Split backward]: it has been cut).
[[nodiscard]] std::vector<torch::Tensor> backward_input(const std::vector<torch::Tensor>& roots,
                                                        const std::vector<torch::Tensor>& grads,
                                                        const std::vector<torch::Tensor>& inputs,
                                                        const std::vector<torch::Tensor>& params,
                                                        WeightBackward* pending);

// W: accumulates the parameters' gradients (into .grad, as autograd::backward does) and frees
// what `pending` held. Runs at most once per backward_input.
void backward_weight(WeightBackward& pending);

}  // namespace pipewright::exec
