#!/usr/bin/python3
"""Old spellings keep working for at least one release (issue 36, item 3; docs/cli.md, "Old
spellings"), checked row by row against the table that promises it.

Reads the table of docs/cli.md and runs every old spelling it lists, in every command it names,
beside the new spelling: exit 0, one deprecation line on stderr naming the old spelling, and the
same result (stdout or the file written). The old spellings this script knows must be exactly those
of the table, so a row added without a case, or a case whose row was dropped, fails too.

usage: deprecations.py BIN_DIR WORK_DIR SOURCE_DIR
"""
import os
import re
import subprocess
import sys

BIN, WORK, SRC = (os.path.abspath(a) for a in sys.argv[1:4])
PW = os.path.join(BIN, "pipewright")
DATA = os.path.join(SRC, "tests", "data")
EXAMPLES = os.path.join(SRC, "examples")
os.makedirs(WORK, exist_ok=True)
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def run(args, code=0):
    p = subprocess.run([PW, "--log-level", "warn"] + args, capture_output=True, text=True,
                       timeout=120, cwd=WORK)
    if p.returncode != code:
        fail(f"pipewright {' '.join(args)}: exit {p.returncode}, expected {code}\n{p.stderr}")
    return p


def read(path):
    return open(path, encoding="utf-8").read() if os.path.exists(path) else ""


def table_rows():
    """{(command, old flag)} of the "Old spellings" table of docs/cli.md."""
    text = open(os.path.join(SRC, "docs", "cli.md"), encoding="utf-8").read()
    section = text.split("## Old spellings", 1)[1].split("\n## ", 1)[0]
    rows = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        spans = re.findall(r"`([^`]+)`", cell.split("(", 1)[0])
        commands = re.findall(r"[a-z-]+", cell.split("(", 1)[1].split(")")[0]) \
            if "(" in cell else []
        for span in spans:
            words = span.split()
            if words[0].startswith("-"):
                for c in commands:
                    rows.add((c, words[0]))
            else:
                rows.add((words[0], words[1]))
    return rows


PLAN = os.path.join(DATA, "compare", "plan_p2m2.csv")
PROFILE = os.path.join(DATA, "compare", "profile_p2.json")
WHAT_IF = ["--forward-ms", "1", "--backward-ms", "2"]
SIM = ["simulate", "--schedule", "1F1B", "-m", "4"] + WHAT_IF
# A measured trace for compare and report: the simulator's own, 3 steps (the same schema).
TRACE = os.path.join(WORK, "measured.trace.json")
run(["simulate", PLAN, "--profile", PROFILE, "--steps", "3", "--trace", TRACE])
COMPARE = ["compare", "--plan", PLAN, "--measured", TRACE, "--profile", PROFILE]
MODEL = os.path.join(DATA, "graph", "tiny.json")
PARTITION = os.path.join(WORK, "tiny.p2.json")
run(["partition", MODEL, "--stages", "2", "-o", PARTITION])
RUN = ["run", "--model", os.path.join(DATA, "exec_run", "mlp.json"), "-m", "2", "--batch-size", "4",
       "--data-x", os.path.join(DATA, "exec_run", "mlp_x.npy"), "--data-y",
       os.path.join(DATA, "exec_run", "mlp_y.npy"), "--loss", "mse", "--dry-run"]
HAS_RUN = subprocess.run([PW, "run", "--help"], capture_output=True).returncode == 0


def out(name):
    return os.path.join(WORK, name)


def report(extra, name):
    return ["report", "--schedule", "1F1B", "-m", "4", "-o", out(name)] + WHAT_IF + extra


# (command, old flag) -> (old arguments, new arguments, the file both write or None for stdout).
CASES = {
    ("schedule", "--ranks"): (["schedule", "1F1B", "--ranks", "2", "-m", "4"],
                              ["schedule", "1F1B", "-p", "2", "-m", "4"], None),
    ("simulate", "--ranks"): (SIM + ["--ranks", "2"], SIM + ["-p", "2"], None),
    ("report", "--ranks"): (report(["--ranks", "2"], "old.html"),
                            report(["-p", "2"], "new.html"), "html"),
    ("compare", "--ranks"): (COMPARE + ["--ranks", "2"], COMPARE + ["-p", "2"], None),
    ("run", "--ranks"): (RUN + ["--ranks", "2"], RUN + ["-p", "2"], None),
    ("render", "-p"): (["render", MODEL, "-p", PARTITION, "-o", "-", "--format", "dot"],
                       ["render", MODEL, "--partition", PARTITION, "-o", "-", "--format", "dot"],
                       None),
    ("compare", "--skip-steps"): (COMPARE + ["--skip-steps", "1"],
                                  COMPARE + ["--warmup-steps", "1"], None),
    ("report", "--skip-steps"): (
        ["report", PLAN, "--profile", PROFILE, "--measured", TRACE, "--skip-steps", "1", "-o",
         out("old.html")],
        ["report", PLAN, "--profile", PROFILE, "--measured", TRACE, "--warmup-steps", "1", "-o",
         out("new.html")], "html"),
    ("compare", "--json"): (COMPARE + ["--json", "-"], COMPARE + ["--metrics", "-"], None),
    ("compare", "--svg"): (COMPARE + ["--svg", out("old.svg")],
                           COMPARE + ["--timeline", out("new.svg")], "svg"),
    ("search", "--json"): (
        ["search", "--model", os.path.join(EXAMPLES, "gpt-small.json"), "-n", "2", "-k", "1",
         "--schedules", "1F1B", "--json"],
        ["search", "--model", os.path.join(EXAMPLES, "gpt-small.json"), "-n", "2", "-k", "1",
         "--schedules", "1F1B", "-f", "json"], None),
    # Not deprecated: the bare flag is a synonym of auto (no note; the same result).
    ("search", "--recompute"): (
        ["search", "--model", os.path.join(EXAMPLES, "gpt-small.json"), "-n", "2", "-k", "1",
         "--schedules", "1F1B", "--memory-limit", "6GiB", "--recompute"],
        ["search", "--model", os.path.join(EXAMPLES, "gpt-small.json"), "-n", "2", "-k", "1",
         "--schedules", "1F1B", "--memory-limit", "6GiB", "--recompute", "auto"], None),
    ("simulate", "--blocking-recv"): (SIM + ["-p", "2", "--p2p-ms", "0.1", "--blocking-recv"],
                                      SIM + ["-p", "2", "--p2p-ms", "0.1", "--recv", "blocking"],
                                      None),
    ("compare", "--posted-recv"): (COMPARE + ["--posted-recv"], COMPARE + ["--recv", "posted"],
                                   None),
    ("simulate", "--reduce-grad"): (SIM + ["-p", "2", "--dp", "2", "--reduce-grad"],
                                    SIM + ["-p", "2", "--dp", "2"], None),
    ("report", "--reduce-grad"): (report(["-p", "2", "--reduce-grad"], "old.html"),
                                  report(["-p", "2"], "new.html"), "html"),
    ("simulate", "-s"): (["simulate", "-s", "GPipe", "-p", "2", "-m", "4"] + WHAT_IF,
                         ["simulate", "--schedule", "GPipe", "-p", "2", "-m", "4"] + WHAT_IF, None),
    ("report", "-s"): (["report", "-s", "GPipe", "-p", "2", "-m", "4", "-o", out("old.html")] +
                       WHAT_IF,
                       ["report", "--schedule", "GPipe", "-p", "2", "-m", "4", "-o",
                        out("new.html")] + WHAT_IF, "html"),
    ("simulate", "--micro-batch-size"): (SIM + ["-p", "2", "--micro-batch-size", "3"],
                                         SIM + ["-p", "2", "--batch-size", "12"], None),
    ("report", "--micro-batch-size"): (report(["-p", "2", "--micro-batch-size", "3"], "old.html"),
                                       report(["-p", "2", "--batch-size", "12"], "new.html"),
                                       "html"),
}

rows = table_rows()
if rows != set(CASES):
    fail(f"docs/cli.md's table and this script differ: only in the table "
         f"{sorted(rows - set(CASES))}, only here {sorted(set(CASES) - rows)}")

for (command, flag), (old_args, new_args, written) in sorted(CASES.items()):
    if command == "run" and not HAS_RUN:
        print(f"skip {command} {flag}: no executor in this build")
        continue
    for stale in ("old.", "new."):
        if written and os.path.exists(out(stale + written)):
            os.remove(out(stale + written))
    old = run(old_args)
    new = run(new_args)
    old_file, new_file = (read(out(n + written)) if written else None for n in ("old.", "new."))
    where = f"{command} {flag}"
    note_wanted = (command, flag) != ("search", "--recompute")
    notes = [ln for ln in old.stderr.splitlines() if "is deprecated" in ln]
    if note_wanted and not (len(notes) == 1 and f"{flag} is deprecated" in notes[0]):
        fail(f"{where}: expected one deprecation note naming {flag}, got:\n{old.stderr}")
    if not note_wanted and notes:
        fail(f"{where}: a note for a spelling that is not deprecated: {notes}")
    if "is deprecated" in new.stderr:
        fail(f"{where}: the new spelling printed a note: {new.stderr}")
    # Reports name the plan by what was asked; the HTML pages differ only in their file names.
    if written:
        same = old_file.replace("old.", "new.") == new_file
    else:
        same = old.stdout == new.stdout
    if not same or not (new_file if written else new.stdout):
        fail(f"{where}: the old spelling gives another result than the new one:\n"
             f"{(old_file or old.stdout)[:600]}\n---\n{(new_file or new.stdout)[:600]}")

print(f"{len(CASES)} old spellings checked; {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
