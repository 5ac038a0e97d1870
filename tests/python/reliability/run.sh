#!/usr/bin/env bash
# The reliability suite (ci/test.sh runs this file when it exists):
#  1. bad input, integrity, concurrency: pytest under mpiexec, N = 1, 2, 4;
#  2. system-level faults and handshake security: plain pytest (no mpiexec),
#     since those tests start, kill and watch MPI jobs and readers themselves;
#  3. the short soak: 4 ranks x 16 MiB = 64 MiB through every method
#     (the 1 GiB soak is manual: see bench/soak.py).
# Every mpiexec runs under `timeout`; everything runs under `nice` (shared
# machine). Exit status: non-zero when any part failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
source ci/suite.sh
suite_begin reliability
dir=tests/python/reliability
for n in 1 2 4; do
  suite_step "pytest np=$n" 240 nice mpiexec -n "$n" "$py" tests/python/run_pytest.py -q --color=no \
    "$dir/test_badinput.py" "$dir/test_integrity.py" "$dir/test_concurrency.py"
done
suite_step "system faults and security (no mpiexec)" 300 nice "$py" -m pytest -q --color=no -p no:cacheprovider \
  "$dir/test_system.py"
suite_step "soak 4 x 16 MiB" 300 nice mpiexec -n 4 "$py" bench/soak.py --mib-per-rank 16
suite_end
