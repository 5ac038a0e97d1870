#!/usr/bin/env bash
# mpirun.sh [--mpi ompi|mpich] --hosts H [--ppn P] -n N [MPIEXEC-OPTION...] CMD [ARG...]
# mpiexec-like front end of ompi-run / mpich-run for programs that append
# "-n N CMD" to a launcher prefix (e.g. the misuse table's
# DDS_MISUSE_MPIEXEC="tests/cluster/mpirun.sh --hosts 2"): N ranks over
# hosts 1..H, P per host (default: N / H rounded up; Open MPI fills host 1
# first), Open MPI unless --mpi mpich. Options before CMD that start with
# "-" go to mpiexec (with their value if the next word also starts with "-"
# it is taken as an option: give -x VAR=VALUE style options).
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$dir/lib.sh"
mpi=ompi hosts="" ppn="" n=""
opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mpi) mpi=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --ppn) ppn=$2; shift 2 ;;
    -n|-np) n=$2; shift 2 ;;
    --) shift; break ;;
    -*) opts+=("$1"); shift ;;
    *) break ;;
  esac
done
[ -n "$hosts" ] && [ -n "$n" ] && [ $# -ge 1 ] ||
  ddsc_die "usage: mpirun.sh [--mpi ompi|mpich] --hosts H [--ppn P] -n N [OPTION...] CMD [ARG...]"
[[ $hosts =~ ^[0-9]+$ && $n =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$n" -ge 1 ] ||
  ddsc_die "mpirun.sh: --hosts and -n take positive integers"
[ -n "$ppn" ] || ppn=$(( (n + hosts - 1) / hosts ))
[ "$n" -le $((hosts * ppn)) ] || ddsc_die "mpirun.sh: $n ranks do not fit $hosts hosts x $ppn"
case "$mpi" in
  ompi) exec "$dir/ompi-run" "$hosts" "$ppn" -n "$n" "${opts[@]}" -- "$@" ;;
  mpich) exec "$dir/mpich-run" "$hosts" "$ppn" -n "$n" "${opts[@]}" -- "$@" ;;
  *) ddsc_die "mpirun.sh: --mpi ompi or mpich, got '$mpi'" ;;
esac
