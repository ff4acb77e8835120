#!/usr/bin/env python3
"""End-to-end test of audit mode in `abox-net run --audit` (issue 22), with
real parts: a guest network namespace behind abox-net's tap, nsd as the DNS
upstream, nginx on every address of the fake internet (netns_rig.py).

The policy allows one name (the tools server); the guest reaches five names
it does not allow. Checked:
- the start event says audit is on;
- each of the five works (HTTP 200 through nginx) and is logged: a DNS
  `would_deny` and a flow `would_deny` naming the name and the destination,
  each with "audit": true, and no `deny`;
- 169.254.169.254 (the cloud metadata address) is still refused in audit
  mode: a direct connection gets an RST (curl exit 7) and a `deny` with the
  reserved-range reason; a name answered with it resolves to nothing;
- with ABOX (the abox CLI) given: `abox policy suggest` on that event log,
  `--from` the policy the run used, prints a policy `abox policy check`
  passes; abox-net restarted with it and without audit lets the same five
  flows through (admit, no would_deny, no deny), and refuses anything else
  (a port and a name the run never used).

Usage: audit_e2e.py PATH/TO/abox-net [PATH/TO/abox] [--keep]
Every wait is bounded; everything the rig made is removed at the end.
"""
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

TOOLS, NS_ADDR = nr.fqdn("tools"), nr.ADDR["ns1"]
METADATA = "169.254.169.254"
OBSERVED = [nr.fqdn(n) for n in ("web", "other", "secret", "iperf", "ns1")]
ZONE_RECORDS = [f"{short} IN A {addr}" for short, addr in nr.ADDR.items()] + [f"meta IN A {METADATA}"]
INDEX = b"abox audit e2e\n"

POLICY = f"""# audit_e2e.py: written by the test
[dns]
upstreams = ["{NS_ADDR}:53"]
timeout_ms = 2000

[[allow]]
names = ["{TOOLS}"]
ports = [{nr.STREAM_PORT}]
"""

ABOX = None  # the abox CLI, for `abox policy suggest` and `check` (second argument)


def events(rig):
    try:
        with open(rig.path("events.jsonl")) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def curl(rig, url):
    return rig.run(["curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url], ns=rig.guest,
                   timeout=15)


def setup(rig, _mode):
    rig.build_internet()
    rig.add_server_address(METADATA)
    rig.make_ca([nr.fqdn("web")])
    rig.start_nsd(ZONE_RECORDS)
    rig.start_nginx({nr.fqdn("web"): {"index.html": INDEX}})
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

    net = rig.start_abox_net(abox, POLICY, "--audit")
    start = [e for e in events(rig) if e.get("kind") == "start"]
    check("the start event says audit is on", len(start) == 1 and start[0].get("audit") is True, str(start))
    for name in OBSERVED:
        r = curl(rig, f"http://{name}/index.html")
        check(f"{name}, not in the policy, works in audit mode", r.stdout == "200",
              f"curl exit {r.returncode} {r.stdout!r} {r.stderr.strip()}")
    r = curl(rig, f"http://{METADATA}/")
    check("169.254.169.254 is still refused in audit mode", r.returncode == 7,
          f"curl exit {r.returncode} {r.stdout!r} {r.stderr.strip()}")
    r = rig.run(["dig", "+short", f"@{nr.GATEWAY}", nr.fqdn("meta"), "A"], ns=rig.guest, timeout=10)
    check("a name answered with 169.254.169.254 resolves to nothing", METADATA not in r.stdout, r.stdout)

    ev = events(rig)
    for name in OBSERVED:
        dns = [e for e in ev if e.get("kind") == "would_deny" and e.get("name") == name and "type" in e]
        flow = [e for e in ev if e.get("kind") == "would_deny" and e.get("name") == name and e.get("proto") == "tcp"]
        check(f"{name}: would_deny for its DNS question and its flow, each with audit",
              dns and flow and all(e.get("audit") is True for e in dns + flow)
              and flow[0].get("dst") == f"{nr.ADDR[name.split('.')[0]]}:80", f"{dns} {flow}")
    denies = [e for e in ev if e.get("kind") == "deny" and e.get("proto") != "ipv6"]  # the guest's own IPv6 chatter
    check("the only deny is the metadata address, as reserved",
          len(denies) == 1 and denies[0].get("dst") == f"{METADATA}:80" and "reserved" in denies[0].get("reason", ""),
          str(denies))
    # Each flow's close event carries its bytes both ways (what suggest counts).
    closes = {}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        closes = {e.get("name"): e for e in events(rig) if e.get("kind") == "close" and e.get("proto") == "tcp"}
        if all(n in closes for n in OBSERVED):
            break
        time.sleep(0.2)
    check("each flow's close event counts its bytes both ways",
          all(n in closes and closes[n].get("bytes_out", 0) > 0 and closes[n].get("bytes_in", 0) > len(INDEX)
              and closes[n].get("dst") == f"{nr.ADDR[n.split('.')[0]]}:80" for n in OBSERVED), str(closes))
    net.terminate()
    net.wait(timeout=10)
    if ABOX is None:
        return passed, failed

    # abox policy suggest on that log: the same run allowed, anything else refused.
    log = rig.path("audit-events.jsonl")
    os.rename(rig.path("events.jsonl"), log)
    r = subprocess.run([ABOX, "policy", "suggest", log, "--from", rig.path("policy.toml")], capture_output=True,
                       text=True, timeout=30)
    check("abox policy suggest prints a policy", r.returncode == 0 and "[[allow]]" in r.stdout,
          f"exit {r.returncode}: {r.stderr.strip()}")
    suggested = r.stdout
    path = rig.path("suggested.toml")
    with open(path, "w") as f:
        f.write(suggested)
    r = subprocess.run([ABOX, "policy", "check", path], capture_output=True, text=True, timeout=30)
    check("its output passes abox policy check", r.returncode == 0, f"exit {r.returncode}: {r.stderr.strip()}")
    check("it names every observed name and not the metadata address",
          all(f'"{n}"' in suggested for n in OBSERVED) and f'"{METADATA}' not in suggested
          and "# 1 flow (1 would_deny)" in suggested, suggested)
    check("its comments count each rule's bytes out and in",
          all(f"# 1 flow (1 would_deny), {closes[n]['bytes_out']} bytes out and {closes[n]['bytes_in']} in" in suggested
              for n in OBSERVED if n in closes) and len(closes) >= len(OBSERVED), suggested)
    net = rig.start_abox_net(abox, suggested)
    for name in OBSERVED:
        r = curl(rig, f"http://{name}/index.html")
        check(f"{name} is allowed by the suggested policy", r.stdout == "200",
              f"curl exit {r.returncode} {r.stdout!r} {r.stderr.strip()}")
    r = curl(rig, f"https://{nr.fqdn('web')}/index.html")
    check("a port the run never used is refused", r.returncode == 7, f"curl exit {r.returncode} {r.stderr.strip()}")
    r = curl(rig, f"http://{nr.fqdn('api')}/")
    check("a name the run never used is refused", r.returncode == 6, f"curl exit {r.returncode} {r.stderr.strip()}")
    ev = events(rig)
    admitted = {e.get("name") for e in ev if e.get("kind") == "admit"}
    check("the same five flows are admitted, none would_deny",
          set(OBSERVED) <= admitted and not any(e.get("kind") == "would_deny" for e in ev), str(admitted))
    return passed, failed


def main(argv):
    global ABOX
    args = [a for a in argv if a not in ("--keep",)]
    if len(args) >= 2 and not args[1].startswith("--"):
        ABOX = os.path.abspath(args[1])
        argv = [a for a in argv if a != args[1]]
    return nr.run_suite("audit_e2e", "au", ("ip", "nsd", "nginx", "curl", "dig", "openssl"), argv, [], setup, run,
                        doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
