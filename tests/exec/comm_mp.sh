#!/usr/bin/env bash
# Multi-process communicator tests (ctest label mp): real processes on 127.0.0.1, each case
# bounded by `timeout`, so every test ends by itself.
#   comm_mp.sh PIPEWRIGHT_BIN COMM_WORKER CASE [N]
# CASE: launch-gloo | mpirun-mpi | mpirun-gloo | fault-launch | fault-direct | fault-shared |
#       fault-mpi |
#       absent-launch | absent-master |
#       conformance-mpi | conformance-mpi-timeout | conformance-mpi-error
#       (conformance-*: COMM_WORKER is the test_exec_comm gtest binary, run under mpirun)
set -u
pw=$1 worker=$2 case=$3 n=${4:-2}
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err" "$out".* "$err".*' EXIT
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np)

fail() { echo "FAIL ($case): $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
# A port below Linux's ephemeral range (32768-60999): an ephemeral port that was free a moment
# ago can be taken by a concurrent test's client connection before rank 0 binds it.
free_port() { echo $(( 20000 + (RANDOM % 12768) )); }
run() { # run EXPECTED_RC MAX_SECONDS CMD...: runs CMD, checks exit code and wall time
  local want=$1 max=$2; shift 2
  local start=$SECONDS
  timeout -k 5 120 "$@" >"$out" 2>"$err"
  rc=$? elapsed=$((SECONDS - start))
  echo "exit=$rc elapsed=${elapsed}s: $*"
  if [[ $want == nonzero ]]; then [[ $rc -ne 0 ]] || fail "expected a non-zero exit"
  else [[ $rc -eq $want ]] || fail "expected exit $want, got $rc"; fi
  [[ $elapsed -le $max ]] || fail "took ${elapsed}s, limit ${max}s"
}
expect() { grep -Eq -- "$1" "$out" "$err" || fail "output does not match /$1/"; }
count() { local c; c=$(cat "$out" "$err" | grep -Ec -- "$1"); [[ $c -eq $2 ]] || fail "/$1/ seen $c times, want $2"; }

case $case in
  launch-gloo)
    run 0 90 "$pw" launch --nproc "$n" -- "$worker" --backend gloo --timeout-ms 60000
    count "^\[rank [0-9]+\] rank [0-9]+: all checks passed \(gloo, $n ranks\)" "$n" ;;
  mpirun-mpi)
    run 0 90 "${mpirun_cmd[@]}" "$n" "$worker" --backend mpi --timeout-ms 60000
    count "all checks passed \(mpi, $n ranks\)" "$n" ;;
  mpirun-gloo)  # Gloo with the world taken from Open MPI's variables
    run 0 90 "${mpirun_cmd[@]}" "$n" -x MASTER_PORT="$(free_port)" "$worker" --backend gloo \
      --timeout-ms 60000
    count "all checks passed \(gloo, $n ranks\)" "$n" ;;
  fault-launch)  # rank 1 SIGKILLs itself mid-run; the launcher names it first and exits 3
    run 3 30 "$pw" launch --nproc "$n" -- "$worker" --backend gloo --mode fault --victim 1 \
      --timeout-ms 5000
    head -n 1 < <(grep '^pipewright launch:' "$err") | grep -Eq \
      '^pipewright launch: rank 1 died with signal 9 \(SIGKILL\)' ||
      fail "the launcher's first message does not name rank 1's SIGKILL" ;;
  fault-direct|fault-shared)  # no launcher: the survivors must notice by themselves within 10 s
    # fault-shared: rank 1 dies between shared-memory all-reduces (no p2p), and the survivors
    # must say that its process is gone.
    mode=fault; [[ $case == fault-shared ]] && mode=fault-shared
    port=$(free_port) pids=()
    for ((r = 0; r < n; r++)); do
      RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 60 \
        "$worker" --backend gloo --mode $mode --victim 1 --timeout-ms 5000 \
        >"$out.$r" 2>"$err.$r" &
      pids+=($!)
    done
    wait "${pids[1]}"; victim_rc=$? died=$SECONDS
    [[ $victim_rc -eq 137 ]] || fail "victim exit $victim_rc, expected 137 (SIGKILL)"
    for ((r = 0; r < n; r++)); do
      [[ $r -eq 1 ]] && continue
      wait "${pids[$r]}"; rc=$?
      cat "$out.$r" >>"$out"; cat "$err.$r" >>"$err"
      echo "rank $r: exit=$rc $((SECONDS - died))s after the victim died"
      [[ $rc -eq 3 || $rc -eq 4 ]] || fail "rank $r exit $rc, expected 3 (peer) or 4 (timeout)"
      [[ $((SECONDS - died)) -le 10 ]] || fail "rank $r took more than 10 s to fail"
    done
    expect "rank 0: error: .*(peer rank 1|rank 1|ranks \[.*1.*\])"
    if [[ $case == fault-shared ]]; then
      expect "rank 0: error: .*peer rank 1 died \(its process [0-9]+ is gone\) during a shared-memory all-reduce"
    fi ;;
  fault-mpi)
    run nonzero 30 "${mpirun_cmd[@]}" "$n" "$worker" --backend mpi --mode fault --victim 1 \
      --timeout-ms 5000
    expect "rank 1" ;;
  absent-launch)  # rank n-1 never joins: everyone else fails at the rendezvous, naming it
    run 4 30 "$pw" launch --nproc "$n" -- "$worker" --backend gloo --mode absent \
      --absent $((n - 1)) --timeout-ms 3000
    expect "ranks \[$((n - 1))\] never joined" ;;
  absent-master)  # rank 0 (the store host) never starts
    run 4 30 "$pw" launch --nproc "$n" -- "$worker" --backend gloo --mode absent --absent 0 \
      --timeout-ms 3000
    expect "rank 0 never joined" ;;
  conformance-mpi)  # the conformance suite over MPI, except the tests that end (or lose) the job
    run 0 90 "${mpirun_cmd[@]}" "$n" "$worker" --gtest_color=no \
      '--gtest_filter=Conformance/Mpi.*-*.RecvTimeoutNamesPeerAndContext:*.ShortMessageFailsOnWaitAndIsKept:*.PeerLeavingFailsOnWaitAndIsKept'
    count "^\[  PASSED  \] 9 tests\." "$n"
    count "SKIPPED|FAILED" 0 ;;
  conformance-mpi-timeout|conformance-mpi-error)
    # Note [MPI deadlines and shutdown]: after a timeout (or a failed operation) MPI_Abort ends the
    # job at exit with code 4 (or 1), by design; rank 0 must have passed the test before that.
    test=RecvTimeoutNamesPeerAndContext want=4
    [[ $case == conformance-mpi-error ]] && test=ShortMessageFailsOnWaitAndIsKept want=1
    run $want 60 "${mpirun_cmd[@]}" "$n" "$worker" --gtest_color=no \
      "--gtest_filter=Conformance/Mpi.$test"
    expect "^\[       OK \] Conformance/Mpi\.$test"
    count "FAILED|SKIPPED" 0 ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "PASS ($case)"
