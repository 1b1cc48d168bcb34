#!/usr/bin/env bash
# Simulator fidelity (issue 9): how well `pipewright simulate` predicts the step time and peak
# memory that `pipewright run` measures, on a small GPT (8 blocks, hidden 64, seq 32) trained on
# the bundled sonnets, for GPipe, 1F1B, Interleaved1F1B (v=2) and InterleavedZeroBubble (v=2)
# at p in {2, 4} and m in {4, 8, 16} (4 samples per microbatch), over Gloo and MPI:
#
#   replay    profile each configuration's own run (run --profile) and predict it
#             (`pipewright compare`: median step of 31 steps with sampled durations)
#   trace     trace-driven replay (`compare --trace-replay`): each measured step simulated with
#             its own measured compute durations and the profile's communication costs, median
#             step against median step (the model's error without the host's drift between steps)
#   transfer  before running a configuration, predict it from the profile of ONE other
#             configuration (1F1B, p=2, m=8, same backend; re-measured right before each
#             target unless REFRESH_REF=0) moved to its partition (`pipewright
#             transfer-profile`) and the cluster measured by `pipewright calibrate`
#
# Prints one row per configuration and, per backend and overall, the mean absolute percentage
# error (MAPE) and the largest error of the step time, and the same for the peak memory per rank
# (RSS, see docs/simulator.md). Every number is a median over the steps after warm-up.
#
#   bench/fidelity.sh [BUILD_DIR]          (default build/)
#   BACKENDS="gloo" PS="2" MS="8" STEPS=12 WARMUP=2 bench/fidelity.sh   (a subset)
#   KEEP=1 bench/fidelity.sh               (keep every plan, trace and profile; prints where)
#   REPEAT=3 bench/fidelity.sh             (run every configuration 3 times, each after its own
#                                           reference run; each column is the median over the 3)
# On your own cluster: run the same commands with your launcher (mpirun/torchrun) and model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
backends="${BACKENDS:-gloo mpi}"
ps="${PS:-2 4}"
ms="${MS:-4 8 16}"
steps="${STEPS:-12}"
warmup="${WARMUP:-2}"
repeat="${REPEAT:-1}"
mbs="${MBS:-4}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
work="$(mktemp -d /tmp/pw_fidelity.XXXXXX)"
if [ "${KEEP:-0}" = 1 ]; then
  echo "keeping plans, traces and profiles in $work" >&2
else
  trap 'rm -rf "$work"' EXIT
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$pw" --log-level warn model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 \
  -o "$work/model.json"
for s in 2 4 8; do
  "$pw" --log-level warn partition "$work/model.json" --stages "$s" --method balanced \
    -o "$work/part$s.json"
done

# run BACKEND SCHEDULE P V M PREFIX: trains and writes PREFIX.trace.json / PREFIX.profile.json.
run() {
  local backend=$1 sched=$2 p=$3 v=$4 m=$5 prefix=$6
  "$pw" --log-level warn schedule "$sched" -p "$p" -m "$m" -v "$v" -o "$prefix.plan.csv"
  local args=(--log-level warn run --model "$work/model.json" --partition "$work/part$((p * v)).json"
    --plan "$prefix.plan.csv" --pp "$p" --stages-per-rank "$v" --microbatches "$m"
    --batch-size $((mbs * m)) --steps "$steps" --warmup-steps "$warmup" --dataset sonnets
    --loss cross-entropy --optimizer adamw --lr 1e-3 --seed 1 --timeout 120 --backend "$backend"
    --trace "$prefix.trace.json" --profile "$prefix.profile.json")
  if [ "$backend" = mpi ]; then
    local root_flag=()
    [ "$(id -u)" -eq 0 ] && root_flag=(--allow-run-as-root)
    timeout 300 mpirun "${root_flag[@]}" --oversubscribe --bind-to none -np "$p" \
      --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
      "$pw" "${args[@]}" >"$prefix.log" 2>&1
  else
    timeout 300 "$pw" launch --nproc "$p" -- "$pw" "${args[@]}" >"$prefix.log" 2>&1
  fi || { cat "$prefix.log"; exit 1; }
}

rows="$work/rows.tsv"
: >"$rows"
printf "%-7s %-22s %2s %2s %2s %10s %10s %8s %10s %8s %8s %8s %8s %8s %8s %8s\n" backend schedule \
  p v m measured_ms replay_ms replay% transfer_ms transfer% mem_rep% mem_xfer% rep_med% xfer_med% \
  trace% trace_st%
for backend in $backends; do
  if [ "$backend" = mpi ] && ! command -v mpirun >/dev/null; then continue; fi
  cal="$work/$backend.cluster.json"
  "$pw" --log-level warn calibrate --backend "$backend" --nproc 2 -o "$cal"
  ref="$work/$backend.ref"
  [ "${REFRESH_REF:-1}" = 1 ] || run "$backend" 1F1B 2 1 8 "$ref"
  for spec in GPipe:1 1F1B:1 Interleaved1F1B:2 InterleavedZeroBubble:2; do
    sched="${spec%:*}"; v="${spec#*:}"
    for p in $ps; do
      for m in $ms; do
        : >"$work/reps.tsv"
        for rep in $(seq "$repeat"); do
          pre="$work/$backend.$sched.$p.$m.r$rep"
          "$pw" --log-level warn schedule "$sched" -p "$p" -m "$m" -v "$v" -o "$pre.plan.csv"
          # Transfer: predicted before the configuration runs, from the reference configuration's
          # profile (1F1B p=2 m=8) measured just before (REFRESH_REF=1, the default: this shared
          # host's speed drifts by up to 1.7x within minutes, which a reference measured once at
          # the start would carry into every prediction) or once per backend (REFRESH_REF=0).
          if [ "${REFRESH_REF:-1}" = 1 ]; then
            run "$backend" 1F1B 2 1 8 "$ref"
            # The noise floor: the reference's median step against its previous run's (the error
            # of predicting a configuration by its own earlier measurement on this host).
            "$pw" --log-level warn compare --optimizer adamw --plan "$ref.plan.csv" --measured "$ref.trace.json" \
              --profile "$ref.profile.json" --warmup-steps "$warmup" --sampled-steps 0 \
              --metrics "$ref.compare.json" >/dev/null
            "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["measured_step_ms"])' \
              "$ref.compare.json" >>"$work/$backend.ref_steps"
          fi
          "$pw" --log-level warn transfer-profile --model "$work/model.json" --from "$work/part2.json" \
            --profile "$ref.profile.json" --to "$work/part$((p * v)).json" -o "$pre.xfer.json"
          "$pw" --log-level warn simulate "$pre.plan.csv" --optimizer adamw --recv posted \
            --profile "$pre.xfer.json" --cluster "$cal" --sampled-steps 31 --metrics "$pre.xfer.metrics.json" >"$pre.xfer.txt"
          run "$backend" "$sched" "$p" "$v" "$m" "$pre"
          "$pw" --log-level warn compare --optimizer adamw --plan "$pre.plan.csv" --measured "$pre.trace.json" \
            --profile "$pre.profile.json" --warmup-steps "$warmup" --metrics "$pre.compare.json" >/dev/null
          "$pw" --log-level warn compare --optimizer adamw --plan "$pre.plan.csv" --measured "$pre.trace.json" \
            --profile "$pre.profile.json" --warmup-steps "$warmup" --sampled-steps 0 \
            --metrics "$pre.compare_med.json" >/dev/null
          "$pw" --log-level warn compare --optimizer adamw --plan "$pre.plan.csv" --measured "$pre.trace.json" \
            --profile "$pre.profile.json" --warmup-steps "$warmup" --trace-replay \
            --metrics "$pre.compare_trace.json" >/dev/null
          "$py" - "$pre" "$backend" "$sched" "$p" "$v" "$m" >>"$work/reps.tsv" <<'PY'
import json, re, sys
pre, backend, sched, p, v, m = sys.argv[1:]
c = json.load(open(pre + ".compare.json"))
measured = c["measured_step_ms"]
replay = c["predicted_step_ms"]
xtxt = open(pre + ".xfer.txt").read()
xfer = float(re.search(r"median step over \d+ steps with sampled durations: ([0-9.]+) ms", xtxt).group(1))
xfer_med = float(re.search(r"makespan ([0-9.]+) ms", xtxt).group(1))
replay_med = json.load(open(pre + ".compare_med.json"))["predicted_step_ms"]
ct = json.load(open(pre + ".compare_trace.json"))
trace = ct["predicted_step_ms"]
trace_steps = ct.get("per_step_mape", float("nan"))
meas_mem = {r["rank"]: r["peak_bytes"] for r in json.load(open(pre + ".profile.json"))["peak_memory"]}
xm = {r["rank"]: r["peak_memory_bytes"] for r in json.load(open(pre + ".xfer.metrics.json"))["ranks"]}
def mem_err(pred):
    errs = [abs(pred[r] - meas_mem[r]) / meas_mem[r] for r in meas_mem if r in pred and meas_mem[r] > 0]
    return 100 * max(errs) if errs else float("nan")
rep_mem = {r["rank"]: r["predicted_peak_bytes"] for r in c["per_rank"] if "predicted_peak_bytes" in r}
print("\t".join(map(str, [backend, sched, p, v, m, measured, replay,
                          100 * (replay - measured) / measured, xfer,
                          100 * (xfer - measured) / measured, mem_err(rep_mem), mem_err(xm),
                          100 * (replay_med - measured) / measured,
                          100 * (xfer_med - measured) / measured,
                          100 * (trace - measured) / measured, 100 * trace_steps])))
PY
        done
        # REPEAT > 1: each column is the median over the repetitions (errors: of the signed
        # errors, each transfer predicted from the reference run just before its target).
        "$py" - "$work/reps.tsv" >>"$rows" <<'PY'
import statistics, sys
reps = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cols = list(zip(*reps))
print("\t".join(list(reps[0][:5]) + [str(statistics.median(map(float, c))) for c in cols[5:]]))
PY
        tail -1 "$rows" | awk -F'\t' '{printf "%-7s %-22s %2s %2s %2s %10.2f %10.2f %+8.2f %10.2f %+8.2f %8.2f %8.2f %+8.2f %+8.2f %+8.2f %8.2f\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16}'
      done
    done
  done
done

"$py" - "$rows" "$repeat" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
def summary(name, sel):
    if not sel:
        return
    rep = [abs(float(r[7])) for r in sel]
    xf = [abs(float(r[9])) for r in sel]
    mr = [float(r[10]) for r in sel]
    mx = [float(r[11]) for r in sel]
    rm = [abs(float(r[12])) for r in sel]
    xm = [abs(float(r[13])) for r in sel]
    tr = [abs(float(r[14])) for r in sel]
    ts = [float(r[15]) for r in sel]
    print(f"{name:<8} n={len(sel):2d}  replay MAPE {sum(rep)/len(rep):5.2f}% max {max(rep):5.2f}% "
          f"(medians only {sum(rm)/len(rm):5.2f}%)  "
          f"trace replay MAPE {sum(tr)/len(tr):5.2f}% max {max(tr):5.2f}% "
          f"(per step {sum(ts)/len(ts):5.2f}%)  "
          f"transfer MAPE {sum(xf)/len(xf):5.2f}% max {max(xf):5.2f}% "
          f"(medians only {sum(xm)/len(xm):5.2f}%)  "
          f"memory (worst rank) replay mean {sum(mr)/len(mr):5.2f}% max {max(mr):5.2f}%  "
          f"transfer mean {sum(mx)/len(mx):5.2f}% max {max(mx):5.2f}%")
print()
for b in sorted(set(r[0] for r in rows)):
    summary(b, [r for r in rows if r[0] == b])
for p in sorted(set(r[2] for r in rows)):
    summary("p=" + p, [r for r in rows if r[2] == p])
summary("all", rows)
import glob
for f in sorted(glob.glob(sys.argv[1].rsplit("/", 1)[0] + "/*.ref_steps")):
    ms = [float(x) for x in open(f) if x.strip()]
    d = [abs(b - a) / b for a, b in zip(ms, ms[1:])]
    if d:
        name = f.rsplit("/", 1)[1].split(".")[0]
        print(f"noise floor ({name}): the reference 1F1B p=2 m=8 measured {len(ms)} times, "
              f"|change| between consecutive runs mean {100 * sum(d) / len(d):5.2f}% "
              f"max {100 * max(d):5.2f}%")
        r = int(sys.argv[2])
        blocks = [statistics.median(ms[i:i + r]) for i in range(0, len(ms) - r + 1, r)]
        d = [abs(b - a) / b for a, b in zip(blocks, blocks[1:])]
        if r > 1 and d:
            print(f"noise floor ({name}), medians of {r} runs: |change| between consecutive "
                  f"medians mean {100 * sum(d) / len(d):5.2f}% max {100 * max(d):5.2f}%")
PY
