#!/usr/bin/env bash
# Faults across simulated hosts (a running instance of >= 3 hosts for
# link-down, >= 2 for host-kill; see README.md). Exit 0 when the fault is
# handled as documented, 1 otherwise; every wait is bounded.
#
#   faults.sh link-down     method-2 core group on hosts 1 and 2 (one rank
#                           each, Open MPI), a reader on host 3; host 2's
#                           interface goes down while the reader reads its
#                           rows: the reader must fail with a clean
#                           DDStoreError within DDSTORE_READ_TIMEOUT_S (set
#                           to 10 here) plus a margin. The link comes back up
#                           and the core job must then end normally.
#   faults.sh host-kill LAUNCHER
#                           a 2 x 2 job (LAUNCHER: ompi-run or mpich-run)
#                           reading across hosts in a loop; every process of
#                           host 2 is SIGKILLed: mpiexec must end (non-zero)
#                           and no process of the job may be left on any host.
#
# Environment: whatever the job needs (DDSTORE_METHOD, OMPI_MCA_osc, ...;
# PYTHON: the interpreter, default python). Scratch files: a directory under
# build-cluster/ of the checkout (shared by all hosts, unlike /tmp).
set -uo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$dir/../.." && pwd)"
source "$dir/lib.sh"
py=${PYTHON:-python}
mkdir -p "$root/build-cluster"
d="$(mktemp -d "$root/build-cluster/fault.XXXXXX")"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  "$dir/cluster.sh" link 2 up 2>/dev/null || true
  rm -rf "$d"
}
trap cleanup EXIT

# wait_pid PID SECONDS: 0 when PID (a child) ended in time, its status in $status.
wait_pid() {
  local p=$1 limit=$2 t0=$SECONDS
  while kill -0 "$p" 2>/dev/null; do
    if [ $((SECONDS - t0)) -ge "$limit" ]; then return 1; fi
    sleep 0.2
  done
  wait "$p"; status=$?
  return 0
}
wait_file() { # wait_file PATH SECONDS
  local t0=$SECONDS
  while [ ! -e "$1" ]; do
    [ $((SECONDS - t0)) -lt "$2" ] || return 1
    sleep 0.1
  done
}
fail() { echo "faults: FAIL $*"; for f in "$d"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; exit 1; }

link_down() {
  [ "$(ddsc_nhosts)" -ge 3 ] || fail "link-down needs 3 hosts"
  export DDSTORE_FABRIC=tcp DDSTORE_READ_TIMEOUT_S=10
  "$dir/ompi-run" 2 1 -- "$py" "$dir/faults.py" core "$d" > "$d/core.log" 2>&1 &
  local core=$!; pids+=("$core")
  "$dir/host-exec" 3 "$py" "$dir/faults.py" reader "$d" 2 > "$d/reader.log" 2>&1 &
  local reader=$!; pids+=("$reader")
  wait_file "$d/read-ok" 120 || fail "the reader never read the rows before the fault"
  "$dir/cluster.sh" link 2 down
  touch "$d/fault"
  local t0=$SECONDS
  wait_pid "$reader" $((DDSTORE_READ_TIMEOUT_S + 40)) || fail "reader still running $((SECONDS - t0)) s after host 2's link went down"
  local took=$((SECONDS - t0))
  "$dir/cluster.sh" link 2 up
  local res
  res=$(sed -n 's/^FAULT-RESULT //p' "$d/reader.log")
  [ -n "$res" ] || fail "the reader printed no result (exit $status)"
  echo "faults: reader after link down ($took s): $res"
  "$py" - "$res" <<'EOF' || fail "the reader did not fail cleanly"
import json, sys
r = json.loads(sys.argv[1])
ok = r["outcome"] == "error" and "DDSTORE_READ_TIMEOUT_S" in r["error"] and r["type"].startswith("DDStore")
sys.exit(0 if ok else 1)
EOF
  touch "$d/stop"
  wait_pid "$core" 90 || fail "the core job did not end after the link came back"
  [ "$status" = 0 ] || fail "the core job ended with status $status after the link came back"
  echo "faults: ok link-down (reader failed cleanly, core job ended normally)"
}

host_kill() {
  local launcher=${1:-}
  case "$launcher" in ompi-run|mpich-run) ;; *) fail "host-kill: give ompi-run or mpich-run" ;; esac
  "$dir/$launcher" 2 2 -- "$py" "$dir/faults.py" job "$d" > "$d/job.log" 2>&1 &
  local job=$!; pids+=("$job")
  local r
  for r in 0 1 2 3; do wait_file "$d/running.$r" 180 || fail "rank $r never started reading"; done
  sleep 1
  "$dir/cluster.sh" kill-host 2
  local t0=$SECONDS
  wait_pid "$job" 60 || fail "mpiexec still running $((SECONDS - t0)) s after host 2 was killed"
  echo "faults: mpiexec ended $((SECONDS - t0)) s after host 2 was killed, status $status"
  [ "$status" != 0 ] || fail "the job reported success although host 2 was killed"
  # Nothing of the job may stay behind on any host (only the holders).
  local k left t1=$SECONDS
  for k in 1 2; do
    while :; do
      left=$(ip netns pids "$(ddsc_host_ns "$k")" | grep -vx "$(ddsc_holder "$k")" | wc -l)
      [ "$left" = 0 ] && break
      [ $((SECONDS - t1)) -lt 30 ] || fail "$left process(es) left on host $k: $(ip netns pids "$(ddsc_host_ns "$k")" | xargs ps -o pid=,args= -p 2>/dev/null | tr '\n' ';')"
      sleep 0.5
    done
  done
  echo "faults: ok host-kill $launcher"
}

case "${1:-}" in
  link-down) link_down ;;
  host-kill) host_kill "${2:-}" ;;
  *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
