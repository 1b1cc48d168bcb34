#!/usr/bin/env bash
# Multi-node tests on a network-namespace cluster (issue 23, label netns; tools/netns-cluster):
# every "node" is a network namespace with its own address, joined to the others by a bridge over
# tc-shaped veth links. Needs root: exits 77 (skipped) otherwise. Everything it creates is
# removed on exit (trap), including every process left inside the namespaces.
#   netns_mp.sh PIPEWRIGHT COMPARE DATA_DIR WORK_DIR CASE
# CASE:
#   gloo-2x1 / gloo-2x2   `pipewright launch --nnodes 2` on each node, pp=2 (and pp=2 x dp=2 DDP):
#                         weights within 1e-5 of one process
#   mpi-2x1 / mpi-2x2     the same `run` under mpirun --host pwnode0:P,pwnode1:P (Open MPI starts
#                         node 1's daemon with tools/netns-cluster as its rsh agent)
#   slurm                 Slurm simulated with its variables: `srun pipewright launch` (master from
#                         SLURM_JOB_NODELIST=pwnode[0-1], node from SLURM_NODEID) and
#                         `srun pipewright run` (one task per rank, no launcher); a conflict
#                         between --node-rank and SLURM_NODEID exits 2 naming both
#   calibrate             `calibrate --worker --network` on 2 nodes x 2 ranks over a 100 Mbit/s link:
#                         the cluster JSON has 2 nodes of 2 ranks, an inter-node bandwidth within
#                         15% of the shaped rate and far below the intra-node one, ZeRO's
#                         all-reduce, reduce-scatter and all-gather timed over one rank per node
#                         and fitted as inter-node links (within 20% of the shaped rate; the
#                         sharded ones inter-node only), and simulate reads it
#   fault-link            node 1's link goes down mid-run: every rank on both nodes ends within
#                         --timeout + 10 s, the launchers name the lost node
#   fault-kill            every process of node 1 killed: node 0's ranks end within 5 s, node 1
#                         named
#   zero-2x2              ZeRO across the nodes (issue 43; Note [TCP ring collectives]): the dp
#                         groups' reduce-scatter and all-gather run as the TCP ring between hosts
#                         (no shared memory across nodes). dp 4 (a ring of 4 with two node-crossing
#                         hops) and pp 2 x dp 2 (each dp group on both nodes): --zero-stage 1 and 3
#                         end with the weights of --zero-stage 0 (1e-6), and every stage's DP bytes
#                         per step (the "data-parallel" line) equal those of the same job on one host
set -euo pipefail
pw="$1"; cmp="$2"; data="$3"; work="$4"; what="$5"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cluster="$here/../../tools/netns-cluster"
if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root to create network namespaces (CI runs as root)"; exit 77; fi
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then echo "SKIP: needs ip and tc (iproute2)"; exit 77; fi
# The namespace names are global: hold the lock that bench/fidelity.sh and the other users of
# tools/netns-cluster take (ctest's RESOURCE_LOCK pw_netns orders only the tests of one ctest).
exec 9>/tmp/pw_netns.lock
if ! flock -w 200 9; then
  echo "SKIP: /tmp/pw_netns.lock stayed held for 200 s (another job is using the namespaces)"
  exit 77
fi
mkdir -p "$work"
work="$(mktemp -d "$work/netns.$what.XXXXXX")"
cleanup() { "$cluster" down || true; rm -rf "$work"; }
trap cleanup EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rate=1gbit; [ "$what" = calibrate ] && rate=100mbit
"$cluster" up 2 --rate "$rate" >/dev/null
node() { local k="$1"; shift; timeout 150 "$cluster" exec "$k" "$@"; }
m0="$(${cluster} addr 0)"
port=$(( 20000 + (RANDOM % 12000) ))
train=(run --model "$data/mlp.json" --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy"
        --loss mse --optimizer sgd --lr 0.05 --momentum 0.9 --seed 3 --no-shuffle)
common=(--log-level warn "${train[@]}" --steps 5)
failed=0
check() {  # check NAME A B
  if "$cmp" "$2" "$3" 1e-5; then echo "OK   $1"; else echo "FAIL $1"; failed=1; fi
}
# The job shapes: 2x1 is pp=2; 2x2 is pp=2 x dp=2 (ranks 0,1 on node 0; the dp groups cross nodes).
job_args() {  # job_args 1|2 -> the run flags of a job with that many ranks per node
  if [ "$1" = 1 ]; then echo "--pp 2 --dp 1 --batch-size 8 --microbatches 4 --schedule 1F1B"
  else echo "--pp 2 --dp 2 --batch-size 4 --microbatches 2 --schedule 1F1B --bucket-cap-mb 0.0001"; fi
}
reference() {  # one process, the same global batch
  "$pw" "${common[@]}" --backend gloo --timeout 60 --pp 1 --dp 1 --batch-size 8 --microbatches 1 \
    --save "$work/ref.safetensors"
}
launch_both() {  # launch_both P EXTRA_LAUNCH_FLAGS... -- RUN ARGS: one launcher per node
  local p="$1"; shift
  local pre=() ; while [ "$1" != -- ]; do pre+=("$1"); shift; done; shift
  node 1 "$pw" launch --nnodes 2 --node-rank 1 --nproc-per-node "$p" --master-addr "$m0" \
    --master-port "$port" "${pre[@]}" -- "$pw" "$@" > "$work/node1.log" 2>&1 &
  local n1=$! rc=0
  node 0 "$pw" launch --nnodes 2 --node-rank 0 --nproc-per-node "$p" --master-addr "$m0" \
    --master-port "$port" "${pre[@]}" -- "$pw" "$@" > "$work/node0.log" 2>&1 || rc=$?
  wait "$n1" || rc=$((rc == 0 ? $? : rc))
  if [ "$rc" != 0 ]; then cat "$work/node0.log" "$work/node1.log"; fi
  return "$rc"
}
mpi_run() {  # mpi_run P RUN ARGS: mpirun started on node 0, node 1's daemon through the agent
  local p="$1"; shift
  node 0 mpirun --allow-run-as-root --oversubscribe -np $((2 * p)) --host "pwnode0:$p,pwnode1:$p" \
    --mca plm_rsh_agent "$cluster mpi-agent" --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 \
    --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS "$pw" "$@"
}
# Exit status and seconds of a background launcher (waits at most $2 s).
wait_for() {  # wait_for PID LIMIT_S -> sets rc, took
  local pid="$1" limit="$2" start; start=$(date +%s.%N)
  rc=""
  while kill -0 "$pid" 2>/dev/null; do
    if (( $(echo "$(date +%s.%N) - $start > $limit" | bc) )); then rc=timeout; break; fi
    sleep 0.1
  done
  [ -z "$rc" ] && { wait "$pid" && rc=0 || rc=$?; }
  took=$(echo "$(date +%s.%N) - $start" | bc)
}
no_leftovers() {
  local k
  for k in 0 1; do
    if [ -n "$(ip netns pids "pwnode$k")" ]; then echo "FAIL processes left on node $k"; failed=1; fi
  done
}

case "$what" in
  gloo-2x1|gloo-2x2)
    p="${what#gloo-2x}"
    reference
    # shellcheck disable=SC2046
    launch_both "$p" -- "${common[@]}" --backend gloo --timeout 60 $(job_args "$p") \
      --save "$work/w.safetensors" || { echo "FAIL launch"; exit 1; }
    grep -q . "$work/node0.log" && cat "$work/node0.log" || true
    check "gloo 2 nodes x $p procs ($(job_args "$p"))" "$work/ref.safetensors" "$work/w.safetensors"
    ;;
  mpi-2x1|mpi-2x2)
    p="${what#mpi-2x}"
    reference
    # shellcheck disable=SC2046
    mpi_run "$p" "${common[@]}" --backend mpi --timeout 60 $(job_args "$p") --save "$work/w.safetensors" \
      || { echo "FAIL mpirun"; exit 1; }
    check "mpi 2 nodes x $p procs ($(job_args "$p"))" "$work/ref.safetensors" "$work/w.safetensors"
    ;;
  slurm)
    reference
    slurm=(SLURM_JOB_ID=1 SLURM_JOB_NODELIST='pwnode[0-1]' SLURM_JOB_NUM_NODES=2 MASTER_PORT="$port")
    # srun pipewright launch ...: one launcher per node, everything else from Slurm.
    # shellcheck disable=SC2046
    for k in 1 0; do
      node "$k" env "${slurm[@]}" SLURM_NODEID=$k SLURM_PROCID=$k SLURM_NTASKS=2 SLURM_LOCALID=0 \
        "$pw" launch --nproc-per-node 2 --master-port "$port" -- "$pw" "${common[@]}" --backend gloo \
        --timeout 60 $(job_args 2) --save "$work/launch.safetensors" > "$work/slurm$k.log" 2>&1 &
    done
    rc=0; wait || rc=$?
    wait; [ "$rc" = 0 ] || cat "$work"/slurm*.log
    check "slurm: srun pipewright launch (2 nodes x 2)" "$work/ref.safetensors" "$work/launch.safetensors"
    # srun pipewright run ...: one Slurm task per rank, no launcher.
    port=$((port + 2))
    pids=()
    for r in 0 1 2 3; do
      k=$((r / 2))
      # shellcheck disable=SC2046
      node "$k" env SLURM_JOB_ID=1 SLURM_JOB_NODELIST='pwnode[0-1]' SLURM_JOB_NUM_NODES=2 \
        SLURM_NODEID=$k SLURM_PROCID=$r SLURM_NTASKS=4 SLURM_LOCALID=$((r % 2)) \
        SLURM_TASKS_PER_NODE='2(x2)' MASTER_PORT="$port" \
        "$pw" "${common[@]}" --backend gloo --timeout 60 $(job_args 2) \
        --save "$work/run.safetensors" > "$work/srun$r.log" 2>&1 &
      pids+=($!)
    done
    rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    [ "$rc" = 0 ] || cat "$work"/srun*.log
    check "slurm: srun pipewright run (4 tasks on 2 nodes)" "$work/ref.safetensors" "$work/run.safetensors"
    # A flag and Slurm that disagree: exit 2 naming both.
    out="$(node 1 env "${slurm[@]}" SLURM_NODEID=1 "$pw" launch --node-rank 0 -- true 2>&1)" && rc=0 || rc=$?
    if [ "$rc" = 2 ] && grep -q -- "--node-rank 0 but SLURM_NODEID=1 (Slurm)" <<<"$out"; then
      echo "OK   slurm: conflicting node rank names both"
    else echo "FAIL slurm conflict (exit $rc): $out"; failed=1; fi
    ;;
  calibrate)
    launch_both 2 -- --log-level info calibrate --worker --network --max-mib 0.25 --iterations 10 \
      -o "$work/cluster.json" || { echo "FAIL calibrate"; exit 1; }
    grep -E "between node|within node" "$work/node0.log" || true
    if python3 - "$work/cluster.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
inter, intra = c["inter_node"]["bandwidth_gb_per_s"], c["intra_node"]["bandwidth_gb_per_s"]
pairs = json.loads(json.dumps(c["calibration"]))["pairs"]
print(f"inter-node {inter * 8e3:.1f} Mbit/s (shaped at 100), intra-node {intra * 8e3:.0f} Mbit/s, {len(pairs)} pairs")
ok = (c["nodes"] == 2 and c["ranks_per_node"] == 2 and len(pairs) == 3
      and abs(inter - 0.0125) / 0.0125 < 0.15 and intra > 3 * inter)
# ZeRO's collectives over every rank span the nodes: inter-node links only (issues 43/47).
sharded = c.get("sharded_collective_links", {})
print("sharded collective links:", {k: v for k, v in sharded.items()})
ok = ok and sorted(sharded) == ["all_gather", "all_gather_unregistered", "reduce_scatter",
                                "reduce_scatter_unregistered"]
ok = ok and all(list(v) == ["inter_node"] for v in sharded.values())
# Timed over one rank per node (Note [Sharded calibration across nodes]) and fitted as a link
# (Note [Link fit of sharded collectives]): the shaped rate, not a 4-rank ring's per-step costs.
timed = c["calibration"]["sharded_collectives"]
print("sharded timings over", {k: v["ranks"] for k, v in timed.items()}, "ranks")
ok = ok and all(v["ranks"] == 2 for v in timed.values())
ok = ok and all(abs(v["inter_node"]["bandwidth_gb_per_s"] - 0.0125) / 0.0125 < 0.2
                for v in sharded.values())
# So is the all-reduce, the collective link across nodes.
coll = c["collective_links"]["inter_node"]["bandwidth_gb_per_s"]
print(f"all-reduce over {c['calibration']['allreduce_ranks']} ranks: {coll * 8e3:.1f} Mbit/s")
ok = ok and c["calibration"]["allreduce_ranks"] == 2 and abs(coll - 0.0125) / 0.0125 < 0.2
# Note [Compute beside a send, measured]: rank 0 probed beside its 2-10 ms messages to node 1
# (64 KiB at 100 Mbit/s), and the cluster's send_cpu_load is the slowdown (absent when 0).
beside = [p["beside_send"] for p in pairs if p["node_a"] != p["node_b"]]
print("compute beside a send:", beside, "send_cpu_load", c.get("send_cpu_load", 0))
ok = ok and len(beside) == 1 and beside[0]["samples"] >= 5 and beside[0]["bytes"] == 65536
ok = ok and abs(c.get("send_cpu_load", 0) - beside[0]["cpu_load"]) < 1e-9
sys.exit(0 if ok else 1)
PY
    then echo "OK   calibrate --network"; else echo "FAIL calibrate --network"; failed=1; fi
    if "$pw" simulate --model "$data/mlp.json" --pp 2 --dp 2 --microbatches 2 --cluster "$work/cluster.json" \
        > "$work/sim.txt" 2>&1; then echo "OK   simulate reads the calibrated cluster"
    else echo "FAIL simulate --cluster"; cat "$work/sim.txt"; failed=1; fi
    ;;
  fault-link|fault-kill)
    T=10
    for k in 1 0; do
      node "$k" "$pw" launch --nnodes 2 --node-rank "$k" --nproc-per-node 1 --master-addr "$m0" \
        --master-port "$port" -- "$pw" --log-level info "${train[@]}" --backend gloo \
        --timeout "$T" --pp 2 --batch-size 8 --microbatches 4 --steps 1000000 > "$work/node$k.log" 2>&1 &
      eval "pid$k=$!"
    done
    # Training is under way once rank 0 has logged a few steps (at most 60 s).
    for _ in $(seq 600); do
      [ "$(grep -c 'step' "$work/node0.log" || true)" -ge 3 ] && break
      sleep 0.1
    done
    if [ "$what" = fault-link ]; then
      "$cluster" link 1 down
      limit=$((T + 10))
    else
      # shellcheck disable=SC2046
      kill -9 $(ip netns pids pwnode1)
      limit=5
    fi
    wait_for "$pid0" "$limit"; rc0=$rc; took0=$took
    if [ "$rc0" != timeout ] && [ "$rc0" != 0 ] && grep -q "pipewright launch: node 1 lost" "$work/node0.log"; then
      echo "OK   $what: node 0 ended in ${took0}s (limit ${limit}s), exit $rc0, naming node 1"
    else
      echo "FAIL $what: node 0: exit $rc0 after ${took0}s"; tail -5 "$work/node0.log"; failed=1
    fi
    if [ "$what" = fault-link ]; then
      wait_for "$pid1" 5; rc1=$rc
      if [ "$rc1" != timeout ] && [ "$rc1" != 0 ] && grep -q "pipewright launch: node 0 lost" "$work/node1.log"; then
        echo "OK   $what: node 1 ended (exit $rc1), naming node 0"
      else echo "FAIL $what: node 1: exit $rc1"; tail -5 "$work/node1.log"; failed=1; fi
    else
      wait "$pid1" 2>/dev/null || true
    fi
    sleep 0.5
    no_leftovers
    ;;
  zero-2x2)
    zero=(--log-level info run --model "$data/mlp.json" --data-x "$data/mlp_x.npy"
          --data-y "$data/mlp_y.npy" --loss mse --optimizer adamw --lr 0.01 --weight-decay 0.01
          --seed 3 --no-shuffle --steps 5 --backend gloo --timeout 60)
    wire() { grep -oE 'data-parallel \([^)]*\): [^(]*\(([0-9]+) B/step\)' "$1" | grep -oE '[0-9]+ B/step' |
             grep -oE '[0-9]+' | head -n 1; }
    for shape in "--pp 1 --dp 4 --batch-size 8 --microbatches 2 --bucket-cap-mb 0.0001" \
                 "--pp 2 --dp 2 --batch-size 8 --microbatches 4 --schedule 1F1B"; do
      for z in 0 1 3; do
        # shellcheck disable=SC2086
        launch_both 2 -- "${zero[@]}" $shape --zero-stage "$z" --save "$work/z$z.safetensors" ||
          { echo "FAIL launch zero-stage $z ($shape)"; exit 1; }
        multi="$(wire "$work/node0.log")"
        # The same job on this host (127.0.0.1, outside the namespaces).
        # shellcheck disable=SC2086
        timeout 150 "$pw" launch --nproc 4 -- "$pw" "${zero[@]}" $shape --zero-stage "$z" \
          > "$work/local.log" 2>&1 || { cat "$work/local.log"; echo "FAIL local zero-stage $z"; exit 1; }
        local_bytes="$(wire "$work/local.log")"
        if [ -n "$multi" ] && [ "$multi" = "$local_bytes" ]; then
          echo "OK   zero-stage $z ($shape): $multi DP B/step across nodes, as on one host"
        else echo "FAIL zero-stage $z ($shape): $multi DP B/step across nodes, $local_bytes on one host"; failed=1; fi
      done
      for z in 1 3; do
        if "$cmp" "$work/z0.safetensors" "$work/z$z.safetensors" 1e-6; then
          echo "OK   zero-stage $z == 0 across 2 nodes x 2 ($shape)"
        else echo "FAIL zero-stage $z != 0 across 2 nodes x 2 ($shape)"; failed=1; fi
      done
    done
    ;;
  *) echo "unknown case $what"; exit 2;;
esac
exit $failed
