#!/usr/bin/env bash
# B5: remote reads across simulated hosts, beside the link's own limits measured in the same run.
#
#   bench/b5.sh [--quick] [--out DIR]
#
# Brings up 2 simulated hosts (tests/cluster/cluster.sh: network namespaces on a bridge;
# needs root), measures the link between them with iperf3 (one TCP stream each way, before
# and after the store runs) and fi_pingpong (libfabric tcp, 64 KiB messages), then runs
# bench/b5_remote.py with 2 hosts x 2 ranks (remote-only get_batch for 64 B .. 64 KiB rows,
# methods 0, 1 and 2, with the contiguous-read ceilings of each transport) and the loader part
# across the 2 hosts and on 1 host with the same 4 ranks. Writes DIR/b5.json,
# DIR/b5_loader_2x2.json, DIR/b5_loader_1x4.json and DIR/b5_link.json (default
# bench/results). Without root or without the simulator it writes b5_link.json with the reason,
# and report.py shows B5 as not measured.
#
# Environment: DDS_CLUSTER_NAME (default b5) and DDS_CLUSTER_SUBNET (default 10.213.115.0/24)
# name this run's instance, so it coexists with others; DDS_CLUSTER_DIR: the simulator's
# scripts (default tests/cluster of this checkout); PYTHON as in run.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
quick=""
out="bench/results"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
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

"$cl/cluster.sh" up 2 >&2
trap '"$cl/cluster.sh" down >/dev/null 2>&1 || true' EXIT
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
# memory, which no real pair of hosts would do.
export OMPI_MCA_osc="${OMPI_MCA_osc:-sm,ucx}" UCX_TLS="${UCX_TLS:-tcp,self}"
status=0
run2() { # run2 NHOSTS PPN TIMEOUT ARGS...: b5_remote.py over the simulated hosts
  local nh=$1 ppn=$2 t=$3; shift 3
  timeout -k 10 "$t" "$cl/ompi-run" "$nh" "$ppn" -- "$py" bench/b5_remote.py "$@" || {
    echo "b5: b5_remote.py $* failed or timed out" >&2; status=1; }
}
run2 2 2 900 --out "$out/b5.json" --link "$out/b5_link.json" --label 2x2 $quick
run2 2 2 600 --loader --out "$out/b5_loader_2x2.json" --label 2x2 $quick
run2 1 4 600 --loader --out "$out/b5_loader_1x4.json" --label 1x4 $quick

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
