#!/bin/bash
# download_retransmits.sh - where a download through abox-net retransmits: one bounded `iperf3 -R` from a
# server on the host's lo to a guest namespace behind abox-net, with every counter that can say whose side
# lost or reordered frames, read before and after the run:
#   - the kernel's TCP counters (nstat) of the host (the server's side), of abox-net's own namespace
#     (abox-net's host sockets) and of the guest's namespace;
#   - /proc/net/softnet_stat (per-CPU backlog drops), `ip -s link` of the guest's eth0 and of abox-net's veth;
#   - abox-net's own counters (`abox-net stats`), lwIP's retransmissions to the guest among them
#     (tcp_retransmit_timeouts, tcp_fast_retransmits), the tap's drops (frames_dropped_send) and what its
#     host socket's TCP counted when the flow ended (host_tcp_out_of_order, host_tcp_retransmits).
# The rig is netbench.sh's abox-net row reduced to one run: abox-net runs in a namespace of its own, joined
# to the host by a veth, because every address of the namespace it runs in is reserved (issue 15).
#
# Usage (root):  bench/download_retransmits.sh [ABOX_NET]
# Knobs: MTU (the tap's, 1500), VETH_MTU (abox-net's veth to the host, default MTU), DUR (seconds, 4, <= 10),
#        FAMILY (4 or 6), PIN (a CPU list: iperf3's server and client run there; `taskset -c 0 $0` pins abox-net
#        too), DIRECT=1 (the iperf3 client runs in abox-net's namespace instead: the same veth without abox-net).
# Every process, address, veth and namespace it makes is removed at the end, also on failure or a signal.
# Traffic stays on this machine. Prints counts; the throughput line is a smoke check, never a benchmark.
set -u
export LC_ALL=C
ABOX_NET=${1:-$(cd "$(dirname "$0")/.." && pwd)/build/netstack/abox-net}
MTU=${MTU:-1500} VETH_MTU=${VETH_MTU:-${MTU:-1500}} DUR=${DUR:-4} FAMILY=${FAMILY:-4} PIN=${PIN:-} DIRECT=${DIRECT:-}
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
[ "$DUR" -ge 1 ] && [ "$DUR" -le 10 ] || { echo "DUR must be 1..10" >&2; exit 2; }
for c in ip iperf3 jq dnsmasq dig nstat python3 timeout; do
  command -v $c >/dev/null || { echo "missing $c" >&2; exit 2; }
done
[ -x "$ABOX_NET" ] || { echo "no abox-net at $ABOX_NET" >&2; exit 2; }

TAG=dr$$ NSG=dr$$g NSB=dr$$b VH=dr$$x VB=dr$$y
HOST4=198.18.$(($$ % 250 + 1)).7 HOST6=2001:2:0:$(($$ % 250 + 1))::7   # on the host's lo for the run
SIDE4=10.96.0.1 SIDE6=fd96:ab0c:be0c::1 PORT=15277 DNS_PORT=15377 NAME=download.abox.test
OUT=$(mktemp -d /tmp/download_retransmits.XXXXXX)
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip link del $VH 2>/dev/null
  ip addr del $HOST4/32 dev lo 2>/dev/null
  ip -6 addr del $HOST6/128 dev lo 2>/dev/null
  ip netns del $NSG 2>/dev/null
  ip netns del $NSB 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "FATAL: $*" >&2; exit 1; }

ip addr add $HOST4/32 dev lo || die "cannot add $HOST4 to lo"
ip -6 addr add $HOST6/128 dev lo nodad || die "cannot add $HOST6 to lo"
ip netns add $NSB && ip netns add $NSG || die "netns add"
ip link add $VH mtu $VETH_MTU type veth peer name $VB mtu $VETH_MTU netns $NSB || die "veth"
ip addr add $SIDE4/30 dev $VH && ip link set $VH up
ip -n $NSB addr add 10.96.0.2/30 dev $VB && ip -n $NSB link set $VB up && ip -n $NSB link set lo up
ip -n $NSB route add $HOST4/32 via $SIDE4 || die "route"
ip netns exec $NSB sysctl -qw net.ipv6.conf.all.disable_ipv6=0
ip netns exec $NSG sysctl -qw net.ipv6.conf.all.disable_ipv6=0
ip -6 addr add $SIDE6/64 dev $VH nodad && ip -n $NSB -6 addr add fd96:ab0c:be0c::2/64 dev $VB nodad || die "IPv6"
ip -n $NSB -6 route add $HOST6/128 via $SIDE6 || die "IPv6 route"
dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
  --listen-address=$SIDE4 --port=$DNS_PORT --address=/$NAME/$HOST4 --address=/$NAME/$HOST6 \
  >"$OUT/dnsmasq.log" 2>&1 & PIDS+=($!)
cat >"$OUT/policy.toml" <<POLICY
[dns]
upstreams = ["$SIDE4:$DNS_PORT"]
[[allow]]
names = ["$NAME"]
ports = [$PORT]
[unsafe]
allow_reserved = ["198.18.0.0/15", "2001:2::/48"]
POLICY
${PIN:+taskset -c $PIN} iperf3 -s -p $PORT >/dev/null 2>&1 & PIDS+=($!)
ip netns exec $NSB "$ABOX_NET" run --policy "$OUT/policy.toml" --netns $NSG --mtu $MTU --ipv6 on \
  --stats-socket "$OUT/stats.sock" --events "$OUT/events.jsonl" >"$OUT/abox-net.out" 2>"$OUT/abox-net.log" &
PIDS+=($!)
for _ in $(seq 75); do  # up to 15 s for the tap's addresses (IPv6 by SLAAC)
  ip -n $NSG addr show dev eth0 2>/dev/null | grep -q "inet 10.0.2.15/" &&
    ip -n $NSG -6 addr show dev eth0 scope global 2>/dev/null | grep -v tentative | grep -q "inet6 fd" && break
  sleep 0.2
done
DST=$HOST4 TYPE=A; [ "$FAMILY" = 6 ] && DST=$HOST6 TYPE=AAAA
# abox-net admits a flow only to an address its DNS gate answered for an allowed name.
got=$(ip netns exec $NSG dig +short +time=2 +tries=2 @10.0.2.2 $NAME $TYPE | tail -1)
[ "$got" = "$DST" ] || die "the guest resolved $NAME $TYPE to '$got', not $DST (see $OUT/abox-net.log)"

snapshot() {  # label: every counter, one "where name value" a line
  local ns
  for ns in host $NSB $NSG; do
    case $ns in host) E=() ;; *) E=(ip netns exec $ns) ;; esac
    "${E[@]}" nstat -asz 2>/dev/null | awk -v w="${ns/$TAG/}" 'NF == 3 && $1 !~ /^#/ {print w, $1, $2}'
  done
  python3 -c 'for i, l in enumerate(open("/proc/net/softnet_stat")): print("softnet cpu%d_dropped %d" % (i, int(l.split()[1], 16)))'
  ip -n $NSG -s -j link show eth0 | jq -r '.[0].stats64 | "eth0 rx_dropped \(.rx.dropped)\neth0 tx_dropped \(.tx.dropped)"'
  ip -n $NSB -s -j link show $VB | jq -r '.[0].stats64 | "veth rx_dropped \(.rx.dropped)\nveth tx_dropped \(.tx.dropped)"'
  "$ABOX_NET" stats "$OUT/stats.sock" --json | jq -r 'to_entries[] | select(.value | type == "number") | "abox-net \(.key) \(.value)"'
} 2>/dev/null
snapshot >"$OUT/before"
CLIENT_NS=$NSG; [ -n "$DIRECT" ] && CLIENT_NS=$NSB
ip netns exec $CLIENT_NS timeout $((DUR + 15)) ${PIN:+taskset -c $PIN} iperf3 -c $DST -p $PORT -t $DUR -R -J \
  >"$OUT/iperf.json" 2>&1
sleep 0.5  # the flow ends, and its host socket is counted, once abox-net has seen both sides close
snapshot >"$OUT/after"

echo "tap MTU $MTU, veth MTU $VETH_MTU, IPv$FAMILY, ${DUR}s, client in $([ -n "$DIRECT" ] && echo "abox-net's namespace (no abox-net)" || echo "the guest"), pin '${PIN:-none}'"
jq -r '"iperf3 -R: server retransmits \(.end.sum_sent.retransmits), \(.end.sum_received.bytes) bytes (smoke: \(.end.sum_received.bits_per_second / 1e9 * 100 | floor / 100) Gbit/s)"' \
  "$OUT/iperf.json" 2>/dev/null || echo "iperf3 failed: $(tail -c 300 "$OUT/iperf.json")"
# Always shown: lwIP's retransmissions and the tap's drops (ours), what the guest saw of them, the
# per-CPU backlogs' drops. Then whatever else moved among the counters that tell loss, reordering and
# retransmission.
ALWAYS='^(abox-net/(tcp_retransmit_timeouts|tcp_fast_retransmits|frames_dropped_send|host_tcp_retransmits|host_tcp_out_of_order)|g/(TcpRetransSegs|TcpExtTCPOFOQueue|TcpExtTCPDSACKOldSent)|softnet/|eth0/|veth/)'
join <(awk '{print $1 "/" $2, $3}' "$OUT/before" | sort) <(awk '{print $1 "/" $2, $3}' "$OUT/after" | sort) |
  awk -v always="$ALWAYS" '$3 != $2 || $1 ~ always {print $1, $3 - $2}' |
  grep -E "$ALWAYS|Retrans|OFO|DSACK|Lost|Drop|Prune|Collapse|Reorder|Spurious|Undo|ZeroWindow|dropped|retransmit" |
  sed 's|^b/|abox-net-ns/|; s|^g/|guest/|'
echo "(other unchanged counters are not shown; raw snapshots in $OUT)"
