"""Shared fixtures: each example is exported once per session, in this process (torch is
imported once), into a temporary folder."""
import contextlib
import io
import json
import os
import sys
from dataclasses import dataclass
from typing import Dict, List

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, HERE)

torch = pytest.importorskip("torch")

from pipewright_export import cli  # noqa: E402
from pipewright_export.script import JIT_DEPRECATION  # noqa: E402


def pytest_configure(config) -> None:
    # The tests load nodes with torch.jit.load themselves: torch 2.x's deprecation notice
    # (pipewright_export/script.py) would fill the summary. Only that notice is filtered.
    for category in ("FutureWarning", "DeprecationWarning"):
        config.addinivalue_line("filterwarnings", f"ignore:{JIT_DEPRECATION}:{category}")

EXAMPLES = {
    "gpt2": "examples/byo/gpt2.py:tiny_gpt2",
    "llama": "examples/byo/llama.py:tiny_llama",
    "skipnet": "examples/byo/skipnet.py:skipnet",
}


@dataclass
class Exported:
    name: str
    module: str  # FILE.py:factory, relative to the repository
    dir: str
    stdout: str
    model: Dict


def run_cli(argv: List[str]) -> tuple:
    """(exit code, stdout, stderr) of pipewright-export run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


_CACHE: Dict[str, Exported] = {}


def export_example(name: str, tmp_path_factory) -> Exported:
    if name in _CACHE:
        return _CACHE[name]
    out_dir = str(tmp_path_factory.mktemp(name))
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        code, out, err = run_cli(["--module", EXAMPLES[name], "--input-shape", "16",
                                  "--input-dtype", "int64", "--micro-batch-size", "2",
                                  "-o", out_dir])
    finally:
        os.chdir(cwd)
    assert code == 0, err
    with open(os.path.join(out_dir, "model.json")) as f:
        model = json.load(f)
    _CACHE[name] = Exported(name, EXAMPLES[name], out_dir, out, model)
    return _CACHE[name]


@pytest.fixture(scope="session", params=sorted(EXAMPLES))
def exported(request, tmp_path_factory) -> Exported:
    return export_example(request.param, tmp_path_factory)


@pytest.fixture(scope="session")
def gpt2(tmp_path_factory) -> Exported:
    return export_example("gpt2", tmp_path_factory)


@pytest.fixture(scope="session")
def llama(tmp_path_factory) -> Exported:
    return export_example("llama", tmp_path_factory)


@pytest.fixture(scope="session")
def skipnet(tmp_path_factory) -> Exported:
    return export_example("skipnet", tmp_path_factory)


def load_example(spec: str):
    from pipewright_export.loading import build_module, parse_module_spec
    path, factory = parse_module_spec(os.path.join(REPO, spec))
    torch.manual_seed(0)
    return build_module(path, factory)
