#!/usr/bin/env bash
# The README's first training loop launched by Slurm, as on a cluster:
# `srun --mpi=pmix -n 2 python first_loop.py` on a one-node Slurm that this
# script starts and stops (Debian's slurm-wlm and munge), then
# examples/first_store.py with method 1 (libfabric tcp, node shared memory
# off so that every read of the other rank crosses libfabric) where
# libddstore has libfabric.
#
#   bash ci/slurm.sh               (as root; a CI step of tests/manifest.toml)
#   bash ci/slurm.sh -- CMD ARGS   start the same Slurm, run CMD in it (SLURM_CONF
#                                  set) instead of the checks, stop it
#
# Debian's Open MPI has no Slurm PMI of its own: a plain `srun python ...`
# fails in MPI_Init with "OMPI was not built with SLURM's PMI support";
# `srun --mpi=pmix` (Slurm's PMIx plugin, which Debian's Open MPI uses)
# works. docs/clusters.rst says so.
#
# Everything lives in one temporary directory: a munge key and munged on its
# own socket, slurm.conf (slurmctld and slurmd on 127.0.0.1, free ports,
# proctrack/linuxproc and task/none: no cgroups or systemd needed), state,
# spool and logs. The daemons run in the foreground as children of this
# script and are stopped by their process ids on every exit (jobs cancelled
# first); nothing outside the directory is changed, except installing the
# Debian packages when missing (their services are not started).
set -euo pipefail
user_cmd=()
if [ $# -gt 0 ]; then
  [ "$1" = -- ] && [ $# -ge 2 ] || { echo "usage: bash ci/slurm.sh [-- CMD ARGS...]" >&2; exit 2; }
  shift
  user_cmd=("$@")
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source ci/env.sh
[ -x "$root/.venv/bin/python" ] && export PATH="$root/.venv/bin:$PATH"
t_start=$SECONDS
say() { echo "slurm: $* [$((SECONDS - t_start))s]"; }
fail() { echo "slurm: FAILED: $*" >&2; exit 1; }

# ---- Debian's slurm-wlm and munge (without recommends: no hdf5/rrd/... plugins)
missing=()
for p in slurm-wlm munge; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  # The packages' post-install scripts would start munge, slurmctld and slurmd
  # as system services: a policy-rc.d that denies it (Docker images have one).
  policy=/usr/sbin/policy-rc.d
  added_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    added_policy=1
  fi
  rc=0
  { $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null; } || rc=$?
  [ "$added_policy" = 0 ] || $SUDO rm -f "$policy"
  [ "$rc" = 0 ] || fail "apt-get install ${missing[*]}"
fi
for t in munged mungekey slurmctld slurmd srun sinfo scontrol scancel squeue; do
  command -v "$t" >/dev/null || fail "$t not found after installing slurm-wlm and munge"
done
# Run as root: munged and the daemons refuse other users' files.
[ "$(id -u)" -eq 0 ] || fail "run as root (the Slurm daemons of this step run as root)"

# ---- one directory for everything; torn down on every exit --------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/pyddstore-slurm.XXXXXX")"
chmod 755 "$work"                  # munged: the socket's directories must be searchable by all
mkdir -m 700 "$work/munge"         # the key: owner only
mkdir -m 755 "$work/run" "$work/job"
mkdir -m 700 "$work/state" "$work/spool"
pids=()                            # daemons started here, stopped in reverse order
stop_all() {
  local rc=$? i p
  trap - EXIT INT TERM
  if [ -n "${SLURM_CONF:-}" ] && [ ${#pids[@]} -ge 2 ]; then
    # Jobs first, so that slurmd's step daemons (slurmstepd) end with their tasks.
    timeout 10 scancel --quiet --user=root >/dev/null 2>&1 || true
    for _ in $(seq 40); do
      q=$(timeout 5 squeue -h -o %i 2>/dev/null) && [ -z "$q" ] && break
      sleep 0.25
    done
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[i]}
    kill -TERM "$p" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  # Anything of this Slurm that outlived its daemons (a step daemon or task
  # left by a job killed mid-way): found by the SLURM_CONF path they inherit,
  # unique to this run.
  if [ -n "${SLURM_CONF:-}" ]; then
    for e in /proc/[0-9]*/environ; do
      p=${e#/proc/}; p=${p%/environ}
      [ "$p" != $$ ] && [ "$p" != "$BASHPID" ] || continue
      if grep -qzxF "SLURM_CONF=$SLURM_CONF" "$e" 2>/dev/null; then
        echo "slurm: stopping leftover process $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-60))"
        kill -KILL "$p" 2>/dev/null || true
      fi
    done
  fi
  if [ "$rc" != 0 ]; then
    for f in slurmctld.log slurmd.log munge/munged.log; do
      [ -f "$work/$f" ] && { echo "--- $f (last lines)"; tail -n 15 "$work/$f"; }
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap stop_all EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# ---- munge: its own key and socket ------------------------------------------------
mungekey --create --keyfile="$work/munge/munge.key"
munge_sock="$work/run/munge.socket"
munged --foreground --socket="$munge_sock" --key-file="$work/munge/munge.key" \
  --pid-file="$work/run/munged.pid" --log-file="$work/munge/munged.log" \
  --seed-file="$work/munge/munged.seed" > "$work/munge/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$munge_sock" ] && break; sleep 0.1; done
munge -S "$munge_sock" -n | unmunge -S "$munge_sock" >/dev/null \
  || { cat "$work/munge/munged.out"; fail "munged does not answer on $munge_sock"; }

# ---- slurm.conf: one node on 127.0.0.1 ------------------------------------------
node="$(hostname -s)"
read -r port_ctld port_d < <(python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
PY
)
cpus=$(nproc); [ "$cpus" -ge 2 ] || cpus=2
export SLURM_CONF="$work/slurm.conf"
cat > "$SLURM_CONF" <<EOF
ClusterName=pyddstore-ci
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port_ctld
SlurmdPort=$port_d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_sock
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
KillWait=2
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$node CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES MaxTime=15 State=UP OverSubscribe=FORCE
EOF

say "starting slurmctld and slurmd (node $node, ports $port_ctld/$port_d)"
slurmctld -D -i -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N "$node" -f "$SLURM_CONF" > "$work/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 100); do
  state=$(timeout 5 sinfo -h -N -n "$node" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.3
done
[ "$state" = idle ] || { cat "$work/slurmctld.out" "$work/slurmd.out"; fail "node $node is '$state', not idle"; }
say "one-node Slurm up: $(srun --version), $(sinfo -h -o '%P %D %T %C')"
grep -qw pmix <<<"$(srun --mpi=list 2>&1)" || fail "Slurm has no PMIx plugin (srun --mpi=list)"

if [ ${#user_cmd[@]} -gt 0 ]; then
  "${user_cmd[@]}"
  exit
fi

# ---- the README's first training loop, launched by srun -------------------------
python tests/python/readme/check_readme.py README.md "$work/job"
cd "$work/job"
say "README loop: srun --mpi=pmix -n 2 python first_loop.py"
timeout -k 10 300 srun --mpi=pmix -n 2 -t 10 python first_loop.py > got.txt \
  || { cat got.txt; fail "srun --mpi=pmix -n 2 python first_loop.py"; }
sort got.txt > got.sorted
diff -u expected.txt got.sorted \
  || fail "README loop under srun: output differs from the output README.md shows (- README, + run)"

# ---- method 1 (libfabric) under srun ------------------------------------------------
if python -c "import pyddstore, sys; sys.exit(0 if pyddstore.has_fabric() else 1)"; then
  say "method 1: srun --mpi=pmix -n 2 python examples/first_store.py (libfabric tcp)"
  DDSTORE_METHOD=1 DDSTORE_FABRIC=tcp DDSTORE_NODE_LOCAL=0 FI_TCP_IFACE=lo \
    timeout -k 10 120 srun --mpi=pmix -n 2 -t 5 python "$root/examples/first_store.py" > m1.txt \
    || { cat m1.txt; fail "method 1 under srun"; }
  cat m1.txt
  grep -q "^2 ranks, 5 rows; read .* from other ranks (method 1," m1.txt \
    || fail "method 1 under srun: not the expected summary line"
else
  say "libddstore without libfabric: method 1 under srun skipped"
fi
say "README loop and method 1 ran under srun --mpi=pmix"
