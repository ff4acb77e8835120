#!/bin/bash
# Syscalls per request of the nginx proxy worker and of the broker, at 16 keep-alive connections:
# strace -c on the server for 4 s in the middle of its row; requests = the upstream's request count.
cd /work/main
ROWS="proxy broker" MODES="ka" CONNS="16" RUNS=1 DUR=14 WARM=0 MAXTIME=200 WORKDIR=/tmp/bb-sc bash bench/brokerbench.sh > /tmp/bb-sc-out.txt 2>&1 &
upreq() { curl -s http://127.0.0.1:8081/status | awk 'NR==3{print $3}'; }
for which in proxy broker; do
  for i in $(seq 1 100); do pgrep -f "wrk.*-d14s" >/dev/null && break; sleep 0.2; done
  sleep 4
  if [ $which = proxy ]; then pid=$(pgrep -f "nginx: worker" | while read p; do grep -q proxy.conf /proc/$(awk '{print $4}' /proc/$p/stat)/cmdline 2>/dev/null && echo $p; done | head -1)
  else pid=$(pgrep -f "abox broker --policy" | head -1); fi
  r0=$(upreq); timeout -s INT 4 strace -c -f -p $pid -o /tmp/sc-$which.txt; r1=$(upreq)
  echo "$which pid $pid requests $((r1-r0))"; sort -k4 -n -r /tmp/sc-$which.txt | head -12
  for i in $(seq 1 100); do pgrep -f "wrk.*-d14s" >/dev/null || break; sleep 0.2; done
done
wait
