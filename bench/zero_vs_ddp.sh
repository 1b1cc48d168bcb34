#!/usr/bin/env bash
# ZeRO-1 vs DDP step time on CPU Gloo (issue 43, target: ZeRO-1 step <= 1.10 x DDP step), at
# dp 2 and dp 4 (pp 1), same model (a wide MLP whose parameters dominate its activations),
# schedule and AdamW, measured side by side: DDP and ZeRO-1 runs alternate ROUNDS times and each
# run's median step (steps after the first 3) is taken; the ratio is median(ZeRO-1) /
# median(DDP) over the rounds. Also ZeRO-2, and per run the measured peak RSS per rank
# (VmHWM, `--metrics` peak_memory_bytes, max over ranks) next to what `pipewright simulate`
# predicts for the same job flags (its "peak memory" line; the plan side's memory model of the
# zero stages, branch i43-plan, when merged; before that simulate ignores --zero-stage for
# memory and says so by printing the same number for every stage).
#
#   bench/zero_vs_ddp.sh [PIPEWRIGHT_BIN] [STEPS] [ROUNDS]      (defaults: build/bin/pipewright 12 3)
#   SIZES=256,4096,4096,4096,256 DPS=4 bench/zero_vs_ddp.sh ...  (another MLP; only dp 4)
#   RUN_FLAGS=--no-shm-collectives bench/zero_vs_ddp.sh ...      (extra flags for every run: here
#       every collective over Gloo's TCP, as between hosts: DDP's all-reduce is c10d's, ZeRO's
#       reduce-scatter and all-gather the TCP ring, Note [TCP ring collectives])
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin/pipewright}"
steps="${2:-12}"
rounds="${3:-3}"
work="$(mktemp -d /tmp/pw_zero_bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

"$bin" model mlp --sizes "${SIZES:-256,1024,1024,256}" --activation relu -o "$work/mlp.json" >/dev/null
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", rng.standard_normal((512, 256), dtype=np.float32))
np.save(sys.argv[1] + "/y.npy", rng.standard_normal((512, 256), dtype=np.float32))
PY
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# one DP ZERO: prints "median_step_ms max_peak_rss_bytes"
one() {
  local dp="$1" z="$2"
  local job=(--model "$work/mlp.json" --pp 1 --dp "$dp" --batch-size 16 --microbatches 2
             --steps "$steps" --optimizer adamw --lr 0.001 --zero-stage "$z")
  timeout 600 "$bin" launch --nproc "$dp" -- "$bin" run "${job[@]}" --loss mse \
    --data-x "$work/x.npy" --data-y "$work/y.npy" --no-shuffle --backend gloo --timeout 300 \
    --metrics "$work/m.jsonl" ${RUN_FLAGS:-} >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
  local ms rss
  ms="$(tail -n +4 "$work/m.jsonl" | sed -E 's/.*"step_ms": ([0-9.e+-]+).*/\1/' | median)"
  rss="$(tail -n 1 "$work/m.jsonl" | sed -E 's/.*"peak_memory_bytes": \[([0-9, ]*)\].*/\1/' |
         tr ',' '\n' | sort -g | tail -n 1)"
  echo "$ms $rss"
}
sim_peak() {  # simulate's peak memory of rank 0 (bytes) for dp, zero
  "$bin" simulate --model "$work/mlp.json" --pp 1 --dp "$1" --batch-size 16 --microbatches 2 \
    --optimizer adamw --zero-stage "$2" --cluster "$root/examples/cluster-cpu-localhost.json" 2>&1 |
    grep -oE 'rank 0: .*peak memory [0-9.]+ [KMG]?i?B' | grep -oE '[0-9.]+ [KMG]?i?B$' |
    awk '{u = $2; m = (u == "KiB") ? 1024 : (u == "MiB") ? 1048576 : (u == "GiB") ? 1073741824 : 1;
          printf "%.0f\n", $1 * m}' | head -n 1 | grep . || echo nan
}

printf '%-4s %-10s %12s %12s %8s %14s %14s\n' dp stage med_ms ddp_med_ms ratio meas_vmhwm sim_peak
for dp in ${DPS:-2 4}; do
  ddp_ms=(); z1_ms=(); z2_ms=(); ddp_rss=0; z1_rss=0; z2_rss=0
  for ((i = 0; i < rounds; i++)); do
    read -r a ar < <(one "$dp" 0); ddp_ms+=("$a"); ddp_rss="$ar"
    read -r b br < <(one "$dp" 1); z1_ms+=("$b"); z1_rss="$br"
    read -r c cr < <(one "$dp" 2); z2_ms+=("$c"); z2_rss="$cr"
  done
  d="$(printf '%s\n' "${ddp_ms[@]}" | median)"
  for row in "ddp(z0) 0 ${ddp_rss}" "zero-1 1 ${z1_rss}" "zero-2 2 ${z2_rss}"; do
    read -r name z rss <<<"$row"
    case "$z" in 0) m="$d";; 1) m="$(printf '%s\n' "${z1_ms[@]}" | median)";;
                 2) m="$(printf '%s\n' "${z2_ms[@]}" | median)";; esac
    awk -v dp="$dp" -v n="$name" -v m="$m" -v d="$d" -v r="$rss" -v s="$(sim_peak "$dp" "$z")" \
      'BEGIN { printf "%-4s %-10s %12.2f %12.2f %8.3f %14s %14s\n", dp, n, m, d, m / d, r, s }'
  done
done
