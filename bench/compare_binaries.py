#!/usr/bin/python3
"""Two builds of `pipewright` side by side: the same offline commands, run alternately (A B, then
B A, ...) so that the host's load falls on both alike; prints each one's median wall time and the
ratio B / A. Used for build-flag changes (docs/performance.md, -fno-semantic-interposition).

  bench/compare_binaries.py A/bin/pipewright B/bin/pipewright [RUNS]     (RUNS default 21)
"""
import statistics
import subprocess
import sys
import time

CASES = [
    ["--version"],
    ["simulate", "--schedule", "Interleaved1F1B", "-p", "32", "-v", "4", "-m", "1024",
     "--forward-ms", "1", "--backward-ms", "2"],
]


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 21
    for args in CASES:
        times = {a: [], b: []}
        for i in range(runs):
            for exe in (a, b) if i % 2 == 0 else (b, a):
                start = time.perf_counter()
                subprocess.run([exe] + args, stdout=subprocess.DEVNULL, check=True)
                times[exe].append(time.perf_counter() - start)
        ma, mb = statistics.median(times[a]), statistics.median(times[b])
        print(f"{' '.join(args[:3])}: A {ma * 1e3:.1f} ms, B {mb * 1e3:.1f} ms, B/A {mb / ma:.3f} "
              f"(medians of {runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
