# Sourced by the multi-process test scripts. run_ranks N BACKEND CMD ARGS...: runs CMD ARGS as N
# local ranks and returns the first non-zero exit code. gloo: torchrun-style variables on
# 127.0.0.1 and a random port; mpi: mpirun over loopback. Every rank is bounded by `timeout`.
run_ranks() {
  local n="$1" backend="$2"; shift 2
  if [ "$backend" = mpi ]; then
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$n" \
      --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$@"
    return
  fi
  # Below Linux's ephemeral range (32768-60999), so no client connection of a concurrent test
  # (Gloo pairs, MPI) can hold it; two concurrent tests pick the same port 1 time in 12,768.
  local port=$(( 20000 + (RANDOM % 12768) )) pids=() rc=0 r p
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout 120 "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}
