#!/usr/bin/env bash
# `pipewright launch --nnodes 2` with both "nodes" on 127.0.0.1 (no root needed; the real network
# is tests/exec/netns_mp.sh): the variables each rank gets, gang semantics across launchers (a
# rank killed on node 1 ends node 0's ranks, both name node 1 and the rank), a node that never
# comes, a node with different flags, Slurm's variables and their conflicts with flags.
#   launch_nodes.sh PIPEWRIGHT
set -uo pipefail
pw="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
ok() { echo "OK   $1"; }
bad() { echo "FAIL $1"; failed=1; }
port() { echo $(( 20000 + (RANDOM % 12000) )); }
# two P FLAGS... -- CMD...: both launchers; logs in $work/n0, $work/n1; exit codes in rc0, rc1.
two() {
  local p="$1"; shift
  local pre=(); while [ "$1" != -- ]; do pre+=("$1"); shift; done; shift
  local mp; mp=$(port)
  timeout 60 "$pw" launch --nnodes 2 --node-rank 1 --nproc-per-node "$p" --master-addr 127.0.0.1 \
    --master-port "$mp" "${pre[@]}" -- "$@" > "$work/n1" 2>&1 &
  local pid=$!
  timeout 60 "$pw" launch --nnodes 2 --node-rank 0 --nproc-per-node "$p" --master-addr 127.0.0.1 \
    --master-port "$mp" "${pre[@]}" -- "$@" > "$work/n0" 2>&1; rc0=$?
  wait "$pid"; rc1=$?
}

# 1. The variables, torchrun's names: global rank = node * P + local rank.
two 2 -- sh -c 'echo "R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK GW=$GROUP_WORLD_SIZE A=$MASTER_ADDR J=${PIPEWRIGHT_JOB_ID:+set}"'
if [ "$rc0$rc1" = 00 ] && grep -q "\[rank 3\] R=3 W=4 L=1 LW=2 G=1 GW=2 A=127.0.0.1 J=set" "$work/n1" &&
   grep -q "\[rank 0\] R=0 W=4 L=0 LW=2 G=0 GW=2 A=127.0.0.1 J=set" "$work/n0"; then ok "variables"
else bad "variables ($rc0 $rc1)"; cat "$work/n0" "$work/n1"; fi
# ... and one job id on every node.
ids="$(cat "$work/n0" "$work/n1" | wc -l)"
two 1 -- sh -c 'echo "id=$PIPEWRIGHT_JOB_ID"'
if [ "$(cat "$work/n0" "$work/n1" | sort -u -k3 | grep -c id=)" = 1 ] && [ "$ids" = 4 ]; then ok "one job id"
else bad "one job id"; cat "$work/n0" "$work/n1"; fi

# 2. Gang: rank 3 (node 1) killed; node 0's ranks, still sleeping, end within 5 s; both name it.
start=$(date +%s)
two 2 --node-timeout 3 -- sh -c 'if [ "$RANK" = 3 ]; then sleep 1; kill -9 $$; fi; sleep 50'
took=$(( $(date +%s) - start ))
if [ "$rc0" = 3 ] && [ "$rc1" = 3 ] && [ "$took" -le 6 ] &&
   head -1 <(grep "pipewright launch:" "$work/n0") | grep -q "node 1: rank 3 died with signal 9 (SIGKILL)" &&
   head -1 <(grep "pipewright launch:" "$work/n1") | grep -q "node 1: rank 3 died with signal 9"; then
  ok "gang: a rank killed on node 1 ends node 0 in ${took}s"
else bad "gang ($rc0 $rc1, ${took}s)"; cat "$work/n0" "$work/n1"; fi
# A rank of node 0 exiting 2: node 1 exits 2 with node 0's reason.
two 1 -- sh -c 'if [ "$RANK" = 0 ]; then echo "bad flag --x" >&2; exit 2; fi; sleep 50'
if [ "$rc0" = 2 ] && [ "$rc1" = 2 ] && grep -q "pipewright launch: node 0: rank 0 exited with code 2: bad flag --x" "$work/n1"; then
  ok "gang: node 0's failure reaches node 1"
else bad "gang node 0 ($rc0 $rc1)"; cat "$work/n0" "$work/n1"; fi

# 3. Node 1 never comes: node 0 gives up after --join-timeout, naming it (exit 4).
out="$(timeout 30 "$pw" launch --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$(port)" \
  --join-timeout 1 -- true 2>&1)"; rc=$?
if [ "$rc" = 4 ] && grep -q "nodes 1 never connected" <<<"$out"; then ok "absent node"
else bad "absent node ($rc): $out"; fi
# Different --nproc-per-node on node 1: refused, naming both values (exit 2).
mp=$(port)
timeout 30 "$pw" launch --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port "$mp" \
  --join-timeout 3 -- true > "$work/n0" 2>&1 &
out="$(timeout 30 "$pw" launch --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.1 \
  --master-port "$mp" --join-timeout 3 -- true 2>&1)"; rc=$?
wait
if [ "$rc" = 2 ] && grep -q "refused node 1: --nproc-per-node 2 but node 0 has --nproc-per-node 1" <<<"$out"; then
  ok "mismatched nodes refused"
else bad "mismatched nodes ($rc): $out"; fi

# 4. Flags: --nnodes > 1 without a master address; --node-rank out of range; --nproc alias.
out="$("$pw" launch --nnodes 2 --node-rank 1 -- true 2>&1)"; rc=$?
[ "$rc" = 2 ] && grep -q "needs --master-addr" <<<"$out" && ok "no master address" || bad "no master ($rc): $out"
out="$("$pw" launch --nnodes 2 --node-rank 2 --master-addr 127.0.0.1 -- true 2>&1)"; rc=$?
[ "$rc" = 2 ] && grep -q -- "--node-rank 2 is outside \[0, 2)" <<<"$out" && ok "node rank range" || bad "node rank ($rc): $out"
out="$("$pw" launch --nproc 2 -- sh -c 'echo $LOCAL_WORLD_SIZE' 2>&1)"; rc=$?
[ "$rc" = 0 ] && grep -q "\[rank 1\] 2" <<<"$out" && ok "--nproc alias" || bad "--nproc ($rc): $out"

# 5. Slurm: master = first host of SLURM_JOB_NODELIST, node = SLURM_NODEID, nodes =
#    SLURM_JOB_NUM_NODES; a flag that disagrees names both values.
mp=$(port)
slurm=(SLURM_JOB_NODELIST='localhost,node[02-04]' SLURM_JOB_NUM_NODES=2)
env "${slurm[@]}" SLURM_NODEID=1 SLURM_PROCID=1 timeout 60 "$pw" launch --master-port "$mp" -- \
  sh -c 'echo "A=$MASTER_ADDR G=$GROUP_RANK R=$RANK P=${SLURM_PROCID:-unset}"' > "$work/n1" 2>&1 &
env "${slurm[@]}" SLURM_NODEID=0 SLURM_PROCID=0 timeout 60 "$pw" launch --master-port "$mp" -- \
  sh -c 'echo "A=$MASTER_ADDR G=$GROUP_RANK R=$RANK P=${SLURM_PROCID:-unset}"' > "$work/n0" 2>&1; rc0=$?
wait $!; rc1=$?
if [ "$rc0$rc1" = 00 ] && grep -q "A=localhost G=1 R=1 P=unset" "$work/n1"; then ok "slurm layout"
else bad "slurm layout ($rc0 $rc1)"; cat "$work/n0" "$work/n1"; fi
out="$(env "${slurm[@]}" SLURM_NODEID=1 "$pw" launch --node-rank 0 -- true 2>&1)"; rc=$?
[ "$rc" = 2 ] && grep -q -- "--node-rank 0 but SLURM_NODEID=1 (Slurm)" <<<"$out" && ok "slurm node conflict" || bad "slurm node ($rc): $out"
out="$(env "${slurm[@]}" SLURM_NODEID=1 "$pw" launch --master-addr 10.0.0.9 -- true 2>&1)"; rc=$?
[ "$rc" = 2 ] && grep -q -- "--master-addr 10.0.0.9 but SLURM_JOB_NODELIST=localhost,node\[02-04\] (first host localhost) (Slurm)" <<<"$out" &&
  ok "slurm master conflict" || bad "slurm master ($rc): $out"
out="$(env SLURM_JOB_NODELIST='node[1-' SLURM_JOB_NUM_NODES=2 SLURM_NODEID=0 "$pw" launch -- true 2>&1)"; rc=$?
[ "$rc" = 2 ] && grep -q "SLURM_JOB_NODELIST='node\[1-'" <<<"$out" && ok "bad nodelist" || bad "bad nodelist ($rc): $out"
exit $failed
