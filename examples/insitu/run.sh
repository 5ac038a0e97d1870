#!/usr/bin/env bash
# In-situ training on one machine: a Fortran simulation (2 ranks, one
# mpiexec) publishes its timesteps in a method-2 store; a Python training
# job (2 ranks, another mpiexec) joins it while it runs, trains a surrogate
# on the newest steps, checks that every row it read is one step's write,
# then stops the simulation. Output of both jobs goes to stdout.
#
#   bash examples/insitu/run.sh
#
# Needs: mpifort, the repository's .venv (bash ci/setup.sh), libfabric.
# Builds libddstore with its Fortran module into build-fortran/prefix
# (tests/fortran/install-prefix.sh) and compiles the simulation with
#   mpifort simulation.f90 $(pkg-config --cflags --libs libddstore)
# DDSTORE_FABRIC selects the provider (default shm; tcp with FI_TCP_IFACE=lo);
# INSITU_PLAIN=1 makes the ring a plain variable instead of a versioned one.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
source ci/env.sh
export PATH="$root/.venv/bin:$PATH"
export OMPI_MCA_rmaps_base_oversubscribe=1
source tests/fortran/install-prefix.sh build-fortran
mpifort examples/insitu/simulation.f90 $(pkg-config --cflags --libs libddstore) -o build-fortran/simulation

work=$(mktemp -d "${TMPDIR:-/tmp}/dds-insitu-XXXXXX")
sim_pid=
cleanup() {
  [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export DDSTORE_FABRIC="${DDSTORE_FABRIC:-shm}" FI_TCP_IFACE="${FI_TCP_IFACE:-lo}"
export DDSTORE_HANDSHAKE_DIR="$work/hs" DDSTORE_HANDSHAKE_TIMEOUT_S=30

# The simulation: stops when the trainer creates the stop file (or after 110 s;
# the whole run takes about 10 s on an idle 2-core machine: the bounds are for
# a loaded one, where importing torch alone can take half a minute).
LD_LIBRARY_PATH="$(pkg-config --variable=libdir libddstore)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  INSITU_STOP_FILE="$work/stop" INSITU_MAX_SECONDS=110 INSITU_PLAIN="${INSITU_PLAIN:-0}" \
  mpiexec -n 2 build-fortran/simulation > "$work/simulation.log" 2>&1 &
sim_pid=$!

# The training job, started while the simulation runs; it waits for the
# publication (DDSTORE_HANDSHAKE_TIMEOUT_S) and reads with Python's own libddstore.
rc=0
timeout -k 5 100 mpiexec -n 2 python examples/insitu/trainer.py --handshake-dir "$work/hs" \
  --stop-file "$work/stop" || rc=$?
touch "$work/stop"
sim_rc=0
wait "$sim_pid" || sim_rc=$?
sim_pid=
cat "$work/simulation.log"
if [ "$rc" -ne 0 ] || [ "$sim_rc" -ne 0 ]; then
  echo "insitu: FAILED (trainer exit $rc, simulation exit $sim_rc)"
  exit 1
fi
echo "insitu: simulation and trainer finished"
