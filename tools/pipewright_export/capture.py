"""Capturing the module's top-level forward with torch.fx.

The tracer's leaves are the modules the top-level forward calls (descending only through
nn.Sequential containers, each element of which is a call too): each becomes one pipewright
node; everything else in the forward (call_function / call_method / get_attr) is glue.
"""
import copy
import dis
import inspect
import linecache
import os
import traceback
from typing import Any, Dict, List, Optional, Sequence, Set

import torch
import torch.fx as fx
import torch.nn as nn

from .errors import ExportError
from .inputs import InputSpec
from .loading import last_traceback_line

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


DTYPES: Dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "int64": torch.int64,
    "bool": torch.bool,
}
DTYPE_NAMES: Dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}


def op_name(node: fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", repr(t))


def _user_frame() -> str:
    """'file.py:12 (`if h.sum() > 0:`)' for the innermost frame of the user's code."""
    for fr in reversed(traceback.extract_stack()):
        f = os.path.abspath(fr.filename)
        if not f.startswith(_TORCH_DIR) and not f.startswith(_OWN_DIR):
            src = (fr.line or linecache.getline(fr.filename, fr.lineno)).strip()
            return f"{os.path.relpath(fr.filename)}:{fr.lineno} (`{src}`)"
    return "an unknown line"


class _Proxy(fx.Proxy):
    """fx.Proxy whose tuple unpacking (`a, b = self.child(x)`) works on Python 3.11: torch
    1.13 indexes the bytecode by f_lasti // 2, which CACHE entries break."""

    def __iter__(self):  # type: ignore[override]
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        if caller is not None:
            for inst in dis.get_instructions(caller.f_code):
                if inst.offset == caller.f_lasti and inst.opname == "UNPACK_SEQUENCE":
                    return (self[i] for i in range(inst.argval))
        return self.tracer.iter(self)


class TopLevelTracer(fx.Tracer):
    """fx.Tracer whose leaves are the modules called by the top-level forward."""

    def __init__(self, root: nn.Module, leaf_modules: Sequence[str]) -> None:
        super().__init__()
        self.root_name = type(root).__name__
        self.proxy_buffer_attributes = True  # buffers (RoPE tables) become get_attr glue
        self.leaf_modules: Set[str] = set(leaf_modules)

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if module_qualified_name in self.leaf_modules or type(m).__name__ in self.leaf_modules:
            return True
        return not isinstance(m, nn.Sequential)

    def _data_dependent(self, obj: fx.Proxy, what: str) -> ExportError:
        return ExportError(
            f"cannot capture {self.root_name}.forward with torch.fx: data-dependent control flow "
            f"at {_user_frame()}: {what} the result of '{op_name(obj.node)}' "
            f"({obj.node.op}), a tensor known only at run time; move that code into a submodule "
            "(a submodule the forward calls is one opaque node, compiled with TorchScript) or "
            "name the enclosing submodule with --leaf-modules")

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _Proxy(node, self)

    def to_bool(self, obj: fx.Proxy) -> bool:
        raise self._data_dependent(obj, "the condition is")

    def iter(self, obj: fx.Proxy):  # type: ignore[override]
        raise self._data_dependent(obj, "the loop iterates over")


def check_leaf_names(root: nn.Module, leaf_modules: Sequence[str]) -> None:
    names = {n for n, _ in root.named_modules()} | {type(m).__name__ for m in root.modules()}
    for name in leaf_modules:
        if name not in names:
            raise ExportError(f"--leaf-modules: {type(root).__name__} has no submodule or "
                              f"module class named '{name}'")


def capture(root: nn.Module, leaf_modules: Sequence[str]) -> fx.GraphModule:
    """The top-level forward as a GraphModule over `root` (leaves: see TopLevelTracer)."""
    check_leaf_names(root, leaf_modules)
    tracer = TopLevelTracer(root, leaf_modules)
    try:
        graph = tracer.trace(root)
    except ExportError:
        raise
    except Exception as e:  # noqa: BLE001 - fx's own errors, e.g. a Proxy used as an int
        raise ExportError(
            f"cannot capture {type(root).__name__}.forward with torch.fx at {_frame_of(e)}: "
            f"{last_traceback_line(e)}; move that code into a submodule or name the enclosing "
            "submodule with --leaf-modules") from e
    return fx.GraphModule(root, graph, class_name=type(root).__name__)


def _frame_of(e: BaseException) -> str:
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        f = os.path.abspath(fr.filename)
        if not f.startswith(_TORCH_DIR) and not f.startswith(_OWN_DIR):
            return f"{os.path.relpath(fr.filename)}:{fr.lineno} (`{(fr.line or '').strip()}`)"
    return "an unknown line"


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
