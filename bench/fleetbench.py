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
  4. churn: CHURN run -d/stop/rm cycles: the daemon's rss and fds before and
     after, and what is left (processes, folders).
Prints one JSON object (also to OUT when set) and `uptime` before and after.
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

N = int(os.environ.get("N", "6"))
PARALLEL = int(os.environ.get("PARALLEL", "4"))
CHURN = int(os.environ.get("CHURN", "50"))
TIMEOUT = 300


def main(abox):
    work = tempfile.mkdtemp(prefix="abox-fleetbench-")
    runtime = os.path.join(work, "run")
    os.mkdir(runtime, 0o700)
    env = dict(os.environ, XDG_STATE_HOME=os.path.join(work, "state"), XDG_RUNTIME_DIR=runtime)
    policy = os.path.join(work, "policy.toml")
    with open(policy, "w") as f:
        f.write('version = 1\n[dns]\nupstreams = ["127.0.0.1:53"]\n[[allow]]\nnames = ["unused.invalid"]\n'
                'ports = [80]\n')
    sock = os.path.join(runtime, "abox", "daemon.sock")

    def abox_run(*args):
        return subprocess.run([abox, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)

    def api(op, **fields):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(sock)
        s.sendall((json.dumps(dict(v=1, id=1, op=op, **fields)) + "\n").encode())
        buf = b""
        while b"\n" not in buf:
            buf += s.recv(65536)
        s.close()
        return json.loads(buf)

    def run_d(name):
        t = time.monotonic()
        r = abox_run("run", "-d", "--policy", policy, "--name", name, "--no-selftest", "--", "sleep", "3600")
        if r.returncode != 0:
            raise RuntimeError(f"run -d {name}: {r.stderr}")
        return time.monotonic() - t

    result = {"uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "cpus": os.cpu_count(), "n": N, "parallel": PARALLEL, "churn": CHURN}
    names = []
    try:
        abox_run("image", "build", "minimal")
        abox_run("ls")  # starts the daemon
        idle = api("ping")
        result["daemon_rss_kib_idle"] = idle["rss_kib"]
        times = []
        t0 = time.monotonic()
        for i in range(N):
            names.append(f"bench{i}")
            times.append(run_d(names[-1]))
        serial = time.monotonic() - t0
        times.sort()
        result["run_d_to_running_s"] = {"min": round(times[0], 2), "median": round(times[len(times) // 2], 2),
                                        "max": round(times[-1], 2)}
        result["serial_per_minute"] = round(N / serial * 60, 1)
        full = api("ping")
        result["daemon_rss_kib_with_n"] = full["rss_kib"]
        result["daemon_kib_per_instance"] = round((full["rss_kib"] - idle["rss_kib"]) / N, 1)
        per = [api("stats", name=n)["rss_kib"]["total"] for n in names]
        result["instance_rss_kib_median"] = sorted(per)[len(per) // 2]
        abox_run("rm", "-f", *names)
        names = []
        t0 = time.monotonic()
        batch = [f"par{i}" for i in range(PARALLEL)]
        procs = [subprocess.Popen([abox, "run", "-d", "--policy", policy, "--name", n, "--no-selftest", "--",
                                   "sleep", "3600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
                 for n in batch]
        names = batch
        for p in procs:
            p.wait(timeout=TIMEOUT)
        par = time.monotonic() - t0
        result["parallel_all_running_s"] = round(par, 2)
        result["parallel_per_minute"] = round(PARALLEL / par * 60, 1)
        result["parallel_failures"] = sum(1 for p in procs if p.returncode != 0)
        abox_run("rm", "-f", *names)
        names = []
        before = api("ping")
        t0 = time.monotonic()
        for i in range(CHURN):
            n = f"churn{i}"
            run_d(n)
            abox_run("stop", n)
            abox_run("rm", n)
        result["churn_s"] = round(time.monotonic() - t0, 1)
        after = api("ping")
        result["churn_daemon_rss_kib"] = [before["rss_kib"], after["rss_kib"]]
        result["churn_daemon_fds"] = [before["fds"], after["fds"]]
        ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
        result["churn_processes_left"] = sum(1 for l in ps.splitlines() if work in l and "daemon" not in l)
        result["churn_folders_left"] = len(os.listdir(os.path.join(work, "state", "abox", "instances")))
    finally:
        if names:
            abox_run("rm", "-f", *names)
        try:
            os.kill(api("ping")["pid"], 15)
        except OSError:
            pass
        result["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if os.environ.get("OUT"):
        with open(os.environ["OUT"], "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(os.path.abspath(sys.argv[1]))
