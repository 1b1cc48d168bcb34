#!/usr/bin/env bash
# Multi-process tests of ZeRO stages 1, 2 and 3 (issue 43, label mp; zero/zero.hpp, Note [ZeRO
# flat buffers]; zero/zero3.hpp, Note [ZeRO-3 sharded parameters]), on local processes bound to
# 127.0.0.1, every run bounded by --timeout and `timeout`:
#   equiv   pp 2 x dp 2 under 1F1B, Interleaved1F1B (v 2) and ZBVZeroBubble (v 2), AdamW with
#           weight decay, clipping by the global norm and warm-up + cosine, 6 steps:
#           --zero-stage 1, 2 and 3 end with the weights of --zero-stage 0 (max |diff| <= 1e-6),
#           with --check-replicas 1 (the replicas' gathered parameters are bit-identical every
#           step); with --recompute full likewise; dp 4 (pp 1) likewise, with buckets small
#           enough to pad; ZeRO-3 with --shard-placement compute and torch (Interleaved1F1B) and
#           with a torch compute_comms CSV plan file whose UNSHARD/RESHARD run as written
#   bytes   DP bytes per step on the wire of world rank 0's stage (the run's "data-parallel"
#           line): ZeRO-1 == DDP's all-reduce (+ the padding); ZeRO-2 == (m+1)/2 x ZeRO-1
#           (m reduce-scatters of G and one all-gather of P); ZeRO-3: step placement
#           (m G + P)(d-1)/d == ZeRO-2, compute placement (m G + 2m P)(d-1)/d == 3m/2 x ZeRO-1,
#           torch placement (one stage a rank: gathered all step) == step; step and compute
#           == simulate's communication.dp_wire_bytes_per_stage; and ZeRO-3's peak RSS
#           (VmHWM) below ZeRO-2's on an MLP whose parameters dominate
#   resume  pp 2 x dp 2 ZeRO-1, 2 and 3, 6 steps vs 3 + --resume to 6: bit-identical (each
#           rank's checkpoint holds its optimizer shard, at stage 3 also its parameter shard
#           instead of the whole parameters: smaller than ZeRO-2's); the last checkpoint
#           half-written by one rank (no COMPLETE, truncated shard): the resume uses the one
#           before
#   reshard checkpoints written at dp 4 resumed at dp 2 (the same global batch; Note [Resuming at
#           another dp]): ZeRO-1, 2 and 3 at pp 1, ZeRO-1 and 3 at pp 2, ZeRO-3 dp 2 -> dp 3,
#           DDP at pp 2 -> dp 1: the resumed run's parameters before any step are bit-identical
#           to the saved run's, and 6 steps (3 + 3 resumed) end within 1e-6 of 6 uninterrupted
#           ones; another --pp or global batch exits 2 naming the flags (the optimizer state's
#           and the parameter shards' bit-identity: tests/exec/zero_reshard_test.cpp)
#   tied    a TorchScript model with a weight tied across the first and a later pipeline stage
#           (make_script_model.py), pp 2 x dp 2: --zero-stage 1, 2 and 3 end with the weights of
#           --zero-stage 0 (1e-6) under 1F1B, and --zero-stage 3 under Interleaved1F1B and
#           ZBVZeroBubble (4 stages: the tie spans stages 0 and 2); Chimera (its replicated
#           stages are tied groups) at zero stages 1, 2 and 3 likewise
#   bf16    --precision bf16 ZeRO-1/2/3 vs ZeRO-0; --reduce-dtype bf16 ZeRO-1/2/3 vs ZeRO-0 with
#           --reduce-dtype bf16 within 1e-6 / 1e-3 / 1e-3, the reduce-scatter's bytes halved
#           (measured values: docs/data-parallel.md, "Precision")
#   bad     a local-step algorithm, and a checkpoint of another zero stage or model exit 2
#           naming the stage and tensor (ZeRO-3's also when resumed at another dp)
#   zero_mp.sh PIPEWRIGHT COMPARE DATA_DIR WORK_DIR equiv|bytes|resume|reshard|tied|bf16|bad
set -euo pipefail
pw="$1"; cmp="$2"; data="$3"; work="$4"; what="$5"
mkdir -p "$work"
work="$(mktemp -d "$work/zero.$what.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
common=(--log-level warn run --model "$data/mlp.json" --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy"
        --loss mse --optimizer adamw --lr 0.01 --weight-decay 0.01 --clip-grad-norm 0.05
        --lr-warmup-steps 2 --lr-decay-style cosine --lr-min 0.001 --seed 3 --timeout 60
        --no-shuffle --backend gloo)

# shellcheck source=ranks.sh
source "$(dirname "${BASH_SOURCE[0]}")/ranks.sh"
failed=0
check() {  # check NAME A B TOL
  if "$cmp" "$2" "$3" "$4"; then echo "OK   $1"; else echo "FAIL $1"; failed=1; fi
}

case "$what" in
  equiv)
    for spec in 1F1B:1 Interleaved1F1B:2 ZBVZeroBubble:2; do
      sched="${spec%:*}"; v="${spec#*:}"
      args=("${common[@]}" --pp 2 --dp 2 --stages-per-rank "$v" --schedule "$sched" --batch-size 8
            --microbatches 4 --steps 6 --check-replicas 1)
      run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 0 --save "$work/$sched.0.safetensors"
      for z in 1 2 3; do
        run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage "$z" --save "$work/$sched.$z.safetensors"
        check "zero-stage $z == 0, pp 2 dp 2 $sched" "$work/$sched.0.safetensors" \
          "$work/$sched.$z.safetensors" 1e-6
      done
    done
    # Activation recompute (--recompute full): the same weights as keeping activations.
    args=("${common[@]}" --pp 2 --dp 2 --schedule 1F1B --batch-size 8 --microbatches 4 --steps 4)
    run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 0 --save "$work/rc.0.safetensors"
    run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 2 --recompute full --save "$work/rc.2.safetensors"
    check "zero-stage 2 with --recompute full == zero-stage 0" "$work/rc.0.safetensors" \
      "$work/rc.2.safetensors" 1e-6
    run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 3 --recompute full --save "$work/rc.3.safetensors"
    check "zero-stage 3 with --recompute full == zero-stage 0" "$work/rc.0.safetensors" \
      "$work/rc.3.safetensors" 1e-6
    # ZeRO-3 under every placement (Interleaved1F1B: two stages a rank, so torch's look-ahead
    # and compute's windows differ from step's), and a plan file that carries its UNSHARD /
    # RESHARD: torch's compute_comms CSV (no OPTIM in it: the run adds them), run as written.
    args=("${common[@]}" --pp 2 --dp 2 --stages-per-rank 2 --batch-size 8 --microbatches 4 --steps 6)
    for pl in compute torch; do
      run_ranks 4 gloo "$pw" "${args[@]}" --schedule Interleaved1F1B --zero-stage 3 \
        --shard-placement "$pl" --save "$work/pl.$pl.safetensors"
      check "zero-stage 3 --shard-placement $pl == zero-stage 0, Interleaved1F1B" \
        "$work/Interleaved1F1B.0.safetensors" "$work/pl.$pl.safetensors" 1e-6
    done
    "$pw" "${args[@]}" --schedule Interleaved1F1B --zero-stage 3 --shard-placement compute \
      --dry-run --plan-out "$work/plan.json" >/dev/null
    /usr/bin/python3 - "$work/plan.json" "$work/plan_noopt.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["plan"]
plan["actions"] = [[a for a in r if not a.endswith("OPTIM")] for r in plan["actions"]]
json.dump(plan, open(sys.argv[2], "w"))
PY
    "$pw" --log-level warn convert -f torch-comms "$work/plan_noopt.json" -o "$work/plan.csv"
    grep -q UNSHARD "$work/plan.csv" || { echo "FAIL no UNSHARD in the compute_comms CSV"; failed=1; }
    run_ranks 4 gloo "$pw" "${args[@]}" --plan "$work/plan.csv" --zero-stage 3 \
      --save "$work/csv.3.safetensors"
    check "zero-stage 3 with a compute_comms CSV's UNSHARD/RESHARD == zero-stage 0" \
      "$work/Interleaved1F1B.0.safetensors" "$work/csv.3.safetensors" 1e-6
    args=("${common[@]}" --pp 1 --dp 4 --batch-size 4 --microbatches 2 --steps 5
          --bucket-cap-mb 0.0001 --check-replicas 1)
    run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 0 --save "$work/dp4.0.safetensors"
    for z in 1 2 3; do
      run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage "$z" --save "$work/dp4.$z.safetensors"
      check "zero-stage $z == 0, dp 4, small buckets" "$work/dp4.0.safetensors" \
        "$work/dp4.$z.safetensors" 1e-6
    done
    ;;
  bytes)
    # mlp.json at pp 2: world rank 0 holds stage 0; one bucket (25 MiB cap) of G elements.
    args=("${common[@]/#warn/info}" --pp 2 --dp 2 --schedule 1F1B --batch-size 8
          --microbatches 4 --steps 3)
    wire() { grep -oE 'data-parallel \([^)]*\): [^(]*\(([0-9]+) B/step\)' | grep -oE '[0-9]+ B/step' | grep -oE '[0-9]+'; }
    ddp=$(run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 0 2>&1 | wire)
    z1=$(run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 1 2>&1 | wire)
    z2=$(run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 2 2>&1 | wire)
    echo "DP wire bytes per step, stage 0 of pp 2 x dp 2, 4 microbatches: ddp $ddp zero-1 $z1 zero-2 $z2"
    # ZeRO-1: RS + AG of the padded buffer: DDP's bytes plus at most d-1 padding floats each way.
    if [ -n "$ddp" ] && [ -n "$z1" ] && (( z1 >= ddp && z1 - ddp <= 8 )); then
      echo "OK   zero-1 moves what DDP moves ($z1 vs $ddp B/step: the difference is the padding)"
    else echo "FAIL zero-1 $z1 B/step vs ddp $ddp"; failed=1; fi
    # ZeRO-2: 4 reduce-scatters + 1 all-gather, each (d-1)/d of the padded buffer: 5/2 x ZeRO-1.
    if [ -n "$z2" ] && [ $((z2 * 2)) = $((z1 * 5)) ]; then echo "OK   zero-2 moves (m+1)/2 x zero-1 ($z2 B/step)"
    else echo "FAIL zero-2 $z2 B/step != 5/2 x zero-1 $z1"; failed=1; fi
    # ZeRO-3 (G = P, padded alike, so ZeRO-1 = (G + P)(d-1)/d): step: (4 G + P)(d-1)/d = 5/2 x
    # ZeRO-1; compute: F and B each in a window, (4 G + 8 P)(d-1)/d = 6 x ZeRO-1; torch: the one
    # stage of a rank stays gathered all step, as step.
    for pl in step compute torch; do
      z3=$(run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 3 --shard-placement "$pl" 2>&1 | wire)
      case $pl in compute) num=12;; *) num=5;; esac
      echo "zero-3 --shard-placement $pl: $z3 B/step"
      if [ -n "$z3" ] && [ $((z3 * 2)) = $((z1 * num)) ]; then echo "OK   zero-3 $pl moves $num/2 x zero-1"
      else echo "FAIL zero-3 $pl $z3 B/step != $num/2 x zero-1 $z1"; failed=1; fi
      # The simulator's model of the same plan (stage 0's padded parameter bytes = ZeRO-1's
      # bytes at d = 2): communication.dp_wire_bytes_per_stage.
      [ "$pl" = torch ] && continue
      "$pw" --log-level warn simulate --schedule 1F1B -p 2 -m 4 --dp 2 --forward-ms 1 \
        --backward-ms 2 --param-bytes "${z1}B" --optimizer adamw --zero-stage 3 \
        --shard-placement "$pl" --metrics "$work/sim.$pl.json" >/dev/null
      sim=$(/usr/bin/python3 -c 'import json, sys
print(int(json.load(open(sys.argv[1]))["communication"]["dp_wire_bytes_per_stage"][0]))' "$work/sim.$pl.json")
      if [ "$sim" = "$z3" ]; then echo "OK   zero-3 $pl: simulate models $sim B/step, as measured"
      else echo "FAIL zero-3 $pl: simulate models $sim B/step, measured $z3"; failed=1; fi
    done
    # Peak RSS: an MLP whose parameters dominate (8 layers of 1024 x 1024 floats, 8 rows a step),
    # pp 1 x dp 2, compute placement: ZeRO-3 holds one gathered P at a time (only within a
    # window) and no full gradient buffer. glibc's dynamic mmap threshold would keep a freed P in
    # the heap for the next allocation (the peak then grows with fragmentation, not with what is
    # alive): a fixed threshold makes every large buffer an mmap, given back when freed, for both.
    "$pw" --log-level warn model mlp --sizes 64,1024,1024,1024,1024,1024,1024,1024,1024,64 \
      --activation relu -o "$work/big.json"
    /usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/bx.npy", rng.standard_normal((64, 64), dtype=np.float32))
np.save(sys.argv[1] + "/by.npy", rng.standard_normal((64, 64), dtype=np.float32))
PY
    peak() {  # peak ZERO -> max over ranks of peak_memory_bytes (VmHWM) after the last step
      local pl=(); [ "$1" = 3 ] && pl=(--shard-placement compute)
      MALLOC_MMAP_THRESHOLD_=262144 run_ranks 2 gloo "$pw" --log-level warn run \
        --model "$work/big.json" --data-x "$work/bx.npy" \
        --data-y "$work/by.npy" --loss mse --optimizer adamw --lr 0.001 --pp 1 --dp 2 \
        --batch-size 8 --microbatches 2 --steps 3 --no-shuffle --backend gloo --timeout 60 \
        --bucket-cap-mb 0.25 --zero-stage "$1" "${pl[@]}" \
        --metrics "$work/m$1.jsonl" >/dev/null 2>&1
      tail -n 1 "$work/m$1.jsonl" | sed -E 's/.*"peak_memory_bytes": \[([0-9, ]*)\].*/\1/' |
        tr ',' '\n' | sort -g | tail -n 1
    }
    p2=$(peak 2); p3=$(peak 3)
    echo "peak RSS (VmHWM, max over ranks): zero-2 $p2 B, zero-3 $p3 B"
    if [ -n "$p2" ] && [ -n "$p3" ] && (( p3 < p2 )); then echo "OK   zero-3 peak below zero-2's"
    else echo "FAIL zero-3 peak $p3 not below zero-2's $p2"; failed=1; fi
    ;;
  resume)
    for z in 1 2 3; do
      # --lr-decay-steps: the cosine's length must not follow --steps (3, then 6).
      args=("${common[@]}" --pp 2 --dp 2 --batch-size 8 --microbatches 2 --schedule 1F1B
            --zero-stage "$z" --lr-decay-steps 6)
      run_ranks 4 gloo "$pw" "${args[@]}" --steps 6 --save "$work/straight.$z.safetensors"
      run_ranks 4 gloo "$pw" "${args[@]}" --steps 3 --checkpoint-dir "$work/ckpt$z" --checkpoint-every 1
      # A rank killed while writing its shard: no COMPLETE, a truncated file; the resume takes
      # the previous checkpoint (step 2).
      rm "$work/ckpt$z/step-00000003/COMPLETE"
      head -c 100 "$work/ckpt$z/step-00000003/rank-1.pt" > "$work/t"
      mv "$work/t" "$work/ckpt$z/step-00000003/rank-1.pt"
      run_ranks 4 gloo "$pw" "${args[@]}" --steps 6 --checkpoint-dir "$work/ckpt$z" --resume \
        --save "$work/resumed.$z.safetensors"
      check "zero-stage $z resume bit-identical" "$work/straight.$z.safetensors" \
        "$work/resumed.$z.safetensors" 0
    done
    # A ZeRO-3 rank file holds its parameter shard, not the whole parameters: at dp 2 it is
    # P/2 + the moments' P, against ZeRO-2's P + P.
    s2=$(stat -c %s "$work/ckpt2/step-00000002/rank-0.pt"); s3=$(stat -c %s "$work/ckpt3/step-00000002/rank-0.pt")
    if (( s3 < s2 )); then echo "OK   zero-3 rank file ($s3 B) smaller than zero-2's ($s2 B)"
    else echo "FAIL zero-3 rank file $s3 B not smaller than zero-2's $s2 B"; failed=1; fi
    ;;
  reshard)
    # mlp_x.npy has 64 rows; a global batch of 8: --batch-size 2 at dp 4, 4 at dp 2.
    for spec in 1:1 2:1 1:2 3:1 3:2; do
      z="${spec%:*}"; pp="${spec#*:}"
      args=("${common[@]}" --pp "$pp" --microbatches 2 --zero-stage "$z" --lr-decay-steps 6)
      tag="z$z.pp$pp"
      run_ranks $((4 * pp)) gloo "$pw" "${args[@]}" --dp 4 --batch-size 2 --steps 6 \
        --save "$work/straight.$tag.safetensors"
      run_ranks $((4 * pp)) gloo "$pw" "${args[@]}" --dp 4 --batch-size 2 --steps 3 \
        --checkpoint-dir "$work/ck.$tag" --save "$work/at3.$tag.safetensors"
      cp -r "$work/ck.$tag" "$work/ck.$tag.dp4"
      # Resumed at dp 2 with nothing left to train: the loaded parameters, written by --save.
      run_ranks $((2 * pp)) gloo "$pw" "${args[@]}" --dp 2 --batch-size 4 --steps 3 \
        --checkpoint-dir "$work/ck.$tag" --resume --save "$work/loaded.$tag.safetensors"
      check "zero-stage $z pp $pp: dp 4 checkpoint loaded at dp 2 bit-identical" \
        "$work/at3.$tag.safetensors" "$work/loaded.$tag.safetensors" 0
      run_ranks $((2 * pp)) gloo "$pw" "${args[@]}" --dp 2 --batch-size 4 --steps 6 \
        --checkpoint-dir "$work/ck.$tag" --resume --save "$work/resumed.$tag.safetensors"
      check "zero-stage $z pp $pp: resumed at dp 2 == uninterrupted dp 4" \
        "$work/straight.$tag.safetensors" "$work/resumed.$tag.safetensors" 1e-6
    done
    # ZeRO-3 dp 2 -> dp 3 (pp 1, a global batch of 6: 6 steps read 36 of the 64 rows, so both dps
    # see the same rows in every step; every bucket's padding changes).
    args=("${common[@]}" --pp 1 --microbatches 1 --zero-stage 3 --lr-decay-steps 6 --bucket-cap-mb 0.0001)
    run_ranks 2 gloo "$pw" "${args[@]}" --dp 2 --batch-size 3 --steps 6 --save "$work/z3.d2.straight.safetensors"
    run_ranks 2 gloo "$pw" "${args[@]}" --dp 2 --batch-size 3 --steps 3 --checkpoint-dir "$work/ck.z3.d2" \
      --save "$work/z3.d2.at3.safetensors"
    cp -r "$work/ck.z3.d2" "$work/ck.z3.d2.orig"
    run_ranks 3 gloo "$pw" "${args[@]}" --dp 3 --batch-size 2 --steps 3 --checkpoint-dir "$work/ck.z3.d2" \
      --resume --save "$work/z3.d3.loaded.safetensors"
    check "zero-stage 3: dp 2 checkpoint loaded at dp 3 bit-identical" \
      "$work/z3.d2.at3.safetensors" "$work/z3.d3.loaded.safetensors" 0
    run_ranks 3 gloo "$pw" "${args[@]}" --dp 3 --batch-size 2 --steps 6 --checkpoint-dir "$work/ck.z3.d2.orig" \
      --resume --save "$work/z3.d3.resumed.safetensors"
    check "zero-stage 3: resumed at dp 3 == uninterrupted dp 2" \
      "$work/z3.d2.straight.safetensors" "$work/z3.d3.resumed.safetensors" 1e-6
    # DDP (--zero-stage 0): replicated state, pp 2 x dp 2 -> pp 2 x dp 1.
    args=("${common[@]}" --pp 2 --microbatches 2 --lr-decay-steps 6)
    run_ranks 4 gloo "$pw" "${args[@]}" --dp 2 --batch-size 4 --steps 6 --save "$work/ddp.straight.safetensors"
    run_ranks 4 gloo "$pw" "${args[@]}" --dp 2 --batch-size 4 --steps 3 --checkpoint-dir "$work/ck.ddp"
    run_ranks 2 gloo "$pw" "${args[@]}" --dp 1 --batch-size 8 --steps 6 --checkpoint-dir "$work/ck.ddp" \
      --resume --save "$work/ddp.resumed.safetensors"
    check "zero-stage 0 pp 2: resumed at dp 1 == uninterrupted dp 2" "$work/ddp.straight.safetensors" \
      "$work/ddp.resumed.safetensors" 1e-6
    expect2() {  # expect2 NAME REGEX NPROC ARGS...
      local name="$1" regex="$2" n="$3"; shift 3
      local out rc=0
      out="$(run_ranks "$n" gloo "$pw" "$@" 2>&1)" || rc=$?
      if [ "$rc" = 2 ] && grep -qE -- "$regex" <<<"$out"; then echo "OK   bad $name"
      else echo "FAIL bad $name (exit $rc): $out"; failed=1; fi
    }
    args=("${common[@]}" --microbatches 2 --zero-stage 1 --lr-decay-steps 6 --steps 6
          --checkpoint-dir "$work/ck.z1.pp1.dp4" --resume)
    expect2 "resume at another global batch" \
      "written at --dp 4 --batch-size 2 \(a global batch of 8 samples\), this run has --dp 2 --batch-size 2 \(4\): a resume at another --dp keeps the global batch \(--batch-size 4\)" \
      2 "${args[@]}" --pp 1 --dp 2 --batch-size 2
    expect2 "resume at another pp" "written at --pp 1 --dp 4, this run has --pp 2 --dp 2: a resume may change --dp only" \
      4 "${args[@]}" --pp 2 --dp 2 --batch-size 4
    ;;
  tied)
    rc=0
    OMP_NUM_THREADS=1 /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/make_script_model.py" "$work" --data 32 || rc=$?
    if [ "$rc" -eq 77 ]; then echo "skipped: /usr/bin/python3 has no torch"; exit 77; fi
    [ "$rc" -eq 0 ] || { echo "FAIL: make_script_model.py exited $rc"; exit 1; }
    targs=(--log-level warn run --model "$work/model.json" --data-x "$work/x.npy" --data-y "$work/y.npy"
           --loss cross-entropy --optimizer adamw --lr 0.01 --weight-decay 0.01 --clip-grad-norm 0.5
           --lr-warmup-steps 2 --lr-decay-style cosine --lr-min 0.001 --seed 3 --timeout 60
           --no-shuffle --backend gloo --pp 2 --dp 2 --schedule 1F1B --batch-size 4
           --microbatches 2 --steps 5 --check-replicas 1)
    run_ranks 4 gloo "$pw" "${targs[@]}" --zero-stage 0 --save "$work/tied.0.safetensors"
    for z in 1 2 3; do
      run_ranks 4 gloo "$pw" "${targs[@]}" --zero-stage "$z" --save "$work/tied.$z.safetensors"
      check "tied weights: zero-stage $z == 0" "$work/tied.0.safetensors" "$work/tied.$z.safetensors" 1e-6
    done
    # Four stages (embed, block, head, out): the tie spans stages 0 and 2, on one rank under
    # Interleaved1F1B, on two under ZBVZeroBubble; each copy keeps its own stage's windows.
    for sched in Interleaved1F1B ZBVZeroBubble; do
      run_ranks 4 gloo "$pw" "${targs[@]/#1F1B/$sched}" --stages-per-rank 2 --zero-stage 0 \
        --save "$work/tied.$sched.0.safetensors"
      run_ranks 4 gloo "$pw" "${targs[@]/#1F1B/$sched}" --stages-per-rank 2 --zero-stage 3 \
        --save "$work/tied.$sched.3.safetensors"
      check "tied weights, $sched: zero-stage 3 == 0" "$work/tied.$sched.0.safetensors" \
        "$work/tied.$sched.3.safetensors" 1e-6
    done
    args=("${common[@]}" --pp 2 --dp 2 --schedule Chimera --batch-size 8 --microbatches 4 --steps 4
          --check-replicas 1)
    run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 0 --save "$work/chimera.0.safetensors"
    for z in 1 2 3; do
      run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage "$z" --save "$work/chimera.$z.safetensors"
      check "Chimera: zero-stage $z == 0" "$work/chimera.0.safetensors" "$work/chimera.$z.safetensors" 1e-6
    done
    ;;
  bf16)
    # Measured (docs/data-parallel.md, "Precision"; 6 AdamW steps, pp 2 x dp 2, m = 4):
    # --precision bf16, ZeRO-1, 2 and 3 vs ZeRO-0: max |diff| 2.98e-8 each (the documented 1e-3
    # was 30000x that); --reduce-dtype bf16 vs ZeRO-0 with --reduce-dtype bf16: ZeRO-1 2.98e-8
    # (one rounding of the same float32 sum), ZeRO-2 and ZeRO-3 2.87e-4 each (they
    # round each microbatch's sum).
    BF16_TOL=1e-6; REDUCE_TOL=(0 1e-6 1e-3 1e-3)
    args=("${common[@]}" --pp 2 --dp 2 --batch-size 8 --microbatches 4 --schedule 1F1B --steps 6
          --precision bf16)
    run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage 0 --save "$work/bf16.0.safetensors"
    for z in 1 2 3; do
      run_ranks 4 gloo "$pw" "${args[@]}" --zero-stage "$z" --save "$work/bf16.$z.safetensors"
      check "bf16 zero-stage $z within $BF16_TOL of 0" "$work/bf16.0.safetensors" "$work/bf16.$z.safetensors" "$BF16_TOL"
    done
    # --reduce-dtype bf16: the reduce-scatter in bfloat16 (summed in float32, rounded once) moves
    # half its float32 bytes; the all-gather of the float32 parameters is unchanged, so the step
    # moves 3/4 (ZeRO-1: RS/2 + AG) and 3/5 (ZeRO-2, m = 4: 4 RS/2 + AG) of the float32 bytes.
    args=("${common[@]/#warn/info}" --pp 2 --dp 2 --batch-size 8 --microbatches 4 --schedule 1F1B
          --steps 6)
    wire() { grep -oE 'data-parallel \([^)]*\): [^(]*\(([0-9]+) B/step\)' | grep -oE '[0-9]+ B/step' | grep -oE '[0-9]+'; }
    run_ranks 4 gloo "$pw" "${args[@]}" --reduce-dtype bf16 --zero-stage 0 \
      --save "$work/rd.0.safetensors" > /dev/null 2>&1
    # ZeRO-3 with one window a step (--shard-placement step): 4 RS/2 + AG, as ZeRO-2.
    for z in 1 2 3; do
      pl=(); [ "$z" = 3 ] && pl=(--shard-placement step)
      b16=$(run_ranks 4 gloo "$pw" "${args[@]}" "${pl[@]}" --reduce-dtype bf16 --zero-stage "$z" \
        --save "$work/rd.$z.safetensors" 2>&1 | wire)
      check "--reduce-dtype bf16 zero-stage $z within ${REDUCE_TOL[$z]} of zero-stage 0" \
        "$work/rd.0.safetensors" "$work/rd.$z.safetensors" "${REDUCE_TOL[$z]}"
      b32=$(run_ranks 4 gloo "$pw" "${args[@]}" "${pl[@]}" --zero-stage "$z" 2>&1 | wire)
      num=$(( z == 1 ? 4 : 5 ))  # ZeRO-3, step placement: (4 G/2 + P) / (4 G + P) = 3/5
      if [ -n "$b16" ] && [ -n "$b32" ] && [ $((b16 * num)) = $((b32 * 3)) ]; then
        echo "OK   zero-stage $z --reduce-dtype bf16 moves 3/$num of fp32's bytes ($b16 vs $b32 B/step)"
      else echo "FAIL zero-stage $z --reduce-dtype bf16 $b16 B/step vs fp32 $b32"; failed=1; fi
    done
    ;;
  bad)
    expect2() {  # expect2 NAME REGEX NPROC ARGS...
      local name="$1" regex="$2" n="$3"; shift 3
      local out rc=0
      out="$(run_ranks "$n" gloo "$pw" "$@" 2>&1)" || rc=$?
      if [ "$rc" = 2 ] && grep -qE -- "$regex" <<<"$out"; then echo "OK   bad $name"
      else echo "FAIL bad $name (exit $rc): $out"; failed=1; fi
    }
    expect2 "zero with a local-step algorithm" "--zero-stage.*--dp-algorithm|--dp-algorithm.*--zero-stage" 2 \
      "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 4 --zero-stage 1 --dp-algorithm localsgd
    # A checkpoint of ZeRO-1 resumed as ZeRO-2 or as DDP, or with another model: exit 2 naming
    # the stage and the tensor (before the generic "another configuration").
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 4 --zero-stage 1 \
      --checkpoint-dir "$work/ck"
    expect2 "checkpoint of another zero stage" \
      "stage 0: optimizer state 'stage0.optimizer' is a ZeRO-1 shard \(--zero-stage 1\), this run has --zero-stage 2" 2 \
      "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 6 --lr-decay-steps 4 --zero-stage 2 \
      --checkpoint-dir "$work/ck" --resume
    expect2 "ZeRO checkpoint resumed as DDP" \
      "stage 0: optimizer state 'stage0.optimizer' is a ZeRO-1 shard \(--zero-stage 1\), this run has --zero-stage 0" 2 \
      "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 6 --lr-decay-steps 4 --zero-stage 0 \
      --checkpoint-dir "$work/ck" --resume
    expect2 "ZeRO-1 checkpoint resumed as ZeRO-3" \
      "stage 0: optimizer state 'stage0.optimizer' is a ZeRO-1 shard \(--zero-stage 1\), this run has --zero-stage 3" 2 \
      "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 6 --lr-decay-steps 4 --zero-stage 3 \
      --checkpoint-dir "$work/ck" --resume
    run_ranks 2 gloo "$pw" "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 4 --zero-stage 3 \
      --checkpoint-dir "$work/ck3"
    expect2 "ZeRO-3 checkpoint resumed as ZeRO-2" \
      "stage 0: optimizer state 'stage0.optimizer' is a ZeRO-3 shard \(--zero-stage 3\), this run has --zero-stage 2" 2 \
      "${common[@]}" --pp 1 --dp 2 --batch-size 4 --steps 6 --lr-decay-steps 4 --zero-stage 2 \
      --checkpoint-dir "$work/ck3" --resume
    sed 's/"out_features": 16/"out_features": 12/; s/"in_features": 16/"in_features": 12/' \
      "$data/mlp.json" > "$work/mlp12.json"
    other=(); for a in "${common[@]}"; do [ "$a" = "$data/mlp.json" ] && a="$work/mlp12.json"; other+=("$a"); done
    expect2 "ZeRO checkpoint of another model" \
      "stage 0: tensor 'stage0.param0' has shape \[16, 8\] Float, the model has \[12, 8\] Float" 2 \
      "${other[@]}" --pp 1 --dp 2 --batch-size 4 --steps 6 \
      --lr-decay-steps 4 --zero-stage 1 --checkpoint-dir "$work/ck" --resume
    expect2 "ZeRO-3 checkpoint of another model" \
      "stage 0: tensor 'dp.param_shard.stage0' has shape \[[0-9]+\] Float, this run's parameter shard has \[[0-9]+\] Float" 2 \
      "${other[@]}" --pp 1 --dp 2 --batch-size 4 --steps 6 \
      --lr-decay-steps 4 --zero-stage 3 --checkpoint-dir "$work/ck3" --resume
    # The same at another dp (re-sharding on load reads every saved shard first): dp 2 -> 1 would
    # run without ZeRO, so dp 2 -> dp 4 with the same global batch of 8.
    expect2 "ZeRO-3 checkpoint of another model, resumed at another dp" \
      "stage 0: tensor 'dp.param_shard.stage0'" 4 \
      "${other[@]}" --pp 1 --dp 4 --batch-size 2 --steps 6 \
      --lr-decay-steps 4 --zero-stage 3 --checkpoint-dir "$work/ck3" --resume
    ;;
  *) echo "unknown case $what"; exit 2;;
esac
exit $failed
