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
# step ms (steps after the first 4), measured mean step ms (steps after the first 8: whole
# periods, syncs included), simulated step ms (makespan / steps; localhost cluster), simulated
# step ms on the slow link. Keep STEPS a multiple of 8 (the longest period below), >= 16;
# default 16.
#
#   NETNS=1 RATE=100mbit flock /tmp/pw_netns.lock bench/dp_algorithms.sh [PIPEWRIGHT_BIN] [STEPS]
# (root) measures on a shaped 2-node link instead: two network-namespace nodes
# (tools/netns-cluster) joined at RATE, 2 ranks each (dp = 4: ranks 0, 1 on node 0, ranks 2, 3
# on node 1), one `pipewright launch` per node as in bench/netns_fidelity.sh; the link is
# calibrated with `pipewright calibrate --worker --network` and sim_ms is simulated on that
# calibrated cluster JSON. Hold /tmp/pw_netns.lock: namespace names are global.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin/pipewright}"
steps="${2:-16}"
work="$(mktemp -d /tmp/pw_dp_algos.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
cluster_json="$root/examples/cluster-cpu-localhost.json"
netns="$root/tools/netns-cluster"
if [ "${NETNS:-0}" = 1 ]; then
  trap '"$netns" down; rm -rf "$work"' EXIT
  "$netns" up 2 --rate "${RATE:-100mbit}" >&2
  m0="$("$netns" addr 0)"
  port=$(( 20000 + (RANDOM % 12000) ))
fi
# job LOG ARGS...: `pipewright ARGS` on 4 ranks (one launcher here, or one per namespace node);
# rank 0's output in LOG.
job_on_4() {
  local log="$1"; shift
  if [ "${NETNS:-0}" != 1 ]; then
    timeout 600 "$bin" launch --nproc 4 -- "$bin" "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
    return
  fi
  port=$((port + 2))
  timeout 600 "$netns" exec 1 "$bin" launch --nnodes 2 --node-rank 1 --nproc-per-node 2 \
    --master-addr "$m0" --master-port "$port" -- "$bin" "$@" >"$log.1" 2>&1 &
  local n1=$!
  timeout 600 "$netns" exec 0 "$bin" launch --nnodes 2 --node-rank 0 --nproc-per-node 2 \
    --master-addr "$m0" --master-port "$port" -- "$bin" "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
  wait "$n1" || { cat "$log.1"; exit 1; }
}

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

if [ "${NETNS:-0}" = 1 ]; then
  job_on_4 "$work/cal.log" --log-level info calibrate --worker --network --max-mib 4 \
    --iterations 10 -o "$work/cluster.json"
  grep -E "between node|within node" "$work/cal.log" | sed 's/^\[rank 0\] //' >&2
  # Each namespace node has one link, which both of its ranks' collectives cross (as
  # bench/fidelity.sh says of its shaped cluster): Note [Concurrent syncs on shared links].
  /usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["links_per_node"] = 1; json.dump(c, open(sys.argv[1], "w"))' \
    "$work/cluster.json"
  cluster_json="$work/cluster.json"
fi

job=(--model "$work/mlp.json" --pp 1 --dp 4 --batch-size 32 --microbatches 1 --steps "$steps"
     --optimizer sgd --lr 0.01 --momentum 0.9)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-34s %12s %12s %10s %10s %10s %12s\n' algorithm meas_bytes sim_bytes meas_med meas_mean \
  sim_ms sim_slow_ms
while IFS='|' read -r name flags; do
  read -r -a f <<<"$flags"
  job_on_4 "$work/run.log" run "${job[@]}" --loss mse --data-x "$work/x.npy" \
    --data-y "$work/y.npy" --no-shuffle --backend gloo --timeout 300 "${f[@]}"
  log="$(cat "$work/run.log")"
  all_ms="$(grep -E '^\[rank 0\].*step [0-9]+/[0-9]+ ' <<<"$log" | sed -E 's/.* step ([0-9.]+) ms.*/\1/')"
  ms="$(tail -n +5 <<<"$all_ms" | median)"
  # The mean over whole periods (steps after the first 8) counts the periodic syncs that the
  # median skips; it is what the simulated makespan / steps compares with.
  mean_ms="$(tail -n +9 <<<"$all_ms" | awk '{s += $1} END {if (NR) print s / NR; else print "nan"}')"
  bytes="$(grep -E '^\[rank 0\].*data-parallel' <<<"$log" | sed -E 's/.*\(([0-9.]+) B\/step\).*/\1/')"
  sim="$("$bin" simulate "${job[@]}" "${f[@]}" --cluster "$cluster_json" 2>&1)"
  sim_bytes="$(grep -E '^data-parallel' <<<"$sim" | sed -E 's/.*\(([0-9.]+) B\/step\).*/\1/')"
  sim_ms="$(grep -E '^makespan' <<<"$sim" | sed -E 's/makespan ([0-9.]+) ms.*/\1/')"
  slow="$("$bin" simulate "${job[@]}" "${f[@]}" --cluster "$work/slow.json" 2>&1)"
  slow_ms="$(grep -E '^makespan' <<<"$slow" | sed -E 's/makespan ([0-9.]+) ms.*/\1/')"
  awk -v n="$name" -v b="$bytes" -v sb="$sim_bytes" -v m="$ms" -v mm="$mean_ms" -v s="$sim_ms" \
    -v sl="$slow_ms" -v k="$steps" 'BEGIN { printf "%-34s %12.0f %12.0f %10.2f %10.2f %10.2f %12.2f\n",
                                          n, b, sb, m, mm, s / k, sl / k }'
done <<'ALGOS'
ddp|--dp-algorithm ddp
localsgd(every 4)|--dp-algorithm localsgd --localsgd-frequency 4
slowmo(avg 4, slow 8)|--dp-algorithm slowmo --localsgd-frequency 4 --slowmo-frequency 8
sgp|--dp-algorithm sgp
diloco(H 8)|--dp-algorithm diloco --sync-every 8
streaming diloco(H 8, K 2, tau 1)|--dp-algorithm diloco --sync-every 8 --fragments 2
streaming diloco(H 8, K 2, bf16)|--dp-algorithm diloco --sync-every 8 --fragments 2 --outer-dtype bf16
ALGOS
