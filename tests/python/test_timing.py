"""The timing rules of pipewright-export (tools/pipewright_export/timing.py) under a fake clock,
and the other small pieces of issue 32 item 5: the TorchScript deprecation filter and the torch
version written into each node's script object."""
import warnings
from typing import List, Optional, Sequence

import pytest

from pipewright_export import timing
from pipewright_export.errors import ExportError


class FakeClock:
    """A clock whose timed calls last the given milliseconds, one after another: each call of
    the timed function advances it by the next duration (the clock is read before and after).
    `log` (shared between clocks) records which clock ran each call."""

    def __init__(self, durations_ms: Sequence[float], name: str = "",
                 log: Optional[List[str]] = None) -> None:
        self.durations = list(durations_ms)
        self.now = 0.0
        self.calls = 0
        self.name, self.log = name, log if log is not None else []

    def __call__(self) -> float:
        return self.now

    def prepare(self):
        def run() -> None:
            self.now += self.durations[self.calls] / 1e3
            self.calls += 1
            self.log.append(self.name)
        return run

    def series(self) -> timing.Series:
        return timing.Series(self.prepare, clock=self)


def take(*clocks: FakeClock, **kw) -> List[timing.Timing]:
    return timing.take_in_turns([c.series() for c in clocks], **kw)


WARM = [50.0, 9.0, 3.0]  # warm-ups: slow first calls (the plan being built), never timed
CALM = [1.0, 1.05, 0.95, 1.0, 1.1, 1.0, 0.98]  # median 1, spread 0.15
NOISY = [1.0, 1.0, 4.6, 1.0, 1.0, 1.0, 1.0]  # one preempted run: spread 3.6
SLOWER = [2.0, 2.1, 1.9, 2.0, 2.2, 2.0, 1.96]  # a slow period: median 2, spread 0.15


def test_spread_is_range_over_median():
    assert timing.spread([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert timing.spread(CALM) == pytest.approx(0.15)
    assert timing.spread([0.0, 0.0, 0.0]) == 0.0


def test_warm_ups_are_not_timed_and_calm_rounds_stop_at_min_rounds():
    clock = FakeClock(WARM + SLOWER + CALM + SLOWER + CALM)
    [t] = take(clock)
    assert (t.median_ms, t.spread) == (pytest.approx(1.0), pytest.approx(0.15))
    assert (t.rounds, t.settled) == (timing.MIN_ROUNDS, True)
    assert clock.calls == len(WARM) + 7 * timing.MIN_ROUNDS  # the warm-ups once, no 4th round


def test_the_fastest_calm_round_is_kept():
    """A slow period (another process on the core) makes a whole round slower, not spread; a
    preempted run makes a round spread."""
    [t] = take(FakeClock(WARM + SLOWER + SLOWER + CALM))
    assert t.median_ms == pytest.approx(1.0)
    [t] = take(FakeClock(WARM + [0.5] * 6 + [9.0] + SLOWER + SLOWER))
    assert (t.median_ms, t.settled) == (pytest.approx(2.0), True)


def test_no_calm_round_gets_more_rounds_without_warm_ups():
    clock = FakeClock(WARM + NOISY * timing.MIN_ROUNDS + CALM)
    [t] = take(clock)
    assert (t.rounds, t.settled, t.median_ms) == (timing.MIN_ROUNDS + 1, True, pytest.approx(1.0))
    assert t.spread == pytest.approx(0.15)
    assert clock.calls == len(WARM) + (timing.MIN_ROUNDS + 1) * 7


def test_the_rounds_are_bounded_and_an_unsettled_timing_says_so():
    worse = [2.0, 2.0, 2.0, 9.0, 2.0, 2.0, 2.0]  # spread 3.5, median 2
    clock = FakeClock(WARM + worse + NOISY * (timing.MAX_ROUNDS - 1) + CALM)
    [t] = take(clock)
    assert (t.rounds, t.settled) == (timing.MAX_ROUNDS, False)
    assert (t.median_ms, t.spread) == (pytest.approx(1.0), pytest.approx(3.6))  # the fastest
    assert clock.calls == len(WARM) + 7 * timing.MAX_ROUNDS  # the calm round is never taken


def test_drift_from_a_settling_jit_is_not_kept():
    """The failure issue 32 saw: the graph executor re-optimising inside the timed runs makes the
    early runs slow; that round is neither the fastest nor calm."""
    drifting = [40.0, 20.0, 1.2, 0.9, 0.9, 0.9, 0.9]  # median 0.9, spread 43
    [t] = take(FakeClock([1.0] * 3 + drifting + CALM + CALM))
    assert (t.median_ms, t.spread, t.settled) == (pytest.approx(1.0), pytest.approx(0.15), True)


def test_rounds_are_taken_in_turns():
    log: List[str] = []
    a = FakeClock([1.0] * 3 + CALM * 3, "a", log)
    b = FakeClock([1.0] * 3 + NOISY * 3 + CALM, "b", log)
    ta, tb = take(a, b)
    rounds = [log[0]] + [x for i, x in enumerate(log[1:], 1) if x != log[i - 1]]
    # a's first round (warm-ups + 7), b's, a's, b's, a's, b's; then b alone (no calm round yet)
    assert rounds == ["a", "b", "a", "b", "a", "b"]
    assert log.count("a") == 3 + 3 * 7 and log.count("b") == 3 + 4 * 7
    assert (ta.rounds, tb.rounds, tb.settled) == (3, 4, True)


def test_slow_runs_stop_at_the_budget_but_not_before_min_runs():
    clock = FakeClock([150.0] * (3 + 7 * timing.MIN_ROUNDS))  # 3 runs exceed BUDGET_S (0.2 s)
    [t] = take(clock)
    assert clock.calls == 3 + timing.MIN_RUNS * timing.MIN_ROUNDS
    assert (t.median_ms, t.spread) == (pytest.approx(150.0), pytest.approx(0.0))


def test_round_limits_are_checked():
    with pytest.raises(ValueError, match="min_rounds <= max_rounds"):
        take(FakeClock(CALM), min_rounds=3, max_rounds=2)
    with pytest.raises(ValueError):
        take(FakeClock(CALM), min_rounds=0)


def test_jit_deprecation_notice_is_hidden_and_nothing_else():
    from pipewright_export import script
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with script.jit_deprecation_hidden():
            for what in ("script", "trace", "save", "load"):
                warnings.warn(f"`torch.jit.{what}` is deprecated. Please switch to `torch.export`.",
                              FutureWarning)
            warnings.warn("`torch.jit.save` is not supported in Python 3.14+ and may break.",
                          FutureWarning)
            warnings.warn("`torch.jit.save` is deprecated (not a FutureWarning)", UserWarning)
            warnings.warn("`torch.jit.freeze` is deprecated. Please use `torch.compile`.",
                          FutureWarning)
    assert [(w.category, str(w.message)[:28]) for w in caught] == [
        (FutureWarning, "`torch.jit.save` is not supp"),
        (UserWarning, "`torch.jit.save` is deprecat"),
        (FutureWarning, "`torch.jit.freeze` is deprec")]


def test_saving_and_loading_a_node_warns_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    from pipewright_export import script
    with script.jit_deprecation_hidden():
        scripted = torch.jit.script(torch.nn.Linear(2, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        script.load(script._save(scripted))
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("version,expected", [
    ("2.15.0+cu132", "2.15.0"), ("1.13.0a0", "1.13.0"), ("1.13.0a0+git7c98e70", "1.13.0"),
    ("2.4.1", "2.4.1")])
def test_torch_version_is_major_minor_patch(version, expected):
    from pipewright_export import model_json
    assert model_json.torch_version(version) == expected


def test_torch_version_that_is_not_one_is_an_error():
    from pipewright_export import model_json
    with pytest.raises(ExportError, match="torch.__version__ 'nightly' is not MAJOR.MINOR.PATCH"):
        model_json.torch_version("nightly")
