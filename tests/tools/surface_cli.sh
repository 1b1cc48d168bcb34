#!/usr/bin/env bash
# What a user sees (issue 25, item 2): `run` prints a banner with the resolved job once every rank
# has joined, says where a --resume resumed from (or that there was nothing to resume), and
# progress bars are drawn only on a terminal unless --progress asks for them.
#
#   surface_cli.sh BIN_DIR WORK_DIR
set -uo pipefail
bin="$1"; work="$2"
mkdir -p "$work"
work="$(mktemp -d "$work/surface.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
export PATH="$bin:$PATH" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
failed=0
check() {  # check NAME FILE REGEX [absent]
  if grep -Eq -e "$3" "$2"; then
    if [ "${4:-}" = absent ]; then echo "FAIL $1: '$3' found"; cat "$2"; failed=1; else echo "OK   $1"; fi
  else
    if [ "${4:-}" = absent ]; then echo "OK   $1"; else echo "FAIL $1: '$3' not found"; cat "$2"; failed=1; fi
  fi
}

pipewright dataset gpt sonnets --seq 32 --layers 2 -o m.json 2>/dev/null || exit 1
job=(--model m.json --pp 2 --microbatches 2 --batch-size 4 --dataset sonnets --loss cross-entropy
     --checkpoint-dir ck --resume --timeout 60)
timeout 120 pipewright launch --nproc 2 -- pipewright run "${job[@]}" --steps 2 >first.log 2>&1 \
  || { echo "FAIL first run"; cat first.log; exit 1; }
check banner first.log \
  "run: model 'sonnets-gpt' \(m.json\), 1F1B, pp 2 x dp 1 = 2 ranks over gloo, 2 stages \(1 per rank\), 2 microbatches x 2 samples, 2 steps"
check resume-none first.log "--resume: no checkpoint in ck yet, starting at step 1"
timeout 120 pipewright launch --nproc 2 -- pipewright run "${job[@]}" --steps 4 >second.log 2>&1 \
  || { echo "FAIL second run"; cat second.log; exit 1; }
check resume-from second.log "resumed from the checkpoint in ck after step 2: training steps 3..4"
check resume-steps second.log "step 3/4 loss"
check no-step-1 second.log "step 1/4 loss" absent

pipewright model gpt --layers 8 --hidden 512 --heads 8 --seq 256 -o gpt.json 2>/dev/null || exit 1
timeout 120 pipewright search --model gpt.json --devices 4 --global-batch 16 >s1.log 2>&1 </dev/null
check search-no-bar-off-tty s1.log 'search \[' absent
timeout 120 pipewright search --model gpt.json --devices 4 --global-batch 16 --progress >s2.log 2>&1 </dev/null
check search-bar-with-progress s2.log 'search \[#+ *\] 100%'
exit $failed
