"""Running the module and its captured graph on random batches: the values every fx node
takes (to cut the graph, type the nodes' inputs and outputs, and check the export), and the
sizes that do not follow the batch, folded into constants."""
import copy
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.fx as fx
import torch.nn as nn

from .errors import ExportError
from .inputs import InputSpec
from .loading import last_traceback_line

DTYPES: Dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "int64": torch.int64,
    "bool": torch.bool,
}
DTYPE_NAMES: Dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}


# Every run that is compared with another starts from this seed, so that random ops (dropout)
# draw the same numbers in the module, its fx graph and the chained nodes (the same ops run in
# the same order).
RUN_SEED = 1234


def make_inputs(specs: Sequence[InputSpec], batch: int, seed: int, int_high: int
                ) -> List[torch.Tensor]:
    """A random batch: floats ~ N(0, 1), integers uniform in [0, int_high), bools fair."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in specs:
        shape = (batch,) + tuple(s.shape)
        dt = DTYPES[s.dtype]
        if dt.is_floating_point:
            out.append(torch.randn(shape, generator=g, dtype=dt))
        elif dt == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=g).bool())
        else:
            out.append(torch.randint(0, int_high, shape, generator=g, dtype=dt))
    return out


def int_input_range(root: nn.Module) -> int:
    """Integer model inputs are drawn below the smallest nn.Embedding's size (token ids)."""
    sizes = [m.num_embeddings for m in root.modules() if isinstance(m, nn.Embedding)]
    return min(sizes) if sizes else 2


def describe_inputs(inputs: Sequence[torch.Tensor]) -> str:
    return ", ".join(f"{list(t.shape)} {DTYPE_NAMES.get(t.dtype, str(t.dtype))}" for t in inputs)


def check_forward_runs(root: nn.Module, inputs: Sequence[torch.Tensor]) -> Any:
    """Runs a copy of the module (its buffers stay untouched) and returns the output; the
    module's own error, with the shapes given, when they do not fit."""
    try:
        with torch.no_grad():
            torch.manual_seed(RUN_SEED)
            return copy.deepcopy(root)(*inputs)
    except Exception as e:  # noqa: BLE001
        raise ExportError(
            f"{type(root).__name__}.forward fails on input(s) of shape {describe_inputs(inputs)} "
            f"(batch first; --input-shape is per sample): {last_traceback_line(e)}") from e


class _Recorder(fx.Interpreter):
    """Runs gm's graph over `state` (a copy of gm: the module's buffers stay untouched) and
    keeps every node's value, keyed by gm's own nodes."""

    def __init__(self, gm: fx.GraphModule, state: nn.Module) -> None:
        super().__init__(gm)
        self.state = state
        self.submodules = dict(state.named_modules())
        self.values: Dict[fx.Node, Any] = {}

    def fetch_attr(self, target: str) -> Any:
        obj: Any = self.state
        for atom in target.split("."):
            obj = getattr(obj, atom)
        return obj

    def run_node(self, n: fx.Node) -> Any:
        v = super().run_node(n)
        self.values[n] = v
        return v


def probe(gm: fx.GraphModule, inputs: Sequence[torch.Tensor]) -> Dict[fx.Node, Any]:
    """Every fx node's value on `inputs`."""
    rec = _Recorder(gm, copy.deepcopy(gm))
    torch.manual_seed(RUN_SEED)
    with torch.no_grad():
        rec.run(*inputs)
    return rec.values


def _static(v: Any) -> Optional[Any]:
    """v as a literal fx can print, if it is a plain number or a tuple of them; else None."""
    if isinstance(v, bool) or isinstance(v, int) or isinstance(v, float):
        return v
    if isinstance(v, (tuple, list)) and all(type(x) in (int, float, bool) for x in v):
        return tuple(v)  # torch.Size too
    return None


def fold_static_sizes(gm: fx.GraphModule, at_b: Dict[fx.Node, Any], at_b1: Dict[fx.Node, Any]
                      ) -> int:
    """Replaces glue that computes the same numbers at two batch sizes (sequence lengths,
    head counts: `tokens.shape[1]`) by constants, so a node does not need another node's
    tensor only to read its shape. Sizes that follow the batch stay computed. Returns how many
    were folded."""
    folded = 0
    for n in list(gm.graph.nodes):
        if n.op not in ("call_function", "call_method") or n not in at_b or n not in at_b1:
            continue
        a, b = _static(at_b[n]), _static(at_b1[n])
        if a is None or a != b or type(a) is not type(b):
            continue
        for user in list(n.users):
            user.args = fx.node.map_arg(user.args, lambda x: a if x is n else x)
            user.kwargs = fx.node.map_arg(user.kwargs, lambda x: a if x is n else x)
        folded += 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return folded
