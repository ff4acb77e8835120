#!/usr/bin/env python3
"""fleetbench.py ABOX: the daemon's fleet figures (minimal image, no self-test).

Everything runs in a private temp folder (its own XDG_STATE_HOME, XDG_RUNTIME_DIR,
so its own daemon); the image comes from the operator's cache (built if missing).
The guests need no network: the policy allows one name nobody asks for.

  1. serial: N times `abox run -d ... -- sleep 3600` one after the other; each
     returns once its instance runs: its wall time is "run -d to running";
     N / the total is instances started per minute (serial);
  2. the daemon's resident memory (its `ping`) with 0 and with N instances:
     the difference / N is its memory per instance; `stats` gives each
     instance's own (shim + abox-net + broker + QEMU);
  3. parallel: PARALLEL `abox run -d` at once: the time until all run, and
     instances per minute that way;
  2b. the peer: N boots of bare QEMU (bare_qemu.py, as bootbench's bare row)
     from the minimal image's kernel and initramfs to a first byte on its
     console, with the accelerator the instances got: "run -d to running"
     over it is run_d_vs_bare_qemu (the ratio of the medians);
  4. churn: after one warm-up cycle, CHURN run -d/stop/rm cycles: the
     daemon's rss and fds before and after, and what the cycles left, by
     name: processes, unix sockets and state folders of the bench's
     instances, the daemon's fds past the count before (with what each
     points to), its memory more than 2 MiB up.
N=0 leaves out steps 1-2, PARALLEL=0 step 3: `N=0 PARALLEL=0 CHURN=50` is the
issue's churn alone. Prints one JSON object (also to OUT when set) and
`uptime` before and after. "churn_leaks" lists what the churn left (empty:
nothing) and "churn_failures" the cycles whose run -d, stop or rm failed;
the exit status is 1 when either is not empty.
Every wait is bounded; everything it started is removed at the end.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bare_qemu  # noqa: E402

N = int(os.environ.get("N", "6"))
PARALLEL = int(os.environ.get("PARALLEL", "4"))
CHURN = int(os.environ.get("CHURN", "50"))
TIMEOUT = 300
RSS_SLACK_KIB = 2048  # the daemon's memory counts as back within this (e2e.daemon's churn bound)


class Bench:
    def __init__(self, abox, work):
        self.abox, self.work = abox, work
        self.runtime = os.path.join(work, "run")
        os.mkdir(self.runtime, 0o700)
        self.env = dict(os.environ, XDG_STATE_HOME=os.path.join(work, "state"), XDG_RUNTIME_DIR=self.runtime)
        self.policy = os.path.join(work, "policy.toml")
        with open(self.policy, "w") as f:
            f.write('version = 1\n[dns]\nupstreams = ["127.0.0.1:53"]\n[[allow]]\nnames = ["unused.invalid"]\n'
                    'ports = [80]\n')
        self.sock = os.path.join(self.runtime, "abox", "daemon.sock")
        self.names = []  # instances to remove at the end

    def abox_run(self, *args):
        return subprocess.run([self.abox, *args], capture_output=True, text=True, timeout=TIMEOUT, env=self.env)

    def api(self, op, **fields):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(self.sock)
        s.sendall((json.dumps(dict(v=1, id=1, op=op, **fields)) + "\n").encode())
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        s.close()
        return json.loads(buf)

    def run_d(self, name):
        t = time.monotonic()
        r = self.abox_run("run", "-d", "--policy", self.policy, "--name", name, "--no-selftest", "--", "sleep",
                          "3600")
        if r.returncode != 0:
            raise RuntimeError(f"run -d {name}: {r.stderr}")
        return time.monotonic() - t

    def leftovers(self, daemon_pid, fds_before):
        """What the bench's instances left, by name: processes (the daemon
        excepted), unix sockets and state folders; the daemon's fds past
        fds_before (its ping's count)."""
        left = []
        ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, timeout=30).stdout
        for line in ps.splitlines():
            pid, _, args = line.strip().partition(" ")
            if self.work in args and int(pid) != daemon_pid:
                left.append(f"process {pid}: {args[:200]}")
        ss = subprocess.run(["ss", "-xa"], capture_output=True, text=True, timeout=30).stdout
        left += [f"socket: {' '.join(l.split())}" for l in ss.splitlines() if "/instances/" in l and self.work in l]
        root = os.path.join(self.work, "state", "abox", "instances")
        left += [f"folder: {os.path.join(root, n)}" for n in (os.listdir(root) if os.path.isdir(root) else [])]
        fds_after = self.api("ping")["fds"]
        if fds_after > fds_before:
            fds = []
            for fd in sorted(os.listdir(f"/proc/{daemon_pid}/fd"), key=int):
                try:
                    fds.append(f"{fd}={os.readlink(f'/proc/{daemon_pid}/fd/{fd}')}")
                except OSError:
                    pass
            left.append(f"daemon fds {fds_before} -> {fds_after}: {', '.join(fds)}")
        return left


def serial_and_memory(b, result, idle):
    times = []
    t0 = time.monotonic()
    for i in range(N):
        b.names.append(f"bench{i}")
        times.append(b.run_d(b.names[-1]))
    serial = time.monotonic() - t0
    times.sort()
    result["run_d_to_running_s"] = {"min": round(times[0], 2), "median": round(times[len(times) // 2], 2),
                                    "max": round(times[-1], 2)}
    result["serial_per_minute"] = round(N / serial * 60, 1)
    full = b.api("ping")
    result["daemon_rss_kib_with_n"] = full["rss_kib"]
    result["daemon_kib_per_instance"] = round((full["rss_kib"] - idle["rss_kib"]) / N, 1)
    per = [b.api("stats", name=n)["rss_kib"]["total"] for n in b.names]
    result["instance_rss_kib_median"] = sorted(per)[len(per) // 2]
    listed = json.loads(b.abox_run("ls", "--json").stdout)
    rows = listed["instances"] if isinstance(listed, dict) else listed
    accel = next((i.get("accel") for i in rows if i.get("name") == b.names[0]), None) or "tcg"
    b.abox_run("rm", "-f", *b.names)
    b.names = []
    bare_qemu_peer(b, result, accel)


def bare_qemu_peer(b, result, accel):
    listed = json.loads(b.abox_run("image", "ls", "--json").stdout)["images"]
    files = bare_qemu.image_files(next(i for i in listed if i["name"] == "minimal")["dir"])
    times = []
    for _ in range(N):
        t = bare_qemu.first_byte_s(files, accel, TIMEOUT)
        if t is None:
            raise RuntimeError("bare QEMU: no first byte")
        times.append(t)
    times.sort()
    result["bare_qemu_first_byte_s"] = {"min": round(times[0], 2), "median": round(times[len(times) // 2], 2),
                                        "max": round(times[-1], 2), "accel": accel}
    result["run_d_vs_bare_qemu"] = round(result["run_d_to_running_s"]["median"] / times[len(times) // 2], 2)


def parallel(b, result):
    t0 = time.monotonic()
    batch = [f"par{i}" for i in range(PARALLEL)]
    b.names = batch
    procs = [subprocess.Popen([b.abox, "run", "-d", "--policy", b.policy, "--name", n, "--no-selftest", "--",
                               "sleep", "3600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=b.env)
             for n in batch]
    for p in procs:
        p.wait(timeout=TIMEOUT)
    par = time.monotonic() - t0
    result["parallel_all_running_s"] = round(par, 2)
    result["parallel_per_minute"] = round(PARALLEL / par * 60, 1)
    result["parallel_failures"] = sum(1 for p in procs if p.returncode != 0)
    b.abox_run("rm", "-f", *b.names)
    b.names = []


def churn(b, result):
    # One cycle first: the daemon's first instance allocates what it keeps
    # (its buffers, the allocator's arenas), which is not a leak of the churn.
    b.names = ["warm"]
    b.run_d("warm")
    b.abox_run("stop", "warm")
    b.abox_run("rm", "warm")
    b.names = []
    before = b.api("ping")
    failures = []
    t0 = time.monotonic()
    for i in range(CHURN):
        n = f"churn{i}"
        b.names = [n]
        steps = [("run -d", b.abox_run("run", "-d", "--policy", b.policy, "--name", n, "--no-selftest", "--",
                                       "sleep", "3600")),
                 ("stop", b.abox_run("stop", n)), ("rm", b.abox_run("rm", n))]
        failures += [f"{n}: {what}: exit {r.returncode}: {r.stderr.strip()[-200:]}" for what, r in steps
                     if r.returncode != 0]
    b.names = []
    result["churn_s"] = round(time.monotonic() - t0, 1)
    after = b.api("ping")
    result["churn_daemon_rss_kib"] = [before["rss_kib"], after["rss_kib"]]
    result["churn_daemon_fds"] = [before["fds"], after["fds"]]
    result["churn_failures"] = failures
    result["churn_leaks"] = b.leftovers(before["pid"], before["fds"])
    if after["rss_kib"] > before["rss_kib"] + RSS_SLACK_KIB:
        result["churn_leaks"].append(f"daemon memory {before['rss_kib']} -> {after['rss_kib']} KiB "
                                     f"(more than {RSS_SLACK_KIB} KiB up)")


def main(abox):
    work = tempfile.mkdtemp(prefix="abox-fleetbench-")
    b = Bench(abox, work)
    result = {"uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "cpus": os.cpu_count(), "n": N, "parallel": PARALLEL, "churn": CHURN}
    try:
        b.abox_run("image", "build", "minimal")
        b.abox_run("ls")  # starts the daemon
        idle = b.api("ping")
        result["daemon_rss_kib_idle"] = idle["rss_kib"]
        if N > 0:
            serial_and_memory(b, result, idle)
        if PARALLEL > 0:
            parallel(b, result)
        churn(b, result)
    finally:
        if b.names:
            b.abox_run("rm", "-f", *b.names)
        try:
            os.kill(b.api("ping")["pid"], 15)
        except (OSError, ValueError):
            pass
        result["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if os.environ.get("OUT"):
        with open(os.environ["OUT"], "w") as f:
            f.write(text + "\n")
    return 1 if result.get("churn_leaks") or result.get("churn_failures") else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(os.path.abspath(sys.argv[1])))
