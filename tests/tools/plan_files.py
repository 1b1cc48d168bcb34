#!/usr/bin/python3
"""Plans the CLI writes are plans it reads back (issue 36, item 2), through the commands a user
types: `pipewright schedule ... --format F -o FILE` then `pipewright validate FILE`, for every
schedule, compute-only and lowered, CSV and JSON, over a grid of shapes. Either the file validates
as the same shape (ranks, stages, microbatches, action count as `schedule` made them), or the
writer refused with exit 2, naming why and JSON, and wrote no file. `simulate --plan-out` files read
back as the plan they hold. Pictures (--format text, dot) are refused by `validate` as pictures. The library-level test (tests/sched/plan_io_test.cpp,
RoundTrip.EveryScheduleFormatAndShapeReadsBackTheSame) compares the plans field by field.

usage: plan_files.py BIN_DIR WORK_DIR
"""
import json
import os
import re
import subprocess
import sys

BIN, WORK = (os.path.abspath(a) for a in sys.argv[1:3])
PW = os.path.join(BIN, "pipewright")
os.makedirs(WORK, exist_ok=True)
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def run(args):
    return subprocess.run([PW, "--log-level", "warn"] + args, capture_output=True, text=True,
                          timeout=60, cwd=WORK)


SCHEDULES = ["GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
             "ZBVZeroBubble", "DualPipeV", "Chimera"]
LOOPED = {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"}


def check(shape):
    """Writes `shape` in both formats and reads each file back; returns (written, refused)."""
    made = run(shape + ["--format", "json"])
    if made.returncode == 2:
        return 0, 0  # a shape the schedule rejects
    plan = json.loads(made.stdout)
    want = f"{plan['ranks']} ranks, {plan['stages']} stages, {plan['microbatches']} microbatches"
    # OVERLAP_F_B units (DualPipeV) are one cell but three actions in memory: count cells.
    cells = sum(len(r) for r in plan["actions"])
    counts = [0, 0]
    for fmt in ("csv", "json"):
        what = " ".join(shape + ["--format", fmt])
        path = os.path.join(WORK, f"plan.{fmt}")
        if os.path.exists(path):
            os.remove(path)
        w = run(shape + ["--format", fmt, "-o", path])
        if w.returncode == 2:
            counts[1] += 1
            if fmt == "json" or "cannot carry this plan" not in w.stderr or \
                    "--format json" not in w.stderr:
                fail(f"{what}: refused without naming why and JSON: {w.stderr}")
            if os.path.exists(path):
                fail(f"{what}: refused, but wrote {path}")
            continue
        if w.returncode != 0:
            fail(f"{what}: exit {w.returncode}: {w.stderr}")
            continue
        counts[0] += 1
        v = run(["validate", path])
        if v.returncode != 0 or want not in v.stdout:
            fail(f"{what}: validate exit {v.returncode}, expected '{want}':\n{v.stdout}{v.stderr}")
            continue
        n = int(re.search(r"(\d+) actions", v.stdout).group(1))
        if n != cells and "DualPipeV" not in shape:
            fail(f"{what}: {n} actions read back, {cells} written")
    return counts


written = refused = 0
for name in SCHEDULES:
    for p in (1, 2, 4):
        for m in (4, 8):
            for lower in ([], ["--lower"]):
                v = ["-v", "2"] if name in LOOPED else []
                w, r = check(["schedule", name, "-p", str(p), "-m", str(m)] + v + lower)
                written, refused = written + w, refused + r

# The report of issue 36.
w = run(["schedule", "Chimera", "-p", "4", "-m", "4", "--format", "csv", "-o", "ch.csv"])
if w.returncode != 2 or "Chimera: torch's CSV cannot carry this plan" not in w.stderr \
        or os.path.exists(os.path.join(WORK, "ch.csv")):
    fail(f"schedule Chimera --format csv: exit {w.returncode}: {w.stderr}")
# `simulate --plan-out` (and `run --dry-run --plan-out`) write the job and its plan: a plan file
# that validate and simulate read back, to the same simulated step.
sim = ["simulate", "--forward-ms", "1", "--backward-ms", "2"]
for shape, dp in ((["--schedule", "1F1B", "-p", "2", "-m", "4"], []),
                  (["--schedule", "Chimera", "-p", "4", "-m", "4"], ["--dp", "2"]),
                  (["--schedule", "DualPipeV", "-p", "2", "-m", "4"], [])):
    out = os.path.join(WORK, "job.plan-out.json")
    first = run(sim + shape + dp + ["--plan-out", out])
    v = run(["validate", out])
    again = run(["simulate", out] + sim[1:] + dp)  # the file gives the plan its shape
    if first.returncode or v.returncode or again.returncode or \
            first.stdout.split("\n")[1] != again.stdout.split("\n")[1]:
        fail(f"simulate {' '.join(shape + dp)} --plan-out, then validate and simulate it: "
             f"{first.stdout}{first.stderr}{v.stdout}{v.stderr}{again.stdout}{again.stderr}")

# Pictures are not plans, and `validate` says so.
for fmt, word in (("text", "text grid"), ("dot", "Graphviz picture")):
    path = os.path.join(WORK, f"picture.{fmt}")
    run(["schedule", "1F1B", "-p", "2", "-m", "4", "--format", fmt, "-o", path])
    v = run(["validate", path])
    if v.returncode != 2 or word not in v.stderr or "--format csv or json" not in v.stderr:
        fail(f"validate on a --format {fmt} picture: exit {v.returncode}: {v.stderr}")

print(f"{written} plan files written and read back, {refused} refused; {len(failures)} failure(s)")
if written < 50 or refused < 4:
    fail("the grid is smaller than it should be")
sys.exit(1 if failures else 0)
