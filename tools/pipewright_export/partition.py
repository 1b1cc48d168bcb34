"""Cutting the captured top-level graph into pipewright nodes.

One node per module call whose inputs follow the batch ("leaf"). Glue (call_function,
call_method, get_attr, and module calls that read no batch data, e.g. a position embedding of a
buffer) belongs to the node that consumes it, and is copied into every consumer when there are
several (e.g. RoPE table slicing). A leaf that returns a tuple owns the getitems that unpack it,
so its node has several outputs. What the forward computes after its last leaf goes to a node
named `output` (only when there is such glue).
"""
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import torch
import torch.fx as fx
import torch.nn as nn

from .errors import ExportError

# Where a value that crosses nodes comes from: ("input", k) = model input k, or
# ("node", i, j) = output j of node i.
Source = Tuple[Any, ...]


@dataclass
class NodePlan:
    name: str
    leaf: Optional[fx.Node]  # the module call; None for the glue-only `output` node
    closure: List[fx.Node] = field(default_factory=list)  # fx nodes it computes, graph order
    inputs: List[fx.Node] = field(default_factory=list)  # values it reads from outside
    outputs: List[fx.Node] = field(default_factory=list)  # values it produces


@dataclass
class Partition:
    plans: List[NodePlan]
    sources: Dict[fx.Node, Source]  # every crossing value: model input or node output
    placeholders: List[fx.Node]


def batch_dependent(graph: fx.Graph) -> Dict[fx.Node, bool]:
    dep: Dict[fx.Node, bool] = {}
    for n in graph.nodes:
        dep[n] = n.op == "placeholder" or any(dep[a] for a in n.all_input_nodes)
    return dep


def _is_getitem(n: fx.Node) -> bool:
    return (n.op == "call_function" and n.target is operator.getitem
            and isinstance(n.args[1], int))


def _leaf_outputs(leaf: fx.Node, value: Any) -> List[fx.Node]:
    if isinstance(value, torch.Tensor):
        return [leaf]
    if isinstance(value, (tuple, list)):
        users = list(leaf.users)
        if not all(_is_getitem(u) for u in users):
            raise ExportError(
                f"module '{leaf.target}' returns a {type(value).__name__} that the forward "
                "passes on whole; unpack it (a, b = ...) so that each tensor crosses on its own")
        outs = sorted(users, key=lambda u: u.args[1])
        for u in outs:
            if not isinstance(value[u.args[1]], torch.Tensor):
                raise ExportError(f"module '{leaf.target}' returns a non-tensor at index "
                                  f"{u.args[1]} ({type(value[u.args[1]]).__name__})")
        return outs
    raise ExportError(f"module '{leaf.target}' returns {type(value).__name__}, not a tensor or "
                      "a tuple of tensors")


def _collect(start: List[fx.Node], sources: Dict[fx.Node, Source],
             own: Set[fx.Node]) -> Set[fx.Node]:
    """Glue ancestors of `start`: everything it computes from, up to crossing values."""
    glue: Set[fx.Node] = set()
    stack = list(start)
    while stack:
        n = stack.pop()
        for a in n.all_input_nodes:
            if a in sources and a not in own:
                continue
            if a not in glue and a not in own:
                glue.add(a)
                stack.append(a)
    return glue


def _inputs_in_arg_order(start: fx.Node, sources: Dict[fx.Node, Source],
                         own: Set[fx.Node]) -> List[fx.Node]:
    """The crossing values `start` reads, depth first through its glue, arguments left to
    right: `layer(h, freqs)` reads h first; `block(x + skip)` reads x, then skip."""
    found: List[fx.Node] = []
    seen: Set[fx.Node] = set()
    stack = [start]
    while stack:
        n = stack.pop()
        if n in sources and n not in own:
            if n not in found:
                found.append(n)
            continue
        if n in seen:
            continue
        seen.add(n)
        stack.extend(reversed(n.all_input_nodes))
    return found


def _unique_name(base: str, taken: Set[str]) -> str:
    name, k = base, 2
    while name in taken:
        name, k = f"{base}#{k}", k + 1
    taken.add(name)
    return name


def _count_consumers(plans: List[NodePlan], sources: Dict[fx.Node, Source]) -> Dict[int, int]:
    consumers: Dict[int, int] = {}
    for plan in plans:
        for v in plan.inputs:
            if sources[v][0] == "node":
                consumers[sources[v][1]] = consumers.get(sources[v][1], 0) + 1
    return consumers


def _output_plan(ret: fx.Node, name: str, sources: Dict[fx.Node, Source],
                 order: Dict[fx.Node, int]) -> NodePlan:
    """The glue after the last module call (or an identity passing another output on)."""
    plan = NodePlan(name=name, leaf=None, outputs=[ret])
    if ret in sources:
        plan.inputs = [ret]
    else:
        plan.closure = sorted(_collect([ret], sources, set()) | {ret}, key=order.__getitem__)
        plan.inputs = _inputs_in_arg_order(ret, sources, set())
    return plan


def partition(gm: fx.GraphModule, values: Dict[fx.Node, Any]) -> Partition:
    """`values`: every fx node's value on a sample batch (probe.probe)."""
    graph = gm.graph
    order = {n: i for i, n in enumerate(graph.nodes)}
    dep = batch_dependent(graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    sources: Dict[fx.Node, Source] = {p: ("input", k) for k, p in enumerate(placeholders)}
    plans: List[NodePlan] = []
    taken: Set[str] = set()
    for n in graph.nodes:
        if n.op == "call_module" and dep[n]:
            plan = NodePlan(name=_unique_name(str(n.target), taken), leaf=n)
            plan.outputs = _leaf_outputs(n, values[n])
            for j, o in enumerate(plan.outputs):
                sources[o] = ("node", len(plans), j)
            plans.append(plan)
    for plan in plans:
        own = {plan.leaf} | set(plan.outputs)
        plan.closure = sorted(_collect([plan.leaf], sources, own) | own, key=order.__getitem__)
        plan.inputs = _inputs_in_arg_order(plan.leaf, sources, own)
    ret = next(n for n in graph.nodes if n.op == "output").args[0]
    if not isinstance(ret, fx.Node) or not isinstance(values.get(ret), torch.Tensor):
        got = ("dict" if isinstance(ret, dict) else "tuple" if isinstance(ret, (tuple, list))
               else type(values.get(ret)).__name__)
        raise ExportError("the module's forward must return one tensor (the prediction), not "
                          f"a {got}; wrap the module to return the logits")
    # The final node is the producer of the returned value when that is its output 0 and no
    # other node reads it; otherwise a node `output` holds the glue after the last call.
    consumers = _count_consumers(plans, sources)
    src = sources.get(ret)
    if src is None or src[0] != "node" or src[2] != 0 or src[1] in consumers:
        plans.append(_output_plan(ret, _unique_name("output", taken), sources, order))
        consumers = _count_consumers(plans, sources)
        final = len(plans) - 1
    else:
        final = src[1]
    for i, plan in enumerate(plans):  # then the final node is the last one (graph order)
        if i != final and i not in consumers:
            raise ExportError(f"the output of module '{plan.name}' does not reach the "
                              "forward's result; pipewright needs exactly one final node")
    return Partition(plans=plans, sources=sources, placeholders=placeholders)


def _identifier(text: str) -> str:
    s = re.sub(r"\W", "_", text)
    return s if s and not s[0].isdigit() else "_" + s


def input_name(v: fx.Node, part: Partition) -> str:
    """A readable name of a crossing value: the model input's name or `<node>_out<j>`."""
    s = part.sources[v]
    if s[0] == "input":
        return v.name
    producer = part.plans[s[1]]
    return _identifier(producer.name) if len(producer.outputs) == 1 \
        else f"{_identifier(producer.name)}_out{s[2]}"


def output_names(plan: NodePlan) -> List[str]:
    return ["out"] if len(plan.outputs) == 1 else [f"out{j}" for j in range(len(plan.outputs))]


def build_module(root: nn.Module, plan: NodePlan, part: Partition) -> fx.GraphModule:
    """The node as a GraphModule rooted at the original module: the submodules and attributes
    it uses keep their qualified names, so its parameters are named as in the state_dict."""
    g = fx.Graph()
    env: Dict[fx.Node, fx.Node] = {}
    for v in plan.inputs:
        env[v] = g.placeholder(input_name(v, part))
    for n in plan.closure:
        env[n] = g.node_copy(n, lambda a: env[a])
    outs = [env[o] for o in plan.outputs]
    g.output(outs[0] if len(outs) == 1 else tuple(outs))
    g.lint()
    return fx.GraphModule(root, g, class_name=_identifier(plan.name))
