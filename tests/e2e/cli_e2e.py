#!/usr/bin/env python3
"""End-to-end test of what a new user meets first (issue 20): the command
lines of abox and abox-net as pasta and podman users expect them, the
broker on a port the kernel picks, talked to by curl, the ready line first
on stdout, and the hints where users get stuck. Everything runs in a network
namespace the test makes (only its loopback is used) and a temp dir, both
removed at the end.

Usage:
  cli_e2e.py PATH/TO/abox PATH/TO/abox-net [--keep]

What the programs are held to:
- --version and -V on both; `abox help CMD` and `abox-net help MODE` print
  exactly CMD's --help; --opt=value, short flags and `--` work;
- every usage error is one line on stderr ending in "(see 'CMD --help')",
  never the help text, with exit 2 (125 for abox run);
- abox broker --listen 127.0.0.1:0, [::1]:0 and 0.0.0.0:0 start, the ready
  line names the port the kernel chose, and curl reaches the broker there
  over TLS with the instance CA (a request without the nonce is refused by
  the broker itself: 403, abox-refused: nonce_missing);
- with --events -, the ready line comes first on stdout, before the JSON
  start event: abox-net run --stream, abox-net dns, abox broker;
- abox-net run with [[broker]] bindings and no --broker warns at start;
  --pcap on a symlink says a symlink is refused (not ELOOP's words).

Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

API = "api.example.test"

BROKER_POLICY = f"""[[broker]]
name = "{API}"
credential = "example"
header = "x-api-key"
nonce_env = "EXAMPLE_API_KEY"
"""
DNS_POLICY = """[dns]
upstreams = ["192.0.2.53:53"]

[[allow]]
names = ["example.test"]
ports = [443]
"""


class Env:
    def __init__(self, abox, abox_net, tmp, ns, guest_ns):
        self.abox, self.abox_net, self.tmp, self.ns, self.guest_ns = abox, abox_net, tmp, ns, guest_ns
        self.procs = []

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, text, mode=0o600):
        p = self.path(name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)
        return p

    def run(self, argv, timeout=30):
        return subprocess.run(["ip", "netns", "exec", self.ns, *argv], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, argv):
        """Starts argv in the namespace with stdout piped; returns (Popen,
        first two stdout lines) once two lines came (15 s at most)."""
        p = subprocess.Popen(["ip", "netns", "exec", self.ns, *argv], stdout=subprocess.PIPE,
                             stderr=open(self.path(f"stderr-{len(self.procs)}"), "wb"), stdin=subprocess.DEVNULL)
        self.procs.append(p)
        first = nr.first_line(p, 15)
        second = nr.first_line(p, 5)
        return p, first.decode(errors="replace"), second.decode(errors="replace")

    def stderr_of(self, p):
        i = self.procs.index(p)
        with open(self.path(f"stderr-{i}"), errors="replace") as f:
            return f.read()

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def case_version_everywhere(e):
    for prog, name in ((e.abox, "abox"), (e.abox_net, "abox-net")):
        for flag in ("--version", "-V"):
            r = e.run([prog, flag])
            expect(r.returncode == 0 and re.fullmatch(rf"{name} \d+\.\d+\.\d+\n", r.stdout),
                   f"{name} {flag}: {r.returncode} {r.stdout!r}")


def case_help_cmd_is_the_commands_help(e):
    pairs = [((e.abox, "help", "run"), (e.abox, "run", "--help")),
             ((e.abox, "help", "policy", "check"), (e.abox, "policy", "check", "--help")),
             ((e.abox, "help", "broker", "nonces"), (e.abox, "broker", "nonces", "-h")),
             ((e.abox_net, "help", "run"), (e.abox_net, "run", "--help")),
             ((e.abox_net, "help", "explain"), (e.abox_net, "explain", "--help")),
             ((e.abox, "help", "policy", "suggest"), (e.abox, "policy", "suggest", "--help")),
             ((e.abox_net, "help", "reload"), (e.abox_net, "reload", "--help"))]
    for asked, direct in pairs:
        a, d = e.run(list(asked)), e.run(list(direct))
        expect(a.returncode == 0 and d.returncode == 0, f"{asked}: {a.returncode} {a.stderr}")
        expect(a.stdout == d.stdout and a.stdout.startswith("usage: "), f"{asked} differs from {direct}")
    for prog in (e.abox, e.abox_net):
        top, again, direct = e.run([prog, "help"]), e.run([prog, "help", "help"]), e.run([prog, "--help"])
        expect(top.returncode == 0 and "help [" in top.stdout, top.stdout)
        # `help help` is not an unknown command: it is the overview, as `help` and `--help`.
        expect(again.returncode == 0 and again.stdout == top.stdout == direct.stdout,
               f"{prog} help help: {again.returncode} {again.stderr}")


def case_usage_errors_are_one_line(e):
    cases = [
        ([e.abox], "abox", 2),
        ([e.abox, "frobnicate"], "abox", 2),
        ([e.abox, "run", "--bogus"], "abox run", 125),
        ([e.abox, "image", "--bogus"], "abox image", 2),
        ([e.abox, "policy", "check", "--bogus"], "abox policy check", 2),
        ([e.abox, "policy", "explain", "--bogus"], "abox policy explain", 2),
        ([e.abox, "broker", "--bogus"], "abox broker", 2),
        ([e.abox, "broker", "ca", "--bogus"], "abox broker ca", 2),
        ([e.abox, "broker", "nonces", "--bogus"], "abox broker nonces", 2),
        ([e.abox_net], "abox-net", 2),
        ([e.abox_net, "run", "--bogus"], "abox-net run", 2),
        ([e.abox_net, "run", "--policy"], "abox-net run", 2),
        ([e.abox_net, "run", "--policy", "p.toml"], "abox-net run", 2),
        ([e.abox_net, "dns", "--listen=nowhere", "-p", "p.toml"], "abox-net dns", 2),
        ([e.abox_net, "stats"], "abox-net stats", 2),
        ([e.abox_net, "explain", "--bogus"], "abox-net explain", 2),
        ([e.abox, "policy", "suggest", "--bogus"], "abox policy suggest", 2),
        ([e.abox, "policy", "suggest"], "abox policy suggest", 2),
        ([e.abox_net, "reload", "--bogus"], "abox-net reload", 2),
        ([e.abox_net, "reload", "only-a-socket"], "abox-net reload", 2),
    ]
    for argv, command, code in cases:
        r = e.run(argv)
        lines = r.stderr.splitlines()
        expect(r.returncode == code, f"{argv[1:]}: exit {r.returncode}, want {code}: {r.stderr!r}")
        expect(len(lines) == 1 and lines[0].startswith(command + ": ") and
               lines[0].endswith(f"(see '{command} --help')"), f"{argv[1:]}: stderr {r.stderr!r}")
        expect(r.stdout == "", f"{argv[1:]}: stdout {r.stdout!r}")


def case_opt_equals_short_flags_and_dash_dash(e):
    policy = e.write("dns.toml", DNS_POLICY, 0o644)
    r = e.run([e.abox, "policy", "check", "-q", "--", policy])
    expect(r.returncode == 0, f"check -q -- P: {r.returncode} {r.stderr}")
    r = e.run([e.abox, "policy", "explain", "--json", f"{policy}", "example.test:443"])
    expect(r.returncode == 0 and json.loads(r.stdout)["verdict"] == "allowed", r.stdout)
    p, first, second = e.start([e.abox_net, "dns", f"--policy={policy}", "-l", "127.0.0.1:0", "--events=-"])
    expect(re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)\n", first) and not first.endswith(":0\n"),
           f"abox-net dns with --opt=value: {first!r} {e.stderr_of(p)[-300:]}")


def case_ready_line_first_with_events_on_stdout(e):
    policy = e.write("dns2.toml", DNS_POLICY, 0o644)
    p, first, second = e.start([e.abox_net, "dns", "--policy", policy, "--listen", "127.0.0.1:0",
                                "--events", "-"])
    expect(first.startswith("listening on "), f"dns: first line {first!r}")
    expect(json.loads(second)["kind"] in ("start", "host_address"), f"dns: second line {second!r}")
    sock = e.path("vm.sock")
    p, first, second = e.start([e.abox_net, "run", "--policy", policy, "--stream", sock, "--events", "-"])
    expect(first.startswith(f"ready stream={sock} "), f"run --stream: first line {first!r}")
    expect(json.loads(second)["kind"] == "start", f"run --stream: second line {second!r}")
    # A tap in a guest namespace: setup emits events of its own (this host's
    # addresses) before the guest side is up; they wait for the ready line.
    p, first, second = e.start([e.abox_net, "run", "--policy", policy, "--netns", e.guest_ns, "--events", "-"])
    expect(first.startswith("ready guest=10.0.2.15/24 "), f"run --netns: first line {first!r} {e.stderr_of(p)}")
    expect(json.loads(second)["kind"] in ("start", "host_address"), f"run --netns: second line {second!r}")


def broker_files(e, tag):
    policy = e.write(f"broker-{tag}.toml", BROKER_POLICY, 0o644)
    creds = e.write(f"creds-{tag}.toml", '[credentials]\nexample = "sk-test-not-a-real-key"\n', 0o600)
    return policy, creds, e.path(f"state-{tag}")


def case_broker_listens_on_a_port_the_kernel_picks(e):
    for listen, connect in (("127.0.0.1:0", "127.0.0.1"), ("[::1]:0", "[::1]"), ("0.0.0.0:0", "127.0.0.1")):
        tag = re.sub(r"\W", "", listen)
        policy, creds, state = broker_files(e, tag)
        p, first, second = e.start([e.abox, "broker", "-p", policy, "-c", creds, "-s", state, "-l", listen,
                                    "--instance", "cli", "--events", "-"])
        m = re.fullmatch(r"listening on (.*):(\d+)\n", first)
        expect(m is not None, f"{listen}: first line {first!r}: {e.stderr_of(p)[-400:]}")
        port = int(m.group(2))
        expect(port != 0 and m.group(1) == listen.rsplit(":", 1)[0], f"{listen}: {first!r}")
        expect(json.loads(second)["kind"] == "broker_started", f"{listen}: second line {second!r}")
        ca = e.write(f"ca-{tag}.pem", "")
        r = e.run([e.abox, "broker", "ca", "--state", state, "--instance", "cli"])
        expect(r.returncode == 0, r.stderr)
        with open(ca, "w") as f:
            f.write(r.stdout)
        # Host without the port: the binding is for port 443, and the broker
        # holds Host to the SNI and the binding (host_mismatch otherwise).
        r = e.run(["curl", "-sS", "--max-time", "10", "--cacert", ca, "--resolve", f"{API}:{port}:{connect}",
                   "-H", f"Host: {API}", "-D", "-", "-o", "/dev/null", f"https://{API}:{port}/v1/messages"])
        expect(r.returncode == 0, f"{listen}: curl exited {r.returncode}: {r.stderr}")
        expect(r.stdout.startswith("HTTP/1.1 403") and "abox-refused: nonce_missing" in r.stdout.lower(),
               f"{listen}: {r.stdout[:300]!r}")
        p.terminate()
        p.wait(timeout=10)


def case_broker_bindings_without_broker_warn_at_start(e):
    policy, _, _ = broker_files(e, "warn")
    sock = e.path("warn.sock")
    p, first, _ = e.start([e.abox_net, "run", "--policy", policy, "--stream", sock, "--events", e.path("w.ev")])
    expect(first.startswith("ready stream="), first)
    err = e.stderr_of(p)
    expect(f"warning: the policy has 1 [[broker]] binding ({API}:443) and no --broker" in err, err)


def case_pcap_symlink_is_refused_in_words(e):
    policy = e.write("dns3.toml", DNS_POLICY, 0o644)
    target = e.write("real.pcap", "")
    link = e.path("link.pcap")
    os.symlink(target, link)
    r = e.run([e.abox_net, "run", "--policy", policy, "--stream", e.path("pc.sock"), "--pcap", link])
    expect(r.returncode == 3, f"exit {r.returncode}")
    expect(f"--pcap {link} is a symlink, and a symlink is refused" in r.stderr, r.stderr)
    expect("Too many levels" not in r.stderr, r.stderr)


def main(argv):
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    abox, abox_net = (os.path.abspath(a) for a in argv)
    if os.geteuid() != 0:
        print("cli_e2e: needs root (a network namespace)")
        return 1
    for tool in ("ip", "curl"):
        if shutil.which(tool) is None:
            print(f"cli_e2e: {tool} is missing (scripts/setup.sh installs it)")
            return 1
    tmp = tempfile.mkdtemp(prefix="abox-cli-e2e-")
    ns, guest_ns = f"abcli{os.getpid()}", f"abcli{os.getpid()}g"
    passed = failed = 0
    made = []
    e = Env(abox, abox_net, tmp, ns, guest_ns)
    old = {s: signal.signal(s, nr._raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        for n in (ns, guest_ns):
            subprocess.run(["ip", "netns", "add", n], check=True, timeout=10)
            made.append(n)
            subprocess.run(["ip", "-n", n, "link", "set", "lo", "up"], check=True, timeout=10)
        for fn in (case_version_everywhere, case_help_cmd_is_the_commands_help, case_usage_errors_are_one_line,
                   case_opt_equals_short_flags_and_dash_dash, case_ready_line_first_with_events_on_stdout,
                   case_broker_listens_on_a_port_the_kernel_picks, case_broker_bindings_without_broker_warn_at_start,
                   case_pcap_symlink_is_refused_in_words):
            try:
                fn(e)
                passed += 1
                print(f"ok   {fn.__name__[5:]}", flush=True)
            except Exception as ex:  # noqa: BLE001 - report and go on
                failed += 1
                print(f"FAIL {fn.__name__[5:]}: {type(ex).__name__}: {ex}", flush=True)
            finally:
                e.stop_all()
                e.procs.clear()
    except KeyboardInterrupt:
        print("interrupted: cleaning up")
        failed += 1
    finally:
        e.stop_all()
        for n in made:
            for pid in nr.netns_pids(n):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=10)
        if keep:
            print(f"(kept {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        for s, h in old.items():
            signal.signal(s, h)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout.split()
    for n in (ns, guest_ns):
        if n in listed:
            print(f"FAIL cleanup: netns {n} left")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
