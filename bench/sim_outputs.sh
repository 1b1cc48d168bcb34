#!/usr/bin/env bash
# Writes the outputs of a fixed set of `pipewright simulate` / `compare` runs into DIR, so that
# a refactoring of the simulator can be checked byte for byte:
#   bench/sim_outputs.sh build-minimal/bin/pipewright /tmp/before
#   ... change the simulator, rebuild ...
#   bench/sim_outputs.sh build-minimal/bin/pipewright /tmp/after && diff -r /tmp/before /tmp/after
# Each run writes NAME.out (stdout + stderr + exit code) and, where it succeeds, its metrics,
# trace and timeline files.
set -u
bin=${1:?usage: sim_outputs.sh PIPEWRIGHT_BIN OUT_DIR}
out=${2:?usage: sim_outputs.sh PIPEWRIGHT_BIN OUT_DIR}
mkdir -p "$out"
run() {  # NAME ARGS...
  local name=$1
  shift
  # Log lines carry the wall clock and the output folder: both are dropped.
  "$bin" "$@" >"$out/$name.raw" 2>&1
  echo "exit $?" >>"$out/$name.raw"
  sed -E -e 's/^\[[0-9:.]+\] //' -e "s|$out/|OUT/|g" "$out/$name.raw" >"$out/$name.out"
  rm "$out/$name.raw"
}
sim() {  # NAME ARGS... (simulate with every output file)
  local name=$1
  shift
  run "$name" simulate "$@" --metrics "$out/$name.metrics.json" --trace "$out/$name.trace.json" \
    --timeline "$out/$name.svg" --text-timeline 100
}
costs=(--forward-ms 1 --backward-ms 2)
for p in 2 3 4; do
  for s in GPipe 1F1B; do
    sim "$s-p$p" --schedule "$s" --pp "$p" --microbatches $((2 * p)) "${costs[@]}"
    sim "$s-p$p-p2p" --schedule "$s" --pp "$p" --microbatches $((2 * p)) "${costs[@]}" \
      --p2p-ms 0.25 --steps 2
  done
  for s in Interleaved1F1B InterleavedZeroBubble; do
    sim "$s-p$p" --schedule "$s" --pp "$p" --microbatches $((2 * p)) -v 2 "${costs[@]}"
    sim "$s-p$p-w" --schedule "$s" --pp "$p" --microbatches $((2 * p)) -v 2 \
      --forward-ms 1 --backward-ms 2 --weight-ms 0.75 --p2p-ms 0.1 --recv blocking
  done
done
model=(--model examples/gpt-small.json --cluster examples/cluster-2x8-ib.json)
for a in ddp slowmo localsgd; do
  sim "gpt-1f1b-dp2-$a" --schedule 1F1B --pp 4 --microbatches 8 "${model[@]}" --dp 2 \
    --dp-algorithm "$a" --steps 2
  sim "gpt-i1f1b-dp2-$a" --schedule Interleaved1F1B --pp 2 -v 2 --microbatches 4 \
    "${model[@]}" --dp 2 --dp-algorithm "$a" --reduce-grad
done
sim gpt-cpu --schedule 1F1B --pp 4 --microbatches 8 --model examples/gpt-small.json \
  --cluster examples/cluster-cpu-localhost.json
prof=tests/data/sim/profile_p2.json
sim profile-1f1b --schedule 1F1B --pp 2 --microbatches 4 --profile "$prof"
sim profile-sampled --schedule 1F1B --pp 2 --microbatches 4 --profile "$prof" --sampled-steps 7
sim profile-izb --schedule InterleavedZeroBubble --pp 2 -v 2 --microbatches 4 --profile "$prof" \
  --sampled-steps 5
sim profile-cpu --schedule 1F1B --pp 2 --microbatches 4 --profile "$prof" \
  --cluster examples/cluster-cpu-localhost.json
cprof=tests/data/compare/profile_p2.json
sim cprofile --schedule 1F1B --pp 2 --microbatches 2 --profile "$cprof" --sampled-steps 5
run compare compare --plan tests/data/compare/plan_p2m2.csv --measured tests/data/compare/trace_3ranks.json
run compare-profile compare --plan tests/data/compare/plan_p2m2.csv \
  --measured tests/data/compare/trace_3ranks.json --profile "$cprof"
run deadlock simulate --schedule 1F1B --pp 2 --microbatches 2 "${costs[@]}" --steps 0
# A measured trace: the simulator's own, compared back against its plan.
"$bin" schedule 1F1B -p 2 -m 4 --lower -o "$out/plan-1f1b-p2.csv" >/dev/null 2>&1
sim measured --schedule 1F1B --pp 2 --microbatches 4 "${costs[@]}" --steps 3
run compare-self compare --plan "$out/plan-1f1b-p2.csv" --measured "$out/measured.trace.json" \
  --sampled-steps 0
run compare-replay compare --plan "$out/plan-1f1b-p2.csv" --measured "$out/measured.trace.json" \
  --trace-replay
# Plans, lowering, rendering, validation and deadlock reports (sched/).
for s in GPipe 1F1B Interleaved1F1B LoopedBFS InterleavedZeroBubble; do
  for p in 2 3 4; do
    v=1
    case $s in Interleaved* | LoopedBFS) v=2 ;; esac
    for f in csv text dot; do
      run "sched-$s-p$p-$f" schedule "$s" -p "$p" -m $((2 * p)) -v "$v" -f "$f"
      run "sched-$s-p$p-lowered-$f" schedule "$s" -p "$p" -m $((2 * p)) -v "$v" -f "$f" --lower \
        --reduce-grad --optimizer-step
    done
  done
done
run sched-dag schedule 1F1B -p 4 -m 4 --edges 0:1,0:2,1:3,2:3 --lower -f text
run sched-dag-dot schedule 1F1B -p 4 -m 4 --edges 0:1,0:2,1:3,2:3 -f dot
run sched-dag-dot-lowered schedule 1F1B -p 4 -m 4 --edges 0:1,0:2,1:3,2:3 -f dot --lower
sim sim-skip --schedule 1F1B --pp 4 --microbatches 4 --model examples/skip.json
sim sim-skip-g --schedule GPipe --pp 4 --microbatches 4 --model examples/skip.json \
  --p2p-ms 0.5
for f in tests/data/sched/*.csv tests/data/sched/*.json tests/data/compare/plan_p2m2.csv; do
  n=$(basename "$f")
  for t in buffered rendezvous; do run "validate-$t-$n" validate "$f" -t "$t"; done
  run "simulate-$n" simulate "$f" "${costs[@]}"
done
