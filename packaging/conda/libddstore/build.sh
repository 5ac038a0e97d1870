#!/usr/bin/env bash
# conda-build runs this in the source root; the build is the same script CI runs.
set -euo pipefail
export DDS_LIBFABRIC=enabled DDS_FORTRAN=enabled
# conda-forge's meson activation puts --prefix/-Dlibdir into MESON_ARGS; the
# build script sets both itself, and meson refuses an option given twice.
unset MESON_ARGS
bash packaging/scripts/build-libddstore.sh "$PREFIX" "$SRC_DIR/build-conda"
