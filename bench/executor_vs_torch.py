"""The torch side of bench/executor_vs_torch.sh (issue 35): torch.distributed.pipelining on the
same module, partition, weights, data and schedule that `pipewright run` trains.

  executor_vs_torch.py --module FILE.py:FACTORY --init init.safetensors --partition part.json
      --schedule 1F1B --pp 2 --microbatches 8 --data-x x.npy --data-y y.npy --steps 25
      --warmup-steps 5 --lr 0.05 [--times-out stage_times.json]

Spawns --pp processes (Gloo on 127.0.0.1, one intra-op thread each, as `pipewright launch`
runs ranks). Each builds the module from FACTORY, loads the exported init weights (strict), and
makes each stage of the partition an nn.Sequential of the partition's nodes (the module's
submodules of the same names); stage s runs on rank s % pp, or on the V placement for
ZBVZeroBubble and DualPipeV (as pipewright's plans place them). SGD over every local stage,
cross-entropy over the tokens, the step ended by an all-reduce of the loss (as pipewright's step
ends). The rank with the loss prints one line per step:
  torch step <k> loss <mean loss> step <milliseconds> ms
--times-out writes the medians (steps after --warmup-steps) of each stage's F, B, I, W and each
rank's optimizer step, for the bubble bound of the torch side.
"""
import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

SINGLE = {"GPipe": "ScheduleGPipe", "1F1B": "Schedule1F1B"}
MULTI = {"Interleaved1F1B": "ScheduleInterleaved1F1B", "ZBVZeroBubble": "ScheduleZBVZeroBubble",
         "DualPipeV": "ScheduleDualPipeV"}
V_PLACEMENT = {"ZBVZeroBubble", "DualPipeV"}


def load_factory(spec: str) -> nn.Module:
    import importlib.util
    path, name = spec.rsplit(":", 1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    mod_spec = importlib.util.spec_from_file_location("bench_module", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return getattr(mod, name)()


def rank_of(stage: int, stages: int, pp: int, schedule: str) -> int:
    if schedule in V_PLACEMENT:
        return stage if stage < pp else stages - 1 - stage
    return stage % pp


def timed(times: Dict, key, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        times[key(*args, **kwargs)].append((time.perf_counter() - t0) * 1e3)
        return out
    return wrapper


def instrument(stage, times: Dict) -> None:
    """Records each F, B, I and W of `stage` (ms) into times[(stage, kind)]."""
    s = stage.stage_index
    stage.forward_one_chunk = timed(times, lambda *a, **k: (s, "F"), stage.forward_one_chunk)
    stage.backward_one_chunk = timed(
        times, lambda *a, **k: (s, "B" if k.get("full_backward", True) else "I"),
        stage.backward_one_chunk)
    stage.backward_weight_one_chunk = timed(times, lambda *a, **k: (s, "W"),
                                            stage.backward_weight_one_chunk)


def worker(rank: int, a: argparse.Namespace, port: int) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.pp)
    from safetensors.torch import load_file
    from torch.distributed.pipelining import PipelineStage, schedules

    module = load_factory(a.module)
    module.load_state_dict(load_file(a.init), strict=True)
    part = json.load(open(a.partition))
    nstages = len(part["stages"])
    local = [s for s in range(nstages) if rank_of(s, nstages, a.pp, a.schedule) == rank]
    x = torch.from_numpy(np.load(a.data_x))
    y = torch.from_numpy(np.load(a.data_y))
    stages = []
    for s in local:
        nodes = part["stages"][s]["nodes"]
        body = nn.Sequential(*[module.get_submodule(n) for n in nodes])
        stages.append(PipelineStage(body, s, nstages, torch.device("cpu")))
    times: Dict = defaultdict(list)
    for st in stages:
        instrument(st, times)

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))

    if a.schedule in SINGLE:
        sched = getattr(schedules, SINGLE[a.schedule])(stages[0], a.microbatches, loss_fn=loss_fn)
    else:
        kwargs = {"defer_pp_recv": True} if a.defer_pp_recv else {}
        sched = getattr(schedules, MULTI[a.schedule])(stages, a.microbatches, loss_fn=loss_fn,
                                                      **kwargs)
    params = [p for st in stages for p in st.submod.parameters()]
    opt = torch.optim.SGD(params, lr=a.lr)
    first, last = 0 in local, (nstages - 1) in local
    batch = x[: a.batch_size], y[: a.batch_size]
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        losses: List[torch.Tensor] = []
        args = (batch[0],) if first else ()
        sched.step(*args, target=batch[1] if last else None, losses=losses if last else None)
        t_opt = time.perf_counter()
        opt.step()
        times[(rank, "OPTIM")].append((time.perf_counter() - t_opt) * 1e3)
        lsum = torch.tensor([sum(float(v.detach()) for v in losses) / a.microbatches if last else 0.0])
        dist.all_reduce(lsum)
        ms = (time.perf_counter() - t0) * 1e3
        if rank == 0:
            print(f"torch step {step} loss {lsum.item():.6f} step {ms:.3f} ms", flush=True)
        if step == a.warmup_steps:
            times.clear()
    medians = {f"{k[0]}:{k[1]}": statistics.median(v) for k, v in times.items() if v}
    gathered: List[Optional[Dict]] = [None] * a.pp
    dist.all_gather_object(gathered, medians)
    if rank == 0 and a.times_out:
        merged: Dict = {}
        for g in gathered:
            merged.update(g)
        with open(a.times_out, "w") as f:
            json.dump(merged, f, indent=1, sort_keys=True)
    dist.destroy_process_group()


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="executor_vs_torch.py", description=__doc__.split("\n")[0])
    p.add_argument("--module", required=True, metavar="FILE.py:FACTORY")
    p.add_argument("--init", required=True, help="the exported init.safetensors")
    p.add_argument("--partition", required=True, help="the partition JSON pipewright ran")
    p.add_argument("--schedule", required=True, choices=sorted(list(SINGLE) + list(MULTI)))
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--data-x", required=True)
    p.add_argument("--data-y", required=True)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--defer-pp-recv", action="store_true",
                   help="torch's defer_pp_recv (multi-stage schedules): receive at the consumer")
    p.add_argument("--times-out", default="", help="per-action medians as JSON")
    a = p.parse_args(argv)
    port = 29500 + (os.getpid() % 3000)
    mp.spawn(worker, args=(a, port), nprocs=a.pp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
