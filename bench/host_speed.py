#!/usr/bin/env python3
"""How steady this host's compute is: the noise floor under bench/fidelity.sh's transfer column.

One thread runs the same small MLP forward + backward (16 x 512 -> 2048 -> 512, libtorch on one
CPU thread, about the size of a fidelity-matrix stage's F + B) back to back for SECONDS and prints
the median thread-CPU time per op in each WINDOW-second window, and the largest over the smallest
window median. Thread CPU time leaves out waiting for a core, so a change here is the work itself
running slower (another guest on the same physical cores, the host's clock), which no profile
measured minutes earlier can know (docs/simulator.md, "Fidelity against the executor").

  /usr/bin/python3 bench/host_speed.py [SECONDS=60] [WINDOW=5]
"""
import statistics
import sys
import time

import torch


def main() -> int:
    try:
        total = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
        window = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    except ValueError as e:
        print(f"host_speed.py: SECONDS and WINDOW are numbers ({e})", file=sys.stderr)
        return 2
    if len(sys.argv) > 3 or not 0 < window <= total:
        print("usage: host_speed.py [SECONDS] [WINDOW], 0 < WINDOW <= SECONDS", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 512))
    x = torch.randn(16, 512)

    def op() -> float:
        start = time.thread_time()
        model(x).sum().backward()
        return (time.thread_time() - start) * 1e3

    for _ in range(50):  # warm-up
        op()
    medians = []
    end = time.monotonic() + total
    while time.monotonic() < end:
        times = []
        t = time.monotonic()
        while time.monotonic() - t < window:
            times.append(op())
        medians.append(statistics.median(times))
    print("window medians (ms per op, thread CPU):", " ".join(f"{m:.2f}" for m in medians))
    print(f"max/min {max(medians) / min(medians):.2f}  median {statistics.median(medians):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
