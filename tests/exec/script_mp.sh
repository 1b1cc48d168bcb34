#!/usr/bin/env bash
# Pipelined training of a hand-made TorchScript model (issue 21, label mp): make_script_model.py's
# 4-node model (a tied weight, a node with two outputs, a node that reads the model input at an
# input slot no edge feeds) trained under `pipewright launch` with pp = 2, for GPipe, 1F1B,
# Interleaved1F1B and InterleavedZeroBubble (2 stages per rank), and with dp = 2, must end within
# 1e-5 of the same training on one process; a missing node file exits 2 naming it. Exit 77 (skip)
# when /usr/bin/python3 has no torch. (The exported examples are trained against PyTorch by
# tests/python/byo_train.py.)
#   script_mp.sh PIPEWRIGHT COMPARE SOURCE_DIR WORK_DIR
set -euo pipefail
pw="$1"; cmp="$2"; src="$3"; work="$4"
mkdir -p "$work"
work="$(mktemp -d "$work/script.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1

rc=0
/usr/bin/python3 "$src/tests/exec/make_script_model.py" "$work" --data 32 || rc=$?
if [ "$rc" -eq 77 ]; then
  echo "skipped: /usr/bin/python3 has no torch"
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "FAIL: make_script_model.py exited $rc"; exit 1; }

common=(--log-level warn run --model "$work/model.json" --data-x "$work/x.npy"
        --data-y "$work/y.npy" --loss cross-entropy --optimizer sgd --lr 0.5 --no-shuffle
        --steps 4 --timeout 60)
timeout 120 "$pw" "${common[@]}" --batch-size 8 --microbatches 4 --pp 1 \
  --save "$work/ref.safetensors"
failed=0
# schedule:stages per rank:dp. dp = 2 halves the per-replica batch: the same rows per step.
for spec in GPipe:1:1 1F1B:1:1 Interleaved1F1B:2:1 InterleavedZeroBubble:2:1 \
    Interleaved1F1B:2:2; do
  IFS=: read -r sched v dp <<< "$spec"
  out="$work/$sched.$v.$dp.safetensors"
  if ! timeout 120 "$pw" launch --nproc $((2 * dp)) -- "$pw" "${common[@]}" --pp 2 --dp "$dp" \
      --stages-per-rank "$v" --schedule "$sched" --batch-size $((8 / dp)) \
      --microbatches $((4 / dp)) --save "$out"; then
    echo "FAIL $sched v=$v dp=$dp: run failed"; failed=1; continue
  fi
  if "$cmp" "$work/ref.safetensors" "$out" 1e-5; then
    echo "OK   $sched v=$v dp=$dp"
  else
    echo "FAIL $sched v=$v dp=$dp: weights differ from one process"; failed=1
  fi
done

sed 's#nodes/1_block.pt#nodes/9_missing.pt#' "$work/model.json" > "$work/missing.json"
rc=0
msg="$(timeout 60 "$pw" run --model "$work/missing.json" --data-x "$work/x.npy" \
  --data-y "$work/y.npy" --loss cross-entropy --batch-size 8 --steps 1 2>&1)" || rc=$?
if [ "$rc" -eq 2 ] && [[ "$msg" == *"node 'block'"*"9_missing.pt"*"does not exist"* ]]; then
  echo "OK   missing node file: exit 2: $msg"
else
  echo "FAIL missing node file: exit $rc: $msg"; failed=1
fi
exit $failed
