#!/usr/bin/env python3
"""Dual-stack clients behind `abox-net run --ipv6 on` (issue 21): Python
(`requests`, or urllib where requests is not installed for this interpreter)
and Node's `fetch` (skipped, saying so, where node is not installed) in the
guest namespace reach an allowed name that has both an A and an AAAA answer,
and still reach a name whose AAAA points to an address the host has no route
to, over IPv4 and quickly.

The rig is ipv6_flows_e2e.py's (imported, not copied): netns_rig's fake
internet with an IPv6 /64 and server addresses, nsd, nginx on IPv4 and IPv6,
the guest configured by the kernel's own SLAAC from abox-net's router
advertisement, its resolver the DNS gate on 10.0.2.2. Which family a request
took is read from nginx's access log (abox-net's outside address: 45.33.250.1
for IPv4, OUTSIDE_LINK6 for IPv6), each request tagged with its own query
string.

What glibc does, asserted as it really is: the guest's only IPv6 address is
in the instance's ULA /64, and RFC 6724's default policy table (glibc's
without /etc/gai.conf) gives a ULA source label 13 and a global destination
label 1; rule 5 (prefer matching label) then sorts the global AAAA after the
A, and both clients try IPv4 first. So:
  - default table: the dual-stack name is reached over IPv4 by both clients;
  - with ipv6_flows_e2e.GAI_CONF (the ULA labelled as global, as a guest with
    a global IPv6 address would sort), IPv6 comes first: both clients reach
    the dual-stack name over IPv6;
  - with that table and an AAAA the host has no route to (abox-net refuses
    the SYN at once: no route, a "deny" event), both clients fall back to
    IPv4 within FALLBACK_S seconds: Python by trying getaddrinfo's next
    address (requests/urllib3 and urllib walk the list), Node by its own
    happy eyeballs (net's autoSelectFamily, on by default since Node 20).
Usage: happy_eyeballs_e2e.py PATH/TO/abox-net [--keep]
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process and namespace the test makes is removed
at the end (netns_rig.Rig), also on failure and on SIGINT/SIGTERM.
"""
import json
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ipv6_flows_e2e as v6  # noqa: E402
import netns_rig as nr  # noqa: E402

WEB = nr.fqdn("web")  # A and AAAA (v6.WEB6), both served by nginx
NOROUTE = nr.fqdn("noroute")  # A: web's address; AAAA: an address the host has no route to
NOROUTE6 = "2606:2800:21f:cb07:6820:80da:af6b:8b99"
FALLBACK_S = 2.0  # "quickly": well under any client's connect timeout (8 s here)
POLICY = f"""# happy_eyeballs_e2e.py: written by the test
[dns]
upstreams = ["{nr.ADDR['ns1']}:53"]
timeout_ms = 2000
[[allow]]
names = ["{WEB}", "{NOROUTE}"]
ports = [80]
"""

# Python in the guest: requests if this interpreter has it, else urllib
# (the output says which). One GET; the body, the library, the time taken.
PY_CLIENT = r"""
import json, sys, time
url = sys.argv[1]
t0 = time.monotonic()
out = {}
try:
    try:
        import requests
        r = requests.get(url, timeout=8)
        out = {"lib": "requests", "status": r.status_code, "body": r.text}
    except ImportError:
        import urllib.request
        with urllib.request.urlopen(url, timeout=8) as r:
            out = {"lib": "urllib (requests not installed)", "status": r.status, "body": r.read().decode()}
except Exception as e:
    out = {"error": f"{type(e).__name__}: {e}"}
out["secs"] = time.monotonic() - t0
print(json.dumps(out))
"""
# Node in the guest: fetch (undici), its defaults.
NODE_CLIENT = r"""
const url = process.argv[process.argv.length - 1];  // node -e SCRIPT URL: argv is [node, URL]
const t0 = performance.now();
fetch(url, {signal: AbortSignal.timeout(8000)})
  .then(async (r) => {
    const body = await r.text();
    console.log(JSON.stringify({lib: "node fetch " + process.version, status: r.status, body,
                                secs: (performance.now() - t0) / 1000}));
  })
  .catch((e) => {
    console.log(JSON.stringify({error: String(e.cause || e), secs: (performance.now() - t0) / 1000}));
  });
"""


def client(rig, kind, url):
    if kind == "python":
        cmd = [sys.executable, "-c", PY_CLIENT, url]
    else:
        cmd = ["node", "-e", NODE_CLIENT, url]
    got = rig.run(cmd, ns=rig.guest, timeout=30)
    try:
        return json.loads(got.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"exit {got.returncode}: {got.stderr.strip()[-300:]}", "secs": 0}


def family_of(access_log, tag):
    """Which family the request tagged `tag` reached nginx over ("ipv4",
    "ipv6"), from its client address; None when nginx never saw it."""
    with open(access_log) as f:
        for line in f:
            if f"GET /?tag={tag} " in line:
                peer = line.split()[0]
                return {nr.OUTSIDE_LINK: "ipv4", v6.OUTSIDE_LINK6: "ipv6"}.get(peer, peer)
    return None


def cases(rig, abox_net, r):
    v6.add_ipv6_internet(rig)
    rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()] +
                  [f"web IN AAAA {v6.WEB6}", f"noroute IN A {nr.ADDR['web']}", f"noroute IN AAAA {NOROUTE6}"])
    access_log = v6.start_nginx(rig)
    rig.add_guest()
    gai = f"/etc/netns/{rig.guest}/gai.conf"  # `ip netns exec` binds it over /etc/gai.conf; removed with the dir
    rig.start_abox_net(abox_net, POLICY, "--instance", "happyeyes", "--ipv6", "on")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        got = rig.run(["ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global"], ns=rig.guest, timeout=5)
        route = rig.run(["ip", "-6", "route", "show", "default"], ns=rig.guest, timeout=5).stdout
        if got.stdout.strip() and "tentative" not in got.stdout and "via fe80::1" in route:
            break
        time.sleep(0.2)
    r.case("the guest has its SLAAC address and IPv6 default route", "via fe80::1" in route, got.stdout + route)

    kinds = ["python"]
    if shutil.which("node"):
        kinds.append("node")
    else:
        print("skip  node fetch: node is not installed (no Node case is run, none is faked)")
    n = 0

    def get(kind, name, label):
        nonlocal n
        n += 1
        tag = f"{kind}-{label}-{n}"
        out = client(rig, kind, f"http://{name}/?tag={tag}")
        time.sleep(0.1)  # nginx writes its access log line after the response
        return out, family_of(access_log, tag)

    for kind in kinds:
        out, fam = get(kind, WEB, "default")
        r.case(f"{kind} ({out.get('lib', '?')}): the dual-stack name, glibc's default table: reached over IPv4 "
               f"(a ULA source sorts the A first)", out.get("status") == 200 and "hello" in out.get("body", "") and fam == "ipv4",
               f"{out} via {fam}")

    with open(gai, "w") as f:
        f.write(v6.GAI_CONF)
    for kind in kinds:
        out, fam = get(kind, WEB, "v6first")
        r.case(f"{kind} ({out.get('lib', '?')}): IPv6 sorted first: the dual-stack name reached over IPv6",
               out.get("status") == 200 and "hello" in out.get("body", "") and fam == "ipv6", f"{out} via {fam}")
    for kind in kinds:
        out, fam = get(kind, NOROUTE, "noroute")
        r.case(f"{kind}: an AAAA the host has no route to: reached over IPv4 within {FALLBACK_S:.0f} s "
               f"({out.get('secs', 0):.2f} s)",
               out.get("status") == 200 and fam == "ipv4" and out.get("secs", 99) < FALLBACK_S,
               f"{out} via {fam}")
    denies = [e for e in v6.events(rig) if e.get("kind") == "deny" and e.get("dst") == f"[{NOROUTE6}]:80"]
    r.case("... each IPv6 attempt refused by abox-net with a no-route deny event",
           len(denies) >= len(kinds) and all("no route" in e.get("reason", "") for e in denies),
           json.dumps(denies)[-400:])


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__)
        return 2
    abox_net = os.path.abspath(args[0])
    r = v6.Results()
    rig = nr.Rig(tag="hey")
    rig.unwind_on_signals()
    try:
        rig.build_internet()
        cases(rig, abox_net, r)
    except Exception as e:  # noqa: BLE001: a broken rig is a failure, reported, then cleaned up
        r.case("the test ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        rig.close(keep_dir="--keep" in sys.argv)
    left = rig.leftovers()
    r.case("nothing left behind", not left, str(left))
    print(f"{r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
