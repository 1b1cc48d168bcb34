#!/usr/bin/env bash
# Predicted vs measured step per data-parallel algorithm on one host (issue 47 item 3): for DDP
# (with and without overlap), LocalSGD, SlowMo, SGP, DiLoCo, streaming DiLoCo and ZeRO-1/2/3,
# `pipewright run` of an MLP at pp 1 x dp 2 (Gloo, 2 ranks) with --trace/--profile, then
#   compare   `pipewright compare` on that trace and profile (the run's own profile, a calibrated
#             cluster for the collectives): median predicted step (31 sampled steps) against the
#             median measured step after warm-up, as the fidelity grid reports them;
#   period    `pipewright simulate --profile` over the run's measured steps (makespan / steps,
#             median costs) against the measured mean step over the same whole periods, which
#             counts the periodic syncs (LocalSGD, SlowMo, DiLoCo) that a median skips.
# Also printed: the profile's median OPTIM time (the optimizer alone since the sync is timed
# apart, Note [Data-parallel sync] in exec/src/report/run_report.hpp) and dp_sync_compute_ms.
#
#   bench/dp_fidelity.sh [BUILD_DIR]      STEPS=20 WARMUP=4 (STEPS - WARMUP: a multiple of 8)
#   ALGOS="sgp diloco" ...                a subset (names of the first column)
#   KEEP=1 ...                            keep the work folder (traces, profiles, outputs)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
steps="${STEPS:-20}"; warmup="${WARMUP:-4}"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
work="$(mktemp -d /tmp/pw_dp_fidelity.XXXXXX)"
if [ -n "${KEEP:-}" ]; then trap 'echo "kept $work" >&2' EXIT; else trap 'rm -rf "$work"' EXIT; fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$pw" --log-level warn model mlp --sizes 256,512,512,256 --activation relu -o "$work/mlp.json"
"$py" - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", rng.standard_normal((512, 256), dtype=np.float32))
np.save(sys.argv[1] + "/y.npy", rng.standard_normal((512, 256), dtype=np.float32))
PY
timeout 300 "$pw" --log-level warn calibrate --backend gloo --nproc 2 --max-mib 4 -o "$work/cluster.json"
"$pw" --log-level warn schedule 1F1B -p 1 -m 2 -o "$work/plan.csv"
job=(--pp 1 --dp 2 --microbatches 2 --batch-size 64 --optimizer sgd --momentum 0.9)

printf '%-24s %9s %9s %8s %9s %9s %8s %8s %8s\n' algorithm meas_med pred_med err% meas_mean \
  pred_mean err% optim_ms sync_ms
while IFS='|' read -r name flags; do
  if [ -n "${ALGOS:-}" ] && ! grep -qw -- "$name" <<<"$ALGOS"; then continue; fi
  read -r -a f <<<"$flags"
  pre="$work/$name"
  timeout 300 "$pw" launch --nproc 2 -- "$pw" --log-level info run --model "$work/mlp.json" \
    "${job[@]}" "${f[@]}" --schedule 1F1B --loss mse --data-x "$work/x.npy" --data-y "$work/y.npy" \
    --no-shuffle --lr 0.01 --steps "$steps" --warmup-steps "$warmup" --backend gloo --timeout 120 \
    --trace "$pre.trace.json" --profile "$pre.profile.json" >"$pre.log" 2>&1 || { cat "$pre.log"; exit 1; }
  timeout 300 "$pw" compare --plan "$work/plan.csv" "${job[@]}" "${f[@]}" --warmup-steps "$warmup" \
    --measured "$pre.trace.json" \
    --profile "$pre.profile.json" --cluster "$work/cluster.json" -o "$pre.compare.txt"
  timeout 300 "$pw" simulate "$work/plan.csv" "${job[@]}" "${f[@]}" --steps $((steps - warmup)) \
    --profile "$pre.profile.json" --cluster "$work/cluster.json" >"$pre.sim.txt"
  "$py" - "$pre" "$name" "$warmup" "$steps" <<'PY'
import json, re, statistics, sys
pre, name, warmup, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = open(pre + ".compare.txt").read()
m = re.search(r"predicted ([0-9.]+) ms, measured ([0-9.]+) ms", c)
pred, meas = float(m.group(1)), float(m.group(2))
log = open(pre + ".log").read()
all_ms = [float(x) for x in re.findall(r"\[rank 0\].*step \d+/\d+ loss \S+ step ([0-9.]+) ms", log)]
mean = statistics.fmean(all_ms[warmup:])
sim = float(re.search(r"makespan ([0-9.]+) ms", open(pre + ".sim.txt").read()).group(1))
pmean = sim / (steps - warmup)
p = json.load(open(pre + ".profile.json"))
optim = statistics.median([s.get("optimizer_ms", 0) for s in p["stages"]])
err = lambda x, y: 100 * (x - y) / y
print(f"{name:<24} {meas:9.2f} {pred:9.2f} {err(pred, meas):+8.1f} {mean:9.2f} {pmean:9.2f} "
      f"{err(pmean, mean):+8.1f} {optim:8.2f} {p.get('dp_sync_compute_ms', 0):8.2f}")
PY
done <<'ALGOS'
ddp|--dp-algorithm ddp
ddp-no-overlap|--dp-algorithm ddp --no-ddp-overlap
localsgd|--dp-algorithm localsgd --localsgd-frequency 4
slowmo|--dp-algorithm slowmo --localsgd-frequency 4 --slowmo-frequency 8
sgp|--dp-algorithm sgp
diloco|--dp-algorithm diloco --sync-every 8
streaming-diloco|--dp-algorithm diloco --sync-every 8 --fragments 2
zero1|--zero-stage 1
zero2|--zero-stage 2
zero3|--zero-stage 3
ALGOS
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
