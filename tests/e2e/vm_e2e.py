#!/usr/bin/env python3
"""End-to-end test of a real QEMU guest behind `abox-net run --stream`: Debian's
cloud kernel and the busybox initramfs of guest/ under `qemu-system-x86_64 -M
microvm -accel tcg`, its virtio-net NIC on abox-net's stream socket, a fake
internet in namespaces (nsd, nginx; netns_rig.py).

The guest is driven over its virtio-serial control port (guest/init.sh: one
shell command a line in, one JSON line out). QEMU connects to a socket this
test already listens on, so no line is lost to a start-up race. QEMU runs in
an empty namespace of its own: its only way out is abox-net's socket.

Usage:
  vm_e2e.py PATH/TO/abox-net    the test
  vm_e2e.py --passt             the same guest behind passt, which filters
                                nothing: every attack must get THROUGH there
                                (so each check proves something) and every
                                legitimate flow must work. passt gets a
                                default route in outside (into inet, which
                                routes nowhere) and a DNS relay to nsd.
  --keep                        keep the temp dir (console, logs, events)
  --only WORD[,WORD]            run only the checks whose names hold a WORD
                                (the boot, poweroff and exit checks always run)

Prints one line per check and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded. A boot that hangs before /init is retried once (the
line says so); a hang after /init started is a failure. Every process,
namespace and file the test makes is removed at the end, also on failure and
on SIGINT/SIGTERM.

What the guest is held to:
- /init reports ready on the control port within BOOT_TIMEOUT s of QEMU's start;
- DHCP (udhcpc) gets the fixed lease: 10.0.2.15/24, router and DNS server
  10.0.2.2, MTU 65520, and eth0, the default route and resolv.conf say so;
  the gateway answers ping (abox-net only);
- with abox-net (run with --ipv6 nd): SLAAC gives eth0 an address in the
  instance's ULA /64, and there is no IPv6 default route (issue 21);
- nslookup of the allowed name gives its address; wget of a BLOB_BYTES file
  from it has the sha256 nginx serves;
- the denied name does not resolve; DNS straight to the authoritative server
  gets no answer; a connection straight to an address no allowed name was
  answered with fails;
- "poweroff" on the control port ends QEMU with exit 0.
With abox-net the events file shows the admission of the allowed flow and a
deny for the name, the direct DNS and the address, and abox-net exits 0 once QEMU is gone.
Each boot gets a fresh abox-net (or passt): either takes exactly one VMM.

ABOX_GUEST_KERNEL_DIR overrides where the kernel is (default
.cache/guest-kernel, which scripts/setup.sh fills).
"""
import base64
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KERNEL_DIR = os.environ.get("ABOX_GUEST_KERNEL_DIR", os.path.join(REPO, ".cache", "guest-kernel"))
BUILD_INITRAMFS = os.path.join(REPO, "guest", "build-initramfs.sh")

WEB, SECRET = nr.fqdn("web"), nr.fqdn("secret")
WEB_ADDR, SECRET_ADDR, NS_ADDR = nr.ADDR["web"], nr.ADDR["secret"], nr.ADDR["ns1"]
BLOB_BYTES = 4 << 20
BLOB = os.urandom(BLOB_BYTES)
BLOB_SHA = hashlib.sha256(BLOB).hexdigest()
TOKEN = os.urandom(8).hex()
INDEX = f"abox vm e2e: {WEB} {TOKEN}\n"

BOOT_TIMEOUT = 40  # QEMU start to /init's ready line; 2-7 s here, under load
CMD_TIMEOUT = 30  # what /init allows one command (abox.cmd_timeout)
MAX_LINE = 1 << 20  # a reply holds at most 64 KiB of output, in base64
POWEROFF_TIMEOUT = 20
GUEST_MEM_MIB = 256

ZONE_RECORDS = [f"{short} IN A {addr}" for short, addr in nr.ADDR.items()]

POLICY = f"""# vm_e2e.py: written by the test
[dns]
upstreams = ["{NS_ADDR}:53"]
timeout_ms = 2000

[[allow]]
names = ["{WEB}"]
ports = [80]
"""


def host_tsc_khz():
    """The host's TSC rate for tsc_early_khz=: under TCG the guest's own
    calibration against the emulated PIT fails now and then and the boot
    hangs; told the rate, it does not calibrate."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    raise RuntimeError("no 'cpu MHz' in /proc/cpuinfo")


class GuestControl:
    """The host end of /init's control port: a unix socket QEMU connects to."""

    def __init__(self, path):
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.conn = None
        self.buf = b""
        self.seq = 0  # of the last command sent
        self.broken = None  # why the port is out of step, once it is

    def close(self):
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()
        self.conn = None

    def accept(self, timeout):
        self.listener.settimeout(timeout)
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(10)  # sends; reads wait in select()

    def read_line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no line from the guest within {timeout:.0f} s")
            ready, _, _ = select.select([self.conn], [], [], left)
            if ready:
                chunk = self.conn.recv(65536)
                if not chunk:
                    raise EOFError("the guest closed the control port")
                self.buf += chunk
                if len(self.buf) > MAX_LINE and b"\n" not in self.buf:
                    raise ValueError(f"a line from the guest longer than {MAX_LINE} bytes")
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def run(self, cmd, timeout=CMD_TIMEOUT + 10):
        """Runs one shell command line in the guest: (exit code, output).
        After a reply that did not come, every later command fails at once:
        the port is out of step, and each would wait its whole timeout."""
        assert "\n" not in cmd
        if self.broken:
            raise RuntimeError(f"the control port is unusable: {self.broken}")
        self.conn.sendall(cmd.encode() + b"\n")
        self.seq += 1
        try:
            r = self.read_line(timeout)
        except (TimeoutError, EOFError, ValueError) as e:
            self.broken = f"{type(e).__name__}: {e} (command {self.seq}: {cmd})"
            raise
        if r.get("seq") != self.seq:
            self.broken = f"reply {r} to command {self.seq}"
            raise ValueError(f"reply {r} to command {self.seq}: the control port is out of step")
        return r["rc"], base64.b64decode(r["out"]).decode(errors="replace")


class Guest:
    """One QEMU microvm: the kernel from setup.sh, our initramfs, a virtio-net
    NIC on a stream socket, the control port on a socket we listen on.
    start_net(socket_path) starts what serves the NIC (abox-net or passt)
    and returns its Popen: both take exactly one VMM, so each boot gets its own."""

    def __init__(self, rig, initramfs, start_net):
        self.rig, self.initramfs, self.start_net = rig, initramfs, start_net
        self.qemu = None
        self.net = None
        self.ctl = None
        self.ready = None
        self.boots = 0

    def console(self, lines=15):
        try:
            with open(self.rig.path(f"console{self.boots}.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def _start(self):
        self.boots += 1
        ctl_path = self.rig.path(f"ctl{self.boots}.sock")
        net_path = self.rig.path(f"net{self.boots}.sock")
        self.net = self.start_net(net_path)
        self.ctl = GuestControl(ctl_path)
        append = " ".join(["console=ttyS0", "quiet", "panic=-1", f"tsc_early_khz={host_tsc_khz()}",
                           "abox.ctl=ctl", f"abox.cmd_timeout={CMD_TIMEOUT}"])
        cmd = ["qemu-system-x86_64", "-M", "microvm", "-accel", "tcg", "-m", str(GUEST_MEM_MIB), "-smp", "1",
               "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
               "-serial", f"file:{self.rig.path(f'console{self.boots}.log')}",
               "-netdev", f"stream,id=n0,server=off,addr.type=unix,addr.path={net_path}",
               "-device", "virtio-net-device,netdev=n0,mac=52:54:00:12:34:56",
               "-device", "virtio-serial-device",
               "-chardev", f"socket,id=c0,path={ctl_path},server=off",
               "-device", "virtserialport,chardev=c0,name=ctl",
               "-kernel", os.path.join(KERNEL_DIR, "vmlinux"), "-initrd", self.initramfs, "-append", append]
        # An empty namespace: the guest's only way out is the stream socket.
        self.qemu = self.rig.spawn(f"qemu{self.boots}", cmd, ns=self.rig.guest)
        start = time.monotonic()
        self.ctl.accept(timeout=15)
        self.ready = self.ctl.read_line(timeout=max(1, BOOT_TIMEOUT - (time.monotonic() - start)))
        return time.monotonic() - start

    def _stop(self):
        if self.ctl is not None:
            self.ctl.close()
        for p in (self.qemu, self.net):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=10)

    def boot(self):
        """Boots, retrying once (QEMU and the network side both anew) when the
        kernel hung before /init: TCG's rare early hang. Returns (seconds to
        ready, note)."""
        try:
            return self._start(), ""
        except (TimeoutError, EOFError, OSError, ValueError) as e:
            first = f"{type(e).__name__}: {e}"
            if self.qemu is None:
                raise
            if "init:" in self.console(1000):
                raise RuntimeError(f"/init started but did not get ready ({first}); console:\n{self.console()}")
            if self.qemu.poll() is not None:
                raise RuntimeError(f"qemu exited {self.qemu.returncode} ({first}):\n"
                                   f"{self.rig.log_tail(f'qemu{self.boots}')}{self.console()}")
            self._stop()
        try:
            secs = self._start()
        except (TimeoutError, EOFError, OSError, ValueError) as e:
            raise RuntimeError(f"the boot hung before /init ({first}) and the retry failed too: "
                               f"{type(e).__name__}: {e}; console:\n{self.console()}") from None
        return secs, f"retried: the first boot hung before /init ({first})"

    def poweroff(self):
        rc, _ = self.ctl.run("poweroff", timeout=10)
        try:
            return self.qemu.wait(timeout=POWEROFF_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None


# -- the network in front of the guest ------------------------------------------------

def start_abox_net(rig, abox, net_socket):
    """abox-net run --stream in outside; returns once it printed 'ready'."""
    return rig.start_abox_net(abox, POLICY, "--ipv6", "nd", link=["--stream", net_socket])


def prepare_passt(rig):
    """What passt needs in outside, once. passt maps the gateway's address to
    the host's loopback, so the guest's DNS (to the gateway) reaches a plain
    relay to nsd on 127.0.0.1:53 there."""
    relay = rig.spawn("dns-relay", [sys.executable, nr.__file__, "dns-relay", "127.0.0.1", "53", NS_ADDR, "53"],
                      ns=rig.outside)
    rig.wait_for("dns relay", lambda: rig.listening(rig.outside, 53, "t"), proc=relay, log="dns-relay")
    # passt takes its outbound interface from the default route, which the
    # rig leaves out on purpose: this one ends in inet, which has no route
    # further, so nothing still leaves the rig.
    rig.ip("route", "add", "default", "via", nr.INET_LINK, ns=rig.outside)


def start_passt(rig, net_socket):
    """passt in outside, giving the same lease as abox-net. It filters nothing."""
    # Not -d: this passt (Debian 12) crashes printing a TCP debug line.
    p = rig.spawn("passt", ["passt", "-f", "-q", "-e", "--runas", "0", "-4", "-s", net_socket,
                            "-a", nr.GUEST_ADDR, "-n", str(nr.GUEST_PREFIX), "-g", nr.GATEWAY,
                            "-m", str(nr.GUEST_MTU), "-D", nr.GATEWAY, "--no-ndp", "--no-dhcpv6"], ns=rig.outside)
    rig.wait_for("passt", lambda: os.path.exists(net_socket), proc=p, log="passt")
    return p


# -- the checks -------------------------------------------------------------------------

class Checks:
    def __init__(self, guest, control):
        self.guest, self.control = guest, control
        self.passed = self.failed = 0
        self.expected = {}  # what -> (kind, {field: prefix}): events abox-net must have written

    def report(self, name, ok, note=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}{f' ({note})' if note else ''}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}: {note}", flush=True)

    def check(self, name, fn):
        try:
            self.report(name, True, fn() or "")
        except Exception as e:  # noqa: BLE001 - report and go on
            self.report(name, False, f"{type(e).__name__}: {e}")

    def expect(self, what, kind, **fields):
        self.expected[what] = (kind, fields)

    def attack(self, what, blocked, got_through, detail):
        """Behind abox-net an attack must be blocked; behind passt it must get
        through, or the check proves nothing."""
        if self.control:
            assert got_through, f"{what}: did not get through passt, so this check proves nothing: {detail}"
        else:
            assert blocked, f"{what}: not refused: {detail}"

    def sh(self, cmd):
        return self.guest.ctl.run(cmd)


def dhcp_gives_the_fixed_lease(c):
    assert c.guest.ready.get("dhcp") == 0, f"udhcpc failed: {c.guest.ready}; console:\n{c.guest.console()}"
    rc, out = c.sh("cat /run/lease.env")
    assert rc == 0, f"no lease recorded: {out}"
    lease = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    want = {"ip": nr.GUEST_ADDR, "mask": str(nr.GUEST_PREFIX), "router": nr.GATEWAY, "dns": nr.GATEWAY,
            "mtu": str(nr.GUEST_MTU)}
    wrong = {k: (lease.get(k), v) for k, v in want.items() if lease.get(k, "").strip() != v}
    assert not wrong, f"lease differs (got, want): {wrong}"
    # What the interface really has, not only what the server said.
    rc, out = c.sh("ip -4 -o addr show dev eth0; ip -4 route; cat /sys/class/net/eth0/mtu; cat /etc/resolv.conf")
    assert rc == 0, out
    assert f"inet {nr.GUEST_ADDR}/{nr.GUEST_PREFIX}" in out, out
    assert f"default via {nr.GATEWAY} dev eth0" in out, out
    assert f"\n{nr.GUEST_MTU}\n" in out, out
    assert f"nameserver {nr.GATEWAY}" in out, out
    return f"lease {lease.get('lease')} s from {lease.get('serverid')}"


def gateway_answers_ping(c):  # abox-net only: passt (Debian 12) does not answer these
    rc, out = c.sh(f"ping -c 2 -W 3 {nr.GATEWAY}")
    assert rc == 0 and " 0% packet loss" in out, f"rc {rc}: {out}"


def guest_configures_ipv6_by_slaac_without_a_default_route(c):  # abox-net only (--ipv6 nd; issue 21)
    out = ""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rc, out = c.sh("ip -6 -o addr show dev eth0 scope global")
        if rc == 0 and "inet6 fd" in out and "/64" in out and "tentative" not in out:
            break
        time.sleep(0.5)
    assert "inet6 fd" in out and "/64" in out and "tentative" not in out, f"no SLAAC address in a ULA /64: {out!r}"
    rc, route = c.sh("ip -6 route show default")
    assert rc == 0 and route.strip() == "", f"an IPv6 default route while flows are not carried: {route!r}"
    return out.split()[3]


def allowed_name_resolves(c):
    rc, out = c.sh(f"nslookup -type=a {WEB}")
    assert rc == 0 and WEB_ADDR in out, f"nslookup {WEB}: rc {rc}: {out!r}"


def allowed_name_download_has_the_served_digest(c):
    start = time.monotonic()
    rc, out = c.sh(f"timeout 25 wget -q -O /tmp/blob http://{WEB}/blob.bin && wc -c </tmp/blob && sha256sum /tmp/blob"
                   " && rm /tmp/blob")
    secs = time.monotonic() - start
    assert rc == 0, f"wget: rc {rc}: {out}"
    size, digest = out.split()[0], out.split()[1]
    assert int(size) == BLOB_BYTES, f"got {size} bytes, nginx serves {BLOB_BYTES}"
    assert digest == BLOB_SHA, f"sha256 {digest}, nginx serves {BLOB_SHA}"
    c.expect(f"admit {WEB_ADDR}:80", "admit", dst=f"{WEB_ADDR}:80", name=WEB)
    return f"{BLOB_BYTES >> 20} MiB fetched and hashed in the guest in {secs:.1f} s"


def denied_name_does_not_resolve(c):
    rc, out = c.sh(f"nslookup -type=a {SECRET}")
    c.attack(f"resolving {SECRET}", rc != 0 and SECRET_ADDR not in out, rc == 0 and SECRET_ADDR in out,
             f"rc {rc}: {out.strip()}")
    c.expect(f"deny name {SECRET}", "deny", name=SECRET)
    answer = " ".join(line.strip() for line in out.splitlines() if "can't resolve" in line or "**" in line)
    allowed_name_resolves(c)  # the gate still answers allowed names
    return answer if not c.control else ""


def dns_to_another_resolver_gets_no_answer(c):
    start = time.monotonic()
    rc, out = c.sh(f"timeout 10 nslookup -type=a {WEB} {NS_ADDR}")
    secs = time.monotonic() - start
    c.attack(f"DNS straight to {NS_ADDR}", rc != 0 and WEB_ADDR not in out, rc == 0 and WEB_ADDR in out,
             f"rc {rc}: {out.strip()}")
    c.expect(f"deny {NS_ADDR}:53 udp", "deny", dst=f"{NS_ADDR}:53", proto="udp")
    return f"nslookup exit {rc} after {secs:.1f} s" if not c.control else ""


def direct_connection_to_unanswered_address_fails(c):
    start = time.monotonic()
    rc, out = c.sh(f"timeout 15 wget -q -O - http://{SECRET_ADDR}/index.html")
    secs = time.monotonic() - start
    c.attack(f"http to {SECRET_ADDR} by address", rc != 0 and TOKEN not in out, rc == 0 and TOKEN in out,
             f"rc {rc} after {secs:.1f} s: {out.strip()}")
    c.expect(f"deny {SECRET_ADDR}:80", "deny", dst=f"{SECRET_ADDR}:80")
    rc2, out2 = c.sh(f"timeout 15 wget -q -O - http://{WEB}/index.html")
    assert rc2 == 0 and out2 == INDEX, f"the allowed name broke afterwards: rc {rc2}: {out2}"
    return f"wget exit {rc} after {secs:.1f} s: {out.strip()}" if not c.control else ""


def events_show_the_admission_and_the_denials(path, expected):
    """Each event the checks expect is there (deny events with a reason), and
    nothing was admitted to the secret address."""
    events = []
    with open(path) as f:
        for line in f:
            if line.strip():
                events.append(json.loads(line))

    def has(kind, fields):
        return any(e.get("kind") == kind and (kind != "deny" or e.get("reason"))
                   and all(str(e.get(k, "")) == v for k, v in fields.items()) for e in events)

    missing = [what for what, (kind, fields) in expected.items() if not has(kind, fields)]
    admitted = [e for e in events if e.get("kind") == "admit" and str(e.get("dst", "")).startswith(SECRET_ADDR + ":")]
    assert not missing and not admitted, f"missing {missing}, admitted {admitted}; {len(events)} events in {path}"
    return f"{len(expected)} expected events"


# -- main ---------------------------------------------------------------------------------

def build_initramfs(rig):
    r = rig.run(["bash", BUILD_INITRAMFS, rig.dir, KERNEL_DIR], timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"build-initramfs.sh failed {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip().splitlines()[-1]


CASES = [dhcp_gives_the_fixed_lease, gateway_answers_ping, guest_configures_ipv6_by_slaac_without_a_default_route,
         allowed_name_resolves,
         allowed_name_download_has_the_served_digest, denied_name_does_not_resolve,
         dns_to_another_resolver_gets_no_answer, direct_connection_to_unanswered_address_fails]
# passt (Debian 12) does not answer the guest's pings to the gateway; it runs with --no-ndp
ABOX_ONLY = {gateway_answers_ping, guest_configures_ipv6_by_slaac_without_a_default_route}


def setup(rig, mode):
    rig.build_internet()
    rig.make_ca([WEB])
    rig.start_nsd(ZONE_RECORDS)
    rig.start_nginx({WEB: {"index.html": INDEX.encode(), "blob.bin": BLOB}}, extra_ports=())
    rig.add_netns(rig.guest)  # QEMU's: nothing in it but lo
    if mode == "control":
        prepare_passt(rig)


def run(rig, mode, abox):
    control = mode == "control"
    initramfs = build_initramfs(rig)
    guest = Guest(rig, initramfs, lambda path: start_passt(rig, path) if control else start_abox_net(rig, abox, path))
    c = Checks(guest, control)
    try:
        secs, note = guest.boot()
    except Exception as e:  # noqa: BLE001 - nothing else can run
        c.report("guest_boots_to_init_and_the_control_port", False, f"{type(e).__name__}: {e}")
        return c.passed, c.failed
    net = guest.net
    c.report("guest_boots_to_init_and_the_control_port", True,
             f"ready {secs:.1f} s after QEMU started, guest uptime {guest.ready.get('uptime')} s"
             + (f"; {note}" if note else ""))
    for fn in CASES:
        if not (control and fn in ABOX_ONLY):
            c.check(fn.__name__, lambda fn=fn: fn(c))

    def poweroff():
        rc = guest.poweroff()
        assert rc == 0, f"qemu exit status {rc}" if rc is not None else f"qemu still running {POWEROFF_TIMEOUT} s on"

    alive = net.poll() is None
    c.report(f"{'passt' if control else 'abox_net'}_ran_through_every_check", alive,
             "" if alive else f"exited {net.returncode}: {rig.log_tail('abox-net' if not control else 'passt')}")
    c.check("poweroff_on_the_control_port_ends_qemu", poweroff)
    if not control and alive and guest.qemu.poll() is not None:
        def exits():  # run_command.cc: "until the VM disconnects", status 0
            try:
                rc = net.wait(timeout=5)
            except subprocess.TimeoutExpired:
                raise AssertionError("still running 5 s after QEMU exited") from None
            assert rc == 0, f"exit status {rc}"

        c.check("abox_net_exits_0_when_the_vm_disconnects", exits)
        c.check("events_show_the_admission_and_the_denials",
                lambda: events_show_the_admission_and_the_denials(rig.path("events.jsonl"), c.expected))
    if c.failed:
        print("--- guest console (tail) ---\n" + guest.console(), end="")
        tail = rig.log_tail("passt" if control else "abox-net", 20)
        if tail:
            print(f"--- {'passt' if control else 'abox-net'} stderr (tail) ---\n" + tail, end="")
    return c.passed, c.failed


def main(argv):
    if not os.path.isfile(os.path.join(KERNEL_DIR, "vmlinux")):
        print(f"vm_e2e: no guest kernel in {KERNEL_DIR} (scripts/setup.sh fetches it)")
        return 1
    tools = ["ip", "nsd", "nginx", "dig", "openssl", "ss", "qemu-system-x86_64", "cpio", "gzip"]
    if "--passt" in argv:
        tools.append("passt")
    return nr.run_suite("vm_e2e", "vmt", tools, argv, CASES, setup, run, modes={"--passt": "control"}, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
