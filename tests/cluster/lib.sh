# Shared settings of the cluster simulator (sourced by the other scripts).
#
# One instance = one bridge namespace "<name>-br" plus host namespaces
# "<name>-h1" .. "<name>-hN". Every object of an instance carries its name, so
# several instances (DDS_CLUSTER_NAME) can live side by side and a teardown
# only ever touches its own. Nothing is created in the root network
# namespace: the bridge and both ends of every veth pair live in namespaces.
#
#   DDS_CLUSTER_NAME    instance name, [a-z][a-z0-9]{0,7}    (default ddsc)
#   DDS_CLUSTER_SUBNET  a private /24, "a.b.c.0/24"          (default 10.213.13.0/24)
#   DDS_CLUSTER_IF      interface name inside each host      (default dds0)
#   DDS_CLUSTER_STATE   state directory root                 (default /run/dds-cluster)

DDSC_NAME=${DDS_CLUSTER_NAME:-ddsc}
DDSC_SUBNET=${DDS_CLUSTER_SUBNET:-10.213.13.0/24}
DDSC_IF=${DDS_CLUSTER_IF:-dds0}
DDSC_STATE_ROOT=${DDS_CLUSTER_STATE:-/run/dds-cluster}
DDSC_STATE=$DDSC_STATE_ROOT/$DDSC_NAME
DDSC_BR_NS=$DDSC_NAME-br
DDSC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The checkout every host sees, like a cluster's shared file system. When it
# lies under /tmp or /dev/shm (a CI clone in /tmp), each host's private tmpfs
# would hide it: the host then gets it bind-mounted back at the same path.
DDSC_SHARE="$(cd "$DDSC_DIR/../.." && pwd)"

ddsc_die() { echo "cluster[$DDSC_NAME]: $*" >&2; exit 1; }

if ! [[ $DDSC_NAME =~ ^[a-z][a-z0-9]{0,7}$ ]]; then
  ddsc_die "DDS_CLUSTER_NAME='$DDSC_NAME': use 1-8 lower-case letters/digits, starting with a letter"
fi
if ! [[ $DDSC_SUBNET =~ ^(10\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])|192\.168)\.[0-9]{1,3}\.0/24$ ]]; then
  ddsc_die "DDS_CLUSTER_SUBNET='$DDSC_SUBNET': give a private /24 such as 10.213.13.0/24"
fi
if ! [[ $DDSC_IF =~ ^[a-z][a-z0-9]{0,14}$ ]] || [ "$DDSC_IF" = eth0 ] || [ "$DDSC_IF" = lo ]; then
  ddsc_die "DDS_CLUSTER_IF='$DDSC_IF': give a short interface name other than eth0 and lo"
fi
# A running instance keeps the subnet and interface it was made with (so a
# shell with other settings still drives it correctly); `up` rebuilds an
# instance whose settings differ from the environment's.
DDSC_WANT_SUBNET=$DDSC_SUBNET DDSC_WANT_IF=$DDSC_IF
if [ -f "$DDSC_STATE/config" ]; then
  read -r DDSC_SUBNET DDSC_IF < "$DDSC_STATE/config"
fi
DDSC_PREFIX=${DDSC_SUBNET%.0/24}

ddsc_host_ns() { echo "$DDSC_NAME-h$1"; }      # network namespace of host k
ddsc_host_name() { echo "$DDSC_NAME-h$1"; }    # its UTS hostname
ddsc_host_ip() { echo "$DDSC_PREFIX.$(($1 + 10))"; }

# Host number from "3", "h3" or "<name>-h3"; fails for anything else.
ddsc_host_index() {
  local h=$1
  h=${h#"$DDSC_NAME"-}
  h=${h#h}
  [[ $h =~ ^[0-9]+$ ]] && [ -f "$DDSC_STATE/h$h.pid" ] || return 1
  echo "$h"
}

# Number of hosts of the running instance (0: none).
ddsc_nhosts() { cat "$DDSC_STATE/nhosts" 2>/dev/null || echo 0; }

# PID of the process that holds host k's UTS and mount namespaces.
ddsc_holder() { cat "$DDSC_STATE/h$1.pid"; }
