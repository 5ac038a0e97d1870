#!/usr/bin/env bash
# The Fortran module as users get it: install libddstore (meson install, with
# the Fortran module) into a private prefix, compile tests/fortran/test_fortran.f90
# with `mpifort $(pkg-config --cflags --libs libddstore)` and run it under
# mpiexec at 1 to 4 ranks (method 0), and at 2 ranks with methods 1 and 2
# (libfabric shm provider) when the library has libfabric. Also checks that
# the module's constants and interfaces match ddstore.h.
#   bash tests/fortran/run.sh            (prefix: build-fortran/prefix)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
source ci/env.sh
[ -x .venv/bin/meson ] && export PATH="$root/.venv/bin:$PATH"
export OMPI_MCA_rmaps_base_oversubscribe=1

source tests/fortran/install-prefix.sh build-fortran
python3 tests/fortran/check_module.py libddstore/include/ddstore/ddstore.h libddstore/fortran/ddstore.f90 \
  build-fortran/build/ddstore_c_api.inc

fmoddir=$(pkg-config --variable=fmoddir libddstore)
[ -f "$fmoddir/ddstore.mod" ] || { echo "FAILED: no ddstore.mod in fmoddir=$fmoddir"; exit 1; }
echo "fmoddir=$fmoddir; compiling: mpifort test_fortran.f90 $(pkg-config --cflags --libs libddstore)"
mpifort -std=f2008 -Wall -Werror tests/fortran/test_fortran.f90 $(pkg-config --cflags --libs libddstore) \
  -o build-fortran/test_fortran
export LD_LIBRARY_PATH="$(pkg-config --variable=libdir libddstore)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for n in 1 2 3 4; do
  timeout -k 10 120 mpiexec -n "$n" build-fortran/test_fortran
done
# (grep -q at the end of a pipe can SIGPIPE nm and fail the pipeline under pipefail)
if grep -q ' fi_getinfo' <<<"$(nm -D "$(pkg-config --variable=libdir libddstore)/libddstore.so")"; then
  DDSTORE_METHOD=1 DDSTORE_FABRIC=shm DDSTORE_NODE_LOCAL=0 timeout -k 10 120 mpiexec -n 2 build-fortran/test_fortran
  hs=$(mktemp -d "${TMPDIR:-/tmp}/dds-fortran-hs-XXXXXX")
  DDSTORE_METHOD=2 DDSTORE_FABRIC=shm DDSTORE_HANDSHAKE_DIR="$hs/hs" timeout -k 10 120 mpiexec -n 2 build-fortran/test_fortran
  rm -rf "$hs"
else
  echo "libddstore without libfabric: methods 1 and 2 skipped"
fi
echo "fortran: all runs passed"
