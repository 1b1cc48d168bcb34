#!/usr/bin/env bash
# SlowMo's slow step on one host (Note [SlowMo sharded slow step] in exec/src/dp/slowmo.hpp):
# the reduce-scatter + all-gather of the parameters on the communicator's registered buffer
# (shared memory among the replicas of one host) against the same on private memory (Gloo's TCP
# ring: --no-shm-collectives) and, given OLD_BUILD_DIR, against that build's SlowMo (before the
# change: a Gloo reduce and a broadcast per shard over TCP). pp 2 x dp 2 of bench/fidelity.sh's
# GPT (8 layers, hidden 64: ~0.84 MB of parameters per pipeline rank), a slow step after every
# step (--slowmo-frequency 1, no averaging), variants run round-robin REPEATS times.
# Prints, per variant, the median over ranks and steps (after warm-up) of the "dp sync" slice of
# the trace (the slow step, waited), and its ratio to the registered buffer's.
#
#   bench/slowmo_slow_step.sh [BUILD_DIR] [OLD_BUILD_DIR]       (default build/; no old build)
#   REPEATS=3 STEPS=12 WARMUP=2 bench/slowmo_slow_step.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
old="${2:-}"
pw="$build/bin/pipewright"
repeats="${REPEATS:-3}"
steps="${STEPS:-12}"
warmup="${WARMUP:-2}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
[ -x "$pw" ] || { echo "slowmo_slow_step.sh: no $pw (build the pipewright target)" >&2; exit 2; }
if [ -n "$old" ] && [ ! -x "$old/bin/pipewright" ]; then
  echo "slowmo_slow_step.sh: no $old/bin/pipewright" >&2
  exit 2
fi
work="$(mktemp -d /tmp/pw_slowmo_step.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$pw" --log-level warn model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 \
  -o "$work/model.json"
"$pw" --log-level warn partition "$work/model.json" --stages 2 --method balanced \
  -o "$work/part.json"
"$pw" --log-level warn schedule 1F1B -p 2 -m 4 -o "$work/plan.csv"

variants=(registered private)
[ -n "$old" ] && variants+=(old)
# run VARIANT REPEAT: one pp 2 x dp 2 run; its trace is $work/VARIANT.REPEAT.json.
run() {
  local bin="$pw" extra=()
  case "$1" in
    private) extra=(--no-shm-collectives) ;;
    old) bin="$old/bin/pipewright" ;;
  esac
  timeout 300 "$bin" launch --nproc 4 -- "$bin" --log-level warn run --model "$work/model.json" \
    --partition "$work/part.json" --plan "$work/plan.csv" --pp 2 --microbatches 4 \
    --batch-size 16 --steps "$steps" --warmup-steps "$warmup" --dataset sonnets \
    --loss cross-entropy --lr 1e-3 --seed 1 --timeout 120 --backend gloo --dp 2 \
    --dp-algorithm slowmo --slowmo-frequency 1 --localsgd-frequency 1000000 "${extra[@]}" \
    --trace "$work/$1.$2.json" >"$work/$1.$2.log" 2>&1 || {
    echo "slowmo_slow_step.sh: the $1 run failed; its log:" >&2
    tail -n 20 "$work/$1.$2.log" >&2
    exit 1
  }
}
for ((i = 0; i < repeats; i++)); do
  for v in "${variants[@]}"; do run "$v" "$i"; done
done
"$py" - "$work" "$warmup" "${variants[@]}" <<'PY'
import glob, json, statistics, sys
work, warmup, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = {}
for v in variants:
    durs = []
    for f in glob.glob(f"{work}/{v}.*.json"):
        for e in json.load(open(f))["traceEvents"]:
            step = e.get("args", {}).get("step")
            if e.get("ph") == "X" and e.get("cat") == "dp sync" and step is not None and step >= warmup:
                durs.append(e["dur"] / 1e3)
    if not durs:
        sys.exit(f"slowmo_slow_step.sh: no 'dp sync' slices in the {v} traces")
    med[v] = statistics.median(durs)
print(f"{'variant':<11} {'slow step ms (median)':>22} {'vs registered':>14}")
for v in variants:
    print(f"{v:<11} {med[v]:>22.3f} {med[v] / med['registered']:>14.2f}")
PY
