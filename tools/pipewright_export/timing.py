"""Timing callables: medians of timed runs, their spread, and rounds of them taken in turns.

No torch here: the rules are plain arithmetic over a clock, tested with a fake one
(tests/python/test_timing.py). What runs under the clock, and the TorchScript settings it needs,
is costs.py's business (Note [Settled timings] there).

Note [Rounds in turns]: a shared machine has slow periods (another process on the core, a vCPU
whose sibling is busy) lasting from milliseconds to seconds; a timing taken in one go lands wholly
inside one or not. So each timing is taken in rounds, and the rounds of all timings in turns (one
round of each, then again), so that the rounds of one timing lie apart in time. Interference only
adds time, to a whole round in a slow period and to single runs when a burst preempts one. A
round is calm when its spread, (max - min) / median of its runs, is at most MAX_SPREAD; the kept
round is the calm one with the lowest median. A timing with no calm round after MIN_ROUNDS gets
more rounds, up to MAX_ROUNDS; then it keeps the lowest median of all and is not `settled`.
"""
import statistics
import time
from dataclasses import dataclass
from typing import Callable, List, Sequence

# A round: `RUNS` timed runs, but no more than fit in `BUDGET_S` (at least `MIN_RUNS`), so that
# big nodes do not make the export slow. The first round starts with `WARMUP` untimed runs.
RUNS = 7
WARMUP = 3
MIN_RUNS = 3
BUDGET_S = 0.2

# Rounds per timing: at least MIN_ROUNDS, and more while none of them spreads at most MAX_SPREAD,
# up to MAX_ROUNDS (the warm-ups are not repeated: the earlier rounds warmed it).
MIN_ROUNDS = 3
MAX_ROUNDS = 5
MAX_SPREAD = 0.2

Prepare = Callable[[], Callable[[], object]]  # untimed setup returning the call to time
Clock = Callable[[], float]  # seconds


@dataclass(frozen=True)
class Timing:
    median_ms: float  # of the kept round
    spread: float  # (max - min) / median of the kept round's runs; 0 when the median is 0
    rounds: int  # rounds taken
    settled: bool  # the kept round is calm: spread <= the max_spread it was measured with


def spread(samples: Sequence[float]) -> float:
    """(max - min) / median; 0 for a zero median (nothing measurable to spread)."""
    med = statistics.median(samples)
    return (max(samples) - min(samples)) / med if med > 0 else 0.0


def sample_ms(prepare: Prepare, runs: int, warmup: int, clock: Clock = time.perf_counter
              ) -> List[float]:
    """Milliseconds of each timed call: `prepare()` (untimed) returns the callable to time;
    `warmup` untimed calls first, then up to `runs` timed ones, stopping once at least
    MIN_RUNS took BUDGET_S together."""
    samples: List[float] = []
    for k in range(warmup + runs):
        fn = prepare()
        t0 = clock()
        fn()
        dt = clock() - t0
        if k >= warmup:
            samples.append(dt * 1e3)
            if len(samples) >= MIN_RUNS and sum(samples) >= BUDGET_S * 1e3:
                break
    return samples


class Series:
    """One timing, taken in rounds (Note [Rounds in turns])."""

    def __init__(self, prepare: Prepare, runs: int = RUNS, warmup: int = WARMUP,
                 clock: Clock = time.perf_counter) -> None:
        self.prepare, self.runs, self.warmup, self.clock = prepare, runs, warmup, clock
        self.rounds: List[List[float]] = []

    def take_round(self) -> None:
        warmup = 0 if self.rounds else self.warmup
        self.rounds.append(sample_ms(self.prepare, self.runs, warmup, self.clock))

    def kept(self, max_spread: float) -> List[float]:
        """The calm round with the lowest median, else the lowest median of all (the first of
        equals)."""
        calm = [r for r in self.rounds if spread(r) <= max_spread]
        return min(calm or self.rounds, key=statistics.median)

    def done(self, min_rounds: int, max_rounds: int, max_spread: float) -> bool:
        n = len(self.rounds)
        return n >= max_rounds or (n >= min_rounds and spread(self.kept(max_spread)) <= max_spread)

    def timing(self, max_spread: float) -> Timing:
        kept = self.kept(max_spread)
        s = spread(kept)
        return Timing(statistics.median(kept), s, len(self.rounds), s <= max_spread)


def take_in_turns(series: Sequence[Series], min_rounds: int = MIN_ROUNDS,
                  max_rounds: int = MAX_ROUNDS, max_spread: float = MAX_SPREAD) -> List[Timing]:
    """Rounds of every series in turns until each is done; their Timings in order."""
    if not 1 <= min_rounds <= max_rounds:
        raise ValueError(f"need 1 <= min_rounds <= max_rounds, got {min_rounds}, {max_rounds}")
    while True:
        pending = [s for s in series if not s.done(min_rounds, max_rounds, max_spread)]
        if not pending:
            return [s.timing(max_spread) for s in series]
        for s in pending:
            s.take_round()

