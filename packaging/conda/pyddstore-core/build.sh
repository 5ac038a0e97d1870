#!/usr/bin/env bash
# conda-build runs this in the source root; the build is the same script CI runs.
set -euo pipefail
bash packaging/scripts/build-pyddstore-core.sh "$PYTHON" "$PREFIX"
