#!/usr/bin/env bash
# Simulator fidelity across a shaped link (issue 23; root): two network-namespace nodes
# (tools/netns-cluster) joined at RATE (default 100mbit; netem delay only where the kernel has
# it), calibrated with `pipewright calibrate --worker --network`; then GPipe and 1F1B at pp=2
# (2 nodes x 1 rank: every activation and gradient crosses the link) and pp=2 x dp=2 (2 x 2:
# the DDP all-reduces cross it) are run with --trace/--profile, and `pipewright simulate`
# predicts each from its profile's compute costs and the calibrated cluster (the profile's own
# p2p figure is removed, so every message is priced by the cluster's links): simulated_ms is the
# makespan with median durations, sampled_ms the median of 31 steps whose compute durations are
# drawn from the profile's measured distributions (simulate --sampled-steps; docs/simulator.md);
# compare_pred/meas is `pipewright compare` on the same profile, cluster and the run's trace.
#   sudo bench/netns_fidelity.sh [BUILD_DIR]     RATE=100mbit STEPS=12 WARMUP=2 M=8
#   KEEP=1 ...             keep the work folder (logs, plans, profiles, traces, clusters)
#   CORES_PER_NODE=N ...   the cores of each namespace node for the simulator; default: the
#                          host's CPUs / 2, since the 2 nodes share this machine's cores
#                          (calibrate reports each process's affinity: the whole host; profiles
#                          recover dedicated-core times per machine, by the kernel's boot_id)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
cluster="$root/tools/netns-cluster"
rate="${RATE:-100mbit}"; steps="${STEPS:-12}"; warmup="${WARMUP:-2}"; m="${M:-8}"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
work="$(mktemp -d /tmp/pw_netns_fidelity.XXXXXX)"
# KEEP=1 keeps the work folder (plans, logs, profiles, traces, calibrated cluster) and names it.
if [ -n "${KEEP:-}" ]; then
  trap '"$cluster" down; echo "kept $work" >&2' EXIT
else
  trap '"$cluster" down; rm -rf "$work"' EXIT
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$cluster" up 2 --rate "$rate" >&2
m0="$("$cluster" addr 0)"
port=$(( 20000 + (RANDOM % 12000) ))
both() {  # both P LOG ARGS...: one launcher per node
  local p="$1" log="$2"; shift 2
  port=$((port + 2))
  timeout 300 "$cluster" exec 1 "$pw" launch --nnodes 2 --node-rank 1 --nproc-per-node "$p" \
    --master-addr "$m0" --master-port "$port" -- "$pw" "$@" >"$log.1" 2>&1 &
  local n1=$!
  timeout 300 "$cluster" exec 0 "$pw" launch --nnodes 2 --node-rank 0 --nproc-per-node "$p" \
    --master-addr "$m0" --master-port "$port" -- "$pw" "$@" >"$log.0" 2>&1 || { cat "$log.0"; exit 1; }
  wait "$n1" || { cat "$log.1"; exit 1; }
}
"$pw" --log-level warn model gpt --layers 4 --hidden 128 --heads 4 --seq 64 --vocab 128 -o "$work/model.json"
"$pw" --log-level warn partition "$work/model.json" --stages 2 --method balanced -o "$work/part.json"
both 2 "$work/cal" --log-level info calibrate --worker --network --max-mib 1 --iterations 10 -o "$work/cluster.json"
grep -E "between node|within node" "$work/cal.0" | sed 's/^\[rank 0\] //' >&2
cores_per_node="${CORES_PER_NODE:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}"
if [ "$cores_per_node" != 0 ]; then
  "$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); c["cores_per_node"]=int(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))' \
    "$work/cluster.json" "$cores_per_node"
fi
# Each namespace node has one link (its veth pair): links_per_node 1, so transfers of a node's
# ranks across it share it (Note [Shared links]; calibrate measures pairs, not this). The
# calibration ran 2 ranks per node; the 2 x 1 runs place 1 per node (rank 1 on node 1), so their
# cluster says ranks_per_node 1 (with 2, the simulator would put both ranks on node 0 and price
# every activation on the unshaped loopback link).
"$py" - "$work" <<'PY'
import json, sys
c = json.load(open(f"{sys.argv[1]}/cluster.json"))
c["links_per_node"] = 1
json.dump(c, open(f"{sys.argv[1]}/cluster.2.json", "w"))
c["ranks_per_node"] = 1
json.dump(c, open(f"{sys.argv[1]}/cluster.1.json", "w"))
PY
printf "%-6s %-5s %-7s %12s %12s %8s %12s %8s %17s %8s\n" sched nodes "pp x dp" measured_ms simulated_ms \
  error% sampled_ms error% compare_pred/meas error%
for sched in GPipe 1F1B; do
  for p in 1 2; do
    dp=$p; pre="$work/$sched.$p"
    "$pw" --log-level warn schedule "$sched" -p 2 -m "$m" -o "$pre.plan.csv"
    both "$p" "$pre.log" --log-level info run --model "$work/model.json" --partition "$work/part.json" \
      --plan "$pre.plan.csv" --pp 2 --dp "$dp" --microbatches "$m" --batch-size $((4 * m)) \
      --steps "$steps" --warmup-steps "$warmup" --dataset sonnets --loss cross-entropy \
      --optimizer adamw --lr 1e-3 --seed 1 --timeout 120 --backend gloo \
      --profile "$pre.profile.json" --trace "$pre.trace.json"
    "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("p2p", None); json.dump(d, open(sys.argv[2], "w"))' \
      "$pre.profile.json" "$pre.noP2p.json"
    # Simulated: the plan with the profile's compute costs, every message and all-reduce priced by
    # the calibrated cluster (blocking receives, as the executor does).
    "$pw" --log-level warn simulate "$pre.plan.csv" \
      --dp "$dp" --microbatches "$m" --optimizer adamw --recv posted --profile "$pre.noP2p.json" \
      --cluster "$work/cluster.$p.json" --bucket-cap-mb 25 --sampled-steps 31 > "$pre.sim.txt"
    # compare: the same prediction (31 sampled steps) against the run's trace (median step over
    # every rank after warm-up).
    "$pw" --log-level warn compare --plan "$pre.plan.csv" \
      --dp "$dp" --microbatches "$m" --optimizer adamw --recv posted --profile "$pre.noP2p.json" \
      --cluster "$work/cluster.$p.json" --bucket-cap-mb 25 --measured "$pre.trace.json" \
      --warmup-steps "$warmup" > "$pre.compare.txt"
    "$py" - "$pre.log.0" "$pre.sim.txt" "$sched" "$p" "$dp" "$warmup" "$pre.compare.txt" <<'PY'
import re, statistics, sys
log, sim, sched, p, dp, warmup, cmp = sys.argv[1:]
steps = [float(x) for x in re.findall(r"\[rank 0\].*step \d+/\d+ loss \S+ step ([0-9.]+) ms", open(log).read())]
meas = statistics.median(steps[int(warmup):])
text = open(sim).read()
pred = float(re.search(r"makespan ([0-9.]+) ms", text).group(1))
sampled = float(re.search(r"sampled durations: ([0-9.]+) ms", text).group(1))
err = lambda x: 100 * (x - meas) / meas
c = re.search(r"predicted ([0-9.]+) ms, measured ([0-9.]+) ms", open(cmp).read())
cpred, cmeas = float(c.group(1)), float(c.group(2))
print(f"{sched:<6} {'2x' + p:<5} {'2 x ' + dp:<7} {meas:12.1f} {pred:12.1f} {err(pred):+8.1f} "
      f"{sampled:12.1f} {err(sampled):+8.1f} {cpred:8.1f}/{cmeas:<8.1f} {100 * (cpred - cmeas) / cmeas:+8.1f}")
PY
  done
done
