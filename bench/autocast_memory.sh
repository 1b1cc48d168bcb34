#!/usr/bin/env bash
# Activation bytes under autocast against the executor (issue 47 item 4, Note [Autocast bytes] in
# graph/include/pipewright/graph/model.hpp). For the bundled GPT (8 blocks, hidden 64, seq 32) and
# an MLP, pp 2, 1F1B, M microbatches of MBS samples, on CPU Gloo:
#   1. `pipewright run --profile --metrics` at fp32 and at bf16: each profile measures every
#      stage's kept activation bytes (Note [Measured activation memory]); --metrics the peak
#      resident set of every rank (VmHWM).
#   2. autocast: per stage, the measured bf16 / fp32 ratio of the kept bytes against the model's
#      (`simulate --model M --partition P --precision bf16` over `--precision fp32`: the model's
#      peak activation bytes per rank, one stage per rank, the same microbatches in flight), i.e.
#      how much of a stage autocast keeps in fp32. Plain halving says 0.5.
#   3. peak: every rank's measured bf16 VmHWM against `simulate --precision bf16` with the bf16
#      run's own profile (as exec.bf16.memory does for the ZeRO stages).
#   bench/autocast_memory.sh [PIPEWRIGHT_BIN]      (default build/bin/pipewright)
#   MODELS="gpt mlp" M=4 MBS=16 STEPS=5 TOLERANCE=0.05 PEAK_TOLERANCE=0.10 bench/autocast_memory.sh
# With TOLERANCE, exit 1 when a ratio is off by more, or a peak by more than PEAK_TOLERANCE
# (default TOLERANCE; the test exec.bf16.autocast). Measured 2026-11-28 (load ~15, MBS 16): GPT
# ratios -1.1% / -3.8% (plain halving: -11.5% / -14.5%), peaks -4.0% / -5.8%; the MLP (MBS 256)
# -7.4% / -36.9%: its last stage keeps 0.79 of its fp32 bytes under bf16, ~1 MB per microbatch
# more than its ops' saved tensors (halved: measured with saved-tensor hooks), not yet explained.

set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/bin/pipewright}"
models="${MODELS:-gpt mlp}"
m="${M:-4}"
mbs="${MBS:-16}"
steps="${STEPS:-5}"
tolerance="${TOLERANCE:-}"
peak_tolerance="${PEAK_TOLERANCE:-$tolerance}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
# Note [Runtime memory]: a fixed mmap threshold, so freed tensors leave the resident set.
export MALLOC_MMAP_THRESHOLD_=1048576 OMP_NUM_THREADS=1
work="$(mktemp -d /tmp/pw_autocast_memory.XXXXXX)"
[[ -n "${KEEP:-}" ]] && echo "work: $work" || trap 'rm -rf "$work"' EXIT

failed=0
printf '%-4s %-11s %12s %12s %8s %8s %8s\n' model what fp32_bytes bf16_bytes measured model error
for model in $models; do
  pre="$work/$model"
  if [ "$model" = gpt ]; then
    "$bin" --log-level warn model gpt --layers 8 --hidden 64 --heads 4 --seq 32 --vocab 128 \
      -o "$pre.json"
    data=(--dataset sonnets --loss cross-entropy)
  else
    "$bin" --log-level warn model mlp --sizes 256,1024,1024,1024,256 --activation gelu \
      -o "$pre.json"
    "$py" - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", rng.standard_normal((1024, 256), dtype=np.float32))
np.save(sys.argv[1] + "/y.npy", rng.standard_normal((1024, 256), dtype=np.float32))
PY
    data=(--data-x "$work/x.npy" --data-y "$work/y.npy" --loss mse)
  fi
  "$bin" --log-level warn partition "$pre.json" --stages 2 --method balanced -o "$pre.part.json"
  for prec in fp32 bf16; do
    job=(--pp 2 --microbatches "$m" --batch-size $((m * mbs)) --optimizer adamw
      --precision "$prec")
    if ! timeout 600 "$bin" launch --nproc 2 -- "$bin" run --model "$pre.json" \
      --partition "$pre.part.json" "${job[@]}" "${data[@]}" --lr 0.001 --steps "$steps" \
      --warmup-steps 2 --backend gloo --timeout 300 --metrics "$pre.$prec.jsonl" \
      --profile "$pre.$prec.profile.json" >"$pre.$prec.log" 2>&1; then
      cat "$pre.$prec.log"
      exit 1
    fi
    # The model's kept bytes: plain SGD, whose peak is the activations' (AdamW's temporaries of a
    # wide MLP outgrow them and the peak's activation part is then 0).
    "$bin" --log-level warn simulate --model "$pre.json" --partition "$pre.part.json" \
      --schedule 1F1B --pp 2 --microbatches "$m" --batch-size $((m * mbs)) --precision "$prec" \
      --metrics "$pre.$prec.model.json" >/dev/null
  done
  "$bin" --log-level warn simulate --schedule 1F1B --pp 2 --microbatches "$m" \
    --batch-size $((m * mbs)) --optimizer adamw --precision bf16 \
    --profile "$pre.bf16.profile.json" --metrics "$pre.bf16.sim.json" >/dev/null
  "$py" - "$pre" "$model" "$tolerance" "$peak_tolerance" <<'PY' || failed=1
import json, sys
pre, model = sys.argv[1], sys.argv[2]
tols = [float(t) if t else None for t in sys.argv[3:5]]
bad = False
def row(what, a, b, measured, predicted):
    global bad
    e = (predicted - measured) / measured
    tol = tols[1] if what.endswith("peak") else tols[0]
    bad = bad or (tol is not None and abs(e) > tol)
    print(f"{model:<4} {what:<11} {a:12d} {b:12d} {measured:8.3f} {predicted:8.3f} {100 * e:+7.1f}%")
prof = {p: json.load(open(f"{pre}.{p}.profile.json")) for p in ("fp32", "bf16")}
est = {p: {r["rank"]: r["peak_activation_bytes"] for r in json.load(open(f"{pre}.{p}.model.json"))["ranks"]}
       for p in ("fp32", "bf16")}
for s, (f, b) in enumerate(zip(prof["fp32"]["stages"], prof["bf16"]["stages"])):
    row(f"stage {s} act", f["activation_bytes"], b["activation_bytes"],
        b["activation_bytes"] / f["activation_bytes"], est["bf16"][s] / est["fp32"][s])
measured = json.loads(open(f"{pre}.bf16.jsonl").read().strip().split("\n")[-1])["peak_memory_bytes"]
predicted = {r["rank"]: r["peak_memory_bytes"] for r in json.load(open(f"{pre}.bf16.sim.json"))["ranks"]}
for r, v in enumerate(measured):
    row(f"rank {r} peak", v, predicted[r], 1.0, predicted[r] / v)
sys.exit(1 if bad else 0)
PY
done
if [[ -n "$tolerance" ]]; then
  if ((failed)); then echo "FAIL: a ratio off by more than ${tolerance} or a peak by more than ${peak_tolerance}"; exit 1; fi
  echo "PASS: every ratio within ${tolerance} and peak within ${peak_tolerance}"
fi
