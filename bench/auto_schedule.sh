#!/usr/bin/env bash
# How long `pipewright schedule Auto` takes (issue 45 target: p = 32, m = 256 in under 10 s), and
# the bubble rates it reaches with T_F = T_I = T_W and free p2p at caps of P and 2P microbatches
# (the Zero Bubble paper's rate: its span definition, printed by Auto beside the idle share).
# Median wall time of RUNS runs per shape; exit 1 when a median is over LIMIT_S (default 10).
#   bench/auto_schedule.sh [BUILD_DIR]   (default build/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
runs="${RUNS:-5}"
limit="${LIMIT_S:-10}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

status=0
printf "%3s %4s %4s %9s %12s %10s  %s\n" p m cap median_s bubble_rate idle_share chosen
for shape in 8:64 16:128 32:256; do
  p="${shape%:*}"; m="${shape#*:}"
  for cap in "$p" $((2 * p)); do
    times=()
    for ((k = 0; k < runs; k++)); do
      start=$(date +%s.%N)
      "$pw" schedule Auto -p "$p" -m "$m" --max-inflight "$cap" --forward-ms 1 --backward-ms 2 \
        --weight-ms 1 --p2p-ms 0 -f json -o "$work/auto.json" 2>"$work/log"
      end=$(date +%s.%N)
      times+=("$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')")
    done
    med=$(printf "%s\n" "${times[@]}" | median)
    line=$(grep -o "Auto: .*" "$work/log")
    chosen=$(sed -n 's/.*chose \(.*\): simulated step.*/\1/p' <<<"$line")
    bubble=$(sed -n 's/.*bubble rate \([0-9.]*%\).*/\1/p' <<<"$line")
    idle=$(sed -n 's/.*idle share \([0-9.]*%\).*/\1/p' <<<"$line")
    printf "%3s %4s %4s %9.3f %12s %10s  %s\n" "$p" "$m" "$cap" "$med" "$bubble" "$idle" "$chosen"
    if awk -v t="$med" -v l="$limit" 'BEGIN {exit !(t > l)}'; then status=1; fi
  done
done
exit "$status"
