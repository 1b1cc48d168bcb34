#!/usr/bin/python3
"""Times every offline `pipewright` command end to end, as a process, at four plan sizes.

Plans: Interleaved1F1B with p=64 ranks, v=4 stages per rank and m = 128, 256, 512, 1024
microbatches (m=1024: 524,288 compute actions). Models for model/partition/render/
transfer-profile: a GPT with L = m transformer blocks, cut into 64 stages; `search` explores one
fixed GPT (L=128) with a global batch of m samples. For each command it
prints the median wall time and peak RSS of REPEAT runs (default 3) at each size and the growth
exponent log(t2/t1)/log(m2/m1) between consecutive sizes and over the whole range (1.0 is
linear). Then start-up: the median of 7 runs of `pipewright --version` and of a small
`schedule`, and `pipewright run --help` through the front end beside `pipewright-exec run --help`
(the executor binary alone), measured alternately in one run.

Usage: bench/cli_scale.sh [BUILD_DIR]   (default build/; REPEAT=N, SIZES="128 256", BASE=old
pipewright binary to time beside this one (its scale table too unless BASE_SCALE=0; a quadratic
old binary takes minutes per size), KEEP=1 keeps the work folder)
"""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Sequence

P, V = 64, 4


GNU_TIME = "/usr/bin/time"


def run(cmd: Sequence[str], cwd: str) -> tuple[float, int]:
    """Runs cmd; returns (wall seconds, peak RSS in MB). Fails loudly on a non-zero exit.

    The RSS comes from GNU time around the command: a child forked from this Python process
    would report Python's own high-water mark (~13 MB) for commands smaller than that. The wall
    time includes GNU time's fork and exec (~0.5 ms)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        argv = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *cmd]
        start = time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"cli_scale: {' '.join(cmd)} exited {proc.returncode}:\n"
                     f"{proc.stderr.decode(errors='replace')}")
        rss_kb = int(rss_file.read().split()[-1])
    return wall, (rss_kb + 512) // 1024


def median_run(cmd: Sequence[str], cwd: str, repeat: int) -> tuple[float, int]:
    runs = [run(cmd, cwd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def write_profile(partition_file: str, out: str) -> None:
    """A profile for the partition's stages (costs from the partition's own stage table)."""
    with open(partition_file) as f:
        part = json.load(f)
    stages = []
    for i, st in enumerate(part["stages"]):
        stages.append({"stage": i, "forward_ms": st.get("forward_ms", 1.0),
                       "backward_ms": st.get("backward_ms", 2.0),
                       "param_bytes": st.get("param_bytes", 0),
                       "activation_bytes": st.get("activation_bytes", 0),
                       "output_bytes": st.get("output_bytes", 0)})
    with open(out, "w") as f:
        json.dump({"format": "pipewright-profile", "version": 1, "source": "executor",
                   "stages": stages, "p2p": {"latency_ms": 0.01, "bandwidth_gb_per_s": 10}}, f)


def commands(pw: str, m: int) -> list[tuple[str, list[str], Callable[[str], None] | None]]:
    """(name, argv, preparation run once before timing) for size m; files are per size."""
    plan, trace, model = f"plan{m}.json", f"trace{m}.json", f"gpt{m}.json"
    part, part_u, prof = f"part{m}.json", f"part_u{m}.json", f"profile{m}.json"
    sched = [pw, "schedule", "Interleaved1F1B", "--pp", str(P), "--stages-per-rank", str(V),
             "--microbatches", str(m), "--format", "json", "-o", plan]
    costs = ["--forward-ms", "1", "--backward-ms", "2"]
    gpt = [pw, "model", "gpt", "--layers", str(m), "--hidden", "1024", "--heads", "16",
           "--seq", "1024", "-o", model]
    return [
        ("schedule", sched, None),
        ("validate", [pw, "validate", plan], None),
        ("simulate", [pw, "simulate", plan, *costs], None),
        ("simulate --trace", [pw, "simulate", plan, *costs, "--trace", trace,
                              "--metrics", f"metrics{m}.json"], None),
        ("compare (trace in)", [pw, "compare", "--plan", plan, "--measured", trace,
                                "--warmup-steps", "0", "--sampled-steps", "0"], None),
        ("model gpt", gpt, None),
        ("partition", [pw, "partition", model, "--stages", str(P), "-o", part], None),
        ("render", [pw, "render", model, "--partition", part, "-o", f"model{m}.dot"], None),
        ("search", [pw, "search", "--model", "gpt_search.json", "--devices", str(P), "--schedules",
                    "Interleaved1F1B", "--stages-per-rank", str(V), "--global-batch", str(m),
                    "--no-progress"], None),
        ("transfer-profile", [pw, "transfer-profile", "--model", model, "--from", part,
                              "--profile", prof, "--to", part_u, "-o", f"moved{m}.json"],
         None),
    ]


def prepare_transfer(pw: str, m: int, cwd: str) -> None:
    run([pw, "partition", f"gpt{m}.json", "--stages", str(P), "--method", "uniform", "-o",
         f"part_u{m}.json"], cwd)
    write_profile(os.path.join(cwd, f"part{m}.json"), os.path.join(cwd, f"profile{m}.json"))


def exponent(t1: float, t2: float, m1: int, m2: int) -> float:
    return math.log(max(t2, 1e-4) / max(t1, 1e-4)) / math.log(m2 / m1)


def scale_table(label: str, pw: str, sizes: list[int], repeat: int, work: str) -> None:
    results: dict[str, list[tuple[float, int]]] = {}
    for m in sizes:
        for name, argv, _ in commands(pw, m):
            if name == "transfer-profile":
                prepare_transfer(pw, m, work)
            results.setdefault(name, []).append(median_run(argv, work, repeat))
    print(f"\n== {label}: {pw}")
    print(f"Interleaved1F1B p={P} v={V}; GPT with L=m blocks in {P} stages; median of {repeat}")
    head = "".join(f"{'m=' + str(m):>17}" for m in sizes)
    growth = "".join(f"{f'{a}->{b}':>11}" for a, b in zip(sizes, sizes[1:]))
    print(f"{'command':<20}{head}   growth exponent {growth}{'overall':>11}")
    for name, rows in results.items():
        cells = "".join(f"{t:>9.3f} s{rss:>5}MB" for t, rss in rows)
        exps = [exponent(rows[i][0], rows[i + 1][0], sizes[i], sizes[i + 1])
                for i in range(len(rows) - 1)]
        overall = exponent(rows[0][0], rows[-1][0], sizes[0], sizes[-1]) if len(rows) > 1 else 0
        print(f"{name:<20}{cells}   {'':16}{''.join(f'{e:>11.2f}' for e in exps)}"
              f"{overall:>11.2f}")
    if sizes[-1] == 1024:
        t, rss = results["simulate"][-1]
        actions = P * V * 1024 * 2
        print(f"simulate m=1024: {t:.3f} s, {actions / t / 1e6:.2f} M compute actions/s "
              f"({actions} compute actions), peak RSS {rss} MB")


def startup(pw: str, work: str) -> None:
    exec_bin = os.path.join(os.path.dirname(pw), "pipewright-exec")
    print("\n== start-up (median of 7 runs each, measured alternately)")
    cases = [("pipewright --version", [pw, "--version"]),
             ("pipewright schedule 1F1B --pp 4 --microbatches 8",
              [pw, "schedule", "1F1B", "--pp", "4", "--microbatches", "8"])]
    if os.access(exec_bin, os.X_OK):
        cases += [("pipewright run --help (front end -> pipewright-exec)", [pw, "run", "--help"]),
                  ("pipewright-exec run --help (executor binary alone)",
                   [exec_bin, "run", "--help"])]
    base = os.environ.get("BASE")
    if base:
        cases.append(("BASE run --help (the binary to compare with)",
                      [os.path.abspath(base), "run", "--help"]))
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name, _ in cases}
    for _ in range(7):
        for name, argv in cases:
            samples[name].append(run(argv, work))
    for name, rows in samples.items():
        t = statistics.median(r[0] for r in rows)
        rss = statistics.median(r[1] for r in rows)
        print(f"{name:<56} {t * 1000:>8.1f} ms {rss:>5} MB")
    if os.access(exec_bin, os.X_OK):
        front = statistics.median(r[0] for r in samples[cases[2][0]])
        alone = statistics.median(r[0] for r in samples[cases[3][0]])
        print(f"run start-up through the front end / executor alone: {front / alone:.3f}")
        if base:
            old = statistics.median(r[0] for r in samples[cases[-1][0]])
            print(f"run start-up through the front end / BASE: {front / old:.3f}")
    maps = subprocess.run(["ldd", pw], capture_output=True, text=True).stdout
    heavy = [lib for lib in ("libtorch", "libc10", "libmpi", "libgloo", "libnccl", "libcuda",
                             "libcudart") if lib in maps]
    print(f"libraries `pipewright` links: {len(maps.splitlines())}; "
          f"torch/MPI/Gloo/NCCL/CUDA among them: {', '.join(heavy) or 'none'}")


def torch_reference() -> None:
    print("\n== torch.distributed.pipelining (planner + simulator)")
    probe = subprocess.run(["/usr/bin/python3", "-c",
                            "import torch, torch.distributed.pipelining as p; print(torch.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        have = subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True)
        version = have.stdout.strip() or "not installed"
        print(f"/usr/bin/python3 has torch {version}, which has no torch.distributed.pipelining "
              "(added in torch 2.4).")
        print("Recorded with torch 2.x (docs/performance.md): p=32 v=4 m=256 planning 1.24 s, "
              "simulating 3.8 s.")
    else:
        print(f"torch {probe.stdout.strip()} has torch.distributed.pipelining: not timed here "
              "(the recorded figures are in docs/performance.md).")


def main() -> None:
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    pw = os.path.abspath(os.path.join(build, "bin", "pipewright"))
    if not os.access(pw, os.X_OK):
        sys.exit(f"cli_scale: {pw} not found; build first (cmake --build --preset default)")
    repeat = int(os.environ.get("REPEAT", "3"))
    sizes = [int(s) for s in os.environ.get("SIZES", "128 256 512 1024").split()]
    if not os.access(GNU_TIME, os.X_OK):
        sys.exit("cli_scale: needs GNU time (apt-get install time)")
    work = tempfile.mkdtemp(prefix="pw-cli-scale-")
    try:
        run([pw, "model", "gpt", "--layers", "128", "--hidden", "1024", "--heads", "16", "--seq",
             "1024", "-o", "gpt_search.json"], work)
        scale_table("pipewright", pw, sizes, repeat, work)
        # torch's recorded shape, side by side.
        t_plan, _ = median_run([pw, "schedule", "Interleaved1F1B", "--pp", "32",
                                "--stages-per-rank", "4", "--microbatches", "256", "--format",
                                "json", "-o", "t32.json"], work, repeat)
        t_sim, _ = median_run([pw, "simulate", "t32.json", "--forward-ms", "1", "--backward-ms",
                               "2"], work, repeat)
        print(f"pipewright p=32 v=4 m=256 (torch's recorded shape): schedule {t_plan:.3f} s, "
              f"simulate {t_sim:.3f} s; torch 2.x recorded 1.24 s / 3.8 s: "
              f"{1.24 / t_plan:.0f}x / {3.8 / t_sim:.0f}x")
        base = os.environ.get("BASE")
        if base and os.environ.get("BASE_SCALE", "1") == "1":
            scale_table("BASE", os.path.abspath(base), sizes, repeat, work)
        startup(pw, work)
        torch_reference()
    finally:
        if os.environ.get("KEEP") == "1":
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
