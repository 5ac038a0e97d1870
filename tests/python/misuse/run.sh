#!/usr/bin/env bash
# The misuse table (ci/test.sh runs this file): each case is an MPI job of its
# own, started by test_misuse.py under a timeout, so this pytest runs plainly,
# not under mpiexec. DDS_MISUSE_MPIEXEC / DDS_MISUSE_RANKS / DDS_MISUSE_TIMEOUT
# (see test_misuse.py) run it with another launcher, e.g. across simulated hosts.
# Arguments go to pytest (e.g. -k EXPR).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
source ci/suite.sh
suite_begin "misuse table"
suite_step "pytest tests/python/misuse $*" 600 nice "$py" -m pytest -q --color=no -p no:cacheprovider \
  tests/python/misuse "$@"
suite_end
