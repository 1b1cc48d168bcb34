#!/usr/bin/env python3
"""Issues 43/47 through the CLI: `pipewright calibrate` measures ZeRO's reduce-scatter and
all-gather on registered and private buffers and writes them as the cluster's
sharded_collective_links (intra_node: a one-node calibration), with their samples under
"calibration"; `simulate` prices ZeRO-3 with them (and DDP as before).

Usage: calibrate_cli.py BIN_DIR WORK_DIR SOURCE_DIR
"""
import copy
import json
import os
import re
import subprocess
import sys

BIN, WORK, SRC = sys.argv[1:4]
PW = os.path.join(BIN, "pipewright")
GPT = os.path.join(SRC, "tests", "data", "sim", "gpt8.json")
NAMES = ["reduce_scatter", "all_gather", "reduce_scatter_unregistered", "all_gather_unregistered"]
failures = []


def fail(msg: str) -> None:
    failures.append(msg)
    print("FAIL", msg)


def run(args: list) -> subprocess.CompletedProcess:
    return subprocess.run([PW] + args, capture_output=True, text=True, timeout=240, cwd=WORK)


def makespan(cluster: str, zero: int) -> float:
    r = run(["--log-level", "warn", "simulate", "--model", GPT, "--pp", "2", "--dp", "2",
             "--microbatches", "4", "--zero-stage", str(zero), "--cluster", cluster])
    if r.returncode != 0:
        fail(f"simulate --cluster {cluster} --zero-stage {zero}: exit {r.returncode}: {r.stderr}")
        return -1.0
    return float(re.search(r"makespan ([0-9.]+) ms", r.stdout).group(1))


os.makedirs(WORK, exist_ok=True)
cal = os.path.join(WORK, "cal.json")
r = run(["--log-level", "info", "calibrate", "--backend", "gloo", "--nproc", "2",
         "--iterations", "3", "--max-mib", "0.25", "-o", cal])
if r.returncode != 0:
    print(r.stdout, r.stderr)
    sys.exit(f"FAIL calibrate: exit {r.returncode}")
for name in NAMES:
    if not re.search(name + r": latency [0-9.]+ ms, bandwidth [0-9.]+ GB/s", r.stderr):
        fail(f"calibrate's log has no fit of {name}")
if "sizes rounded to 2 equal pieces" not in r.stderr:
    fail("calibrate's log does not say how it rounded the sizes")

c = json.load(open(cal))
links = c.get("sharded_collective_links", {})
if sorted(links) != sorted(NAMES):
    fail(f"sharded_collective_links has {sorted(links)}, expected {sorted(NAMES)}")
for name in NAMES:
    link = links.get(name, {})
    # Measured on one node: within a node only; across nodes the collective link stays.
    if list(link) != ["intra_node"]:
        fail(f"{name}: {link} is not an intra_node link alone")
        continue
    lat, bw = link["intra_node"]["latency_ms"], link["intra_node"]["bandwidth_gb_per_s"]
    if not (lat >= 0 and bw >= 0 and lat + bw > 0):
        fail(f"{name}: latency {lat} ms, bandwidth {bw} GB/s")
    rec = c["calibration"]["sharded_collectives"].get(name, {})
    sizes = [t["bytes"] for t in rec.get("timings", [])]
    # 4 B .. 256 KiB in powers of 4, each rounded to a multiple of 4 * 2 bytes.
    want = [max(8, 4 ** k) for k in range(1, 10)]
    if sizes != want:
        fail(f"{name}: measured at {sizes}, expected {want}")
    for t in rec.get("timings", []):
        if not (0 < t["p10_ms"] <= t["median_ms"] <= t["p90_ms"] and t["samples"] == 5):
            fail(f"{name}: timing {t}")
    if not 0 <= rec.get("fit_error", {}).get("mean", -1) < 10:
        fail(f"{name}: fit error {rec.get('fit_error')}")

# simulate reads them: ZeRO-3's time changes with them, DDP's does not.
plain = copy.deepcopy(c)
del plain["sharded_collective_links"]
plain_path = os.path.join(WORK, "cal_plain.json")
json.dump(plain, open(plain_path, "w"))
if makespan(cal, 3) == makespan(plain_path, 3):
    fail("ZeRO-3's predicted step ignores the sharded collective links")
if makespan(cal, 0) != makespan(plain_path, 0):
    fail("DDP's predicted step depends on the sharded collective links")

print("FAILED" if failures else "OK", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
