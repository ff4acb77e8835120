#!/bin/bash
# idle_rss.sh - resident memory of an idle abox-net (issue 6: at most 4 MiB).
#
# Starts `abox-net run --policy P --netns NS` with the smallest useful policy
# (docs/examples/minimal.toml) in a namespace this script creates, waits until
# the guest side is configured and then WAIT more seconds with no traffic, and
# prints VmRSS, RssAnon, RssFile, RssShmem, PSS and a per-mapping table from
# /proc/PID/smaps (one row per file, plus [heap], [stack] and anonymous
# mappings), biggest first. Then it stops abox-net and removes the namespace.
#
# Needs root (abox-net creates the tap inside the namespace). No traffic is
# sent. Usage:
#   sudo bench/idle_rss.sh                  (ABOX_NET=path/to/abox-net, WAIT=seconds, default 1)
#   sudo RUNS=3 bench/idle_rss.sh           (three instances one after another; one table each)
set -u
export LC_ALL=C

DIR=$(cd "$(dirname "$0")" && pwd)
ABOX_NET=${ABOX_NET:-$DIR/../build/netstack/abox-net}
POLICY=${POLICY:-$DIR/../docs/examples/minimal.toml}
WAIT=${WAIT:-1}
RUNS=${RUNS:-1}
NS=abox-idle-rss-$$

die() { echo "idle_rss: $*" >&2; exit 1; }

PID=
LOG=$(mktemp /tmp/idle_rss.XXXXXX)
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$PID" ]; then
    kill "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null
  fi
  ip netns del "$NS" 2>/dev/null
  rm -f "$LOG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || die "run as root"
[ -x "$ABOX_NET" ] || die "abox-net not found at $ABOX_NET (build it, or set ABOX_NET)"
[ -r "$POLICY" ] || die "no policy at $POLICY"
[[ "$WAIT" =~ ^[0-9]+$ ]] && [ "$WAIT" -le 60 ] || die "WAIT must be an integer <= 60"
[[ "$RUNS" =~ ^[0-9]+$ ]] && [ "$RUNS" -ge 1 ] && [ "$RUNS" -le 10 ] || die "RUNS must be 1..10"

status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

# One row per mapping name: Rss, Pss, anonymous (private, written) KiB.
mapping_table() {
  awk '
    /^[0-9a-f]+-[0-9a-f]+ / { name = (NF >= 6) ? $6 : "[anonymous]"; sub(".*/", "", name); next }
    $1 == "Rss:"       { rss[name] += $2 }
    $1 == "Pss:"       { pss[name] += $2 }
    $1 == "Anonymous:" { anon[name] += $2 }
    END {
      for (n in rss) if (rss[n] > 0) printf "%8d %8d %8d  %s\n", rss[n], pss[n], anon[n], n
    }' "/proc/$1/smaps" | sort -rn
}

for ((run = 1; run <= RUNS; run++)); do
  ip netns add "$NS" || die "cannot create the namespace $NS"
  "$ABOX_NET" run --policy "$POLICY" --netns "$NS" >"$LOG" 2>&1 &
  PID=$!
  up=
  for ((i = 0; i < 50; i++)); do  # at most 5 s for the guest side to come up
    ip -n "$NS" -4 addr show 2>/dev/null | grep -q 'inet 10.0.2.15/' && { up=1; break; }
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$up" ] || { cat "$LOG" >&2; die "abox-net did not configure $NS"; }
  sleep "$WAIT"
  kill -0 "$PID" 2>/dev/null || { cat "$LOG" >&2; die "abox-net exited while idle"; }

  rss=$(status_kb "$PID" VmRSS)
  anon=$(status_kb "$PID" RssAnon)
  file=$(status_kb "$PID" RssFile)
  shmem=$(status_kb "$PID" RssShmem)
  pss=$(awk '$1 == "Pss:" {print $2}' "/proc/$PID/smaps_rollup")
  echo "abox-net idle ${WAIT}s ($ABOX_NET, run $run of $RUNS)"
  printf 'VmRSS %d KiB (%.2f MiB)  RssAnon %d  RssFile %d  RssShmem %d  PSS %d KiB\n' \
    "$rss" "$(awk -v k="$rss" 'BEGIN{print k / 1024}')" "$anon" "$file" "$shmem" "$pss"
  printf '%8s %8s %8s  %s\n' "Rss KiB" "Pss" "Anon" "mapping"
  mapping_table "$PID"
  echo

  kill "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  PID=
  ip netns del "$NS" 2>/dev/null
done
