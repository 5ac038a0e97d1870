#!/usr/bin/env bash
# Build and install libddstore into PREFIX with meson. The one build recipe
# of the C library: the spack package, the conda recipe and CI
# (ci/packaging.sh) all run this script, so what CI tests is what they build.
#
#   packaging/scripts/build-libddstore.sh PREFIX [BUILDDIR]
#
# Environment:
#   DDS_LIBFABRIC   enabled | disabled | auto (default auto): methods 1 and 2
#   DDS_MPI         auto | ompi-c | mpich | mpi (default auto): the MPI's pkg-config name
#   DDS_FORTRAN     enabled | disabled | auto (default auto): the Fortran module `ddstore`
#   DDS_BUILDTYPE   meson buildtype (default release)
#   MESON_ARGS      extra arguments for `meson setup` (conda-build sets cross/prefix flags here)
# Installs PREFIX/lib/libddstore.so* (soname libddstore.so.<ABI major>),
# PREFIX/include/ddstore/*.h and PREFIX/lib/pkgconfig/libddstore.pc; with the
# Fortran module also PREFIX/include/ddstore/fortran/ddstore.mod (pkg-config
# variable fmoddir) and PREFIX/lib/libddstore_fortran.a.
set -euo pipefail
prefix="${1:?usage: build-libddstore.sh PREFIX [BUILDDIR]}"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
builddir="${2:-$src/build-pkg-libddstore}"

# --libdir=lib: one predictable place for the library and the .pc file,
# whatever the distribution's multiarch default is.
wipe=()
[ -d "$builddir/meson-private" ] && wipe=(--wipe)   # idempotent: reconfigure from scratch
# shellcheck disable=SC2086
meson setup "$builddir" "$src/libddstore" "${wipe[@]}" \
  --prefix="$prefix" --libdir=lib \
  --buildtype="${DDS_BUILDTYPE:-release}" \
  -Dlibfabric="${DDS_LIBFABRIC:-auto}" -Dmpi="${DDS_MPI:-auto}" -Dfortran="${DDS_FORTRAN:-auto}" \
  ${MESON_ARGS:-}
meson compile -C "$builddir"
meson install -C "$builddir" --no-rebuild
