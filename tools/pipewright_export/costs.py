"""Measuring a node's costs with torch on this machine (model-format `cost`).

Times are medians over `runs` (fewer, at least 3, when they take more than 0.2 s together)
after `warmup` runs, of the loaded TorchScript node at the given micro batch, on the inputs it receives in the chained forward. backward_ms is a full backward
(gradients of inputs and parameters together); it is split into input_grad_ms and weight_grad_ms
in the ratio of separately timed autograd.grad w.r.t. the inputs and w.r.t. the parameters, so
that input_grad_ms + weight_grad_ms == backward_ms. activation_bytes = the tensors autograd saves
for backward during the node's forward (torch.autograd.graph.saved_tensors_hooks on an eager
copy), excluding parameters and buffers, each storage counted once.
"""
import copy
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Set, Tuple

import torch
import torch.nn as nn


@dataclass
class Cost:
    forward_ms: float
    backward_ms: float
    input_grad_ms: float
    weight_grad_ms: float
    param_bytes: int
    activation_bytes: int
    output_bytes: int

    def as_json(self) -> Dict[str, float]:
        return {"forward_ms": round(self.forward_ms, 6), "backward_ms": round(self.backward_ms, 6),
                "input_grad_ms": round(self.input_grad_ms, 6),
                "weight_grad_ms": round(self.backward_ms, 6) - round(self.input_grad_ms, 6),
                "param_bytes": self.param_bytes, "activation_bytes": self.activation_bytes,
                "output_bytes": self.output_bytes}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# Timed runs per measurement: `runs`, but no more than fit in this budget (at least
# MIN_RUNS), so that big nodes do not make the export slow.
BUDGET_S = 0.2
MIN_RUNS = 3


def _median_ms(run: Callable[[], Callable[[], object]], runs: int, warmup: int) -> float:
    """`run()` prepares (untimed) and returns the callable to time; median of the timed runs
    after `warmup` untimed ones."""
    samples = []
    for k in range(warmup + runs):
        fn = run()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if k >= warmup:
            samples.append(dt * 1e3)
            if len(samples) >= MIN_RUNS and sum(samples) >= BUDGET_S * 1e3:
                break
    return statistics.median(samples)


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


def measure(node: torch.jit.ScriptModule, eager: nn.Module, args: Sequence[torch.Tensor],
            runs: int = 7, warmup: int = 3) -> Cost:
    inputs = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    grad_inputs = [a for a in inputs if a.requires_grad]
    params = [p for p in node.parameters() if p.requires_grad]

    def forward() -> List[torch.Tensor]:
        return [o for o in _as_list(node(*inputs)) if o.requires_grad]

    outs = forward()
    grads = [torch.randn_like(o) for o in outs]

    def grad_of(wrt: List[torch.Tensor]) -> Callable[[], Callable[[], object]]:
        def prepare() -> Callable[[], object]:
            o = forward()
            return lambda: torch.autograd.grad(o, wrt, grads, allow_unused=True)
        return prepare

    fwd = _median_ms(lambda: lambda: node(*inputs), runs, warmup)
    bwd = i_ms = w_ms = 0.0
    if outs and (grad_inputs or params):
        bwd = _median_ms(grad_of(grad_inputs + params), runs, warmup)
        i_ms = _median_ms(grad_of(grad_inputs), runs, warmup) if grad_inputs else 0.0
        w_ms = _median_ms(grad_of(params), runs, warmup) if params else 0.0
    input_share = i_ms / (i_ms + w_ms) if i_ms + w_ms > 0 else 0.0
    with torch.no_grad():
        produced = _as_list(node(*args))
    return Cost(
        forward_ms=fwd, backward_ms=bwd, input_grad_ms=bwd * input_share,
        weight_grad_ms=bwd * (1.0 - input_share),
        param_bytes=sum(_nbytes(p) for p in node.parameters()),
        activation_bytes=activation_bytes(eager, args),
        output_bytes=max(_nbytes(o) for o in produced))
