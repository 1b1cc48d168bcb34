"""Node GraphModules to TorchScript: torch.jit.script where it works, torch.jit.trace otherwise
(refusing a trace that would bake in data-dependent control flow or shapes)."""
import copy
import io
import linecache
import os
import warnings
from dataclasses import dataclass
from typing import List, Sequence

import torch
import torch.fx as fx

from .errors import ExportError
from .loading import last_traceback_line


@dataclass
class Scripted:
    data: bytes  # what torch.jit.save wrote
    method: str  # "script" or "trace"
    script_error: str  # why script failed ("" when it worked)


def _save(m: torch.jit.ScriptModule) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(m, buf)
    return buf.getvalue()


def load(data: bytes) -> torch.jit.ScriptModule:
    return torch.jit.load(io.BytesIO(data))


def _classes(gm: fx.GraphModule) -> str:
    """' (module Gate)': the classes of the module calls in a node."""
    names = [type(gm.get_submodule(str(n.target))).__name__ for n in gm.graph.nodes
             if n.op == "call_module"]
    return f" (module {', '.join(names)})" if names else ""


def to_torchscript(name: str, gm: fx.GraphModule, example: Sequence[torch.Tensor]) -> Scripted:
    try:
        with warnings.catch_warnings():
            # fx's GraphModule trips TorchScript's warning about instance-level annotations.
            warnings.filterwarnings("ignore", message="The TorchScript type system")
            return Scripted(_save(torch.jit.script(gm)), "script", "")
    except Exception as e:  # noqa: BLE001 - any scripting failure falls back to tracing
        script_error = last_traceback_line(e).splitlines()[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
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
