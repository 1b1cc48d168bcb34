#!/usr/bin/env bash
# B vs I + W of the executor's stages (issue 22 item 6, Note [Split backward]): a GPT-2-small-like
# model (hidden 768, 12 heads; 4 layers, sequence 128 and vocabulary 8192 so that it runs in
# about a minute on one core) cut into 2 stages, medians over the repeats, one process,
# OMP_NUM_THREADS=1. Columns: docs/executor.md, "The backward split".
#   bench/backward_split.sh [BUILD_DIR] [REPEATS]   (default build/, 11)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
repeats="${2:-11}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$build/bin/pipewright" --log-level warn model gpt --layers 4 --hidden 768 --heads 12 --seq 128 \
  --vocab 8192 -o "$work/gpt.json"
"$build/bin/pw_backward_split_bench" "$work/gpt.json" --stages 2 --micro-batch 2 \
  --repeats "$repeats"
# A bring-your-own (torchscript) model, when /usr/bin/python3 has torch: examples/byo/gpt2.py.
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  PYTHONDONTWRITEBYTECODE=1 "$build/bin/pipewright-export" --module "$root/examples/byo/gpt2.py:tiny_gpt2" \
    --input-shape 16 --input-dtype int64 --micro-batch-size 8 -o "$work/byo" >/dev/null
  "$build/bin/pw_backward_split_bench" "$work/byo/model.json" --stages 2 --micro-batch 8 \
    --repeats "$((repeats * 5))"
fi
