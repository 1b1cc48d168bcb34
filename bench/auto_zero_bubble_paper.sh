#!/usr/bin/env bash
# Auto on the Zero Bubble paper's profiled settings (issue 45): for each (p, m, T_F, T_B, T_W,
# T_comm, h, a) of Qi et al.'s ICLR 2024 evaluation, Auto's bubble rate (the paper's span
# definition) at the paper's memory, caps of p and 2p microbatches' activations with W keeping
# M_W / M_B = 32h / (34h + 5as) of them after I (s = 1024; Note [Weight-gradient activation]),
# next to the rates the authors' script prints for ZB-1p (their automatic scheduler at p M_B),
# ZB-H2 and ZB-2p (at 2p M_B); at 2p both objectives (--objective step, the default, and span),
# and the step's ratio to its lower bound. Source of the settings and rates:
# github.com/sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/
# efficiency.py at commit f68d38794764d7d937f4942dca3a1e9a07544898 (iclr_bubble_rates() and its
# closing docstring; times in ms here). The paper's B is pipewright's I: --backward-ms = B + W.
# WHOLE=1 adds a column: Auto at 2p with pipewright's default accounting (W keeps everything).
#   bench/auto_zero_bubble_paper.sh [BUILD_DIR]   (default build/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
pw="$build/bin/pipewright"
whole="${WHOLE:-0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# p m T_F T_B T_W T_comm h a ZB-1p ZB-H2 ZB-2p
settings="8 24 18.522 18.086 9.337 0.601 2304 24 0.1585 0.1083 0.0433
8 32 18.513 18.086 9.331 0.626 2304 24 0.1242 0.0837 0.0039
8 64 18.546 18.097 9.321 0.762 2304 24 0.0674 0.0444 0.0026
8 24 29.718 29.444 19.927 0.527 4096 32 0.1323 0.0698 0.0029
8 32 29.802 29.428 19.530 0.577 4096 32 0.1045 0.0559 0.0022
8 64 29.935 29.621 19.388 0.535 4096 32 0.0554 0.0294 0.0010
16 48 11.347 11.248 8.132 0.377 5120 40 0.1397 0.0672 0.0066
16 64 11.307 11.254 8.101 0.379 5120 40 0.1088 0.0516 0.0054
16 128 11.325 11.308 8.109 0.378 5120 40 0.0576 0.0266 0.0028
32 96 10.419 10.207 7.715 0.408 6144 48 0.1421 0.0641 0.0038
32 128 10.408 10.204 7.703 0.408 6144 48 0.1106 0.0490 0.0029
32 256 10.402 10.248 7.698 0.460 6144 48 0.0594 0.0257 0.0018"

# auto P M CAP F B W C KEEPS OBJECTIVE: "RATE STEP/LOWER_BOUND CHOSEN"
auto() {
  local keeps=()
  [[ "$8" != whole ]] && keeps=(--weight-grad-keeps "$8")
  "$pw" schedule Auto -p "$1" -m "$2" --max-inflight "$3" --forward-ms "$4" \
    --backward-ms "$(awk -v b="$5" -v w="$6" 'BEGIN {print b + w}')" --weight-ms "$6" \
    --p2p-ms "$7" "${keeps[@]}" --objective "$9" -f json -o "$work/auto.json" 2>&1 |
    sed -n 's/.*chose \(.*\): simulated step \([0-9.]*\) ms (lower bound \([0-9.]*\) ms), bubble rate \([0-9.]*\)%.*/\4 \2 \3 \1/p' |
    awk '{printf "%.4f %.5f ", $1 / 100, $2 / $3; for (i = 4; i <= NF; ++i) printf "%s%s", $i, (i < NF ? " " : "\n")}'
}

printf "%3s %4s %7s %7s %7s %6s | %6s %7s | %6s %6s %7s %9s %8s" p m T_F T_B T_W M_W/M_B ZB-1p \
  Auto@p ZB-H2 ZB-2p Auto@2p step/bound "by span"
[[ "$whole" == 1 ]] && printf " %9s" "W keeps 1"
printf "  %s\n" "chosen at 2p"
met=0
total=0
while read -r p m f b w c h a z1 h2 z2; do
  keeps="$(awk -v h="$h" -v a="$a" 'BEGIN {printf "%.6f", 32 * h / (34 * h + 5 * a * 1024)}')"
  read -r r1 _ _ <<<"$(auto "$p" "$m" "$p" "$f" "$b" "$w" "$c" "$keeps" step)"
  read -r r2 sb chosen <<<"$(auto "$p" "$m" $((2 * p)) "$f" "$b" "$w" "$c" "$keeps" step)"
  read -r rs _ _ <<<"$(auto "$p" "$m" $((2 * p)) "$f" "$b" "$w" "$c" "$keeps" span)"
  printf "%3s %4s %7s %7s %7s %7.4f | %6s %7s | %6s %6s %7s %9s %8s" "$p" "$m" "$f" "$b" "$w" \
    "$keeps" "$z1" "$r1" "$h2" "$z2" "$r2" "$sb" "$rs"
  if [[ "$whole" == 1 ]]; then
    read -r rw _ _ <<<"$(auto "$p" "$m" $((2 * p)) "$f" "$b" "$w" "$c" whole step)"
    printf " %9s" "$rw"
  fi
  printf "  %s\n" "$chosen"
  total=$((total + 1))
  # The target: no worse than ZB-1p at p and ZB-2p at 2p (the paper's figures have 4 decimals).
  if awk -v a="$r1" -v b="$z1" -v c="$r2" -v d="$z2" -v e="$rs" \
    'BEGIN {exit !(a <= b + 5e-5 && c <= d + 5e-5 && e <= d + 5e-5)}'; then
    met=$((met + 1))
  fi
done <<<"$settings"
echo "Auto no worse than ZB-1p at p and ZB-2p at 2p (both objectives): $met of $total settings"
