#!/usr/bin/env bash
# Install pyddstore-core with PYTHON against the libddstore installed in
# LIBPREFIX (by build-libddstore.sh), instead of building a second copy: the
# package records the full path of LIBPREFIX/lib/libddstore.so.<ABI major>.
# The one build recipe of the Python binding for spack, conda and CI.
#
#   packaging/scripts/build-pyddstore-core.sh PYTHON LIBPREFIX [pip args...]
#
# PYTHON must have pip, meson-python, meson and ninja (no build isolation:
# package managers provide the build tools), numpy and mpi4py. Extra
# arguments go to `pip install` (spack passes --prefix=...).
set -euo pipefail
python="${1:?usage: build-pyddstore-core.sh PYTHON LIBPREFIX [pip args...]}"
libprefix="${2:?usage: build-pyddstore-core.sh PYTHON LIBPREFIX [pip args...]}"
shift 2
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

export PKG_CONFIG_PATH="$libprefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --exists libddstore || {
  echo "build-pyddstore-core: no libddstore.pc under $libprefix/lib/pkgconfig; run build-libddstore.sh first" >&2
  exit 1
}
"$python" -m pip install --no-deps --no-build-isolation --no-cache-dir \
  -Csetup-args=-Duse_system_libddstore=true "$@" "$src/pyddstore-core"
