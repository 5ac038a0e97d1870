#!/usr/bin/env bash
# Profile B5's remote reads: perf record -a -g over bench/b5_loop.py on 2 simulated hosts x 2 ranks.
#
#   bench/b5_profile.sh OUTDIR [VAR=VALUE ...]     e.g. bench/b5_profile.sh /work/prof M=1 RB=64
#
# VAR=VALUE pairs go to b5_loop.py's environment (M, RB, K, SECS, N, DDSTORE_*). Writes
# OUTDIR/loop.log (per-rank calls, us/call, CPU use), OUTDIR/perf.data, OUTDIR/by-dso.txt,
# OUTDIR/by-symbol.txt and OUTDIR/syscalls.txt (samples under each system call). Needs root,
# tests/cluster and perf (Debian package linux-perf). OUTDIR must not be under /tmp: the
# simulated hosts have their own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }
out="$1"; shift
mkdir -p "$out"
out="$(cd "$out" && pwd)"
# shellcheck source=../ci/env.sh
source ci/env.sh
py="${PYTHON:-$root/.venv/bin/python}"
export DDS_CLUSTER_NAME="${DDS_CLUSTER_NAME:-b5p}" DDS_CLUSTER_SUBNET="${DDS_CLUSTER_SUBNET:-10.213.117.0/24}"
export OMPI_MCA_osc="${OMPI_MCA_osc:-sm,ucx}" UCX_TLS="${UCX_TLS:-tcp,self}" # as bench/b5.sh
cl="$root/tests/cluster"
"$cl/cluster.sh" up 2 >&2
trap '"$cl/cluster.sh" down >/dev/null 2>&1 || true' EXIT
perf record -a -g -F 499 -o "$out/perf.data" -- \
  timeout 300 "$cl/ompi-run" 2 2 -- env "$@" "$py" bench/b5_loop.py >"$out/loop.log" 2>&1
perf report -i "$out/perf.data" --no-children --sort comm,dso --stdio 2>/dev/null | grep -E '^ +[0-9]' >"$out/by-dso.txt" || true
perf report -i "$out/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -60 >"$out/by-symbol.txt" || true
perf script -i "$out/perf.data" 2>/dev/null | grep -oE '__x64_sys_[a-z_0-9]+' | sort | uniq -c | sort -rn >"$out/syscalls.txt" || true
grep '^rank' "$out/loop.log"
head -5 "$out/by-dso.txt" || true
head -5 "$out/syscalls.txt" || true
