"""pipewright as a Python module (docs/library.md): models, partitions, torch-compatible
pipeline schedules, plan validation and the simulator, with the same results as the
`pipewright` CLI for the same inputs (both call the same C++ libraries: graph, sched, sim).

    import pipewright as pw
    plan = pw.schedule("1F1B", ranks=4, microbatches=8)
    assert pw.validate(plan) == []
    metrics = pw.simulate(plan, forward_ms=1.0, backward_ms=2.0)
    print(metrics["makespan_ms"], metrics["bubble_fraction"])

Errors are pipewright.Error subclasses (InputError: ParseError, InvalidGraphError,
InvalidPlanError, ConfigError) carrying the CLI's one-line messages.
"""
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

from ._pipewright import (  # noqa: F401  (re-exported)
    ConfigError,
    Error,
    InputError,
    InternalError,
    InvalidGraphError,
    InvalidPlanError,
    Model,
    ParseError,
    Partition,
    Plan,
    __version__,
    gpt,
    graphviz_available,
    load_model,
    load_partition,
    mlp,
    schedule,
    schedule_names,
    validate,
)
from . import _pipewright as _native

try:
    import numpy as _np
except ImportError:  # the timelines are then lists of dicts
    _np = None

__all__ = [
    "ConfigError", "Error", "InputError", "InternalError", "InvalidGraphError",
    "InvalidPlanError", "Model", "ParseError", "Partition", "Plan", "__version__", "gpt",
    "graphviz_available", "load_model", "load_partition", "mlp", "partition", "render",
    "schedule", "schedule_names", "simulate", "validate",
]

ModelLike = Union[Model, str, os.PathLike]
PartitionLike = Union[Partition, str, os.PathLike, None]


def _model(model: ModelLike) -> Model:
    return model if isinstance(model, Model) else load_model(os.fspath(model))


def _partition(p: PartitionLike) -> Optional[Partition]:
    if p is None or isinstance(p, Partition):
        return p
    return load_partition(os.fspath(p))


def partition(model: ModelLike, *, stages: int, method: str = "balanced",
              memory_limit_bytes: Optional[int] = None, in_flight: Optional[int] = None,
              gradient_bytes_per_param_byte: float = 1.0,
              optimizer_bytes_per_param_byte: float = 2.0) -> Partition:
    """Cuts a model (a Model or a model JSON path) into stages, as `pipewright partition`.
    in_flight: None for 1F1B's assumption, else the microbatches every stage holds."""
    return _native.partition(_model(model), stages=stages, method=method,
                             memory_limit_bytes=memory_limit_bytes, in_flight=in_flight,
                             gradient_bytes_per_param_byte=gradient_bytes_per_param_byte,
                             optimizer_bytes_per_param_byte=optimizer_bytes_per_param_byte)


def render(model: ModelLike, partition: PartitionLike = None, *, stages_only: bool = False,
           stage_to_rank: Sequence[int] = (), format: str = "dot") -> Union[str, bytes]:
    """The model DAG (one cluster per stage) or the stage graph, as `pipewright render`:
    DOT or SVG text, or PNG bytes (SVG/PNG need a Graphviz build: graphviz_available())."""
    return _native.render(_model(model), _partition(partition), stages_only=stages_only,
                          stage_to_rank=list(stage_to_rank), format=format)


def _floats(value: Union[None, float, Sequence[float]]) -> List[float]:
    if value is None:
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    return [float(v) for v in value]


_TIMELINE_DTYPE = [("start_ms", "f8"), ("end_ms", "f8"), ("step", "i4"), ("stage", "i4"),
                   ("microbatch", "i4"), ("action", "U32"), ("kind", "U16"), ("stream", "U16")]


def _timeline(columns: Dict[str, list]) -> Any:
    """One rank's timed actions: a numpy structured array (fields of _TIMELINE_DTYPE, in
    simulation order) when numpy is there, else a list of dicts with the same keys."""
    start = [ns / 1e6 for ns in columns["start_ns"]]
    end = [ns / 1e6 for ns in columns["end_ns"]]
    rows = list(zip(start, end, columns["step"], columns["stage"], columns["microbatch"],
                    columns["action"], columns["kind"], columns["stream"]))
    if _np is not None:
        return _np.array(rows, dtype=_TIMELINE_DTYPE)
    names = [name for name, _ in _TIMELINE_DTYPE]
    return [dict(zip(names, row)) for row in rows]


def simulate(plan: Union[Plan, str, None] = None, *, ranks: int = 1, microbatches: int = 1,
             stages_per_rank: int = 1,
             forward_ms: Union[None, float, Sequence[float]] = None,
             backward_ms: Union[None, float, Sequence[float]] = None,
             weight_ms: Union[None, float, Sequence[float]] = None,
             activation_bytes: int = 0, param_bytes: int = 0, output_bytes: int = 0,
             model: Optional[ModelLike] = None, partition: PartitionLike = None,
             partition_method: str = "balanced", profile: Optional[str] = None,
             p2p_ms: Optional[float] = None, compute_overhead_ms: Optional[float] = None,
             cluster: Union[None, str, os.PathLike, Dict[str, Any]] = None, dp: int = 1,
             steps: int = 1, batch_size: int = 0, optimizer: str = "sgd",
             momentum: float = 0.0, dp_algorithm: str = "ddp", bucket_cap_mb: float = 25.0,
             blocking_recv: bool = False, memory_timeline: bool = False,
             svg_timeline: bool = False) -> Dict[str, Any]:
    """Simulates a plan, as `pipewright simulate` (docs/simulator.md).

    plan: a Plan (its shape wins, as a plan file's does for the CLI), or a schedule name
    generated for ranks x stages_per_rank stages and microbatches (`--schedule`); default 1F1B.
    Costs, exactly one source: forward_ms/backward_ms[/weight_ms] (one value or one per stage),
    model (a Model or path; partitioned by partition_method unless partition is given), or
    profile (an executor profile JSON path). cluster: a cluster JSON path, its text, or a dict.

    Returns the metrics JSON as a dict (`--metrics`: makespan_ms, bubble_fraction, ranks, ...)
    plus "timelines": one entry per rank, a numpy structured array (start_ms, end_ms, step,
    stage, microbatch, action, kind, stream) or, without numpy, a list of dicts; and, with
    svg_timeline=True, "svg_timeline": the SVG Gantt chart (`--timeline`).
    """
    the_plan = plan if isinstance(plan, Plan) else None
    if plan is not None and the_plan is None and not isinstance(plan, str):
        raise TypeError("plan must be a pipewright.Plan or a schedule name")
    if isinstance(cluster, dict):
        cluster = json.dumps(cluster)
    metrics, timelines, svg, _ = _native._simulate(
        the_plan, plan if isinstance(plan, str) else "1F1B", ranks, stages_per_rank,
        microbatches, _floats(forward_ms), _floats(backward_ms), _floats(weight_ms),
        activation_bytes, param_bytes, output_bytes,
        None if model is None else _model(model), _partition(partition), partition_method,
        "" if profile is None else os.fspath(profile), p2p_ms, compute_overhead_ms,
        "" if cluster is None else os.fspath(cluster), dp, steps, batch_size, optimizer,
        momentum, dp_algorithm, bucket_cap_mb, blocking_recv, memory_timeline, svg_timeline)
    result = json.loads(metrics)
    result["timelines"] = [_timeline(t) for t in timelines]
    if svg is not None:
        result["svg_timeline"] = svg
    return result
