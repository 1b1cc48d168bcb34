#!/usr/bin/env bash
# The figures of docs/reliability.md: N trials of kill -9 of a random rank at a random step of a
# 2-4 rank run, under `pipewright launch` and without a launcher (every survivor on its own); S
# trials each of SIGSTOP of a random rank, a rank killed before the rendezvous and a rank never
# started (each waits for the timeout); M trials of a second job started on a running job's
# port. Each trial is one line (PASS/FAIL, what was done, exit codes, milliseconds); each mode
# ends with "P/T passed". Modes: tests/exec/fault_trials.sh.
#
#   bench/fault_trials.sh [BUILD_DIR] [N] [M] [S]      defaults: build 50 20 10
#   PW_FAULT_TIMEOUT=10 (default): --timeout of every run; the deadline checked is that + 5 s.
#   MODES="kill kill-direct stop early absent port" (default): which modes to run.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build}"; n="${2:-50}"; m="${3:-20}"; slow="${4:-10}"
pw="$build/bin/pipewright"
[ -x "$pw" ] || { echo "no $pw: build first (cmake --build $build)"; exit 2; }
work="$(mktemp -d /tmp/pw-fault-trials.XXXXXX)"
trap 'rm -rf "$work"' EXIT
status=0
for mode in ${MODES:-kill kill-direct stop early absent port}; do
  case "$mode" in
    port) trials=$m ;;
    stop|early|absent) trials=$slow ;;
    *) trials=$n ;;
  esac
  start=$(date +%s)
  "$here/tests/exec/fault_trials.sh" "$pw" "$here/tests/data/exec_run" "$work" "$mode" "$trials" \
    || status=1
  echo "($mode: $(( $(date +%s) - start )) s)"
done
exit $status
