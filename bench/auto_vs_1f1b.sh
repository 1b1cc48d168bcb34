#!/usr/bin/env bash
# Auto against 1F1B and ZB-H1 on the CPU executor (issue 45): pp 4, a GPT whose first stage holds
# the embedding and whose last holds the head and the loss (uneven stages). One 1F1B run measures
# the profile; `schedule Auto --profile` synthesizes a plan from it under a cap of CAP
# microbatches' activations per rank (default 2P = 8, the Zero Bubble paper's ZB-2p; CAP=4 is
# 1F1B's and ZB-H1's memory). Each schedule then runs for real (`run` under `launch --nproc 4`,
# Gloo, local processes; median step after --warmup-steps from the "step N/M ... step X ms"
# lines) and is predicted from the same profile (`simulate --profile --sampled-steps 31 --recv
# posted`, as bench/schedules_pp2.sh does). The runs go in ROUNDS rounds (default 3), each round
# running every schedule once in turn, so that a slow minute of the shared machine hits all rows;
# a row's measured step is the median of its rounds' medians. The table puts predicted and
# measured step ratios against 1F1B side by side; the issue's target is |measured ratio /
# predicted ratio - 1| <= 5% for Auto. Read the medians and the ratios, not single steps.
#   bench/auto_vs_1f1b.sh [BUILD_DIR]   (default build/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
p=4
m="${MICROBATCHES:-8}"
cap="${CAP:-$((2 * p))}"
steps="${STEPS:-16}"
warmup="${WARMUP:-4}"
rounds="${ROUNDS:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$pw" --log-level warn model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 \
  -o "$work/model.json"

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# run NAME PLAN_FLAGS...: the median measured step (ms) after warm-up.
run() {
  local name="$1" log="$work/$1.log"
  shift
  "$pw" launch --nproc "$p" -- "$pw" run --model "$work/model.json" --dataset sonnets --pp "$p" \
    --microbatches "$m" --batch-size $((4 * m)) --steps "$steps" --loss cross-entropy \
    --optimizer adamw --lr 1e-3 --timeout 120 --warmup-steps "$warmup" "$@" >"$log" 2>&1 ||
    { echo "run of $name failed:" >&2; cat "$log" >&2; exit 1; }
  grep -o "step [0-9]*/[0-9]* loss [^ ]* step [0-9.]* ms" "$log" |
    awk -v w="$warmup" '{split($2, s, "/"); if (s[1] > w) print $6}' | median
}

# predict PLAN_FLAGS...: the median sampled step (ms) of the profile.
predict() {
  "$pw" --log-level warn simulate --pp "$p" --microbatches "$m" --optimizer adamw --recv posted \
    --profile "$work/profile.json" --sampled-steps 31 "$@" |
    sed -n 's/^median step over [0-9]* steps with sampled durations: \([0-9.]*\) ms$/\1/p'
}

# The profile every prediction and Auto use: one 1F1B run.
run profile --schedule 1F1B --profile "$work/profile.json" >/dev/null
"$pw" schedule Auto -p "$p" -m "$m" --max-inflight "$cap" --profile "$work/profile.json" \
  --optimizer adamw -f json -o "$work/auto.json" 2>"$work/auto.log"
grep -o "Auto: .*" "$work/auto.log" | head -1

names=(1F1B ZB-H1 Auto)
flags_of() {
  case "$1" in
    1F1B) echo "--schedule 1F1B" ;;
    ZB-H1) echo "--schedule InterleavedZeroBubble --stages-per-rank 1" ;;
    Auto) echo "--plan $work/auto.json" ;;
  esac
}
declare -A per_round
for ((k = 0; k < rounds; k++)); do
  for name in "${names[@]}"; do
    # shellcheck disable=SC2046
    per_round[$name]+="$(run "$name" $(flags_of "$name")) "
  done
done
declare -A measured predicted
for name in "${names[@]}"; do
  measured[$name]=$(tr ' ' '\n' <<<"${per_round[$name]}" | grep . | median)
  # shellcheck disable=SC2046
  predicted[$name]=$(predict $(flags_of "$name"))
done

printf "%-8s %4s %13s %12s %15s %14s %9s  %s\n" schedule cap predicted_ms measured_ms \
  predicted_ratio measured_ratio ratio_err "measured per round"
for name in "${names[@]}"; do
  c=$p
  [[ "$name" == Auto ]] && c=$cap
  awk -v n="$name" -v c="$c" -v pr="${predicted[$name]}" -v me="${measured[$name]}" \
    -v p1="${predicted[1F1B]}" -v m1="${measured[1F1B]}" -v rr="${per_round[$name]}" 'BEGIN {
      pq = pr / p1; mq = me / m1;
      printf "%-8s %4s %13.3f %12.3f %15.3f %14.3f %8.1f%%  %s\n", n, c, pr, me, pq, mq, 100 * (mq / pq - 1), rr }'
done
