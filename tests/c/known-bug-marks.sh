#!/usr/bin/env bash
# A case of test_badinput marked KNOWN_BUG is skipped in every normal run, so
# a fixed bug behind a stale mark would never be tested again. This runs each
# marked case alone with the mark lifted, for every node-local setting, and
# fails when one of them passes (the mark must then go); a case that still
# fails or hangs (ended by the timeout) is reported with its reason.
#
#   bash tests/c/known-bug-marks.sh <test_badinput> [mpiexec [ranks]]
set -uo pipefail
exe=$1 mpiexec=${2:-mpiexec} np=${3:-2}
marked=$(env DDS_BADINPUT_LIST_KNOWN_BUGS=1 timeout -k 5 60 "$mpiexec" -n 1 "$exe") || {
  echo "known-bug marks: could not list the marked cases of $exe" >&2
  exit 2
}
if [ -z "$marked" ]; then
  echo "known-bug marks: no case of $(basename "$exe") is marked as a known bug"
  exit 0
fi
stale=0
for name in $marked; do
  for nl in 1 0; do
    # test_badinput exits 3 when a marked case passes (0 would mean it did not run)
    env DDS_BADINPUT_KNOWN_BUGS=1 DDS_BADINPUT_ONLY="=$name" DDSTORE_NODE_LOCAL=$nl DDSTORE_METHOD=0 \
      timeout -k 5 60 "$mpiexec" -n "$np" "$exe" >/dev/null 2>&1
    rc=$?
    if [ "$rc" -eq 3 ] || [ "$rc" -eq 0 ]; then
      echo "known-bug marks: STALE: $name passes at np=$np node_local=$nl: remove its KNOWN_BUG mark"
      stale=$((stale + 1))
    else
      echo "known-bug marks: still failing as marked: $name (np=$np node_local=$nl)"
    fi
  done
done
[ "$stale" -eq 0 ]
