#!/usr/bin/env bash
# Fault injection for the reliability contract (issue 20; docs/reliability.md). Every run is a
# small MLP on 2-4 local ranks (Gloo, 127.0.0.1), bounded by --timeout and `timeout`.
#
#   fault_trials.sh PIPEWRIGHT DATA_DIR WORK_DIR MODE [TRIALS]
#
#   kill         TRIALS times: a 2-4 rank run under `pipewright launch`; kill -9 of a random
#                rank at a random step. Pass: launch exits non-zero within --timeout + 5 s and
#                its first line names the killed rank ("rank K died with signal 9").
#   kill-direct  TRIALS times: the same ranks started directly (torchrun variables, no launcher,
#                so nobody stops the survivors); kill -9 of a random rank at a random step.
#                Pass: every survivor exits non-zero within --timeout + 5 s and its error line
#                names the killed rank.
#   stop         TRIALS times, direct ranks: SIGSTOP of a random rank at a random step. Pass:
#                every other rank exits non-zero within --timeout + 5 s naming the stopped rank.
#   early        TRIALS times, direct ranks: one rank killed right after it starts (before the
#                rendezvous). Pass: the others exit non-zero within --timeout + 5 s naming it.
#   absent       TRIALS times, direct ranks: one random rank (rank 0 included) is never started.
#                Pass: the others exit non-zero within --timeout + 5 s of their start, naming it.
#   port         TRIALS times: job A (2 ranks, launch) runs; job B (2 ranks, launch) is started
#                on A's port while A runs. Pass: B exits 2 naming the port or the refusal while
#                A is still running, and A completes every step and exits 0.
# Prints one line per trial and a summary "MODE: P/T passed"; exit 0 iff every trial passed.
set -uo pipefail
pw="$1"; data="$2"; work="$3"; mode="$4"; trials="${5:-5}"
timeout_s="${PW_FAULT_TIMEOUT:-10}"   # --timeout of every run
deadline_ms=$(( (timeout_s + 5) * 1000 ))
mkdir -p "$work"
work="$(mktemp -d "$work/fault.$mode.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
passed=0

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# shape N: the job flags of an N-rank run (pp x dp = N).
shape() {
  case "$1" in
    2) echo "--pp 2" ;;
    3) echo "--pp 3" ;;
    4) echo "--pp 2 --dp 2" ;;
  esac
}

# job_args N STEPS: the run command of every rank.
job_args() {
  # shellcheck disable=SC2046
  echo run --model "$data/mlp.json" --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy" \
    --loss mse --batch-size 8 --microbatches 4 --steps "$2" --timeout "$timeout_s" \
    --backend gloo $(shape "$1")
}

# wait_for_step FILE K LIMIT_S: waits until FILE shows "step K/" (rank 0's log); 1 on timeout.
wait_for_step() {
  local end=$(( $(now_ms) + $3 * 1000 ))
  until grep -q "step $2/" "$1" 2>/dev/null; do
    [ "$(now_ms)" -lt "$end" ] || return 1
    sleep 0.02
  done
}

# child_of PID: the process `timeout` started (commands run under `timeout`, and a signal must
# reach the command itself). Waits up to 5 s for it to appear.
child_of() {
  local c i
  for (( i = 0; i < 250; i++ )); do
    c="$(pgrep -P "$1" | head -n 1)"
    [ -n "$c" ] && { echo "$c"; return; }
    sleep 0.02
  done
}

# rank_pid TIMEOUT_PID R: the pid of rank R among the children of the launcher that runs under
# TIMEOUT_PID (by their RANK variable).
rank_pid() {
  local c
  for c in $(pgrep -P "$(child_of "$1")"); do
    if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$2"; then echo "$c"; return; fi
  done
}

# start_direct N STEPS PORT [SKIP]: starts N ranks (but rank SKIP) without a launcher; sets rank_pids (the `timeout`
# processes, to wait for) and proc_pids (the ranks themselves, to signal); outputs in
# $work/out.R.
start_direct() {
  local n="$1" r
  rank_pids=(); proc_pids=()
  read -ra args <<<"$(job_args "$1" "$2")"
  for (( r = 0; r < n; r++ )); do
    if [ "$r" = "${4:--1}" ]; then rank_pids+=(""); continue; fi
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT="$3" timeout 120 "$pw" "${args[@]}" >"$work/out.$r" 2>&1 &
    rank_pids+=("$!"); pids+=("$!")
  done
  for (( r = 0; r < n; r++ )); do
    if [ -z "${rank_pids[$r]}" ]; then proc_pids+=(""); continue; fi
    proc_pids+=("$(child_of "${rank_pids[$r]}")"); pids+=("${proc_pids[$r]}")
  done
}

# check_survivors N VICTIM T0 LABEL: every rank but VICTIM exited non-zero within the deadline
# after T0 and its error line names "rank VICTIM".
check_survivors() {
  local n="$1" victim="$2" t0="$3" r rc ok=1 why="" end
  for (( r = 0; r < n; r++ )); do
    [ "$r" = "$victim" ] && continue
    wait "${rank_pids[$r]}"; rc=$?
    end=$(now_ms)
    local line; line="$(grep -m1 'pipewright: error' "$work/out.$r")"
    if [ "$rc" = 0 ] || [ $(( end - t0 )) -gt "$deadline_ms" ] ||
       ! grep -qE "rank(s)? ([0-9]+,)*$victim\b|ranks \[([0-9]+, )*$victim[],]|rank $victim[^0-9]" <<<"$line"; then
      ok=0; why+=" rank $r: exit $rc after $(( end - t0 )) ms: ${line:-$(tail -n 3 "$work/out.$r")};"
    else
      why+=" rank $r: exit $rc after $(( end - t0 )) ms;"
    fi
  done
  report "$4" "$ok" "$why"
}

report() {
  if [ "$2" = 1 ]; then passed=$(( passed + 1 )); echo "PASS $1:$3"; else echo "FAIL $1:$3"; fi
}

for (( t = 1; t <= trials; t++ )); do
  n=$(( 2 + RANDOM % 3 )); victim=$(( RANDOM % n )); k=$(( 2 + RANDOM % 8 ))
  port=$(( 20000 + RANDOM % 12000 ))
  case "$mode" in
    kill)
      read -ra args <<<"$(job_args "$n" 400)"
      timeout 120 "$pw" launch --nproc "$n" -- "$pw" "${args[@]}" >"$work/launch" 2>&1 &
      lp=$!; pids+=("$lp")
      if ! wait_for_step "$work/launch" "$k" 60; then
        report "trial $t (n=$n)" 0 " never reached step $k: $(tail -n 3 "$work/launch")"
        kill "$lp" 2>/dev/null; wait "$lp"; continue
      fi
      vp="$(rank_pid "$lp" "$victim")"; t0=$(now_ms); kill -9 "$vp"
      wait "$lp"; rc=$?; ms=$(( $(now_ms) - t0 ))
      first="$(grep -m1 '^pipewright launch:' "$work/launch")"
      named=$(grep -c "rank .*$victim" <(grep '^\[rank [0-9]*\] pipewright: error' "$work/launch" | grep -v "^\[rank $victim\]"))
      if [ "$rc" != 0 ] && [ "$ms" -le "$deadline_ms" ] &&
         grep -q "rank $victim died with signal 9" <<<"$first"; then
        report "trial $t (n=$n, kill -9 rank $victim at step $k)" 1 " launch exit $rc after $ms ms; $named survivor(s) named it before being stopped"
      else
        report "trial $t (n=$n, kill -9 rank $victim at step $k)" 0 " exit $rc after $ms ms: $first"
      fi
      ;;
    kill-direct|stop)
      start_direct "$n" 400 "$port"
      if ! wait_for_step "$work/out.0" "$k" 60; then
        report "trial $t (n=$n)" 0 " never reached step $k: $(tail -n 3 "$work/out.0")"
        for p in "${proc_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
        for p in "${rank_pids[@]}"; do wait "$p"; done
        continue
      fi
      sig=$([ "$mode" = stop ] && echo STOP || echo KILL)
      t0=$(now_ms); kill -"$sig" "${proc_pids[$victim]}"
      check_survivors "$n" "$victim" "$t0" "trial $t (n=$n, SIG$sig rank $victim at step $k)"
      kill -CONT "${proc_pids[$victim]}" 2>/dev/null; kill -9 "${proc_pids[$victim]}" 2>/dev/null
      wait "${rank_pids[$victim]}" 2>/dev/null
      ;;
    early)
      start_direct "$n" 5 "$port"
      sleep 0.$(( RANDOM % 5 ))
      t0=$(now_ms); kill -9 "${proc_pids[$victim]}"; wait "${rank_pids[$victim]}" 2>/dev/null
      check_survivors "$n" "$victim" "$t0" "trial $t (n=$n, kill -9 rank $victim before rendezvous)"
      ;;
    absent)
      t0=$(now_ms)
      start_direct "$n" 5 "$port" "$victim"
      check_survivors "$n" "$victim" "$t0" "trial $t (n=$n, rank $victim never started)"
      ;;
    port)
      read -ra args <<<"$(job_args 2 600)"  # A runs ~8 s: B starts and ends meanwhile
      timeout 120 "$pw" launch --nproc 2 --master-port "$port" -- "$pw" "${args[@]}" \
        >"$work/a" 2>&1 &
      ap=$!; pids+=("$ap")
      if ! wait_for_step "$work/a" "$k" 60; then
        report "trial $t" 0 " job A never reached step $k: $(tail -n 3 "$work/a")"
        kill "$ap" 2>/dev/null; wait "$ap"; continue
      fi
      timeout 60 "$pw" launch --nproc 2 --master-port "$port" -- "$pw" "${args[@]}" \
        >"$work/b" 2>&1; brc=$?
      a_ran=1; grep -q "step 600/600" "$work/a" && a_ran=0  # A must still run when B ends
      wait "$ap"; arc=$?
      bline="$(grep -m1 '^pipewright launch:' "$work/b")"
      if [ "$arc" = 0 ] && [ "$a_ran" = 1 ] && grep -q "step 600/600" "$work/a" && [ "$brc" = 2 ] &&
         grep -qE "port $port is already in use|refused this process" <<<"$bline"; then
        report "trial $t (job B started at A's step $k)" 1 " A exit 0; B exit 2: ${bline#*: }"
      else
        report "trial $t (job B started at A's step $k)" 0 " A exit $arc (still running when B ended: $a_ran), B exit $brc: $bline $(tail -n 2 "$work/a")"
      fi
      ;;
    *) echo "unknown mode $mode"; exit 2 ;;
  esac
done
echo "$mode: $passed/$trials passed"
[ "$passed" = "$trials" ]
