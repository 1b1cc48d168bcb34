"""Measuring a node's costs with torch on this machine (model-format `cost`).

Times are of a freshly loaded copy of the TorchScript node with the graph executor's
optimisations off, as the executor runs it (Note [Settled timings]), with the intra-op threads of
a `pipewright launch` rank (Note [Measuring threads]), at the given micro batch, on
the inputs it receives in the chained forward: each the median of a round of timed runs
(timing.py: 7 after 3 warm-ups; fewer, at least 3, when they take more than 0.2 s together), the
round with the lowest median of at least 3 rounds taken in turns with the other timings (up to 5
while that round's runs spread over 20%; Note [Rounds in turns] in timing.py). backward_ms is a
full backward (gradients of inputs and parameters together); it is split into input_grad_ms and
weight_grad_ms in the ratio of separately timed autograd.grad w.r.t. the inputs and w.r.t. the
parameters, so that input_grad_ms + weight_grad_ms == backward_ms. activation_bytes = the tensors
autograd saves for backward during the node's forward (torch.autograd.graph.saved_tensors_hooks
on an eager copy), excluding parameters and buffers, each storage counted once.

Note [Settled timings]: TorchScript's graph executor optimises a function during its first calls
(the profiling executor, torch >= 1.10: profile, then specialise to the inputs' shapes and grad
mode and build differentiable subgraphs; again for a new signature, and once more for their
backward graphs). Measured on tiny_llama's layers (torch 1.13, 2.11 and 2.15 alike): the first
three forward calls take 10-70 ms and the second and third backward 35-180 ms, against 0.3-0.8
and 0.5-1.5 ms settled; what a node's timed runs caught depended on the warm-up count and on what
ran it before (the export's check runs it without grad at two batch sizes). The executor runs
nodes with these optimisations off (torch::jit::setGraphExecutorOptimize(false), Note
[TorchScript autograd] in exec/src/model/script_node.hpp), so the costs are timed that way too:
under torch.jit.optimized_execution(False) (a thread-local flag, as in C++), on copies loaded
inside it, because an executor keeps the optimised plan of a function already run with
optimisation on. Then only the first call is slower (building its plan: 1-6 ms; on torch 2.x the
process's first backward also takes 0.6-3.7 s), and the warm-ups absorb it.

Note [Measuring threads]: costs are measured with OMP_NUM_THREADS intra-op threads when it is
set, else with one: the rule by which `pipewright launch` runs ranks (OMP_NUM_THREADS=1 unless
set; tools/cli/cmd_launch.cpp). Torch's own default is one thread per core (pip torch 2.x; Debian's
1.13 starts with one), and then, on a machine with other work, an OpenMP parallel region waits
for a team thread the kernel has not scheduled: tiny_llama's layers took 200-300 ms per forward
for seconds at a time on 2 busy cores (0.3 ms with one thread), which is most of what issue 32
saw under torch 2.15.
"""
import contextlib
import os
import copy
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import torch
import torch.nn as nn

from . import script, timing


@dataclass
class Cost:
    forward_ms: float
    backward_ms: float
    input_grad_ms: float
    weight_grad_ms: float
    param_bytes: int
    activation_bytes: int
    output_bytes: int
    forward_spread: float  # timing.Timing.spread of forward_ms; not in model.json
    backward_spread: float  # the same of backward_ms
    unsettled: Tuple[str, ...] = ()  # "forward" / "backward": still spread after the re-measures

    def as_json(self) -> Dict[str, float]:
        return {"forward_ms": round(self.forward_ms, 6), "backward_ms": round(self.backward_ms, 6),
                "input_grad_ms": round(self.input_grad_ms, 6),
                "weight_grad_ms": round(self.backward_ms, 6) - round(self.input_grad_ms, 6),
                "param_bytes": self.param_bytes, "activation_bytes": self.activation_bytes,
                "output_bytes": self.output_bytes}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _as_list(out: object) -> List[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]  # type: ignore[list-item]


def activation_bytes(eager: nn.Module, args: Sequence[torch.Tensor]) -> int:
    m = copy.deepcopy(eager)  # running it must not touch the module's buffers
    held: Set[int] = {p.data_ptr() for p in m.parameters()} | {b.data_ptr() for b in m.buffers()}
    seen: Dict[Tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in held:
            seen[(t.data_ptr(), _nbytes(t))] = _nbytes(t)
        return t

    args = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m(*args)
    return sum(seen.values())


@dataclass
class _NodeSeries:
    """The timings of one node: forward, full backward, and the backward w.r.t. the inputs
    alone and the parameters alone (None when there is nothing to differentiate)."""
    forward: timing.Series
    backward: Optional[timing.Series]
    inputs_only: Optional[timing.Series]
    params_only: Optional[timing.Series]

    def all(self) -> List[timing.Series]:
        return [s for s in (self.forward, self.backward, self.inputs_only, self.params_only)
                if s is not None]


def _series(node: torch.jit.ScriptModule, args: Sequence[torch.Tensor]) -> _NodeSeries:
    inputs = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    grad_inputs = [a for a in inputs if a.requires_grad]
    params = [p for p in node.parameters() if p.requires_grad]

    def forward() -> List[torch.Tensor]:
        return [o for o in _as_list(node(*inputs)) if o.requires_grad]

    outs = forward()
    grads = [torch.randn_like(o) for o in outs]

    def grad_of(wrt: List[torch.Tensor]) -> timing.Series:
        def prepare() -> Callable[[], object]:
            o = forward()
            return lambda: torch.autograd.grad(o, wrt, grads, allow_unused=True)
        return timing.Series(prepare)

    fwd = timing.Series(lambda: lambda: node(*inputs))
    if not outs or not (grad_inputs or params):
        return _NodeSeries(fwd, None, None, None)
    return _NodeSeries(fwd, grad_of(grad_inputs + params),
                       grad_of(grad_inputs) if grad_inputs else None,
                       grad_of(params) if params else None)


def _cost(node: torch.jit.ScriptModule, eager: nn.Module, args: Sequence[torch.Tensor],
          series: _NodeSeries, timings: Dict[int, timing.Timing]) -> Cost:
    def ms(s: Optional[timing.Series]) -> timing.Timing:
        return timings[id(s)] if s is not None else timing.Timing(0.0, 0.0, 0, True)

    fwd, bwd = ms(series.forward), ms(series.backward)
    i_ms, w_ms = ms(series.inputs_only).median_ms, ms(series.params_only).median_ms
    input_share = i_ms / (i_ms + w_ms) if i_ms + w_ms > 0 else 0.0
    with torch.no_grad():
        produced = _as_list(node(*args))
    return Cost(
        forward_ms=fwd.median_ms, backward_ms=bwd.median_ms,
        input_grad_ms=bwd.median_ms * input_share,
        weight_grad_ms=bwd.median_ms * (1.0 - input_share),
        param_bytes=sum(_nbytes(p) for p in node.parameters()),
        activation_bytes=activation_bytes(eager, args),
        output_bytes=max(_nbytes(o) for o in produced),
        forward_spread=fwd.spread, backward_spread=bwd.spread,
        unsettled=tuple(k for k, t in (("forward", fwd), ("backward", bwd)) if not t.settled))


def measuring_threads() -> int:
    """Note [Measuring threads]: torch's count when OMP_NUM_THREADS is set (torch read it), else
    1."""
    return torch.get_num_threads() if "OMP_NUM_THREADS" in os.environ else 1


@contextlib.contextmanager
def _intra_op_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure(data: Sequence[bytes], eager: Sequence[nn.Module],
            args: Sequence[Sequence[torch.Tensor]]) -> List[Cost]:
    """Costs of the nodes that torch.jit.save wrote as `data` (loaded here, Note [Settled
    timings]), with measuring_threads() threads, their timings taken in turns (Note [Rounds in
    turns] in timing.py); `eager[i]` is node i as an nn.Module, `args[i]` its inputs at the micro
    batch."""
    with torch.jit.optimized_execution(False), _intra_op_threads(measuring_threads()):
        nodes = [script.load(d) for d in data]
        series = [_series(n, a) for n, a in zip(nodes, args)]
        flat = [s for ns in series for s in ns.all()]
        timings = {id(s): t for s, t in zip(flat, timing.take_in_turns(flat))}
        return [_cost(n, e, a, ns, timings) for n, e, a, ns in zip(nodes, eager, args, series)]
