#!/usr/bin/env bash
# pipewright's executor against torch.distributed.pipelining on the same module, partition,
# weights, data, schedule and libtorch (issue 35).
#
#   bench/executor_vs_torch.sh [--quick] [--pipewright BIN] [--rounds N] [--steps N]
#       [--warmup-steps K] [--schedules "GPipe 1F1B ..."] [--sizes "small large"] [--keep DIR]
#       [--pw-args "ARGS"]
#
# The module is bench/executor_vs_torch_model.py (8 pre-LN blocks, 4 heads, vocabulary 512):
# `large` (d_model 256, sequence 128: compute-bound) and `small` (d_model 64, sequence 32: ~16x
# less compute, per-action overhead and messages dominate). pipewright-export (the pinned torch
# 2.x of .venv-torch, installed by tools/install-deps --torch pip when missing) exports it once;
# `pipewright partition` cuts it into pp x v stages, and both sides run that partition from the
# exported init weights on the same rows: 2 processes, Gloo on 127.0.0.1, one thread each, batch
# 32 in 8 microbatches, SGD lr 0.05, cross-entropy. pipewright is the pip-torch build (CMake
# preset pip-torch: build-pip/bin/pipewright), so both sides use the same libtorch and kernels;
# the torch side is bench/executor_vs_torch.py (PipelineStage and the schedule classes, with
# their defaults).
#
# Each round runs every schedule on pipewright, then on torch (alternating, so that a change of
# this shared host's load hits both); a round's step time is the median of the steps after
# --warmup-steps. Printed per round: both step times, ratio pipewright / torch, the 1-minute
# load average before each run, and each side's bubble bound: `pipewright simulate` of the plan
# from that run's own per-action medians (pipewright: its --profile; torch: the F/B/I/W/optimizer
# medians its stages measured, put into the same profile) with free communication (no message
# time, no batch overhead), efficiency = bound / measured step; and `pipewright compare`'s error
# on the pipewright run (its prediction from its own profile, default receive model, against the
# measured median step). The summary gives the median over rounds of each column, and as the
# ratio the median of the rounds' own ratios (each round's two sides ran back to back, so the
# paired ratio survives a host whose speed drifts between rounds). Default: 4 rounds, 25 steps
# (warm-up 5), both sizes, GPipe 1F1B Interleaved1F1B ZBVZeroBubble DualPipeV. --quick: 1 round,
# 8 steps (warm-up 3), the small size. --pw-args: more flags for every `pipewright run` (an
# ablation: "--no-shm-p2p" sends the pipeline's messages through Gloo's TCP, as before Note
# [Shared-memory point-to-point]).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pw="$root/build-pip/bin/pipewright"
rounds=4 steps=25 warmup=5 sizes="small large" keep="" pw_args=""
schedules="GPipe 1F1B Interleaved1F1B ZBVZeroBubble DualPipeV"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) rounds=1 steps=8 warmup=3 sizes=small ;;
    --pipewright) pw="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --warmup-steps) warmup="$2"; shift ;;
    --schedules) schedules="$2"; shift ;;
    --sizes) sizes="$2"; shift ;;
    --keep) keep="$2"; shift ;;
    --pw-args) pw_args="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "executor_vs_torch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$pw" ] || { echo "executor_vs_torch.sh: $pw: no such program (cmake --preset pip-torch && cmake --build --preset pip-torch)" >&2; exit 2; }
py="$root/.venv-torch/bin/python"
if ! "$py" -c "import torch, safetensors, numpy" 2>/dev/null; then
  "$root/tools/install-deps" --torch pip
fi
if [ -n "$keep" ]; then work="$keep"; mkdir -p "$work"; else
  work="$(mktemp -d /tmp/pw_exec_vs_torch.XXXXXX)"; trap 'rm -rf "$work"' EXIT
fi
export OMP_NUM_THREADS=1
m=8 batch=32 lr=0.05
load() { cut -d' ' -f1 /proc/loadavg; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
v_of() { case "$1" in Interleaved1F1B|ZBVZeroBubble|DualPipeV) echo 2 ;; *) echo 1 ;; esac; }
echo "torch $("$py" -c 'import torch; print(torch.__version__)'), $("$pw" --version | head -1) ($pw${pw_args:+ run $pw_args}), $(getconf _NPROCESSORS_ONLN) cores, load $(load)"

# Bubble bound: the plan simulated from a profile with free communication (no p2p time, no batch
# overhead); with torch's medians (TIMES) in place of the profile's stage times when given.
bound() {
  local sched="$1" prof="$2" times="${3:-}" v
  v="$(v_of "$sched")"
  "$py" "$root/bench/executor_vs_torch_profile.py" "$prof" "$work/free.json" $times
  "$pw" --log-level warn simulate --schedule "$sched" --pp 2 --stages-per-rank "$v" \
    --microbatches "$m" --optimizer sgd --profile "$work/free.json" --p2p-ms 0 |
    sed -n 's/^makespan \([0-9.]*\) ms.*/\1/p' | head -1
}

results="$work/results.tsv"
: >"$results"
for size in $sizes; do
  d="$work/$size"
  mkdir -p "$d"
  seq_len="$("$py" -c "import sys; sys.path.insert(0, '$root/bench'); import executor_vs_torch_model as e; print(e.SIZES['$size'][1])")"
  if [ ! -f "$d/model/model.json" ]; then
    "$py" "$root/tools/pipewright-export" --module "$root/bench/executor_vs_torch_model.py:gpt_$size" \
      --input-shape "$seq_len" --input-dtype int64 -b $((batch / m)) -o "$d/model" >"$d/export.log" 2>&1 ||
      { cat "$d/export.log"; exit 1; }
    "$py" - "$d" "$seq_len" "$batch" <<'PY'
import sys, numpy as np
d, seq, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = np.random.default_rng(0).integers(0, 512, (rows, seq + 1))
np.save(d + "/x.npy", t[:, :seq].astype(np.int64))
np.save(d + "/y.npy", t[:, 1:].astype(np.int64))
PY
    for v in 1 2; do
      "$pw" --log-level warn partition "$d/model/model.json" -s $((2 * v)) -o "$d/part$v.json"
    done
  fi
  for r in $(seq "$rounds"); do
    for sched in $schedules; do
      v="$(v_of "$sched")"
      pre="$d/$sched.r$r"
      load_pw="$(load)"
      "$pw" launch --nproc 2 -- "$pw" run --model "$d/model/model.json" --partition "$d/part$v.json" \
        --init "$d/model/init.safetensors" --schedule "$sched" --pp 2 --stages-per-rank "$v" \
        --microbatches "$m" --batch-size "$batch" --steps "$steps" --loss cross-entropy \
        --optimizer sgd --lr "$lr" --data-x "$d/x.npy" --data-y "$d/y.npy" --no-shuffle \
        --timeout 600 --profile "$pre.profile.json" --warmup-steps "$warmup" \
        --trace "$pre.trace.json" $pw_args >"$pre.pw.log" 2>&1 || { cat "$pre.pw.log"; exit 1; }
      # The simulator's prediction of this run from its own profile (default receive model).
      "$pw" --log-level warn schedule "$sched" -p 2 -m "$m" -v "$v" -o "$pre.plan.csv"
      "$pw" --log-level warn compare --optimizer sgd --plan "$pre.plan.csv" \
        --measured "$pre.trace.json" --profile "$pre.profile.json" --warmup-steps "$warmup" \
        --metrics "$pre.compare.json" >/dev/null
      cmp_err="$("$py" -c 'import json, sys; c = json.load(open(sys.argv[1])); print(100 * (c["predicted_step_ms"] - c["measured_step_ms"]) / c["measured_step_ms"])' "$pre.compare.json")"
      load_torch="$(load)"
      "$py" "$root/bench/executor_vs_torch.py" --module "$root/bench/executor_vs_torch_model.py:gpt_$size" \
        --init "$d/model/init.safetensors" --partition "$d/part$v.json" --schedule "$sched" --pp 2 \
        --microbatches "$m" --batch-size "$batch" --data-x "$d/x.npy" --data-y "$d/y.npy" \
        --steps "$steps" --warmup-steps "$warmup" --lr "$lr" --times-out "$pre.torch_times.json" \
        >"$pre.torch.log" 2>&1 || {
        # torch 2.15's Gloo sometimes aborts a process at exit ("terminate called without an
        # active exception") after the last step; the run counts if every step and the stage
        # times are there.
        if [ "$(grep -c '^torch step ' "$pre.torch.log")" -eq "$steps" ] &&
           [ -s "$pre.torch_times.json" ]; then
          echo "note: the torch side of $size $sched round $r failed after its last step: $(grep -m1 -E 'terminate|Error' "$pre.torch.log")" >&2
        else
          cat "$pre.torch.log"; exit 1
        fi
      }
      pw_ms="$(grep -oE 'step [0-9]+/[0-9]+ loss [^ ]+ step [0-9.]+ ms' "$pre.pw.log" |
        awk -v w="$warmup" '{split($2, s, "/"); if (s[1] > w) print $6}' | median)"
      torch_ms="$(awk -v w="$warmup" '$1 == "torch" && $3 > w {print $7}' "$pre.torch.log" | median)"
      pw_loss="$(grep -oE 'step 1/[0-9]+ loss [^ ]+' "$pre.pw.log" | awk '{print $4}')"
      torch_loss="$(awk '$1 == "torch" && $3 == 1 {print $5}' "$pre.torch.log")"
      pw_bound="$(bound "$sched" "$pre.profile.json")"
      torch_bound="$(bound "$sched" "$pre.profile.json" "$pre.torch_times.json")"
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$sched" "$r" "$pw_ms" \
        "$torch_ms" "$pw_bound" "$torch_bound" "$load_pw" "$load_torch" "$pw_loss" \
        "$torch_loss" "$cmp_err" >>"$results"
      awk -F'\t' 'END {printf "round %s %-5s %-16s pipewright %9.2f ms torch %9.2f ms ratio %.3f | bound %.2f / %.2f ms | compare %+.1f%% | load %s / %s | step-1 loss %s / %s\n", $3, $1, $2, $4, $5, $4 / $5, $6, $7, $12, $8, $9, $10, $11}' "$results"
    done
  done
done

echo
echo "medians over $rounds round(s) of the steps after $warmup of $steps; efficiency = bubble bound / step"
printf '%-5s %-16s %12s %12s %7s %9s %9s %9s %6s  %s\n' size schedule pipewright_ms torch_ms ratio pw_eff torch_eff compare load "each round's ratio"
for size in $sizes; do
  for sched in $schedules; do
    awk -F'\t' -v s="$size" -v k="$sched" '$1 == s && $2 == k' "$results" >"$work/sel.tsv"
    col() { cut -f"$1" "$work/sel.tsv" | median; }
    pw_ms="$(col 4)" torch_ms="$(col 5)" pb="$(col 6)" tb="$(col 7)" ce="$(col 12)"
    l="$(cut -f8,9 "$work/sel.tsv" | tr '\t' '\n' | median)"
    ratio="$(awk -F'\t' '{print $4 / $5}' "$work/sel.tsv" | median)"
    each="$(awk -F'\t' '{printf "%s%.2f", (NR > 1 ? " / " : ""), $4 / $5}' "$work/sel.tsv")"
    awk -v s="$size" -v k="$sched" -v a="$pw_ms" -v b="$torch_ms" -v pb="$pb" -v tb="$tb" -v l="$l" \
      -v ce="$ce" -v r="$ratio" -v e="$each" 'BEGIN {printf "%-5s %-16s %12.2f %12.2f %7.3f %8.1f%% %8.1f%% %+8.1f%% %6.2f  %s\n", s, k, a, b, r, 100 * pb / a, 100 * tb / b, ce, l, e}'
  done
done
