# The step runner that the suite scripts share (tests/python/*/run.sh,
# tests/c/reliability.sh, tests/c/tsan-tests.sh): source me from the
# repository root, after `cd "$root"`. It also sources ci/env.sh (Open MPI
# as root, oversubscription, libfabric tcp on loopback, unbuffered Python).
#
#   suite_begin <name>                     start the clock; <name> prefixes the summary
#   suite_step <label> <seconds> <cmd...>  run <cmd> under `timeout -k 10 <seconds>`;
#                                          a failure is counted and listed, the script goes on
#   suite_check <label> <cmd...>           the same without a timeout, for a shell
#                                          function that times its own commands
#   suite_fail <label>                     count a failure found some other way
#   suite_end                              the summary; exit 1 when anything failed
#   suite_build_arg <script> "$@"          $build: the script's one argument, a meson
#                                          build directory, as an absolute path
#
# $py: the Python to run ($PYTHON, else the checkout's .venv, else python).
# suite_budget (seconds, unset: none): once the script has run that long,
# later steps are skipped and listed, and a step's timeout is cut to what is
# left of the budget plus 50 s, so that a loaded machine skips the last
# steps instead of the caller's timeout killing the whole script.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
py=${PYTHON:-python}
if [ -z "${PYTHON:-}" ] && [ -x "$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/python" ]; then
  py="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv/bin/python"
fi

suite_build_arg() { # suite_build_arg <script> "$@": sets $build, or prints the usage and exits 2
  local script=$1; shift
  if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: bash $script <meson builddir with libddstore built>" >&2
    exit 2
  fi
  build="$(cd "$1" && pwd)"
}

suite_begin() { # suite_begin <name>
  suite_name=$1
  suite_t0=$SECONDS
  suite_failed=()
  suite_skipped=()
}

suite_fail() { # suite_fail <label>
  echo "FAILED: $1"
  suite_failed+=("$1")
}

suite_step() { # suite_step <label> <timeout-seconds, or "" for none> <command...>
  local label=$1 t=$2 t0=$SECONDS; shift 2
  echo "=== $label"
  if [ -n "${suite_budget:-}" ]; then
    local used=$((SECONDS - suite_t0))
    if [ "$used" -gt "$suite_budget" ]; then
      echo "    SKIPPED: over the ${suite_budget}-second budget"
      suite_skipped+=("$label")
      return 0
    fi
    local left=$((suite_budget + 50 - used))
    [ -n "$t" ] && [ "$t" -gt "$left" ] && t=$left
  fi
  local rc=0
  if [ -n "$t" ]; then
    timeout -k 10 "$t" "$@" || rc=$?
  else
    "$@" || rc=$?
  fi
  if [ $rc -ne 0 ]; then
    [ $rc = 124 ] || [ $rc = 137 ] && label="$label (timeout ${t}s)"
    suite_fail "$label"
  fi
  echo "    ($((SECONDS - t0)) s)"
}

suite_check() { # suite_check <label> <command...>
  local label=$1; shift
  suite_step "$label" "" "$@"
}

suite_end() { # suite_end: exit 1 when any step failed
  local n=${#suite_failed[@]}
  echo "$suite_name: $((SECONDS - suite_t0)) s, $n failure(s)${suite_budget:+, ${#suite_skipped[@]} step(s) skipped for time}"
  [ ${#suite_skipped[@]} -eq 0 ] || printf '  skipped for time: %s\n' "${suite_skipped[@]}"
  if [ "$n" -ne 0 ]; then
    printf '  failed: %s\n' "${suite_failed[@]}"
    exit 1
  fi
  if [ ${#suite_skipped[@]} -ne 0 ]; then
    echo "$suite_name: no step failed; ${#suite_skipped[@]} skipped for time"
  else
    echo "$suite_name: all steps passed"
  fi
}
