#!/usr/bin/env python3
"""End-to-end test of abox-net's operating features: the sandbox, the stats
socket and `abox-net stats`, and --pcap. A guest namespace behind
`abox-net run`, a fake internet (nsd, nginx with a test CA) from netns_rig.py,
real clients (curl, dig) and real readers (tcpdump).

Usage:
  ops_e2e.py PATH/TO/abox-net [--keep]

What abox-net is held to here:
- run and dns are sandboxed by default: /proc/PID/status shows seccomp mode 2,
  no_new_privs and every capability set empty, and traffic still flows
  (DNS over UDP and TCP, HTTP, HTTPS) through the sandboxed process;
  --no-sandbox leaves it unconfined (a debugging switch);
- --stream: capabilities dropped while it waits for the VMM, the syscall
  filter on once the VMM has connected, frames from the stream link recorded
  and answered (ARP for the gateway), runt and empty records counted in the
  stats' link section;
- --stats-socket: a 0600 unix socket; `abox-net stats PATH --json` prints one
  JSON object whose counters match what the test did (frames, DNS queries and
  refusals, admitted and refused flows, memory); the flow gauges by state
  move with held-open connections, a silent one and a slow curl (open,
  peeking, closing), add up to tcp_flows, and fall back to 0 after close; the table has the same fields; SIGUSR1 prints the same fields; `abox-net stats` exits 2 on usage
  errors and 3 when nothing (or something that is not abox-net) answers;
  at start a stale socket file at PATH is replaced, a live one (another
  abox-net) or a regular file is refused with exit 3 and a message naming it;
- memory: after a burst of slow readers has gone, RSS comes back down (the
  trimmer gives back what glibc kept), under the sandbox, and the stats
  count the trims (in the ASan build only the heap in use is checked);
- --pcap: a 0600 file that tcpdump reads without complaint, holding exactly
  frames_in + frames_out packets (the counters at exit), with the guest's DNS
  query, its SYN and the HTTP answer in it and wall-clock timestamps;
  --pcap-max-bytes: the file stays under the cap, still reads cleanly, and
  the frames left out are counted.

Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process, namespace and file the test makes is
removed at the end, also on failure and on SIGINT/SIGTERM.
"""
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

WEB, SECRET = nr.fqdn("web"), nr.fqdn("secret")
WEB_ADDR, NS_ADDR = nr.ADDR["web"], nr.ADDR["ns1"]
TOKEN = os.urandom(8).hex()
INDEX = f"abox ops e2e {TOKEN}\n"
BLOB = os.urandom(256 << 10)
BIG = os.urandom(4 << 20)  # more than a flow holds (flow_buffer_bytes, 1 MiB)
# Less than a flow holds, and far more than a slow guest's socket takes at
# first (its receive buffer starts at 128 KiB): abox-net has it all from
# nginx at once and drains it to the guest for seconds.
DRAIN = os.urandom(768 << 10)
# MemoryTrimmer trims once RSS holds this much beyond the heap in use (its
# kMinSurplus), so after a burst RSS ends below heap + this.
KEPT_FREE_AT_MOST = 16 << 20
SLOW_READERS = 40
# Under AddressSanitizer (ctest sets ABOX_SANITIZED=1 for the ASan build)
# freed memory sits in ASan's quarantine, not in glibc's arenas: RSS after a
# burst is not held to anything there.
SANITIZED = os.environ.get("ABOX_SANITIZED") == "1"
CAP_BYTES = 3000  # --pcap-max-bytes for the cap case: a handful of frames

POLICY = f"""# ops_e2e.py: written by the test
[dns]
upstreams = ["{NS_ADDR}:53"]
timeout_ms = 2000

[[allow]]
names = ["{WEB}"]
ports = [80, 443]
"""
# Run in the guest: opens N keep-alive connections to ADDR:80, asks each for
# the index page and reads the answer (the flows are open, past the name
# check, and stay so for nginx's keepalive_timeout), and opens one more that
# sends nothing (held while abox-net peeks for a name, until peek_ms). Holds
# them until SIGTERM (60 s at most).
HOLDER = """
import signal, socket, sys, time
addr, host, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
conns = [socket.create_connection((addr, 80), timeout=10) for _ in range(n)]
for c in conns:
    c.sendall(f"GET / HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n".encode())
    c.recv(65536)
silent = socket.create_connection((addr, 80), timeout=10)
print("held", flush=True)
time.sleep(60)
"""
CAP_NAMES = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


class Ops:
    def __init__(self, rig, abox):
        self.rig = rig
        self.abox = abox
        self.policy = rig.path("policy.toml")
        with open(self.policy, "w") as f:
            f.write(POLICY)

    # -- processes ---------------------------------------------------------------

    def start(self, name, args, ready_prefix):
        """Starts abox-net ARGS in the outside namespace and waits (15 s at most)
        for its first stdout line, which must start with ready_prefix."""
        p = self.rig.spawn(name, [self.abox, *args], ns=self.rig.outside, stdout=subprocess.PIPE)
        line = nr.first_line(p, 15)
        if not line.startswith(ready_prefix):
            how = f"exited {p.poll()}" if p.poll() is not None else "printed no ready line within 15 s"
            raise RuntimeError(f"abox-net {args[0]} {how}; stdout {line!r}:\n{self.rig.log_tail(name)}")

        def drain():  # stdout must never fill up and stall abox-net
            for _ in iter(lambda: os.read(p.stdout.fileno(), 65536), b""):
                pass

        threading.Thread(target=drain, daemon=True).start()
        return p, line.decode().strip()

    def start_run(self, name, extra):
        return self.start(name, ["run", "--policy", self.policy, "--netns", f"/run/netns/{self.rig.guest}",
                                 "--events", self.rig.path(f"{name}.events"), *extra], b"ready")[0]

    def stop(self, p, name):
        """SIGTERM, bounded wait; returns the last counters line on stderr (the
        one printed at exit)."""
        p.terminate()
        p.wait(timeout=10)
        assert p.returncode == 0, f"{name} exited {p.returncode}"
        return last_counters(self.rig.path(f"{name}.log"))

    def stats(self, path, *extra):
        return subprocess.run([self.abox, "stats", path, *extra], capture_output=True, text=True, timeout=15)

    def stats_json(self, path):
        r = self.stats(path, "--json")
        assert r.returncode == 0, f"abox-net stats exited {r.returncode}: {r.stderr.strip()}"
        lines = r.stdout.splitlines()
        assert len(lines) == 1, f"--json printed {len(lines)} lines"
        return json.loads(lines[0])

    # -- the guest ---------------------------------------------------------------

    def curl(self, url, *extra):
        r = self.rig.run(["curl", "-sS", "--max-time", "10", *extra, url], ns=self.rig.guest, timeout=20,
                         text=False)
        assert r.returncode == 0, f"curl {url} exited {r.returncode}: {r.stderr.decode(errors='replace').strip()}"
        return r.stdout

    def dig(self, name, *extra):
        r = self.rig.run(["dig", f"@{nr.GATEWAY}", name, "+time=2", "+tries=1", *extra], ns=self.rig.guest,
                         timeout=10)
        m = re.search(r"status: (\w+)", r.stdout)
        return m.group(1) if m else f"no answer ({r.stdout.strip()[-200:]})"


def last_counters(log_path):
    found = None
    with open(log_path, errors="replace") as f:
        for line in f:
            if line.startswith("{") and '"time"' not in line:
                try:
                    found = json.loads(line)
                except ValueError:
                    pass
    assert found is not None, f"no counters line in {log_path}"
    return found


def proc_status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def assert_sandboxed(pid):
    st = proc_status(pid)
    assert st.get("Seccomp") == "2", f"Seccomp: {st.get('Seccomp')} (2 = filter)"
    assert st.get("NoNewPrivs") == "1", f"NoNewPrivs: {st.get('NoNewPrivs')}"
    held = {c: st.get(c) for c in CAP_NAMES if int(st.get(c, "1"), 16) != 0}
    assert not held, f"capabilities still held: {held}"


def packets(pcap, *extra):
    """tcpdump -r: (exit status, stdout lines, stderr)."""
    r = subprocess.run(["tcpdump", "-r", pcap, "-nn", "-tt", *extra], capture_output=True, text=True,
                       timeout=60, errors="replace")
    return r.returncode, r.stdout.splitlines(), r.stderr


# -- cases -----------------------------------------------------------------------------

def case_stats_cli_usage_and_errors(o):
    r = o.stats("--help")
    assert r.returncode == 0 and "usage: abox-net stats" in r.stdout, f"--help: {r.returncode} {r.stdout!r}"
    r = subprocess.run([o.abox, "stats"], capture_output=True, text=True, timeout=15)
    assert r.returncode == 2, f"no PATH: exit {r.returncode}"
    r = o.stats(o.rig.path("nothing-here.sock"))
    assert r.returncode == 3 and "no socket at" in r.stderr, f"missing socket: {r.returncode} {r.stderr!r}"
    # Something that answers, but not with counters.
    path = o.rig.path("impostor.sock")
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path)
    ls.listen(1)
    ls.settimeout(10)

    def answer():
        try:
            c, _ = ls.accept()
            c.sendall(b'{"frames_in": "many"}\n')
            c.close()
        except OSError:
            pass

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    r = o.stats(path)
    t.join(timeout=10)
    ls.close()
    assert r.returncode == 3 and "did not answer with counters" in r.stderr, f"impostor: {r.returncode} {r.stderr!r}"


def case_bad_pcap_path_is_a_startup_error(o):
    p = o.rig.spawn("abox-net-badpcap", [o.abox, "run", "--policy", o.policy, "--netns",
                                         f"/run/netns/{o.rig.guest}", "--pcap", o.rig.path("no/such/dir/x.pcap")],
                    ns=o.rig.outside)
    rc = p.wait(timeout=20)
    assert rc == 3, f"exit {rc}"
    assert "--pcap" in o.rig.log_tail("abox-net-badpcap"), o.rig.log_tail("abox-net-badpcap")


class RunCases:
    """One abox-net run with --pcap and --stats-socket; the cases share it."""

    def __init__(self, o):
        self.o = o
        self.pcap = o.rig.path("guest.pcap")
        self.sock = o.rig.path("stats.sock")
        self.started = time.time()
        self.p = o.start_run("abox-net", ["--pcap", self.pcap, "--stats-socket", self.sock])
        self.final = None

    def sandboxed(self):
        assert_sandboxed(self.p.pid)
        with open(self.o.rig.path("abox-net.events")) as f:
            starts = [json.loads(x) for x in f if '"start"' in x]
        assert starts and starts[0].get("sandbox") is True, f"start event: {starts}"

    def traffic_through_the_sandbox(self):
        o = self.o
        assert o.dig(WEB) == "NOERROR"
        assert o.dig(WEB, "+tcp") == "NOERROR"
        denied = o.dig(SECRET)
        assert denied in ("REFUSED", "NXDOMAIN"), f"denied name: {denied}"
        got = o.curl(f"http://{WEB}/").decode()
        assert got == INDEX, f"HTTP body {got!r}"
        got = o.curl(f"https://{WEB}/", "--cacert", o.rig.ca["ca"]).decode()
        assert got == INDEX, f"HTTPS body {got!r}"
        got = o.curl(f"http://{WEB}/blob.bin")
        assert got == BLOB, f"blob: {len(got)} bytes, wrong content"
        # A refused flow: an address no name was answered with.
        r = o.rig.run(["curl", "-sS", "--max-time", "5", f"http://{nr.ADDR['secret']}/"], ns=o.rig.guest, timeout=15)
        assert r.returncode != 0, "a flow to an unanswered address went through"

    def stats_socket(self):
        o = self.o
        mode = stat.S_IMODE(os.lstat(self.sock).st_mode)
        assert mode == 0o600, f"socket mode {oct(mode)}"
        s = o.stats_json(self.sock)
        assert list(s)[0] == "frames_in", f"first field {list(s)[0]}"
        assert all(isinstance(v, int) and v >= 0 for v in s.values()), "every value is a count"
        checks = {
            "frames_in": s["frames_in"] > 20,
            "frames_out": s["frames_out"] > 20,
            "dns_queries": s["dns_queries"] >= 3,
            "dns_denied": s["dns_denied"] >= 1,
            "dns_tcp_accepted": s["dns_tcp_accepted"] >= 1,
            "tcp_admitted": s["tcp_admitted"] >= 3,
            "tcp_refused": s["tcp_refused"] >= 1,
            "memory_rss_bytes": s["memory_rss_bytes"] > 1 << 20,
            "memory_heap_in_use_bytes": s["memory_heap_in_use_bytes"] > 0,
            "pcap_frames": s["pcap_frames"] > 0 and s["pcap_frames_over_cap"] == 0,
            "link_frames_dropped_runt": s.get("link_frames_dropped_runt") == 0,  # the tap's section
        }
        wrong = [k for k, ok in checks.items() if not ok]
        assert not wrong, f"counters off: {({k: s.get(k) for k in wrong})}"
        # The table: the same fields, in the same order, one per line.
        r = o.stats(self.sock)
        assert r.returncode == 0, r.stderr
        rows = [line.split() for line in r.stdout.splitlines()]
        assert [row[0] for row in rows] == list(s), "the table's fields differ from the JSON's"
        assert all(len(row) == 2 and row[1].isdigit() for row in rows), "a row is not 'name value'"
        # Counters move: another query shows.
        before = s["dns_queries"]
        o.dig(WEB)
        assert o.stats_json(self.sock)["dns_queries"] > before, "dns_queries did not move"

    def flow_gauges_move_and_fall_back(self):
        """Live flows by state: held-open connections, a silent one and a slow
        curl show in the gauges while they last (open, peeking, closing); every TCP flow gauge is back to 0 once
        they are closed. The tcp_flows_* gauges add up to tcp_flows."""
        o = self.o
        names = ("tcp_flows_peeking", "tcp_flows_connecting", "tcp_flows_open", "tcp_flows_closing",
                 "tcp_flows_brokered")

        def gauges():
            s = o.stats_json(self.sock)
            missing = [k for k in (*names, "tcp_half_open", "tcp_time_wait", "udp_flows_open") if k not in s]
            assert not missing, f"no gauge {missing}"
            assert sum(s[k] for k in names) == s["tcp_flows"], f"gauges {[s[k] for k in names]} != {s['tcp_flows']}"
            assert s["udp_flows_open"] == s["udp_flows"], s
            return s

        assert o.dig(WEB) == "NOERROR"  # an answer admits the flows below
        assert gauges()["tcp_flows"] == 0, "flows left from the earlier cases"
        # Held keep-alive connections (open), one silent one (peeking), and a
        # rate-limited download with "Connection: close": abox-net takes the
        # whole file from nginx at once (it fits the flow's buffer) and nginx
        # closes, so that flow is closing (host EOF, draining to a slow guest)
        # for most of its life: 768 KiB at 64 KiB/s, about 10 s. Each state
        # must be seen at some point (they need not all be at once).
        held = 3
        holder = o.rig.spawn("holder", ["python3", "-c", HOLDER, WEB_ADDR, WEB, str(held)], ns=o.rig.guest)
        curl = o.rig.spawn("slow-curl", ["curl", "-sS", "--max-time", "30", "--limit-rate", "64k", "-H",
                                         "Connection: close", "-o", "/dev/null", f"http://{WEB}/drain.bin"], ns=o.rig.guest)
        want = {"tcp_flows_open": held, "tcp_flows_peeking": 1, "tcp_flows_closing": 1}
        most = dict.fromkeys(want, 0)
        try:
            for _ in range(80):  # 8 s: inside nginx's keepalive_timeout (10 s)
                seen = gauges()
                for k in want:
                    most[k] = max(most[k], seen[k])
                if all(most[k] >= want[k] for k in want):
                    break
                time.sleep(0.1)
            assert all(most[k] >= want[k] for k in want), f"the most seen {most}, wanted {want}"
        finally:
            holder.terminate()
            holder.wait(timeout=10)
            curl.terminate()
            curl.wait(timeout=10)
        seen = None
        for _ in range(100):  # 10 s
            seen = gauges()
            if seen["tcp_flows"] == 0:
                break
            time.sleep(0.1)
        assert all(seen[k] == 0 for k in names) and seen["tcp_flows"] == 0, f"gauges after close: {seen}"
        rows = dict(line.split() for line in o.stats(self.sock).stdout.splitlines())
        assert rows.get("tcp_flows_open") == "0", "the table does not show tcp_flows_open"

    def sigusr1_prints_the_same_fields(self):
        log = self.o.rig.path("abox-net.log")
        os.kill(self.p.pid, signal.SIGUSR1)
        line = None
        for _ in range(60):  # 3 s
            try:
                line = last_counters(log)
                break
            except AssertionError:
                time.sleep(0.05)
        assert line is not None, "no counters on stderr after SIGUSR1"
        assert list(line) == list(self.o.stats_json(self.sock)), "SIGUSR1 and the socket print different fields"

    def pcap_is_read_by_tcpdump(self):
        self.final = self.o.stop(self.p, "abox-net")
        c = self.final
        mode = stat.S_IMODE(os.stat(self.pcap).st_mode)
        assert mode == 0o600, f"pcap mode {oct(mode)}"
        rc, lines, err = packets(self.pcap)
        assert rc == 0, f"tcpdump exited {rc}: {err.strip()}"
        assert "truncated" not in err.lower(), err
        assert len(lines) == c["frames_in"] + c["frames_out"] == c["pcap_frames"], (
            f"{len(lines)} packets in the file; frames_in {c['frames_in']} + frames_out {c['frames_out']}; "
            f"pcap_frames {c['pcap_frames']}")
        text = "\n".join(lines)
        want = {
            "the guest's DNS query": f"{nr.GUEST_ADDR}.",
            "to the gateway's port 53": f"> {nr.GATEWAY}.53:",
            "the guest's SYN to the web server": f"> {WEB_ADDR}.80: Flags [S]",
            "the guest's TLS SYN": f"> {WEB_ADDR}.443: Flags [S]",
        }
        missing = [k for k, v in want.items() if v not in text]
        assert not missing, f"not in the capture: {missing}"
        first = float(lines[0].split()[0])
        assert self.started - 60 < first < time.time() + 60, f"first timestamp {first} is not wall-clock time"
        rc, alines, _ = packets(self.pcap, "-A", "port", "80")
        body = "\n".join(alines)
        assert "HTTP/1.1 200 OK" in body and TOKEN in body, "the HTTP answer is not in the capture"

    def leaves_the_socket_file(self):
        # Documented: the sandbox forbids unlink(), so the socket file stays;
        # nothing answers there any more, and the next start replaces it.
        r = self.o.stats(self.sock)
        assert r.returncode == 3, f"stats after exit: {r.returncode}"


def case_pcap_cap(o):
    pcap, sock = o.rig.path("capped.pcap"), o.rig.path("stats.sock")  # the old socket file is replaced
    p = o.start_run("abox-net-cap", ["--pcap", pcap, "--pcap-max-bytes", str(CAP_BYTES), "--stats-socket", sock])
    o.curl(f"http://{WEB}/blob.bin")
    s = o.stats_json(sock)
    final = o.stop(p, "abox-net-cap")
    size = os.path.getsize(pcap)
    assert 24 < size <= CAP_BYTES, f"file size {size}, cap {CAP_BYTES}"
    rc, lines, err = packets(pcap)
    assert rc == 0 and "truncated" not in err.lower(), f"tcpdump: {rc} {err.strip()}"
    assert len(lines) == final["pcap_frames"], f"{len(lines)} packets, pcap_frames {final['pcap_frames']}"
    assert s["pcap_frames_over_cap"] > 0 and final["pcap_frames_over_cap"] > 0, "frames over the cap not counted"
    assert final["pcap_frames"] + final["pcap_frames_over_cap"] == final["frames_in"] + final["frames_out"], (
        f"recorded {final['pcap_frames']} + over cap {final['pcap_frames_over_cap']} != "
        f"{final['frames_in']} in + {final['frames_out']} out")


def case_memory_comes_back_after_a_burst(o):
    """SLOW_READERS downloads that read 1 KiB/s make abox-net hold up to 1 MiB
    each; once they are gone the heap in use falls, and RSS must follow
    (glibc keeps freed memory; the trimmer gives it back within seconds)."""
    sock = o.rig.path("burst-stats.sock")
    p = o.start_run("abox-net-burst", ["--stats-socket", sock])
    curls = []
    try:
        assert o.dig(WEB) == "NOERROR"
        base = o.stats_json(sock)
        for i in range(SLOW_READERS):
            curls.append(o.rig.spawn(f"slow-reader-{i}", ["curl", "-sS", "--max-time", "60", "--limit-rate", "1k",
                                                          "-o", "/dev/null", f"http://{WEB}/big.bin"], ns=o.rig.guest))
        peak = base
        for _ in range(100):  # 20 s
            peak = o.stats_json(sock)
            if peak["memory_heap_in_use_bytes"] >= base["memory_heap_in_use_bytes"] + (32 << 20):
                break
            time.sleep(0.2)
        grown = peak["memory_heap_in_use_bytes"] - base["memory_heap_in_use_bytes"]
        # Well past the trimmer's threshold (16 MiB held free), so that
        # without it RSS would stay far above where it must come back to.
        assert grown >= 24 << 20, f"the burst held only {grown} bytes more: {peak}"
    finally:
        for c in curls:
            c.kill()
        for c in curls:
            c.wait(timeout=10)
    after = None
    for _ in range(100):  # 30 s: the trimmer checks every 5 s
        after = o.stats_json(sock)
        if after["tcp_flows"] == 0 and (SANITIZED or after["memory_rss_bytes"] - after["memory_heap_in_use_bytes"] <
                                        KEPT_FREE_AT_MOST):
            break
        time.sleep(0.3)
    mib = {k: round(after[k] / (1 << 20), 1) for k in ("memory_rss_bytes", "memory_heap_in_use_bytes", "memory_trimmed_bytes")}
    print(f"     burst: RSS {peak['memory_rss_bytes'] / (1 << 20):.1f} MiB at the peak "
          f"(heap in use {peak['memory_heap_in_use_bytes'] / (1 << 20):.1f}); after: {mib}", flush=True)
    assert after["tcp_flows"] == 0, f"flows left: {after['tcp_flows']}"
    assert after["memory_heap_in_use_bytes"] < base["memory_heap_in_use_bytes"] + (4 << 20), "the heap did not fall"
    if SANITIZED:  # ASan's allocator keeps freed memory in its quarantine: RSS cannot fall
        print("     (ASan build: RSS not checked)", flush=True)
        o.stop(p, "abox-net-burst")
        return
    # Memory comes back, by the trimmer or by glibc itself (what was freed at
    # the top of the heap): what RSS holds beyond the heap in use ends under
    # the trimmer's threshold.
    surplus = after["memory_rss_bytes"] - after["memory_heap_in_use_bytes"]
    assert surplus < KEPT_FREE_AT_MOST, (
        f"RSS {after['memory_rss_bytes']} holds {surplus} bytes beyond the heap in use "
        f"(peak RSS {peak['memory_rss_bytes']}, trims {after['memory_trims']}): {after}")
    print(f"     trims {after['memory_trims']}", flush=True)
    assert_sandboxed(p.pid)  # malloc_trim ran under the syscall filter
    o.stop(p, "abox-net-burst")


def case_stream_link_sandboxed_and_recorded(o):
    """--stream: capabilities dropped while waiting for the VMM, the syscall
    filter on once it has connected (and the socket file is gone), frames
    recorded from the stream link like from a tap."""
    path, pcap, sock = o.rig.path("vm.sock"), o.rig.path("stream.pcap"), o.rig.path("stream-stats.sock")
    p, _ = o.start("abox-net-stream", ["run", "--policy", o.policy, "--stream", path, "--pcap", pcap,
                                       "--stats-socket", sock], b"ready stream=")
    st = proc_status(p.pid)
    assert st.get("NoNewPrivs") == "1" and all(int(st[c], 16) == 0 for c in CAP_NAMES), f"before the VMM: {st}"
    assert o.stats_json(sock) == {}, "counters before the VMM connected"
    vmm = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    vmm.settimeout(5)
    vmm.connect(path)
    # The VMM's first frame: ARP, who has the gateway, from the guest's address.
    guest_mac = bytes.fromhex("525400123456")
    arp = (b"\xff" * 6 + guest_mac + b"\x08\x06" + bytes.fromhex("0001080006040001") + guest_mac
           + socket.inet_aton(nr.GUEST_ADDR) + b"\x00" * 6 + socket.inet_aton(nr.GATEWAY))
    vmm.sendall(len(arp).to_bytes(4, "big") + arp)
    reply = None
    for _ in range(20):  # a few frames at most before the ARP reply
        n = int.from_bytes(nr.recv_exact(vmm, 4), "big")
        frame = nr.recv_exact(vmm, n)
        if frame[12:14] == b"\x08\x06" and frame[20:22] == b"\x00\x02":
            reply = frame
            break
    assert reply is not None and reply[28:32] == socket.inet_aton(nr.GATEWAY), "no ARP reply for the gateway"
    assert_sandboxed(p.pid)
    assert not os.path.exists(path), "the stream socket file is still there after the VMM connected"
    s = o.stats_json(sock)
    assert s["frames_in"] >= 1 and s["frames_out"] >= 1, s
    assert s["link_frames_dropped_runt"] == 0 and s["link_output_queued_bytes"] == 0, s
    # A runt record (6 bytes, no Ethernet header) and an empty one: dropped
    # by the link, each counted in the link section.
    vmm.sendall((6).to_bytes(4, "big") + b"\x01" * 6 + (0).to_bytes(4, "big"))
    for _ in range(50):  # 5 s
        s = o.stats_json(sock)
        if s["link_frames_dropped_runt"] == 1 and s["link_frames_dropped_zero_length"] == 1:
            break
        time.sleep(0.1)
    assert s["link_frames_dropped_runt"] == 1 and s["link_frames_dropped_zero_length"] == 1, s
    vmm.close()  # the VMM goes away: abox-net exits 0 with its counters
    p.wait(timeout=10)
    assert p.returncode == 0, f"exit {p.returncode}"
    final = last_counters(o.rig.path("abox-net-stream.log"))
    rc, lines, err = packets(pcap)
    assert rc == 0, err
    assert len(lines) == final["frames_in"] + final["frames_out"], f"{len(lines)} packets, counters {final}"
    text = "\n".join(lines)
    assert f"Request who-has {nr.GATEWAY} tell {nr.GUEST_ADDR}" in text and f"Reply {nr.GATEWAY} is-at" in text, text


def case_dns_mode_sandboxed_with_stats(o):
    sock = o.rig.path("dns-stats.sock")
    p, line = o.start("abox-net-dns", ["dns", "--policy", o.policy, "--listen", "127.0.0.1:0",
                                       "--stats-socket", sock], b"listening on ")
    assert_sandboxed(p.pid)
    port = line.rsplit(":", 1)[1]
    for extra in ([], ["+tcp"]):
        r = o.rig.run(["dig", "@127.0.0.1", "-p", port, WEB, "+short", "+time=2", "+tries=1", *extra],
                      ns=o.rig.outside, timeout=10)
        assert r.stdout.strip() == WEB_ADDR, f"dig {extra}: {r.stdout.strip()!r}"
    s = o.stats_json(sock)
    assert list(s)[0] == "queries" and s["queries"] >= 2 and s["answered"] >= 2 and s["tcp_accepted"] >= 1, s
    assert s["memory_rss_bytes"] > 0
    # The trimmer is armed in dns mode too: its counters are reported.
    assert "memory_trims" in s and "memory_trimmed_bytes" in s, s
    o.stop(p, "abox-net-dns")


def case_stats_socket_path_stale_live_or_file(o):
    """--stats-socket PATH at start: a stale socket file (the one an earlier
    abox-net left: the sandbox forbids unlink at exit) is replaced; a socket a
    running abox-net answers on is refused with exit 3 and an error naming
    PATH, and the running one keeps serving; a regular file is refused with
    exit 3 and kept."""
    sock = o.rig.path("dns-reuse.sock")
    args = ["dns", "--policy", o.policy, "--listen", "127.0.0.1:0", "--stats-socket", sock]
    p, _ = o.start("abox-net-dns-a", args, b"listening on ")
    o.stop(p, "abox-net-dns-a")
    assert stat.S_ISSOCK(os.lstat(sock).st_mode), "the first run left no socket file"
    assert o.stats(sock).returncode == 3, "something still answers on the old socket"
    p, _ = o.start("abox-net-dns-b", args, b"listening on ")  # the stale file is replaced
    try:
        assert o.stats_json(sock)["queries"] == 0
        q = o.rig.spawn("abox-net-dns-c", [o.abox, *args], ns=o.rig.outside)
        rc = q.wait(timeout=20)
        err = o.rig.log_tail("abox-net-dns-c")
        assert rc == 3, f"a second abox-net on a live stats socket exited {rc}: {err}"
        assert f"already listening on {sock}" in err, err
        assert "queries" in o.stats_json(sock), "the running abox-net lost its stats socket"
    finally:
        o.stop(p, "abox-net-dns-b")
    plain = o.rig.path("not-a-socket")
    with open(plain, "w") as f:
        f.write("precious\n")
    q = o.rig.spawn("abox-net-dns-d", [o.abox, *args[:-1], plain], ns=o.rig.outside)
    rc = q.wait(timeout=20)
    err = o.rig.log_tail("abox-net-dns-d")
    assert rc == 3, f"--stats-socket on a regular file exited {rc}: {err}"
    assert f"{plain} exists and is not a socket" in err, err
    with open(plain) as f:
        assert f.read() == "precious\n", "the file was changed"


def case_proc_pid_guest_ends_with_its_process(o):
    """--netns /proc/PID/ns/net, sandboxed: abox-net configures that process's
    namespace, and stops by itself soon after the process exits (a pidfd
    taken at start answers once the dropped capabilities forbid looking
    into /proc/PID, and a reused PID would not count)."""
    holder = o.rig.spawn("netns-holder", ["unshare", "--net", "sleep", "120"])
    path = f"/proc/{holder.pid}/ns/net"
    o.rig.wait_for("the holder's own namespace", lambda: os.readlink(path) != os.readlink("/proc/self/ns/net"),
                   timeout=5, proc=holder)
    p, line = o.start("abox-net-procpid", ["run", "--policy", o.policy, "--netns", path,
                                           "--events", o.rig.path("abox-net-procpid.events")], b"ready")
    assert_sandboxed(p.pid)
    r = subprocess.run(["nsenter", f"--net={path}", "ip", "-4", "-o", "addr", "show", "eth0"],
                       capture_output=True, text=True, timeout=10)
    assert nr.GUEST_ADDR in r.stdout, f"eth0 in the holder's namespace: {r.stdout.strip()} {r.stderr.strip()}"
    holder.kill()
    holder.wait(timeout=5)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("abox-net still ran 10 s after the namespace's process exited") from None
    assert p.returncode == 0, f"abox-net exited {p.returncode}:\n{o.rig.log_tail('abox-net-procpid')}"
    with open(o.rig.path("abox-net-procpid.events")) as f:
        assert "the guest namespace went away" in f.read()


def case_no_sandbox_is_unconfined(o):
    p, _ = o.start("abox-net-nosandbox", ["dns", "--policy", o.policy, "--listen", "127.0.0.1:0", "--no-sandbox"],
                   b"listening on ")
    st = proc_status(p.pid)
    assert st.get("Seccomp") == "0", f"Seccomp: {st.get('Seccomp')}"
    o.stop(p, "abox-net-nosandbox")


def main(argv):
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    abox = os.path.abspath(argv[0])
    if not os.access(abox, os.X_OK):
        print(f"ops_e2e: {abox} is not an executable")
        return 1
    if os.geteuid() != 0:
        print("ops_e2e: needs root (namespaces)")
        return 1
    for tool in ("ip", "nsd", "nginx", "curl", "dig", "tcpdump", "openssl", "ss"):
        if shutil.which(tool) is None:
            print(f"ops_e2e: {tool} is missing (scripts/setup.sh installs it)")
            return 1
    passed = failed = 0

    def report(name, fn):
        nonlocal passed, failed
        try:
            fn()
            passed += 1
            print(f"ok   {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)

    rig = nr.Rig("op")
    try:
        rig.unwind_on_signals()
        rig.build_internet()
        rig.make_ca([WEB])
        rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()])
        rig.start_nginx({WEB: {"index.html": INDEX.encode(), "blob.bin": BLOB, "big.bin": BIG, "drain.bin": DRAIN}})
        rig.add_guest()
        o = Ops(rig, abox)
        report("stats_cli_usage_and_errors", lambda: case_stats_cli_usage_and_errors(o))
        report("bad_pcap_path_is_a_startup_error", lambda: case_bad_pcap_path_is_a_startup_error(o))
        run = None

        def start_run():
            nonlocal run
            run = RunCases(o)

        report("run_starts_with_pcap_and_stats_socket", start_run)
        if run is not None:
            for name in ("sandboxed", "traffic_through_the_sandbox", "stats_socket", "flow_gauges_move_and_fall_back",
                         "sigusr1_prints_the_same_fields",
                         "pcap_is_read_by_tcpdump", "leaves_the_socket_file"):
                report(name, getattr(run, name))
        report("pcap_cap", lambda: case_pcap_cap(o))
        report("proc_pid_guest_ends_with_its_process", lambda: case_proc_pid_guest_ends_with_its_process(o))
        report("memory_comes_back_after_a_burst", lambda: case_memory_comes_back_after_a_burst(o))
        report("stream_link_sandboxed_and_recorded", lambda: case_stream_link_sandboxed_and_recorded(o))
        report("dns_mode_sandboxed_with_stats", lambda: case_dns_mode_sandboxed_with_stats(o))
        report("stats_socket_path_stale_live_or_file", lambda: case_stats_socket_path_stale_live_or_file(o))
        report("no_sandbox_is_unconfined", lambda: case_no_sandbox_is_unconfined(o))
        if failed:
            for name in ("abox-net", "abox-net-cap", "abox-net-dns"):
                tail = rig.log_tail(name, 15)
                if tail:
                    print(f"--- {name} stderr (tail) ---\n{tail}", end="")
    except KeyboardInterrupt:
        print("interrupted: cleaning up")
        failed += 1
    except Exception as e:  # noqa: BLE001 - setup failed: report, clean up
        print(f"FAIL setup: {type(e).__name__}: {e}")
        failed += 1
    finally:
        rig.close(keep_dir=keep)
    return nr.summarize(rig, keep, passed, failed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
