#!/usr/bin/env bash
# The portable executor (issue 32, docs/gpu.md "A portable executor"), on the portable pip-torch
# build (PIPEWRIGHT_PORTABLE=ON, PIPEWRIGHT_TORCH_PYTHON): tools/bundle-exec writes a bundle, then
#  1. `ldd` of every program and library in it, with the launcher's library path, resolves only
#     to the bundle, the torch wheel's folders (torch/lib, nvidia/*/lib) or the C/C++ runtime;
#  2. in a mount namespace whose /usr/lib/x86_64-linux-gnu holds only the C/C++ runtime (Debian's
#     libtorch, Gloo, spdlog, fmt, OpenBLAS, MPI ... out of reach), the bundle trains an MLP on
#     2 local processes (Gloo, 1F1B) to the same weights (1e-5) as on one;
#  3. the launcher refuses a python whose torch is another MAJOR.MINOR (exit 2, both named).
#   bundle_exec.sh ROOT BUILD_DIR PYTHON DATA_DIR WORK_DIR COMPARE
# Exit 77 (skipped) when not root (the mount namespace needs it).
set -euo pipefail
root="$1"; build="$2"; python="$3"; data="$4"; work="$5"; cmp="$6"
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
  echo "bundle_exec: needs root and unshare (a mount namespace): skipped"; exit 77
fi
mkdir -p "$work"
work="$(mktemp -d "$work/bundle.XXXXXX")"
trap 'rm -rf "$work"' EXIT
b="$work/bundle"
# Bad arguments: exit 2 with a message, nothing written.
set +e
msg="$("$root/tools/bundle-exec" 2>&1)"; rc=$?
[ "$rc" -eq 2 ] && [[ "$msg" == *"usage: tools/bundle-exec OUT"* ]] || { echo "FAIL no OUT: rc $rc: $msg"; exit 1; }
msg="$("$root/tools/bundle-exec" "$b" --python /usr/bin/true 2>&1)"; rc=$?
set -e
[ "$rc" -eq 2 ] && [[ "$msg" == *"/usr/bin/true cannot import torch"* ]] && [ ! -e "$b" ] ||
  { echo "FAIL python without torch: rc $rc: $msg"; exit 1; }
echo "OK   bad arguments exit 2"
"$root/tools/bundle-exec" "$b" --python "$python" --build "$build"
lp="$(PIPEWRIGHT_PYTHON="$python" "$b/pipewright" --library-path)"
site="$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"

# 1. ldd
runtime='^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libutil\.so\.1|ld-linux-x86-64\.so\.2|/lib64/ld-linux-x86-64\.so\.2)$'
bad=0
for f in "$b"/bin/* "$b"/lib/*.so; do
  while read -r name arrow path _; do
    [ -n "$name" ] || continue
    if [ "$arrow" != "=>" ]; then path="$name"; fi
    if [ "$path" = "not" ]; then echo "FAIL ldd $f: $name not found"; bad=1; continue; fi
    case "$path" in "$b"/lib/*|"$site"/*) continue ;; esac
    if [[ "$name" =~ $runtime ]]; then continue; fi
    echo "FAIL ldd $f: $name resolves to $path (outside the bundle, the torch wheel and the C/C++ runtime)"
    bad=1
  done < <(LD_LIBRARY_PATH="$lp" ldd "$f")
done
[ "$bad" -eq 0 ] || exit 1
echo "OK   ldd: $(ls "$b"/bin "$b"/lib | grep -c .) files need only the bundle, $site and the C/C++ runtime"

# 2. Train with Debian's libraries out of reach.
crt="$work/crt"
mkdir -p "$crt"
for lib in libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 \
           ld-linux-x86-64.so.2; do
  cp -L "/usr/lib/x86_64-linux-gnu/$lib" "$crt/"
done
args=(--log-level warn run --model "$data/mlp.json" --data-x "$data/mlp_x.npy"
      --data-y "$data/mlp_y.npy" --loss mse --optimizer adamw --lr 0.01 --batch-size 16
      --microbatches 4 --steps 5 --seed 3 --timeout 60 --schedule 1F1B)
# sh is dash (it needs only libc); each command's libraries are resolved after the bind mount.
LD_LIBRARY_PATH="$lp" OMP_NUM_THREADS=1 timeout 300 unshare -m sh -c '
  set -e
  mount --bind "$1" /usr/lib/x86_64-linux-gnu
  shift
  if [ -e /usr/lib/x86_64-linux-gnu/libtorch.so ] || [ -e /usr/lib/x86_64-linux-gnu/libspdlog.so.1.10 ]; then
    echo "FAIL: Debian libraries still visible"; exit 1
  fi
  b="$1"; w="$2"; shift 2
  "$b/bin/pipewright" launch --nproc 2 -- "$b/bin/pipewright" "$@" --pp 2 --save "$w/pp2.safetensors"
  "$b/bin/pipewright" launch --nproc 1 -- "$b/bin/pipewright" "$@" --pp 1 --save "$w/pp1.safetensors"
' sh "$crt" "$b" "$work" "${args[@]}"
"$cmp" "$work/pp1.safetensors" "$work/pp2.safetensors" 1e-5
echo "OK   without Debian's libraries: pp 2 (1F1B, Gloo) == pp 1"

# 3. Another torch: refused by the launcher.
if [ -x /usr/bin/python3 ] && other="$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"; then
  set +e
  msg="$(PIPEWRIGHT_PYTHON=/usr/bin/python3 "$b/pipewright" --version 2>&1)"; rc=$?
  set -e
  want="$(cat "$b/TORCH_VERSION")"
  if [ "${want%.*}" != "${other%.*}" ]; then
    [ "$rc" -eq 2 ] && [[ "$msg" == *"built against torch $want, but /usr/bin/python3 has torch"* ]] ||
      { echo "FAIL launcher with torch $other: rc $rc: $msg"; exit 1; }
    echo "OK   launcher refuses torch $other (bundle: $want)"
  fi
fi
