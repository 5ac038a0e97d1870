#!/usr/bin/env bash
# The misuse table (ci/test.sh runs this file): each case is an MPI job of its
# own, started by test_misuse.py under a timeout, so this pytest runs plainly,
# not under mpiexec. DDS_MISUSE_MPIEXEC / DDS_MISUSE_RANKS / DDS_MISUSE_TIMEOUT
# (see test_misuse.py) run it with another launcher, e.g. across simulated hosts.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export FI_TCP_IFACE=lo PYTHONUNBUFFERED=1
py=python
[ -x "$root/.venv/bin/python" ] && py="$root/.venv/bin/python"
t0=$SECONDS
timeout -k 10 600 nice "$py" -m pytest -q --color=no -p no:cacheprovider tests/python/misuse "$@"
rc=$?
echo "--- misuse table: $((SECONDS - t0)) s"
exit $rc
