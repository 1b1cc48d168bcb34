#!/usr/bin/python3
"""Plain-PyTorch DiLoCo for tests/exec/dp_mp.sh (case diloco; issue 24).

  diloco_reference.py init --model M.json --seed S -o init.safetensors
      writes initial weights for the MLP of M.json (linear and relu layers), named as
      pipewright names them ("<layer index>.weight", "<layer index>.bias").
  diloco_reference.py train --model M.json --init init.safetensors --data-x X.npy --data-y Y.npy
      --dp N --batch-size B --steps S --lr LR --momentum MU --sync-every H --outer-lr A
      --outer-momentum BETA [--nesterov] --compare out.safetensors [--tolerance T]
      trains N replicas of the MLP, replica r on rows r, r + N, ... (pipewright's --no-shuffle
      sharding), loss = mean squared error, inner torch.optim.SGD(LR, momentum MU) per replica;
      after every H steps the outer gradient mean_r(x_old - x_r) drives one step of
      torch.optim.SGD(A, momentum BETA, nesterov) on the global parameters x_old, which every
      replica then takes. Compares with --compare (max |diff|, exit 1 above --tolerance).

Reads and writes safetensors itself (float32 only), so it needs only torch and numpy.
"""
import argparse
import json
import struct
import sys
from typing import Dict, List

import numpy as np
import torch
import torch.nn as nn


def read_safetensors(path: str) -> Dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            raise SystemExit(f"{path}: {name}: only F32 tensors are supported")
        b, e = meta["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(meta["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def write_safetensors(path: str, tensors: Dict[str, torch.Tensor]) -> None:
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = tensors[name].detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class Mlp(nn.Module):
    def __init__(self, model_json: str) -> None:
        super().__init__()
        with open(model_json) as f:
            spec = json.load(f)
        self.names: List[str] = []
        self.layers = nn.ModuleDict()
        self.kinds: List[str] = []
        for layer in spec["layers"]:
            self.kinds.append(layer["kind"])
            self.names.append(layer["name"])
            if layer["kind"] == "linear":
                p = layer["params"]
                self.layers[layer["name"]] = nn.Linear(p["in_features"], p["out_features"])
            elif layer["kind"] != "relu":
                raise SystemExit(f"{model_json}: layer kind {layer['kind']} is not supported")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name, kind in zip(self.names, self.kinds):
            x = self.layers[name](x) if kind == "linear" else torch.relu(x)
        return x

    def named(self) -> Dict[str, torch.Tensor]:
        """Parameters named as pipewright's weight files name them: <layer index>.<name>."""
        out = {}
        for i, (name, kind) in enumerate(zip(self.names, self.kinds)):
            if kind == "linear":
                for k, v in self.layers[name].named_parameters():
                    out[f"{i}.{k}"] = v
        return out


def cmd_init(a: argparse.Namespace) -> None:
    torch.manual_seed(a.seed)
    write_safetensors(a.output, Mlp(a.model).named())


def cmd_train(a: argparse.Namespace) -> int:
    init = read_safetensors(a.init)
    x = torch.from_numpy(np.load(a.data_x)).float()
    y = torch.from_numpy(np.load(a.data_y)).float()
    replicas = []
    for _ in range(a.dp):
        m = Mlp(a.model)
        with torch.no_grad():
            for name, p in m.named().items():
                p.copy_(init[name])
        replicas.append(m)
    glob = Mlp(a.model)
    with torch.no_grad():
        for name, p in glob.named().items():
            p.copy_(init[name])
    inner = [torch.optim.SGD(m.parameters(), lr=a.lr, momentum=a.momentum) for m in replicas]
    outer = torch.optim.SGD(glob.parameters(), lr=a.outer_lr, momentum=a.outer_momentum,
                            nesterov=a.nesterov)
    for step in range(a.steps):
        for r, (m, opt) in enumerate(zip(replicas, inner)):
            shard = torch.arange(r, x.shape[0], a.dp)
            idx = shard[torch.arange(step * a.batch_size, (step + 1) * a.batch_size) % shard.numel()]
            loss = nn.functional.mse_loss(m(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if (step + 1) % a.sync_every == 0:
            g = glob.named()
            with torch.no_grad():
                for name, p in g.items():
                    p.grad = sum(p - m.named()[name] for m in replicas) / a.dp
            outer.step()
            outer.zero_grad()
            with torch.no_grad():
                for m in replicas:
                    for name, p in m.named().items():
                        p.copy_(g[name])
    got = read_safetensors(a.compare)
    ref = replicas[0].named()
    if set(got) != set(ref):
        print(f"tensor names differ: {sorted(got)} vs {sorted(ref)}")
        return 1
    worst = max(float((got[n] - ref[n].detach()).abs().max()) for n in ref)
    print(f"max |pipewright - torch| = {worst:.3g} (tolerance {a.tolerance:.3g})")
    return 0 if worst <= a.tolerance else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init")
    i.add_argument("--model", required=True)
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("-o", "--output", required=True)
    t = sub.add_parser("train")
    for flag in ("--model", "--init", "--data-x", "--data-y", "--compare"):
        t.add_argument(flag, required=True)
    for flag in ("--dp", "--batch-size", "--steps", "--sync-every"):
        t.add_argument(flag, type=int, required=True)
    for flag in ("--lr", "--momentum", "--outer-lr", "--outer-momentum"):
        t.add_argument(flag, type=float, required=True)
    t.add_argument("--nesterov", action="store_true")
    t.add_argument("--tolerance", type=float, default=1e-5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "init":
        cmd_init(a)
        return 0
    return cmd_train(a)


if __name__ == "__main__":
    sys.exit(main())
