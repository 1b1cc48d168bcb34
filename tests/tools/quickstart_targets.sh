#!/usr/bin/env bash
# tools/quickstart builds only what its job runs (issue 36, item 1): the targets it names
# (`targets=(...)` in the script) must build the CLI and the executor with the libraries they
# link, and no test, benchmark or Python module (those are tools/test's). Lists, without running
# anything, every compile command `cmake --build --target <those>` would run from scratch in the
# build directory (make -nB, or ninja -t commands) and checks the sources; then checks that the
# job only runs programs it built (build/bin/pipewright, which execs pipewright-exec).
# usage: quickstart_targets.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
build="$2"
script="$src/tools/quickstart"
mapfile -t targets < <(grep -oE 'targets\+?=\([^)]*\)' "$script" | sed -E 's/.*\((.*)\)/\1/' |
  tr ' ' '\n' | grep .)
[ "${#targets[@]}" -ge 1 ] || { echo "FAIL: no targets=(...) in $script"; exit 1; }
echo "quickstart builds: ${targets[*]}"
present=()
for t in "${targets[@]}"; do
  if [ "$t" = pipewright-exec ] && ! grep -q '^PIPEWRIGHT_WITH_EXEC:BOOL=ON$' "$build/CMakeCache.txt"; then
    continue  # as the script: no executor in this build
  fi
  present+=("$t")
done
if [ -f "$build/build.ninja" ]; then
  commands="$(ninja -C "$build" -t commands "${present[@]}")"
else
  commands="$(make -C "$build" -nB "${present[@]}" 2>/dev/null)"
fi
sources="$(grep -oE -- '-c [^ ]+\.(cpp|cu)' <<<"$commands" | sed 's/^-c //' | sort -u)"
count="$(grep -c . <<<"$sources" || true)"
echo "$count compile units"
fail=0
if grep -E "/(tests|bench)/|/tools/python/" <<<"$sources"; then
  echo "FAIL: quickstart's targets compile the above (tests, benchmarks or the Python module)"
  fail=1
fi
for needed in /graph/src/ /sched/src/ /sim/src/ /tools/cli/main.cpp; do
  grep -q -- "$needed" <<<"$sources" || { echo "FAIL: nothing from $needed is built"; fail=1; }
done
if [[ " ${present[*]} " == *" pipewright-exec "* ]] && ! grep -q -- /exec/src/ <<<"$sources"; then
  echo "FAIL: the executor's library is not built"
  fail=1
fi
# The job runs $pw (build/bin/pipewright) and nothing else from the build directory.
if grep -nE 'build/(bin|lib)/' "$script" | grep -v 'build/bin/pipewright"'; then
  echo "FAIL: the job runs something from the build directory that quickstart does not build"
  fail=1
fi
exit "$fail"
