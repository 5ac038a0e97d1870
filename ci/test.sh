#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set up (ci/setup.sh), build
# the C library and its tests with meson, then run the C tests and every
# Python suite under mpiexec at several rank counts, each with a timeout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash ci/setup.sh
source ci/env.sh
export PATH="$root/.venv/bin:$PATH"

failures=0
summary=()
failed_logs=()
steplogs="$root/build-ci-logs"
rm -rf "$steplogs"; mkdir -p "$steplogs"
run() { # run <label> <timeout-seconds> <command...>
  local label=$1 t=$2; shift 2
  local t0=$SECONDS verdict=ok log
  log="$steplogs/step-${#summary[@]}.log"
  echo "=== $label"
  # Each step's output is also kept, so that a failure's last lines can be
  # shown again at the very end, where CI's excerpt of the output looks.
  if ! timeout -k 10 "$t" "$@" 2>&1 | tee "$log"; then
    echo "FAILED: $label"
    failures=$((failures + 1))
    verdict=FAILED
    failed_logs+=("$label|$log")
  fi
  # Per-step wall time, so that the suite's 30-minute budget can be kept.
  summary+=("$(printf '%6d s  %-6s %s' $((SECONDS - t0)) "$verdict" "$label")")
}

echo "=== building libddstore and the C tests"
rm -rf build-ci
meson setup build-ci . >/dev/null
ninja -C build-ci >/dev/null

# Every C test (method 0 both ways, methods 1/2 on shm and tcp, the
# handshake parser) at several rank counts, each with its own timeout.
run "C tests (meson test)" 1500 meson test -C build-ci --print-errorlogs --num-processes 1
if [ -f tests/c/extra-tests.sh ]; then
  run "C extra tests" 900 env DDS_SKIP_MPICH=1 bash tests/c/extra-tests.sh build-ci
fi
run "C ThreadSanitizer" 900 bash tests/c/tsan-tests.sh build-ci
# The Fortran module as users build with it (meson install, then mpifort
# $(pkg-config --cflags --libs libddstore); 1-4 ranks), and the in-situ
# example: a Fortran simulation publishing timesteps (method 2) while a
# Python job trains on them (examples/insitu).
if command -v mpifort >/dev/null; then
  run "Fortran module" 300 bash tests/fortran/run.sh
  if python -c "import pyddstore, sys; sys.exit(0 if pyddstore.has_fabric() else 1)"; then
    run "example insitu" 150 bash examples/insitu/run.sh
  fi
else
  echo "=== no mpifort: Fortran module test and in-situ example skipped"
fi
# Debian's MPICH beside Open MPI: the C tests and the Python core (methods
# 0 and 1) and torch suites with an mpi4py built against MPICH (cached).
run "MPICH" 2400 bash ci/mpich.sh --python
# Across simulated hosts (network namespaces, tests/cluster/; skipped loudly
# where they cannot be made): Open MPI and MPICH x methods 0/1/2, method-2
# readers on a host of their own, faults across hosts, the main job.
run "cluster (simulated hosts)" 1500 bash ci/cluster.sh build-ci

pytest_suite() { # pytest_suite <dir> <timeout> <ranks...> ; env from caller
  local dir=$1 t=$2; shift 2
  [ -d "$dir" ] || return 0
  ls "$dir"/test_*.py >/dev/null 2>&1 || return 0
  for n in "$@"; do
    run "pytest $dir np=$n ${SUITE_ENV:-}" "$t" env ${SUITE_ENV:-} mpiexec -n "$n" python tests/python/run_pytest.py -q --color=no "$dir"
  done
}
pytest_suite tests/python/core 300 1 2 3 4
SUITE_ENV="DDSTORE_NODE_LOCAL=0" pytest_suite tests/python/core 300 2 4
# The core suite over methods 1 and 2 (libfabric shm and tcp) runs in
# tests/python/fabric/run.sh, below.
pytest_suite tests/python/torch 600 1 2 4
pytest_suite tests/python/sampler 600 1 2 4
# Local Spark takes over a minute to start: its test runs at 2 ranks only.
SUITE_ENV="PYDDSTORE_TEST_SPARK=0" pytest_suite tests/python/parquet 600 1 4
pytest_suite tests/python/parquet 600 2
for suite in tests/python/*/; do
  case "$suite" in */core/|*/torch/|*/sampler/|*/parquet/) continue ;; esac
  if [ -x "$suite/run.sh" ] || [ -f "$suite/run.sh" ]; then
    run "suite $suite" 900 bash "$suite/run.sh"
  else
    pytest_suite "${suite%/}" 600 1 2 4
  fi
done
for step in ci/docs.sh ci/packaging.sh ci/abi-check.sh; do
  if [ -f "$step" ]; then run "$step" 900 bash "$step"; fi
done

echo "=== summary ($SECONDS s in all)"
printf '%s\n' "${summary[@]}"
if [ "$failures" -ne 0 ]; then
  for f in "${failed_logs[@]}"; do
    echo "=== last lines of the failed step: ${f%%|*}"
    grep -vE '^\s*$' "${f#*|}" | tail -n 30
  done
  echo "$failures test run(s) failed"
  exit 1
fi
echo "all test runs passed"
