#!/usr/bin/env bash
# Megatron-LM's weak-scaling table (Narayanan et al. 2021, "Efficient Large-Scale Language Model
# Training on GPU Clusters Using Megatron-LM", Table 1: GPT 1.7B .. 1T on A100-80GB, sequence
# 2048, vocabulary 51200, full activation recompute) against `pipewright simulate` on
# examples/cluster-dgx-a100-80gb.json. The achieved-GEMM fraction is fitted on the smallest row
# (bisection on --gemm-fraction) and kept for the others; prints predicted and published model
# TFLOP/s per GPU and their ratio.
# Usage: bench/megatron_weak_scaling.sh [BUILD_DIR] [ROWS]   (ROWS: how many rows, default all)
# Micro-batch sizes are not in Table 1; b = 1 is assumed (the paper's Figure 7 / 8 runs use
# b = 1..8; a larger b raises the prediction).
set -euo pipefail
BUILD=${1:-build}
ROWS=${2:-10}
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
predict() {  # name heads hidden layers t p gpus batch fraction v -> TFLOP/s per GPU
  local name=$1 a=$2 h=$3 l=$4 t=$5 p=$6 n=$7 B=$8 f=$9 v=${10}
  local d=$((n / (t * p))) b=1
  local m=$((B / (d * b)))
  local model="$TMP/gpt-$name.json"
  [[ -f $model ]] || "$PW" model gpt --layers "$l" --hidden "$h" --heads "$a" --seq 2048 \
      --vocab 51200 --micro-batch-size "$b" -o "$model" 2>/dev/null
  local sched=1F1B vflag=()
  if ((p > 1 && v > 1 && l % (p * v) == 0 && m % p == 0)); then
    sched=Interleaved1F1B
    vflag=(-v "$v")
  fi
  "$PW" simulate --model "$model" --cluster "$CLUSTER" --schedule "$sched" "${vflag[@]}" \
      --pp "$p" --dp "$d" --tp "$t" --microbatches "$m" --batch-size $((m * b)) \
      --precision bf16 --recompute full --optimizer adam --zero-stage 1 \
      --gemm-fraction "$f" --metrics - 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["model_tflops_per_gpu"])'
}
first=$(head -1 <<<"$TABLE")
read -r name a h l t p n B pub v <<<"$first"
lo=0.05 hi=1.0
for _ in $(seq 1 20); do
  mid=$(python3 -c "print(($lo + $hi) / 2)")
  got=$(predict "$name" "$a" "$h" "$l" "$t" "$p" "$n" "$B" "$mid" "$v")
  if python3 -c "import sys; sys.exit(0 if $got < $pub else 1)"; then lo=$mid; else hi=$mid; fi
done
f=$(python3 -c "print(round(($lo + $hi) / 2, 4))")
echo "achieved-GEMM fraction fitted on $name: $f"
printf "%-6s %3s %3s %5s %6s %10s %10s %7s\n" model t p GPUs batch predicted published ratio
head -n "$ROWS" <<<"$TABLE" | while read -r name a h l t p n B pub v; do
  got=$(predict "$name" "$a" "$h" "$l" "$t" "$p" "$n" "$B" "$f" "$v")
  printf "%-6s %3s %3s %5s %6s %10.1f %10s %7.3f\n" "$name" "$t" "$p" "$n" "$B" "$got" "$pub" \
    "$(python3 -c "print($got / $pub)")"
done
