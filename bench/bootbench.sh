#!/usr/bin/env bash
# bootbench.sh [ABOX]: abox run to the first byte of output against bare QEMU
# (the same kernel and initramfs), and the memory abox adds per instance.
# See bootbench.py's docstring; REPS and OUT pass through. Run it with nothing
# else on the machine: the figures are only worth that.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
abox=${1:-$here/../build/engine/abox}
exec python3 "$here/bootbench.py" "$abox"
