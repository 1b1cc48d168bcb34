#!/usr/bin/env bash
# Multi-process tests of data parallelism (issue 7, label mp), on local processes bound to
# 127.0.0.1, every run bounded by --timeout and `timeout`:
#   ddp      DDP with dp in {2, 4} and bucket caps 25 / 0.0001 MiB == one process on the
#            concatenated batch (<= 1e-5); pp x dp = 2 x 2 with 1F1B and with
#            InterleavedZeroBubble likewise; --check-replicas on every step
#   resume   2 x 2 DDP, 6 steps, vs 3 steps + --resume to 6: bit-identical weights; a checkpoint
#            without COMPLETE is ignored
#   slowmo   SlowMo dp 2, --save-replicas writes one file per replica; the sharded slow step
#            (reduce-scatter + all-gather) == the per-shard one (dp 2 bit-identical, dp 4 1e-6)
#   bad      bad data-parallel input exits 2
#   diloco   DiLoCo (issue 24) dp 2: outer lr 1, momentum 0, one fragment, --sync-every 2 ==
#            LocalSGD every 2 (<= 1e-6); Nesterov outer momentum == torch.optim.SGD(nesterov=True)
#            on the averaged outer gradient (diloco_reference.py, <= 1e-5)
#   sgp      SGP dp 2 with plain SGD == DDP dp 2 (<= 1e-5); SlowMo with the SGP base runs;
#            SGP resume bit-identical
#   diloco-resume  Streaming DiLoCo (2 fragments, delay 1, bf16), 6 steps vs 3 + --resume with an
#            outer all-reduce in flight at the checkpoint: bit-identical
#   prefetch the prefetching loader (issue 24, item 5), pp x dp = 2 x 2: --prefetch 0, 1 and the
#            default train bit-identical weights; 3 steps + --resume to 6 with read-ahead ==
#            6 steps without (the checkpoint holds the training thread's data position); a NaN
#            in sample 13 of the inputs exits 2 naming the file and the sample, with and
#            without prefetching, within seconds
#   dp_mp.sh PIPEWRIGHT COMPARE DATA_DIR WORK_DIR ddp|resume|slowmo|bad|diloco|diloco-resume|sgp|prefetch
set -euo pipefail
pw="$1"; cmp="$2"; data="$3"; work="$4"; what="$5"
mkdir -p "$work"
work="$(mktemp -d "$work/dp.$what.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
common=(--log-level warn run --model "$data/mlp.json" --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy"
        --loss mse --optimizer sgd --lr 0.05 --momentum 0.9 --seed 3 --timeout 60 --no-shuffle
        --backend gloo)

# shellcheck source=ranks.sh
source "$(dirname "${BASH_SOURCE[0]}")/ranks.sh"
failed=0
check() {  # check NAME A B TOL
  if "$cmp" "$2" "$3" "$4"; then echo "OK   $1"; else echo "FAIL $1"; failed=1; fi
}

case "$what" in
  ddp)
    for dp in 2 4; do
      run_ranks 1 gloo "$pw" "${common[@]}" --pp 1 --dp 1 --batch-size $((4 * dp)) --microbatches 1 \
        --steps 5 --save "$work/ref$dp.safetensors"
      for cap in 25 0.0001; do
        run_ranks "$dp" gloo "$pw" "${common[@]}" --pp 1 --dp "$dp" --batch-size 4 --microbatches 2 \
          --steps 5 --bucket-cap-mb "$cap" --check-replicas 1 --save "$work/ddp.$dp.$cap.safetensors"
        check "ddp dp=$dp cap=$cap" "$work/ref$dp.safetensors" "$work/ddp.$dp.$cap.safetensors" 1e-5
      done
    done
    for spec in 1F1B:1 InterleavedZeroBubble:2; do
      sched="${spec%:*}"; v="${spec#*:}"
      run_ranks 4 gloo "$pw" "${common[@]}" --pp 2 --dp 2 --stages-per-rank "$v" --schedule "$sched" \
        --batch-size 4 --microbatches 2 --steps 5 --bucket-cap-mb 0.0001 --check-replicas 1 \
        --save "$work/$sched.safetensors"
      check "ddp pp=2 dp=2 $sched" "$work/ref2.safetensors" "$work/$sched.safetensors" 1e-5
    done
    ;;
  resume)
    args=("${common[@]}" --pp 2 --dp 2 --batch-size 4 --microbatches 2 --schedule 1F1B)
    run_ranks 4 gloo "$pw" "${args[@]}" --steps 6 --save "$work/straight.safetensors"
    run_ranks 4 gloo "$pw" "${args[@]}" --steps 3 --checkpoint-dir "$work/ckpt" --checkpoint-every 1
    # A save that never completed (killed): no COMPLETE marker, a truncated file.
    rm "$work/ckpt/step-00000003/COMPLETE"
    head -c 100 "$work/ckpt/step-00000003/rank-1.pt" > "$work/t" && mv "$work/t" "$work/ckpt/step-00000003/rank-1.pt"
    run_ranks 4 gloo "$pw" "${args[@]}" --steps 6 --checkpoint-dir "$work/ckpt" --resume \
      --save "$work/resumed.safetensors"
    check "resume bit-identical" "$work/straight.safetensors" "$work/resumed.safetensors" 0
    ;;
  slowmo)
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 5 --dp-algorithm slowmo \
      --localsgd-frequency 2 --slowmo-frequency 4 --slowmo-momentum 0.2 --slowmo-lr 0.9 \
      --save "$work/w.safetensors" --save-replicas
    check "slowmo replica 0 == --save" "$work/w.safetensors" "$work/w.replica0.safetensors" 0
    # Note [SlowMo sharded slow step]: one shard per replica (a reduce-scatter and an all-gather,
    # in shared memory, or with --no-shm-collectives as the TCP ring) == one shard (a reduce and
    # a broadcast), bit for bit at dp 2; at dp 4 to float rounding (sums of 4 in another order).
    slow=(--dp-algorithm slowmo --localsgd-frequency 2 --slowmo-frequency 4 --slowmo-momentum 0.2
          --slowmo-lr 0.9)
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 5 "${slow[@]}" \
      --slowmo-num-shards 1 --save "$work/one.safetensors"
    check "slowmo dp 2: 2 shards == 1 shard" "$work/w.safetensors" "$work/one.safetensors" 0
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 5 "${slow[@]}" \
      --no-shm-collectives --save "$work/ring.safetensors"
    check "slowmo dp 2: TCP ring == shared memory" "$work/w.safetensors" "$work/ring.safetensors" 0
    for shards in 4 1; do
      run_ranks 4 gloo "$pw" "${common[@]}" --pp 1 --dp 4 --batch-size 8 --steps 4 "${slow[@]}" \
        --slowmo-num-shards "$shards" --check-replicas 4 --save "$work/dp4.$shards.safetensors"
    done
    check "slowmo dp 4: 4 shards == 1 shard" "$work/dp4.4.safetensors" "$work/dp4.1.safetensors" 1e-6
    # After step 5 (no averaging since step 4) the replicas differ.
    if "$cmp" "$work/w.replica0.safetensors" "$work/w.replica1.safetensors" 1e-7 >/dev/null; then
      echo "FAIL slowmo replicas identical between averagings"; failed=1
    else
      echo "OK   slowmo replicas differ between averagings"
    fi
    ;;
  bad)
    expect2() {  # expect2 NAME REGEX ARGS...
      local name="$1" regex="$2"; shift 2
      local out rc=0
      out="$(run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 1 "$@" 2>&1)" || rc=$?
      if [ "$rc" = 2 ] && grep -qE -- "$regex" <<<"$out"; then echo "OK   bad $name"
      else echo "FAIL bad $name (exit $rc): $out"; failed=1; fi
    }
    expect2 slowmo_option_with_ddp "--slowmo-momentum is a SlowMo option" --slowmo-momentum 0.3
    expect2 num_shards "--slowmo-num-shards must be in 1..dp" --dp-algorithm slowmo --slowmo-num-shards 3
    expect2 localsgd_frequency "--localsgd-frequency must be >= 1" --dp-algorithm slowmo --localsgd-frequency 0
    expect2 slowmo_frequency "--slowmo-frequency must be >= 1" --dp-algorithm slowmo --slowmo-frequency -1
    out="$(run_ranks 1 gloo "$pw" "${common[@]}" --pp 1 --dp 1 --batch-size 4 --steps 1 --dp-algorithm sgp 2>&1)" && rc=0 || rc=$?
    if [ "$rc" = 2 ] && grep -q "SGP needs --dp >= 2" <<<"$out"; then echo "OK   bad sgp_dp1"
    else echo "FAIL bad sgp_dp1 (exit $rc): $out"; failed=1; fi
    expect2 slowmo_base_with_ddp "--slowmo-base is a SlowMo option" --slowmo-base sgp
    expect2 diloco_option_with_ddp "--sync-every is a DiLoCo option" --sync-every 4
    expect2 diloco_option_with_localsgd "--outer-lr is a DiLoCo option" --dp-algorithm localsgd --outer-lr 0.5
    expect2 nesterov_without_momentum "--outer-nesterov needs --outer-momentum > 0" \
      --dp-algorithm diloco --outer-momentum 0 --outer-nesterov
    expect2 fragments_divide "--fragments 3 must divide --sync-every 4" --dp-algorithm diloco \
      --sync-every 4 --fragments 3
    expect2 fragments_tensors "--fragments 20 is larger than the number of parameter tensors" \
      --dp-algorithm diloco --sync-every 20 --fragments 20
    expect2 sync_delay "--fragment-sync-delay must be in 0..H/K-1 = 0..1" --dp-algorithm diloco \
      --sync-every 4 --fragments 2 --fragment-sync-delay 2
    expect2 outer_dtype "--outer-dtype must be fp32 or bf16" --dp-algorithm diloco --outer-dtype fp8
    ;;
  diloco)
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 5 \
      --dp-algorithm localsgd --localsgd-frequency 2 --save "$work/localsgd.safetensors"
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 5 \
      --dp-algorithm diloco --sync-every 2 --outer-lr 1 --outer-momentum 0 --check-replicas 2 \
      --save "$work/diloco.safetensors"
    check "diloco(lr 1, momentum 0, H 2) == localsgd(every 2)" "$work/localsgd.safetensors" \
      "$work/diloco.safetensors" 1e-6
    ref="$(dirname "${BASH_SOURCE[0]}")/diloco_reference.py"
    /usr/bin/python3 "$ref" init --model "$data/mlp.json" --seed 5 -o "$work/init.safetensors"
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 6 \
      --init "$work/init.safetensors" --dp-algorithm diloco --sync-every 2 --outer-lr 0.7 \
      --outer-momentum 0.9 --outer-nesterov --save "$work/nesterov.safetensors"
    if /usr/bin/python3 "$ref" train --model "$data/mlp.json" --init "$work/init.safetensors" \
        --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy" --dp 2 --batch-size 4 --steps 6 \
        --lr 0.05 --momentum 0.9 --sync-every 2 --outer-lr 0.7 --outer-momentum 0.9 --nesterov \
        --compare "$work/nesterov.safetensors" --tolerance 1e-5; then
      echo "OK   diloco nesterov == torch.optim.SGD(nesterov=True) reference"
    else
      echo "FAIL diloco nesterov == torch.optim.SGD(nesterov=True) reference"; failed=1
    fi
    ;;
  sgp)
    plain=(); skip=0
    for a in "${common[@]}"; do  # the common flags without --momentum 0.9 (plain SGD)
      if [ "$skip" = 1 ]; then skip=0; continue; fi
      if [ "$a" = --momentum ]; then skip=1; continue; fi
      plain+=("$a")
    done
    run_ranks 2 gloo "$pw" "${plain[@]}" --pp 1 --dp 2 --batch-size 4 --steps 5 \
      --save "$work/ddp.safetensors"
    run_ranks 2 gloo "$pw" "${plain[@]}" --pp 1 --dp 2 --batch-size 4 --steps 5 \
      --dp-algorithm sgp --check-replicas 1 --save "$work/sgp.safetensors"
    check "sgp dp=2 plain SGD == ddp dp=2" "$work/ddp.safetensors" "$work/sgp.safetensors" 1e-5
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 4 --dp-algorithm slowmo \
      --slowmo-base sgp --slowmo-frequency 2 --slowmo-momentum 0.3 --check-replicas 1 \
      --save "$work/slowmo-sgp.safetensors"
    echo "OK   slowmo --slowmo-base sgp runs"
    args=("${common[@]}" --pp 1 --dp 2 --batch-size 4 --dp-algorithm slowmo --slowmo-base sgp
          --slowmo-frequency 2 --slowmo-momentum 0.3)
    run_ranks 2 gloo "$pw" "${args[@]}" --steps 5 --save "$work/straight.safetensors"
    run_ranks 2 gloo "$pw" "${args[@]}" --steps 3 --checkpoint-dir "$work/ckpt" --checkpoint-every 3
    run_ranks 2 gloo "$pw" "${args[@]}" --steps 5 --checkpoint-dir "$work/ckpt" --resume \
      --save "$work/resumed.safetensors"
    check "slowmo(sgp base) resume bit-identical" "$work/straight.safetensors" \
      "$work/resumed.safetensors" 0
    ;;
  diloco-resume)
    args=("${common[@]}" --pp 1 --dp 2 --batch-size 4 --dp-algorithm diloco --sync-every 4
          --fragments 2 --fragment-sync-delay 1 --outer-dtype bf16 --outer-lr 0.7 --outer-momentum 0.9)
    run_ranks 2 gloo "$pw" "${args[@]}" --steps 7 --save "$work/straight.safetensors" --save-replicas
    # After step index 2 fragment 1's all-reduce is in flight (Note [DiLoCo step]).
    run_ranks 2 gloo "$pw" "${args[@]}" --steps 3 --checkpoint-dir "$work/ckpt" --checkpoint-every 3
    run_ranks 2 gloo "$pw" "${args[@]}" --steps 7 --checkpoint-dir "$work/ckpt" --resume \
      --save "$work/resumed.safetensors" --save-replicas
    check "streaming diloco resume bit-identical (replica 0)" "$work/straight.replica0.safetensors" \
      "$work/resumed.replica0.safetensors" 0
    check "streaming diloco resume bit-identical (replica 1)" "$work/straight.replica1.safetensors" \
      "$work/resumed.replica1.safetensors" 0
    ;;
  prefetch)
    args=("${common[@]}" --pp 2 --dp 2 --batch-size 4 --microbatches 2 --schedule 1F1B)
    run_ranks 4 gloo "$pw" "${args[@]}" --steps 6 --prefetch 0 --save "$work/sync.safetensors"
    for depth in 1 default; do
      extra=(); [ "$depth" = default ] || extra=(--prefetch "$depth")
      run_ranks 4 gloo "$pw" "${args[@]}" --steps 6 "${extra[@]}" --save "$work/p$depth.safetensors"
      check "prefetch $depth == prefetch 0" "$work/sync.safetensors" "$work/p$depth.safetensors" 0
    done
    run_ranks 4 gloo "$pw" "${args[@]}" --steps 3 --prefetch 2 --checkpoint-dir "$work/ckpt" \
      --checkpoint-every 1
    run_ranks 4 gloo "$pw" "${args[@]}" --steps 6 --prefetch 2 --checkpoint-dir "$work/ckpt" --resume \
      --save "$work/resumed.safetensors"
    check "prefetch resume bit-identical" "$work/sync.safetensors" "$work/resumed.safetensors" 0
    # Sample 13 (step 3 of a 1-replica run with batches of 4 in file order) gets a NaN.
    python3 - "$data/mlp_x.npy" "$work/bad_x.npy" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
header = 10 + struct.unpack("<H", d[8:10])[0]
d[header + 13 * 8 * 4:header + 13 * 8 * 4 + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(d)
PY
    for depth in 0 2; do
      rc=0; start=$SECONDS
      out="$(run_ranks 2 gloo "$pw" --log-level warn run --model "$data/mlp.json" \
        --data-x "$work/bad_x.npy" --data-y "$data/mlp_y.npy" --loss mse --optimizer sgd --lr 0.05 \
        --seed 3 --timeout 60 --no-shuffle --pp 2 --dp 1 --batch-size 4 --microbatches 2 \
        --steps 6 --prefetch "$depth" 2>&1)" || rc=$?
      if [ "$rc" = 2 ] && [ $((SECONDS - start)) -lt 60 ] &&
         grep -q "data x '$work/bad_x.npy': sample 13 has a non-finite value" <<<"$out"; then
        echo "OK   bad sample, prefetch $depth"
      else echo "FAIL bad sample, prefetch $depth (exit $rc, $((SECONDS - start)) s): $out"; failed=1; fi
    done
    ;;
  *) echo "unknown case $what"; exit 2;;
esac
exit $failed
