#!/usr/bin/env bash
# `compare` on runs with data parallelism (issue 47 item 1, label mp): `pipewright launch` runs
# pp 2 x dp 2 and pp 1 x dp 2 with DDP, LocalSGD and ZeRO-1 (traces and profiles), then
# `compare --dp 2` exits 0, lists every world rank and prints the data-parallel rows, whose
# predicted wire bytes per step equal the measured ones (Note [Data-parallel comparison]); a trace
# whose rank count is not pp x dp exits 2 naming both counts. Ranks bind 127.0.0.1; every run has
# a deadline.
#   dp_compare.sh PIPEWRIGHT DATA_DIR WORK_DIR
set -euo pipefail
pw="$1"; data="$2"; work="$3"
mkdir -p "$work"
work="$(mktemp -d "$work/dpcmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
failed=0
"$pw" --log-level warn schedule 1F1B -p 2 -m 4 -o "$work/plan_p2.csv"
"$pw" --log-level warn schedule 1F1B -p 1 -m 4 -o "$work/plan_p1.csv"
# 5 steps, 1 warm-up: 4 measured steps, a whole number of LocalSGD periods (frequency 2).
for pp in 2 1; do
  for algo in "--dp-algorithm ddp" "--dp-algorithm localsgd --localsgd-frequency 2" "--zero-stage 1"; do
    name="pp$pp ${algo}"
    # shellcheck disable=SC2086
    timeout 120 "$pw" launch --nproc $((pp * 2)) -- "$pw" --log-level warn run \
      --model "$data/mlp.json" --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy" \
      --loss mse --optimizer sgd --lr 0.01 --batch-size 16 --microbatches 4 --steps 5 \
      --pp "$pp" --dp 2 --schedule 1F1B --timeout 60 --backend gloo $algo \
      --trace "$work/t.json" --profile "$work/p.json"
    # shellcheck disable=SC2086
    if ! timeout 60 "$pw" compare --plan "$work/plan_p$pp.csv" --dp 2 $algo --measured "$work/t.json" \
        --profile "$work/p.json" --metrics "$work/c.json" -o "$work/c.txt"; then
      echo "FAIL $name: compare exited non-zero"; failed=1; continue
    fi
    # shellcheck disable=SC2086
    if ! timeout 60 "$pw" compare --plan "$work/plan_p$pp.csv" --dp 2 $algo --measured "$work/t.json" \
        --profile "$work/p.json" --trace-replay -o "$work/r.txt"; then
      echo "FAIL $name: compare --trace-replay exited non-zero"; failed=1; continue
    fi
    if ! grep -q "^data parallel (" "$work/c.txt" || ! grep -q "^data parallel (" "$work/r.txt"; then
      echo "FAIL $name: no data-parallel rows"; cat "$work/c.txt"; failed=1; continue
    fi
    if python3 - "$work/c.json" "$pp" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
pp = int(sys.argv[2])
world = pp * 2
assert rep["replicas"] == 2, rep.get("replicas")
assert [r["rank"] for r in rep["per_rank"]] == list(range(world)), rep["per_rank"]
rows = rep["data_parallel"]
assert [r["rank"] for r in rows] == list(range(world)), rows
for r in rows:
    assert r["replica"] == r["rank"] // pp, r
    pred, meas = r["predicted_wire_bytes_per_step"], r["measured_wire_bytes_per_step"]
    assert meas is not None and pred > 0, r
    assert abs(pred - meas) <= 1e-6 * pred + 1, (pred, meas)
    assert r["measured_exposed_ms_per_step"] is not None, r
PY
    then echo "OK   $name"; else echo "FAIL $name: $(cat "$work/c.json" | head -c 2000)"; failed=1; fi
  done
done
# The last trace has 2 world ranks (pp 1 x dp 2): as pp 1 x dp 3 it does not fit.
set +e
out="$(timeout 60 "$pw" compare --plan "$work/plan_p1.csv" --dp 3 --zero-stage 1 \
  --measured "$work/t.json" --profile "$work/p.json" 2>&1)"
rc=$?
set -e
if [ "$rc" = 2 ] && grep -q "1 ranks x 3 replicas = 3 ranks but the measured trace has 2" <<<"$out"; then
  echo "OK   mismatch names both counts"
else
  echo "FAIL mismatch: rc $rc: $out"; failed=1
fi
exit "$failed"
