#!/usr/bin/python3
"""Notebook-style sweep (docs/library.md): the bubble fraction of each schedule as the number of
microbatches m grows, for P pipeline ranks with what-if costs (F = 1 ms, B = 2 ms per stage).
Prints a table; plots it to sweep.png (or --plot FILE) when matplotlib is installed.

    PYTHONPATH=<prefix>/lib/python3/dist-packages /usr/bin/python3 sweep.py [--ranks 4]
"""
import argparse
import sys

import pipewright as pw


def sweep(ranks: int, ms, schedules):
    """{schedule: [bubble fraction for each m]}; None where torch rejects the shape."""
    table = {}
    for name in schedules:
        v = 2 if name in ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble") else 1
        row = []
        for m in ms:
            try:
                plan = pw.schedule(name, ranks=ranks, microbatches=m, stages_per_rank=v)
            except pw.ConfigError:  # e.g. 1F1B with m < ranks, as torch
                row.append(None)
                continue
            assert pw.validate(plan) == [], name
            metrics = pw.simulate(plan, forward_ms=1.0, backward_ms=2.0)
            row.append(metrics["bubble_fraction"])
        table[name] = row
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", "-p", "--ranks", dest="pp", type=int, default=4,
                    help="pipeline ranks P (--ranks: the old spelling)")
    ap.add_argument("--microbatches", "-m", default="4,8,16,32",
                    help="comma-separated microbatch counts to sweep")
    ap.add_argument("--plot", default="sweep.png", help="plot file (needs matplotlib)")
    args = ap.parse_args(argv)
    ms = [int(x) for x in args.microbatches.split(",")]
    schedules = ["GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble"]
    table = sweep(args.pp, ms, schedules)

    print(f"bubble fraction, P={args.pp}, F=1 ms, B=2 ms")
    print(f"{'schedule':<22}" + "".join(f"{'m=' + str(m):>9}" for m in ms))
    for name, row in table.items():
        cells = "".join(f"{'-':>9}" if b is None else f"{b:>9.3f}" for b in row)
        print(f"{name:<22}{cells}")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return 0
    fig, ax = plt.subplots()
    for name, row in table.items():
        points = [(m, b) for m, b in zip(ms, row) if b is not None]
        ax.plot([m for m, _ in points], [b for _, b in points], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("microbatches m")
    ax.set_ylabel("bubble fraction")
    ax.legend()
    fig.savefig(args.plot)
    print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
