#!/usr/bin/env bash
# Auto against 1F1B and ZB-H1 on the CPU executor (issue 45): pp P (default 4), an 8-layer GPT of
# hidden HIDDEN (default 256) whose first stage holds the embedding and whose last holds the head
# and the loss (uneven stages). Hidden 256 so that compute dominates each op: at hidden 64 the
# per-op overhead made the split backward cost more than B and Auto chose 1F1B's own order
# (docs/schedules.md, "Auto: measured"). One 1F1B
# run measures the profile; `schedule Auto --profile` synthesizes a plan from it under a cap of
# CAP microbatches' activations per rank (default 2P, the Zero Bubble paper's ZB-2p; CAP=P is
# 1F1B's and ZB-H1's memory). Each schedule then runs for real (`run` under `launch --nproc P`,
# Gloo, local processes; median step after --warmup-steps from the "step N/M ... step X ms"
# lines) and is predicted from the same profile (`simulate --profile --sampled-steps 31 --recv
# posted`, as bench/schedules_pp2.sh does; the profile and the simulator share the host's cores
# between its ranks, Note [Shared cores]).
# Paired rounds: each of ROUNDS rounds (default 5) runs every schedule once, back to back (odd
# rounds in reverse order, so a trend in the machine's load does not favour one row), and a
# schedule's measured ratio in that round is its median step over 1F1B's of the same round, so a
# slow minute of the shared machine divides out; the measured ratio is the median of the rounds'
# ratios (the ratio of the rows' median steps is printed too). The control row "1F1B again" runs
# 1F1B a second time in each round: its predicted ratio is 1 by construction, so its measured
# ratio and spread are the noise floor of this machine, below which no ratio error means anything. The issue's target:
# |measured ratio / predicted ratio - 1| <= 5% for Auto; the last line says whether it holds and
# how many ranks shared each core (P / the CPUs the runs may use) and the load average.
#   bench/auto_vs_1f1b.sh [BUILD_DIR]   (default build/)
#   PP=2 HIDDEN=128 ROUNDS=5 bench/auto_vs_1f1b.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
p="${PP:-4}"
m="${MICROBATCHES:-8}"
cap="${CAP:-$((2 * p))}"
hidden="${HIDDEN:-256}"
steps="${STEPS:-16}"
warmup="${WARMUP:-4}"
rounds="${ROUNDS:-5}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$pw" --log-level warn model gpt --layers "${LAYERS:-8}" --hidden "$hidden" --heads 4 --seq 32 \
  --vocab 128 -o "$work/model.json"

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

load_before=$(cut -d' ' -f1 /proc/loadavg)
# The profile every prediction and Auto use: one 1F1B run.
run profile --schedule 1F1B --profile "$work/profile.json" >/dev/null
"$pw" schedule Auto -p "$p" -m "$m" --max-inflight "$cap" --profile "$work/profile.json" \
  --optimizer adamw -f json -o "$work/auto.json" 2>"$work/auto.log"
grep -o "Auto: .*" "$work/auto.log" | head -1

names=(1F1B ZB-H1 Auto "1F1B-again")
flags_of() {
  case "$1" in
    1F1B | 1F1B-again) echo "--schedule 1F1B" ;;
    ZB-H1) echo "--schedule InterleavedZeroBubble --stages-per-rank 1" ;;
    Auto) echo "--plan $work/auto.json" ;;
  esac
}
declare -A per_round ratios
for ((k = 0; k < rounds; k++)); do
  declare -A this_round=()
  order=("${names[@]}")
  if ((k % 2)); then order=("1F1B-again" Auto ZB-H1 1F1B); fi
  for name in "${order[@]}"; do
    # shellcheck disable=SC2046
    this_round[$name]="$(run "$name" $(flags_of "$name"))"
    per_round[$name]+="${this_round[$name]} "
  done
  for name in "${names[@]}"; do
    ratios[$name]+="$(awk -v a="${this_round[$name]}" -v b="${this_round[1F1B]}" \
      'BEGIN {printf "%.3f", a / b}') "
  done
done
load_after=$(cut -d' ' -f1 /proc/loadavg)
declare -A measured predicted mratio
for name in "${names[@]}"; do
  measured[$name]=$(tr ' ' '\n' <<<"${per_round[$name]}" | grep . | median)
  mratio[$name]=$(tr ' ' '\n' <<<"${ratios[$name]}" | grep . | median)
  # shellcheck disable=SC2046
  predicted[$name]=$(predict $(flags_of "$name"))
done

printf "%-10s %4s %13s %12s %15s %14s %13s %9s  %s\n" schedule cap predicted_ms measured_ms \
  predicted_ratio measured_ratio ratio_of_meds ratio_err "measured ratio per round"
for name in "${names[@]}"; do
  c=$p
  [[ "$name" == Auto ]] && c=$cap
  awk -v n="$name" -v c="$c" -v pr="${predicted[$name]}" -v me="${measured[$name]}" \
    -v p1="${predicted[1F1B]}" -v m1="${measured[1F1B]}" -v mq="${mratio[$name]}" \
    -v rr="${ratios[$name]}" 'BEGIN {
      pq = pr / p1;
      printf "%-10s %4s %13.3f %12.3f %15.3f %14.3f %13.3f %8.1f%%  %s\n", n, c, pr, me, pq, mq,
        me / m1, 100 * (mq / pq - 1), rr }'
done
cpus=$(env -u OMP_NUM_THREADS nproc)  # nproc would honour OMP_NUM_THREADS=1
awk -v pr="${predicted[Auto]}" -v p1="${predicted[1F1B]}" -v mq="${mratio[Auto]}" -v p="$p" \
  -v cpus="$cpus" -v l0="$load_before" -v l1="$load_after" -v r="$rounds" \
  -v cq="${mratio[1F1B-again]}" -v cr="${ratios[1F1B-again]}" 'BEGIN {
    err = 100 * (mq / (pr / p1) - 1); if (err < 0) err = -err;
    n = split(cr, c, " "); lo = c[1]; hi = c[1];
    for (i = 2; i <= n; ++i) { if (c[i] < lo) lo = c[i]; if (c[i] > hi) hi = c[i]; }
    printf "Auto/1F1B: measured %.3f (median of %d paired rounds) vs predicted %.3f: %.1f%% %s " \
      "(target <= 5%%)\n", mq, r, pr / p1, err, err <= 5 ? "MET" : "NOT MET";
    printf "noise floor: 1F1B against itself measured %.3f (rounds %.3f..%.3f, predicted 1.000); " \
      "%d ranks on %d CPUs (%.1f per CPU); load average %s -> %s\n", cq, lo, hi, p, cpus,
      p / cpus, l0, l1 }'
