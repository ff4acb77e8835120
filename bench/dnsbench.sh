#!/usr/bin/env bash
# DNS benchmark: nsd (authoritative upstream) with unbound, dnsmasq and abox-net dns (the DNS gate)
# as caching forwarders to it, side by side in one run.
# ABOX_NET: the abox-net binary (default: ../build/netstack/abox-net beside this script).
# All traffic on 127.0.0.1. Servers pinned to CPU 1, dnsperf to CPU 0.
# Usage: bash dnsbench.sh            (RUNS=3 DUR=10 LATDUR=5 LATQPS=20000 by default)
set -u
# hard bound on total run time: re-exec under timeout(1); the EXIT trap below kills our servers
if [ -z "${_ANCHORS_TO:-}" ]; then export _ANCHORS_TO=1; exec timeout -k 20 "${MAXTIME:-420}" bash "$0" "$@"; fi
BASE=${WORKDIR:-/tmp/dnsbench}   
RUNS=${RUNS:-3}; DUR=${DUR:-10}; LATDUR=${LATDUR:-5}; LATQPS=${LATQPS:-20000}
CLIENTS=${CLIENTS:-4}; OUTSTANDING=${OUTSTANDING:-200}
P_NSD=5301; P_UNB=5302; P_DMQ=5303; P_ABX=5304
HERE=$(cd "$(dirname "$0")" && pwd)
ABOX_NET=${ABOX_NET:-$HERE/../build/netstack/abox-net}
[ -x "$ABOX_NET" ] || { echo "abox-net not found at $ABOX_NET (build it, or set ABOX_NET)" >&2; exit 1; }
rm -rf "$BASE"; mkdir -p "$BASE/res"
echo "== versions: $(nsd -v 2>&1 | head -1); abox-net $(cd "$(dirname "$0")" && git rev-parse --short HEAD 2>/dev/null); unbound $(unbound -V 2>&1 | awk 'NR==1{print $2}'); $(dnsmasq --version | head -1 | cut -d' ' -f1-3); dnsperf $(dnsperf -h 2>&1 | awk '/^Version/{print $2}'); kernel $(uname -r)"
cd "$BASE" || exit 1
PIDS=()
cleanup() { # TERM our own servers by PID, wait up to 3 s, then KILL any that remain
  local p i; for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for i in $(seq 1 30); do for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && break; done || break; sleep 0.1; done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
trap 'echo "aborted (signal/timeout)" >&2; exit 143' TERM INT

# ---------- zone + query file (1000 names) ----------
{
  echo '$ORIGIN bench.example.'; echo '$TTL 3600'
  echo '@ IN SOA ns1.bench.example. hostmaster.bench.example. 1 3600 600 86400 3600'
  echo '@ IN NS ns1.bench.example.'
  echo 'ns1 IN A 23.10.255.1'
  for i in $(seq 0 999); do printf 'n%03d IN A 23.10.%d.%d\n' "$i" $((i/250)) $((i%250+1)); done
} > bench.example.zone
for i in $(seq 0 999); do printf 'n%03d.bench.example A\n' "$i"; done > queries.txt

# ---------- nsd (authoritative) ----------
cat > nsd.conf <<C
server:
  server-count: 1
  ip-address: 127.0.0.1@$P_NSD
  do-ip6: no
  username: ""
  chroot: ""
  zonesdir: "$BASE"
  database: ""
  zonelistfile: "$BASE/zone.list"
  xfrdfile: "$BASE/xfrd.state"
  xfrdir: "$BASE"
  pidfile: "$BASE/nsd.pid"
  logfile: "$BASE/nsd.log"
  verbosity: 0
  hide-version: yes
remote-control:
  control-enable: no
zone:
  name: bench.example
  zonefile: bench.example.zone
C
# ---------- unbound (caching forwarder) ----------
cat > unbound.conf <<C
server:
  num-threads: 1
  interface: 127.0.0.1@$P_UNB
  port: $P_UNB
  do-ip6: no
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "$BASE"
  pidfile: "$BASE/unbound.pid"
  logfile: ""
  use-syslog: no
  verbosity: 0
  access-control: 127.0.0.0/8 allow
  do-not-query-localhost: no
  module-config: "iterator"
  msg-cache-size: 64m
  rrset-cache-size: 128m
  key-cache-size: 1m
  so-reuseport: no
  prefetch: no
  qname-minimisation: no
  statistics-interval: 0
remote-control:
  control-enable: yes
  control-interface: "$BASE/unbound.ctl"
  control-use-cert: no
forward-zone:
  name: "."
  forward-addr: 127.0.0.1@$P_NSD
C

wait_dns() { # bounded readiness check: up to 50 x 0.1 s
  for _ in $(seq 1 50); do dig +time=1 +tries=1 +short -p "$1" @127.0.0.1 n001.bench.example A 2>/dev/null | grep -q '^23\.10\.' && return 0; sleep 0.1; done
  echo "server on port $1 did not answer" >&2; return 1; }

taskset -c 1 nsd -d -c "$BASE/nsd.conf" > nsd.out 2>&1 & PIDS+=($!)
wait_dns $P_NSD || exit 1
taskset -c 1 unbound -d -c "$BASE/unbound.conf" > unbound.out 2>&1 & PIDS+=($!)
taskset -c 1 dnsmasq -k --conf-file=/dev/null --port=$P_DMQ --listen-address=127.0.0.1 --bind-interfaces \
   --no-resolv --no-hosts --server=127.0.0.1#$P_NSD --cache-size=10000 --pid-file="$BASE/dnsmasq.pid" \
   --user=root --dns-forward-max=1000 --log-facility="$BASE/dnsmasq.log" > dnsmasq.out 2>&1 & PIDS+=($!)
DMQ_PID=$!
# ---------- abox-net dns (the DNS gate: forwards allowed names, filters, caches) ----------
cat > abox-policy.toml <<C
[dns]
upstreams = ["127.0.0.1:$P_NSD"]
max_ttl = 3600
[[allow]]
names = ["bench.example", "*.bench.example"]
ports = [443]
C
taskset -c 1 "$ABOX_NET" dns --policy "$BASE/abox-policy.toml" --listen 127.0.0.1:$P_ABX --events /dev/null \
   > abox-net.out 2> abox-net.err & PIDS+=($!)
ABX_PID=$!
wait_dns $P_UNB || exit 1; wait_dns $P_DMQ || exit 1; wait_dns $P_ABX || exit 1

# ---------- measurement ----------
cpus() { awk '/^cpu[01] /{printf "%s %s ", $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
cpupct() { # args: before(4 numbers) after(4 numbers) -> "cpu0% cpu1%"
  echo "$1 $2" | awk '{b0=$5-$1;i0=$6-$2;b1=$7-$3;i1=$8-$4; printf "%.0f %.0f", 100*b0/(b0+i0), 100*b1/(b1+i1)}'; }
pct() { # percentile p (0-100) of a numeric column on stdin
  sort -g | awk -v p="$1" '{a[NR]=$1} END{ if(NR==0){print "NA";exit} i=int(NR*p/100+0.999999); if(i<1)i=1; if(i>NR)i=NR; print a[i]}'; }
NAMES=(nsd unbound dnsmasq abox-net); PORTS=($P_NSD $P_UNB $P_DMQ $P_ABX)
echo "== warm-up (2 passes through the 1000-name file per server)"
for k in 0 1 2 3; do taskset -c 0 dnsperf -s 127.0.0.1 -p "${PORTS[$k]}" -d queries.txt -n 2 -t 2 > "res/warm_${NAMES[$k]}.txt" 2>&1; done
unbound-control -c "$BASE/unbound.conf" stats > res/unbound_stats_before.txt 2>&1
printf 'run\tserver\tqps\tavg_ms\tmax_ms\tstddev_ms\tlost_pct\tcpu0\tcpu1\tlat_qps\tp50_ms\tp99_ms\tp999_ms\tlat_lost\tqps_per_core\n' > res/dns_runs.tsv
for r in $(seq 1 "$RUNS"); do
  for k in 0 1 2 3; do
    n=${NAMES[$k]}; port=${PORTS[$k]}
    # (1) throughput: closed loop, CLIENTS sockets, OUTSTANDING queries in flight, DUR seconds
    a=$(cpus)
    taskset -c 0 dnsperf -s 127.0.0.1 -p "$port" -d queries.txt -l "$DUR" -c "$CLIENTS" -q "$OUTSTANDING" -t 1 > "res/tp_${n}_$r.txt" 2>&1
    b=$(cpus); cp=$(cpupct "$a" "$b")
    qps=$(awk '/Queries per second/{printf "%.0f",$4}' "res/tp_${n}_$r.txt")
    lat=$(awk '/Average Latency/{gsub(/[(),]/,"");printf "%.3f %.3f", $4*1000, $8*1000}' "res/tp_${n}_$r.txt")
    sd=$(awk '/Latency StdDev/{printf "%.3f",$4*1000}' "res/tp_${n}_$r.txt")
    lost=$(awk '/Queries lost/{gsub(/[()%]/,"");print $4}' "res/tp_${n}_$r.txt")
    # (2) latency distribution at a fixed offered rate (LATQPS) with per-query output (-v)
    taskset -c 0 dnsperf -s 127.0.0.1 -p "$port" -d queries.txt -l "$LATDUR" -Q "$LATQPS" -c "$CLIENTS" -t 1 -v > "res/lat_${n}_$r.txt" 2>&1
    awk '$1==">" && $2=="NOERROR"{print $5*1000}' "res/lat_${n}_$r.txt" > res/lat.tmp
    p50=$(pct 50 < res/lat.tmp); p99=$(pct 99 < res/lat.tmp); p999=$(pct 99.9 < res/lat.tmp)
    lq=$(awk '/Queries per second/{printf "%.0f",$4}' "res/lat_${n}_$r.txt")
    ll=$(awk '/Queries lost/{gsub(/[()%]/,"");print $4}' "res/lat_${n}_$r.txt")
    qpc=$(echo "$qps $cp" | awk '{printf "%.0f", ($3>0)? $1*100/$3 : 0}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$n" "$qps" "$(echo $lat | tr ' ' '\t')" "$sd" "$lost" "$(echo $cp | tr ' ' '\t')" "$lq" "$p50" "$p99" "$p999" "$ll" "$qpc" | tee -a res/dns_runs.tsv
    rm -f res/lat.tmp; gzip -f "res/lat_${n}_$r.txt"
  done
done
# cache evidence
unbound-control -c "$BASE/unbound.conf" stats_noreset > res/unbound_stats_after.txt 2>&1
kill -USR1 "$DMQ_PID"; sleep 0.3
echo "== unbound cache:  $(grep -E '^total.num.(queries|cachehits|cachemiss)=' res/unbound_stats_after.txt | tr '\n' ' ')"
kill -USR1 "$ABX_PID"; sleep 0.3
echo "== abox-net counters: $(grep '^{' abox-net.err | tail -1)"
echo "== dnsmasq cache:  $(grep -E 'queries forwarded|cache size' dnsmasq.log | tail -2 | sed 's/^.*dnsmasq\[[0-9]*\]: //' | tr '\n' ' ')"
echo
echo "== MEDIANS over $RUNS runs (throughput: ${DUR}s closed-loop -c $CLIENTS -q $OUTSTANDING; latency pctl: ${LATDUR}s at -Q $LATQPS)"
med() { sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
printf '%-9s %9s %8s %8s %8s %6s %5s %5s %10s | %8s %8s %8s\n' server qps avg_ms max_ms sd_ms lost% cpu0% cpu1% qps/core* p50_ms p99_ms p999_ms | tee res/dns_summary.txt
for n in nsd unbound dnsmasq abox-net; do
  row="$n"
  for c in 3 4 5 6 7 8 9 15 11 12 13; do row="$row $(awk -F'\t' -v n=$n -v c=$c '$2==n{print $c}' res/dns_runs.tsv | med)"; done
  echo "$row" | awk '{printf "%-9s %9.0f %8.3f %8.3f %8.3f %6.3f %5.0f %5.0f %10.0f | %8.3f %8.3f %8.3f\n",$1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12}' | tee -a res/dns_summary.txt
done
echo "* qps/core = median over runs of (qps x 100 / cpu1%) (server-core capacity estimate; dnsperf on CPU 0 is the bottleneck when cpu0 ~100%)" | tee -a res/dns_summary.txt
echo "(raw per-run rows: $BASE/res/dns_runs.tsv; dnsperf outputs: $BASE/res/)"
