#!/usr/bin/env bash
# Step time of ZBVZeroBubble vs 1F1B vs InterleavedZeroBubble at pp = 2 (issue 22), measured and
# simulated side by side. Each schedule runs for real (`run` under `launch --nproc 2`, Gloo, local
# processes; median step time after --warmup-steps from the run's "step N/M ... step X ms" lines)
# with --profile; the simulated column replays that run's own profile (`simulate --profile
# --sampled-steps 31 --recv posted`, as bench/run_overhead.sh does), and ratio = measured /
# simulated. The analytical column is `simulate --model` from the model's analytical costs (the
# tiny model's steps are microseconds there: only the ratios between rows mean something).
# ZBVZeroBubble and InterleavedZeroBubble hold 4 stages (2 per rank), 1F1B 2; the model is the
# same 8-layer transformer in every row, so the rows compare the schedules on the same work.
#   bench/schedules_pp2.sh [BUILD_DIR]   (default build/)
#   MEASURE=0 bench/schedules_pp2.sh     the analytical column only (no runs)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
m="${MICROBATCHES:-8}"
steps="${STEPS:-20}"
warmup="${WARMUP:-5}"
measure="${MEASURE:-1}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$pw" --log-level warn model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 \
  -o "$work/model.json"

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# Runs schedule $1 with $2 stages per rank for real and prints "MEASURED SIMULATED" (ms): the
# median step after warm-up, and the median sampled step of the run's own profile.
measure_and_replay() {
  local sched="$1" v="$2" log="$work/$1.log" prof="$work/$1.profile.json" measured simulated
  "$pw" launch --nproc 2 -- "$pw" run --model "$work/model.json" --dataset sonnets \
    --schedule "$sched" --pp 2 --stages-per-rank "$v" --microbatches "$m" \
    --batch-size $((4 * m)) --steps "$steps" --loss cross-entropy --optimizer adamw --lr 1e-3 \
    --timeout 120 --warmup-steps "$warmup" --profile "$prof" >"$log" 2>&1 ||
    { echo "run of $sched failed:" >&2; cat "$log" >&2; exit 1; }
  measured=$(grep -o "step [0-9]*/[0-9]* loss [^ ]* step [0-9.]* ms" "$log" |
    awk -v w="$warmup" '{split($2, s, "/"); if (s[1] > w) print $6}' | median)
  simulated=$("$pw" --log-level warn simulate --schedule "$sched" --pp 2 --stages-per-rank "$v" \
    --microbatches "$m" --optimizer adamw --recv posted --profile "$prof" --sampled-steps 31 |
    sed -n 's/^median step over [0-9]* steps with sampled durations: \([0-9.]*\) ms$/\1/p')
  echo "$measured $simulated"
}

printf "%-22s %2s %2s %2s %13s %12s %12s %7s\n" schedule p v m analytical_ms simulated_ms \
  measured_ms ratio
for spec in 1F1B:1 InterleavedZeroBubble:2 ZBVZeroBubble:2; do
  sched="${spec%:*}"; v="${spec#*:}"
  # The metrics' amortized_step_ms has 6 decimals.
  analytical=$("$pw" --log-level warn simulate --schedule "$sched" --pp 2 --stages-per-rank "$v" \
    --microbatches "$m" --model "$work/model.json" --optimizer adamw --metrics - |
    sed -n 's/^ *"amortized_step_ms": \([0-9.e+-]*\),*$/\1/p')
  measured="-"; simulated="-"; ratio="-"
  if [[ "$measure" == 1 ]]; then
    res=$(measure_and_replay "$sched" "$v")
    measured="${res% *}"; simulated="${res#* }"
    ratio=$(awk -v a="$measured" -v b="$simulated" 'BEGIN {printf "%.3f", a / b}')
  fi
  printf "%-22s %2s %2s %2s %13s %12s %12s %7s\n" "$sched" 2 "$v" "$m" "$analytical" \
    "$simulated" "$measured" "$ratio"
done
