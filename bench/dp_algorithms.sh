#!/usr/bin/env bash
# DDP vs LocalSGD vs SlowMo vs SGP vs DiLoCo vs Streaming DiLoCo at dp = 4, pp = 1 (issue 24):
# data-parallel wire bytes per step and step time, measured (`pipewright run` under `pipewright
# launch`, Gloo on this machine) and simulated (`pipewright simulate` with the same job flags)
# side by side, then simulated on a 2-node cluster with a slow inter-node link
# (examples/cluster-2x8-ib.json with 2 ranks per node, the inter-node link slowed to 1 Gb/s and
# replica-major placement, so every all-reduce crosses it).
#
#   bench/dp_algorithms.sh [PIPEWRIGHT_BIN] [STEPS]
# Prints one row per algorithm: measured wire bytes/step, simulated bytes/step, measured median
# step ms (steps after the first 4), simulated step ms (localhost cluster), simulated step ms on
# the slow link. Keep STEPS a multiple of 8 (the longest period below); default 16.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin/pipewright}"
steps="${2:-16}"
work="$(mktemp -d /tmp/pw_dp_algos.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

"$bin" model mlp --sizes 256,512,512,256 --activation relu -o "$work/mlp.json" >/dev/null
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", rng.standard_normal((512, 256), dtype=np.float32))
np.save(sys.argv[1] + "/y.npy", rng.standard_normal((512, 256), dtype=np.float32))
PY
# A slow 2-node cluster: 1 Gb/s (0.125 GB/s) between nodes, replicas on different nodes.
/usr/bin/python3 - "$root/examples/cluster-2x8-ib.json" "$work/slow.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["name"] = "2x8-slow-1gbe"
c["description"] = "cluster-2x8-ib.json with a 1 Gb/s inter-node link, replicas across nodes"
c["inter_node"] = {"latency_ms": 0.05, "bandwidth_gb_per_s": 0.125}
c["ranks_per_node"] = 2
c["placement"] = "replica-major"
json.dump(c, open(sys.argv[2], "w"))
PY

job=(--model "$work/mlp.json" --pp 1 --dp 4 --batch-size 32 --microbatches 1 --steps "$steps"
     --optimizer sgd --lr 0.01 --momentum 0.9)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-34s %14s %14s %10s %10s %12s\n' algorithm meas_bytes sim_bytes meas_ms sim_ms sim_slow_ms
while IFS='|' read -r name flags; do
  read -r -a f <<<"$flags"
  log="$("$bin" launch --nproc 4 -- "$bin" run "${job[@]}" --loss mse --data-x "$work/x.npy" \
    --data-y "$work/y.npy" --no-shuffle --backend gloo "${f[@]}" 2>&1)"
  ms="$(grep -E '^\[rank 0\].*step [0-9]+/[0-9]+ ' <<<"$log" | sed -E 's/.* step ([0-9.]+) ms.*/\1/' |
    tail -n +5 | median)"
  bytes="$(grep -E '^\[rank 0\].*data-parallel' <<<"$log" | sed -E 's/[^(]*\(([0-9.]+) B\/step\).*/\1/')"
  sim="$("$bin" simulate "${job[@]}" "${f[@]}" --cluster "$root/examples/cluster-cpu-localhost.json" 2>&1)"
  sim_bytes="$(grep -E '^data-parallel' <<<"$sim" | sed -E 's/[^(]*\(([0-9.]+) B\/step\).*/\1/')"
  sim_ms="$(grep -E '^makespan' <<<"$sim" | sed -E 's/makespan ([0-9.]+) ms.*/\1/')"
  slow="$("$bin" simulate "${job[@]}" "${f[@]}" --cluster "$work/slow.json" 2>&1)"
  slow_ms="$(grep -E '^makespan' <<<"$slow" | sed -E 's/makespan ([0-9.]+) ms.*/\1/')"
  awk -v n="$name" -v b="$bytes" -v sb="$sim_bytes" -v m="$ms" -v s="$sim_ms" -v sl="$slow_ms" \
    -v k="$steps" 'BEGIN { printf "%-34s %14.0f %14.0f %10.2f %10.2f %12.2f\n", n, b, sb, m,
                           s / k, sl / k }'
done <<'ALGOS'
ddp|--dp-algorithm ddp
localsgd(every 4)|--dp-algorithm localsgd --localsgd-frequency 4
slowmo(avg 4, slow 8)|--dp-algorithm slowmo --localsgd-frequency 4 --slowmo-frequency 8
sgp|--dp-algorithm sgp
diloco(H 8)|--dp-algorithm diloco --sync-every 8
streaming diloco(H 8, K 2, tau 1)|--dp-algorithm diloco --sync-every 8 --fragments 2
streaming diloco(H 8, K 2, bf16)|--dp-algorithm diloco --sync-every 8 --fragments 2 --outer-dtype bf16
ALGOS
