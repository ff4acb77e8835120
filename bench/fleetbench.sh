#!/usr/bin/env bash
# fleetbench.sh [ABOX]: the daemon's fleet figures on this machine (minimal
# image): `abox run -d` to running, instances started per minute (serially and
# PARALLEL at once), the daemon's memory per instance, and a churn of CHURN
# run -d/stop/rm cycles (50 by default, the issue's count) with the daemon's
# memory and fds before and after. See fleetbench.py; N, PARALLEL, CHURN and
# OUT pass through. On a shared machine, report the figures with `uptime`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
abox=${1:-$here/../build/engine/abox}
exec python3 "$here/fleetbench.py" "$abox"
