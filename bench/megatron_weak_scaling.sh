#!/usr/bin/env bash
# Megatron-LM's weak-scaling table (Narayanan et al. 2021, "Efficient Large-Scale Language Model
# Training on GPU Clusters Using Megatron-LM", Table 1: GPT 1.7B .. 1T on A100-80GB, sequence
# 2048, vocabulary 51200, full activation recompute) against `pipewright simulate` on
# examples/cluster-dgx-a100-80gb.json.
#
# The published TFLOP/s count the recompute: the paper's FLOPs are 96 B s l h^2 (1 + s/6h +
# V/16lh), the hardware FLOPs of a step with full recompute (Korthikanti et al. 2022 call the
# ratio of those to peak HFU), so they are compared with simulate's hardware_tflops_per_gpu (model
# FLOPs, 72 B s l h^2 (1 + s/6h + V/12lh), plus the re-run forward of every layer), not with
# model_tflops_per_gpu (MFU's numerator), which is 3/4 of it for a GPT with full recompute.
#
# The achieved-GEMM fraction is fitted on the smallest row (bisection on --gemm-fraction) and kept
# for the others; prints predicted and published TFLOP/s per GPU and their ratio. Asserts (exit
# 1): the fitted fraction lies strictly inside (0, 1) (not at a bound of the bisection), every
# row is within 15%, and, on the SEARCH_ROWS rows, `search` on the same model, GPU count and
# global batch proposes a configuration that fits 80 GB and is predicted at least as fast (model
# TFLOP/s per GPU) as the published configuration.
# Usage: bench/megatron_weak_scaling.sh [BUILD_DIR] [ROWS]   (ROWS: how many rows, default all)
# Micro-batch sizes are not in Table 1; b = 1 is assumed (the paper's Figure 7 / 8 runs use
# b = 1..8; a larger b raises the prediction).
set -euo pipefail
BUILD=${1:-build}
ROWS=${2:-10}
SEARCH_ROWS=${SEARCH_ROWS:-"1.7B 18B"}
PW="$BUILD/bin/pipewright"
HERE=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER="$HERE/examples/cluster-dgx-a100-80gb.json"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# name heads hidden layers t p gpus batch published_tflops interleaving(v)
TABLE="1.7B 24 2304 24 1 1 32 512 137 1
3.6B 32 3072 30 2 1 64 512 138 1
7.5B 32 4096 36 4 1 128 512 142 1
18B 48 6144 40 8 1 256 1024 135 1
39B 64 8192 48 8 2 512 1536 138 2
76B 80 10240 60 8 4 1024 1792 140 2
145B 96 12288 80 8 8 1536 2304 148 2
310B 128 16384 96 8 16 1920 2160 155 2
530B 128 20480 105 8 35 2520 2520 163 3
1T 160 25600 128 8 64 3072 3072 163 2"
model_file() {  # name heads hidden layers -> path
  local model="$TMP/gpt-$1.json"
  [[ -f $model ]] || "$PW" model gpt --layers "$4" --hidden "$3" --heads "$2" --seq 2048 \
      --vocab 51200 --micro-batch-size 1 -o "$model" 2>/dev/null
  echo "$model"
}
predict() {  # name heads hidden layers t p gpus batch fraction v key -> the metric `key`
  local name=$1 a=$2 h=$3 l=$4 t=$5 p=$6 n=$7 B=$8 f=$9 v=${10} key=${11}
  local d=$((n / (t * p))) b=1
  local m=$((B / (d * b)))
  local model
  model=$(model_file "$name" "$a" "$h" "$l")
  local sched=1F1B vflag=()
  if ((p > 1 && v > 1 && l % (p * v) == 0 && m % p == 0)); then
    sched=Interleaved1F1B
    vflag=(-v "$v")
  fi
  "$PW" simulate --model "$model" --cluster "$CLUSTER" --schedule "$sched" "${vflag[@]}" \
      --pp "$p" --dp "$d" --tp "$t" --microbatches "$m" --batch-size $((m * b)) \
      --precision bf16 --recompute full --optimizer adam --zero-stage 1 \
      --gemm-fraction "$f" --metrics - 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin)['$key'])"
}
fail() { echo "FAIL: $*" >&2; exit 1; }
first=$(head -1 <<<"$TABLE")
read -r name a h l t p n B pub v <<<"$first"
lo=0.05 hi=1.0
for _ in $(seq 1 20); do
  mid=$(python3 -c "print(($lo + $hi) / 2)")
  got=$(predict "$name" "$a" "$h" "$l" "$t" "$p" "$n" "$B" "$mid" "$v" hardware_tflops_per_gpu)
  if python3 -c "import sys; sys.exit(0 if $got < $pub else 1)"; then lo=$mid; else hi=$mid; fi
done
f=$(python3 -c "print(round(($lo + $hi) / 2, 4))")
echo "achieved-GEMM fraction fitted on $name: $f"
python3 -c "import sys; sys.exit(0 if 0.06 < $f < 0.99 else 1)" ||
  fail "the fitted fraction $f is at a bound of (0.05, 1.0): nothing was fitted"
printf "%-6s %3s %3s %5s %6s %10s %10s %7s %12s\n" model t p GPUs batch predicted published \
  ratio "model TFLOP/s"
worst=0
while read -r name a h l t p n B pub v; do
  got=$(predict "$name" "$a" "$h" "$l" "$t" "$p" "$n" "$B" "$f" "$v" hardware_tflops_per_gpu)
  mod=$(predict "$name" "$a" "$h" "$l" "$t" "$p" "$n" "$B" "$f" "$v" model_tflops_per_gpu)
  ratio=$(python3 -c "print($got / $pub)")
  printf "%-6s %3s %3s %5s %6s %10.1f %10s %7.3f %12.1f\n" "$name" "$t" "$p" "$n" "$B" "$got" \
    "$pub" "$ratio" "$mod"
  python3 -c "import sys; sys.exit(0 if abs($ratio - 1) <= 0.15 else 1)" ||
    fail "$name: predicted $got TFLOP/s is not within 15% of the published $pub"
  echo "$name $mod" >>"$TMP/model-tflops"
done < <(head -n "$ROWS" <<<"$TABLE")
# Search on the same model, GPU count and global batch as a published row.
for row in $SEARCH_ROWS; do
  line=$(grep "^$row " <<<"$TABLE") || fail "no row $row"
  read -r name a h l t p n B pub v <<<"$line"
  model=$(model_file "$name" "$a" "$h" "$l")
  published=$(grep "^$name " "$TMP/model-tflops" | cut -d' ' -f2) ||
    published=$(predict "$name" "$a" "$h" "$l" "$t" "$p" "$n" "$B" "$f" "$v" model_tflops_per_gpu)
  start=$(date +%s.%N)
  "$PW" search --model "$model" --cluster "$CLUSTER" -n "$n" --global-batch "$B" \
      --tp 1,2,4,8 --micro-batch-sizes 1,2,4 --schedules 1F1B,Interleaved1F1B -v 2 \
      --precision bf16 --optimizer adam --memory-limit 80GB --gemm-fraction "$f" --top 1 \
      --no-progress --format json -o "$TMP/search-$name.json" 2>/dev/null
  secs=$(python3 -c "import time; print(round(time.time() - $start, 1))")
  python3 - "$TMP/search-$name.json" "$published" "$name" "$secs" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
published, name, secs = float(sys.argv[2]), sys.argv[3], sys.argv[4]
best = result["ranked"][0]
fits = best["peak_memory_bytes"] <= 80e9
print(f"search {name}: {best['description']}: {best['model_tflops_per_gpu']:.1f} model TFLOP/s "
      f"per GPU (published configuration: {published:.1f}), peak "
      f"{best['peak_memory_bytes'] / 2**30:.1f} GiB, {result['enumerated']} candidates in {secs} s")
if not fits or best["model_tflops_per_gpu"] < published:
    sys.exit(f"FAIL: search {name} proposes nothing that fits 80 GB and is as fast as published")
PY
done
