#!/usr/bin/env bash
# B5: remote reads across simulated hosts, beside the link's own limits and the gather
# ceilings measured in the same run (issue 24).
#
#   bench/b5.sh [--quick] [--out DIR]
#
# Brings up 4 simulated hosts (tests/cluster/cluster.sh: network namespaces on a bridge;
# needs root; torn down on every exit), measures the link between hosts 1 and 2 with iperf3
# (one TCP stream each way, before and after the runs) and fi_pingpong (libfabric tcp, 64 KiB
# messages), then, all with 2 ranks per host:
#   1. bench/b5_remote.py, 2 hosts x 2 ranks, Open MPI: remote-only get_batch of K=256 random
#      rows held on the other host (64 B .. 64 KiB), methods 0, 1 and 2 (tcp), interleaved with
#      the mpi4py gather ceiling (b5_gather_ceiling.py) and the C request/reply floor
#      (bench/b5c/floor.c as libb5cfloor.so, one ctypes call per batch) on the same batches;
#      wall time, MB/s and CPU seconds per batch                       -> DIR/b5.json
#   2. the same for method 0 (and 1) under MPICH, where build-mpich/ and the MPICH mpi4py venv
#      exist (bash ci/mpich.sh --build makes them; B5_MPICH=build makes them here, B5_MPICH=0
#      skips)                                                          -> DIR/b5_mpich.json
#   3. the bare C ceilings (bench/b5c, built with mpicc into build-b5c/): libfabric tcp;ofi_rxm
#      with one request and one reply per owner per batch (run before part 1 and again after the
#      next one), libddstore's own dds_get_batch from C (method 1 tcp, the library pyddstore
#      loads), and MPI Alltoallv of indices + rows (Open MPI; MPICH too where mpicc.mpich exists)
#                                                                      -> DIR/b5_c.json
#   4. the loader (DistDataset + ThreadDataLoader, 520 B samples, global shuffle) across 2 hosts
#      and on 1 host with the same 4 ranks, twice, alternated
#                                 -> DIR/b5_loader_2x2.json, b5_loader_1x4.json, and *_b.json
#   5. weak scaling of the loader over 1, 2, 3, 4 hosts x 2 ranks, the same samples per rank
#      (B5_WEAK_HOSTS, default "1 2 3 4"; B5_WEAK_CONFIGS, default "m0 m1_tcp m2_tcp"; 2 hosts
#      reuses part 4's run)                                             -> DIR/b5_weak_Nx2.json
# plus DIR/b5_link.json. Without root or without the simulator it writes b5_link.json with the
# reason, and report.py shows B5 as not measured.
#
# Open MPI runs with the settings docs/clusters.rst gives for TCP networks (OMPI_MCA_osc=sm,ucx,
# UCX_TLS=tcp,self, OMPI_MCA_btl_tcp_links=2) and OMPI_MCA_mpi_yield_when_idle=1 (ranks waiting in MPI give up the core:
# without it the gather ceiling crawls on a machine with fewer cores than busy threads).
# Environment: B5_BIND (parts 1 and 3: see above their definitions); DDS_CLUSTER_NAME (default b5) and DDS_CLUSTER_SUBNET (default 10.213.115.0/24)
# name this run's instance, so it coexists with others; DDS_CLUSTER_DIR: the simulator's
# scripts (default tests/cluster of this checkout); PYTHON as in run.sh. DIR must not be under
# /tmp or /dev/shm (each simulated host has its own) unless it is inside this checkout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
quick=""
out="bench/results"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "b5.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# shellcheck source=../ci/env.sh
source ci/env.sh
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$out"
out="$(cd "$out" && pwd)" # the hosts have their own /tmp: results go to the shared tree
rm -f "$out"/b5*.json
export DDS_CLUSTER_NAME="${DDS_CLUSTER_NAME:-b5}"
export DDS_CLUSTER_SUBNET="${DDS_CLUSTER_SUBNET:-10.213.115.0/24}"
cl="${DDS_CLUSTER_DIR:-$root/tests/cluster}"
export PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::FutureWarning}"

not_measured() {
  echo "b5: not measured: $1" >&2
  "$py" -c 'import json, sys; json.dump({"bench": "B5", "not_measured": sys.argv[2]}, open(sys.argv[1], "w"))' \
    "$out/b5_link.json" "$1"
  exit 0
}
[ -x "$cl/cluster.sh" ] || not_measured "no cluster simulator at $cl (tests/cluster)"
[ "$(id -u)" -eq 0 ] || not_measured "the cluster simulator needs root (network namespaces)"
"$cl/cluster.sh" check >/dev/null 2>&1 || not_measured "network namespaces cannot be made here"
command -v iperf3 >/dev/null || not_measured "iperf3 is not installed (Debian package iperf3)"

# The hosts see the checkout (cluster.sh binds it back even from /tmp), but not the rest of
# this machine's /tmp and /dev/shm: each host has its own.
case "$out/" in
  "$root"/*) ;;
  /tmp/*|/dev/shm/*) not_measured "--out $out is under /tmp or /dev/shm, which each simulated host has its own of: use /var/tmp/..." ;;
esac
weak_hosts="${B5_WEAK_HOSTS:-1 2 3 4}"
nh_max=2
for h in $weak_hosts; do [ "$h" -gt "$nh_max" ] && nh_max=$h; done
trap '"$cl/cluster.sh" down >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM HUP # the EXIT trap tears the hosts down on these too
"$cl/cluster.sh" up "$nh_max" >&2
ip2="$("$cl/host-exec" 2 hostname -I | awk '{print $1}')"
ip1="$("$cl/host-exec" 1 hostname -I | awk '{print $1}')"
secs=3; [ -n "$quick" ] && secs=1
port=$((5201 + RANDOM % 500))

iperf() { # iperf FROM TO_IP: bytes/s of one TCP stream FROM -> TO_IP (server on the other host)
  local from=$1 to_ip=$2 srv=$(( 3 - $1 )) js
  "$cl/host-exec" "$srv" timeout $((secs + 20)) iperf3 -s -1 -p "$port" -B "$to_ip" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  js="$("$cl/host-exec" "$from" timeout $((secs + 15)) iperf3 -c "$to_ip" -p "$port" -t "$secs" -J || true)"
  wait "$spid" || true
  "$py" -c 'import json, sys; d = json.loads(sys.stdin.read() or "{}"); print(d.get("end", {}).get("sum_received", {}).get("bits_per_second", 0) / 8)' <<<"$js"
}

pingpong() { # libfabric tcp, msg endpoints, 64 KiB: MB/s reported by fi_pingpong (or 0)
  command -v fi_pingpong >/dev/null || { echo 0; return; }
  local pp=$((47000 + RANDOM % 500)) txt
  FI_PROVIDER=tcp "$cl/host-exec" 2 timeout 60 fi_pingpong -p tcp -e msg -B "$pp" -S 65536 -I 500 >/dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  txt="$(FI_PROVIDER=tcp "$cl/host-exec" 1 timeout 60 fi_pingpong -p tcp -e msg -P "$pp" -S 65536 -I 500 "$ip2" 2>/dev/null || true)"
  wait "$spid" || true
  awk '$1 == "64k" {print $6 * 1e6; found = 1} END {if (!found) print 0}' <<<"$txt"
}

echo "b5: link $ip1 <-> $ip2, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
a12="$(iperf 1 "$ip2")"; a21="$(iperf 2 "$ip1")"
pp="$(pingpong)"
echo "b5: iperf3 1->2 $a12 B/s, 2->1 $a21 B/s; fi_pingpong 64 KiB $pp B/s" >&2
"$py" - "$out/b5_link.json" "$a12" "$a21" "$pp" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, sys
path, a12, a21, pp, load = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
json.dump({"bench": "B5", "iperf3_1to2_bytes_per_s": a12, "iperf3_2to1_bytes_per_s": a21,
           "iperf3_bytes_per_s": (a12 + a21) / 2 if a12 and a21 else max(a12, a21),
           "fi_pingpong_64k_bytes_per_s": pp, "loadavg_before": [float(x) for x in load.split()]},
          open(path, "w"), indent=1)
EOF

# Method 0 across hosts with Open MPI: its default osc/rdma cannot create windows over TCP
# (MPI_ERR_WIN); osc/ucx over UCX's tcp transport can, with osc/sm for the node's shared
# windows (docs/clusters.rst). UCX's sm and cma transports are left out: the simulated hosts
# share one kernel, so UCX would take them for one node and read across them through shared
# memory, which no real pair of hosts would do. yield_when_idle: see the head of this file.
export OMPI_MCA_osc="${OMPI_MCA_osc:-sm,ucx}" UCX_TLS="${UCX_TLS:-tcp,self}"
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
# Two TCP connections per pair of ranks for btl/tcp (method 0's gather, the C Alltoallv and
# mpi4py ceilings alike): docs/clusters.rst gives it and its measurement.
export OMPI_MCA_btl_tcp_links="${OMPI_MCA_btl_tcp_links:-2}"
status=0
run2() { # run2 NHOSTS PPN TIMEOUT [MPIEXEC-OPTION... --] ARGS...: b5_remote.py over the simulated hosts
  local nh=$1 ppn=$2 t=$3 mo=(); shift 3
  if [[ " $* " == *" -- "* ]]; then while [ "$1" != -- ]; do mo+=("$1"); shift; done; shift; fi
  echo "b5: [$(date +%T)] b5_remote.py $nh hosts x $ppn ranks ${mo[*]} $*" >&2
  timeout -k 10 "$t" "$cl/ompi-run" "$nh" "$ppn" ${mo[@]+"${mo[@]}"} -- "$py" bench/b5_remote.py "$@" || {
    echo "b5: b5_remote.py $* failed or timed out" >&2; status=1; }
}
note_json() { # note_json FILE REASON: a result file that only says why it was not measured
  echo "b5: not measured: $2" >&2
  "$py" -c 'import json, sys; json.dump({"bench": "B5", "not_measured": sys.argv[2]}, open(sys.argv[1], "w"))' "$1" "$2"
}

# Parts 1 and 3 (get_batch and the C programs, Open MPI) bind each rank to a core (B5_BIND,
# default "core"; "none" leaves them unbound): Open MPI's own default for 2 ranks per host, which
# the oversubscription setting turns off. Unbound, the scheduler moves 4 ranks and their progress
# threads between 2 cores, and the same loop runs at 0.3x to 2x its median from one 0.2 s repeat
# to the next; bound, repeats agree within a few per cent, so the store and the floor beside it
# are compared, not two scheduling draws. The loader parts stay unbound (1 host x 4 ranks would
# put two ranks on a core).
b5_bind=(); [ "${B5_BIND:-core}" = none ] || b5_bind=(--bind-to "${B5_BIND:-core}")
# The bare C programs (part 3), defined first: the request/reply floor also runs right before part 1,
# so that its runs bracket the store's in time (the report takes the mean of its runs).
csecs=2; ctime=240
[ -n "$quick" ] && csecs=0.5 ctime=90
cbuild="$root/build-b5c"
build_c() { # build_c MPICC DIR [fabric]: compile the ceilings; 1 if it cannot
  mkdir -p "$2" && "$1" -O2 -o "$2/b5c_mpi" bench/b5c/b5c_mpi.c || return 1
  [ -z "${3:-}" ] || { "$1" -O2 -o "$2/b5c_fabric" bench/b5c/b5c_fabric.c bench/b5c/floor.c \
    $(pkg-config --cflags --libs libfabric) -lpthread &&
    "$1" -O2 -fPIC -shared -o "$2/libb5cfloor.so" bench/b5c/floor.c $(pkg-config --cflags --libs libfabric) -lpthread; }
}
# libddstore's read path from C (b5c_store.c), linked against the library the Python runs load.
store_lib="$("$py" -c 'import pyddstore; print(pyddstore.library_path)' 2>/dev/null || true)"
build_store() { # build_store DIR: 1 if it cannot
  [ -f "$store_lib" ] && mpicc -O2 -I"$root/libddstore/include" -o "$1/b5c_store" bench/b5c/b5c_store.c \
    "$store_lib" -Wl,-rpath,"$(dirname "$store_lib")"
}
: > "$out/b5_c.jsonl"
cnotes=()
runc() { # runc LAUNCHER LABEL PROG: run a C ceiling on 2 hosts x 2 ranks, keep its JSON lines
  echo "b5: [$(date +%T)] C ceiling $2" >&2
  local txt
  local skip=0; [ "$1" = mpich-run ] && skip=1 # MPICH over UCX tcp may hang in MPI_Finalize
  local bind=(); [ "$1" = ompi-run ] && bind=("${b5_bind[@]}")
  txt="$(B5C_SKIP_FINALIZE=$skip timeout -k 10 "$ctime" "$cl/$1" 2 2 ${bind[@]+"${bind[@]}"} -- "$3" --seconds "$csecs" $quick)" ||
    { echo "b5: C ceiling $2 failed or timed out" >&2; cnotes+=("$2: failed or timed out"); }
  grep '^{' <<<"$txt" | sed "s/^{/{\"mpi\": \"${1%-run}\", /" >> "$out/b5_c.jsonl" || true
}
c_built=0
if build_c mpicc "$cbuild" fabric; then
  c_built=1
  runc ompi-run "libfabric tcp;ofi_rxm request/reply" "$cbuild/b5c_fabric"
fi

# 1. get_batch, Open MPI, methods 0/1/2, the mpi4py gather ceiling and the request/reply floor
# (libb5cfloor.so) in the same interleaved loops.
floor_lib=(); [ -f "$cbuild/libb5cfloor.so" ] && floor_lib=(--floor-lib "$cbuild/libb5cfloor.so")
run2 2 2 900 ${b5_bind[@]+"${b5_bind[@]}"} -- --out "$out/b5.json" --link "$out/b5_link.json" --label 2x2 \
  ${floor_lib[@]+"${floor_lib[@]}"} $quick

# 2. Method 0 under MPICH (its own libddstore build and mpi4py). UCX_TLS=tcp,self as for Open
# MPI, so that its reads cross the bridge (docs/clusters.rst: with it Debian's MPICH 4.0.2 hangs
# in MPI_Finalize now and then; the results are written before, and the timeout ends it).
mvenv="${PYDDSTORE_MPICH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pyddstore/mpich-venv}"
mlib="$root/build-mpich/subprojects/libddstore/libddstore.so"
mpich_mode="${B5_MPICH:-auto}"
if [ "$mpich_mode" = build ] && command -v mpiexec.mpich >/dev/null && { [ ! -f "$mlib" ] || [ ! -x "$mvenv/bin/python" ]; }; then
  echo "b5: building libddstore and mpi4py for MPICH (ci/mpich.sh --build)" >&2
  timeout -k 10 1500 bash ci/mpich.sh --build >&2 || echo "b5: ci/mpich.sh --build failed" >&2
fi
if [ "$mpich_mode" = 0 ]; then
  note_json "$out/b5_mpich.json" "MPICH left out (B5_MPICH=0)"
elif ! command -v mpiexec.mpich >/dev/null; then
  note_json "$out/b5_mpich.json" "MPICH is not installed (bash ci/mpich.sh --build installs and builds it)"
elif [ ! -f "$mlib" ]; then
  note_json "$out/b5_mpich.json" "no libddstore built for MPICH at build-mpich/ (bash ci/mpich.sh --build, or B5_MPICH=build)"
elif [ ! -x "$mvenv/bin/python" ]; then
  note_json "$out/b5_mpich.json" "no mpi4py built for MPICH at $mvenv (bash ci/mpich.sh --build, or B5_MPICH=build)"
else
  echo "b5: [$(date +%T)] b5_remote.py under MPICH, 2 hosts x 2 ranks" >&2
  timeout -k 10 600 env PYDDSTORE_LIBRARY="$mlib" PYTHONPATH="$root/bench:$root/pyddstore-core:$root/pyddstore-torch" \
    "$cl/mpich-run" 2 2 -- "$mvenv/bin/python" bench/b5_remote.py --configs m0 m1_tcp \
    --out "$out/b5_mpich.json" --link "$out/b5_link.json" --label 2x2-mpich $quick ||
    echo "b5: b5_remote.py under MPICH failed or timed out (results kept if written)" >&2
  [ -f "$out/b5_mpich.json" ] || note_json "$out/b5_mpich.json" "the MPICH run wrote no results (see the log)"
fi

# 3. Bare C ceilings (built and defined before part 1, which the request/reply floor brackets).
if [ "$c_built" = 1 ]; then
  if build_store "$cbuild"; then
    runc ompi-run "libddstore method 1 tcp from C" "$cbuild/b5c_store"
    # The request/reply floor again after it (it also ran before part 1), and the report takes
    # the mean of its runs: the machine's speed drifts by 10-25 % within minutes.
    runc ompi-run "libfabric tcp;ofi_rxm request/reply" "$cbuild/b5c_fabric"
  else
    cnotes+=("libddstore from C not measured: b5c_store did not build against '$store_lib'")
  fi
  runc ompi-run "MPI Alltoallv (Open MPI)" "$cbuild/b5c_mpi"
else
  cnotes+=("the C ceilings did not build with mpicc (pkg-config libfabric)")
fi
if command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null && [ "$mpich_mode" != 0 ]; then
  if build_c mpicc.mpich "$cbuild-mpich"; then
    runc mpich-run "MPI Alltoallv (MPICH)" "$cbuild-mpich/b5c_mpi"
  else
    cnotes+=("the MPI C ceiling did not build with mpicc.mpich")
  fi
fi
"$py" - "$out/b5_c.jsonl" "$out/b5_c.json" ${cnotes[@]+"${cnotes[@]}"} <<'EOF'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump({"bench": "B5", "results": rows, "notes": sys.argv[3:]}, open(sys.argv[2], "w"), indent=1)
os.unlink(sys.argv[1])
EOF

# 4. The loader across 2 hosts and on 1 host with the same 4 ranks. Each epoch is timed whole
# (the median of 5): 131072 samples per rank make 512 batches of 256 (35 reads of 15 batches for
# method 0's collective reads, 64 of 8 for the others) and 0.1-0.3 s. Shorter epochs moved the
# across-hosts / one-host ratio from run to run: +-25 % with 8192 samples per rank (~12 ms an
# epoch), +-20 % with 32768 (~50 ms: two alternated pairs of the same method-0 loader gave 0.605
# and 0.51 minutes apart).
# The two layouts cannot share a job, so the machine's drift between their runs goes straight
# into the ratio (method 2's moved from 0.684 to 0.497 between two runs of the same code): they
# run twice, alternated, and the report averages the two paired ratios (the second pair's
# files end in _b; --quick runs one pair).
per_rank=131072; [ -n "$quick" ] && per_rank=4096
rm -f "$out/b5_loader_2x2_b.json" "$out/b5_loader_1x4_b.json" # a quick run's pair is never averaged with an older one
for alt in "" ${quick:+skip} _b; do
  [ "$alt" = skip ] && break
  run2 2 2 600 --loader --per-rank $per_rank --out "$out/b5_loader_2x2$alt.json" --label 2x2 $quick
  run2 1 4 600 --loader --per-rank $per_rank --out "$out/b5_loader_1x4$alt.json" --label 1x4 $quick
done

# 5. Weak scaling: 1..4 hosts x 2 ranks, the same samples per rank (2 hosts: part 4's run).
read -r -a weak_cfg <<<"${B5_WEAK_CONFIGS:-m0 m1_tcp m2_tcp}"
for h in $weak_hosts; do
  [ "$h" = 2 ] && continue
  run2 "$h" 2 600 --loader --per-rank $per_rank --configs "${weak_cfg[@]}" \
    --out "$out/b5_weak_${h}x2.json" --label "${h}x2" $quick
done

# The link again after the runs: the machine's load may have changed meanwhile.
b12="$(iperf 1 "$ip2")"
"$py" - "$out/b5_link.json" "$b12" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, sys
path, b12, load = sys.argv[1], float(sys.argv[2]), sys.argv[3]
d = json.load(open(path))
d["iperf3_1to2_after_bytes_per_s"] = b12
d["loadavg_after"] = [float(x) for x in load.split()]
json.dump(d, open(path, "w"), indent=1)
EOF
echo "b5: iperf3 1->2 after the runs: $b12 B/s" >&2
exit $status
