#!/usr/bin/env python3
"""End-to-end test of published ports (issue 22, "Inbound ports"):
`abox-net run --publish`, with real parts: a guest network namespace behind
abox-net's tap (netns_rig.py), servers in the guest (python's http.server,
the rig's tools server, a UDP echo), curl and sockets on the host's loopback
(the namespace abox-net runs in).

Checked:
- curl on 127.0.0.1:HOST_PORT gets the guest's http.server page, and a
  5 MiB file whose sha256 matches; 5 MiB up and 5 MiB down through the
  tools server in the guest, digests on both ends;
- the listening socket is on 127.0.0.1 only (ss), the start event names
  the published ports;
- never a way out: a guest server that, on a published connection, tries
  the gateway's side of it from a new socket, the gateway's copy of the
  host port, and writes a request for the fake internet's web server into
  the connection: every new connection is refused, the request reaches the
  host client verbatim and nothing else (nginx's access log stays empty),
  and no flow is admitted;
- a published port with nothing listening in the guest: the host's
  connection ends at once, counted as inbound_refused_guest;
- a flood of 500 connections (bounded: 60 s) with --publish-max-connections
  16: at most 16 live, the rest accepted and closed at once, counted and
  logged (inbound_refused with the reason); after the flood a connection
  works;
- UDP: two host peers each get their own echo back from the guest;
- the events inbound_accepted and inbound_closed (with byte counts), the
  stats counters, and usage errors for bad --publish values.

Usage: publish_e2e.py PATH/TO/abox-net [--keep]
Every wait is bounded; everything the rig made is removed at the end.
"""
import hashlib
import json
import os
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

WEB = nr.fqdn("web")
NS_ADDR, WEB_ADDR = nr.ADDR["ns1"], nr.ADDR["web"]
ZONE_RECORDS = [f"{short} IN A {addr}" for short, addr in nr.ADDR.items()]
HTTP_HOST, HTTP_GUEST = 18080, 8000
TOOLS_HOST = 19000  # -> the tools server's stream port in the guest
ESCAPE_HOST, ESCAPE_GUEST = 18081, 8001
CLOSED_HOST, CLOSED_GUEST = 18082, 8002  # nothing listens in the guest
UDP_HOST, UDP_GUEST = 15353, 5353
MAX_CONNECTIONS = 16
FLOOD = 500
BIG = 5 << 20
INDEX = b"abox publish e2e\n"


def policy():
    # Nothing the test reaches is allowed out: a published port needs no [[allow]].
    return f"""# publish_e2e.py: written by the test
[dns]
upstreams = ["{NS_ADDR}:53"]
timeout_ms = 2000

[[allow]]
names = ["{nr.fqdn("nothing")}"]
ports = [443]
"""


# -- guest-side servers -------------------------------------------------------------

def escape_server(port):
    """On each connection: tries to reach out past it, then writes what it
    found (JSON) and a request for the web server into the connection."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(8)
    for _ in range(4):  # bounded: the test makes one connection
        c, peer = ls.accept()
        found = {"peer": list(peer)}

        def try_connect(addr, p):
            try:
                with socket.create_connection((addr, p), timeout=3):
                    return "connected"
            except OSError as e:
                return type(e).__name__

        # The gateway's side of this very connection, from a new socket.
        found["gateway_side"] = try_connect(peer[0], peer[1])
        # The published host port, on the gateway.
        found["gateway_host_port"] = try_connect(peer[0], ESCAPE_HOST)
        # The web server, which the policy does not allow.
        found["web"] = try_connect(WEB_ADDR, 80)
        # A UDP datagram to the gateway's side of the connection's port.
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b"out?", (peer[0], peer[1]))
        u.close()
        c.sendall(json.dumps(found).encode() + b"\n")
        # Bytes meant for somewhere else, on the published connection.
        c.sendall(f"GET /index.html HTTP/1.1\r\nHost: {WEB}\r\n\r\n".encode())
        c.shutdown(socket.SHUT_WR)
        c.recv(1)
        c.close()


def udp_echo(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", port))
    while True:
        data, peer = s.recvfrom(65535)
        s.sendto(b"echo " + data, peer)


# -- the test -------------------------------------------------------------------------

def events(rig):
    try:
        with open(rig.path("events.jsonl")) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def stats(abox, sock):
    r = subprocess.run([abox, "stats", "--json", sock], capture_output=True, text=True, timeout=10)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def wait_until(fn, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.05)
    return False


def host_run(rig, cmd, timeout=30):
    """Runs cmd in the namespace abox-net runs in (the "host")."""
    return rig.run(cmd, ns=rig.outside, timeout=timeout)


def in_outside(rig, name, *args):
    """Runs the client `name` (HOST_CLIENTS) in the namespace abox-net runs
    in (the host's loopback, where the published ports listen): {"value": its
    result} or {"error": why}."""
    try:
        r = rig.run([sys.executable, os.path.abspath(__file__), "--host-client", name, *map(str, args)],
                    ns=rig.outside, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-500:]}"}


def host_client(name, args):
    try:
        return {"value": HOST_CLIENTS[name](*(int(a) for a in args))}
    except Exception as e:  # noqa: BLE001 - reported by the check
        return {"error": f"{type(e).__name__}: {e}"}


def stream_up(n):
    with socket.create_connection(("127.0.0.1", TOOLS_HOST), timeout=10) as s:
        s.settimeout(30)
        s.sendall(f"UP {n}\n".encode())
        nr.send_stream(s, n)
        return nr.recv_line(s) == nr.stream_digest(n)


def stream_down(n):
    with socket.create_connection(("127.0.0.1", TOOLS_HOST), timeout=10) as s:
        s.settimeout(30)
        s.sendall(f"DOWN {n}\n".encode())
        h = hashlib.sha256()
        nr.recv_exact(s, n, h)
        return nr.recv_line(s) == h.hexdigest()


def escape_client():
    with socket.create_connection(("127.0.0.1", ESCAPE_HOST), timeout=10) as s:
        s.settimeout(30)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        line, _, rest = data.partition(b"\n")
        return json.loads(line), rest.decode()


def closed_client():
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", CLOSED_HOST), timeout=10) as s:
            s.settimeout(15)
            b = s.recv(1)
            return {"got": b.decode(), "s": time.monotonic() - t0}
    except OSError as e:
        return {"error": type(e).__name__, "s": time.monotonic() - t0}


def flood():
    """FLOOD connections held open at once; how many were closed on us within
    a few seconds, and how many are still open (live) then."""
    socks, deadline = [], time.monotonic() + 60
    for _ in range(FLOOD):
        if time.monotonic() > deadline:
            break
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", TOOLS_HOST))
        except OSError:
            s.close()
            continue
        socks.append(s)
    time.sleep(2)  # let abox-net accept and refuse what it will
    closed = live = 0
    for s in socks:
        s.setblocking(False)
        try:
            b = s.recv(1)
            closed += b == b""
            live += b != b""
        except BlockingIOError:
            live += 1  # open and silent: the tools server waits for a line
        except OSError:
            closed += 1  # reset
    for s in socks:
        s.close()
    return {"made": len(socks), "closed": closed, "live": live}


def udp_round_trip():
    out = []
    for i in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(5)
        s.sendto(f"peer {i}".encode(), ("127.0.0.1", UDP_HOST))
        try:
            out.append(s.recv(65535).decode())
        except OSError as e:
            out.append(type(e).__name__)
        s.close()
    return out


HOST_CLIENTS = {"stream_up": stream_up, "stream_down": stream_down, "escape": escape_client,
                "closed": closed_client, "flood": flood, "udp": udp_round_trip}


def setup(rig, _mode):
    rig.build_internet()
    rig.make_ca([WEB])
    rig.start_nsd(ZONE_RECORDS)
    rig.start_nginx({WEB: {"index.html": INDEX}})
    rig.add_guest()


def run(rig, _mode, abox):
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {name}")
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    # Usage errors first: nothing starts.
    for bad in ("0:80", "8080:65536", "8080::80", "localhost:8080:80", "8080:80/sctp"):
        r = subprocess.run([abox, "run", "--policy", "/nonexistent", "--netns", "x", "--publish", bad],
                           capture_output=True, text=True, timeout=10)
        check(f"--publish {bad} is a usage error", r.returncode == 2 and "--publish" in r.stderr,
              f"exit {r.returncode}: {r.stderr.strip()}")
    r = subprocess.run([abox, "run", "--policy", "/nonexistent", "--netns", "x", "--publish", "8080:80",
                        "--publish", "127.0.0.1:8080:81"], capture_output=True, text=True, timeout=10)
    check("the same host port twice is a usage error", r.returncode == 2 and "already published" in r.stderr,
          f"exit {r.returncode}: {r.stderr.strip()}")

    www = rig.path("www")
    os.makedirs(www)
    with open(f"{www}/index.html", "wb") as f:
        f.write(INDEX)
    big = b"".join(bytes(c) for c in nr.stream_chunks(BIG))
    with open(f"{www}/big.bin", "wb") as f:
        f.write(big)

    sock = rig.path("stats.sock")
    # ABOX_NET_IO=syscalls (ctest's e2e.publish_syscalls): the other I/O path.
    net = rig.start_abox_net(abox, policy(), "--stats-socket", sock, "--io", os.environ.get("ABOX_NET_IO", "ring"),
                             "--publish", f"{HTTP_HOST}:{HTTP_GUEST}",
                             "--publish", f"127.0.0.1:{TOOLS_HOST}:{nr.STREAM_PORT}",
                             "--publish", f"{ESCAPE_HOST}:{ESCAPE_GUEST}",
                             "--publish", f"{CLOSED_HOST}:{CLOSED_GUEST}",
                             "--publish", f"{UDP_HOST}:{UDP_GUEST}/udp",
                             "--publish-max-connections", str(MAX_CONNECTIONS))
    me = os.path.abspath(__file__)
    p = rig.spawn("http.server", [sys.executable, "-m", "http.server", str(HTTP_GUEST), "--bind", nr.GUEST_ADDR,
                                  "--directory", www], ns=rig.guest)
    rig.wait_for("http.server", lambda: rig.listening(rig.guest, HTTP_GUEST), proc=p, log="http.server")
    p = rig.spawn("tools", [sys.executable, os.path.join(os.path.dirname(me), "netns_rig.py"), "tools-server"],
                  ns=rig.guest)
    rig.wait_for("tools server", lambda: rig.listening(rig.guest, nr.STREAM_PORT), proc=p, log="tools")
    p = rig.spawn("escape", [sys.executable, me, "--escape-server", str(ESCAPE_GUEST)], ns=rig.guest)
    rig.wait_for("escape server", lambda: rig.listening(rig.guest, ESCAPE_GUEST), proc=p, log="escape")
    p = rig.spawn("udp-echo", [sys.executable, me, "--udp-echo", str(UDP_GUEST)], ns=rig.guest)
    rig.wait_for("udp echo", lambda: rig.listening(rig.guest, UDP_GUEST, "u"), proc=p, log="udp-echo")

    ss = host_run(rig, ["ss", "-Hltn", f"sport = :{HTTP_HOST}"]).stdout.split()
    check("the published port listens on 127.0.0.1 only", f"127.0.0.1:{HTTP_HOST}" in ss, str(ss))
    start = [e for e in events(rig) if e.get("kind") == "start"]
    check("the start event names the published ports",
          start and f"127.0.0.1:{HTTP_HOST}:{HTTP_GUEST}" in start[0].get("publish", "")
          and f"127.0.0.1:{UDP_HOST}:{UDP_GUEST}/udp" in start[0].get("publish", ""), str(start))

    r = host_run(rig, ["curl", "-sS", "--max-time", "10", f"http://127.0.0.1:{HTTP_HOST}/index.html"])
    check("curl on the host's loopback gets the guest's page", r.returncode == 0 and r.stdout == INDEX.decode(),
          f"curl exit {r.returncode}: {r.stdout!r} {r.stderr.strip()}")
    r = host_run(rig, ["sh", "-c", f"curl -sS --max-time 30 http://127.0.0.1:{HTTP_HOST}/big.bin | sha256sum"],
                 timeout=40)
    check("a 5 MiB download through curl matches its digest",
          r.returncode == 0 and r.stdout.split()[:1] == [hashlib.sha256(big).hexdigest()], r.stdout + r.stderr)
    got = in_outside(rig, "stream_up", BIG)
    check("5 MiB up to the guest, the same digest on both ends", got.get("value") is True, str(got))
    got = in_outside(rig, "stream_down", BIG)
    check("5 MiB down from the guest, the same digest on both ends", got.get("value") is True, str(got))

    # Never a way out.
    got = in_outside(rig, "escape")
    found, rest = got.get("value", ({}, ""))
    check("the guest sees the connection come from the gateway", found.get("peer", [""])[0] == nr.GATEWAY,
          str(got))
    check("the gateway's side of the connection refuses a new connection",
          found.get("gateway_side") == "ConnectionRefusedError", str(found))
    check("the published host port is not reachable on the gateway",
          found.get("gateway_host_port") == "ConnectionRefusedError", str(found))
    check("the web server stays out of reach", found.get("web") in ("ConnectionRefusedError", "TimeoutError"),
          str(found))
    check("the guest's bytes on the published connection reach only the host client",
          rest.startswith("GET /index.html") and f"Host: {WEB}" in rest, repr(rest))
    access = open(os.path.join(rig.dir, "nginx", "logs", "access.log")).read()
    check("nothing reached the fake internet's web server", access == "", access[-300:])
    admitted = [e for e in events(rig) if e.get("kind") == "admit"]
    check("no flow out was admitted", admitted == [], str(admitted[:3]))

    got = in_outside(rig, "closed")
    check("a published port with nothing listening in the guest closes the host's connection at once",
          "value" in got and got["value"].get("s", 99) < 5 and got["value"].get("got", "") == "", str(got))

    got = in_outside(rig, "udp")
    check("UDP: two host peers each get their own echo from the guest",
          got.get("value") == ["echo peer 0", "echo peer 1"], str(got))

    before = stats(abox, sock)
    t0 = time.monotonic()
    got = in_outside(rig, "flood")
    fl = got.get("value", {})
    check(f"a flood of {FLOOD} connections ends within 60 s", "value" in got and time.monotonic() - t0 < 60,
          str(got))
    check(f"at most {MAX_CONNECTIONS} of the flood stay live, the rest are closed at once",
          fl.get("made") == FLOOD and fl.get("live", 999) <= MAX_CONNECTIONS
          and fl.get("closed", 0) >= FLOOD - MAX_CONNECTIONS, str(fl))
    after = stats(abox, sock)
    refused = after.get("inbound_refused_limit", 0) - before.get("inbound_refused_limit", 0)
    check("the refused connections are counted", refused >= FLOOD - MAX_CONNECTIONS,
          f"inbound_refused_limit grew by {refused}")
    ev = events(rig)
    limit = [e for e in ev if e.get("kind") == "inbound_refused" and "limit" in e.get("reason", "")]
    check("and logged with the reason", len(limit) > 0 and limit[0].get("published", "").endswith(
        f":{TOOLS_HOST}:{nr.STREAM_PORT}"), str(limit[:2]))
    check("a connection after the flood works", wait_until(
        lambda: in_outside(rig, "stream_down", 1 << 20).get("value") is True, 20), "")

    ev = events(rig)
    accepted = [e for e in ev if e.get("kind") == "inbound_accepted"]
    closed = [e for e in ev if e.get("kind") == "inbound_closed" and e.get("proto") == "tcp"]
    check("inbound_accepted events name the port and the peer",
          accepted and accepted[0].get("published", "").startswith("127.0.0.1:")
          and accepted[0].get("peer", "").startswith("127.0.0.1:"), str(accepted[:2]))
    check("inbound_closed events count the bytes each way",
          any(e.get("bytes_to_guest", 0) >= BIG for e in closed)
          and any(e.get("bytes_from_guest", 0) >= BIG for e in closed), str(closed[:4]))
    guest_refused = [e for e in ev if e.get("kind") == "inbound_refused" and "guest" in e.get("reason", "")]
    check("the closed guest port is logged as refused by the guest", len(guest_refused) == 1, str(guest_refused))
    st = stats(abox, sock)
    check("stats: accepted, refused at the limit, refused by the guest",
          st.get("inbound_accepted", 0) >= 6 and st.get("inbound_refused_limit", 0) >= FLOOD - MAX_CONNECTIONS
          and st.get("inbound_refused_guest") == 1,
          str({k: st.get(k) for k in ("inbound_accepted", "inbound_refused_limit", "inbound_refused_guest")}))
    check("abox-net is still running", net.poll() is None, f"exited {net.returncode}")
    # Its published ports, live flows and UDP sessions go with it, cleanly.
    net.terminate()
    try:
        rc = net.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = "still running 10 s after SIGTERM"
    check("abox-net exits 0 on SIGTERM", rc == 0, f"{rc}: {rig.log_tail('abox-net', 5)}")
    return passed, failed


def main(argv):
    if argv[:1] == ["--escape-server"]:
        escape_server(int(argv[1]))
        return 0
    if argv[:1] == ["--host-client"]:
        print(json.dumps(host_client(argv[1], argv[2:])))
        return 0
    if argv[:1] == ["--udp-echo"]:
        udp_echo(int(argv[1]))
        return 0
    return nr.run_suite("publish_e2e", "pb", ("ip", "nsd", "nginx", "curl", "ss"), argv, [], setup, run,
                        doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
