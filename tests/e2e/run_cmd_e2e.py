#!/usr/bin/env python3
"""End-to-end test of `abox-net run [options] -- CMD` (a fresh namespace for
CMD behind abox-net, like pasta) and `abox-net explain SOCKET TARGET` (a
running abox-net asked about a target now, like `cilium policy trace`),
with real clients (curl, dig, sh) against the fake internet of netns_rig.py
(nsd, nginx on public-looking addresses in namespaces of their own; abox-net
treats every address of the host it runs on as reserved, so nothing it is
asked to reach lives there).

Usage:
  run_cmd_e2e.py PATH/TO/abox-net [--keep] [--only WORD[,WORD]]

What abox-net is held to:
- run -- CMD: CMD reaches an allowed name by its name (the resolv.conf in
  its namespace names the gateway; the host's /etc/resolv.conf is
  untouched), a denied name does not resolve, a direct address is refused;
  CMD's exit status is abox-net's (0, 7, 128+15 for a signal, curl's own);
  127 for a CMD that is not there, 126 for one that cannot be executed,
  125 for a usage error; CMD sees only lo and eth0 (10.0.2.15/24, default
  route via 10.0.2.2); a SIGTERM sent to abox-net reaches CMD, and abox-net
  then exits with CMD's status; afterwards no process of the run is left
  in the namespace abox-net ran in; after a SIGTERM nothing CMD started
  outlives abox-net (sh -c 'sleep & sleep; wait': 143 at once), a tree
  that ignores SIGTERM is killed 5 s later (137), and a child CMD leaves
  running when it exits is stopped too; without privilege it says it needs
  root and exits 125;
- explain: after the guest resolved web.example.test, ADDRESS:80 is
  admitted now, naming the name and how long its answer has left (text and
  JSON); an address never answered is refused now; the answered address on
  a port no rule allows is refused; NAME:PORT gives the policy's verdict; a
  stale socket says nothing is running there; an `abox-net dns` socket says
  it admits no flows;
- hints: a second abox-net on a namespace that has one says another
  abox-net probably serves it; --netns without privilege says it needs root
  (or CAP_SYS_ADMIN and CAP_NET_ADMIN) and that --stream does not; a guest
  that asks another resolver gets a deny event naming where DNS is served.

Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process, namespace and file the test makes is
removed at the end, also on failure and on SIGINT/SIGTERM.
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

WEB, SECRET = nr.fqdn("web"), nr.fqdn("secret")
WEB_ADDR, SECRET_ADDR, NS_ADDR = nr.ADDR["web"], nr.ADDR["secret"], nr.ADDR["ns1"]
TOKEN = os.urandom(8).hex()
INDEX = f"abox run-cmd e2e {TOKEN}\n"
NOBODY = 65534

POLICY = f"""# run_cmd_e2e.py: written by the test
[dns]
upstreams = ["{NS_ADDR}:53"]
timeout_ms = 2000

[[allow]]
names = ["{WEB}"]
ports = [80]
"""


class Env:
    def __init__(self, rig, abox):
        self.rig = rig
        self.abox = abox
        # Readable by an unprivileged user too (the privilege cases).
        self.public = rig.path("public")
        os.makedirs(self.public)
        os.chmod(rig.dir, 0o755)
        os.chmod(self.public, 0o755)
        self.policy = os.path.join(self.public, "policy.toml")
        with open(self.policy, "w") as f:
            f.write(POLICY)
        os.chmod(self.policy, 0o644)

    def run_cmd(self, *cmd, extra=(), timeout=60, user=None):
        """abox-net run --policy P [extra] -- CMD in the outside namespace."""
        argv = [self.abox, "run", "--policy", self.policy, "--events", self.rig.path("cmd.events"), *extra,
                "--", *cmd]
        if user is not None:
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--inh-caps=-all", *argv]
        return subprocess.run(nr._netns_cmd(self.rig.outside, argv), capture_output=True, text=True,
                              timeout=timeout)

    def outside_pids(self):
        return set(nr.netns_pids(self.rig.outside))


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


# -- run -- CMD -------------------------------------------------------------------------

def case_cmd_reaches_an_allowed_name_by_name(e):
    before = open("/etc/resolv.conf").read()
    r = e.run_cmd("curl", "-sS", "--max-time", "10", f"http://{WEB}/")
    expect(r.returncode == 0, f"curl exited {r.returncode}: {r.stderr.strip()[-500:]}")
    expect(r.stdout == INDEX, f"curl printed {r.stdout[:200]!r}")
    expect(open("/etc/resolv.conf").read() == before, "the host's /etc/resolv.conf changed")
    r = e.run_cmd("cat", "/etc/resolv.conf")
    expect(r.returncode == 0 and f"nameserver {nr.GATEWAY}" in r.stdout, f"CMD's resolv.conf: {r.stdout!r}")


def case_cmd_denied_name_and_direct_address_are_refused(e):
    # curl's own exit codes pass through: 6 (could not resolve), 7 (refused).
    r = e.run_cmd("curl", "-sS", "--max-time", "10", f"http://{SECRET}/")
    expect(r.returncode == 6, f"a denied name: curl exited {r.returncode}: {r.stderr.strip()[-300:]}")
    r = e.run_cmd("curl", "-sS", "--max-time", "10", f"http://{WEB_ADDR}/")
    expect(r.returncode == 7, f"a direct address: curl exited {r.returncode}: {r.stderr.strip()[-300:]}")
    with open(e.rig.path("cmd.events")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    expect(any(ev["kind"] == "deny" and ev.get("dst", "").startswith(WEB_ADDR) for ev in events),
           "no deny event for the direct address")


def case_cmd_exit_status_passes_through(e):
    for script, want in (("exit 0", 0), ("exit 7", 7), ("kill -TERM $$", 128 + signal.SIGTERM)):
        r = e.run_cmd("sh", "-c", script)
        expect(r.returncode == want, f"sh -c {script!r}: abox-net exited {r.returncode}, want {want}: {r.stderr}")


def case_cmd_gets_default_signal_dispositions(e):
    # The supervisor ignores SIGPIPE for itself; CMD must not inherit that
    # (`yes | head -1` would then spin on EPIPE instead of ending).
    r = e.run_cmd("sh", "-c", "grep SigIgn /proc/self/status")
    expect(r.returncode == 0, r.stderr)
    ignored = int(r.stdout.split()[1], 16)
    expect(not ignored & (1 << (signal.SIGPIPE - 1)), f"CMD starts with SIGPIPE ignored: {r.stdout!r}")
    r = e.run_cmd("sh", "-c", "yes | head -1")
    expect(r.returncode == 0 and r.stdout == "y\n", f"yes | head -1: {r.returncode} {r.stdout[:50]!r}")


def case_cmd_not_found_or_not_executable(e):
    r = e.run_cmd("/nonexistent/tool")
    expect(r.returncode == 127, f"not found: {r.returncode}")
    expect("abox-net run: /nonexistent/tool: No such file or directory" in r.stderr, r.stderr)
    plain = os.path.join(e.public, "plain-file")
    with open(plain, "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(plain, 0o644)
    r = e.run_cmd(plain)
    expect(r.returncode == 126, f"not executable: {r.returncode} {r.stderr}")
    r = subprocess.run(nr._netns_cmd(e.rig.outside, [e.abox, "run", "--policy", e.policy, "--netns", "x", "--",
                                                     "true"]), capture_output=True, text=True, timeout=30)
    expect(r.returncode == 125, f"a usage error with CMD: {r.returncode}")
    expect(r.stderr.count("\n") == 1 and "(see 'abox-net run --help')" in r.stderr, f"usage error: {r.stderr!r}")


def case_cmd_sees_only_its_own_network(e):
    r = e.run_cmd("sh", "-c", "ip -4 -br addr; ip route")
    expect(r.returncode == 0, r.stderr)
    lines = [line.split() for line in r.stdout.splitlines()]
    addrs = {fields[0]: fields[2:] for fields in lines if len(fields) >= 3 and fields[0] in ("lo", "eth0")}
    expect(set(addrs) == {"lo", "eth0"}, f"interfaces: {r.stdout!r}")
    expect(addrs["eth0"] == [f"{nr.GUEST_ADDR}/{nr.GUEST_PREFIX}"], f"eth0: {addrs['eth0']}")
    expect(f"default via {nr.GATEWAY} dev eth0" in r.stdout, f"routes: {r.stdout!r}")
    expect(nr.OUTSIDE_LINK not in r.stdout, "CMD sees the host's (outside's) addresses")


def case_cmd_sigterm_reaches_cmd_and_nothing_is_left(e):
    before = e.outside_pids()
    argv = [e.abox, "run", "--policy", e.policy, "--events", e.rig.path("term.events"), "--", "sh", "-c",
            "trap 'echo got-term; exit 3' TERM; echo started; while :; do sleep 0.1; done"]
    p = subprocess.Popen(nr._netns_cmd(e.rig.outside, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        line = nr.first_line(p, 30)
        expect(line == b"started\n", f"CMD did not start: {line!r} {p.poll()}")
        p.send_signal(signal.SIGTERM)  # `ip netns exec` has exec'd: this is abox-net
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=5)
    expect(b"got-term" in out, f"CMD did not see SIGTERM: {out!r} {err[-500:]!r}")
    expect(p.returncode == 3, f"abox-net exited {p.returncode}, not CMD's 3")
    left = e.outside_pids() - before
    expect(not left, f"processes left in the namespace: {left}")


def tagged_sleeps():
    """Two sleeps nobody else runs (sleep takes a fraction: its argument is
    the tag), to find them in the process table afterwards."""
    tag = int.from_bytes(os.urandom(3), "big")
    return f"1000.{tag:08d}1", f"1000.{tag:08d}2"


def sleeps_left(*args):
    r = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, timeout=10)
    return [line.strip() for line in r.stdout.splitlines() if any(f"sleep {a}" in line for a in args)]


def kill_left(*args):
    """Cleanup after a failure: the tagged sleeps found, by pid."""
    for line in sleeps_left(*args):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def stop_by_term(e, script, wait):
    """Runs `sh -c script` (which prints "started"), SIGTERMs abox-net; returns
    (exit status, seconds from the signal to abox-net's exit, stderr)."""
    argv = [e.abox, "run", "--policy", e.policy, "--events", e.rig.path("tree.events"), "--", "sh", "-c", script]
    p = subprocess.Popen(nr._netns_cmd(e.rig.outside, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        line = nr.first_line(p, 30)
        expect(line == b"started\n", f"CMD did not start: {line!r} {p.poll()}")
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)  # `ip netns exec` has exec'd: this is abox-net
        try:
            _, err = p.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"abox-net did not end within {wait} s of SIGTERM")
        return p.returncode, time.monotonic() - sent, err.decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=5)


def case_cmd_sigterm_ends_the_whole_tree(e):
    # CMD (sh) dies on SIGTERM at once; its two sleeps (one in the
    # background, one it waits for) must not outlive abox-net.
    a, b = tagged_sleeps()
    try:
        code, took, err = stop_by_term(e, f"sleep {a} & echo started; sleep {b}; wait", 20)
        expect(code == 128 + signal.SIGTERM, f"exit {code}, not 143: {err[-500:]}")
        expect(took < 4, f"took {took:.1f} s")
        left = sleeps_left(a, b)
        expect(not left, f"CMD's children outlived abox-net: {left}")
    finally:
        kill_left(a, b)


def case_cmd_ignoring_sigterm_is_killed_after_the_grace(e):
    # CMD and its children ignore SIGTERM: 5 s later all get SIGKILL, and
    # abox-net exits 137 (CMD ended by signal 9).
    a, b = tagged_sleeps()
    try:
        code, took, err = stop_by_term(e, f"trap '' TERM; sleep {a} & echo started; sleep {b}; wait", 30)
        expect(code == 128 + signal.SIGKILL, f"exit {code}, not 137: {err[-500:]}")
        expect(4 < took < 12, f"took {took:.1f} s (the grace is 5 s)")
        expect("did not exit within 5 s of SIGTERM" in err, err[-500:])
        left = sleeps_left(a, b)
        expect(not left, f"CMD's children outlived abox-net: {left}")
    finally:
        kill_left(a, b)


def case_cmd_exit_leaves_nothing_running(e):
    # CMD exits on its own, leaving a child in the background: the child is
    # stopped too, and the status is still CMD's.
    a, _ = tagged_sleeps()
    try:
        r = e.run_cmd("sh", "-c", f"sleep {a} & exit 4", timeout=30)
        expect(r.returncode == 4, f"exit {r.returncode}: {r.stderr[-500:]}")
        left = sleeps_left(a)
        expect(not left, f"CMD's child outlived abox-net: {left}")
    finally:
        kill_left(a)


def case_cmd_without_privilege_says_it_needs_root(e):
    r = e.run_cmd("true", user=NOBODY)
    expect(r.returncode == 125, f"exit {r.returncode}: {r.stderr}")
    expect("needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN)" in r.stderr, r.stderr)


# -- explain ---------------------------------------------------------------------------

class Running:
    """One `abox-net run --netns guest --stats-socket S` for the explain and
    hint cases; the guest has asked for WEB once."""

    def __init__(self, e):
        self.e = e
        self.sock = e.rig.path("stats.sock")
        self.p = e.rig.start_abox_net(e.abox, POLICY, "--stats-socket", self.sock)
        r = e.rig.run(["dig", f"@{nr.GATEWAY}", WEB, "+short", "+time=2", "+tries=2"], ns=e.rig.guest, timeout=15)
        expect(WEB_ADDR in r.stdout, f"the guest could not resolve {WEB}: {r.stdout!r} {r.stderr!r}")

    def explain(self, *args):
        return subprocess.run([self.e.abox, "explain", *args], capture_output=True, text=True, timeout=20)


def case_explain_an_answered_address_is_admitted_now(run):
    r = run.explain(run.sock, f"{WEB_ADDR}:80")
    expect(r.returncode == 0, f"exit {r.returncode}: {r.stdout} {r.stderr}")
    first = r.stdout.splitlines()[0]
    expect(first.startswith(f"{WEB_ADDR}:80/tcp: admitted now: answered for {WEB}"), first)
    expect(f"answers holding {WEB_ADDR}: {WEB} (" in r.stdout and " s left)" in r.stdout, r.stdout)
    j = run.explain("--json", run.sock, f"{WEB_ADDR}:80")
    expect(j.returncode == 0, j.stderr)
    doc = json.loads(j.stdout)
    expect(doc["admitted"] is True and doc["name"] == WEB, doc)
    expect(doc["answers"][0]["name"] == WEB and 0 < doc["answers"][0]["expires_in_ms"] <= 300_000, doc["answers"])
    expect(doc["rule"]["line"] == 6, doc.get("rule"))
    expect(doc["policy"]["verdict"] == "answer-required" and doc["policy"]["allowed"] is False, doc["policy"])


def case_explain_refusals_now(run):
    r = run.explain(run.sock, f"{SECRET_ADDR}:80")
    expect(r.returncode == 1, f"an address never answered: exit {r.returncode}: {r.stdout}")
    expect("refused now: destination not answered by the DNS gate" in r.stdout, r.stdout)
    expect(f"answers holding {SECRET_ADDR}: none" in r.stdout, r.stdout)
    r = run.explain(run.sock, f"{WEB_ADDR}:9999")
    expect(r.returncode == 1 and "port not allowed" in r.stdout, f"a port no rule allows: {r.returncode} {r.stdout}")
    r = run.explain("--udp", run.sock, f"{WEB_ADDR}:80")
    expect(r.returncode == 1, f"udp to a tcp rule: {r.returncode} {r.stdout}")
    r = run.explain(run.sock, f"{WEB}:80")
    expect(r.returncode == 0 and "the policy's verdict: allowed" in r.stdout, f"a name: {r.returncode} {r.stdout}")
    r = run.explain(run.sock, f"{SECRET}:80")
    expect(r.returncode == 1, f"a denied name: {r.returncode} {r.stdout}")


def case_explain_errors(run):
    for bad in ("not a target", f"{WEB_ADDR}:0", f"{WEB}:65536"):
        r = run.explain(run.sock, bad)
        expect(r.returncode == 2 and r.stderr.count("\n") == 1 and "(see 'abox-net explain --help')" in r.stderr,
               f"{bad!r}: {r.returncode} {r.stderr}")
    stale = run.e.rig.path("stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(stale)
    s.close()  # a socket file nobody listens on: what an exited abox-net leaves
    r = run.explain(stale, f"{WEB_ADDR}:80")
    expect(r.returncode == 3 and f"nothing is running at {stale}" in r.stderr, f"{r.returncode} {r.stderr}")
    r = subprocess.run([run.e.abox, "stats", stale], capture_output=True, text=True, timeout=20)
    expect(r.returncode == 3 and f"nothing is running at {stale}" in r.stderr, f"stats: {r.returncode} {r.stderr}")
    dns_sock = run.e.rig.path("dns-stats.sock")
    p = run.e.rig.spawn("abox-net-dns", [run.e.abox, "dns", "--policy", run.e.policy, "--listen", "127.0.0.1:0",
                                         "--stats-socket", dns_sock], ns=run.e.rig.outside, stdout=subprocess.PIPE)
    try:
        line = nr.first_line(p, 15)
        expect(line.startswith(b"listening on"), f"abox-net dns: {line!r}")
        r = run.explain(dns_sock, f"{WEB_ADDR}:80")
        expect(r.returncode == 3 and "admits no flows" in r.stderr, f"{r.returncode} {r.stderr}")
    finally:
        p.terminate()
        p.wait(timeout=10)


# -- hints -----------------------------------------------------------------------------

def case_second_abox_net_on_the_namespace(run):
    r = subprocess.run(nr._netns_cmd(run.e.rig.outside, [run.e.abox, "run", "--policy", run.e.policy, "--netns",
                                                         f"/run/netns/{run.e.rig.guest}"]),
                       capture_output=True, text=True, timeout=30)
    expect(r.returncode == 3, f"exit {r.returncode}")
    expect("another abox-net is probably serving /run/netns/" in r.stderr, r.stderr)
    expect(run.p.poll() is None, "the first abox-net went away")


def case_netns_without_privilege(run):
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all", run.e.abox,
            "run", "--policy", run.e.policy, "--netns", f"/run/netns/{run.e.rig.guest}", "--ifname", "eth9"]
    r = subprocess.run(nr._netns_cmd(run.e.rig.outside, argv), capture_output=True, text=True, timeout=30)
    expect(r.returncode == 3, f"exit {r.returncode}: {r.stderr}")
    expect("--netns needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN)" in r.stderr, r.stderr)
    expect("--stream needs no privilege" in r.stderr, r.stderr)


def case_dns_elsewhere_deny_event_says_where_dns_is_served(run):
    r = run.e.rig.run(["dig", f"@{NS_ADDR}", WEB, "+time=1", "+tries=1"], ns=run.e.rig.guest, timeout=10)
    expect(WEB_ADDR not in r.stdout, "a resolver other than the gateway answered")
    deadline = time.monotonic() + 5
    found = None
    while found is None and time.monotonic() < deadline:
        with open(run.e.rig.path("events.jsonl")) as f:
            for line in f:
                ev = json.loads(line)
                if ev["kind"] == "deny" and ev.get("dst") == f"{NS_ADDR}:53":
                    found = ev
        time.sleep(0.1)
    expect(found is not None, "no deny event for DNS to another resolver")
    expect(found.get("dns") == f"served only by the gateway, {nr.GATEWAY}:53", found)


def main(argv):
    cases_cmd = [case_cmd_reaches_an_allowed_name_by_name, case_cmd_denied_name_and_direct_address_are_refused,
                 case_cmd_exit_status_passes_through, case_cmd_gets_default_signal_dispositions,
                 case_cmd_not_found_or_not_executable,
                 case_cmd_sees_only_its_own_network, case_cmd_sigterm_reaches_cmd_and_nothing_is_left,
                 case_cmd_sigterm_ends_the_whole_tree, case_cmd_ignoring_sigterm_is_killed_after_the_grace,
                 case_cmd_exit_leaves_nothing_running, case_cmd_without_privilege_says_it_needs_root]
    cases_running = [case_explain_an_answered_address_is_admitted_now, case_explain_refusals_now,
                     case_explain_errors, case_second_abox_net_on_the_namespace, case_netns_without_privilege,
                     case_dns_elsewhere_deny_event_says_where_dns_is_served]
    all_cases = cases_cmd + cases_running

    def setup(rig, _mode):
        rig.build_internet()
        rig.make_ca([WEB])
        rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()])
        rig.start_nginx({WEB: {"index.html": INDEX.encode()}})
        rig.add_guest()

    def run(rig, _mode, abox):
        passed = failed = 0
        e = Env(rig, abox)

        def report(fn, arg):
            nonlocal passed, failed
            try:
                fn(arg)
                passed += 1
                print(f"ok   {fn.__name__[5:]}", flush=True)
            except Exception as ex:  # noqa: BLE001 - report and go on
                failed += 1
                print(f"FAIL {fn.__name__[5:]}: {type(ex).__name__}: {ex}", flush=True)

        for fn in [c for c in cases_cmd if c in all_cases]:
            report(fn, e)
        wanted = [c for c in cases_running if c in all_cases]
        if wanted:
            try:
                running = Running(e)
            except Exception as ex:  # noqa: BLE001
                print(f"FAIL start_abox_net: {type(ex).__name__}: {ex}\n{rig.log_tail('abox-net')}")
                return passed, failed + len(wanted)
            for fn in wanted:
                report(fn, running)
        if failed:
            print(f"--- abox-net stderr (tail) ---\n{rig.log_tail('abox-net', 15)}", end="")
        return passed, failed

    return nr.run_suite("run_cmd_e2e", "rc", ("ip", "nsd", "nginx", "curl", "dig", "openssl", "ss", "setpriv"),
                        argv, all_cases, setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
