#!/usr/bin/env python3
"""bootbench: how long `abox run` takes to the first byte of the command's
output, against bare QEMU booting the same kernel and initramfs to the same
first byte with no abox at all; and the resident memory abox adds per instance.

Usage: bootbench.py PATH/TO/abox   (bench/bootbench.sh runs it with the build's abox)

Images: IMAGES (default "minimal debian"): each gets a bare and an abox row.
The debian image is built in the bench's own cache, from the recipe's cache
(~/.cache/abox: the .debs and, for a week, the Debian tree), so that a run
does not take Debian's mirror's time.

Rows (interleaved, REPS each, default 10):
- bare: qemu-system-x86_64 -M microvm, the minimal image's vmlinux and
  initramfs, `rdinit=/bin/busybox -- echo abox-first-byte` (busybox prints
  and exits, the kernel panics, -no-reboot ends QEMU): from QEMU's exec to the
  marker on its serial console. The same machine options as abox run's QEMU
  (accelerator, memory, one CPU), no devices. For debian: its kernel,
  initramfs and root disk (read-only virtio-blk), the initramfs's /init
  mounting the root under a tmpfs layer as it does for abox, then
  `-- abox-bench /usr/bin/echo abox-first-byte` in place of box-guest.
- abox: `abox run --policy P -- echo abox-first-byte` (the default self-test
  on): from exec to the marker on abox's stdout. Its --json summary gives the
  spans: abox's start to QEMU's exec (abox-net ready before), QEMU's exec to
  box-guest's hello (the guest's own uptime at hello splits the kernel and
  /init from QEMU's start-up), hello to the command's start (setup and the
  self-test), the command's start to its first output.
- memory: during `abox run ... -- sleep 6` with a [[broker]] binding, the RSS
  and PSS of the supervisor (abox run), abox-net and the broker, sampled at
  3 s (after the command started), summed per instance. QEMU's own memory is
  the guest's and is not counted.

Results: OUT (default /tmp/bootbench/<timestamp>/): raw.csv, summary.md.
Every loop is bounded; every process is killed at the end. Nothing leaves
the machine: the policy allows no name, so the self-test's probes (public
addresses by default) end at abox-net.
"""
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bare_qemu import MARKER, command as bare_command, drain, image_files, read_until  # noqa: E402

REPS = int(os.environ.get("REPS", "10"))
TIMEOUT = 120


def rss_pss(pid):
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def children(pid):
    out = []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            out = [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    abox = os.path.abspath(argv[0])
    out_dir = os.environ.get("OUT") or os.path.join("/tmp/bootbench", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="bootbench-")
    env = dict(os.environ, XDG_STATE_HOME=f"{work}/state", XDG_CACHE_HOME=f"{work}/cache")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"bootbench: load average before: {' '.join(load)}; {REPS} reps; results in {out_dir}", flush=True)

    policy = f"{work}/policy.toml"
    with open(policy, "w") as f:
        f.write('version = 1\n[dns]\nupstreams = ["127.0.0.1:9"]\n[[allow]]\nnames = ["allowed.test"]\nports = [443]\n')
    policy_broker = f"{work}/policy-broker.toml"
    with open(policy_broker, "w") as f:
        f.write('version = 1\n[dns]\nupstreams = ["127.0.0.1:9"]\n[[broker]]\nname = "api.example.test"\n'
                'credential = "k"\nheader = "x-api-key"\nnonce_env = "K"\n')
    creds = f"{work}/creds.toml"
    with open(creds, "w") as f:
        f.write('[credentials]\nk = "sk-bench-0123456789"\n')
    os.chmod(creds, 0o600)

    env.setdefault("ABOX_IMAGE_CACHE", os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                    os.path.expanduser("~/.cache"), "abox"))
    wanted = os.environ.get("IMAGES", "minimal debian").split()
    for name in wanted:
        print(f"bootbench: abox image build {name}", flush=True)
        r = subprocess.run([abox, "image", "build", name], env=env, capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
    listed = json.loads(subprocess.run([abox, "image", "ls", "--json"], env=env, capture_output=True, text=True,
                                       timeout=60).stdout)["images"]
    images = {}
    for name in wanted:
        image = next(i for i in listed if i["name"] == name)
        images[name] = image_files(image["dir"])

    # One abox run first: it probes KVM (cached afterwards) and says which accelerator it got.
    first = subprocess.run([abox, "run", "--policy", policy, "--json", "--", "true"], env=env, capture_output=True,
                           text=True, timeout=TIMEOUT)
    summary = json.loads([l for l in first.stderr.splitlines() if l.startswith("{")][-1])
    accel = summary["accel"]
    rows = []
    for rep in range(REPS):
        for name, files in images.items():
            # bare
            t0 = time.monotonic()
            p = subprocess.Popen(bare_command(files, accel), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL)
            t = read_until(p, MARKER, TIMEOUT)
            p.kill()
            drain(p)
            rows.append({"row": "bare", "image": name, "rep": rep,
                         "first_byte_ms": round((t - t0) * 1000, 1) if t else ""})
            # abox
            t0 = time.monotonic()
            p = subprocess.Popen([abox, "run", "--image", name, "--policy", policy, "--json", "--", "echo",
                                  MARKER.decode()], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            t = read_until(p, MARKER, TIMEOUT)
            _, err = p.communicate(timeout=TIMEOUT)
            ms = {}
            for line in err.decode(errors="replace").splitlines():
                if line.startswith("{"):
                    ms = json.loads(line).get("ms", {})
            rows.append({"row": "abox", "image": name, "rep": rep,
                         "first_byte_ms": round((t - t0) * 1000, 1) if t else "",
                         **{f"span_{k}": v for k, v in ms.items()}})
            print(f"rep {rep} {name}: bare {rows[-2]['first_byte_ms']} ms, abox {rows[-1]['first_byte_ms']} ms",
                  flush=True)

    # Memory per instance.
    mem = []
    for rep in range(3):
        p = subprocess.Popen([abox, "run", "--image", wanted[0], "--policy", policy_broker, "--credentials", creds,
                              "--", "sleep", "6"],
                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1)
        # Wait for the command to start (the events say so), at most TIMEOUT.
        deadline = time.monotonic() + TIMEOUT
        started = False
        while time.monotonic() < deadline and not started and p.poll() is None:
            for d in os.listdir(f"{work}/state/abox/instances") if os.path.isdir(f"{work}/state/abox/instances") else []:
                try:
                    with open(f"{work}/state/abox/instances/{d}/events.jsonl") as f:
                        started = '"command_started"' in f.read()
                except OSError:
                    pass
            time.sleep(0.2)
        time.sleep(1)
        parts = {"supervisor": rss_pss(p.pid)}
        for c in children(p.pid):
            argv0 = comm(c)
            name = os.path.basename(argv0[0].decode()) if argv0 else "?"
            if name == "abox" and len(argv0) > 1 and argv0[1] == b"broker":
                parts["broker"] = rss_pss(c)
            elif name == "abox-net":
                parts["abox-net"] = rss_pss(c)
        mem.append(parts)
        drain(p)
        print(f"memory {rep}: " + ", ".join(f"{k} {v[0] / 1024:.1f} MiB RSS / {v[1] / 1024:.1f} PSS"
                                           for k, v in parts.items()), flush=True)

    with open(f"{out_dir}/raw.csv", "w", newline="") as f:
        keys = sorted({k for r in rows for k in r})
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)

    def med(row, image, key):
        vals = [r[key] for r in rows if r["row"] == row and r["image"] == image and r.get(key) not in ("", None, -1)]
        return statistics.median(vals) if vals else float("nan")

    span_names = ("network_ready", "vmm_started", "hello", "command_started", "first_output")
    table = []
    for name in images:
        bare, boxed = med("bare", name, "first_byte_ms"), med("abox", name, "first_byte_ms")
        table.append(f"| {name} | {bare:.0f} | {boxed:.0f} | {boxed - bare:.0f} | {boxed / bare:.2f}x |")
    per = {name: statistics.median(m[name][0] for m in mem if name in m) / 1024 for name in ("supervisor", "abox-net", "broker")
           if any(name in m for m in mem)}
    per_pss = {name: statistics.median(m[name][1] for m in mem if name in m) / 1024 for name in per}
    lines = [
        f"# bootbench {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Load average before: {' '.join(load)}. Accelerator: {accel}. {REPS} reps, rows interleaved; medians.",
        "",
        "To the first byte of output (ms): bare QEMU with the same kernel, initramfs (and root disk),",
        "against abox run with the self-test on:",
        "",
        "| image | bare QEMU | abox run | abox adds | ratio |",
        "|---|---|---|---|---|",
        *table,
        "",
        "abox run's spans (ms from abox's start, medians):",
        "",
        "| milestone | " + " | ".join(images) + " |",
        "|---|" + "---|" * len(images),
        *(f"| {k} | " + " | ".join(f"{med('abox', name, f'span_{k}'):.0f}" for name in images) + " |"
          for k in span_names),
        "",
        f"Resident memory abox adds per instance ({wanted[0]} image; MiB, medians of 3, QEMU not counted):",
        "",
        "| process | RSS | PSS |",
        "|---|---|---|",
        *(f"| {k} | {per[k]:.1f} | {per_pss[k]:.1f} |" for k in per),
        f"| total | {sum(per.values()):.1f} | {sum(per_pss.values()):.1f} |",
    ]
    with open(f"{out_dir}/summary.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    subprocess.run(["rm", "-rf", work], timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
