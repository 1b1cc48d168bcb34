#!/usr/bin/env bash
# Times every offline pipewright command end to end at p=64 v=4 m=128..1024 and prints seconds,
# peak RSS and growth exponents, then start-up times (docs/performance.md). See cli_scale.py.
#   bench/cli_scale.sh [BUILD_DIR]      REPEAT=3 SIZES="128 256 512 1024" BASE=old/pipewright
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec /usr/bin/python3 "$here/cli_scale.py" "$@"
