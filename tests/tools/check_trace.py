#!/usr/bin/env python3
"""Checks a Chrome trace written by pipewright (simulator or executor): every flow arrow has one
start ("s") and one end ("f") and goes forward in time, each ends inside a slice of its target
track, and every rank (pid) has a "memory" counter track.

  check_trace.py TRACE [--min-p2p N] [--min-dp N] [--ranks WORLD]

Exit 0 when the trace passes, 1 naming the first problem.
"""
import argparse
import json
import sys
from collections import defaultdict
from typing import Dict, List, Tuple


def check(path: str, min_p2p: int, min_dp: int, ranks: int) -> List[str]:
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    slices: Dict[Tuple[int, int], List[Tuple[float, float]]] = defaultdict(list)
    flows: Dict[int, Dict[str, dict]] = defaultdict(dict)
    memory_pids = set()
    pids = set()
    problems: List[str] = []
    for e in events:
        ph = e.get("ph")
        if ph == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
            pids.add(e["pid"])
        elif ph in ("s", "f"):
            if ph in flows[e["id"]]:
                problems.append(f"flow id {e['id']} has two '{ph}' events")
            flows[e["id"]][ph] = e
        elif ph == "C" and e.get("name") == "memory":
            memory_pids.add(e["pid"])
            if not isinstance(e.get("args", {}).get("bytes"), int):
                problems.append(f"memory counter of pid {e['pid']} at {e['ts']} has no bytes")
    count = defaultdict(int)
    for fid, pair in sorted(flows.items()):
        if set(pair) != {"s", "f"}:
            problems.append(f"flow id {fid} is not paired: has {sorted(pair)}")
            continue
        s, f = pair["s"], pair["f"]
        count[s.get("cat", "")] += 1
        if s["ts"] > f["ts"]:
            problems.append(f"flow id {fid} ({s['name']}) goes back in time: "
                            f"starts at {s['ts']} on pid {s['pid']}, ends at {f['ts']} on "
                            f"pid {f['pid']}")
        for end, what in ((s, "start"), (f, "end")):
            inside = any(a - 1e-6 <= end["ts"] <= b + 1e-6
                         for a, b in slices[(end["pid"], end["tid"])])
            if not inside:
                problems.append(f"flow id {fid} {what} at {end['ts']} is in no slice of pid "
                                f"{end['pid']} tid {end['tid']}")
    if count["p2p"] < min_p2p:
        problems.append(f"{count['p2p']} p2p flows, expected at least {min_p2p}")
    if count["dp"] < min_dp:
        problems.append(f"{count['dp']} dp flows, expected at least {min_dp}")
    if ranks and sorted(pids) != list(range(ranks)):
        problems.append(f"slices on pids {sorted(pids)}, expected ranks 0..{ranks - 1}")
    for pid in sorted(pids - memory_pids):
        problems.append(f"pid {pid} has no memory counter track")
    if not problems:
        print(f"{path}: {len(flows)} flows ({dict(count)}) all forward in time, "
              f"memory tracks for {len(memory_pids)} ranks")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--min-p2p", type=int, default=1)
    parser.add_argument("--min-dp", type=int, default=0)
    parser.add_argument("--ranks", type=int, default=0, help="expected world size (pids 0..N-1)")
    args = parser.parse_args()
    problems = check(args.trace, args.min_p2p, args.min_dp, args.ranks)
    for p in problems[:20]:
        print(f"{args.trace}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
