#!/usr/bin/env python3
"""The README's first command: abox-net in front of a guest, for real.

Builds a guest network namespace and a fake internet (namespaces only, with
no route off this machine; see tests/e2e/netns_rig.py), starts `abox-net run`
with docs/examples/demo.toml, has the guest try allowed and forbidden things
with ordinary tools (curl, dig), and prints what happened as a table, with
the event abox-net logged for each. Everything it made is removed at the end.

Usage: demo.py PATH/TO/abox-net    (as root; scripts/dev demo builds and runs it)
"""
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import netns_rig as nr  # noqa: E402

WEB = nr.fqdn("web")
OTHER = nr.fqdn("other")  # shares web's address; not in the policy
SECRET = nr.fqdn("secret")
REBIND = nr.fqdn("rebind")  # an allowed-looking name whose answer is private: not in the zone as allowed


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    abox = os.path.abspath(argv[0])
    if os.geteuid() != 0:
        print("demo: needs root (it creates network namespaces)", file=sys.stderr)
        return 1
    rig = nr.Rig("demo")
    rows = []
    try:
        rig.unwind_on_signals()
        rig.build_internet()
        rig.make_ca([WEB, OTHER])
        records = [f"{short} IN A {addr}" for short, addr in nr.ADDR.items()]
        records.append("web IN A 10.0.0.7")  # a second, private answer for the allowed name: rebinding
        rig.start_nsd(records)
        rig.start_nginx({WEB: {"index.html": b"hello from web.example.test\n"},
                         OTHER: {"index.html": b"hello from other.example.test\n"}})
        rig.add_guest()
        events_path = rig.path("events.jsonl")
        p = rig.spawn("abox-net", [abox, "run", "--policy", os.path.join(ROOT, "docs/examples/demo.toml"),
                                   "--netns", f"/run/netns/{rig.guest}", "--events", events_path],
                      ns=rig.outside, stdout=subprocess.PIPE)
        line = p.stdout.readline().decode()
        if not line.startswith("ready"):
            print(f"demo: abox-net did not start: {line!r}\n{rig.log_tail('abox-net')}", file=sys.stderr)
            return 1
        print(f"abox-net is up: {line.strip()}\n", flush=True)

        def guest(cmd, timeout=20):
            return subprocess.run(["ip", "netns", "exec", rig.guest, *cmd], capture_output=True, text=True,
                                  timeout=timeout)

        ca = rig.path("ca.pem")
        curl = ["curl", "-sS", "-m", "8", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", ca]

        def try_case(what, cmd, judge):
            start = time.monotonic()
            r = guest(cmd)
            took = time.monotonic() - start
            rows.append((what, judge(r), f"{took:.2f}s"))

        try_case(f"curl https://{WEB}/", curl + [f"https://{WEB}/"],
                 lambda r: f"allowed: HTTP {r.stdout}" if r.returncode == 0 else f"FAILED (exit {r.returncode})")
        try_case(f"curl http://{WEB}/", curl + [f"http://{WEB}/"],
                 lambda r: f"allowed: HTTP {r.stdout}" if r.returncode == 0 else f"FAILED (exit {r.returncode})")
        try_case(f"curl https://{SECRET}/ (not in the policy)", curl + [f"https://{SECRET}/"],
                 lambda r: "refused: the name does not resolve" if r.returncode == 6 else f"exit {r.returncode}")
        try_case(f"curl https://{nr.ADDR['secret']}/ (direct address)", curl + ["-k", f"https://{nr.ADDR['secret']}/"],
                 lambda r: "refused: connection reset" if r.returncode in (7, 35, 56) else f"exit {r.returncode}")
        try_case(f"curl --resolve {OTHER}:443:<web's address> (SNI of another host)",
                 curl + ["--resolve", f"{OTHER}:443:{nr.ADDR['web']}", f"https://{OTHER}/"],
                 lambda r: "refused: SNI names another host" if r.returncode != 0 else "FAILED: it went through")
        try_case(f"dig {WEB} (upstream also answers 10.0.0.7)", ["dig", "+short", "+time=3", WEB],
                 lambda r: "answered: " + " ".join(r.stdout.split()) + " (10.0.0.7 removed)")
        try_case("dig @93.184.215.53 (another resolver)", ["dig", "+short", "+time=2", "+tries=1",
                                                            f"@{nr.ADDR['ns1']}", WEB],
                 lambda r: "refused: no answer" if "timed out" in r.stdout or r.returncode != 0
                 else "FAILED: " + r.stdout.strip())
        secret_addr = nr.ADDR["secret"]
        try_case(f"UDP to {secret_addr}:53 (direct address)",
                 ["python3", "-c", "import socket,sys;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
                  f"s.settimeout(2);s.sendto(b'x',('{secret_addr}',53));sys.exit(0 if s.recv(9) else 1)"],
                 lambda r: "refused: UDP to an unanswered address" if r.returncode != 0 else "FAILED")
        time.sleep(0.3)
        events = []
        with open(events_path) as f:
            for raw in f:
                e = json.loads(raw)
                if e.get("kind") in ("admit", "deny", "rebinding"):
                    events.append(e)
    finally:
        rig.close()

    width = max(len(r[0]) for r in rows)
    print(f"{'the guest tried'.ljust(width)} | result")
    print(f"{'-' * width}-+-{'-' * 40}")
    for what, result, took in rows:
        print(f"{what.ljust(width)} | {result} ({took})")
    print("\nwhat abox-net logged (admit, deny, rebinding):")
    for e in events:
        detail = ", ".join(f"{k}={e[k]}" for k in ("name", "dst", "proto", "address", "peeked") if e.get(k))
        print(f"  {e['kind']:9} {e.get('reason', '')}" + (f" [{detail}]" if detail else ""))
    ok = all(not r[1].startswith("FAILED") for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
