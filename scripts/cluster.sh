#!/usr/bin/env bash
# A cluster of N hosts on this machine: each host a Linux network namespace with its own hostname
# (a UTS namespace), one veth link to a bridge, an address of 10.213.K.0/24 (K from the name, or
# --subnet: clusters of different names can coexist), and optionally a shaped link. Open MPI then
# starts ranks inside the hosts through a launch agent that enters the namespaces where it would
# otherwise ssh, so a plain
#   mpirun --hostfile DIR/hostfile --mca plm_rsh_agent DIR/agent --mca btl tcp,self \
#          --mca btl_tcp_if_include ody0 --mca oob_tcp_if_include SUBNET.0/24 ...
# runs as it would on N machines ("DIR/mpirun_args" holds those options). Needs root.
#
#   scripts/cluster.sh up N [--name NAME] [--slots S] [--rate R] [--delay D] [--subnet A.B.C]
#   scripts/cluster.sh down [--name NAME]
#   scripts/cluster.sh check            exit 0 when namespaces, veths and bridges can be made here
#   scripts/cluster.sh dir [--name NAME]    prints the state directory (hostfile, agent, mpirun_args)
#
# Layout (NAME = ody by default, i = 0..N-1):
#   host i: network namespace NAME-hI, hostname NAME-hI, device ody0 with address SUBNET.(i+1)
#   bridge: device NAME-br in the root namespace with address SUBNET.254 (where mpirun runs: the
#           launched daemons call mpirun back over it), the hosts' peer ends NAME-hI-br attached to it
#   state:  /run/odyssey-cluster/NAME/{hostfile,agent,mpirun_args,hosts,uts/NAME-hI}
# --rate shapes both directions of every host's link (a token bucket on each end of its veth, tc
# tbf), e.g. 1gbit or 100mbit; --delay adds a one-way delay to each end (tc netem, e.g. 1ms: a round
# trip between two hosts then crosses four delayed ends), which needs a kernel with sch_netem.
# down removes everything up made (namespaces, links, the bridge, the state) and whatever processes
# still run inside the hosts; it succeeds when nothing is left, also when up failed half-way.
set -euo pipefail

usage() {
  grep -E '^#   scripts/cluster.sh' "$0" | sed 's/^#   //' >&2
  exit 2
}

name=ody slots=2 rate="" delay="" subnet=""
cmd="${1:-}"
[ -n "$cmd" ] || usage
shift
count=""
if [ "$cmd" = up ]; then
  count="${1:-}"
  [[ "$count" =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] && [ "$count" -le 64 ] ||
    { echo "cluster: up needs a host count 1..64, got '${count}'" >&2 && exit 2; }
  shift
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2" ;;
    --slots) slots="$2" ;;
    --rate) rate="$2" ;;
    --delay) delay="$2" ;;
    --subnet) subnet="$2" ;;
    *) echo "cluster: unknown option '$1'" >&2 && usage ;;
  esac
  shift 2 || { echo "cluster: option '$1' needs a value" >&2 && exit 2; }
done
[[ "$name" =~ ^[a-z][a-z0-9]{0,5}$ ]] ||
  { echo "cluster: --name must be 1-6 lower-case letters/digits starting with a letter (interface names are short), got '$name'" >&2 && exit 2; }
# The default subnet: 10.213.K with K in 1..200 from the name (the ody cluster's is 10.213.0).
if [ -z "$subnet" ]; then
  k=$(($(printf '%s' "$name" | cksum | cut -d' ' -f1) % 200 + 1))
  [ "$name" = ody ] && k=0
  subnet=10.213.$k
fi
[[ "$subnet" =~ ^10\.[0-9]+\.[0-9]+$ ]] ||
  { echo "cluster: --subnet must be a private 10.X.Y prefix, got '$subnet'" >&2 && exit 2; }
[[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || { echo "cluster: --slots must be >= 1" >&2 && exit 2; }

state="/run/odyssey-cluster/$name"
bridge="$name-br"

# Namespaces of this cluster that exist now.
cluster_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+$" || true; }

down() {
  local ns pid
  for ns in $(cluster_namespaces); do
    # Processes left inside (a failed test's ranks and daemons) would keep the namespace alive.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$name-(h[0-9]+-br|br)$" || true); do
    ip link del "$dev" 2>/dev/null || true
  done
  if [ -d "$state/uts" ]; then
    for f in "$state"/uts/*; do
      [ -e "$f" ] || continue
      umount "$f" 2>/dev/null || true
      rm -f "$f"
    done
  fi
  rm -rf "$state"
  local left
  left="$(cluster_namespaces)$(ip -o link show 2>/dev/null | grep -E ": $name-(h[0-9]+-br|br)[@:]" || true)"
  [ -z "$left" ] || { echo "cluster: down left: $left" >&2 && return 1; }
}

# tc on DEV (run through PREFIX, e.g. "ip netns exec NS"): the rate and delay asked for.
shape() {
  local dev="$1"
  shift
  local burst
  [ -n "$rate" ] || [ -n "$delay" ] || return 0
  if [ -n "$delay" ]; then
    "$@" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" ${rate:+rate "$rate"} 2>/dev/null || {
      echo "cluster: --delay needs tc netem, which this kernel lacks (CONFIG_NET_SCH_NETEM); use --rate alone" >&2
      return 1
    }
    return 0
  fi
  # The bucket holds at least one 64 KiB segment (veth offloads segmentation: a larger packet than
  # the bucket would never pass) and 2 ms at the rate.
  burst=$(rate_bits "$rate")
  burst=$((burst / 8 / 500))
  [ "$burst" -ge 262144 ] || burst=262144
  "$@" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 200ms
}

# rate_bits 100mbit -> 100000000
rate_bits() {
  local r="${1,,}" n unit
  n="${r%%[a-z]*}"
  unit="${r#"$n"}"
  case "$unit" in
    gbit) echo $((n * 1000000000)) ;;
    mbit) echo $((n * 1000000)) ;;
    kbit) echo $((n * 1000)) ;;
    bit | "") echo "$n" ;;
    *) echo "cluster: --rate '$1' is not <number>(gbit|mbit|kbit|bit)" >&2 && return 1 ;;
  esac
}

up() {
  local i ns host peer
  [ -n "$rate" ] && { rate_bits "$rate" >/dev/null || exit 2; }
  down >/dev/null 2>&1 || true
  mkdir -p "$state/uts"
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  : >"$state/hostfile"
  : >"$state/hosts"
  for ((i = 0; i < count; i++)); do
    host="$name-h$i"
    ns="$host"
    peer="$host-br"
    ip netns add "$ns"
    ip link add "$peer" type veth peer name ody0 netns "$ns"
    ip link set "$peer" master "$bridge"
    ip link set "$peer" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev ody0
    ip -n "$ns" link set ody0 up
    # The host's own hostname, kept by a bind-mounted UTS namespace the agent enters.
    touch "$state/uts/$host"
    unshare --uts="$state/uts/$host" hostname "$host"
    shape ody0 ip netns exec "$ns"
    shape "$peer"
    echo "$host slots=$slots" >>"$state/hostfile"
    echo "$host $ns $subnet.$((i + 1)) $peer" >>"$state/hosts"
  done
  # Open MPI's launch agent: "agent HOST COMMAND..." runs COMMAND inside HOST as ssh would.
  cat >"$state/agent" <<AGENT
#!/bin/sh
# Open MPI's plm_rsh_agent for the namespace cluster $name (scripts/cluster.sh): runs the command
# Open MPI would run over ssh inside the host's network and UTS namespaces.
host="\$1"
shift
[ -e "$state/uts/\$host" ] || { echo "cluster agent: no host '\$host' in cluster $name" >&2; exit 255; }
exec ip netns exec "\$host" nsenter --uts="$state/uts/\$host" -- /bin/sh -c "\$*"
AGENT
  chmod +x "$state/agent"
  # Daemons call mpirun back over the bridge; ranks talk TCP over ody0 (a host's own ranks too:
  # the TCP transport only, as between machines without shared memory). A host that falls silent is
  # noticed by the keepalive of the daemons' connections: probes after 2 s idle, every 1 s, lost
  # after 3 unanswered (Open MPI's defaults: 300 s, 20 s, 9; docs/multi-node.md suggests 5 s, 2 s, 3
  # for real hosts, whose network can pause; the kernel answers the probes, so load does not delay them).
  echo "--hostfile $state/hostfile --mca plm_rsh_agent $state/agent --mca plm_rsh_no_tree_spawn 1" \
    "--mca btl tcp,self --mca btl_tcp_if_include ody0 --mca oob_tcp_if_include $subnet.0/24" \
    "--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3" \
    >"$state/mpirun_args"
  # Wait until each host's link carries traffic (operstate up on both ends).
  for ((i = 0; i < count; i++)); do
    for _ in $(seq 1 50); do
      [ "$(ip netns exec "$name-h$i" cat /sys/class/net/ody0/operstate)" = up ] && break
      sleep 0.1
    done
  done
  echo "$state"
}

check() {
  local ns="odychk$$" ok=0
  [ "$(id -u)" = 0 ] || { echo "cluster: needs root" >&2 && return 1; }
  command -v ip >/dev/null && command -v nsenter >/dev/null && command -v unshare >/dev/null ||
    { echo "cluster: needs iproute2 and util-linux (ip, nsenter, unshare)" >&2 && return 1; }
  if ip netns add "$ns" 2>/dev/null; then
    ip link add "${ns}b" type bridge 2>/dev/null &&
      ip link add "${ns}v" type veth peer name eth9 netns "$ns" 2>/dev/null && ok=1
    ip link del "${ns}b" 2>/dev/null || true
    ip link del "${ns}v" 2>/dev/null || true
    ip netns del "$ns"
  fi
  [ $ok = 1 ] || { echo "cluster: network namespaces, bridges or veth links are not allowed here" >&2 && return 1; }
}

case "$cmd" in
  up)
    [ "$(id -u)" = 0 ] || { echo "cluster: needs root" >&2 && exit 1; }
    trap 'echo "cluster: up failed; removing what it made" >&2; down >/dev/null 2>&1 || true' ERR
    up
    ;;
  down) down ;;
  check) check ;;
  dir) echo "$state" ;;
  *) usage ;;
esac
