#!/usr/bin/python3
"""One vocabulary for the CLI (issue 25, docs/cli.md), checked on what a user sees.

Reads `--help` of every subcommand (and nested ones: `model gpt`, `dataset gpt`...) and checks
that the same thing has the same name everywhere: the short flags, the long names they stand
for, -o/--output wherever a command writes a file, no old spelling left visible, sizes in units.
Then runs the commands: old spellings still work with a one-line deprecation note, missing shape
parameters are errors (exit 2), -o writes the text report, sizes take units.

usage: vocabulary.py BIN_DIR WORK_DIR EXAMPLES_DIR
"""
import os
import re
import subprocess
import sys

BIN, WORK, EXAMPLES = (os.path.abspath(a) for a in sys.argv[1:4])
PW = os.path.join(BIN, "pipewright")
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def run(args, code=0):
    p = subprocess.run([PW] + args, capture_output=True, text=True, timeout=120, cwd=WORK)
    if p.returncode != code:
        fail(f"pipewright {' '.join(args)}: exit {p.returncode}, expected {code}\n{p.stderr}")
    return p


def options(cmd):
    """{frozenset of names: description} of `pipewright CMD --help`, and its subcommands."""
    text = run(cmd + ["--help"]).stdout
    opts, subs, section = {}, [], None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            section = line
            continue
        m = re.match(r"^  (-\S+)(?:\s+(\S.*?))?\s{2,}(\S.*)$", line) or re.match(r"^  (-\S+)(.*)$", line)
        if m and section != "Subcommands:":
            names = frozenset(n for n in m.group(1).split(",") if n)
            opts[names] = m.group(3) if m.lastindex and m.lastindex >= 3 else ""
        elif section == "Subcommands:":
            s = re.match(r"^  (\S+)\s", line)
            if s:
                subs.append(s.group(1))
    return opts, subs


# What each short flag means, in every subcommand that has it.
SHORT = {"-p": "--pp", "-m": "--microbatches", "-v": "--stages-per-rank", "-o": "--output",
         "-f": "--format", "-k": "--top", "-s": "--stages", "-b": "--micro-batch-size",
         "-l": "--layers", "-n": "--devices", "-t": "--transport", "-h": "--help"}
# Old spellings: accepted (hidden, with a note), never shown.
OLD = {"--ranks", "--skip-steps", "--json", "--svg", "--blocking-recv", "--posted-recv"}
# Commands that write a file: all say -o/--output.
WRITERS = {"schedule", "partition", "model gpt", "model mlp", "render", "search", "simulate",
           "report", "compare", "transfer-profile", "calibrate", "run", "dataset gpt"}
# Commands that read a model: all accept --model.
MODEL_READERS = {"partition", "render", "search", "simulate", "report", "compare", "run",
                 "transfer-profile"}

# Descriptions start lower-case ("write the final weights"), except with these names (and
# CLI11's own "Print this help message", "Display program version").
PROPER = {"Print", "Display", "SlowMo", "DiLoCo", "Streaming", "Chrome", "Linear", "LocalSGD"}

seen = {}
todo = [[]]
# A build without the executor (the minimal preset) lists run, calibrate and dataset, which
# then exit 2 naming what is missing: they have no help page to check there.
NO_EXEC = subprocess.run([PW, "run", "--help"], capture_output=True, text=True)
NO_EXEC = NO_EXEC.returncode == 2 and "needs the executor" in NO_EXEC.stderr
while todo:
    cmd = todo.pop()
    if NO_EXEC and cmd and cmd[0] in ("run", "calibrate", "dataset"):
        continue
    opts, subs = options(cmd)
    seen[" ".join(cmd)] = opts
    todo += [cmd + [s] for s in subs]

for cmd, opts in sorted(seen.items()):
    where = f"`pipewright {cmd} --help`" if cmd else "`pipewright --help`"
    longs = set()
    for names, desc in opts.items():
        longs |= {n for n in names if n.startswith("--")}
        for n in names:
            if n in SHORT and SHORT[n] not in names:
                fail(f"{where}: {n} means {sorted(names)}, elsewhere {SHORT[n]}")
            if n in OLD:
                fail(f"{where}: shows the old spelling {n}")
        for short, long in SHORT.items():
            if long in names and short not in names and long not in ("--stages", "--devices"):
                fail(f"{where}: {long} without its short form {short}")
        if "--memory-limit" in names and "GiB" not in desc:
            fail(f"{where}: --memory-limit does not say it takes sizes (GiB...): {desc}")
        first = re.match(r"^[A-Za-z]*", desc).group(0)
        if re.match(r"^[A-Z][a-z]", first) and first not in PROPER:
            fail(f"{where}: {sorted(names)}: description starts upper-case: {desc}")
    if cmd in WRITERS and "--output" not in longs:
        fail(f"{where}: writes a file but has no -o/--output")
    if cmd in MODEL_READERS and "--model" not in longs:
        fail(f"{where}: reads a model but has no --model")
for c in WRITERS | MODEL_READERS:
    if c not in seen and not (c in ("run", "calibrate", "dataset gpt") and "run" not in seen):
        fail(f"no subcommand `{c}` in the help")

# Old spellings work, with one deprecation line on stderr.
new = run(["schedule", "1F1B", "-p", "2", "-m", "4"])
old = run(["schedule", "1F1B", "--ranks", "2", "-m", "4"])
if old.stdout != new.stdout or "--ranks is deprecated; use --pp" not in old.stderr:
    fail(f"schedule --ranks: not the same plan with a deprecation note:\n{old.stdout}{old.stderr}")
if new.stderr:
    fail(f"schedule -p: unexpected stderr {new.stderr}")
what_if = ["--forward-ms", "1", "--backward-ms", "2"]
p = run(["simulate", "--schedule", "1F1B", "--ranks", "2", "-m", "4"] + what_if)
if "--ranks is deprecated" not in p.stderr or "makespan" not in p.stdout:
    fail(f"simulate --ranks: {p.stdout}{p.stderr}")

# Missing shape parameters are errors, in every command that generates a plan.
for args in (["schedule", "Interleaved1F1B", "-p", "2", "-m", "4"],
             ["simulate", "--schedule", "LoopedBFS", "-p", "2", "-m", "4"] + what_if,
             ["schedule", "1F1B", "-m", "4"]):
    p = run(args, 2)
    if "--stages-per-rank" not in p.stderr and "--pp" not in p.stderr:
        fail(f"{' '.join(args)}: the error does not name the missing flag: {p.stderr}")
p = run(["schedule", "Interleaved1F1B", "-p", "2", "-v", "2", "-m", "4"])
p = run(["schedule", "ZBVZeroBubble", "-p", "2", "-m", "4"])  # V = 2 is the schedule's own

# --recv: blocking receives hold the compute stream (InterleavedZeroBubble with p2p time: 54.1 ms
# posted, 70.9 ms blocking); the old --blocking-recv says the same with a note.
zb = ["simulate", "--schedule", "InterleavedZeroBubble", "-p", "4", "-v", "2", "-m", "8",
      "--forward-ms", "1", "--backward-ms", "2", "--weight-ms", "0.75", "--p2p-ms", "0.1"]
posted, blocking = run(zb), run(zb + ["--recv", "blocking"])
old = run(zb + ["--blocking-recv"])
if posted.stdout == blocking.stdout or "makespan 70.900 ms" not in blocking.stdout:
    fail(f"simulate --recv blocking: {posted.stdout} vs {blocking.stdout}")
if old.stdout != blocking.stdout or "--blocking-recv is deprecated" not in old.stderr:
    fail(f"simulate --blocking-recv (old spelling): {old.stdout}{old.stderr}")
if run(zb + ["--recv", "posted"]).stdout != posted.stdout:
    fail("simulate --recv posted is not the default")

# -o writes the text report; stdout stays empty. Sizes in units in, human units out.
out = os.path.join(WORK, "report.txt")
p = run(["simulate", "--schedule", "1F1B", "-p", "2", "-m", "4", "--dp", "2", "--param-bytes",
         "1.5MiB", "-o", out] + what_if)
text = open(out).read() if os.path.exists(out) else ""
if p.stdout or "makespan" not in text:
    fail(f"simulate -o: stdout {p.stdout!r}, file {text!r}")
# 1.5 MiB of parameters on each of 2 stages: 3 MiB all-reduced per replica and step; a rank
# holds its stage's parameters and their gradients, and with dp > 1 one fresh weight gradient of
# its largest parameter (here all 1.5 MiB) during a backward (Note [Optimizer transient]).
if not re.search(r"data-parallel \(ddp\): 3\.0 MiB/step .*\(3145728 B/step\)", text) or \
        "peak memory 4.5 MiB" not in text:
    fail(f"simulate: sizes not in human units: {text}")
model = os.path.join(EXAMPLES, "gpt-small.json")
run(["partition", model, "-s", "4", "--method", "memory", "--memory-limit", "6GiB"])
p = run(["search", "--model", model, "-n", "2", "--memory-limit", "74.5GiB", "-k", "1",
         "--schedules", "1F1B"])
if "1F1B" not in p.stdout:
    fail(f"search --memory-limit 74.5GiB: {p.stdout}{p.stderr}")
p = run(["search", "--model", model, "-n", "2", "--memory-limit", "6XB"], 2)
if "--memory-limit" not in p.stderr:
    fail(f"search --memory-limit 6XB: the error does not name the flag: {p.stderr}")
p = run(["search", "--model", model, "-n", "2", "-k", "1", "--schedules", "1F1B", "--json"])
if '"format": "pipewright-search"' not in p.stdout or "--json is deprecated" not in p.stderr:
    fail(f"search --json (old spelling): {p.stdout[:200]}{p.stderr}")

# Flags of `run` given to an offline command are named as such (issue 36, item 3): every row of
# the one table (tools/cli/run_only_flags.hpp) in every offline command that has no flag of that
# name, with and without a value.
header = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "cli",
                           "run_only_flags.hpp"), encoding="utf-8").read()
whys = dict(re.findall(r'inline constexpr std::string_view (k\w+) = "([^"]+)";', header))
rows = [(flag, whys.get(why, why.strip('"'))) for flag, why in
        re.findall(r'\{"(--[\w-]+)", ("[^"]+"|k\w+)\}', header)]
if len(rows) < 20 or "--dataset" not in dict(rows):
    fail(f"run_only_flags.hpp: could not read the table ({len(rows)} rows)")
OFFLINE = {c for c in seen if c and c.split()[0] not in ("run", "calibrate", "dataset", "launch")}
checked = 0
for cmd in sorted(OFFLINE):
    longs = {n for names in seen[cmd] for n in names if n.startswith("--")}
    for flag, why in rows:
        if flag in longs:
            continue
        for args in ([flag], [flag + "=x"]):
            p = run(cmd.split() + args, 2)
            want = f"{flag} is a run flag; {cmd} {why}"
            if want not in p.stderr:
                fail(f"pipewright {cmd} {args[0]}: expected '{want}', got {p.stderr}")
            checked += 1
p = run(["simulate", "--schedule", "1F1B", "-p", "2", "-m", "4", "--dataset", "sonnets"] + what_if, 2)
if "--dataset is a run flag; simulate needs no data" not in p.stderr:
    fail(f"simulate --dataset sonnets: {p.stderr}")
if len(OFFLINE) < 10 or checked < 300:
    fail(f"run-only flags checked in only {len(OFFLINE)} commands ({checked} runs)")

print(f"{len(seen)} help pages checked; {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
