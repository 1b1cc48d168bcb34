#!/usr/bin/env python3
"""Issue 46 through the CLI: `search` with zero stages, recompute and the Pareto front (text and
JSON), and `calibrate gemm` fitting the device's achieved-GEMM fraction to one measured run.

Usage: search_cli.py BIN_DIR WORK_DIR SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys

BIN, WORK, SRC = sys.argv[1:4]
PW = os.path.join(BIN, "pipewright")
GPT = os.path.join(SRC, "examples", "gpt-small.json")
A100 = os.path.join(SRC, "examples", "cluster-dgx-a100-80gb.json")
failures = []


def fail(msg: str) -> None:
    failures.append(msg)
    print("FAIL", msg)


def run(args: list) -> subprocess.CompletedProcess:
    return subprocess.run([PW, "--log-level", "warn"] + args, capture_output=True, text=True,
                          timeout=240, cwd=WORK)


os.makedirs(WORK, exist_ok=True)
SEARCH = ["search", "--model", GPT, "-n", "8", "--global-batch", "64", "--memory-limit", "2GiB",
          "--optimizer", "adam", "--schedules", "1F1B", "--no-progress"]

# The Pareto front in JSON: every row says whether it is on it; the front is sorted and no row
# beats a front row in both throughput and memory.
r = run(SEARCH + ["--top", "1000", "-f", "json"])
if r.returncode != 0:
    fail(f"search -f json: exit {r.returncode}: {r.stderr}")
else:
    j = json.loads(r.stdout)
    front = j["pareto_front"]
    rows = j["ranked"]
    if len(front) < 2:
        fail(f"a front of {len(front)} rows")
    for a, b in zip(front, front[1:]):
        if not (a["throughput_samples_per_s"] >= b["throughput_samples_per_s"] and
                a["peak_memory_bytes"] >= b["peak_memory_bytes"]):
            fail(f"front not sorted: {a['description']} then {b['description']}")
    names = {f["description"] for f in front}
    for row in rows:
        if row["pareto"] != (row["description"] in names):
            fail(f"{row['description']}: pareto {row['pareto']}")
        if row["peak_memory_bytes"] > 2 << 30:
            fail(f"{row['description']}: over the 2 GiB limit")
    modes = {row["recompute"] for row in rows}
    zeros = {row["zero_stage"] for row in rows if row["dp"] > 1}
    if modes != {"none", "selective", "full"} or zeros != {0, 1, 2, 3}:
        fail(f"recompute modes {modes}, zero stages {zeros}: not every one searched")
    if j["pruned_memory"] <= 0 or j["dropped_memory"] < j["pruned_memory"]:
        fail(f"pruned {j['pruned_memory']}, dropped {j['dropped_memory']}")

# Text: --pareto marks the front's rows and lists it.
r = run(SEARCH + ["--top", "5", "--pareto", "--recompute", "none,selective", "--zero-stages", "0,1"])
if r.returncode != 0 or "Pareto front" not in r.stdout or not re.search(r"^\s+1\* ", r.stdout, re.M):
    fail(f"search --pareto:\n{r.stdout}{r.stderr}")
if re.search(r"\bfull\b", r.stdout.split("Pareto front")[0]) or " zero2" in r.stdout:
    fail(f"--recompute none,selective --zero-stages 0,1 searched other modes:\n{r.stdout}")
for bad in (["--recompute", "partial"], ["--zero-stages", "4"]):
    r = run(SEARCH + bad)
    if r.returncode != 2:
        fail(f"search {' '.join(bad)}: exit {r.returncode}, expected 2: {r.stderr}")

# calibrate gemm: fit f on a run simulated at f = 0.5, then the fitted cluster predicts that run.
model = os.path.join(WORK, "gpt-cal.json")
run(["model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16", "--seq", "1024",
     "--vocab", "32000", "-o", model])
JOB = ["--model", model, "--schedule", "1F1B", "--pp", "2", "--dp", "2", "--tp", "2",
       "--microbatches", "4", "--batch-size", "4", "--precision", "bf16"]
r = run(["simulate", "--cluster", A100, "--gemm-fraction", "0.5", "--metrics", "-"] + JOB)
if r.returncode != 0:
    fail(f"simulate: {r.stderr}")
else:
    measured = json.loads(r.stdout)["makespan_ms"]
    fitted = os.path.join(WORK, "fitted.json")
    r = run(["calibrate", "gemm", "--cluster", A100, "--measured-step-ms", str(measured), "-o",
             fitted] + JOB)
    if r.returncode != 0:
        fail(f"calibrate gemm: exit {r.returncode}: {r.stderr}")
    else:
        f = json.load(open(fitted))["device"]["achieved_gemm_fraction"]
        if abs(f - 0.5) > 2e-3:
            fail(f"calibrate gemm fitted {f}, expected 0.5")
    for bad, why in ((["--measured-step-ms", "0.001"], "outside what a fraction"),
                     ([], "--measured-step-ms or --measured-tflops")):
        r = run(["calibrate", "gemm", "--cluster", A100] + bad + JOB)
        if r.returncode != 2 or why not in r.stderr:
            fail(f"calibrate gemm {bad}: exit {r.returncode}: {r.stderr}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("search and calibrate gemm: OK")
