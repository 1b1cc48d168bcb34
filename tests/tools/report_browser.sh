#!/usr/bin/env bash
# `pipewright report` in a real browser (issue 25): headless Chromium loads the page of a
# simulation and of a predicted-vs-measured comparison; the page must finish its script with no
# script error (the page records errors on <html data-js-error>, --dump-dom shows them, and
# Chromium's console log must have no "Uncaught"), and its screenshot must not be blank
# (png_check.py). Exit 77 (skipped) when chromium is missing.
#   report_browser.sh PIPEWRIGHT EXAMPLES_DIR WORK_DIR
set -euo pipefail
pw="$1"; examples="$2"; work="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  echo "SKIP: chromium is not installed (Debian package chromium; tools/install-deps installs it)"
  exit 77
fi
mkdir -p "$work"
work="$(mktemp -d "$work/report.XXXXXX")"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

job=(--schedule InterleavedZeroBubble --pp 4 --stages-per-rank 2 --microbatches 8)
"$pw" --log-level warn report "${job[@]}" --model "$examples/gpt-small.json" -o "$work/sim.html"
# A comparison: the simulator's own trace stands in for a measured one (same schema).
"$pw" --log-level warn simulate "${job[@]}" --forward-ms 1 --backward-ms 2 --weight-ms 0.8 \
  --trace "$work/measured.json" > /dev/null
"$pw" --log-level warn report "${job[@]}" --forward-ms 1 --backward-ms 2 \
  --weight-ms 0.8 --measured "$work/measured.json" --warmup-steps 0 -o "$work/cmp.html" > /dev/null

failed=0
for page in sim cmp; do
  html="$work/$page.html"
  if sed 's#http://www.w3.org/2000/svg##g' "$html" | grep -Eq '(src|href)=|https?:'; then
    echo "FAIL $page: the page references something outside itself"; failed=1
  fi
  common=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile"
          --enable-logging=stderr --v=0)
  timeout 90 "$browser" "${common[@]}" --dump-dom "file://$html" > "$work/$page.dom" 2> "$work/$page.log" || true
  if ! grep -q 'data-report-ready="1"' "$work/$page.dom"; then
    echo "FAIL $page: the page's script did not finish"; failed=1
  fi
  if grep -q 'data-js-error="' "$work/$page.dom" || grep -Eq 'Uncaught|CONSOLE\(.*(rror|arning)' "$work/$page.log"; then
    echo "FAIL $page: script errors:"; grep -E 'Uncaught|CONSOLE' "$work/$page.log" | head -5
    failed=1
  fi
  timeout 90 "$browser" "${common[@]}" --window-size=1280,1600 --screenshot="$work/$page.png" \
    "file://$html" > /dev/null 2>> "$work/$page.log" || true
  if [ ! -s "$work/$page.png" ]; then
    echo "FAIL $page: no screenshot"; failed=1; continue
  fi
  if python3 "$here/png_check.py" "$work/$page.png"; then
    echo "OK   $page"
  else
    echo "FAIL $page: blank screenshot"; failed=1
  fi
done
exit $failed
