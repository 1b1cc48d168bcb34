#!/usr/bin/env bash
# pipewright as a library (issue 26; docs/library.md): installs the build into a temporary
# prefix, builds examples/library/cpp against it twice (CMake find_package, and pkg-config), and
# checks that the consumer prints the same torch CSV and step time as the installed CLI; then
# imports the installed Python module (when built) and runs examples/library/python/sweep.py.
#   install_consumer.sh BUILD_DIR SOURCE_DIR CXX WORK_DIR CXXFLAGS [PYTHON]
# CXXFLAGS: the build's CMAKE_CXX_FLAGS (a sanitizer build's consumer needs the same runtime).
set -euo pipefail
build="$1" src="$2" cxx="$3" work="$4" cxxflags="$5" python="${6:-}"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install"; }
libdir="$(cd "$prefix" && ls -d lib*/cmake/pipewright | head -1)"
libdir="${libdir%/cmake/pipewright}"
for f in bin/pipewright "$libdir/cmake/pipewright/pipewrightConfig.cmake" \
  "$libdir/cmake/pipewright/pipewrightConfigVersion.cmake" \
  "$libdir/cmake/pipewright/pipewrightTargets.cmake" "$libdir/pkgconfig/pipewright.pc" \
  include/pipewright/graph/model.hpp include/pipewright/sched/plan.hpp \
  include/pipewright/sim/simulator.hpp; do
  [ -e "$prefix/$f" ] || fail "$prefix/$f was not installed"
done
# Installed headers name only the standard library and pipewright (consumers need nothing else).
if grep -rhoE '#include <[^>]+>' "$prefix/include/pipewright" | sort -u |
  grep -E '<(boost|nlohmann|graphviz|gvc|torch|c10|ATen|mpi|nccl|cuda|gloo|spdlog|fmt|CLI)'; then
  fail "an installed header includes a third-party header"
fi
# The installed programs load the installed libraries, not the build tree's.
loaded() {  # FILE LIB: the real path of the LIB that FILE loads
  ldd "$1" | sed -n "s/^[[:space:]]*$2[^ ]* => \([^ ]*\) .*/\1/p" | head -1 | xargs -r readlink -f
}
[ "$(loaded "$prefix/bin/pipewright" libpw_graph)" = "$(readlink -f "$prefix/$libdir")/libpw_graph.so.0.1.0" ] ||
  { ldd "$prefix/bin/pipewright"; fail "installed pipewright does not load $prefix/$libdir/libpw_graph"; }

expect_same() {  # NAME P M F B: consumer output == CLI output
  local name="$1" p="$2" m="$3" f="$4" b="$5" out cli_csv cli_sim want got
  out="$("$work/$name/step_time" "$p" "$m" "$f" "$b")"
  cli_csv="$("$prefix/bin/pipewright" schedule 1F1B -p "$p" -m "$m")"
  [ "$(printf '%s\n' "$out" | grep -v '^step time')" = "$cli_csv" ] ||
    fail "$name: plan CSV differs from 'pipewright schedule 1F1B -p $p -m $m':\n$out\n--\n$cli_csv"
  cli_sim="$("$prefix/bin/pipewright" --log-level warn simulate --schedule 1F1B -p "$p" -m "$m" \
    --forward-ms "$f" --backward-ms "$b")"
  want="$(printf '%s\n' "$cli_sim" | sed -n 's/^makespan \([0-9.]*\) ms, bubble \([0-9.]*%\).*/\1 ms \2/p')"
  got="$(printf '%s\n' "$out" | sed -n 's/^step time \([0-9.]*\) ms, bubble \([0-9.]*%\).*/\1 ms \2/p')"
  [ -n "$want" ] && [ "$want" = "$got" ] ||
    fail "$name: step time '$got' != CLI '$want' (p=$p m=$m F=$f B=$b)\n$cli_sim"
  echo "$name p=$p m=$m F=$f B=$b: $got (= CLI)"
}

echo "== find_package(pipewright) consumer"
cmake -S "$src/examples/library/cpp" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$cxxflags" \
  -DCMAKE_EXE_LINKER_FLAGS="$cxxflags" >"$work/cmake.log" ||
  { cat "$work/cmake.log"; fail "consumer configure"; }
cmake --build "$work/cmake" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "consumer build"; }
expect_same cmake 4 8 1 2
expect_same cmake 2 6 1.5 2.5

echo "== pkg-config consumer"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
mkdir -p "$work/pkgconfig"
# shellcheck disable=SC2046,SC2086
"$cxx" -std=c++17 -O1 $cxxflags "$src/examples/library/cpp/step_time.cpp" \
  -o "$work/pkgconfig/step_time" $(pkg-config --cflags --libs pipewright)
expect_same pkgconfig 4 8 1 2
expect_same pkgconfig 3 9 0.5 1.25

if [ -n "$python" ]; then
  site="$prefix/lib/python3/dist-packages"
  if [ -d "$site/pipewright" ]; then
    echo "== import pipewright from $site"
    # The module links graph, sched and sim only: never the executor or libtorch.
    if ldd "$site"/pipewright/_pipewright*.so | grep -E "libpw_exec|libtorch|libc10|libmpi"; then
      fail "the Python module loads the executor's libraries"
    fi
    [ "$(loaded "$(ls "$site"/pipewright/_pipewright*.so)" libpw_sim)" = \
      "$(readlink -f "$prefix/$libdir")/libpw_sim.so.0.1.0" ] ||
      fail "the installed Python module does not load $prefix/$libdir/libpw_sim"
    cli="$("$prefix/bin/pipewright" --log-level warn simulate --schedule 1F1B -p 4 -m 8 \
      --forward-ms 1 --backward-ms 2 --metrics -)"
    PYTHONPATH="$site" CLI_METRICS="$cli" CLI_CSV="$("$prefix/bin/pipewright" schedule 1F1B -p 4 -m 8)" \
      "$python" - "$site" <<'PY'
import json, os, sys
import pipewright as pw
assert pw.__file__.startswith(sys.argv[1]), pw.__file__
plan = pw.schedule("1F1B", ranks=4, microbatches=8)
assert plan.to_csv() == os.environ["CLI_CSV"] + "\n" or plan.to_csv() == os.environ["CLI_CSV"], plan.to_csv()
m = pw.simulate(plan, forward_ms=1, backward_ms=2)
cli = json.loads(os.environ["CLI_METRICS"])
m.pop("timelines")
assert m == cli, (m, cli)
print(f"python: {pw.__file__}: makespan {m['makespan_ms']} ms (= CLI)")
PY
    (cd "$work" && PYTHONPATH="$site" "$python" "$src/examples/library/python/sweep.py" --ranks 4 \
      --microbatches 4,8 --plot "$work/sweep.png") | tee "$work/sweep.out"
    grep -q "^1F1B " "$work/sweep.out" || fail "sweep.py printed no 1F1B row"
  else
    echo "(no Python module in this build)"
  fi
fi
echo "OK"
