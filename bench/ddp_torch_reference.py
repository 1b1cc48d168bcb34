#!/usr/bin/python3
"""PyTorch side of bench/ddp_vs_torch.sh: DistributedDataParallel step time of the same MLP.

Usage: ddp_torch_reference.py DP STEPS BATCH X.npy Y.npy
Spawns DP processes (gloo, 127.0.0.1, one thread each), trains nn.Sequential of the same Linear
layers with ReLU in between, SGD lr 0.01, MSE, batch BATCH per replica (rows r, r + DP, ... of the
files, like pipewright's --no-shuffle sharding), and prints one line per step on rank 0:
  torch step <k> <milliseconds>
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def worker(rank, dp, steps, batch, xpath, ypath, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=dp)
    x = torch.from_numpy(np.load(xpath))
    y = torch.from_numpy(np.load(ypath))
    sizes = [x.shape[1]] + [1024] * 3 + [y.shape[1]]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    shard = torch.arange(rank, x.shape[0], dp)
    pos = 0
    for step in range(steps):
        idx = shard[torch.arange(pos, pos + batch) % shard.numel()]
        pos += batch
        xb, yb = x[idx], y[idx]
        t0 = time.perf_counter()
        loss = nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        lsum = loss.detach().clone()
        dist.all_reduce(lsum)  # same per-step end as pipewright (loss all-reduce)
        ms = (time.perf_counter() - t0) * 1000
        if rank == 0:
            print(f"torch step {step} {ms:.3f}", flush=True)
    dist.destroy_process_group()


def main():
    dp, steps, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    port = 29000 + (os.getpid() % 2000)
    mp.spawn(worker, args=(dp, steps, batch, sys.argv[4], sys.argv[5], port), nprocs=dp)


if __name__ == "__main__":
    main()
