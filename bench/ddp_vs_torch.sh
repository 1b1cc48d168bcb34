#!/usr/bin/env bash
# DDP step time of pipewright vs PyTorch's DistributedDataParallel, both in one run (issue 7).
#
#   [REPEATS=3] [DPS="2 4"] bench/ddp_vs_torch.sh [PIPEWRIGHT_BIN] [STEPS]
#       (default build-pip/bin/pipewright, 30)
#
# Both sides on the same libtorch (issue 35): pipewright's pip-torch build (CMake preset
# pip-torch) against DistributedDataParallel of the pinned torch 2.x in .venv-torch (installed
# by tools/install-deps --torch pip when missing; PYTHON=... picks another interpreter, e.g.
# /usr/bin/python3 with build/bin/pipewright for Debian's torch 1.13 on both sides). The torch
# version and the 1-minute load average before each dp are printed.
#
# Model: 4-layer MLP 1024-1024-1024-1024-1024 (Linear + ReLU), MSE, SGD lr 0.01, batch 64 per
# replica, Gloo on 127.0.0.1, one thread per process, dp = 2 and 4. Step times are medians over
# the steps after the first 5 of REPEATS alternating runs per side. Prints, per dp: both medians and the ratio (target <= 0.6 against torch 2.x, issue 35),
# pipewright's default (DDP buckets all-reduced through shared memory among the replicas of this
# host, Note [Shared-memory all-reduce]) and with --no-shm-collectives (every byte through
# Gloo's TCP pairs, as PyTorch's DDP does), with its own ratio; the
# fraction of all-reduce time hidden behind backward, 1 - wait(overlap) / wait(no overlap), from
# pipewright's own counters (a run with --no-ddp-overlap gives the unhidden wait); and the bytes
# per step of DDP vs SlowMo with --localsgd-frequency 3 (48 steps, target <= 1/3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build-pip/bin/pipewright}"
steps="${2:-30}"
repeats="${REPEATS:-3}"
dps="${DPS:-2 4}"
py="${PYTHON:-$root/.venv-torch/bin/python}"
if [ -z "${PYTHON:-}" ] && ! "$py" -c "import torch, numpy" 2>/dev/null; then
  "$root/tools/install-deps" --torch pip
fi
work="$(mktemp -d /tmp/pw_ddp_bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

"$bin" model mlp --sizes 1024,1024,1024,1024,1024 --activation relu -o "$work/mlp.json" >/dev/null
"$py" - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", rng.standard_normal((1024, 1024), dtype=np.float32))
np.save(sys.argv[1] + "/y.npy", rng.standard_normal((1024, 1024), dtype=np.float32))
PY

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# pipewright run on DP local ranks; extra flags after the first two arguments.
pw_run() {
  local dp="$1" nsteps="$2"
  shift 2
  "$bin" launch --nproc "$dp" -- "$bin" run --model "$work/mlp.json" --pp 1 --dp "$dp" \
    --batch-size 64 --microbatches 1 --steps "$nsteps" --loss mse --optimizer sgd --lr 0.01 \
    --data-x "$work/x.npy" --data-y "$work/y.npy" --no-shuffle --backend gloo "$@" 2>&1
}
field() { grep -E '^\[rank 0\].*data-parallel' | sed -E "s/.* ([0-9.e+]+) $1.*/\\1/"; }

echo "torch $("$py" -c 'import torch; print(torch.__version__)'), $("$bin" --version | head -1), $(getconf _NPROCESSORS_ONLN) cores"
printf '%-4s %14s %14s %8s %10s %14s %10s %6s\n' dp pipewright_ms torch_ms ratio hidden \
  pw_gloo_tcp_ms ratio_tcp load
for dp in $dps; do
  load="$(cut -d' ' -f1 /proc/loadavg)"
  # REPEATS alternating runs of each side (default 3), so that a change in the shared host's load
  # hits both; the medians are over the pooled steps of all runs.
  pw_steps="" torch_steps="" tcp_steps=""
  for _ in $(seq "$repeats"); do
    pw_log="$(pw_run "$dp" "$steps")"
    pw_steps+="$(grep -E '^\[rank 0\].*step [0-9]+/[0-9]+ ' <<<"$pw_log" |
      sed -E 's/.* step ([0-9.]+) ms.*/\1/' | tail -n +6)"$'\n'
    tcp_log="$(pw_run "$dp" "$steps" --no-shm-collectives)"
    tcp_steps+="$(grep -E '^\[rank 0\].*step [0-9]+/[0-9]+ ' <<<"$tcp_log" |
      sed -E 's/.* step ([0-9.]+) ms.*/\1/' | tail -n +6)"$'\n'
    torch_steps+="$("$py" "$root/bench/ddp_torch_reference.py" "$dp" "$steps" 64 \
      "$work/x.npy" "$work/y.npy" 2>/dev/null | awk '{print $4}' | tail -n +6)"$'\n'
  done
  pw_ms="$(grep -v '^$' <<<"$pw_steps" | median)"
  torch_ms="$(grep -v '^$' <<<"$torch_steps" | median)"
  tcp_ms="$(grep -v '^$' <<<"$tcp_steps" | median)"
  wait_ovl="$(grep -E '^\[rank 0\].*data-parallel' <<<"$pw_log" | sed -E 's/.*comm wait ([0-9.]+) ms\/step.*/\1/')"
  nov_log="$(pw_run "$dp" "$steps" --no-ddp-overlap)"
  wait_nov="$(grep -E '^\[rank 0\].*data-parallel' <<<"$nov_log" | sed -E 's/.*comm wait ([0-9.]+) ms\/step.*/\1/')"
  awk -v dp="$dp" -v a="$pw_ms" -v b="$torch_ms" -v wo="$wait_ovl" -v wn="$wait_nov" \
    -v c="$tcp_ms" -v l="$load" 'BEGIN { h = (wn > 0) ? 1 - wo / wn : 0;
             printf "%-4s %14.2f %14.2f %8.3f %9.1f%% %14.2f %10.3f %6s\n", dp, a, b, a / b,
                    100 * h, c, c / b, l }'
done

# Communication volume: DDP vs SlowMo (LocalSGD every 3 steps, slow step every 48), 48 steps.
ddp_log="$(pw_run 2 48)"
slow_log="$(pw_run 2 48 --dp-algorithm slowmo --localsgd-frequency 3)"
# The log line: "data-parallel (ddp): 16.0 MiB/step on the wire (16793600 B/step), ...".
ddp_b="$(grep -E '^\[rank 0\].*data-parallel' <<<"$ddp_log" | sed -E 's/.*on the wire \(([0-9]+) B\/step\).*/\1/')"
slow_b="$(grep -E '^\[rank 0\].*data-parallel' <<<"$slow_log" | sed -E 's/.*on the wire \(([0-9]+) B\/step\).*/\1/')"
awk -v a="$ddp_b" -v b="$slow_b" 'BEGIN {
  printf "bytes/step (wire, dp=2, 48 steps): ddp %.0f slowmo %.0f ratio %.3f (target <= 0.333)\n", a, b, b / a }'
