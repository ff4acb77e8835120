#!/usr/bin/env python3
"""netns_rig: network namespaces, a fake internet and its servers, for
end-to-end tests that put a guest behind abox-net (or behind a plain kernel
router, to prove a test's attacks are real).

Topology (every name carries the test's pid; every address lives inside a
namespace the rig made, so parallel runs never collide):

    guest ns                outside ns                          inet ns ("fake internet")
    (abox-net's tap,        abox-net runs here; host sockets    nsd, nginx, iperf3, tools server
     10.0.2.15/24,          leave from 45.33.250.1/30 ──veth──  45.33.250.2/30
     gw 10.0.2.2)           routes: one /32 per server address  server addresses: /32s on lo

There is no default route in outside or inet: only the server addresses are
reachable from outside, and nothing can leave the machine even when a test is
wrong. Every address is public-looking and outside every reserved range of
docs/policy.md, so abox-net's reserved-range check never hides a bug.

`Rig.close()` stops every process it started (by pid), then kills by pid any
process still inside its namespaces (nginx workers orphaned by a killed
master), deletes the namespaces and /etc/netns/<ns>, and removes its temp
dir. It runs on success, on failure, on SIGINT and on SIGTERM.

Run as a program it is also the servers and relays the rig starts in a
namespace: `netns_rig.py tools-server` and `netns_rig.py dns-relay ...`.
"""
import hashlib
import os
import shutil
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

# The fake internet. A zone and its addresses; every address is public-looking.
ZONE = "example.test"
OUTSIDE_LINK = "45.33.250.1"  # outside end of the veth; host sockets leave from it
INET_LINK = "45.33.250.2"  # inet end
LINK_PREFIX = 30
ADDR = {
    "web": "93.184.215.14",  # nginx 80, 443, 8080; also serves other.example.test (shared address)
    "other": "93.184.215.14",
    "iperf": "93.184.215.16",  # iperf3 -s on 5201
    "tools": "93.184.215.17",  # tools server: 9000 stream, 9001 reset, 9002 half-close
    "secret": "93.184.215.18",  # a name the policy denies; nginx answers on it too
    "ns1": "93.184.215.53",  # nsd, authoritative for ZONE
}
SERVER_ADDRS = sorted(set(ADDR.values()))
STREAM_PORT, RESET_PORT, HALFCLOSE_PORT = 9000, 9001, 9002
IPERF_PORT = 5201

# The guest side, as abox-net (and the kernel-router stand-in) sets it up.
GUEST_ADDR = "10.0.2.15"
GATEWAY = "10.0.2.2"
GUEST_PREFIX = 24
GUEST_MTU = 65520


def fqdn(short):
    return f"{short}.{ZONE}"


def _netns_cmd(ns, cmd):
    return ["ip", "netns", "exec", ns, *cmd] if ns else list(cmd)


def first_line(p, timeout):
    """The first line a process started with stdout=PIPE prints (bytes, with
    its newline), read a byte at a time so nothing after it is consumed;
    what came if it exits or `timeout` seconds pass first."""
    line, deadline = b"", time.monotonic() + timeout
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([p.stdout], [], [], max(0.01, deadline - time.monotonic()))
        if ready:
            b = os.read(p.stdout.fileno(), 1)
            if not b:
                break
            line += b
    return line


class Rig:
    """One test's namespaces, servers and temp dir. Use as a context manager."""

    def __init__(self, tag="nse"):
        pid = os.getpid()
        self.dir = tempfile.mkdtemp(prefix=f"abox-{tag}-e2e-")
        self.guest, self.outside, self.inet = (f"ab{tag}{pid}{r}" for r in "goi")
        self.procs = []  # (name, Popen), in start order
        self.netns = []  # namespaces made, in order
        self.etc_netns = []  # /etc/netns/<ns> dirs made
        self.made_etc_netns = False
        self.ca = None  # {"ca": path, name: (cert, key)}
        self.nginx_conf = None
        self._closed = False
        self._old_handlers = {}

    # -- lifecycle -------------------------------------------------------------

    def unwind_on_signals(self):
        """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, so the caller's
        `finally: rig.close()` runs (SIGINT too when a shell started us in the
        background with SIGINT ignored)."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_interrupt)

    def __enter__(self):
        self.unwind_on_signals()
        return self

    def __exit__(self, *exc):
        self.close()
        for sig, h in self._old_handlers.items():
            signal.signal(sig, h)
        return False

    def close(self, keep_dir=False):
        if self._closed:
            return
        self._closed = True
        # A second Ctrl-C must not leave namespaces behind half way.
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            for _, p in reversed(self.procs):
                if p.poll() is None:
                    try:
                        p.terminate()
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + 5
            for _, p in self.procs:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    try:
                        p.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        pass
            # Whatever is still inside our namespaces was started by us (they
            # are ours alone): kill it by pid, then wait a bounded time.
            for _ in range(20):
                left = [pid for ns in self.netns for pid in netns_pids(ns)]
                if not left:
                    break
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
            for ns in reversed(self.netns):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
            for d in self.etc_netns:
                shutil.rmtree(d, ignore_errors=True)
            if self.made_etc_netns:
                try:
                    os.rmdir("/etc/netns")
                except OSError:
                    pass  # someone else put something there meanwhile
            if not keep_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def leftovers(self):
        """What close() failed to remove (for the harness's own check)."""
        left = []
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
        for ns in (self.guest, self.outside, self.inet):
            if ns in names.split():
                left.append(f"netns {ns}")
            if os.path.exists(f"/etc/netns/{ns}"):
                left.append(f"/etc/netns/{ns}")
        for _, p in self.procs:
            if p.poll() is None:
                left.append(f"pid {p.pid}")
        return left

    # -- running things ----------------------------------------------------------

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, cmd, ns=None, timeout=30, check=False, text=True, input=None):
        """Runs cmd (in ns) to completion within timeout; never hangs."""
        r = subprocess.run(_netns_cmd(ns, cmd), capture_output=True, text=text, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} (in {ns or 'root ns'}) failed {r.returncode}: {r.stderr.strip()}")
        return r

    def ip(self, *args, ns=None):
        return self.run(["ip", *(["-n", ns] if ns else []), *args], check=True, timeout=10)

    def spawn(self, name, cmd, ns=None, stdout=None):
        """Starts a long-running process, logging to <dir>/<name>.log."""
        log = open(self.path(f"{name}.log"), "ab")
        p = subprocess.Popen(_netns_cmd(ns, cmd), stdin=subprocess.DEVNULL,
                             stdout=stdout if stdout is not None else log, stderr=log)
        log.close()
        self.procs.append((name, p))
        return p

    def log_tail(self, name, lines=20):
        try:
            with open(self.path(f"{name}.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def wait_for(self, what, ready, timeout=10, proc=None, log=None):
        """Polls ready() every 50 ms until it is true or timeout runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                break
            if ready():
                return
            time.sleep(0.05)
        raise RuntimeError(f"{what} not ready within {timeout}s" + (f":\n{self.log_tail(log)}" if log else ""))

    def listening(self, ns, port, proto="t"):
        out = self.run(["ss", "-Hln" + proto, f"sport = :{port}"], ns=ns, timeout=5).stdout
        return bool(out.strip())

    # -- topology --------------------------------------------------------------

    def add_netns(self, ns):
        self.run(["ip", "netns", "add", ns], check=True, timeout=10)
        self.netns.append(ns)
        self.ip("link", "set", "lo", "up", ns=ns)

    def build_internet(self):
        """outside <-veth-> inet, server addresses on inet's lo, /32 routes in outside."""
        self.add_netns(self.outside)
        self.add_netns(self.inet)
        vo, vi = f"{self.outside}v", f"{self.inet}v"  # 15 characters at most for pids < 10^7
        self.ip("link", "add", "name", vo, "netns", self.outside, "type", "veth",
                "peer", "name", vi, "netns", self.inet)
        self.ip("addr", "add", f"{OUTSIDE_LINK}/{LINK_PREFIX}", "dev", vo, ns=self.outside)
        self.ip("addr", "add", f"{INET_LINK}/{LINK_PREFIX}", "dev", vi, ns=self.inet)
        self.ip("link", "set", vo, "up", ns=self.outside)
        self.ip("link", "set", vi, "up", ns=self.inet)
        for a in SERVER_ADDRS:
            self.ip("addr", "add", f"{a}/32", "dev", "lo", ns=self.inet)
            self.ip("route", "add", f"{a}/32", "via", INET_LINK, ns=self.outside)
        self.outside_veth = vo
        self.inet_veth = vi

    def add_server_address(self, addr):
        """One more server address after build_internet(): a /32 on inet's lo
        and a route to it in outside. It may lie in a reserved range (a test
        that proves abox-net never reaches it); it still exists only inside
        the rig's namespaces."""
        self.ip("addr", "add", f"{addr}/32", "dev", "lo", ns=self.inet)
        self.ip("route", "add", f"{addr}/32", "via", INET_LINK, ns=self.outside)

    def add_guest(self, nameserver=GATEWAY):
        """An empty guest namespace whose resolver is the gateway."""
        self.add_netns(self.guest)
        if not os.path.isdir("/etc/netns"):
            os.makedirs("/etc/netns", exist_ok=True)
            self.made_etc_netns = True
        d = f"/etc/netns/{self.guest}"
        os.makedirs(d)
        self.etc_netns.append(d)
        with open(f"{d}/resolv.conf", "w") as f:
            f.write(f"nameserver {nameserver}\noptions timeout:2 attempts:2\n")

    def build_kernel_router(self):
        """The stand-in for abox-net: a veth guest<->outside, forwarding in
        outside, a DNS relay on the gateway. It filters nothing, so every
        attack a test makes must succeed through it."""
        vg, vr = f"{self.guest}c", f"{self.outside}c"
        self.ip("link", "add", "name", vg, "netns", self.guest, "mtu", str(GUEST_MTU), "type", "veth",
                "peer", "name", vr, "netns", self.outside, "mtu", str(GUEST_MTU))
        self.ip("addr", "add", f"{GUEST_ADDR}/{GUEST_PREFIX}", "dev", vg, ns=self.guest)
        self.ip("addr", "add", f"{GATEWAY}/{GUEST_PREFIX}", "dev", vr, ns=self.outside)
        self.ip("link", "set", vg, "up", ns=self.guest)
        self.ip("link", "set", vr, "up", ns=self.outside)
        self.ip("route", "add", "default", "via", GATEWAY, ns=self.guest)
        self.ip("route", "add", f"10.0.2.0/{GUEST_PREFIX}", "via", OUTSIDE_LINK, ns=self.inet)
        self.run(["sysctl", "-qw", "net.ipv4.ip_forward=1"], ns=self.outside, check=True)
        p = self.spawn("dns-relay", [sys.executable, os.path.abspath(__file__), "dns-relay",
                                     GATEWAY, "53", ADDR["ns1"], "53"], ns=self.outside)
        self.wait_for("dns relay", lambda: self.listening(self.outside, 53, "t"), proc=p, log="dns-relay")

    # -- servers ---------------------------------------------------------------

    def make_ca(self, names):
        """A test CA and one leaf per name (EC P-256, SAN = the name), in dir."""
        ca_key, ca_crt = self.path("ca.key"), self.path("ca.pem")
        self.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", ca_key, "-out", ca_crt, "-days", "2", "-subj", "/CN=abox e2e test CA",
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"], check=True)
        self.ca = {"ca": ca_crt}
        for name in names:
            key, csr, crt = self.path(f"{name}.key"), self.path(f"{name}.csr"), self.path(f"{name}.pem")
            self.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                      "-keyout", key, "-out", csr, "-subj", f"/CN={name}",
                      "-addext", f"subjectAltName=DNS:{name}",
                      "-addext", "extendedKeyUsage=serverAuth"], check=True)
            self.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
                      "-days", "2", "-copy_extensions", "copy", "-out", crt], check=True)
            self.ca[name] = (crt, key)
        return ca_crt

    def start_nsd(self, records):
        """nsd in inet on ns1's address, authoritative for ZONE. records: lines
        relative to the zone origin ("web IN A 1.2.3.4")."""
        d = self.path("nsd")
        os.makedirs(d)
        with open(f"{d}/zone", "w") as f:
            f.write("\n".join([f"$ORIGIN {ZONE}.", "$TTL 300",
                               f"@ IN SOA ns1.{ZONE}. host.{ZONE}. 1 3600 600 86400 30",
                               f"@ IN NS ns1.{ZONE}.", *records]) + "\n")
        with open(f"{d}/nsd.conf", "w") as f:
            f.write(f"""server:
  server-count: 1
  ip-address: {ADDR['ns1']}@53
  do-ip6: no
  username: ""
  chroot: ""
  zonesdir: "{d}"
  database: ""
  zonelistfile: "{d}/zone.list"
  xfrdfile: "{d}/xfrd.state"
  xfrdir: "{d}"
  pidfile: "{d}/nsd.pid"
  logfile: "{d}/nsd.log"
  verbosity: 1
remote-control:
  control-enable: no
zone:
  name: {ZONE}
  zonefile: zone
""")
        p = self.spawn("nsd", ["nsd", "-d", "-c", f"{d}/nsd.conf"], ns=self.inet)

        def answers():
            r = self.run(["dig", f"@{ADDR['ns1']}", f"ns1.{ZONE}", "+time=1", "+tries=1", "+short"],
                         ns=self.inet, timeout=5)
            return r.returncode == 0 and ADDR["ns1"] in r.stdout

        self.wait_for("nsd", answers, proc=p, log="nsd")

    def start_nginx(self, sites, extra_ports=(8080,)):
        """nginx in inet on every address: HTTP on 80 (+extra_ports), HTTPS on
        443. sites: {server_name: {path: bytes}}; the first is the default
        server. Each site also answers /host with "host=<Host> sni=<SNI>"."""
        d = self.path("nginx")
        os.makedirs(f"{d}/logs")
        blocks = []
        for i, (name, files) in enumerate(sites.items()):
            root = f"{d}/www/{name}"
            os.makedirs(root)
            for rel, data in files.items():
                with open(f"{root}/{rel}", "wb") as f:
                    f.write(data)
            default = " default_server" if i == 0 else ""
            crt, key = self.ca[name]
            listens = "".join(f"    listen {p}{default};\n" for p in (80, *extra_ports))
            blocks.append(f"""  server {{
{listens}    listen 443 ssl{default};
    server_name {name};
    ssl_certificate {crt};
    ssl_certificate_key {key};
    root {root};
    location = /host {{
      default_type text/plain;
      return 200 "host=$host sni=$ssl_server_name\\n";
    }}
  }}
""")
        conf = f"""daemon off;
master_process on;
user root;
worker_processes 2;
pid {d}/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 2048; }}
http {{
  access_log {d}/logs/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  default_type application/octet-stream;
  keepalive_timeout 10;
  ssl_protocols TLSv1.2 TLSv1.3;
{''.join(blocks)}}}
"""
        self.nginx_conf = f"{d}/nginx.conf"
        with open(self.nginx_conf, "w") as f:
            f.write(conf)
        p = self.spawn("nginx", ["nginx", "-p", d, "-c", self.nginx_conf, "-e", f"{d}/logs/error.log"], ns=self.inet)
        self.wait_for("nginx", lambda: all(self.listening(self.inet, port) for port in (80, 443, *extra_ports)),
                      proc=p, log="nginx")

    def start_iperf3(self):
        p = self.spawn("iperf3", ["iperf3", "-s", "-p", str(IPERF_PORT), "--forceflush"], ns=self.inet)
        self.wait_for("iperf3", lambda: self.listening(self.inet, IPERF_PORT), proc=p, log="iperf3")

    def start_tools(self):
        p = self.spawn("tools", [sys.executable, os.path.abspath(__file__), "tools-server"], ns=self.inet)
        self.wait_for("tools server", lambda: all(self.listening(self.inet, port)
                                                  for port in (STREAM_PORT, RESET_PORT, HALFCLOSE_PORT)),
                      proc=p, log="tools")


    def start_abox_net(self, abox, policy_text, *args, link=None):
        """Starts `abox-net run` in the outside namespace with this policy,
        the link (default: a tap in the guest namespace; or e.g.
        ["--stream", PATH]), events to events.jsonl and `args`; waits
        for its 'ready' line (15 s) and drains its stdout from then on (a
        full pipe would stall it). Returns the Popen."""
        policy = self.path("policy.toml")
        with open(policy, "w") as f:
            f.write(policy_text)
        link = link or ["--netns", f"/run/netns/{self.guest}"]
        p = self.spawn("abox-net", [abox, "run", "--policy", policy, *link, "--events", self.path("events.jsonl"),
                                    *args], ns=self.outside, stdout=subprocess.PIPE)
        line = first_line(p, 15)
        if not line.startswith(b"ready"):
            how = f"exited {p.returncode}" if p.poll() is not None else "did not print 'ready' within 15 s"
            raise RuntimeError(f"abox-net run {how}; stdout {line!r}, stderr:\n{self.log_tail('abox-net')}")

        def drain():
            with open(self.path("abox-net.stdout"), "ab") as out:
                out.write(line)
                for chunk in iter(lambda: os.read(p.stdout.fileno(), 65536), b""):
                    out.write(chunk)

        threading.Thread(target=drain, daemon=True).start()
        return p


def run_suite(name, tag, tools, argv, cases, setup, run, modes=None, doc=""):
    """The main of an end-to-end suite. argv: the mode word (a path to
    abox-net, or a key of `modes`, e.g. {"--control": "control"}) plus
    `--keep` (keep the temp dir) and `--only WORD[,WORD]` (keeps, in place,
    the `cases` whose name holds a word). Checks root and `tools`, builds one
    Rig (`setup(rig, mode)`), runs `run(rig, mode, abox)` -> (passed,
    failed), always closes the rig, fails if anything is left behind, and
    prints the summary. Returns the exit status."""
    modes = modes or {}
    started = time.monotonic()
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    if "--only" in argv[:-1]:
        i = argv.index("--only")
        words = argv[i + 1].split(",")
        cases[:] = [fn for fn in cases if any(w in fn.__name__ for w in words)]
        del argv[i:i + 2]
    if len(argv) != 1:
        print(doc, file=sys.stderr)
        return 2
    mode = modes.get(argv[0], "abox")
    abox = os.path.abspath(argv[0]) if mode == "abox" else None
    if abox and not os.access(abox, os.X_OK):
        print(f"{name}: {abox} is not an executable")
        return 1
    if os.geteuid() != 0:
        print(f"{name}: needs root (namespaces)")
        return 1
    for tool in tools:
        if shutil.which(tool) is None:
            print(f"{name}: {tool} is missing (scripts/setup.sh installs it)")
            return 1
    passed = failed = 0
    rig = Rig(tag)
    try:
        rig.unwind_on_signals()
        setup(rig, mode)
        passed, failed = run(rig, mode, abox)
    except KeyboardInterrupt:
        print("interrupted: cleaning up")
        failed += 1
    except Exception as e:  # noqa: BLE001 - setup failed: report, clean up
        print(f"FAIL setup: {type(e).__name__}: {e}")
        failed += 1
    finally:
        rig.close(keep_dir=keep)
    return summarize(rig, keep, passed, failed, started)


def summarize(rig, keep, passed, failed, started=None):
    """After rig.close(): fails if anything was left behind, prints the
    summary line, and returns the suite's exit status."""
    if keep:
        print(f"(kept {rig.dir})")
    left = rig.leftovers()
    if left:
        failed += 1
        print(f"FAIL nothing_left_behind: {left}")
    took = f" ({time.monotonic() - started:.0f}s)" if started is not None else ""
    print(f"{passed} passed, {failed} failed{took}")
    return 0 if failed == 0 and passed > 0 else 1


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def netns_pids(ns):
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


# -- the data every stream uses -------------------------------------------------

_POOL = None
CHUNK = 1 << 20


def stream_chunks(nbytes):
    """Yields nbytes of random-looking data as memoryviews. Slices of an 8 MiB
    random pool at offsets that never repeat in step with the chunk size, so a
    lost, doubled or reordered segment changes the digest."""
    global _POOL
    if _POOL is None:
        _POOL = memoryview(os.urandom(8 << 20))
    i, left = 0, nbytes
    while left > 0:
        n = min(CHUNK, left)
        off = (i * 1048573 + i * i * 7) % (len(_POOL) - CHUNK)
        yield _POOL[off:off + n]
        left -= n
        i += 1


def stream_digest(nbytes):
    """The sha256 hex of stream_chunks(nbytes). Computed before sending, so
    the sender runs at full speed (a slow sender hides stalls that only come
    when the path is the bottleneck)."""
    h = hashlib.sha256()
    for chunk in stream_chunks(nbytes):
        h.update(chunk)
    return h.hexdigest()


def send_stream(s, nbytes):
    for chunk in stream_chunks(nbytes):
        s.sendall(chunk)


def recv_exact(s, n, h=None):
    """Reads exactly n bytes (hashing them into h if given, else returning
    them); raises EOFError at an early end."""
    got, parts = 0, []
    buf = bytearray(min(n, 1 << 20) or 1)
    view = memoryview(buf)
    while got < n:
        k = s.recv_into(view, min(len(buf), n - got))
        if k == 0:
            raise EOFError(f"EOF after {got} of {n} bytes")
        if h is not None:
            h.update(view[:k])
        else:
            parts.append(bytes(view[:k]))
        got += k
    return None if h is not None else b"".join(parts)


def pause_points(n):
    """Where a slow reader stops reading: a quarter of the way in, and where
    only a little is left. The second stop lets the sender finish while its
    data is still buffered on the way, so the path must resume forwarding
    with no new data arriving behind it (a lost wakeup shows up here)."""
    return sorted({n // 4, max(0, n - min(4 << 20, n // 8))})


def recv_slowly(s, n, h, pause_ms):
    """recv_exact(s, n, h), stopping pause_ms at each pause point."""
    got = 0
    for point in [*pause_points(n), n]:
        if point > got:
            recv_exact(s, point - got, h)
            got = point
        if got < n:
            time.sleep(pause_ms / 1000)


def recv_line(s, limit=256):
    line = b""
    while not line.endswith(b"\n"):
        b = s.recv(1)
        if not b:
            raise EOFError(f"EOF in a line: {line!r}")
        line += b
        if len(line) > limit:
            raise ValueError("line too long")
    return line.decode().strip()


# -- tools server (runs in inet) --------------------------------------------------

MAX_STREAM = 8 << 30
RESET_PROMISED = 16 << 20  # what the reset server says it will send
RESET_SENT = 256 << 10  # what it sends before the reset
HALFCLOSE_REPLY = 4 << 20


def _serve_stream(c):
    """'UP n [pause_ms]\\n' + n bytes -> 'sha256hex\\n' (with pause_ms, the
    server reads slowly: see pause_points). 'DOWN n\\n' -> n bytes + 'sha256hex\\n'.
    'CLOSE n\\n' -> n bytes of b"z", then the server closes at once (its FIN
    right behind, often in the same segment)."""
    words = recv_line(c).split()
    n = int(words[1])
    if not 0 <= n <= MAX_STREAM:
        return
    h = hashlib.sha256()
    if words[0] == "UP":
        pause_ms = min(int(words[2]), 5000) if len(words) > 2 else 0
        recv_slowly(c, n, h, pause_ms)
        c.sendall(h.hexdigest().encode() + b"\n")
    elif words[0] == "DOWN":
        digest = stream_digest(n)
        send_stream(c, n)
        c.sendall(digest.encode() + b"\n")
    elif words[0] == "CLOSE" and n <= 1 << 20:
        c.sendall(b"z" * n)


def _serve_reset(c):
    """Promises RESET_PROMISED bytes, sends RESET_SENT, then resets (SO_LINGER 0)."""
    c.sendall(f"LEN {RESET_PROMISED}\n".encode())
    for chunk in stream_chunks(RESET_SENT):
        c.sendall(chunk)
    time.sleep(0.5)  # let it drain, so the reset comes mid-stream, not mid-send
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _serve_halfclose(c):
    """Reads until the client's FIN, then answers
    'rx_len rx_sha tx_len tx_sha\\n' + tx_len bytes, then closes."""
    h, rx = hashlib.sha256(), 0
    buf = bytearray(1 << 16)
    while rx <= MAX_STREAM:
        k = c.recv_into(buf)
        if k == 0:
            break
        h.update(memoryview(buf)[:k])
        rx += k
    tx = b"".join(bytes(chunk) for chunk in stream_chunks(HALFCLOSE_REPLY))
    c.sendall(f"{rx} {h.hexdigest()} {len(tx)} {hashlib.sha256(tx).hexdigest()}\n".encode() + tx)
    c.shutdown(socket.SHUT_WR)


def _tools_conn(handler, c):
    try:
        c.settimeout(120)
        handler(c)
    except (OSError, EOFError, ValueError, IndexError):
        pass
    finally:
        c.close()


def _tools_listener(port, handler):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))  # every inet address: the port probes need that
    ls.listen(512)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=_tools_conn, args=(handler, c), daemon=True).start()


def tools_server():
    for port, handler in ((STREAM_PORT, _serve_stream), (RESET_PORT, _serve_reset),
                          (HALFCLOSE_PORT, _serve_halfclose)):
        threading.Thread(target=_tools_listener, args=(port, handler), daemon=True).start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


# -- DNS relay (the kernel-router stand-in's gateway resolver) ----------------------

def dns_relay(listen, lport, upstream, uport):
    """Relays DNS over UDP and TCP from listen:lport to upstream:uport, byte for
    byte. No filtering: it stands in for a gate that allows everything."""
    up = (upstream, int(uport))
    us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    us.bind((listen, int(lport)))

    def udp_one(data, peer):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            s.sendto(data, up)
            try:
                us.sendto(s.recv(65535), peer)
            except OSError:
                pass

    def udp_loop():
        while True:
            data, peer = us.recvfrom(65535)
            threading.Thread(target=udp_one, args=(data, peer), daemon=True).start()

    def tcp_one(c):
        try:
            c.settimeout(10)
            with socket.create_connection(up, timeout=5) as s:
                s.settimeout(10)
                for _ in range(100):  # one message per round; bounded
                    n = c.recv(2)
                    if len(n) < 2:
                        break
                    msg = recv_exact(c, struct.unpack(">H", n)[0])
                    s.sendall(n + msg)
                    rn = recv_exact(s, 2)
                    c.sendall(rn + recv_exact(s, struct.unpack(">H", rn)[0]))
        except (OSError, EOFError):
            pass
        finally:
            c.close()

    def tcp_loop():
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((listen, int(lport)))
        ls.listen(64)
        while True:
            c, _ = ls.accept()
            threading.Thread(target=tcp_one, args=(c,), daemon=True).start()

    threading.Thread(target=udp_loop, daemon=True).start()
    threading.Thread(target=tcp_loop, daemon=True).start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    # Block the stop signals in every thread so sigwait() gets them.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    if sys.argv[1:2] == ["tools-server"]:
        tools_server()
    elif sys.argv[1:2] == ["dns-relay"] and len(sys.argv) == 6:
        dns_relay(*sys.argv[2:6])
    else:
        print("usage: netns_rig.py tools-server | dns-relay LISTEN LPORT UPSTREAM UPORT", file=sys.stderr)
        sys.exit(2)
