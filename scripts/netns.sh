#!/usr/bin/env bash
# Network namespaces for multi-"host" runs on one machine: W rank namespaces
# PREFIX-r0 .. PREFIX-r<W-1>, each with one veth (eth0, 10.77.0.<r+1>/24)
# whose peer sits on a bridge (br0) in a namespace of its own, PREFIX-br.
# Nothing is created in the root namespace, and the subnet exists only on
# these veths, so parallel sets (different prefixes) do not collide. Each
# rank's egress is rate-limited with a tbf qdisc (netem rate as a fallback),
# like a NIC's transmit rate.
#
# Usage:
#   scripts/netns.sh check                 exit 0 if namespaces can be made
#                                          here, else print why and exit 1
#   scripts/netns.sh up   [-p PREFIX] [-w W] [-r RATE]
#   scripts/netns.sh down [-p PREFIX]
#   scripts/netns.sh exec [-p PREFIX] RANK CMD [ARG...]
#       runs CMD in PREFIX-r<RANK> with GIFT_NETNS_ADDR=10.77.0.<RANK+1>;
#       RANK "-" takes it from $RANK (the multi-process test harness).
#   scripts/netns.sh gc BASE               removes the namespaces BASE<pid>-*
#                                          of processes that no longer exist
# Defaults: PREFIX=gift, W=4, RATE=1gbit ("none": no rate limit).
# Requires root and iproute2 (ip, tc). Every loop is bounded by W <= 64.
set -euo pipefail

prefix=gift
world=4
rate=1gbit
max_world=64

die() { echo "netns.sh: $*" >&2; exit 1; }

parse() {
  while getopts "p:w:r:" opt; do
    case "$opt" in
      p) prefix=$OPTARG ;;
      w) world=$OPTARG ;;
      r) rate=$OPTARG ;;
      *) die "bad option" ;;
    esac
  done
}

# Namespaces of this prefix that exist now.
ours() {
  ip netns list 2>/dev/null | awk '{print $1}' |
    grep -E "^${prefix}-(br|r[0-9]+)\$" || true
}

down() {
  local ns
  for ns in $(ours); do ip netns del "$ns" 2>/dev/null || true; done
}

check() {
  if [[ $(id -u) -ne 0 ]]; then echo "not root"; return 1; fi
  if ! command -v ip >/dev/null; then echo "ip (iproute2) not installed"; return 1; fi
  local probe="giftprobe$$" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "ip netns add failed: ${err//$'\n'/ }"
    return 1
  fi
  ip netns del "$probe" 2>/dev/null || true
}

# Rate-limits the egress of eth0 in namespace $1: tbf, else netem's rate.
shape() {
  local ns=$1 tbf netem
  [[ "$rate" == none ]] && return 0
  tbf=$(ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" \
          burst 256kb latency 50ms 2>&1) && return 0
  netem=$(ip netns exec "$ns" tc qdisc add dev eth0 root netem rate "$rate" 2>&1) &&
    return 0
  die "cannot limit the rate to $rate: tbf: ${tbf//$'\n'/ }; netem: ${netem//$'\n'/ }"
}

up() {
  [[ "$world" =~ ^[0-9]+$ && "$world" -ge 1 && "$world" -le $max_world ]] ||
    die "W must be 1..$max_world"
  [[ -z "$(ours)" ]] || die "namespaces ${prefix}-* exist; run: $0 down -p $prefix"
  trap 'down' EXIT  # a failed step (set -e) or die: remove what was made
  local br="${prefix}-br" r ns
  ip netns add "$br"
  ip -n "$br" link add br0 type bridge
  ip -n "$br" link set br0 up
  for ((r = 0; r < world; r++)); do
    ns="${prefix}-r$r"
    ip netns add "$ns"
    ip link add eth0 netns "$ns" type veth peer name "p$r" netns "$br"
    ip -n "$ns" addr add "10.77.0.$((r + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$br" link set "p$r" master br0
    ip -n "$br" link set "p$r" up
    shape "$ns"
  done
  trap - EXIT
  echo "netns.sh: ${prefix}-r0..r$((world - 1)) on 10.77.0.0/24 (bridge in ${br}), egress rate ${rate}"
}

gc() {
  local base=$1 ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' |
                grep -E "^${base}[0-9]+-(br|r[0-9]+)\$" || true); do
    pid=${ns#"$base"}
    pid=${pid%%-*}
    if ! kill -0 "$pid" 2>/dev/null; then ip netns del "$ns" 2>/dev/null || true; fi
  done
}

cmd=${1:-}
shift || true
case "$cmd" in
  check) check ;;
  up) parse "$@"; up ;;
  down) parse "$@"; down ;;
  exec)
    parse "$@"
    shift $((OPTIND - 1))
    [[ $# -ge 2 ]] || die "exec needs RANK CMD"
    rank=$1
    shift
    [[ "$rank" == - ]] && rank=${RANK:?RANK is not set}
    [[ "$rank" =~ ^[0-9]+$ ]] || die "bad rank $rank"
    exec ip netns exec "${prefix}-r$rank" env "GIFT_NETNS_ADDR=10.77.0.$((rank + 1))" "$@"
    ;;
  gc) [[ $# -eq 1 ]] || die "gc needs BASE"; gc "$1" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
