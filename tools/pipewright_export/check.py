"""Chaining the exported nodes the way the executor will (edges; model inputs into input slots
that no node produces) and comparing with the module's own forward."""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx as fx

from .probe import RUN_SEED
from .partition import Partition


def node_args(part: Partition, i: int, model_inputs: Sequence[torch.Tensor],
              produced: Dict[Tuple[int, int], torch.Tensor]) -> List[torch.Tensor]:
    args = []
    for v in part.plans[i].inputs:
        s = part.sources[v]
        args.append(model_inputs[s[1]] if s[0] == "input" else produced[(s[1], s[2])])
    return args


def run_chain(modules: Sequence[Any], part: Partition, model_inputs: Sequence[torch.Tensor]
              ) -> Tuple[Dict[Tuple[int, int], torch.Tensor], List[List[torch.Tensor]]]:
    """Runs every node in order; returns all outputs by (node, output) and each node's args."""
    produced: Dict[Tuple[int, int], torch.Tensor] = {}
    all_args: List[List[torch.Tensor]] = []
    torch.manual_seed(RUN_SEED)
    with torch.no_grad():
        for i, (m, plan) in enumerate(zip(modules, part.plans)):
            args = node_args(part, i, model_inputs, produced)
            all_args.append(args)
            out = m(*args)
            outs = [out] if len(plan.outputs) == 1 else list(out)
            for j, o in enumerate(outs):
                produced[(i, j)] = o
    return produced, all_args


@dataclass
class Agreement:
    max_abs_diff: float  # of the final output
    worst_node: Optional[str]  # the first node whose outputs differ by more than tolerance
    worst_diff: float


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    return (a.double() - b.double()).abs().max().item()


def compare(part: Partition, produced: Dict[Tuple[int, int], torch.Tensor],
            expected: Dict[fx.Node, Any], tolerance: float) -> Agreement:
    worst_node, worst = None, 0.0
    for i, plan in enumerate(part.plans):
        for j, v in enumerate(plan.outputs):
            d = max_diff(produced[(i, j)], expected[v])
            if d > tolerance and worst_node is None:
                worst_node, worst = plan.name, d
    last = len(part.plans) - 1
    return Agreement(max_diff(produced[(last, 0)], expected[part.plans[last].outputs[0]]),
                     worst_node, worst)
