#!/usr/bin/env bash
# Choosing libtorch at configure time (issue 32, cmake/PipewrightTorch.cmake):
#  1. -DTorch_DIR=<a pip wheel's Torch config> on a machine that also has Debian's libtorch-dev
#     mixes the two (the wheel's headers, Debian's libtorch.so/libc10.so): configure must stop and
#     name each path;
#  2. -DPIPEWRIGHT_TORCH_PYTHON=<a python without torch> stops with a message naming it.
#   torch_config.sh SOURCE_DIR WORK_DIR PIP_PYTHON
# Exit 77 (skipped) without the pip venv or without Debian's libtorch (nothing to mix).
set -euo pipefail
src="$1"; work="$2"; python="$3"
mkdir -p "$work"
work="$(mktemp -d "$work/torchcfg.XXXXXX")"
trap 'rm -rf "$work"' EXIT
if ! torch_cmake="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"; then
  echo "torch_config: no pip torch at $python (tools/install-deps --torch pip): skipped"; exit 77
fi
if [ ! -e /usr/lib/x86_64-linux-gnu/libtorch.so ]; then
  echo "torch_config: no Debian libtorch: nothing to mix: skipped"; exit 77
fi
opts=(-DBUILD_TESTING=OFF -DPIPEWRIGHT_BUILD_BENCH=OFF -DPIPEWRIGHT_WITH_PYTHON=OFF
      -DPIPEWRIGHT_WITH_NCCL=OFF)
fail=0
set +e
out="$(cmake -S "$src" -B "$work/mixed" "${opts[@]}" -DTorch_DIR="$torch_cmake/Torch" 2>&1)"; rc=$?
set -e
if [ "$rc" -ne 0 ] && grep -q "libtorch is mixed from different installations" <<<"$out" &&
   grep -q "headers  .*site-packages/torch/include" <<<"$out" &&
   grep -q "libtorch /usr/lib/x86_64-linux-gnu/libtorch.so" <<<"$out"; then
  echo "OK   -DTorch_DIR=<wheel> with libtorch-dev: configure stops naming both installations"
else
  echo "FAIL mixed configure: rc $rc"; echo "$out" | tail -20; fail=1
fi
/usr/bin/python3 -m venv --without-pip "$work/empty"
set +e
out="$(cmake -S "$src" -B "$work/nopy" "${opts[@]}" -DPIPEWRIGHT_TORCH_PYTHON="$work/empty/bin/python" 2>&1)"; rc=$?
set -e
flat="$(tr -s ' \n' '  ' <<<"$out")"  # CMake wraps messages
if [ "$rc" -ne 0 ] && grep -qF "PIPEWRIGHT_TORCH_PYTHON=$work/empty/bin/python: cannot import torch (ModuleNotFoundError" <<<"$flat"; then
  echo "OK   a python without torch: configure stops naming it"
else
  echo "FAIL python without torch: rc $rc"; echo "$out" | tail -20; fail=1
fi
# install-deps: a bad --torch is exit 2 before anything is installed.
set +e
out="$("$src/tools/install-deps" --torch conda 2>&1)"; rc=$?
set -e
if [ "$rc" -eq 2 ] && grep -q "install-deps: --torch takes debian or pip, not 'conda'" <<<"$out"; then
  echo "OK   install-deps --torch conda: exit 2"
else
  echo "FAIL install-deps --torch conda: rc $rc: $out"; fail=1
fi
exit $fail
