#!/usr/bin/env bash
# The bad-input table and the non-finite policies of docs/reliability.md through the CLI (issue
# 20, items 6, 7 and 8): each case checks the exit code, the time and the message.
#
#   reliability_cli.sh PIPEWRIGHT DATA_DIR WORK_DIR CASE
#
#   plan-limits     an 18-byte CSV implying 10^7 microbatches and a stage 2147483647 exit 2 in
#                   seconds naming the limit; a plan with ~10^5 problems prints at most ~25 lines
#   special-inputs  a FIFO (no writer) and /dev/zero as plan, model or data exit 2 at once
#   json-number     a JSON number 1e400 exits 2 naming the file, line and column
#   control-chars   terminal escapes in a plan cell are echoed as \x1b, never raw
#   huge-model      layer sizes implying 10^15 parameters exit 2 before allocating, naming the
#                   model, the size and the limit (libtorch used to fail with a stack trace)
#   nan             a run whose loss becomes non-finite: --nan-policy error exits 1 naming the
#                   step, rank and stage; skip-step and warn exit 0 with a warning
set -uo pipefail
pw="$1"; data="$2"; work="$3"; what="$4"
mkdir -p "$work"
work="$(mktemp -d "$work/reliability.$what.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failed=0
ok() { echo "OK   $1"; }
fail() { echo "FAIL $1"; failed=1; }

# expect NAME CODE MAX_MS REGEX CMD...: CMD exits CODE within MAX_MS and its output matches REGEX.
expect() {
  local name="$1" code="$2" max_ms="$3" regex="$4"; shift 4
  local t0 rc=0 ms
  t0=$(date +%s%N)
  timeout 60 "$@" >"$work/out" 2>&1 </dev/null || rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$rc" = "$code" ] && [ "$ms" -le "$max_ms" ] && grep -qE -- "$regex" "$work/out"; then
    ok "$name (exit $rc in $ms ms)"
  else
    fail "$name (exit $rc in $ms ms, want $code within $max_ms ms and /$regex/): $(head -c 2000 "$work/out")"
  fi
}

# The executor's cases only where it is built (PIPEWRIGHT_WITH_EXEC).
have_exec=0; "$pw" run --help >/dev/null 2>&1 && have_exec=1
# run_with MODEL DATA_X: `run` on 1 rank (the flags cannot be given twice).
run_with() {
  run_args=(run --model "$1" --data-x "$2" --data-y "$data/mlp_y.npy" --loss mse --batch-size 8
            --microbatches 2 --pp 1 --timeout 30)
}
run_with "$data/mlp.json" "$data/mlp_x.npy"; run_mlp=("${run_args[@]}")

case "$what" in
  plan-limits)
    printf '0F0,0F10000000\n' >"$work/big.csv"
    expect "10^7 microbatches" 2 10000 \
      "big.csv:1:5: microbatch 10000000 is beyond the limit of 1048576 microbatches" \
      "$pw" validate "$work/big.csv"
    printf '2147483647F0\n' >"$work/stage.csv"
    expect "stage 2147483647" 2 10000 "stage.csv:1:1: stage 2147483647 is beyond the limit" \
      "$pw" validate "$work/stage.csv"
    printf '0F0,0F100000\n' >"$work/many.csv"
    expect "10^5 problems" 2 20000 "and 981 more \\(not shown\\)" "$pw" validate "$work/many.csv"
    lines=$(wc -l <"$work/out")
    if [ "$lines" -le 30 ]; then ok "10^5 problems: $lines lines"; else fail "10^5 problems: $lines lines"; fi
    ;;
  special-inputs)
    mkfifo "$work/fifo"
    expect "FIFO plan" 2 10000 "fifo: the plan file is a FIFO \\(pipe\\), not a regular file" \
      "$pw" validate "$work/fifo"
    expect "FIFO model" 2 10000 "fifo: the model file is a FIFO \\(pipe\\), not a regular file" \
      "$pw" partition "$work/fifo" --stages 2
    expect "/dev/zero plan" 2 10000 "/dev/zero: the plan file is a character device" \
      "$pw" validate /dev/zero
    [ "$have_exec" = 1 ] || { echo "(no executor: run cases skipped)"; exit $failed; }
    run_with "$data/mlp.json" "$work/fifo"; fifo_x=("${run_args[@]}")
    run_with /dev/zero "$data/mlp_x.npy"; zero_model=("${run_args[@]}")
    expect "FIFO data" 2 20000 "fifo.*is a FIFO \\(pipe\\), not a regular file" \
      "$pw" "${fifo_x[@]}" --steps 1
    expect "/dev/zero model (run)" 2 20000 "/dev/zero.*is a character device" \
      "$pw" "${zero_model[@]}" --steps 1
    ;;
  json-number)
    sed 's/"in_features": 8/"in_features": 1e400/' "$data/mlp.json" >"$work/m.json"
    expect "1e400 in a model" 2 10000 "m.json:[0-9]+:[0-9]+: .*1e400" \
      "$pw" partition "$work/m.json" --stages 2
    [ "$have_exec" = 1 ] || exit $failed
    run_with "$work/m.json" "$data/mlp_x.npy"
    expect "1e400 in a model (run)" 2 20000 "m.json:[0-9]+:[0-9]+: .*1e400" \
      "$pw" "${run_args[@]}" --steps 1
    ;;
  control-chars)
    printf '0F0,\033[31mX\n' >"$work/esc.csv"
    expect "escape in a plan cell" 2 10000 'esc.csv:1:5: .*\\x1b' "$pw" validate "$work/esc.csv"
    if grep -q $'\033' "$work/out"; then fail "a raw ESC reached the terminal"; else ok "no raw ESC"; fi
    ;;
  huge-model)
    sed 's/"out_features": 16/"out_features": 16000000/; s/"in_features": 16/"in_features": 16000000/' \
      "$data/mlp.json" >"$work/huge.json"
    run_with "$work/huge.json" "$data/mlp_x.npy"
    expect "10^15 parameters" 2 30000 \
      "stages of model 'mlp' on this rank \\(.*huge.json\\) have .* parameters, .* more than this host's memory" \
      "$pw" "${run_args[@]}" --steps 1
    expect "a limit of 1000 bytes" 2 30000 "more than PIPEWRIGHT_MAX_PARAM_BYTES \\(1000 bytes" \
      env PIPEWRIGHT_MAX_PARAM_BYTES=1000 "$pw" "${run_mlp[@]}" --steps 1
    ;;
  nan)
    expect "--nan-policy error" 1 60000 \
      "pipewright: error: step [0-9]+: non-finite (loss|gradient norm) \\((nan|inf|-nan)\\) on rank 0, stage 0 \\(--nan-policy error" \
      "$pw" "${run_mlp[@]}" --steps 20 --lr 1e30
    if grep -q "step 20/20" "$work/out"; then fail "error policy trained on"; fi
    expect "--nan-policy skip-step" 0 60000 \
      "step [0-9]+: non-finite .* on rank 0, stage 0 \\(--nan-policy skip-step: optimizer step skipped\\)" \
      "$pw" "${run_mlp[@]}" --steps 20 --lr 1e30 --nan-policy skip-step
    expect "--nan-policy warn" 0 60000 "non-finite .*\\(--nan-policy warn: trained on\\)" \
      "$pw" "${run_mlp[@]}" --steps 20 --lr 1e30 --nan-policy warn
    expect "--nan-policy bad" 2 20000 "--nan-policy must be error, skip-step or warn" \
      "$pw" "${run_mlp[@]}" --steps 1 --nan-policy sometimes
    ;;
  *) echo "unknown case $what"; exit 2 ;;
esac
exit $failed
