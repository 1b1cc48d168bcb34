#!/usr/bin/python3
"""Plain-PyTorch reference for exported models (issue 21, "Done when").

  torch_reference.py data  --module F.py:fn --input-shape 16 --rows 32 -o DIR
      writes DIR/x.npy (int64 token ids [rows, S]) and DIR/y.npy (the next tokens), from a
      fixed seed; the vocabulary is the size of the module's output's last dimension.
  torch_reference.py train --module F.py:fn --init DIR/init.safetensors --data-x x.npy
      --data-y y.npy --batch-size 8 --steps 3 --lr 0.1 [--compare out.safetensors]
      [--tolerance 2e-5] [--save ref.safetensors]
      trains the module with SGD (no momentum) on the batches in file order (batch b = rows
      [b*B, (b+1)*B), wrapping around), loss = mean cross-entropy over [B*S] tokens, then
      loads --compare into a fresh module with load_state_dict(strict=True) and prints
      max |pipewright - torch| over every state_dict key; exit 1 above --tolerance.

Needs safetensors (tools/install-deps puts it in the venv): run it with .venv/bin/python.
"""
import argparse
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "tools"))
from pipewright_export.loading import build_module, parse_module_spec  # noqa: E402


def load_module(spec: str) -> nn.Module:
    path, factory = parse_module_spec(spec)
    torch.manual_seed(0)
    return build_module(path, factory)


def write_data(module: nn.Module, seq: int, rows: int, seed: int, out_dir: str) -> int:
    """x = token ids, y = the token after each; returns the vocabulary used."""
    with torch.no_grad():
        vocab = module(torch.zeros(1, seq, dtype=torch.int64)).shape[-1]
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (rows, seq + 1), generator=g, dtype=torch.int64)
    os.makedirs(out_dir, exist_ok=True)
    np.save(os.path.join(out_dir, "x.npy"), tokens[:, :-1].numpy())
    np.save(os.path.join(out_dir, "y.npy"), tokens[:, 1:].numpy())
    return vocab


def train(module: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, steps: int,
          lr: float, opt: Optional[torch.optim.Optimizer] = None,
          before_step: Optional[Callable[[int], None]] = None,
          after_backward: Optional[Callable[[int], None]] = None) -> List[float]:
    """`steps` steps of `opt` (default SGD at `lr`) on the batches in file order (wrapping);
    before_step(step) runs first in each step, after_backward(step) between backward and the
    optimizer step (recipe_train.py sets the learning rate and clips there)."""
    opt = opt or torch.optim.SGD(module.parameters(), lr=lr)
    batches = x.shape[0] // batch_size
    losses = []
    for step in range(steps):
        if before_step:
            before_step(step)
        b = step % batches
        xb, yb = x[b * batch_size:(b + 1) * batch_size], y[b * batch_size:(b + 1) * batch_size]
        logits = module(xb)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if after_backward:
            after_backward(step)
        opt.step()
        losses.append(loss.item())
    return losses


def compare(trained: nn.Module, other: Dict[str, torch.Tensor], factory_spec: str) -> tuple:
    """Loads `other` into a fresh module (strict) and returns (max |diff|, worst key)."""
    fresh = load_module(factory_spec)
    fresh.load_state_dict(other, strict=True)
    worst, worst_key = 0.0, ""
    mine = trained.state_dict()
    for k, v in fresh.state_dict().items():
        d = (v.double() - mine[k].double()).abs().max().item() if v.numel() else 0.0
        if d > worst or not worst_key:
            worst, worst_key = d, k
    return worst, worst_key


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="torch_reference.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("--module", required=True)
    d.add_argument("--input-shape", type=int, required=True, help="sequence length S")
    d.add_argument("--rows", type=int, default=32)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("-o", "--output", required=True)
    t = sub.add_parser("train")
    t.add_argument("--module", required=True)
    t.add_argument("--init", required=True)
    t.add_argument("--data-x", required=True)
    t.add_argument("--data-y", required=True)
    t.add_argument("--batch-size", type=int, default=8)
    t.add_argument("--steps", type=int, default=3)
    t.add_argument("--lr", type=float, default=0.1)
    t.add_argument("--compare")
    t.add_argument("--tolerance", type=float, default=2e-5)
    t.add_argument("--save")
    a = p.parse_args(argv)
    module = load_module(a.module)
    if a.cmd == "data":
        vocab = write_data(module, a.input_shape, a.rows, a.seed, a.output)
        print(f"wrote {a.output}/x.npy, y.npy: {a.rows} rows of {a.input_shape} tokens < {vocab}")
        return 0
    from safetensors.torch import load_file, save_file
    module.load_state_dict(load_file(a.init), strict=True)
    x = torch.from_numpy(np.load(a.data_x))
    y = torch.from_numpy(np.load(a.data_y))
    losses = train(module, x, y, a.batch_size, a.steps, a.lr)
    print("torch losses: " + " ".join(f"{v:.6f}" for v in losses))
    if a.save:
        save_file({k: v.clone() for k, v in module.state_dict().items()}, a.save)  # tied: a copy each
    if a.compare:
        diff, key = compare(module, load_file(a.compare), a.module)
        ok = diff <= a.tolerance
        print(f"max |pipewright - torch| = {diff:.3g} over {len(module.state_dict())} state_dict "
              f"keys (worst: {key}); tolerance {a.tolerance:g}: {'ok' if ok else 'FAILED'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
