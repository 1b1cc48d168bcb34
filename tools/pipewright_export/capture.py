"""Capturing the module's top-level forward with torch.fx.

The tracer's leaves are the modules the top-level forward calls (descending only through
nn.Sequential containers, each element of which is a call too): each becomes one pipewright
node; everything else in the forward (call_function / call_method / get_attr) is glue.
"""
import dis
import inspect
import linecache
import os
import traceback
from typing import Sequence, Set

import torch
import torch.fx as fx
import torch.nn as nn

from .errors import ExportError
from .loading import last_traceback_line

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def op_name(node: fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", repr(t))


def _innermost_user_frame(frames: traceback.StackSummary) -> str:
    """'file.py:12 (`if h.sum() > 0:`)' for the innermost frame outside torch and this
    package."""
    for fr in reversed(frames):
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
            f"at {_innermost_user_frame(traceback.extract_stack())}: {what} the result of '{op_name(obj.node)}' "
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
            f"cannot capture {type(root).__name__}.forward with torch.fx at "
            f"{_innermost_user_frame(traceback.extract_tb(e.__traceback__))}: "
            f"{last_traceback_line(e)}; move that code into a submodule or name the enclosing "
            "submodule with --leaf-modules") from e
    return fx.GraphModule(root, graph, class_name=type(root).__name__)
