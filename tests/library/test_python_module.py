"""The Python module `pipewright` (issue 26) against the CLI: for the same inputs, the same plan
(CSV, JSON, text, dot), validation problems, simulator metrics, models, partitions and
renderings. PIPEWRIGHT_BIN is the CLI, PIPEWRIGHT_TEST_DATA tests/data, PYTHONPATH the build
tree's package (tests/library/CMakeLists.txt)."""
import json
import os
import subprocess
from typing import List, Tuple

import pytest

import pipewright as pw

CLI = os.environ["PIPEWRIGHT_BIN"]
DATA = os.environ["PIPEWRIGHT_TEST_DATA"]


def cli(*args: str, expect: int = 0) -> Tuple[str, str]:
    proc = subprocess.run([CLI, "--log-level", "warn", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == expect, (args, proc.returncode, proc.stderr)
    return proc.stdout, proc.stderr


SHAPES = [("GPipe", 4, 8, 1), ("1F1B", 4, 8, 1), ("1F1B", 2, 5, 1), ("Interleaved1F1B", 2, 4, 2),
          ("LoopedBFS", 2, 4, 3), ("InterleavedZeroBubble", 2, 4, 2)]


@pytest.mark.parametrize("name,p,m,v", SHAPES)
def test_schedule_matches_cli(name: str, p: int, m: int, v: int) -> None:
    plan = pw.schedule(name, ranks=p, microbatches=m, stages_per_rank=v)
    flags = [name, "-p", str(p), "-m", str(m), "-v", str(v)]
    assert plan.to_csv() == cli("schedule", *flags)[0]
    assert plan.to_json() == cli("schedule", *flags, "-f", "json")[0]
    assert plan.to_text() == cli("schedule", *flags, "-f", "text")[0]
    assert plan.to_dot() == cli("schedule", *flags, "-f", "dot")[0]
    lowered = plan.lower(reduce_grad=True, optimizer_step=True)
    assert lowered.lowered and not plan.lowered
    assert lowered.to_csv() == cli("schedule", *flags, "--lower", "--reduce-grad",
                                   "--optimizer-step")[0]
    assert (plan.ranks, plan.stages, plan.microbatches, plan.schedule) == (p, p * v, m, name)
    assert len(plan.actions) == p and plan.actions[0][0] == "0F0"


def torch_csv(plan: pw.Plan) -> str:
    """The plan as torch's _dump_csv writes it: bubbles as empty cells (a rank idles while the
    others work), one row per rank."""
    rows: List[List[str]] = []
    for r, actions in enumerate(plan.actions):
        row = [""] * r  # rank r starts r steps late in a pipeline fill
        for a in actions:
            row.append(a)
        rows.append(row + [""] * 2)
    return "\n".join(",".join(row) for row in rows) + "\n"


def test_plan_equals_torch_csv() -> None:
    plan = pw.schedule("1F1B", ranks=4, microbatches=8)
    text = torch_csv(plan)
    assert text != plan.to_csv()
    parsed = pw.Plan.from_csv(text)
    assert parsed == plan and not parsed != plan
    assert parsed.schedule != plan.schedule  # the name is a label, not part of the plan
    assert parsed != pw.schedule("GPipe", ranks=4, microbatches=8)
    assert parsed != pw.schedule("1F1B", ranks=4, microbatches=7)
    assert pw.Plan.from_json(plan.to_json()) == plan
    assert pw.Plan.from_csv(plan.lower().to_csv()) == plan.lower()
    assert pw.Plan.from_csv(plan.lower().to_csv()) != plan
    # A plan torch's CSV cannot carry is refused, not written as another plan (issue 36).
    chimera = pw.schedule("Chimera", ranks=4, microbatches=4)
    with pytest.raises(pw.ConfigError, match="cannot carry this plan.*stage_to_model_stage"):
        chimera.to_csv()
    assert pw.Plan.from_json(chimera.to_json()) == chimera
    assert pw.Plan.load(os.path.join(DATA, "sched", "good_1f1b.csv")) == pw.schedule(
        "1F1B", ranks=2, microbatches=3)


@pytest.mark.parametrize("file,transport", [("good_1f1b.csv", "buffered"),
                                            ("invalid.csv", "buffered"),
                                            ("cycle.csv", "buffered"),
                                            ("rendezvous_deadlock.csv", "rendezvous"),
                                            ("rendezvous_deadlock.csv", "buffered")])
def test_validate_matches_cli(file: str, transport: str) -> None:
    path = os.path.join(DATA, "sched", file)
    problems = pw.validate(pw.Plan.load(path), transport=transport)
    proc = subprocess.run([CLI, "validate", path, "-t", transport], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == (0 if not problems else 2), (problems, proc.stderr)
    for problem in problems:
        assert problem in proc.stderr, (problem, proc.stderr)


def metrics_without_timelines(result: dict) -> dict:
    result = dict(result)
    result.pop("timelines")
    return result


SIM_CASES = [
    ("1F1B", dict(ranks=4, microbatches=8, forward_ms=1.0, backward_ms=2.0),
     ["-p", "4", "-m", "8", "--forward-ms", "1", "--backward-ms", "2"]),
    ("InterleavedZeroBubble",
     dict(ranks=2, microbatches=4, stages_per_rank=2, forward_ms=[1, 1.5, 1, 2],
          backward_ms=2.0, weight_ms=0.5, activation_bytes=1000, param_bytes=4096, dp=2,
          steps=2, batch_size=16, optimizer="adam"),
     ["-p", "2", "-m", "4", "-v", "2", "--forward-ms", "1,1.5,1,2", "--backward-ms", "2",
      "--weight-ms", "0.5", "--activation-bytes", "1000", "--param-bytes", "4096", "--dp", "2",
      "--steps", "2", "--batch-size", "16", "--optimizer", "adam"]),
]


@pytest.mark.parametrize("schedule,kwargs,flags", SIM_CASES)
def test_simulate_matches_cli(schedule: str, kwargs: dict, flags: List[str]) -> None:
    want = json.loads(cli("simulate", "--schedule", schedule, *flags, "--metrics", "-")[0])
    got = pw.simulate(schedule, **kwargs)
    assert metrics_without_timelines(got) == want
    plan = pw.schedule(schedule, ranks=kwargs["ranks"], microbatches=kwargs["microbatches"],
                       stages_per_rank=kwargs.get("stages_per_rank", 1))
    shape = ("ranks", "microbatches", "stages_per_rank")
    by_plan = pw.simulate(plan, **{k: v for k, v in kwargs.items() if k not in shape})
    assert metrics_without_timelines(by_plan) == want


def test_simulate_model_cluster_matches_cli() -> None:
    model = os.path.join(DATA, "sim", "gpt8.json")
    cluster = os.path.join(DATA, "sim", "cluster_2ranks.json")
    want = json.loads(cli("simulate", "--model", model, "--schedule", "1F1B", "-p", "2", "-m",
                          "4", "--cluster", cluster, "--metrics", "-")[0])
    got = pw.simulate("1F1B", ranks=2, microbatches=4, model=model, cluster=cluster)
    assert metrics_without_timelines(got) == want
    with open(cluster) as f:
        as_dict = json.load(f)
    part = pw.partition(pw.load_model(model), stages=2)
    got = pw.simulate(pw.schedule("1F1B", ranks=2, microbatches=4), model=pw.load_model(model),
                      partition=part, cluster=as_dict)
    assert metrics_without_timelines(got) == want


def test_timelines() -> None:
    result = pw.simulate("1F1B", ranks=3, microbatches=6, forward_ms=1.0, backward_ms=2.0,
                         svg_timeline=True)
    assert result["svg_timeline"].startswith("<svg") or "<svg" in result["svg_timeline"][:200]
    timelines = result["timelines"]
    assert len(timelines) == 3
    np = pytest.importorskip("numpy")
    for rank, tl in zip(result["ranks"], timelines):
        assert isinstance(tl, np.ndarray)
        compute = tl[np.isin(tl["kind"], ["F", "B", "I", "W"])]
        assert len(compute) == 12  # 6 forwards, 6 backwards
        assert (compute["end_ms"] - compute["start_ms"]).sum() == pytest.approx(rank["busy_ms"])
        assert tl["end_ms"].max() <= result["makespan_ms"] + 1e-9


def test_timelines_without_numpy(monkeypatch) -> None:
    monkeypatch.setattr(pw, "_np", None)
    tl = pw.simulate("GPipe", ranks=2, microbatches=2, forward_ms=1, backward_ms=1)["timelines"]
    assert isinstance(tl[0], list) and tl[0][0]["action"] == "0F0"
    assert tl[0][0]["start_ms"] == 0.0 and tl[0][0]["end_ms"] == 1.0


def test_models_and_partitions_match_cli(tmp_path) -> None:
    gpt = pw.gpt(layers=4, hidden=256, heads=4, seq=128, vocab=1000, micro_batch_size=2)
    assert gpt.to_json() == cli("model", "gpt", "--layers", "4", "--hidden", "256", "--heads",
                                "4", "--seq", "128", "--vocab", "1000", "-b", "2")[0]
    mlp = pw.mlp([8, 16, 2], activation="gelu", bias=False)
    assert mlp.to_json() == cli("model", "mlp", "--sizes", "8,16,2", "--activation", "gelu",
                                "--no-bias")[0]
    assert pw.Model.from_json(gpt.to_json()) == gpt and gpt.node_names[0] == "embed"
    path = tmp_path / "gpt.json"
    path.write_text(gpt.to_json())
    for method in ("uniform", "balanced"):
        part = pw.partition(str(path), stages=3, method=method)
        assert part.to_json() == cli("partition", str(path), "-s", "3", "--method", method)[0]
        assert part.num_stages == 3 and len(part.node_stage) == len(gpt.node_names)
    part = pw.partition(gpt, stages=2, method="memory", memory_limit_bytes=10**9, in_flight=4)
    assert part.to_json() == cli("partition", str(path), "-s", "2", "--method", "memory",
                                 "--memory-limit", "1000000000", "--in-flight", "4")[0]
    part_path = tmp_path / "part.json"
    part_path.write_text(part.to_json())
    assert pw.load_partition(str(part_path)) == part
    dot = tmp_path / "m.dot"
    cli("render", str(path), "-p", str(part_path), "-o", str(dot))
    assert pw.render(gpt, part) == dot.read_text()
    cli("render", str(path), "-p", str(part_path), "--stages-only", "-o", str(dot))
    assert pw.render(str(path), str(part_path), stages_only=True) == dot.read_text()
    if pw.graphviz_available():
        svg = tmp_path / "m.svg"
        cli("render", str(path), "-p", str(part_path), "-o", str(svg))
        assert pw.render(gpt, part, format="svg") == svg.read_text()


def test_errors_name_the_problem() -> None:
    with pytest.raises(pw.ConfigError, match="GPipe, 1F1B"):
        pw.schedule("frobnicate", ranks=2, microbatches=2)
    with pytest.raises(pw.ConfigError):
        pw.schedule("1F1B", ranks=4, microbatches=2)  # torch rejects m < ranks
    with pytest.raises(pw.ParseError, match="<csv>:1"):
        pw.Plan.from_csv("0F0,0X1\n")
    with pytest.raises(pw.InputError):
        pw.load_model("/nonexistent/model.json")
    with pytest.raises(pw.ConfigError, match="exactly one cost source"):
        pw.simulate("1F1B", ranks=2, microbatches=2)
    assert issubclass(pw.InvalidPlanError, pw.InputError) and issubclass(pw.Error, RuntimeError)
    assert "1F1B" in pw.schedule_names() and pw.__version__.count(".") == 2
