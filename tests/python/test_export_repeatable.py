"""Two exports of the same module agree per node (issue 32 item 5): each Python with torch, the
one running these tests and the pip torch 2.x venv (tools/install-deps --torch pip), exports the
smallest example twice, each in its own process as a user would, and every node's forward_ms and
backward_ms must agree within 20%. Timings are only comparable on a quiet machine: when they
disagree while the machine is busy (1-minute load average above cores - 1), the test skips,
saying so, instead of failing. The exports run with OMP_NUM_THREADS=1, as `pipewright launch`
runs ranks (docs/your-own-model.md, Costs)."""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Tuple

import pytest

from conftest import REPO

EXAMPLE = ["--module", "examples/byo/skipnet.py:skipnet", "--input-shape", "16",
           "--input-dtype", "int64", "--micro-batch-size", "2"]
TOLERANCE = 0.2  # max / min of the two exports' timings, minus 1
FLOOR_MS = 0.003  # below this difference, timings agree (a few µs of call overhead)
TIMINGS = ("forward_ms", "backward_ms")


def pip_torch_venv() -> str:
    """${PIPEWRIGHT_TORCH_VENV:-<repo>/.venv-torch}, as tools/install-deps --torch pip makes it."""
    return os.environ.get("PIPEWRIGHT_TORCH_VENV", os.path.join(REPO, ".venv-torch"))


def python_for(which: str) -> str:
    if which == "running":
        return sys.executable
    venv = pip_torch_venv()
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        pytest.skip(f"no pip torch venv at {venv} (tools/install-deps --torch pip makes it; "
                    "PIPEWRIGHT_TORCH_VENV names another)")
    # A venv's python is a link to the base interpreter: compare the venvs, not the binaries.
    if os.path.realpath(venv) == os.path.realpath(sys.prefix):
        pytest.skip(f"the pip torch venv ({venv}) is the one running the tests")
    return python


@dataclass
class Export:
    costs: Dict[str, Dict[str, float]]  # node -> cost
    unsettled: List[str]  # the report's "still spread" timings
    stderr: str


def export(python: str, out: str) -> Export:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([python, os.path.join(REPO, "tools", "pipewright-export")] + EXAMPLE
                       + ["-o", out], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    with open(os.path.join(out, "model.json")) as f:
        model = json.load(f)
    still = [line.split(": ", 1)[1].split(";")[0] for line in p.stdout.splitlines()
             if line.startswith("still spread")]
    return Export({n["name"]: n["cost"] for n in model["nodes"]},
                  still[0].split(", ") if still else [], p.stderr)


def disagreements(a: Export, b: Export) -> List[str]:
    out = []
    for node, ca in a.costs.items():
        for key in TIMINGS:
            x, y = ca[key], b.costs[node][key]
            lo, hi = min(x, y), max(x, y)
            if hi - lo > FLOOR_MS and hi > (1 + TOLERANCE) * lo:
                out.append(f"{node} {key} {x:.4f} vs {y:.4f}")
    return out


def busy() -> Tuple[bool, str]:
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    return load > cores - 1, f"1-minute load average {load:.1f} on {cores} cores"


@pytest.mark.parametrize("which", ["running", "pip-torch"])
def test_two_exports_agree_per_node(which, tmp_path):
    # Not in CI: a shared VM changes speed under a process (measured: 1.7x between exports on an
    # idle 16-core VM), which no exporter can measure away.
    if os.environ.get("PIPEWRIGHT_TIMING_TESTS") != "1":
        pytest.skip("a timing test: PIPEWRIGHT_TIMING_TESTS=1 runs it, on a quiet machine")
    python = python_for(which)
    first = export(python, str(tmp_path / "a"))
    second = export(python, str(tmp_path / "b"))
    # No warning noise (the TorchScript deprecation notices of torch >= 2.5 are filtered).
    assert first.stderr == "" and second.stderr == "", first.stderr + second.stderr
    assert first.costs.keys() == second.costs.keys()
    problems = disagreements(first, second)
    if not problems:
        return
    is_busy, load = busy()
    # What the exporter itself flagged (a kept round still spread over 20%), for the reader.
    flagged = f"; the exports flagged {', '.join(first.unsettled + second.unsettled) or 'none'}"
    if is_busy:
        pytest.skip(f"timings differ on a busy machine ({load}): {'; '.join(problems)}{flagged}")
    pytest.fail(f"two exports disagree by more than {TOLERANCE:.0%} on a quiet machine "
                f"({load}): {'; '.join(problems)}{flagged}")
