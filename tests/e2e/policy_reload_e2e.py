#!/usr/bin/env python3
"""End-to-end test of a live policy reload in `abox-net run` (issue 22):
`abox-net reload SOCKET FILE` and SIGHUP, with real parts: a guest network
namespace behind abox-net's tap, nsd as the DNS upstream, nginx and the
tools server as the internet (netns_rig.py).

The guest holds two flows open across the reload: a stream to the tools
server (a name the new policy keeps) and an HTTP keep-alive connection to
nginx (a name the new policy revokes). Checked:
- an invalid file changes nothing: `abox-net reload` exits 1 naming
  file:line:column, the keep-alive connection still answers, no flow is cut;
- a valid reload: exits 0; the revoked name's connection is reset at once
  (the guest reads ECONNRESET), while the stream to the kept name carries on
  and ends byte for byte (sha256 on both ends); a later DNS question for the
  revoked name is REFUSED, one for the kept name answered; a new connection
  to the revoked name's address is refused; the events hold a deny with
  reason policy_revoked naming the name, and a policy event "reloaded";
  the stats count one reload and one flow revoked;
- SIGHUP rereads the policy file written in place (the revoked name comes
  back); a file renamed over the original is refused with a message saying
  to use `abox-net reload`, and changes nothing;
- egress budgets: reloaded with max_bytes_out = 1 MiB on the tools server's
  rule, a 10 MiB upload to it is cut near 1 MiB (the guest sees a reset, the
  `budget` event counts at most 1.5 MiB out), a new flow to it is refused,
  and the web name (no budget) is unaffected.

Usage: policy_reload_e2e.py PATH/TO/abox-net [--keep]
Every wait is bounded; everything the rig made is removed at the end.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

WEB, TOOLS = nr.fqdn("web"), nr.fqdn("tools")
WEB_ADDR, TOOLS_ADDR, NS_ADDR = nr.ADDR["web"], nr.ADDR["tools"], nr.ADDR["ns1"]
ZONE_RECORDS = [f"{short} IN A {addr}" for short, addr in nr.ADDR.items()]
STREAM_BYTES = 64 << 20  # half before the reloads, half after
INDEX = b"abox reload e2e\n"


BUDGET = 1 << 20
UPLOAD = 10 << 20


def policy(web_allowed, tools_extra=""):
    web = f"""
[[allow]]
names = ["{WEB}"]
ports = [80]
""" if web_allowed else ""
    return f"""# policy_reload_e2e.py: written by the test
[dns]
upstreams = ["{NS_ADDR}:53"]
timeout_ms = 2000
{web}
[[allow]]
names = ["{TOOLS}"]
ports = [{nr.STREAM_PORT}]
{tools_extra}"""


INVALID = policy(False) + "\n[[allow]]\nnames = [\"x.example.test\"]\nports = [70000]\n"


# -- the guest's client: `policy_reload_e2e.py --client DIR` ------------------------

def _wait_marker(d, name, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(d, name)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no marker {name}")
        time.sleep(0.02)


def _get(s):
    """One HTTP/1.1 request on a keep-alive connection; the body, or the
    name of the error that ended the connection."""
    try:
        s.sendall(f"GET /index.html HTTP/1.1\r\nHost: {WEB}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = s.recv(4096)
            if not b:
                return "EOF"
            head += b
        head, _, body = head.partition(b"\r\n\r\n")
        length = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
        while len(body) < length:
            b = s.recv(4096)
            if not b:
                return "EOF"
            body += b
        return body.decode()
    except OSError as e:
        return type(e).__name__


def client(d):
    out = {}
    ours = nr.stream_digest(STREAM_BYTES)
    chunks = list(nr.stream_chunks(STREAM_BYTES))
    half = len(chunks) // 2
    stream = socket.create_connection((socket.gethostbyname(TOOLS), nr.STREAM_PORT), timeout=10)
    stream.settimeout(30)
    stream.sendall(f"UP {STREAM_BYTES} 0\n".encode())
    for c in chunks[:half]:
        stream.sendall(c)
    web = socket.create_connection((socket.gethostbyname(WEB), 80), timeout=10)
    web.settimeout(5)
    out["get_before"] = _get(web)
    print("open", flush=True)
    _wait_marker(d, "invalid-done")
    out["get_after_invalid"] = _get(web)
    print("still", flush=True)
    _wait_marker(d, "reloaded")
    out["get_after_reload"] = _get(web)
    try:
        for c in chunks[half:]:
            stream.sendall(c)
        theirs = nr.recv_line(stream)
        out["stream_ok"] = theirs == ours
        out["stream_digest"] = [ours, theirs]
    except (OSError, EOFError) as e:
        out["stream_ok"] = False
        out["stream_error"] = f"{type(e).__name__}: {e}"
    stream.close()
    web.close()
    print(json.dumps(out), flush=True)
    return 0


def upload(nbytes):
    """Sends nbytes to the tools server's stream port; how many went before
    an error (the server answers its digest only when all came)."""
    nbytes, sent = int(nbytes), 0
    try:
        s = socket.create_connection((socket.gethostbyname(TOOLS), nr.STREAM_PORT), timeout=10)
        s.settimeout(10)
        s.sendall(f"UP {nbytes} 0\n".encode())
        for c in nr.stream_chunks(nbytes):
            s.sendall(c)
            sent += len(c)
        nr.recv_line(s)
        return {"sent": sent, "error": None}
    except (OSError, EOFError) as e:
        return {"sent": sent, "error": type(e).__name__}


# -- the test -------------------------------------------------------------------------

def events(rig):
    try:
        with open(rig.path("events.jsonl")) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def dig_rcode(rig, name):
    r = rig.run(["dig", "+time=2", "+tries=1", f"@{nr.GATEWAY}", name, "A"], ns=rig.guest, timeout=10)
    for ln in r.stdout.splitlines():
        if "status:" in ln:
            return ln.split("status:")[1].split(",")[0].strip()
    return f"no answer ({r.returncode})"


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


def setup(rig, _mode):
    rig.build_internet()
    rig.make_ca([WEB])
    rig.start_nsd(ZONE_RECORDS)
    rig.start_nginx({WEB: {"index.html": INDEX}})
    rig.start_tools()
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

    sock = rig.path("stats.sock")
    net = rig.start_abox_net(abox, policy(True), "--stats-socket", sock)
    policy_path = rig.path("policy.toml")
    d = rig.dir
    c = subprocess.Popen(["ip", "netns", "exec", rig.guest, sys.executable, os.path.abspath(__file__), "--client", d],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = nr.first_line(c, 60).decode()
        check("both flows open before the reloads", line.strip() == "open", f"client said {line!r}: {c.stderr.read().decode() if c.poll() is not None else ''}")

        # An invalid file changes nothing, and says where it is wrong.
        bad = rig.path("invalid.toml")
        with open(bad, "w") as f:
            f.write(INVALID)
        r = subprocess.run([abox, "reload", sock, bad], capture_output=True, text=True, timeout=10)
        bad_line = len(INVALID.splitlines())
        check("an invalid file is refused with exit 1 naming file:line:column",
              r.returncode == 1 and f"{bad}:{bad_line}:" in r.stderr and "nothing changed" in r.stderr,
              f"exit {r.returncode}, stderr {r.stderr!r}")
        open(os.path.join(d, "invalid-done"), "w").close()
        line = nr.first_line(c, 30).decode()
        check("the connection answers after the invalid file", line.strip() == "still", f"client said {line!r}")

        # The real reload: the web name is revoked.
        new = rig.path("reloaded.toml")
        with open(new, "w") as f:
            f.write(policy(False))
        t0 = time.monotonic()
        r = subprocess.run([abox, "reload", sock, new], capture_output=True, text=True, timeout=10)
        check("a valid reload exits 0 and says one TCP flow was revoked",
              r.returncode == 0 and "1 TCP" in r.stdout, f"exit {r.returncode}, {r.stdout!r} {r.stderr!r}")
        open(os.path.join(d, "reloaded"), "w").close()
        out, err = (b.decode() for b in c.communicate(timeout=120))
        result = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        check("the keep-alive GETs before worked", result.get("get_before") == INDEX.decode()
              and result.get("get_after_invalid") == INDEX.decode(), f"{result} {err[-500:]}")
        check("the revoked name's connection is reset", result.get("get_after_reload") == "ConnectionResetError",
              f"{result.get('get_after_reload')!r} ({time.monotonic() - t0:.1f}s)")
        check("the stream to the kept name ends byte for byte", result.get("stream_ok") is True, str(result))
    finally:
        if c.poll() is None:
            c.kill()
            c.wait()

    check("a DNS question for the revoked name is refused", dig_rcode(rig, WEB) == "REFUSED", dig_rcode(rig, WEB))
    check("a DNS question for the kept name is answered", dig_rcode(rig, TOOLS) == "NOERROR", dig_rcode(rig, TOOLS))
    r = rig.run(["curl", "-sS", "--max-time", "5", "-o", "/dev/null", f"http://{WEB_ADDR}/index.html"], ns=rig.guest,
                timeout=15)
    check("a new connection to the revoked name's address is refused", r.returncode == 7,
          f"curl exit {r.returncode}: {r.stderr.strip()}")
    ev = events(rig)
    revoked = [e for e in ev if e.get("kind") == "deny" and "policy_revoked" in e.get("reason", "")]
    check("the cut flow is logged as policy_revoked with its name and destination",
          len(revoked) == 1 and revoked[0].get("name") == WEB and revoked[0].get("dst") == f"{WEB_ADDR}:80",
          str(revoked))
    kinds = [e.get("reason") for e in ev if e.get("kind") == "policy"]
    check("policy events: the invalid reload refused, the valid one reloaded",
          kinds[:2] == ["reload refused: the policy is invalid", "reloaded"], str(kinds))
    st = stats(abox, sock)
    check("stats: one reload, one flow revoked, one answer forgotten",
          st.get("policy_reloads") == 1 and st.get("flows_revoked") == 1 and st.get("answers_forgotten") == 1,
          str({k: st.get(k) for k in ("policy_reloads", "flows_revoked", "answers_forgotten")}))

    # SIGHUP: the file written in place is read again.
    with open(policy_path, "w") as f:
        f.write(policy(True))
    net.send_signal(signal.SIGHUP)
    check("SIGHUP rereads the file written in place",
          wait_until(lambda: sum(1 for e in events(rig) if e.get("reason") == "reloaded") == 2)
          and dig_rcode(rig, WEB) == "NOERROR", str([e for e in events(rig) if e.get("kind") == "policy"]))
    r = rig.run(["curl", "-sS", "--max-time", "5", f"http://{WEB}/index.html"], ns=rig.guest, timeout=15)
    check("the name allowed again is reached", r.returncode == 0 and r.stdout == INDEX.decode(),
          f"curl exit {r.returncode}: {r.stderr.strip()}")
    # A file renamed over the original: refused, nothing changed.
    tmp = rig.path("policy.toml.new")
    with open(tmp, "w") as f:
        f.write(policy(False))
    os.rename(tmp, policy_path)
    net.send_signal(signal.SIGHUP)
    check("SIGHUP after a rename is refused and says to use abox-net reload",
          wait_until(lambda: any(e.get("kind") == "policy" and "cannot be read" in e.get("reason", "")
                                 and "abox-net reload" in e.get("error", "") for e in events(rig))),
          str([e for e in events(rig) if e.get("kind") == "policy"]))
    check("and changed nothing", dig_rcode(rig, WEB) == "NOERROR", dig_rcode(rig, WEB))

    # Egress budgets: 1 MiB out to the tools server per hour.
    budget = rig.path("budget.toml")
    with open(budget, "w") as f:
        f.write(policy(True, f"max_bytes_out = {BUDGET}\nper = \"1h\"\n"))
    r = subprocess.run([abox, "reload", sock, budget], capture_output=True, text=True, timeout=10)
    check("a policy with a budget is applied", r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
    r = rig.run([sys.executable, os.path.abspath(__file__), "--upload", str(UPLOAD)], ns=rig.guest, timeout=60)
    up = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    check("a 10 MiB upload past a 1 MiB budget is cut", up.get("error") in ("ConnectionResetError", "BrokenPipeError")
          and up.get("sent", UPLOAD) < UPLOAD, f"{up} {r.stderr[-300:]}")
    crossed = [e for e in events(rig) if e.get("kind") == "budget"]
    check("the budget event says it was crossed near 1 MiB",
          len(crossed) == 1 and BUDGET <= crossed[0].get("bytes_out", 0) <= BUDGET + (BUDGET >> 1), str(crossed))
    cut = [e for e in events(rig) if e.get("kind") == "deny" and e.get("reason", "").startswith("budget_cut")]
    check("the flow is logged as budget_cut", len(cut) == 1 and cut[0].get("name") == TOOLS, str(cut))
    r = rig.run([sys.executable, os.path.abspath(__file__), "--upload", "1000"], ns=rig.guest, timeout=60)
    up = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
    check("a new flow to the name is refused for the window", up.get("error") == "ConnectionRefusedError", str(up))
    r = rig.run(["curl", "-sS", "--max-time", "5", f"http://{WEB}/index.html"], ns=rig.guest, timeout=15)
    check("another name is unaffected", r.returncode == 0 and r.stdout == INDEX.decode(),
          f"curl exit {r.returncode}: {r.stderr.strip()}")
    st = stats(abox, sock)
    check("stats: the budget crossed, one flow cut, one refused",
          st.get("budget_crossed") == 1 and st.get("budget_cut") == 1 and st.get("budget_refused") == 1,
          str({k: st.get(k) for k in ("budget_crossed", "budget_cut", "budget_refused")}))
    check("abox-net is still running", net.poll() is None, f"exited {net.returncode}")
    return passed, failed


def main(argv):
    if argv[:1] == ["--client"]:
        return client(argv[1])
    if argv[:1] == ["--upload"]:
        print(json.dumps(upload(argv[1])))
        return 0
    return nr.run_suite("policy_reload_e2e", "pr", ("ip", "nsd", "nginx", "curl", "dig", "openssl"), argv, [],
                        setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
