#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set up (ci/setup.sh), build
# the C library and its tests with meson, then run every step of
# tests/manifest.toml (C tests, sanitizers, MPICH, simulated hosts, every
# Python suite under mpiexec at several rank counts), each with a timeout.
#
#   bash ci/test.sh               everything (tests/manifest.toml's `ci` steps)
#   bash ci/test.sh --list        the steps it would run, with timeouts; runs nothing
#   bash ci/test.sh --only REGEX  set up and build, then only the steps whose
#                                 label matches REGEX (grep -E)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
only=""
case "${1:-}" in
  --list)
    have=()
    command -v mpifort >/dev/null && have+=(--have mpifort)
    py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
    "$py" -c "import pyddstore, sys; sys.exit(0 if pyddstore.has_fabric() else 1)" 2>/dev/null \
      && have+=(--have fabric)
    exec "$py" ci/manifest.py --section ci --list "${have[@]}" ;;
  --only) only=${2:?usage: ci/test.sh --only REGEX} ;;
  "") ;;
  *) echo "usage: bash ci/test.sh [--list | --only REGEX]" >&2; exit 2 ;;
esac
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
opts=$(python ci/manifest.py --build ci) || exit 1  # tests/manifest.toml's [builds] ci
ci_opts=(); [ -z "$opts" ] || mapfile -t ci_opts <<<"$opts"
meson setup build-ci . "${ci_opts[@]}" >/dev/null
ninja -C build-ci >/dev/null

# The steps: tests/manifest.toml's `ci` section, in order (ci/manifest.py
# reads it). `needs` there: mpifort on PATH, libddstore with libfabric.
have=()
command -v mpifort >/dev/null && have+=(--have mpifort)
if python -c "import pyddstore, sys; sys.exit(0 if pyddstore.has_fabric() else 1)" 2>/dev/null; then
  have+=(--have fabric)
fi
if ! steps_out=$(python ci/manifest.py --section ci "${have[@]}"); then
  echo "ci/test.sh: tests/manifest.toml could not be read (above)" >&2
  exit 1
fi
mapfile -t steps <<<"$steps_out"
for line in "${steps[@]}"; do
  IFS=$'\t' read -r kind label t cmd <<<"$line"
  [ -z "$only" ] || grep -qE -- "$only" <<<"$label" || continue
  if [ "$kind" = skip ]; then
    echo "=== $label: skipped ($t)"
    continue
  fi
  eval "argv=($cmd)"
  run "$label" "$t" "${argv[@]}"
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
