#!/usr/bin/env python3
"""End-to-end test of the DNS gate: `abox-net dns` between real clients (dig,
drill, raw sockets) and a real authoritative server (nsd) on loopback.

The upstream zone holds allowed names, a name in each reserved range, a long
CNAME chain, answers too large for plain UDP and too large for any UDP, and a
name the policy does not allow (to prove the gate never asks for it). A second
gate whose upstream never answers covers timeouts.

Usage: dns_gate_e2e.py PATH/TO/abox-net
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process started is stopped at the end.
"""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ABOX_NET = sys.argv[1] if len(sys.argv) > 1 else "build/netstack/abox-net"
PUBLIC = "93.184.215.14"  # only ever data in answers: nothing connects to it

REBINDING = {  # name -> (type, address) that must never reach the guest
    "rb-loopback": ("A", "127.0.0.1"),
    "rb-private10": ("A", "10.1.2.3"),
    "rb-private172": ("A", "172.16.0.1"),
    "rb-private192": ("A", "192.168.1.1"),
    "rb-metadata": ("A", "169.254.169.254"),
    "rb-linklocal": ("A", "169.254.1.1"),
    "rb-cgnat": ("A", "100.64.0.1"),
    "rb-zero": ("A", "0.0.0.0"),
    "rb-multicast": ("A", "224.0.0.1"),
    "rb-v6loopback": ("AAAA", "::1"),
    "rb-mapped": ("AAAA", "::ffff:10.0.0.1"),
    "rb-nat64": ("AAAA", "64:ff9b::a00:1"),
    "rb-ula": ("AAAA", "fd00::1"),
    "rb-v6linklocal": ("AAAA", "fe80::1"),
}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))  # the same port must be free for TCP too
    return port


class Rig:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="abox-dns-e2e-")
        self.procs = []

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.time() + 5
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def start_nsd(self):
        port = free_port()
        lines = [
            "$ORIGIN test.", "$TTL 300",
            "@ IN SOA ns1.test. host.test. 1 3600 600 86400 30", "@ IN NS ns1.test.",
            "ns1 IN A 192.0.2.53",
            f"allowed.ok IN A {PUBLIC}", "allowed.ok IN AAAA 2606:4700::1111",
            f"mixed.ok IN A {PUBLIC}", "mixed.ok IN A 10.0.0.1", "mixed.ok IN A 127.0.0.1",
            f"secret IN A {PUBLIC}",
            "ttl.ok 86400 IN A 93.184.215.16", "shortttl.ok 1 IN A 93.184.215.17",
        ]
        for name, (rtype, addr) in REBINDING.items():
            lines.append(f"{name}.ok IN {rtype} {addr}")
        for i in range(1, 10):
            lines.append(f"c{i}.ok IN CNAME c{i + 1}.ok")
        lines.append(f"c10.ok IN A {PUBLIC}")
        for i in range(1, 61):  # about 1.3 KB: over 512, under 4096
            lines.append(f"big.ok IN A 93.184.216.{i}")
        for i in range(1, 301):  # about 5 KB: over any UDP size we use
            lines.append(f"huge.ok IN A 93.184.{217 + i // 250}.{i % 250 + 1}")
        with open(self.path("test.zone"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(self.path("nsd.conf"), "w") as f:
            f.write(f"""server:
  server-count: 1
  ip-address: 127.0.0.1@{port}
  do-ip6: no
  username: ""
  chroot: ""
  zonesdir: "{self.dir}"
  database: ""
  zonelistfile: "{self.dir}/zone.list"
  xfrdfile: "{self.dir}/xfrd.state"
  xfrdir: "{self.dir}"
  pidfile: "{self.dir}/nsd.pid"
  logfile: "{self.dir}/nsd.log"
  verbosity: 0
remote-control:
  control-enable: no
zone:
  name: test
  zonefile: test.zone
""")
        p = subprocess.Popen(["nsd", "-d", "-c", self.path("nsd.conf")], stdout=subprocess.DEVNULL,
                             stderr=open(self.path("nsd.stderr"), "w"))
        self.procs.append(p)
        for _ in range(100):  # up to 5 s for nsd to answer
            if dig(port, "ns1.test", extra=["+time=1", "+tries=1"]).returncode == 0:
                return port
            time.sleep(0.05)
        raise RuntimeError("nsd did not start: " + open(self.path("nsd.stderr")).read())

    def start_gate(self, name, policy_text):
        policy = self.path(f"{name}.toml")
        with open(policy, "w") as f:
            f.write(policy_text)
        events = self.path(f"{name}.events")
        stderr = open(self.path(f"{name}.stderr"), "w")
        p = subprocess.Popen([ABOX_NET, "dns", "--policy", policy, "--listen", "127.0.0.1:0", "--events", events,
                              "--instance", name], stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.procs.append(p)
        line = p.stdout.readline()  # blocks until ready or exit
        if not line.startswith("listening on "):
            raise RuntimeError(f"abox-net dns did not start: {line!r} " + open(self.path(f"{name}.stderr")).read())
        port = int(line.strip().rsplit(":", 1)[1])
        return Gate(p, port, events, self.path(f"{name}.stderr"))


class Gate:
    def __init__(self, proc, port, events, stderr):
        self.proc, self.port, self.events_path, self.stderr_path = proc, port, events, stderr

    def events(self):
        try:
            with open(self.events_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def counters(self):
        """Asks for counters with SIGUSR1 and reads the JSON line it prints."""
        before = open(self.stderr_path).read().count("\n")
        self.proc.send_signal(signal.SIGUSR1)
        for _ in range(100):
            lines = open(self.stderr_path).read().splitlines()
            if len(lines) > before:
                for line in reversed(lines):
                    if line.startswith("{"):
                        return json.loads(line)
            time.sleep(0.02)
        raise RuntimeError("no counters from abox-net")


def dig(port, name, qtype="A", extra=()):
    return subprocess.run(["dig", "@127.0.0.1", "-p", str(port), name, qtype, "+time=3", "+tries=1", *extra],
                          capture_output=True, text=True, timeout=20)


def answers(out, rtype=None):
    """Records of the answer section as (name, type, data)."""
    recs, on = [], False
    for line in out.splitlines():
        if line.startswith(";; ANSWER SECTION"):
            on = True
            continue
        if on:
            if not line.strip() or line.startswith(";;"):
                break
            parts = line.split()
            if len(parts) >= 5 and (rtype is None or parts[3] == rtype):
                recs.append((parts[0], parts[3], parts[4]))
    return recs


def status(out):
    for line in out.splitlines():
        if "status:" in line:
            return line.split("status:")[1].split(",")[0].strip()
    return None


def flags(out):
    for line in out.splitlines():
        if line.startswith(";; flags:"):
            return line.split(";")[2].split(":")[1].split()
    return []


def raw_udp(port, payload, wait=1.0):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(wait)
        s.sendto(payload, ("127.0.0.1", port))
        try:
            return s.recv(65535)
        except socket.timeout:
            return None


def query_bytes(qid, labels, qtype=1, qdcount=1, flags_word=0x0100):
    body = b"".join(bytes([len(l)]) + l for l in labels) + b"\x00" + struct.pack(">HH", qtype, 1)
    return struct.pack(">HHHHHH", qid, flags_word, qdcount, 0, 0, 0) + body


CASES = []


def case(fn):
    CASES.append(fn)
    return fn


@case
def allowed_name_over_udp_and_tcp(g, _):
    for extra in ([], ["+tcp"]):
        out = dig(g.port, "allowed.ok.test", extra=extra).stdout
        assert status(out) == "NOERROR", out
        assert answers(out, "A") == [("allowed.ok.test.", "A", PUBLIC)], out
    out = dig(g.port, "allowed.ok.test", "AAAA").stdout
    assert answers(out, "AAAA") == [("allowed.ok.test.", "AAAA", "2606:4700::1111")], out
    # EDNS is answered in kind: an OPT record only for a query that had one.
    assert "OPT PSEUDOSECTION" in out, out
    out = dig(g.port, "allowed.ok.test", extra=["+noedns"]).stdout
    assert "OPT PSEUDOSECTION" not in out and PUBLIC in out, out


@case
def drill_over_udp_and_tcp(g, _):
    for extra in ([], ["-t"]):
        out = subprocess.run(["drill", *extra, "-p", str(g.port), "allowed.ok.test", "@127.0.0.1"],
                             capture_output=True, text=True, timeout=20).stdout
        assert "rcode: NOERROR" in out and PUBLIC in out, out


@case
def denied_name_is_refused_without_asking_upstream(g, _):
    before = g.counters()["forwarded"]
    for extra in ([], ["+tcp"]):
        out = dig(g.port, "secret.test", extra=extra).stdout
        assert status(out) == "REFUSED", out
        assert answers(out) == [], out
    assert g.counters()["forwarded"] == before, "a denied name was asked upstream"
    denies = [e for e in g.events() if e["kind"] == "deny" and e.get("name") == "secret.test"]
    assert len(denies) == 2, denies


@case
def name_tricks(g, _):
    # Case mixing and a trailing dot are the same allowed name; the guest's
    # spelling comes back (resolvers using 0x20 check it).
    out = dig(g.port, "AlLoWeD.Ok.TeSt.").stdout
    assert status(out) == "NOERROR" and PUBLIC in out, out
    assert "AlLoWeD.Ok.TeSt." in out.split(";; ANSWER SECTION")[0], out
    # A name that only looks allowed is not.
    for name in ("allowed.ok.test.evil.example", "okXtest", "ok.test.evil"):
        assert status(dig(g.port, name).stdout) == "REFUSED", name
    # An escaped dot inside a label is not two labels.
    out = dig(g.port, "allowed\\.ok.test").stdout
    assert status(out) == "REFUSED", out


@case
def every_rebinding_target_is_removed_and_logged(g, _):
    for name, (rtype, addr) in REBINDING.items():
        out = dig(g.port, f"{name}.ok.test", rtype).stdout
        assert status(out) == "NOERROR", out
        assert answers(out, rtype) == [], f"{name}: {addr} reached the guest\n{out}"
    logged = {e["address"] for e in g.events() if e["kind"] == "rebinding"}
    for name, (_, addr) in REBINDING.items():
        canon = socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, addr)) if ":" in addr else addr
        assert any(canon == a or addr == a for a in logged), f"{addr} not logged: {logged}"


@case
def mixed_answer_keeps_only_public_addresses(g, _):
    out = dig(g.port, "mixed.ok.test").stdout
    assert answers(out, "A") == [("mixed.ok.test.", "A", PUBLIC)], out


@case
def long_cname_chain_is_kept(g, _):
    out = dig(g.port, "c1.ok.test").stdout
    recs = answers(out)
    assert [r[1] for r in recs] == ["CNAME"] * 9 + ["A"], out
    assert recs[-1][2] == PUBLIC, out


@case
def ttls_are_clamped(g, _):
    out = dig(g.port, "ttl.ok.test").stdout
    ttl = int(out.split(";; ANSWER SECTION:")[1].split()[1])
    assert ttl <= 600, out  # max_ttl in the policy
    out = dig(g.port, "shortttl.ok.test").stdout
    ttl = int(out.split(";; ANSWER SECTION:")[1].split()[1])
    assert ttl >= 5, out  # min_ttl


@case
def large_answer_truncates_for_plain_udp_and_tcp_retry_works(g, _):
    out = dig(g.port, "big.ok.test", extra=["+noedns", "+ignore"]).stdout
    assert "tc" in flags(out), out
    assert answers(out) == [], out
    out = dig(g.port, "big.ok.test", extra=["+noedns"]).stdout  # dig retries over TCP on TC
    assert len(answers(out, "A")) == 60, out
    out = dig(g.port, "big.ok.test", extra=["+bufsize=4096"]).stdout
    assert len(answers(out, "A")) == 60, out


@case
def answer_too_large_for_udp_is_fetched_upstream_over_tcp(g, _):
    before = g.counters()["tcp_retries"]
    out = dig(g.port, "huge.ok.test", extra=["+tcp"]).stdout
    assert status(out) == "NOERROR", out
    assert len(answers(out, "A")) == 300, out
    assert g.counters()["tcp_retries"] == before + 1


@case
def https_and_any_are_not_forwarded(g, _):
    out = dig(g.port, "allowed.ok.test", "HTTPS").stdout
    assert status(out) == "NOERROR" and answers(out) == [], out
    out = dig(g.port, "allowed.ok.test", "ANY").stdout
    assert status(out) == "NOTIMP", out
    out = dig(g.port, "ok.test", "AXFR", extra=["+tcp"]).stdout
    assert "Transfer failed" in out or "REFUSED" in out, out


@case
def repeated_questions_come_from_the_cache(g, _):
    dig(g.port, "c5.ok.test")
    before = g.counters()
    for _ in range(5):
        assert PUBLIC in dig(g.port, "c5.ok.test").stdout
    after = g.counters()
    assert after["forwarded"] == before["forwarded"], (before, after)
    assert after["cache_hits"] >= before["cache_hits"] + 5, (before, after)


@case
def malformed_messages_are_answered_formerr_or_dropped(g, _):
    port = g.port
    assert raw_udp(port, b"\x01", wait=0.3) is None  # no ID: dropped
    cases = {
        "two questions": query_bytes(0x1111, [b"allowed", b"ok", b"test"], qdcount=2),
        "label of 64": query_bytes(0x2222, [b"a" * 64, b"test"]),
        "name over 253": query_bytes(0x3333, [b"a" * 63] * 4 + [b"test"]),
        "compression loop": struct.pack(">HHHHHH", 0x4444, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",
        "truncated question": query_bytes(0x5555, [b"allowed", b"ok", b"test"])[:-3],
    }
    for what, payload in cases.items():
        reply = raw_udp(port, payload)
        assert reply is not None, f"{what}: no answer"
        qid, fl = struct.unpack(">HH", reply[:4])
        assert qid == struct.unpack(">H", payload[:2])[0] and fl & 0x0F == 1, f"{what}: {reply!r}"
    # A response sent to the gate gets nothing back (no ping-pong).
    assert raw_udp(port, query_bytes(0x6666, [b"allowed", b"ok", b"test"], flags_word=0x8100), wait=0.3) is None
    # Over TCP, the same garbage does not break the connection's framing.
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        bad = cases["two questions"]
        good = query_bytes(0x7777, [b"allowed", b"ok", b"test"])
        s.sendall(struct.pack(">H", len(bad)) + bad + struct.pack(">H", len(good)) + good)
        got = b""
        replies = []
        deadline = time.time() + 5
        while len(replies) < 2 and time.time() < deadline:
            chunk = s.recv(65535)
            if not chunk:
                break
            got += chunk
            while len(got) >= 2 and len(got) >= 2 + struct.unpack(">H", got[:2])[0]:
                n = struct.unpack(">H", got[:2])[0]
                replies.append(got[2:2 + n])
                got = got[2 + n:]
        assert len(replies) == 2, replies
        assert struct.unpack(">H", replies[0][:2])[0] == 0x1111 and replies[0][3] & 0x0F == 1
        assert struct.unpack(">H", replies[1][:2])[0] == 0x7777 and replies[1][3] & 0x0F == 0
    assert g.counters()["malformed"] >= len(cases) + 2
    # Everything else kept working.
    assert PUBLIC in dig(g.port, "allowed.ok.test").stdout


@case
def silent_upstream_gives_servfail_and_the_gate_lives_on(_, rig):
    blackhole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    blackhole.bind(("127.0.0.1", 0))  # bound, never read: queries vanish
    try:
        port = blackhole.getsockname()[1]
        g2 = rig.start_gate("silent", f"""[dns]
upstreams = ["127.0.0.1:{port}"]
timeout_ms = 200
attempts = 2
[[allow]]
names = ["*.test"]
ports = [443]
""")
        start = time.time()
        out = dig(g2.port, "allowed.ok.test", extra=["+time=5"]).stdout
        took = time.time() - start
        assert status(out) == "SERVFAIL", out
        assert took < 4, took  # 2 attempts x 200 ms, not the client's own timeout
        assert any(e["kind"] == "dns" and e.get("verdict") == "servfail" for e in g2.events())
        assert g2.counters()["upstream_timeouts"] == 2
        assert status(dig(g2.port, "secret.example").stdout) == "REFUSED"
    finally:
        blackhole.close()


def main():
    for tool in ("nsd", "dig", "drill"):
        if shutil.which(tool) is None:
            print(f"dns_gate_e2e: {tool} is missing (scripts/setup.sh installs it)")
            return 1
    rig = Rig()
    passed = failed = 0
    try:
        upstream = rig.start_nsd()
        gate = rig.start_gate("gate", f"""[dns]
upstreams = ["127.0.0.1:{upstream}"]
min_ttl = 5
max_ttl = 600
timeout_ms = 2000
[[allow]]
names = ["ok.test", "*.ok.test"]
ports = [443]
""")
        for fn in CASES:
            try:
                fn(gate, rig)
                passed += 1
                print(f"ok   {fn.__name__}")
            except Exception as e:  # noqa: BLE001 - report and go on
                failed += 1
                print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}")
        if gate.proc.poll() is not None:
            failed += 1
            print("FAIL abox-net exited during the run")
    finally:
        rig.close()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
