#!/usr/bin/env bash
# Multi-process equivalence test of `pipewright run` (label mp): for every schedule and pp in
# {2, 4}, training `model` for 5 steps on pp local processes must give final weights within 1e-5
# of the same training on one process (pp = 1). Ranks bind 127.0.0.1 only; every run has a
# deadline (--timeout and `timeout`).
#   run_equivalence.sh PIPEWRIGHT COMPARE DATA_DIR WORK_DIR gloo|mpi mlp|transformer
set -euo pipefail
pw="$1"; cmp="$2"; data="$3"; work="$4"; backend="$5"; model="$6"
mkdir -p "$work"
work="$(mktemp -d "$work/eq.$backend.$model.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

# The transformer trains with SGD: its attention key bias has a gradient that is zero in exact
# arithmetic, so its float value is rounding noise whose bits depend on the order microbatch
# gradients are summed (LoopedBFS runs backward in reverse microbatch order), and Adam would
# scale that noise up to a step of size lr. The MLP (no such parameter) trains with AdamW.
case "$model" in
  mlp) args=(--model "$data/mlp.json" --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy"
             --loss mse --optimizer adamw --lr 0.01 --weight-decay 0.01);;
  transformer) args=(--model "$data/transformer.json" --data-x "$data/lm_x.npy"
                     --data-y "$data/lm_y.npy" --optimizer sgd --lr 0.05 --momentum 0.9);;
  *) echo "unknown model $model"; exit 2;;
esac
nodes=$(grep -c '"kind"' "$data/$model.json")
common=(--log-level warn run "${args[@]}" --batch-size 16 --microbatches 8 --steps 5 --seed 3
        --timeout 60 --backend "$backend")

# shellcheck source=ranks.sh
source "$(dirname "${BASH_SOURCE[0]}")/ranks.sh"

run_ranks 1 "$backend" "$pw" "${common[@]}" --pp 1 --schedule GPipe --save "$work/ref.safetensors"
failed=0
for spec in GPipe:1 1F1B:1 Interleaved1F1B:2 LoopedBFS:2 InterleavedZeroBubble:2; do
  sched="${spec%:*}"; v="${spec#*:}"
  for pp in 2 4; do
    if (( pp * v > nodes )); then
      echo "SKIP $model $sched pp=$pp v=$v: $((pp * v)) stages > $nodes model nodes"
      continue
    fi
    out="$work/$sched.$pp.safetensors"
    # --trace / --profile too: every schedule's measurements must be writable (p2p batches).
    if ! run_ranks "$pp" "$backend" "$pw" "${common[@]}" --pp "$pp" --stages-per-rank "$v" --schedule "$sched" \
        --save "$out" --trace "$work/$sched.$pp.trace.json" \
        --profile "$work/$sched.$pp.profile.json"; then
      echo "FAIL $model $sched pp=$pp v=$v: run failed"; failed=1; continue
    fi
    if "$cmp" "$work/ref.safetensors" "$out" 1e-5; then
      echo "OK   $model $sched pp=$pp v=$v ($backend)"
    else
      echo "FAIL $model $sched pp=$pp v=$v ($backend): weights differ"; failed=1
    fi
  done
done
# Note [Shared-memory point-to-point]: Gloo's ranks of one host exchange activations and
# gradients through shared memory; the same run with every message through Gloo's TCP
# (--no-shm-p2p) must give the same weights, bit for bit. Both runs log how each rank reaches
# each peer (issue 44: no silent fallback), so the comparison is shared memory against TCP: every
# one of the 2 (pp - 1) pair ends says "shared memory" in the first, "TCP" in the second.
info=(--log-level info "${common[@]:2}")
for pp in 4 2; do
  [ "$backend" = gloo ] && [ -f "$work/1F1B.$pp.safetensors" ] || continue
  shm="$work/1F1B.$pp.shm.safetensors"
  out="$work/1F1B.$pp.tcp.safetensors"
  if run_ranks "$pp" "$backend" "$pw" "${info[@]}" --pp "$pp" --schedule 1F1B --save "$shm" \
        > "$work/shm.log" 2>&1 &&
      run_ranks "$pp" "$backend" "$pw" "${info[@]}" --pp "$pp" --schedule 1F1B --save "$out" \
        --no-shm-p2p > "$work/tcp.log" 2>&1 && "$cmp" "$shm" "$out" 0; then
    echo "OK   $model 1F1B pp=$pp: --no-shm-p2p gives the same weights"
  else
    echo "FAIL $model 1F1B pp=$pp: --no-shm-p2p differs from shared-memory messages"; failed=1
  fi
  want=$((2 * (pp - 1)))
  got_shm=$(grep -c "point-to-point with rank [0-9]*: shared memory" "$work/shm.log" || true)
  got_tcp=$(grep -c "point-to-point with rank [0-9]*: TCP (shared memory turned off)" \
    "$work/tcp.log" || true)
  if [ "$got_shm" = "$want" ] && [ "$got_tcp" = "$want" ]; then
    echo "OK   $model 1F1B pp=$pp: $want pair ends over shared memory, then over TCP"
  else
    echo "FAIL $model 1F1B pp=$pp: pair ends over shared memory $got_shm, over TCP $got_tcp" \
      "(want $want each)"; cat "$work/shm.log" "$work/tcp.log"; failed=1
  fi
  break
done
exit $failed
