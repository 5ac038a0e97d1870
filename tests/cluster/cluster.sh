#!/usr/bin/env bash
# Simulated cluster: N hosts on this machine (root only).
#
#   cluster.sh up N            create hosts 1..N (idempotent: a complete
#                              instance of N hosts is kept, anything else of
#                              this instance is torn down and rebuilt)
#   cluster.sh down            remove everything of this instance
#   cluster.sh with N CMD...   up N, run CMD, down on every exit path
#   cluster.sh status          list the hosts of this instance
#   cluster.sh kill-host K     SIGKILL every process on host K (the host
#                              stays up, empty)
#   cluster.sh link K up|down  bring host K's network interface up or down
#   cluster.sh check           exit 0 if network namespaces can be made here
#
# Each host is a network namespace on a Linux bridge (the bridge lives in a
# namespace of its own: nothing is added to the root namespace), with its own
# UTS hostname, its own tmpfs /tmp and /dev/shm and its own /etc/hosts (a
# bind mount inside the host's mount namespace, naming every host of the
# instance; the machine's /etc/hosts is never written). Everything else (the
# checkout, virtual environments, $HOME) is shared, as on a real cluster
# with a shared file system. See lib.sh for DDS_CLUSTER_NAME,
# DDS_CLUSTER_SUBNET and DDS_CLUSTER_IF, and README.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root() {
  [ "$(id -u)" -eq 0 ] || ddsc_die "needs root (network namespaces)"
}

# Kill every process in network namespace $1 (the namespace stays).
kill_netns_procs() {
  local ns=$1 pids p
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    sleep 0.2
  done
  echo "cluster[$DDSC_NAME]: processes left in $ns: $(ip netns pids "$ns" | tr '\n' ' ')" >&2
}

down() {
  local ns
  # Only this instance's namespaces, found by name (also those of a
  # half-built or crashed instance whose state directory is gone).
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$DDSC_NAME-(h[0-9]+|br)\$" || true); do
    kill_netns_procs "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
  # Holders whose namespace is already gone (should not happen).
  local f
  for f in "$DDSC_STATE"/h*.pid; do
    [ -f "$f" ] || continue
    kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$DDSC_STATE"
}

complete_instance() { # complete_instance N: 0 if this instance has exactly N live hosts
  local n=$1 k
  [ "$(ddsc_nhosts)" = "$n" ] || return 1
  [ "$DDSC_SUBNET $DDSC_IF" = "$DDSC_WANT_SUBNET $DDSC_WANT_IF" ] || return 1
  ip netns list | awk '{print $1}' | grep -qx "$DDSC_BR_NS" || return 1
  for k in $(seq 1 "$n"); do
    kill -0 "$(ddsc_holder "$k" 2>/dev/null)" 2>/dev/null || return 1
    ip netns list | awk '{print $1}' | grep -qx "$(ddsc_host_ns "$k")" || return 1
  done
}

up() {
  local n=$1 k ns
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || ddsc_die "up: host count 1..64, got '$n'"
  if complete_instance "$n"; then
    echo "cluster[$DDSC_NAME]: $n hosts already up"
    return 0
  fi
  down
  DDSC_SUBNET=$DDSC_WANT_SUBNET DDSC_IF=$DDSC_WANT_IF DDSC_PREFIX=${DDSC_WANT_SUBNET%.0/24}
  mkdir -p "$DDSC_STATE"
  chmod 755 "$DDSC_STATE"
  echo "$DDSC_SUBNET $DDSC_IF" > "$DDSC_STATE/config"
  {
    echo "127.0.0.1 localhost"
    for k in $(seq 1 "$n"); do echo "$(ddsc_host_ip "$k") $(ddsc_host_name "$k")"; done
  } > "$DDSC_STATE/hosts"
  chmod 644 "$DDSC_STATE/hosts"

  ip netns add "$DDSC_BR_NS"
  ip -n "$DDSC_BR_NS" link set lo up
  ip -n "$DDSC_BR_NS" link add br0 type bridge
  ip -n "$DDSC_BR_NS" link set br0 up
  for k in $(seq 1 "$n"); do
    ns=$(ddsc_host_ns "$k")
    ip netns add "$ns"
    # Both ends are created inside namespaces: the host end is named
    # $DDSC_IF inside the host, the bridge end p<k> inside the bridge's.
    ip -n "$DDSC_BR_NS" link add "p$k" type veth peer name "$DDSC_IF" netns "$ns"
    ip -n "$DDSC_BR_NS" link set "p$k" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$(ddsc_host_ip "$k")/24" dev "$DDSC_IF"
    ip -n "$ns" link set "$DDSC_IF" up
    # The holder: a process that owns the host's UTS and mount namespaces
    # (entered later with nsenter -t <pid>). Private propagation, so the
    # host's /tmp, /dev/shm and /etc/hosts never show outside it.
    # A checkout under /tmp or /dev/shm is first bind-mounted to a stash
    # outside them ($2/share<k>), then back at its own path inside the new
    # tmpfs, so that every host still sees the one shared checkout.
    rm -f "$DDSC_STATE/h$k.pid"
    mkdir -p "$DDSC_STATE/share$k"
    # The hosts share the machine's boot id and SysV IPC, so UCX takes them
    # for one node unless told otherwise (UCX_TLS=tcp,self; README.md).
    setsid ip netns exec "$ns" unshare --uts --mount --propagation private -- \
      sh -c 'set -e; hostname "$1"
             case "$4/" in /tmp/*|/dev/shm/*) mount --bind "$4" "$2/share$3"; keep=1 ;; *) keep=0 ;; esac
             mount -t tmpfs -o mode=1777 tmpfs /tmp
             mount -t tmpfs -o mode=1777 tmpfs /dev/shm
             if [ $keep = 1 ]; then mkdir -p "$4" && mount --bind "$2/share$3" "$4"; fi
             mount --bind "$2/hosts" /etc/hosts
             echo $$ > "$2/h$3.pid.new" && mv "$2/h$3.pid.new" "$2/h$3.pid" && exec sleep infinity' \
      holder "$(ddsc_host_name "$k")" "$DDSC_STATE" "$k" "$DDSC_SHARE" </dev/null >/dev/null 2>&1 9>&- &
  done
  for k in $(seq 1 "$n"); do
    for _ in $(seq 1 100); do [ -f "$DDSC_STATE/h$k.pid" ] && break; sleep 0.05; done
    [ -f "$DDSC_STATE/h$k.pid" ] || ddsc_die "host $k did not come up"
  done
  echo "$n" > "$DDSC_STATE/nhosts"
  # Every host reaches the next one over the bridge (bash's /dev/tcp to a
  # port nobody listens on: "connection refused" proves the path works,
  # a timeout that it does not).
  for k in $(seq 1 "$n"); do
    local j=$(( k % n + 1 )) out
    out=$(ip netns exec "$(ddsc_host_ns "$k")" timeout 5 bash -c \
      "exec 3<>/dev/tcp/$(ddsc_host_ip "$j")/9" 2>&1) || true
    grep -q "refused" <<<"$out" || ddsc_die "host $k cannot reach host $j: ${out:-timeout}"
  done
  echo "cluster[$DDSC_NAME]: $n hosts up on $DDSC_SUBNET ($(for k in $(seq 1 "$n"); do printf '%s=%s ' "$(ddsc_host_name "$k")" "$(ddsc_host_ip "$k")"; done)interface $DDSC_IF)"
}

status() {
  local n k
  n=$(ddsc_nhosts)
  if [ "$n" = 0 ]; then echo "cluster[$DDSC_NAME]: not up"; return 1; fi
  for k in $(seq 1 "$n"); do
    printf '%s %s holder=%s processes=%s\n' "$(ddsc_host_name "$k")" "$(ddsc_host_ip "$k")" \
      "$(ddsc_holder "$k")" "$(ip netns pids "$(ddsc_host_ns "$k")" 2>/dev/null | wc -l)"
  done
}

check() {
  [ "$(id -u)" -eq 0 ] || { echo "not root"; return 1; }
  command -v ip >/dev/null && command -v unshare >/dev/null && command -v nsenter >/dev/null ||
    { echo "ip (iproute2), unshare or nsenter missing"; return 1; }
  local probe="$DDSC_NAME-probe$$"
  probe=${probe:0:30}
  ip netns add "$probe" 2>/dev/null || { echo "ip netns add failed"; return 1; }
  local ok=0
  ip netns exec "$probe" unshare --uts --mount true 2>/dev/null || ok=1
  ip netns del "$probe"
  [ $ok = 0 ] || { echo "unshare --uts --mount failed inside a network namespace"; return 1; }
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) need_root; [ $# -eq 1 ] || ddsc_die "usage: cluster.sh up N"
      mkdir -p "$DDSC_STATE_ROOT"; exec 9>"$DDSC_STATE_ROOT/$DDSC_NAME.lock"; flock 9
      up "$1" ;;
  down) need_root; mkdir -p "$DDSC_STATE_ROOT"; exec 9>"$DDSC_STATE_ROOT/$DDSC_NAME.lock"; flock 9
      down
      rm -f "$DDSC_STATE_ROOT/$DDSC_NAME.lock"; rmdir "$DDSC_STATE_ROOT" 2>/dev/null || true
      echo "cluster[$DDSC_NAME]: down" ;;
  with) need_root; [ $# -ge 2 ] || ddsc_die "usage: cluster.sh with N CMD..."
      n=$1; shift
      child=""
      # The command runs in the background so that a signal to this script
      # is handled at once (bash defers traps while a foreground child runs);
      # teardown kills whatever is left on the hosts.
      trap '[ -z "$child" ] || kill "$child" 2>/dev/null; "$DDSC_DIR/cluster.sh" down' EXIT
      trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP
      "$DDSC_DIR/cluster.sh" up "$n"
      "$@" <&0 & child=$!
      set +e; wait "$child"; rc=$?; set -e
      child=""
      exit $rc ;;
  status) status ;;
  kill-host) need_root; k=$(ddsc_host_index "${1:-}") || ddsc_die "kill-host: no host '${1:-}'"
      holder=$(ddsc_holder "$k")
      for p in $(ip netns pids "$(ddsc_host_ns "$k")"); do
        [ "$p" = "$holder" ] || kill -9 "$p" 2>/dev/null || true
      done ;;
  link) need_root; k=$(ddsc_host_index "${1:-}") || ddsc_die "link: no host '${1:-}'"
      case "${2:-}" in up|down) ;; *) ddsc_die "usage: cluster.sh link K up|down" ;; esac
      ip -n "$(ddsc_host_ns "$k")" link set "$DDSC_IF" "$2" ;;
  check) check ;;
  *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
