#!/usr/bin/env bash
# Install pyddstore-torch (pure Python) with PYTHON. The one build recipe for
# spack, conda and CI. torch comes from the package manager, never from here.
#
#   packaging/scripts/build-pyddstore-torch.sh PYTHON [pip args...]
set -euo pipefail
python="${1:?usage: build-pyddstore-torch.sh PYTHON [pip args...]}"
shift
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$python" -m pip install --no-deps --no-build-isolation --no-cache-dir "$@" "$src/pyddstore-torch"
