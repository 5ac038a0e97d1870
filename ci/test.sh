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
run() { # run <label> <timeout-seconds> <command...>
  local label=$1 t=$2; shift 2
  echo "=== $label"
  if ! timeout -k 10 "$t" "$@"; then
    echo "FAILED: $label"
    failures=$((failures + 1))
  fi
}

echo "=== building libddstore and the C tests"
rm -rf build-ci
meson setup build-ci . >/dev/null
ninja -C build-ci >/dev/null

for nl in 1 0; do
  for n in 1 2 3 4; do
    run "C test_core np=$n node_local=$nl" 120 env DDSTORE_NODE_LOCAL=$nl mpiexec -n $n build-ci/tests/test_core
  done
done
if [ -f tests/c/extra-tests.sh ]; then
  run "C extra tests" 600 bash tests/c/extra-tests.sh build-ci
fi

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
for suite in tests/python/*/; do
  case "$suite" in */core/) continue ;; esac
  if [ -x "$suite/run.sh" ]; then
    run "suite $suite" 900 bash "$suite/run.sh"
  else
    pytest_suite "${suite%/}" 600 1 2 4
  fi
done

if [ "$failures" -ne 0 ]; then
  echo "$failures test run(s) failed"
  exit 1
fi
echo "all test runs passed"
