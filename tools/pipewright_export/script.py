"""Node GraphModules to TorchScript: torch.jit.script where it works, torch.jit.trace otherwise
(refusing a trace that would bake in data-dependent control flow or shapes)."""
import contextlib
import copy
import io
import linecache
import os
import warnings
from dataclasses import dataclass
from typing import Iterator, List, Sequence

import torch
import torch.fx as fx

from .errors import ExportError
from .loading import last_traceback_line


@dataclass
class Scripted:
    data: bytes  # what torch.jit.save wrote
    method: str  # "script" or "trace"
    script_error: str  # why script failed ("" when it worked)


# torch 2.x deprecates TorchScript: every torch.jit.script / trace / save / load call warns
# "`torch.jit.save` is deprecated. Please switch to `torch.export`." (a FutureWarning in 2.15, a
# DeprecationWarning in 2.11), several times per node. The executor runs TorchScript with
# libtorch, so TorchScript is what the exporter must write, and the repeated notice would only
# bury the report. Exactly that notice is hidden; every other warning, torch's "not supported in
# Python 3.14+" for these calls included, stays.
JIT_DEPRECATION = r"`torch\.jit\.(script|trace|save|load)` is deprecated"


def _hide_jit_deprecation() -> None:
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", message=JIT_DEPRECATION, category=category)


@contextlib.contextmanager
def jit_deprecation_hidden() -> Iterator[None]:
    with warnings.catch_warnings():
        _hide_jit_deprecation()
        yield


def _save(m: torch.jit.ScriptModule) -> bytes:
    buf = io.BytesIO()
    with jit_deprecation_hidden():
        torch.jit.save(m, buf)
    return buf.getvalue()


def load(data: bytes) -> torch.jit.ScriptModule:
    with jit_deprecation_hidden():
        return torch.jit.load(io.BytesIO(data))


def _classes(gm: fx.GraphModule) -> str:
    """' (module Gate)': the classes of the module calls in a node."""
    names = [type(gm.get_submodule(str(n.target))).__name__ for n in gm.graph.nodes
             if n.op == "call_module"]
    return f" (module {', '.join(names)})" if names else ""


def to_torchscript(name: str, gm: fx.GraphModule, example: Sequence[torch.Tensor]) -> Scripted:
    try:
        with jit_deprecation_hidden():
            # fx's GraphModule trips TorchScript's warning about instance-level annotations.
            warnings.filterwarnings("ignore", message="The TorchScript type system")
            return Scripted(_save(torch.jit.script(gm)), "script", "")
    except Exception as e:  # noqa: BLE001 - any scripting failure falls back to tracing
        script_error = last_traceback_line(e).splitlines()[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        _hide_jit_deprecation()
        try:
            # A copy: tracing runs the forward, which may update buffers (BatchNorm statistics).
            traced = torch.jit.trace(copy.deepcopy(gm), tuple(example), check_trace=False)
        except Exception as e:  # noqa: BLE001
            raise ExportError(
                f"node '{name}'{_classes(gm)}: torch.jit.script failed ({script_error}) and so did "
                f"torch.jit.trace ({last_traceback_line(e)})") from e
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    for w in caught:
        # torch's own functions warn about their shape checks (batch_norm's size check); only
        # the user's code can hide a data-dependent branch from the trace.
        if os.path.abspath(w.filename).startswith(torch_dir):
            continue
        if issubclass(w.category, torch.jit.TracerWarning) and "Converting a tensor" in str(
                w.message):
            src = linecache.getline(w.filename, w.lineno).strip()
            raise ExportError(
                f"node '{name}'{_classes(gm)}: torch.jit.script failed ({script_error}) and "
                f"torch.jit.trace would freeze a run-time value at "
                f"{os.path.relpath(w.filename)}:{w.lineno} (`{src}`): "
                f"{str(w.message).split('.')[0]}; make that module scriptable (TorchScript: "
                "type annotations, no **kwargs or unsupported Python) so that its branches "
                "survive")
    with torch.no_grad():  # the module's own buffer values, not the ones tracing left
        original = dict(gm.named_buffers())
        for n, b in traced.named_buffers():
            b.copy_(original[n])
    return Scripted(_save(traced), "trace", script_error)


def script_all(names: List[str], modules: List[fx.GraphModule],
               examples: List[List[torch.Tensor]]) -> List[Scripted]:
    return [to_torchscript(n, m, ex) for n, m, ex in zip(names, modules, examples)]
