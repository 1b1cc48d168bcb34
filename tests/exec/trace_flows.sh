#!/usr/bin/env bash
# A measured trace's flows (issue 25, label mp): `pipewright launch --nproc 4 -- pipewright run`
# with pp 2 x dp 2 writes a trace whose p2p flows pair each send with its receive within a
# replica and go forward in time, with "dp" flows between the replicas' REDUCE_GRAD and a memory
# counter per rank (check_trace.py). Ranks bind 127.0.0.1; every run has a deadline.
#   trace_flows.sh PIPEWRIGHT DATA_DIR WORK_DIR CHECK_TRACE_PY
set -euo pipefail
pw="$1"; data="$2"; work="$3"; check="$4"
mkdir -p "$work"
work="$(mktemp -d "$work/flows.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
timeout 120 "$pw" launch --nproc 4 -- "$pw" --log-level warn run --model "$data/mlp.json" \
  --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy" --loss mse --optimizer sgd --lr 0.01 \
  --batch-size 16 --microbatches 4 --steps 2 --pp 2 --dp 2 --schedule 1F1B --timeout 60 \
  --backend gloo --trace "$work/measured.json"
# 2 replicas x 2 steps x 4 microbatches x (F + B) transfers; 2 stages x 2 steps REDUCE_GRAD pairs.
python3 "$check" "$work/measured.json" --min-p2p 32 --min-dp 4
