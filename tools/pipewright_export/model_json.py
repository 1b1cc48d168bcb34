"""model.json for exported nodes (docs/model-format.md, kind "torchscript";
/work/notes/i21-spec.md)."""
import re
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.nn as nn

from .probe import DTYPE_NAMES
from .inputs import InputSpec
from .costs import Cost
from .errors import ExportError
from .partition import Partition, output_names


def dtype_name(t: torch.Tensor, what: str) -> str:
    if t.dtype not in DTYPE_NAMES:
        raise ExportError(f"{what} has dtype {t.dtype}; pipewright nodes exchange "
                          f"{', '.join(DTYPE_NAMES.values())}")
    return DTYPE_NAMES[t.dtype]


def torch_version(version: str = torch.__version__) -> str:
    """MAJOR.MINOR.PATCH of a torch version: '2.15.0+cu132' -> '2.15.0', '1.13.0a0' -> '1.13.0'
    (what libtorch's TORCH_VERSION_MAJOR/MINOR/PATCH say)."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if m is None:
        raise ExportError(f"torch.__version__ '{version}' is not MAJOR.MINOR.PATCH[suffix]")
    return m.group(0)


def node_file(index: int, name: str) -> str:
    return f"nodes/{index:03d}_{re.sub(r'[^A-Za-z0-9._-]', '_', name)}.pt"


def canonical_names(root: nn.Module) -> Dict[int, str]:
    """id(parameter) -> the first name it has in root.named_parameters() (state_dict order)."""
    return {id(p): n for n, p in root.named_parameters()}


def parameter_entries(nodes: Sequence[nn.Module], root: nn.Module) -> List[List[Dict[str, Any]]]:
    """Each node's parameters; an entry for a parameter already listed (or listed under its
    canonical name elsewhere) carries tied_to = the canonical name."""
    canon = canonical_names(root)
    holders: Dict[int, List[str]] = {}
    for m in nodes:
        for n, p in m.named_parameters():
            holders.setdefault(id(p), []).append(n)
    claimed: set = set()
    out = []
    for m in nodes:
        entries = []
        for n, p in m.named_parameters():
            c = canon.get(id(p), n)
            e: Dict[str, Any] = {"name": n, "dtype": dtype_name(p, f"parameter {n}"),
                                 "shape": list(p.shape)}
            # The canonical entry: the first one under the canonical name (or, if no node holds
            # that name, the first one at all).
            is_canonical = id(p) not in claimed and (n == c or c not in holders[id(p)])
            if is_canonical:
                claimed.add(id(p))
            else:
                e["tied_to"] = c if c in holders[id(p)] else holders[id(p)][0]
            entries.append(e)
        out.append(entries)
    return out


def buffer_entries(node: nn.Module, root: nn.Module) -> List[Dict[str, Any]]:
    persistent = set(root.state_dict().keys())
    return [{"name": n, "dtype": dtype_name(b, f"buffer {n}"), "shape": list(b.shape),
             "persistent": n in persistent} for n, b in node.named_buffers()]


def io_entry(name: str, t: torch.Tensor, what: str, model_input: Optional[int] = None
             ) -> Dict[str, Any]:
    e: Dict[str, Any] = {"name": name, "dtype": dtype_name(t, what), "shape": list(t.shape[1:])}
    if model_input:
        e["model_input"] = model_input
    return e


def build(root: nn.Module, module_spec: str, specs: Sequence[InputSpec], micro_batch: int,
          part: Partition, eager_nodes: Sequence[torch.fx.GraphModule], values: Dict[Any, Any],
          costs: Sequence[Cost]) -> Dict[str, Any]:
    params = parameter_entries(eager_nodes, root)
    nodes, edges = [], []
    for i, (plan, m) in enumerate(zip(part.plans, eager_nodes)):
        inputs = []
        # The forward's own argument names (fx keeps them unique).
        arg_names = [n.name for n in m.graph.nodes if n.op == "placeholder"]
        for j, v in enumerate(plan.inputs):
            s = part.sources[v]
            what = f"input {j} of node '{plan.name}'"
            inputs.append(io_entry(arg_names[j], values[v], what,
                                   s[1] if s[0] == "input" else None))
            if s[0] == "node":
                edges.append({"from": part.plans[s[1]].name, "from_output": s[2],
                              "to": plan.name, "to_input": j})
        outputs = [io_entry(n, values[o], f"output {k} of node '{plan.name}'")
                   for k, (n, o) in enumerate(zip(output_names(plan), plan.outputs))]
        nodes.append({
            "name": plan.name, "kind": "torchscript",
            "script": {"file": node_file(i, plan.name), "inputs": inputs, "outputs": outputs,
                       "parameters": params[i], "buffers": buffer_entries(m, root)},
            "cost": costs[i].as_json()})
    model: Dict[str, Any] = {
        "version": 1, "name": type(root).__name__, "micro_batch_size": micro_batch,
        "input": {"dtype": specs[0].dtype, "shape": list(specs[0].shape)}}
    if len(specs) > 1:
        model["inputs"] = [{"name": p.name, "dtype": s.dtype, "shape": list(s.shape)}
                           for p, s in zip(part.placeholders, specs)]
    model["source"] = {"module": module_spec, "torch": torch.__version__,
                       "init": "init.safetensors"}
    model["nodes"] = nodes
    model["edges"] = edges
    return model
