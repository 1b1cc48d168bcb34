#!/usr/bin/python3
"""Plans in and out of the ecosystem (issue 37), through the commands a user types:

1. `export-chakra` writes one Chakra trace per rank that `protoc --decode` reads against the
   schema (sim/proto/et_def.proto) message by message, with the plan's actions, durations, sizes
   and dependencies; `import-chakra` reads them back as the same plan, over schedules and dp.
2. torch's compute_comms CSV (written by torch 2.15) validates and simulates; `convert` and
   `schedule --lower --format torch-comms` write it.
3. `partition --layout` gives Megatron's stages; `simulate --layout` runs them.
Bad input of each kind exits 2 naming the file (or --layout) and the position.

usage: interop_cli.py BIN_DIR WORK_DIR SOURCE_DIR [WITH_CHAKRA: ON|OFF]
"""
import json
import os
import re
import shutil
import subprocess
import sys

BIN, WORK, SRC = (os.path.abspath(a) for a in sys.argv[1:4])
WITH_CHAKRA = (sys.argv[4] if len(sys.argv) > 4 else "ON").upper() in ("ON", "1", "TRUE", "YES")
PW = os.path.join(BIN, "pipewright")
PROTO_DIR = os.path.join(SRC, "sim", "proto")
DATA = os.path.join(SRC, "tests", "data", "interop")
GPT = os.path.join(SRC, "examples", "gpt-small.json")
os.makedirs(WORK, exist_ok=True)
failures = []


def fail(msg: str) -> None:
    failures.append(msg)
    print("FAIL", msg)


def run(args: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PW, "--log-level", "warn"] + args, capture_output=True, text=True,
                          timeout=120, cwd=WORK, **kw)


def expect(args: list, code: int, pattern: str = "") -> subprocess.CompletedProcess:
    r = run(args)
    out = r.stdout + r.stderr
    if r.returncode != code or (pattern and not re.search(pattern, out, re.S)):
        fail(f"pipewright {' '.join(args)}: exit {r.returncode}, expected {code} and "
             f"/{pattern}/:\n{out}")
    else:
        print("OK  ", " ".join(args)[:110])
    return r


def messages(path: str) -> list:
    """The length-delimited messages of a Chakra trace (protolib.decodeMessage's framing)."""
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        n = shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        out.append(data[i:i + n])
        i += n
    return out


def decode(message: bytes, type_name: str) -> str:
    r = subprocess.run(["protoc", f"--proto_path={PROTO_DIR}", f"--decode=ChakraProtoMsg.{type_name}",
                        "et_def.proto"], input=message, capture_output=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode())
    return r.stdout.decode()


def decoded_trace(path: str) -> tuple:
    """(metadata text, [node text]) of one trace, every message through protoc --decode."""
    msgs = messages(path)
    return decode(msgs[0], "GlobalMetadata"), [decode(m, "Node") for m in msgs[1:]]


# --- 1. Chakra ----------------------------------------------------------------------------
def chakra_round_trip(shape: list, dp: int) -> None:
    what = " ".join(shape) + f" dp {dp}"
    plan = os.path.join(WORK, "plan.json")
    made = run(["schedule"] + shape + ["--lower", "--reduce-grad", "--optimizer-step",
                                       "-f", "json", "-o", plan])
    if made.returncode != 0:
        fail(f"schedule {what}: {made.stderr}")
        return
    out = os.path.join(WORK, "chakra")
    shutil.rmtree(out, ignore_errors=True)
    expect(["export-chakra", plan, "--forward-ms", "1", "--backward-ms", "2", "--dp", str(dp),
            "-o", out], 0)
    ranks = json.load(open(plan))["ranks"]
    files = sorted(os.listdir(out))
    if files != sorted([f"pipewright.{g}.et" for g in range(ranks * dp)] +
                       ["pipewright.comm_groups.json"]):
        fail(f"{what}: traces {files}")
        return
    groups = json.load(open(os.path.join(out, "pipewright.comm_groups.json")))
    if groups != {str(r + 1): [k * ranks + r for k in range(dp)] for r in range(ranks)}:
        fail(f"{what}: communicator groups {groups}")
    actions = json.load(open(plan))["actions"]
    for g in range(ranks * dp):
        meta, nodes = decoded_trace(os.path.join(out, f"pipewright.{g}.et"))
        if 'version: "0.0.4"' not in meta or f"int64_val: {g}" not in meta:
            fail(f"{what}: rank {g} metadata:\n{meta}")
        names = [re.search(r'name: "([^"]*)"', n).group(1) for n in nodes]
        cells = actions[g % ranks]
        # OVERLAP_F_B container cells are three nodes (marker, F, B).
        flat = []
        for c in cells:
            m = re.fullmatch(r"\((\d+)F(\d+);(\d+)([BI])(\d+)\)OVERLAP_F_B", c)
            flat += [f"{m.group(1)}OVERLAP_F_B", f"{m.group(1)}F{m.group(2)}",
                     f"{m.group(3)}{m.group(4)}{m.group(5)}"] if m else [c]
        if names != flat:
            fail(f"{what}: rank {g} nodes {names[:6]}... are not the plan's {flat[:6]}...")
        for name, node in zip(names, nodes):
            if re.fullmatch(r"\d+F\d+", name) and "duration_micros: 1000\n" not in node:
                fail(f"{what}: {name} is not 1 ms:\n{node}")
            if "SEND" in name and "type: COMM_SEND_NODE" not in node:
                fail(f"{what}: {name}:\n{node}")
            if "REDUCE_GRAD" in name and ("type: COMM_COLL_NODE" not in node or
                                          f'string_val: "{g % ranks + 1}"' not in node):
                fail(f"{what}: {name}:\n{node}")
    back = os.path.join(WORK, "back.json")
    expect(["import-chakra", out, "-f", "json", "-o", back], 0)
    if os.path.exists(back) and open(back).read() != open(plan).read():
        fail(f"{what}: import-chakra read back another plan")



def chakra_checks() -> None:
    """Round trips, what protoc decodes, sizes and dependencies, bad traces."""
    for shape in (["1F1B", "-p", "2", "-m", "4"], ["Interleaved1F1B", "-p", "2", "-v", "2", "-m", "4"],
                  ["ZBVZeroBubble", "-p", "2", "-m", "4"], ["DualPipeV", "-p", "2", "-m", "4"],
                  ["1F1B", "-p", "4", "-m", "4", "--edges", "0:1,0:2,1:3,2:3"]):
        for dp in (1, 2):
            chakra_round_trip(shape, dp)

    # Sizes and dependencies from the model: a SEND carries its stage's output, REDUCE_GRAD its
    # parameters; B waits for its own F (same rank) and the RECV_B before it.
    out = os.path.join(WORK, "gpt")
    shutil.rmtree(out, ignore_errors=True)
    expect(["export-chakra", "--schedule", "1F1B", "-p", "2", "-m", "2", "--model", GPT,
            "--partition-method", "uniform", "-o", out], 0)
    part = json.loads(run(["partition", GPT, "-s", "2", "--method", "uniform"]).stdout)
    _, nodes = decoded_trace(os.path.join(out, "pipewright.0.et"))
    by_name = {re.search(r'name: "([^"]*)"', n).group(1): n for n in nodes}
    ids = {name: int(re.search(r"^id: (\d+)", n, re.M).group(1)) if "id:" in n else 0
           for name, n in by_name.items()}
    send = by_name.get("0SEND_F0", "")
    want_bytes = part["stages"][0]["output_bytes"]
    if f'name: "comm_size"\n  int64_val: {want_bytes}' not in send or "comm_dst" not in send:
        fail(f"0SEND_F0 does not send {want_bytes} bytes to rank 1:\n{send}")
    b0 = by_name.get("0B0", "")
    deps = {int(d) for d in re.findall(r"data_deps: (\d+)", b0)}
    if deps != {ids["0F0"], ids["0RECV_B0"]}:
        fail(f"0B0 data_deps {deps}, expected 0F0 and 0RECV_B0 ({ids['0F0']}, {ids['0RECV_B0']}):\n{b0}")

    # Issue 46: with --tp 2 one trace per GPU, each F and B followed by its blocks' TP
    # collectives on the TP group (reduce-scatter + all-gather with sequence parallelism).
    tp_out = os.path.join(WORK, "gpt-tp")
    shutil.rmtree(tp_out, ignore_errors=True)
    expect(["export-chakra", "--schedule", "1F1B", "-p", "2", "-m", "2", "--model", GPT, "--tp", "2",
            "--sequence-parallel", "--dp", "2", "-o", tp_out], 0)
    files = sorted(f for f in os.listdir(tp_out) if f.endswith(".et"))
    if len(files) != 8:
        fail(f"--tp 2 --dp 2 -p 2: {len(files)} traces, expected 8")
    groups = json.load(open(os.path.join(tp_out, "pipewright.comm_groups.json")))
    if groups.get("5") != [0, 1] or groups.get("1") != [0, 4]:
        fail(f"--tp 2 communicator groups {groups}")
    meta, nodes = decoded_trace(os.path.join(tp_out, "pipewright.1.et"))
    tp_nodes = [n for n in nodes if "pw_tp_collective" in n]
    # GPU 1 is k = 1 of pipeline rank 0's group (TP group 5): stage 0's blocks, in F and B of
    # 2 microbatches, 2 per block, a reduce-scatter and an all-gather each.
    kinds = {layer["name"]: layer["kind"] for layer in json.load(open(GPT))["layers"]}
    part = json.loads(run(["partition", GPT, "-s", "2", "--tp", "2", "--sequence-parallel"]).stdout)
    blocks = sum(1 for n in part["stages"][0]["nodes"] if kinds.get(n) == "transformer_block")
    if not tp_nodes or any("type: COMM_COLL_NODE" not in n or 'string_val: "5"' not in n
                           for n in tp_nodes):
        fail(f"--tp 2: TP collectives of GPU 1 are not COMM_COLL nodes on group 5:\n{tp_nodes[:1]}")
    if blocks == 0 or len(tp_nodes) != blocks * 2 * 2 * 2 * 2:
        fail(f"--tp 2: {len(tp_nodes)} TP collectives on GPU 1, stage 0 has {blocks} blocks")
    reduce_scatter = [n for n in tp_nodes  # REDUCE_SCATTER = 7 in et_def.proto's CollectiveCommType
                      if re.search(r'name: "comm_type"\s+int64_val: 7\n', n)]
    if len(reduce_scatter) != len(tp_nodes) // 2:
        fail("--tp 2 --sequence-parallel: not one reduce-scatter per all-gather")
    if "pw_tp" not in meta:
        fail(f"--tp 2: metadata without pw_tp:\n{meta}")
    expect(["import-chakra", tp_out, "-f", "json", "-o", os.path.join(WORK, "tp-back.json")], 0)

    # Bad traces: exit 2 naming the file and the position.
    bad = os.path.join(WORK, "bad")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(out, bad)
    trace1 = os.path.join(bad, "pipewright.1.et")
    data = open(trace1, "rb").read()
    open(trace1, "wb").write(data[:-4])
    expect(["import-chakra", bad], 2, r"bad/pipewright\.1\.et: byte \d+: node \d+: not a Node message")
    open(trace1, "wb").write(data.replace(b"1F0", b"1Q0", 1))
    expect(["import-chakra", bad], 2, r"pipewright\.1\.et: node \d+ \(id \d+, byte \d+\): name '1Q0'")
    os.remove(trace1)
    expect(["import-chakra", bad], 2, r"the metadata says 2 pipeline ranks, but there are 1 traces")
    os.rename(os.path.join(bad, "pipewright.0.et"), os.path.join(bad, "pipewright.1.et"))
    expect(["import-chakra", bad], 2, r"bad: the trace of rank 0 is missing")
    open(os.path.join(bad, "x.et"), "w").write("")
    expect(["import-chakra", bad], 2, r"x\.et: a trace must be named <prefix>\.<rank>\.et")
    expect(["import-chakra", os.path.join(DATA, "torch_1f1b_comms.csv")], 2, r"not a directory")



if WITH_CHAKRA:
    chakra_checks()
else:  # the portable build: both commands say what is missing
    expect(["export-chakra", "--schedule", "1F1B", "-p", "2", "-m", "2", "--forward-ms", "1",
            "--backward-ms", "2", "-o", "x"], 2, r"built without Chakra traces")
    absent = os.path.join(WORK, "absent")
    os.makedirs(absent, exist_ok=True)
    open(os.path.join(absent, "pipewright.0.et"), "wb").write(b"")
    expect(["import-chakra", absent], 2, r"built without Chakra traces")


# --- 2. torch's compute_comms CSV ---------------------------------------------------------
torch_csv = os.path.join(DATA, "torch_1f1b_comms.csv")
expect(["validate", torch_csv], 0, r"valid lowered plan .* 2 ranks, 2 stages, 2 microbatches")
expect(["simulate", torch_csv, "--forward-ms", "1", "--backward-ms", "2"], 0, r"makespan [0-9.]+ ms")
r = expect(["convert", torch_csv, "-f", "torch-comms"], 0)
if r.stdout != open(torch_csv).read().replace("\r\n", "\n"):
    fail(f"convert -f torch-comms is not torch's file (UNSHARD/RESHARD kept):\n{r.stdout}")
expect(["schedule", "1F1B", "-p", "2", "-m", "2", "--lower", "--reduce-grad", "-f",
        "torch-comms"], 0, r"^0F0,0SEND_F0,.*0WAIT_SEND_F0,.*1WAIT_SEND_B1\n$")
expect(["schedule", "1F1B", "-p", "2", "-m", "2", "-f", "torch-comms"], 2, r"add --lower")
expect(["schedule", "1F1B", "-p", "2", "-m", "2", "--lower", "--optimizer-step", "-f",
        "torch-comms"], 2, r"no optimizer action")
expect(["validate", os.path.join(DATA, "bad_wait.csv")], 2,
       r"bad_wait\.csv:2:67: 1WAIT_SEND_F1: no SEND_F of stage 1, microbatch 1 before it")
expect(["simulate", os.path.join(DATA, "bad_wait.csv"), "--forward-ms", "1"], 2,
       r"bad_wait\.csv:2:67:")

# --- 3. Megatron layouts ------------------------------------------------------------------
r = expect(["partition", GPT, "--layout", "Et|(tt|)*5,t|L", "--pp", "2"], 0)
if r.returncode == 0:
    p = json.loads(r.stdout)
    got = [s["nodes"] for s in p["stages"]]
    want = [["embed", "block0"]] + [[f"block{2 * i + 1}", f"block{2 * i + 2}"] for i in range(5)] + \
        [["block11"], ["ln_f", "head"]]
    if got != want:
        fail(f"--layout stages {got}, expected {want}")
expect(["simulate", "--schedule", "Interleaved1F1B", "-p", "2", "-m", "4", "--model", GPT,
        "--layout", "Et|(tt|)*5,t|L"], 0, r"2 ranks x dp 1, 8 stages")
expect(["partition", GPT, "--layout", "Et|(tt|)*5,tX|L"], 2,
       r"--layout: character 12: 'X' is not a layer.*\n  Et\|\(tt\|\)\*5,tX\|L\n {14}\^")
expect(["partition", GPT, "--layout", "Et|(tt|)*5,t|L", "--pp", "3"], 2,
       r"character 14: the layout has 8 stages, which --pp 3 does not divide")
expect(["simulate", "--schedule", "1F1B", "-p", "2", "-m", "4", "--model", GPT,
        "--layout", "Et*12|tL"], 2, r"character 6: one t too many")

# Issue 44: a V-placement schedule contradicts a layout's rank rule; nested repeats are bounded
# by the model's size before anything is allocated.
for sched_kind in ("ZBVZeroBubble", "DualPipeV"):
    expect(["simulate", "--schedule", sched_kind, "-p", "2", "-m", "4", "--model", GPT,
            "--layout", "Et|(tt|)*2,t|L"], 2,
           rf"--layout with --schedule {sched_kind}: a Megatron layout places stage v x pp \+ r "
           r"on rank r.*give the partition with --partition")
expect(["partition", GPT, "--layout", "E(t*65536|)*65536L"], 2,
       r"--layout: character 2: the layout expands to more than \d+ layers and stage ends "
       r"\(the limit: the model's size")
if WITH_CHAKRA:
    # export-chakra: a profile of another precision is refused, as simulate refuses it.
    expect(["export-chakra", "--schedule", "1F1B", "-p", "2", "-m", "2", "--profile",
            os.path.join(SRC, "tests", "data", "sim", "profile_p2.json"), "--precision", "bf16",
            "-o", os.path.join(WORK, "chakra_precision")], 2,
           r"profile .*profile_p2\.json was measured at precision fp32 but the job runs at bf16")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
