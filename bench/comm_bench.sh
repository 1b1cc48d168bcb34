#!/usr/bin/env bash
# Side-by-side all-reduce bus bandwidth at 16 MB with 2 ranks (issue 6 target: ratio >= 0.90):
#   pipewright MPI backend  vs a plain MPI_Allreduce   (mpirun -np 2)
#   pipewright Gloo backend vs a plain c10d ProcessGroupGloo allreduce (pipewright launch)
# Usage: bench/comm_bench.sh [BUILD_DIR] [ITERATIONS]   (default build/, 30 iterations)
set -euo pipefail
build=${1:-build}
iters=${2:-30}
bench=$build/bin/pw_comm_bench
pw=$build/bin/pipewright
[[ -x $bench && -x $pw ]] || { echo "build $bench and $pw first"; exit 2; }
if mpirun --version >/dev/null 2>&1; then
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bench" --transport mpi \
    --iterations "$iters" 2>&1 | grep -v '^\s*$'
fi
"$pw" launch --nproc 2 -- "$bench" --transport gloo --iterations "$iters" 2>&1 |
  sed -n 's/^\[rank 0\] //p'
