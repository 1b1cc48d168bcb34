"""Trains an exported model (DIR/model.json + nodes/*.pt) in one Python process the way the
executor's contract says (/work/notes/i21-spec.md): the TorchScript nodes chained by the edges,
model inputs into unproduced input slots, microbatches with gradients accumulated, the gradients
of tied copies summed before the step, SGD, and the result under state_dict names (--save).
Tests use it to show that the exported files alone train exactly like the module."""
import json
import os
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F


class ExportedModel:
    def __init__(self, model_json: str) -> None:
        with open(model_json) as f:
            self.spec = json.load(f)
        root = os.path.dirname(os.path.abspath(model_json))
        self.nodes = self.spec["nodes"]
        self.modules = [torch.jit.load(os.path.join(root, n["script"]["file"]))
                        for n in self.nodes]
        self.index = {n["name"]: i for i, n in enumerate(self.nodes)}
        self.producer: Dict[Tuple[int, int], Tuple[int, int]] = {}
        for e in self.spec["edges"]:
            self.producer[(self.index[e["to"]], e.get("to_input", 0))] = (
                self.index[e["from"]], e.get("from_output", 0))

    def forward(self, model_inputs: List[torch.Tensor]) -> torch.Tensor:
        produced: Dict[Tuple[int, int], torch.Tensor] = {}
        for i, (node, m) in enumerate(zip(self.nodes, self.modules)):
            args = []
            for j, inp in enumerate(node["script"]["inputs"]):
                src = self.producer.get((i, j))
                args.append(produced[src] if src else model_inputs[inp.get("model_input", 0)])
            out = m(*args)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            for k, o in enumerate(outs):
                produced[(i, k)] = o
        return produced[(len(self.nodes) - 1, 0)]

    def named_tensors(self) -> List[Tuple[dict, torch.Tensor]]:
        """(model.json parameter entry, the node module's tensor) for every entry."""
        out = []
        for node, m in zip(self.nodes, self.modules):
            params = dict(m.named_parameters())
            out += [(e, params[e["name"]]) for e in node["script"]["parameters"]]
        return out

    def sum_tied_grads(self) -> None:
        groups: Dict[str, List[torch.Tensor]] = {}
        for e, p in self.named_tensors():
            groups.setdefault(e.get("tied_to", e["name"]), []).append(p)
        for ps in groups.values():
            if len(ps) > 1:
                total = sum(p.grad for p in ps if p.grad is not None)
                for p in ps:
                    p.grad = total.clone()

    def state_dict(self) -> Dict[str, torch.Tensor]:
        """What `pipewright run --save` writes: parameters (tied ones under every name) and
        persistent buffers, by state_dict name."""
        out: Dict[str, torch.Tensor] = {}
        for node, m in zip(self.nodes, self.modules):
            params = dict(m.named_parameters())
            buffers = dict(m.named_buffers())
            for e in node["script"]["parameters"]:
                out.setdefault(e["name"], params[e["name"]].detach().clone())
            for e in node["script"]["buffers"]:
                if e["persistent"]:
                    out.setdefault(e["name"], buffers[e["name"]].detach().clone())
        return out


def train(model: ExportedModel, x: torch.Tensor, y: torch.Tensor, batch_size: int,
          microbatches: int, steps: int, lr: float) -> List[float]:
    params = [p for _, p in model.named_tensors()]
    batches = x.shape[0] // batch_size
    mb = batch_size // microbatches
    losses = []
    for step in range(steps):
        b = step % batches
        for p in params:
            p.grad = None
        total = 0.0
        for k in range(microbatches):
            rows = slice(b * batch_size + k * mb, b * batch_size + (k + 1) * mb)
            logits = model.forward([x[rows]])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[rows].reshape(-1))
            (loss / microbatches).backward()
            total += loss.item() / microbatches
        model.sum_tied_grads()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p -= lr * p.grad
        losses.append(total)
    return losses
