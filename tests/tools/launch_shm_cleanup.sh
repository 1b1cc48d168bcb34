#!/bin/sh
# Issue 44: `pipewright launch` removes the shared memory its ranks left in /dev/shm (a rank
# killed between creating a segment and its peer mapping it, Note [Shared-memory names]), and
# nothing of another job. Each rank leaves a segment named as pipewright names them; rank 1 then
# fails, rank 0 is stopped by the launcher (SIGTERM). A second job exits cleanly and leaves one.
# Usage: launch_shm_cleanup.sh PIPEWRIGHT
set -u
pw=$1
[ -d /dev/shm ] || { echo "no /dev/shm: skipped"; exit 77; }
work=$(mktemp -d)
foreign=/dev/shm/pipewright-0123456789abcdef-r0-p2p-1-42
trap 'rm -rf "$work"; rm -f "$foreign"' EXIT
: > "$foreign"
failed=0

# A failing job: both ranks leave a segment; rank 1 exits 1, rank 0 is stopped.
"$pw" launch --nproc-per-node 2 --grace 1 -- sh -c '
  echo "$PIPEWRIGHT_JOB_ID" > '"$work"'/job
  : > /dev/shm/pipewright-$PIPEWRIGHT_JOB_ID-r$RANK-p2p-9-1234
  if [ "$RANK" = 1 ]; then sleep 0.3; exit 1; fi
  sleep 30' > "$work/out" 2>&1
rc=$?
job=$(cat "$work/job")
if [ "$rc" != 1 ]; then echo "FAIL launch exited $rc, expected 1"; cat "$work/out"; failed=1; fi
left=$(ls /dev/shm | grep -c "^pipewright-$job-" || true)
if [ "$left" != 0 ]; then echo "FAIL $left segment(s) of job $job left in /dev/shm"; failed=1
else echo "OK   a failed job's segments removed"; fi
if grep -q "removed 2 shared-memory segment" "$work/out"; then echo "OK   launch says so"
else echo "FAIL launch did not report the removal"; cat "$work/out"; failed=1; fi
if [ -e "$foreign" ]; then echo "OK   another job's segment kept"
else echo "FAIL another job's segment was removed"; failed=1; fi

# A job that succeeds but whose rank left a segment.
"$pw" launch --nproc-per-node 1 -- sh -c '
  echo "$PIPEWRIGHT_JOB_ID" > '"$work"'/job
  : > /dev/shm/pipewright-$PIPEWRIGHT_JOB_ID-r0-dp-0-1' > "$work/out" 2>&1 || {
  echo "FAIL a clean job failed"; cat "$work/out"; failed=1; }
job=$(cat "$work/job")
if ls /dev/shm | grep -q "^pipewright-$job-"; then echo "FAIL a clean job's segment left"; failed=1
else echo "OK   a clean job's segment removed"; fi
exit $failed
