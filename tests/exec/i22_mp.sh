#!/usr/bin/env bash
# Issue 22 on real processes (label mp), on the 2-layer transformer of run_equivalence.sh:
#   recompute  `--recompute full` trains to the same weights as keeping the activations (pp 2:
#              1F1B, InterleavedZeroBubble v 2), bit for bit;
#   schedules  ZBVZeroBubble and DualPipeV (v 2) and Chimera at pp 2 train to the weights of one
#              process (max |diff| <= 1e-5);
#   forward    `--forward-only --outputs OUT.npy` at pp 2 (GPipe, 1F1B, ZBVZeroBubble) writes the
#              outputs of one process (max |diff| <= 1e-5); --outputs alone exits 2;
#   pp4        ZBVZeroBubble at pp 4 (v 2: 8 stages of a generated 6-layer GPT of 9 nodes) trains
#              to the weights of one process (max |diff| <= 1e-5).
# Ranks bind 127.0.0.1 only; every run has a deadline (--timeout and `timeout`).
#   i22_mp.sh PIPEWRIGHT COMPARE DATA_DIR WORK_DIR recompute|schedules|forward|pp4
set -euo pipefail
pw="$1"; cmp="$2"; data="$3"; work="$4"; mode="$5"
mkdir -p "$work"
work="$(mktemp -d "$work/i22.$mode.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
# shellcheck source=ranks.sh
source "$(dirname "${BASH_SOURCE[0]}")/ranks.sh"
common=(--log-level warn run --model "$data/transformer.json" --data-x "$data/lm_x.npy"
        --data-y "$data/lm_y.npy" --optimizer sgd --lr 0.05 --momentum 0.9 --batch-size 16
        --microbatches 8 --seed 3 --timeout 60 --backend gloo)
failed=0
check() {  # check NAME REF OUT TOL
  if "$cmp" "$2" "$3" "$4"; then echo "OK   $1"; else echo "FAIL $1: weights differ"; failed=1; fi
}
[ "$mode" = forward ] || common+=(--steps 4)
case "$mode" in
  recompute)
    for spec in 1F1B:1 InterleavedZeroBubble:2; do
      sched="${spec%:*}"; v="${spec#*:}"
      for rc in none full; do
        run_ranks 2 gloo "$pw" "${common[@]}" --pp 2 --stages-per-rank "$v" --schedule "$sched" \
          --recompute "$rc" --save "$work/$sched.$rc.safetensors" \
          --trace "$work/$sched.$rc.trace.json" || { echo "FAIL $sched --recompute $rc: run failed"; failed=1; }
      done
      check "$sched recompute full == none" "$work/$sched.none.safetensors" \
        "$work/$sched.full.safetensors" 0
    done;;
  schedules)
    run_ranks 1 gloo "$pw" "${common[@]}" --pp 1 --schedule GPipe --save "$work/ref.safetensors"
    for spec in ZBVZeroBubble:2 DualPipeV:2 Chimera:1; do
      sched="${spec%:*}"; v="${spec#*:}"
      if run_ranks 2 gloo "$pw" "${common[@]}" --pp 2 --stages-per-rank "$v" --schedule "$sched" \
          --save "$work/$sched.safetensors"; then
        check "$sched pp=2 v=$v == one process" "$work/ref.safetensors" "$work/$sched.safetensors" 1e-5
      else
        echo "FAIL $sched pp=2: run failed"; failed=1
      fi
    done;;
  forward)
    fwd=(--forward-only --no-shuffle --steps 2)
    run_ranks 1 gloo "$pw" "${common[@]}" --pp 1 "${fwd[@]}" --outputs "$work/ref.npy"
    for spec in GPipe:1 1F1B:1 ZBVZeroBubble:2; do
      sched="${spec%:*}"; v="${spec#*:}"
      if run_ranks 2 gloo "$pw" "${common[@]}" --pp 2 --stages-per-rank "$v" --schedule "$sched" \
          "${fwd[@]}" --outputs "$work/$sched.npy"; then
        check "$sched pp=2 --forward-only outputs == one process" "$work/ref.npy" "$work/$sched.npy" 1e-5
      else
        echo "FAIL $sched pp=2 --forward-only: run failed"; failed=1
      fi
    done
    rc=0
    msg="$(timeout 60 "$pw" "${common[@]}" --pp 1 --outputs "$work/x.npy" 2>&1)" || rc=$?
    if [ "$rc" -eq 2 ] && [[ "$msg" == *"--outputs needs --forward-only"* ]] && [ ! -e "$work/x.npy" ]; then
      echo "OK   --outputs without --forward-only exits 2"
    else
      echo "FAIL --outputs without --forward-only: exit $rc, '$msg'"; failed=1
    fi;;
  pp4)
    "$pw" --log-level warn model gpt --layers 6 --hidden 32 --heads 2 --seq 16 --vocab 64 \
      -o "$work/gpt.json"
    gpt=(--log-level warn run --model "$work/gpt.json" --dataset sonnets --loss cross-entropy
         --optimizer sgd --lr 0.05 --momentum 0.9 --batch-size 16 --microbatches 8 --seed 3
         --steps 3 --timeout 60 --backend gloo)
    run_ranks 1 gloo "$pw" "${gpt[@]}" --pp 1 --schedule GPipe --save "$work/ref.safetensors"
    if run_ranks 4 gloo "$pw" "${gpt[@]}" --pp 4 --stages-per-rank 2 --schedule ZBVZeroBubble \
        --save "$work/zbv4.safetensors"; then
      check "ZBVZeroBubble pp=4 v=2 == one process" "$work/ref.safetensors" "$work/zbv4.safetensors" 1e-5
    else
      echo "FAIL ZBVZeroBubble pp=4: run failed"; failed=1
    fi;;
  *) echo "unknown mode $mode"; exit 2;;
esac
exit $failed
