#!/usr/bin/env bash
# Step time of ZBVZeroBubble vs 1F1B vs InterleavedZeroBubble at pp = 2 (issue 22): the simulated
# column from the model's analytical costs (`simulate --model`), the measured column from a real
# run (`run` under `launch`) once the executor runs the schedule. ZBVZeroBubble and
# InterleavedZeroBubble hold 4 stages (2 per rank), 1F1B 2; the model is the same 8-layer
# transformer in every row, so the rows compare the schedules on the same work.
#   bench/schedules_pp2.sh [BUILD_DIR]   (default build/)
#   MEASURE=1 bench/schedules_pp2.sh     also run each schedule for real (needs the executor)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
m="${MICROBATCHES:-8}"
steps="${STEPS:-20}"
warmup="${WARMUP:-5}"
measure="${MEASURE:-0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$pw" --log-level warn model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 \
  -o "$work/model.json"

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# Hook for the measured column: prints the median measured step time (ms) of a real run of
# schedule $1 with $2 stages per rank, or "-" when MEASURE is not set.
measured_ms() {
  local sched="$1" v="$2" log="$work/$1.log"
  if [[ "$measure" != 1 ]]; then echo "-"; return; fi
  "$pw" launch --nproc 2 -- "$pw" run --model "$work/model.json" --dataset sonnets \
    --schedule "$sched" --pp 2 --stages-per-rank "$v" --microbatches "$m" \
    --batch-size $((4 * m)) --steps "$steps" --loss cross-entropy --optimizer adamw --lr 1e-3 \
    --timeout 120 --warmup-steps "$warmup" >"$log" 2>&1 || { echo "run failed:" >&2; cat "$log" >&2; echo "-"; return; }
  grep -o "step [0-9]*/[0-9]* loss [^ ]* step [0-9.]* ms" "$log" |
    awk -v w="$warmup" '{split($2, s, "/"); if (s[1] > w) print $6}' | median
}

printf "%-22s %2s %2s %2s %13s %12s\n" schedule p v m simulated_ms measured_ms
for spec in 1F1B:1 InterleavedZeroBubble:2 ZBVZeroBubble:2; do
  sched="${spec%:*}"; v="${spec#*:}"
  # The metrics' amortized_step_ms has 6 decimals (the tiny model's steps are microseconds in
  # the analytical cost model; the ratios between rows are what matters).
  simulated=$("$pw" --log-level warn simulate --schedule "$sched" --pp 2 --stages-per-rank "$v" \
    --microbatches "$m" --model "$work/model.json" --optimizer adamw --metrics - |
    sed -n 's/^ *"amortized_step_ms": \([0-9.e+-]*\),*$/\1/p')
  printf "%-22s %2s %2s %2s %13s %12s\n" "$sched" 2 "$v" "$m" "$simulated" "$(measured_ms "$sched" "$v")"
done
