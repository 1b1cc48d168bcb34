"""torch's compute_comms CSV both ways (issue 37, item 2), against the pinned torch 2.x of
tools/install-deps --torch pip:

1. torch lowers pipewright's compute-only CSV and dumps compute_comms (_dump_csv); pipewright
   validates and simulates that file;
2. pipewright writes it back (`convert -f torch-comms`) and torch loads it (_load_csv with
   format="compute_comms"), dry-runs it (_simulate, where torch's own file dry-runs) and dumps
   the same file again;
3. `schedule --lower --format torch-comms` loads in torch.

Run with the venv's python; exit 77 (skipped) without torch 2.x.
usage: torch_comms.py BIN_DIR WORK_DIR
"""
import os
import subprocess
import sys

try:
    import torch
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
except ImportError as e:  # no torch, or a torch without pipelining (1.x)
    print(f"torch_comms: no torch 2.x with pipelining ({e}): skipped")
    sys.exit(77)

BIN, WORK = (os.path.abspath(a) for a in sys.argv[1:3])
PW = os.path.join(BIN, "pipewright")
os.makedirs(WORK, exist_ok=True)
failures = []


def fail(msg: str) -> None:
    failures.append(msg)
    print("FAIL", msg)


def pw(args: list) -> subprocess.CompletedProcess:
    r = subprocess.run([PW, "--log-level", "warn"] + args, capture_output=True, text=True,
                       timeout=120, cwd=WORK)
    if r.returncode != 0:
        fail(f"pipewright {' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r


def runtime(ranks: int, stages: int, microbatches: int) -> _PipelineScheduleRuntime:
    """A runtime schedule with no stages attached: enough to load, lower, dry-run and dump."""
    s = _PipelineScheduleRuntime.__new__(_PipelineScheduleRuntime)
    s._unshard_lookahead = "full"
    s._max_active_stages = 3
    s._defer_reduce_grad_wait = False
    s._defer_pp_recv = False
    s._max_outstanding_sends = None
    s.pp_group_size = ranks
    s._num_stages = stages
    s._n_microbatches = microbatches
    s._stages = []
    s.pipeline_order = {}
    return s


def read(path: str) -> str:
    return open(path, newline="").read().replace("\r\n", "\n")


SHAPES = [("1F1B", 2, 4, 1), ("1F1B", 4, 8, 1), ("GPipe", 2, 4, 1),
          ("Interleaved1F1B", 2, 4, 2), ("InterleavedZeroBubble", 2, 4, 2),
          ("ZBVZeroBubble", 2, 4, 2), ("DualPipeV", 2, 4, 2)]
for name, p, m, v in SHAPES:
    what = f"{name} p={p} m={m} v={v}"
    stages = p * v
    compute = os.path.join(WORK, "compute.csv")
    if pw(["schedule", name, "-p", str(p), "-m", str(m), "-v", str(v), "-o", compute]).returncode:
        continue
    # 1. torch's lowering of pipewright's compute-only CSV.
    t = runtime(p, stages, m)
    t._load_csv(compute, format="compute_only")
    torch_csv = os.path.join(WORK, "torch.csv")
    t._dump_csv(torch_csv, format="compute_comms")
    # torch's dry run (_simulate) knows no REDUCE_GRAD or OVERLAP_F_B: dry-run pipewright's
    # file only where torch's own file dry-runs.
    try:
        t._simulate()
        dry_run = True
    except (ValueError, KeyError):
        dry_run = False
    if "valid lowered plan" not in pw(["validate", torch_csv]).stdout:
        fail(f"{what}: torch's compute_comms CSV does not validate")
    pw(["simulate", torch_csv, "--forward-ms", "1", "--backward-ms", "2"])
    # 2. pipewright's file loads in torch, which dumps it unchanged.
    mine = os.path.join(WORK, "pw.csv")
    if pw(["convert", torch_csv, "-f", "torch-comms", "-o", mine]).returncode:
        continue
    t2 = runtime(p, stages, m)
    try:
        t2._load_csv(mine, format="compute_comms")
        if dry_run:
            t2._simulate()
    except Exception as e:  # noqa: BLE001 - any torch error is the test's failure
        fail(f"{what}: torch rejects pipewright's compute_comms CSV: {e!r}")
        continue
    again = os.path.join(WORK, "again.csv")
    t2._dump_csv(again, format="compute_comms")
    if read(again) != read(mine):
        fail(f"{what}: torch dumps another plan than it loaded:\n{read(mine)}\n{read(again)}")
    # Torch's file and pipewright's hold the same plan (torch may put a RECV between a
    # REDUCE_GRAD and its wait, pipewright writes the wait right after it).
    as_json = [pw(["convert", f, "-f", "json"]).stdout for f in (torch_csv, mine, again)]
    if as_json[0] != as_json[1] or as_json[1] != as_json[2]:
        fail(f"{what}: torch's file, pipewright's and torch's reload are not the same plan")
    # 3. schedule --lower --format torch-comms.
    lowered = os.path.join(WORK, "lowered.csv")
    if pw(["schedule", name, "-p", str(p), "-m", str(m), "-v", str(v), "--lower",
           "--reduce-grad", "-f", "torch-comms", "-o", lowered]).returncode == 0:
        t3 = runtime(p, stages, m)
        try:
            t3._load_csv(lowered, format="compute_comms")
        except Exception as e:  # noqa: BLE001
            fail(f"{what}: torch rejects `schedule --lower --format torch-comms`: {e!r}")
    print(f"OK   {what}")

print(f"torch {torch.__version__}: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
