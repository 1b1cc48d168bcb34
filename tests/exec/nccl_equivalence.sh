#!/usr/bin/env bash
# GPU variant (label gpu) of the executor's equivalence suite: run_equivalence.sh, the runner of
# the CPU suites, with --backend nccl (one GPU per rank). It trains pp = 2 and pp = 4, so it
# needs 4 CUDA devices; with fewer it prints why and exits 77, which ctest reports as skipped.
#   nccl_equivalence.sh PIPEWRIGHT COMPARE DATA_DIR WORK_DIR nccl mlp|transformer
set -euo pipefail
need=4
found=0
if command -v nvidia-smi >/dev/null; then
  found=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
if [ "$found" -lt "$need" ]; then
  echo "no CUDA device: skipped (needs $need CUDA devices, found $found)"
  exit 77
fi
exec "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/run_equivalence.sh" "$@"
