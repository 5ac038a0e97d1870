#!/usr/bin/env bash
# File-backed stores across jobs (issue 28), run by ci/test.sh instead of the
# default pytest loop because each check is several MPI jobs in a row
# (jobs.py; the same checks inside one job: tests/python/core/test_storage.py
# and tests/python/torch/test_storage.py):
#  1. a store saved by one job is reopened by later jobs at other rank
#     counts, methods 0/1/2 and DDSTORE_NODE_LOCAL on and off, every row
#     bit-exact; a DistDataset too, without its source;
#  2. a missing, stale or foreign directory, and one another job holds
#     (writing, or reopened), give a clear error on every rank;
#  3. a dataset 4x a cgroup memory cap (ci/memcap.py) is written, read in a
#     whole random epoch and reopened at another rank count within the cap
#     (skipped, saying why, where no cgroup can be made).
# DDS_STORAGE_DIR is the directory the stores go under (default /var/tmp: a
# disk, not tmpfs, whose pages a memory cap could not reclaim).
# Across simulated hosts (ci/cluster.sh): DDS_STORAGE_MPIEXEC is the
# launcher (e.g. "tests/cluster/mpirun.sh --hosts 2"), DDS_STORAGE_HOSTS=2
# says the jobs span hosts, DDS_STORAGE_DIR a directory every host sees.
# Then methods 1/2 use DDSTORE_FABRIC=tcp, method 0 runs node-local on only
# (Open MPI's osc/ucx without RDMA hardware: docs/clusters.rst), part 3 is
# left out, and 4. saves into each host's own /tmp (node-local volumes):
# reopened on the same hosts at 4 and 3 ranks, and refused, clearly, on
# one host, which lacks the other's rows.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
source ci/suite.sh
launch=(${DDS_STORAGE_MPIEXEC:-mpiexec})
base="${DDS_STORAGE_DIR:-/var/tmp}"
work="$(mktemp -d "$base/pyddstore-storage-XXXXXX")"
holder=""
trap '[ -z "$holder" ] || kill "$holder" 2>/dev/null; rm -rf "$work"' EXIT
export DDSTORE_HANDSHAKE_DIR="$work/hs"  # method 2
jobs=tests/python/storage/jobs.py
hosts=${DDS_STORAGE_HOSTS:-1}
prov=shm; [ "$hosts" -gt 1 ] && prov=tcp
fabric=0
"$py" -c "import sys, pyddstore; sys.exit(0 if pyddstore.has_fabric() else 1)" && fabric=1

suite_begin "storage suite"
jrun() { # jrun <label> <timeout-seconds> <ranks> <jobs.py arguments...>; $JENV: env for the job
  local label=$1 t=$2 n=$3; shift 3
  suite_step "$label" "$t" env ${JENV:-} "${launch[@]}" -n "$n" "$py" $jobs "$@"
}

# ---- 1. save once, reopen in later jobs ------------------------------------------------
a="$work/a"
jrun "save np=2" 120 2 save "$a" --rows 3001
jrun "open np=2 (the saved layout), verify_saved" 120 2 open "$a" --rows 3001 --verify
jrun "open np=1" 120 1 open "$a" --rows 3001
if [ "$hosts" = 1 ]; then
  JENV=DDSTORE_NODE_LOCAL=0 jrun "open np=3 DDSTORE_NODE_LOCAL=0" 120 3 open "$a" --rows 3001
fi
jrun "open np=4" 120 4 open "$a" --rows 3001
if [ $fabric = 1 ]; then
  JENV="DDSTORE_METHOD=1 DDSTORE_FABRIC=$prov DDSTORE_NODE_LOCAL=0" \
    jrun "open np=3 method 1 $prov" 120 3 open "$a" --rows 3001
  JENV="DDSTORE_METHOD=2 DDSTORE_FABRIC=$prov" jrun "open np=$hosts method 2 $prov" 120 "$hosts" open "$a" --rows 3001
else
  echo "=== methods 1 and 2: skipped, libddstore built without libfabric"
fi
d="$work/dataset"
jrun "DistDataset: build np=3 (storage_dir=)" 180 3 save-dataset "$d" --rows 101
jrun "DistDataset.open np=2, without the source" 180 2 open-dataset "$d"

# ---- 2. bad directories, and directories another job holds ---------------------------
jrun "missing directory: error on every rank" 120 2 fails open "$work/none" "storage directory" "$work/none"
jrun "no such dataset: error on every rank" 180 2 fails open-dataset "$a" "no dataset 'train'"
cp -a "$a" "$work/stale"
touch "$work/stale/v1.dds"  # a file changed after the save
jrun "stale variable file: error on every rank" 120 2 fails open "$work/stale" "v1.dds" \
  "modified after the store was saved"
cp "$d/manifest" "$work/stale/manifest"  # another store's manifest
jrun "foreign manifest: error on every rank" 120 2 fails open "$work/stale" "stale"

hold() { # hold <what> <dir>: a job holding <dir> in the background until released
  rm -f "$work/flag.ready" "$work/flag.release"
  "${launch[@]}" -n 2 "$py" $jobs hold "$1" "$2" "$work/flag" > "$work/holder.log" 2>&1 &
  holder=$!
  local i
  for i in $(seq 600); do
    [ -e "$work/flag.ready" ] && return 0
    kill -0 $holder 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/holder.log"; return 1
}
release() {
  touch "$work/flag.release"
  wait $holder; local rc=$?
  holder=""
  [ $rc = 0 ] || { echo "the holding job failed:"; cat "$work/holder.log"; }
  return $rc
}
if hold create "$work/w"; then
  jrun "written by another job: create refused on every rank" 120 2 fails create "$work/w" \
    "being written by another job"
  jrun "written by another job: open refused on every rank" 120 2 fails open "$work/w" "being written"
  suite_check "the writing job ends cleanly" release
else
  suite_fail "a job holding $work/w did not start"
fi
if hold open "$a"; then
  jrun "reopened by another job: a second reader shares it" 120 1 open "$a" --rows 3001
  jrun "reopened by another job: create refused on every rank" 120 2 fails create "$a" "open for reading"
  suite_check "the reading job ends cleanly" release
else
  suite_fail "a job holding $a did not start"
fi

# ---- 3. larger than the job's memory ---------------------------------------------------
# 512 MiB of 4 KiB rows under a 128 MiB cap (page cache included). Each job
# starts with the files out of the page cache, so that what it reads is
# charged to its own cap.
cap=$((128 << 20))
big="$work/big/s"
capped() { # capped <label> <ranks> <jobs.py arguments...>: the job under the cap; the cap must bind
  local label=$1 n=$2; shift 2
  echo "=== $label"
  "$py" $jobs drop "$big" >/dev/null 2>&1
  timeout -k 10 300 "$py" ci/memcap.py --cap $cap --json "$work/cap.json" -- \
    "${launch[@]}" -n "$n" "$py" $jobs "$@"
  local rc=$?
  if [ $rc = 77 ]; then echo "SKIPPED (no memory cap): $label"; return 77; fi
  if [ $rc != 0 ]; then suite_fail "$label"; return 1; fi
  "$py" -c "import json, sys; f = json.load(open(sys.argv[1])); sys.exit(0 if f['hits'] > 0 else 1)" \
    "$work/cap.json" || suite_fail "$label: the cap never bound (the data fit in memory?)"
}
if [ "$hosts" -gt 1 ]; then
  echo "=== larger than memory: left out across hosts"
else
  capped "4x the memory cap: load np=2" 2 save "$big" --rows 131072 --row-bytes 4096
  rc=$?
  if [ $rc = 0 ]; then
    capped "4x the memory cap: a random epoch np=2, every row bit-exact" 2 open "$big" --epoch --cap $cap
    capped "4x the memory cap: reopen np=1, epoch + verify_saved" 1 open "$big" --epoch --verify --cap $cap
  elif [ $rc = 77 ]; then
    echo "################ storage suite: larger-than-memory part SKIPPED (see above) ################"
  fi
fi

# ---- 4. node-local volumes (across hosts) ----------------------------------------------
if [ "$hosts" -gt 1 ]; then
  nl="/tmp/$(basename "$work")-nl"  # the same path, each host's own directory
  jrun "node-local volumes: save np=4" 120 4 save "$nl" --rows 3001
  jrun "node-local volumes: open np=4 (the saved layout)" 120 4 open "$nl" --rows 3001 --verify
  jrun "node-local volumes: open np=3 (2 + 1 ranks)" 120 3 open "$nl" --rows 3001
  jrun "node-local volumes: open np=1 (one host) refused on every rank" 120 1 fails open "$nl" \
    "node-local storage directory" "reopen with ranks on the nodes"
  "${launch[@]}" -n 4 rm -rf "$nl"
fi

suite_end
