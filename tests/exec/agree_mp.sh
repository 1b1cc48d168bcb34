#!/usr/bin/env bash
# Multi-process tests of the reliability contract's start-up checks (issue 20, label mp), on
# local processes bound to 127.0.0.1, every run bounded by --timeout and `timeout`:
#   disagree  2 ranks started with different --microbatches, --seed, model files (same path
#             name elsewhere, different content) or --steps: each rank exits 2 within 20 s,
#             naming the field and which ranks have which value; the same under
#             `pipewright launch` (flags picked by $RANK in a wrapper); equal flags still train
#   disagree-mpi  the same over MPI (no TCP store: agreement runs over the world communicator)
#   outputs   an unwritable --save / --trace / --checkpoint-dir exits 2 before step 1, naming
#             the flag and the path (1 rank, and 2 ranks under `pipewright launch`)
#   agree_mp.sh PIPEWRIGHT DATA_DIR WORK_DIR disagree|disagree-mpi|outputs
set -uo pipefail
pw="$1"; data="$2"; work="$3"; what="$4"
mkdir -p "$work"
work="$(mktemp -d "$work/agree.$what.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
common=(run --data-x "$data/mlp_x.npy" --data-y "$data/mlp_y.npy" --loss mse --batch-size 8
        --timeout 60)
# with_defaults FLAGS...: sets `flags` to FLAGS plus the defaults of the flags they lack.
with_defaults() {
  flags=("$@")
  local -A d=([--model]="$data/mlp.json" [--pp]=2 [--microbatches]=2 [--steps]=2 [--backend]=gloo) k
  for k in "${!d[@]}"; do
    [[ " $* " == *" $k "* ]] || flags+=("$k" "${d[$k]}")
  done
}
failed=0
ok() { echo "OK   $1"; }
fail() { echo "FAIL $1"; failed=1; }

# two_ranks "RANK 0 FLAGS" "RANK 1 FLAGS": runs both ranks directly (torchrun variables); sets
# rc0, rc1 (each rank's exit code) and ms (wall time until both exited); output in $work/out.R.
two_ranks() {
  local port=$(( 20000 + (RANDOM % 12768) )) f0 f1 t0 p0 p1 flags
  read -ra f0 <<<"$1"; with_defaults "${f0[@]}"; f0=("${flags[@]}")
  read -ra f1 <<<"$2"; with_defaults "${f1[@]}"; f1=("${flags[@]}")
  t0=$(date +%s%N)
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout 90 "$pw" "${common[@]}" "${f0[@]}" >"$work/out.0" 2>&1 & p0=$!
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout 90 "$pw" "${common[@]}" "${f1[@]}" >"$work/out.1" 2>&1 & p1=$!
  wait "$p0"; rc0=$?
  wait "$p1"; rc1=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}

# expect_disagreement NAME REGEX "RANK 0 FLAGS" "RANK 1 FLAGS"
expect_disagreement() {
  two_ranks "$3" "$4"
  if [ "$rc0" = 2 ] && [ "$rc1" = 2 ] && [ "$ms" -lt 20000 ] &&
     grep -qE -- "ranks disagree on the job.*$2" "$work/out.0" &&
     grep -qE -- "ranks disagree on the job.*$2" "$work/out.1"; then
    ok "disagree $1 (both ranks exit 2 in $ms ms)"
  else
    fail "disagree $1 (exit $rc0/$rc1 after $ms ms): $(cat "$work/out.0" "$work/out.1")"
  fi
}

# by_rank.sh CMD ARGS...: runs CMD ARGS plus the flags in $PW_FLAGS_<rank> (launch or mpirun).
cat >"$work/by_rank.sh" <<'WRAP'
#!/usr/bin/env bash
var="PW_FLAGS_${RANK:-${OMPI_COMM_WORLD_RANK:-0}}"; read -ra extra <<<"${!var:-}"
exec "$@" ${extra[@]+"${extra[@]}"}
WRAP
chmod +x "$work/by_rank.sh"

case "$what" in
  disagree)
    expect_disagreement microbatches "microbatches: rank 0 has 4, rank 1 has 8" \
      "--microbatches 4" "--microbatches 8"
    expect_disagreement seed "seed: rank 0 has 1, rank 1 has 2" "--seed 1" "--seed 2"
    expect_disagreement steps "steps: rank 0 has 2, rank 1 has 3" "" "--steps 3"
    mkdir -p "$work/other"
    sed 's/"name": "mlp"/"name": "mlp-other"/' "$data/mlp.json" >"$work/other/mlp.json"
    expect_disagreement model "model: rank 0 has fnv1a64 [0-9a-f]{16}, [0-9]+ bytes, rank 1 has fnv1a64" \
      "" "--model $work/other/mlp.json"
    # The same file content under another path agrees (and trains).
    cp "$data/mlp.json" "$work/other/same.json"
    two_ranks "" "--model $work/other/same.json"
    if [ "$rc0" = 0 ] && [ "$rc1" = 0 ]; then ok "same model content, other path: trains"
    else fail "same model content (exit $rc0/$rc1): $(cat "$work/out.0" "$work/out.1")"; fi
    # Under `pipewright launch`, flags picked by $RANK.
    t0=$(date +%s%N); rc=0
    out="$(PW_FLAGS_0="--microbatches 4" PW_FLAGS_1="--microbatches 8" timeout 90 \
      "$pw" launch --nproc 2 -- "$work/by_rank.sh" "$pw" "${common[@]}" --model "$data/mlp.json" \
      --pp 2 --steps 2 --backend gloo 2>&1)" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$rc" = 2 ] && [ "$ms" -lt 20000 ] &&
       grep -qE "exited with code 2: .*microbatches: rank 0 has 4, rank 1 has 8" <<<"$out"; then
      ok "disagree under launch (exit 2 in $ms ms)"
    else
      fail "disagree under launch (exit $rc after $ms ms): $out"
    fi
    ;;
  disagree-mpi)
    t0=$(date +%s%N); rc=0
    out="$(PW_FLAGS_0="--microbatches 4" PW_FLAGS_1="--microbatches 8" timeout 90 \
      mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader,tcp \
      --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x PW_FLAGS_0 -x PW_FLAGS_1 \
      "$work/by_rank.sh" "$pw" "${common[@]}" --model "$data/mlp.json" --pp 2 --steps 2 \
      --backend mpi 2>&1)" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$rc" = 2 ] && [ "$ms" -lt 30000 ] &&
       grep -qE "ranks disagree on the job.*microbatches: rank 0 has 4, rank 1 has 8" <<<"$out"; then
      ok "disagree over mpi (exit 2 in $ms ms)"
    else
      fail "disagree over mpi (exit $rc after $ms ms): $out"
    fi
    ;;
  outputs)
    echo "a regular file" >"$work/file"
    single() {  # single NAME REGEX ARGS...: one rank exits 2 naming the output, before step 1
      local name="$1" regex="$2"; shift 2
      local out rc=0
      with_defaults --pp 1 --steps 1 "$@"
      out="$(timeout 60 "$pw" "${common[@]}" "${flags[@]}" 2>&1)" || rc=$?
      if [ "$rc" = 2 ] && grep -qE -- "$regex" <<<"$out" && ! grep -q "step 1/" <<<"$out"; then
        ok "outputs $name"
      else
        fail "outputs $name (exit $rc): $out"
      fi
    }
    single save "--save $work/file/w.safetensors: $work/file is not a folder" \
      --save "$work/file/w.safetensors"
    single save_missing_folder "--save $work/none/w.safetensors: its folder .*none does not exist" \
      --save "$work/none/w.safetensors"
    single trace "--trace $work/file/t.json: $work/file is not a folder" --trace "$work/file/t.json"
    single profile_folder "--profile $work: is a folder" --profile "$work"
    single checkpoint_dir "--checkpoint-dir $work/file/ckpt: cannot be created" \
      --checkpoint-dir "$work/file/ckpt"
    t0=$(date +%s%N); rc=0
    with_defaults --save "$work/file/w.safetensors"
    out="$(timeout 90 "$pw" launch --nproc 2 -- "$pw" "${common[@]}" "${flags[@]}" 2>&1)" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$rc" = 2 ] && [ "$ms" -lt 20000 ] && grep -q -- "--save $work/file/w.safetensors" <<<"$out" &&
       ! grep -q "step 1/" <<<"$out"; then
      ok "outputs save under launch (exit 2 in $ms ms)"
    else
      fail "outputs save under launch (exit $rc after $ms ms): $out"
    fi
    ;;
  *) echo "unknown case $what"; exit 2;;
esac
exit $failed
