#!/bin/bash
# stream_syscalls.sh - system calls per frame from the guest through
# `abox-net run --stream` (docs/benchmarks.md, "Stream link input").
#
# Starts abox-net under `strace -c -f` with a stream socket in a temporary
# directory, connects as the VMM (a Python peer speaking QEMU's framing),
# sends N 60-byte IPv4 frames from a spoofed source (the stack drops and
# counts them: only the link's read path and the stack's first checks run),
# closes, and prints the syscall table and frames_in. MODE is "bulk" (1,000
# frames per write) or "paced" (one frame per write, 100 us apart).
# Everything stays in the temporary directory; no namespace, no network.
#
# Usage: bench/stream_syscalls.sh [N] [MODE]   (ABOX_NET=path/to/abox-net)
set -u
export LC_ALL=C
DIR=$(cd "$(dirname "$0")" && pwd)
ABOX_NET=${ABOX_NET:-$DIR/../build/netstack/abox-net}
N=${1:-5000}
MODE=${2:-paced}
command -v strace >/dev/null || { echo "stream_syscalls: needs strace" >&2; exit 1; }
WORK=$(mktemp -d /tmp/stream_syscalls.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/policy.toml" <<'POLICY'
[dns]
upstreams = ["127.0.0.1:53"]
[[allow]]
names = ["example.com"]
ports = [443]
POLICY
timeout 120 strace -c -f -o "$WORK/strace" "$ABOX_NET" run --policy "$WORK/policy.toml" \
  --stream "$WORK/vm.sock" >"$WORK/out" 2>"$WORK/err" &
PID=$!
python3 - "$WORK/vm.sock" "$N" "$MODE" <<'PEER'
import socket, struct, sys, time
path, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
for _ in range(200):  # bounded: abox-net listens within a second
    try:
        s.connect(path)
        break
    except OSError:
        time.sleep(0.05)
eth = bytes.fromhex("52550a000202" "020000000015" "0800")
ip = bytes([0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 2, 99, 10, 0, 2, 2]) + bytes(26)
rec = struct.pack("!I", len(eth + ip)) + eth + ip
if mode == "bulk":
    for _ in range(n // 1000):
        s.sendall(rec * 1000)
else:
    for _ in range(n):
        s.sendall(rec)
        time.sleep(0.0001)
time.sleep(0.5)
s.close()
PEER
wait "$PID"
head -12 "$WORK/strace"
grep -o '"frames_in":[0-9]*' "$WORK/err"
