#!/usr/bin/env bash
# Runtime overhead of the executor: measured step time / simulated step time, where the simulator
# is fed the run's own profile (`pipewright run --profile`, then `pipewright simulate --profile`),
# for GPipe, 1F1B and Interleaved1F1B (v=2) at p = 2 and 4 on a small transformer, Gloo, local
# processes. Medians over the steps after warm-up. Target: ratio <= 1.10.
#   bench/run_overhead.sh [BUILD_DIR]   (default build/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
steps="${STEPS:-30}"
warmup="${WARMUP:-5}"
m="${MICROBATCHES:-8}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

"$pw" --log-level warn model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 \
  -o "$work/model.json"

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf "%-16s %2s %2s %2s %12s %12s %8s\n" schedule p v m measured_ms simulated_ms ratio
for spec in GPipe:1 1F1B:1 Interleaved1F1B:2; do
  sched="${spec%:*}"; v="${spec#*:}"
  for p in 2 4; do
    log="$work/$sched.$p.log"
    prof="$work/$sched.$p.profile.json"
    "$pw" launch --nproc "$p" -- "$pw" run --model "$work/model.json" --dataset sonnets \
      --schedule "$sched" --pp "$p" --stages-per-rank "$v" --microbatches "$m" \
      --batch-size $((4 * m)) --steps "$steps" --loss cross-entropy --optimizer adamw --lr 1e-3 --timeout 120 \
      --profile "$prof" --warmup-steps "$warmup" >"$log" 2>&1 || { cat "$log"; exit 1; }
    measured=$(grep -o "step [0-9]*/[0-9]* loss [^ ]* step [0-9.]* ms" "$log" |
      awk -v w="$warmup" '{split($2, s, "/"); if (s[1] > w) print $6}' | median)
    # The run's own profile, lowered as the run lowers it (REDUCE_GRAD + OPTIM), the median step
    # of 31 steps with durations drawn from the measured distributions (docs/simulator.md).
    simulated=$("$pw" --log-level warn simulate --schedule "$sched" --pp "$p" --microbatches "$m" \
      --stages-per-rank "$v" --optimizer adamw --recv posted --profile "$prof" --sampled-steps 31 |
      sed -n 's/^median step over [0-9]* steps with sampled durations: \([0-9.]*\) ms$/\1/p')
    ratio=$(awk -v a="$measured" -v b="$simulated" 'BEGIN {printf "%.3f", a / b}')
    printf "%-16s %2s %2s %2s %12.2f %12.2f %8s\n" "$sched" "$p" "$v" "$m" "$measured" \
      "$simulated" "$ratio"
  done
done
