"""The export, start to finish: load, capture, cut, script, check, measure, write."""
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import torch

from . import capture, check, costs, model_json, partition, probe, safetensors_io, script
from .inputs import InputSpec
from .errors import CheckFailed, ExportError
from .loading import build_module, parse_module_spec

CHECK_TOLERANCE = 1e-6


@dataclass
class Options:
    module: str  # "path/to/file.py:factory"
    inputs: List[InputSpec]
    micro_batch_size: int
    output_dir: str
    leaf_modules: List[str] = field(default_factory=list)
    seed: int = 0


@dataclass
class Result:
    model_name: str
    node_names: List[str]
    methods: List[str]  # "script" / "trace" per node
    edges: int
    max_abs_diff: float  # chained nodes vs the module's forward, at the micro batch
    max_abs_diff_other_batch: float  # the same at micro batch + 1
    state_dict_keys: int
    seconds: float
    model: Dict[str, Any]
    costs: List[costs.Cost]  # per node, with the timings' spreads that model.json does not hold
    threads: int  # intra-op threads the costs were measured with


def _check_batch_dim(part: partition.Partition, at_b: Dict[Any, Any], at_b1: Dict[Any, Any],
                     b: int) -> None:
    for plan in part.plans:
        for v in plan.inputs:
            x, y = at_b[v], at_b1[v]
            if x.dim() == 0 or x.shape[0] != b or y.shape[0] != b + 1 or x.shape[1:] != y.shape[1:]:
                raise ExportError(
                    f"node '{plan.name}' reads {v.name} of shape {list(x.shape)}, which does "
                    "not have the batch as its first dimension; pipewright splits every value "
                    "that crosses nodes along dimension 0")


def _write(opts: Options, model: Dict[str, Any], scripted: Sequence[script.Scripted],
           state: Dict[str, torch.Tensor]) -> None:
    out = opts.output_dir
    os.makedirs(os.path.join(out, "nodes"), exist_ok=True)
    wanted = {n["script"]["file"] for n in model["nodes"]}
    for f in os.listdir(os.path.join(out, "nodes")):  # files of an earlier export
        if f.endswith(".pt") and f"nodes/{f}" not in wanted:
            os.remove(os.path.join(out, "nodes", f))
    for node, s in zip(model["nodes"], scripted):
        with open(os.path.join(out, node["script"]["file"]), "wb") as f:
            f.write(s.data)
    safetensors_io.save_file(state, os.path.join(out, "init.safetensors"), {"format": "pt"})
    tmp = os.path.join(out, "model.json.tmp")
    with open(tmp, "w") as f:
        json.dump(model, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "model.json"))


def _check_names(name: str, eager: torch.nn.Module, loaded: torch.jit.ScriptModule) -> None:
    want = [n for n, _ in eager.named_parameters()] + [n for n, _ in eager.named_buffers()]
    got = [n for n, _ in loaded.named_parameters()] + [n for n, _ in loaded.named_buffers()]
    if want != got:
        raise CheckFailed(f"node '{name}': the TorchScript module names its tensors {got}, "
                          f"the module {want}")


def _check_chain(root: torch.nn.Module, gm: torch.fx.GraphModule, part: partition.Partition,
                 loaded: Sequence[torch.jit.ScriptModule], opts: Options, batch: int,
                 high: int) -> Tuple[float, List[List[torch.Tensor]]]:
    """Chains the loaded nodes on a random batch and compares every node's outputs with the
    captured graph's values and the result with the module's forward. Returns the max |diff|
    and each node's arguments; raises CheckFailed above CHECK_TOLERANCE."""
    x = probe.make_inputs(opts.inputs, batch, opts.seed + 2 + batch, high)
    produced, args = check.run_chain(loaded, part, x)
    agreement = check.compare(part, produced, probe.probe(gm, x), CHECK_TOLERANCE)
    reference = probe.check_forward_runs(root, x)
    diff = max(agreement.max_abs_diff,
               check.max_diff(produced[(len(part.plans) - 1, 0)], reference))
    if diff > CHECK_TOLERANCE or agreement.worst_node is not None:
        where = (f"; node '{agreement.worst_node}' differs first, by {agreement.worst_diff:.3g}"
                 if agreement.worst_node else "")
        raise CheckFailed(
            f"the exported nodes chained do not reproduce {type(root).__name__}.forward at "
            f"micro batch {batch}: max |diff| {diff:.3g} > {CHECK_TOLERANCE:g}{where}")
    return diff, args


def run(opts: Options) -> Result:
    t0 = time.perf_counter()
    path, factory = parse_module_spec(opts.module)
    torch.manual_seed(opts.seed)
    root = build_module(path, factory)
    state = {k: v.detach().clone() for k, v in root.state_dict().items()}
    b = opts.micro_batch_size
    high = probe.int_input_range(root)
    x = probe.make_inputs(opts.inputs, b, opts.seed + 1, high)
    probe.check_forward_runs(root, x)
    gm = capture.capture(root, opts.leaf_modules)
    x1 = probe.make_inputs(opts.inputs, b + 1, opts.seed + 2, high)
    at_b, at_b1 = probe.probe(gm, x), probe.probe(gm, x1)
    probe.fold_static_sizes(gm, at_b, at_b1)
    part = partition.partition(gm, at_b)
    _check_batch_dim(part, at_b, at_b1, b)

    eager = [partition.build_module(root, p, part) for p in part.plans]
    examples = [[at_b[v] for v in p.inputs] for p in part.plans]
    names = [p.name for p in part.plans]
    scripted = script.script_all(names, eager, examples)
    loaded = [script.load(s.data) for s in scripted]
    for n, e, m in zip(names, eager, loaded):
        _check_names(n, e, m)

    diff_b, chain_args = _check_chain(root, gm, part, loaded, opts, b, high)
    diff_b1, _ = _check_chain(root, gm, part, loaded, opts, b + 1, high)

    del loaded  # the costs are measured on fresh copies (Note [Settled timings] in costs.py)
    measured = costs.measure([s.data for s in scripted], eager, chain_args)
    model = model_json.build(root, opts.module, opts.inputs, b, part, eager, at_b, measured)
    try:
        _write(opts, model, scripted, state)
    except OSError as e:
        raise ExportError(f"-o {opts.output_dir}: {e.strerror}: {e.filename}") from e
    return Result(model_name=type(root).__name__, node_names=names,
                  methods=[s.method for s in scripted], edges=len(model["edges"]),
                  max_abs_diff=diff_b, max_abs_diff_other_batch=diff_b1,
                  state_dict_keys=len(state), seconds=time.perf_counter() - t0, model=model,
                  costs=measured, threads=costs.measuring_threads())
