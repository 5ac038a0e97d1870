#!/usr/bin/env bash
# libddstore with Debian's MPICH beside the default Open MPI.
#
#   bash ci/mpich.sh            install MPICH if missing, build build-mpich/ (meson,
#                               -Dlibddstore:mpi=mpich), run the C tests
#   bash ci/mpich.sh --python   also build mpi4py from source against MPICH into
#                               .mpich/venv (cached) and run the Python core suite with it
#   bash ci/mpich.sh --build    only install and build (build-mpich/ and the cached
#                               mpi4py venv), run nothing (ci/cluster.sh uses it)
#   bash ci/mpich.sh --install  only install MPICH beside Open MPI, as below
#                               (ci/packaging.sh uses it)
#
# Installing libmpich-dev/mpich must not change which MPI the machine uses by
# default: Debian registers both in the `mpi` and `mpirun` alternatives and
# Open MPI has the higher priority on amd64, but a manual selection or another
# architecture could flip them. The script records the selections before
# installing and puts them back if they moved, then checks that `mpiexec`
# still is Open MPI. MPICH is always called by its own names (mpiexec.mpich,
# mpicc.mpich) and never mixed with Open MPI in one process.
#
# MPI-specific behaviour users must know (measured on this machine, 2 ranks,
# DDSTORE_NODE_LOCAL=0 so that reads take the RMA path): with method 0 a
# dds_get() of another rank's row is MPI_Get + flush in a passive-target
# epoch. Open MPI 4.1 (osc rdma) completes it at once while the target sleeps
# or computes outside MPI; MPICH 4.0 (ch4:ucx) completes it only when the
# target next enters the MPI library: the read took 3.0 s while the target
# spent 3 s outside MPI. MPICH_ASYNC_PROGRESS=1 (a progress thread per rank,
# which costs a core) brings it to a few ms. Reads of ranks on the same node
# through the shared-memory fast path (DDSTORE_NODE_LOCAL=1, the default) are
# memcpy and unaffected with both MPIs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python_too=0
[ "${1:-}" = "--python" ] && python_too=1
build_only=0
[ "${1:-}" = "--build" ] && build_only=1
install_only=0
[ "${1:-}" = "--install" ] && install_only=1

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
alt_value() { update-alternatives --query "$1" 2>/dev/null | awk '/^Value:/ {print $2}'; }
alt_status() { update-alternatives --query "$1" 2>/dev/null | awk '/^Status:/ {print $2}'; }

# ---- install, keeping Open MPI the default ----------------------------------------
declare -A before_value before_status
for g in mpi mpirun; do
  before_value[$g]="$(alt_value $g)"
  before_status[$g]="$(alt_status $g)"
done
missing=()
for p in mpich libmpich-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "mpich: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    "${missing[@]}" >/dev/null
fi
for g in mpi mpirun; do
  now="$(alt_value $g)"
  if [ -n "${before_value[$g]}" ] && [ "$now" != "${before_value[$g]}" ]; then
    echo "mpich: alternative '$g' moved to $now; restoring ${before_value[$g]}"
    if [ "${before_status[$g]}" = auto ]; then
      $SUDO update-alternatives --auto "$g" >/dev/null
    fi
    if [ "$(alt_value $g)" != "${before_value[$g]}" ]; then
      $SUDO update-alternatives --set "$g" "${before_value[$g]}" >/dev/null
    fi
  fi
done
if ! grep -qiE "open ?mpi|openrte" <<<"$(mpiexec --version 2>&1)"; then
  echo "mpich: the default mpiexec is no longer Open MPI:" >&2
  mpiexec --version >&2 || true
  exit 1
fi
command -v mpiexec.mpich >/dev/null || { echo "mpich: mpiexec.mpich not found" >&2; exit 1; }
echo "mpich: $(mpichversion 2>/dev/null | sed -n 's/^MPICH \(Version\|Device\):[[:space:]]*/\1 /p' | paste -sd ';' -)"
echo "mpich: default mpiexec is still $(mpiexec --version 2>&1 | head -1)"
[ $install_only = 0 ] || exit 0

# ---- build libddstore + C tests against MPICH --------------------------------------
# A meson build of the whole tree with the `mpich` pkg-config dependency
# (-Dlibddstore:mpi=mpich: tests/manifest.toml's [builds] mpich): the library
# and every C test program of tests/meson.build (test_core, test_badinput, ...)
# link MPICH.
build=build-mpich
if [ ! -f "$build/build.ninja" ]; then
  opts=$(python3 ci/manifest.py --build mpich) && mapfile -t mpich_opts <<<"$opts" \
    || { echo "mpich: no mpich build options in tests/manifest.toml" >&2; exit 1; }
  nice meson setup "$build" . "${mpich_opts[@]}" >/dev/null
fi
nice ninja -C "$build" -j2 >/dev/null
# (grep -q on a pipe would SIGPIPE ldd and fail the pipeline under pipefail)
if ! grep -q libmpich <<<"$(ldd "$build/tests/test_core")"; then
  echo "mpich: $build/tests/test_core is not linked with MPICH" >&2
  exit 1
fi
libdir="$build/subprojects/libddstore"
has_fabric=0
grep -q libfabric <<<"$(ldd "$libdir/libddstore.so")" && has_fabric=1
hsdir="$(mktemp -d /tmp/ddstore-mpich-hs.XXXXXX)"
trap 'rm -rf "$hsdir"' EXIT

# mpi4py against MPICH in a cached virtual environment; sets $venv.
build_mpich_venv() {
  # Outside the checkout, so that CI runs on the same machine (each in a
  # fresh clone) reuse the mpi4py build.
  venv=${PYDDSTORE_MPICH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pyddstore/mpich-venv}
  mkdir -p "$(dirname "$venv")"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "from mpi4py import MPI; assert 'MPICH' in MPI.Get_library_version()" 2>/dev/null; then
    echo "mpich: building mpi4py from source against MPICH into $venv (cached; takes a few minutes)"
    t0=$SECONDS
    python3 -m venv --system-site-packages "$venv"
    # numpy/pytest from the main venv's pinned requirements; mpi4py compiled
    # with mpicc.mpich, never the Open MPI wheel.
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q numpy pytest tqdm
    "$venv/bin/python" -m pip install -q torch==2.13.0
    # -O0 -g0: the default -O3 -g compile of mpi4py's MPI.c takes ~170 s on two cores, this
    # ~35 s; only tests run on this build.
    env MPICC=mpicc.mpich CC=mpicc.mpich CFLAGS="-O0 -g0" nice "$venv/bin/python" -m pip install -q \
      --no-binary=mpi4py --no-cache-dir --no-build-isolation mpi4py
    echo "mpich: mpi4py built in $((SECONDS - t0)) s"
  fi
}
if [ $build_only = 1 ]; then
  build_mpich_venv
  echo "mpich: built $build and $venv (--build: no tests run)"
  exit 0
fi

failures=0
run() { # run <label> <timeout> <command...>
  local label=$1 t=$2; shift 2
  local t0=$SECONDS
  if timeout -k 10 "$t" "$@" > "$build/last.log" 2>&1; then
    echo "mpich: ok   $label ($((SECONDS - t0)) s): $(grep -E 'passed' "$build/last.log" | tail -1)"
  else
    echo "mpich: FAIL $label ($((SECONDS - t0)) s)"
    tail -20 "$build/last.log"
    failures=$((failures + 1))
  fi
}
# Hydra (MPICH's launcher) needs no root/oversubscription flags. Ranks spin
# while they wait, so 4 ranks on 2 cores are slow but correct.
for n in 1 2 4; do
  for nl in 1 0; do
    run "test_core method=0 np=$n node_local=$nl" 180 \
      env DDSTORE_METHOD=0 DDSTORE_NODE_LOCAL=$nl mpiexec.mpich -n $n "$build/tests/test_core"
  done
  if [ $has_fabric = 1 ] && [ $n -le 2 ]; then
    run "test_core method=1 fabric=shm np=$n" 180 \
      env DDSTORE_METHOD=1 DDSTORE_FABRIC=shm mpiexec.mpich -n $n "$build/tests/test_core"
  fi
done
for n in 1 2; do
  for nl in 1 0; do
    run "test_badinput method=0 np=$n node_local=$nl" 180 \
      env DDSTORE_METHOD=0 DDSTORE_NODE_LOCAL=$nl mpiexec.mpich -n $n "$build/tests/test_badinput"
  done
done
run "test_badinput known-bug marks" 600 bash tests/c/known-bug-marks.sh "$build/tests/test_badinput" mpiexec.mpich
if [ $has_fabric = 1 ]; then
  run "test_badinput method=2 fabric=shm np=2" 180 \
    env DDSTORE_METHOD=2 DDSTORE_FABRIC=shm DDSTORE_HANDSHAKE_DIR="$hsdir" \
    mpiexec.mpich -n 2 "$build/tests/test_badinput"
fi

# ---- mpi4py against MPICH (optional, cached) ------------------------------------------
if [ $python_too = 1 ]; then
  build_mpich_venv
  "$venv/bin/python" -c "from mpi4py import MPI; print('mpich: mpi4py', MPI.Get_library_version().splitlines()[0])"
  # The steps: tests/manifest.toml's `mpich` section (ci/manifest.py reads
  # it). MPIEXEC names MPICH's launcher for tests that start jobs of their
  # own (Open MPI's mpiexec cannot start an MPICH-built mpi4py).
  have=()
  [ $has_fabric = 1 ] && have+=(--have fabric)
  steps_out=$(python3 ci/manifest.py --section mpich "${have[@]}" --mpiexec mpiexec.mpich \
    --python "$venv/bin/python" --env MPIEXEC=mpiexec.mpich \
    --env PYDDSTORE_LIBRARY="$(cd "$libdir" && pwd)/libddstore.so" \
    --env PYTHONPATH="$root/pyddstore-core:$root/pyddstore-torch") \
    || { echo "mpich: tests/manifest.toml could not be read (above)"; exit 1; }
  mapfile -t steps <<<"$steps_out"
  for line in "${steps[@]}"; do
    IFS=$'\t' read -r kind label t cmd <<<"$line"
    if [ "$kind" = skip ]; then
      echo "mpich: skip $label ($t)"
      continue
    fi
    eval "argv=($cmd)"
    run "$label" "$t" "${argv[@]}"
  done
fi

if [ $failures -ne 0 ]; then
  echo "mpich: $failures run(s) failed"
  exit 1
fi
echo "mpich: all runs passed"
