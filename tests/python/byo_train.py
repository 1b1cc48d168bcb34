"""The issue-21 "Done when" test for one example and schedule, for CTest:

  byo_train.py setup --example gpt2 --work DIR
      exports examples/byo/gpt2.py (micro batch 2) to DIR/model and writes DIR/x.npy, DIR/y.npy
  byo_train.py run --example gpt2 --schedule 1F1B --pipewright build/bin/pipewright --work DIR
      pipewright launch --nproc 2 -- pipewright run --model DIR/model/model.json --pp 2 ...
      --save DIR/<schedule>.safetensors, then plain PyTorch SGD on the same batches and
      max |pipewright - torch| <= 2e-5 over every state_dict key (after a strict load_state_dict)

Exit 77 (CTest skip) when torch or safetensors is missing.
"""
import argparse
import os
import subprocess
import sys
from typing import List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, HERE)

SKIP = 77
EXAMPLES = {
    "gpt2": "examples/byo/gpt2.py:tiny_gpt2",
    "llama": "examples/byo/llama.py:tiny_llama",
    "skipnet": "examples/byo/skipnet.py:skipnet",
}
TOLERANCE = 2e-5


def setup(example: str, work: str) -> int:
    from pipewright_export import cli
    import torch_reference
    os.chdir(REPO)
    code = cli.main(["--module", EXAMPLES[example], "--input-shape", "16", "--input-dtype",
                     "int64", "--micro-batch-size", "2", "-o", os.path.join(work, "model")])
    if code != 0:
        return code
    torch_reference.write_data(torch_reference.load_module(EXAMPLES[example]), 16, 32, 0, work)
    return 0


def train_command(pipewright: str, work: str, schedule: str) -> List[str]:
    cmd = [pipewright, "launch", "--nproc", "2", "--", pipewright, "run",
           "--model", os.path.join(work, "model", "model.json"), "--pp", "2",
           "--schedule", schedule]
    if schedule == "Interleaved1F1B":
        cmd += ["--stages-per-rank", "2"]
    return cmd + ["--optimizer", "sgd", "--lr", "0.1", "--no-shuffle",
                  "--data-x", os.path.join(work, "x.npy"), "--data-y", os.path.join(work, "y.npy"),
                  "--batch-size", "8", "--microbatches", "4", "--steps", "3",
                  "--loss", "cross-entropy", "--save", os.path.join(work, f"{schedule}.safetensors")]


def run(example: str, schedule: str, pipewright: str, work: str) -> int:
    if not os.access(pipewright, os.X_OK):
        print(f"byo_train.py: {pipewright}: no such program (build pipewright first)")
        return 1
    cmd = train_command(pipewright, work, schedule)
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout + p.stderr)
    if p.returncode != 0:
        return 1
    import numpy as np
    import torch
    import torch_reference
    from safetensors.torch import load_file
    module = torch_reference.load_module(os.path.join(REPO, EXAMPLES[example]))
    module.load_state_dict(load_file(os.path.join(work, "model", "init.safetensors")))
    x = torch.from_numpy(np.load(os.path.join(work, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(work, "y.npy")))
    losses = torch_reference.train(module, x, y, batch_size=8, steps=3, lr=0.1)
    print("torch losses: " + " ".join(f"{v:.6f}" for v in losses))
    saved = load_file(os.path.join(work, f"{schedule}.safetensors"))
    diff, key = torch_reference.compare(module, saved, os.path.join(REPO, EXAMPLES[example]))
    print(f"{example} {schedule}: max |pipewright - torch| = {diff:.3g} (worst: {key}); "
          f"tolerance {TOLERANCE:g}")
    return 0 if diff <= TOLERANCE else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="byo_train.py")
    p.add_argument("step", choices=("setup", "run"))
    p.add_argument("--example", required=True, choices=sorted(EXAMPLES))
    p.add_argument("--work", required=True)
    p.add_argument("--schedule", default="1F1B")
    p.add_argument("--pipewright", default=os.path.join(REPO, "build", "bin", "pipewright"))
    a = p.parse_args(argv)
    try:
        import torch  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    if a.step == "setup":
        return setup(a.example, work)
    return run(a.example, a.schedule, os.path.abspath(a.pipewright), work)


if __name__ == "__main__":
    sys.exit(main())
