#!/usr/bin/env python3
"""End-to-end test of `abox-net run --stream PATH` without QEMU: the test is
the VMM. It connects to abox-net's unix socket and speaks QEMU's -netdev
stream framing (4-byte big-endian length, then the Ethernet frame), as a
guest's NIC would, with frames built by scapy. abox-net runs in the rig's
outside namespace with the rig's fake internet (nsd for example.test).

Cases, in order, on one connection:
  - the socket: mode 0600; a second abox-net on the same path is refused
    (exit 3) and does not steal the first one's VMM slot;
  - DHCP: DISCOVER gets an OFFER of 10.0.2.15 with server id, mask, router,
    DNS, lease/T1/T2 and MTU; REQUEST gets an ACK; a REQUEST for another
    address gets a NAK; a malformed message (hlen 17) gets nothing;
  - ARP for the gateway is answered with the gateway's MAC;
  - DNS over UDP to the gateway: an allowed name is answered with its nsd
    address, a denied name is refused (no address);
  - the VMM disconnects: abox-net exits 0 within 5 s, with a "link" event,
    the socket file is gone, and its counters say 1 offer, 1 ack, 1 nak,
    1 malformed.
Then a real DHCP client: busybox udhcpc in a guest namespace behind
`abox-net run --netns` (the same DHCP server, over a tap) gets the lease.
Then the kernel's SLAAC behind `abox-net run --ipv6 nd --netns` (issue 21):
an address in the instance's ULA /64, no IPv6 default route, curl -6 to a
global address failing at once, the gateway's addresses resolved to its MAC.

Usage: stream_dhcp_e2e.py PATH/TO/abox-net [--keep]
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process and namespace the test makes is
removed at the end (netns_rig.Rig), also on failure and on SIGINT/SIGTERM.
"""
import ipaddress
import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import time
import warnings

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

warnings.filterwarnings("ignore", module="scapy")  # its crypto deprecation notes
try:
    from scapy.all import ARP, BOOTP, DHCP, DNS, DNSQR, IP, UDP, Ether, raw  # noqa: E402
except ImportError:  # Debian's python3-scapy, when another python runs the test
    sys.path.append("/usr/lib/python3/dist-packages")
    from scapy.all import ARP, BOOTP, DHCP, DNS, DNSQR, IP, UDP, Ether, raw  # noqa: E402

WEB, SECRET = nr.fqdn("web"), nr.fqdn("secret")
GUEST_MAC = "02:00:00:00:00:15"
GATEWAY_MAC = "52:55:0a:00:02:02"  # abox-net's default
WAIT = 5.0  # every answer must come well within this

POLICY = f"""# stream_dhcp_e2e.py: written by the test
[dns]
upstreams = ["{nr.ADDR['ns1']}:53"]
timeout_ms = 2000

[[allow]]
names = ["{WEB}"]
ports = [80]
"""


class Vmm:
    """The VMM's end of the stream socket: frames in QEMU's framing."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(WAIT)
        self.s.connect(path)
        self.buf = b""

    def send(self, pkt):
        b = raw(pkt)
        self.s.sendall(struct.pack("!I", len(b)) + b)

    def next_frame(self, want, timeout=WAIT):
        """The next frame for which want(Ether) is true; None after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            while len(self.buf) >= 4:
                n = struct.unpack("!I", self.buf[:4])[0]
                if len(self.buf) < 4 + n:
                    break
                frame, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                e = Ether(frame)
                if want(e):
                    return e
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.s.settimeout(left)
            try:
                chunk = self.s.recv(1 << 16)
            except socket.timeout:
                return None
            if not chunk:
                return None
            self.buf += chunk

    def close(self):
        self.s.close()


def dhcp_options(pkt):
    return {o[0]: o[1] for o in pkt[DHCP].options if isinstance(o, tuple)}


def bootp_request(xid, options, hlen=6, flags=0):
    chaddr = bytes.fromhex(GUEST_MAC.replace(":", ""))
    return (Ether(src=GUEST_MAC, dst="ff:ff:ff:ff:ff:ff") / IP(src="0.0.0.0", dst="255.255.255.255") /
            UDP(sport=68, dport=67) / BOOTP(chaddr=chaddr, xid=xid, hlen=hlen, flags=flags) /
            DHCP(options=options))


def is_dhcp_reply(xid):
    return lambda e: e.haslayer(BOOTP) and e[BOOTP].op == 2 and e[BOOTP].xid == xid


def dns_query(vmm, name, qid):
    vmm.send(Ether(src=GUEST_MAC, dst=GATEWAY_MAC) / IP(src=nr.GUEST_ADDR, dst=nr.GATEWAY) /
             UDP(sport=40000 + qid, dport=53) / DNS(id=qid, rd=1, qd=DNSQR(qname=name, qtype="A")))
    return vmm.next_frame(lambda e: e.haslayer(DNS) and e[DNS].id == qid and e[DNS].qr == 1)


def a_records(dns):
    out = []
    for i in range(dns.ancount or 0):
        rr = dns.an[i]
        if rr.type == 1:
            out.append(rr.rdata)
    return out


class Results:
    def __init__(self):
        self.passed = self.failed = 0

    def case(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok    {name}")
        else:
            self.failed += 1
            print(f"FAIL  {name}{': ' + detail if detail else ''}")
        sys.stdout.flush()


def wait_ready(rig, proc, out_path, timeout=15):
    def ready():
        try:
            with open(out_path) as f:
                return any(line.startswith("ready") for line in f)
        except OSError:
            return False
    rig.wait_for("abox-net ready", ready, timeout=timeout, proc=proc, log="abox-net")


def counters_from(log_text):
    for line in reversed(log_text.splitlines()):
        line = line.strip()
        if line.startswith("{") and "dhcp_offers" in line:
            return json.loads(line)
    return None


def stream_cases(rig, abox_net, r):
    policy = rig.path("policy.toml")
    with open(policy, "w") as f:
        f.write(POLICY)
    sock, events, out = rig.path("net.sock"), rig.path("events.jsonl"), rig.path("abox-net.out")
    with open(out, "w") as stdout:
        p = rig.spawn("abox-net", [abox_net, "run", "--policy", policy, "--stream", sock, "--events", events],
                      ns=rig.outside, stdout=stdout)
    wait_ready(rig, p, out)
    ready = open(out).read()
    r.case("ready names the socket", f"ready stream={sock} " in ready, ready.strip())

    st = os.lstat(sock)
    r.case("socket is a unix socket of mode 0600", stat.S_ISSOCK(st.st_mode) and (st.st_mode & 0o777) == 0o600,
           oct(st.st_mode))

    second = rig.run([abox_net, "run", "--policy", policy, "--stream", sock], ns=rig.outside, timeout=15)
    r.case("a second abox-net on the live path is refused",
           second.returncode == 3 and "already listening" in second.stderr, f"{second.returncode} {second.stderr}")
    named = rig.run([abox_net, "run", "--policy", policy, "--stream", sock + ".x", "--ifname", "eth1"],
                    ns=rig.outside, timeout=15)
    r.case("--ifname with --stream is a usage error, not silently ignored",
           named.returncode == 2 and "--ifname" in named.stderr and not os.path.exists(sock + ".x"),
           f"{named.returncode} {named.stderr}")

    vmm = Vmm(sock)
    try:
        vmm.send(bootp_request(0x1001, [("message-type", "discover"), ("param_req_list", [1, 3, 6, 26, 51]),
                                        "end"]))
        offer = vmm.next_frame(is_dhcp_reply(0x1001))
        if offer is None:
            r.case("DISCOVER gets an OFFER", False, "no reply")
        else:
            o = dhcp_options(offer)
            want = {"message-type": 2, "server_id": nr.GATEWAY, "subnet_mask": "255.255.255.0",
                    "router": nr.GATEWAY, "name_server": nr.GATEWAY, "lease_time": 86400,
                    "renewal_time": 43200, "rebinding_time": 75600, "interface-mtu": nr.GUEST_MTU}
            wrong = {k: (o.get(k), v) for k, v in want.items() if o.get(k) != v}
            r.case("DISCOVER gets an OFFER of the fixed lease with every option",
                   offer[BOOTP].yiaddr == nr.GUEST_ADDR and not wrong and offer[Ether].src == GATEWAY_MAC,
                   f"yiaddr {offer[BOOTP].yiaddr}, wrong options {wrong}")

        vmm.send(bootp_request(0x1002, [("message-type", "request"), ("requested_addr", nr.GUEST_ADDR),
                                        ("server_id", nr.GATEWAY), "end"]))
        ack = vmm.next_frame(is_dhcp_reply(0x1002))
        r.case("REQUEST gets an ACK", ack is not None and dhcp_options(ack).get("message-type") == 5 and
               ack[BOOTP].yiaddr == nr.GUEST_ADDR and dhcp_options(ack).get("interface-mtu") == nr.GUEST_MTU,
               "no reply" if ack is None else str(dhcp_options(ack)))

        vmm.send(bootp_request(0x1003, [("message-type", "request"), ("requested_addr", "10.0.2.99"), "end"]))
        nak = vmm.next_frame(is_dhcp_reply(0x1003))
        r.case("REQUEST for another address gets a NAK",
               nak is not None and dhcp_options(nak).get("message-type") == 6 and nak[IP].dst == "255.255.255.255",
               "no reply" if nak is None else str(dhcp_options(nak)))

        vmm.send(bootp_request(0x1004, [("message-type", "discover"), "end"], hlen=17))
        junk = vmm.next_frame(is_dhcp_reply(0x1004), timeout=1.0)
        r.case("a malformed DISCOVER (hlen 17) gets nothing", junk is None)

        vmm.send(Ether(src=GUEST_MAC, dst="ff:ff:ff:ff:ff:ff") /
                 ARP(op=1, hwsrc=GUEST_MAC, psrc=nr.GUEST_ADDR, pdst=nr.GATEWAY))
        arp = vmm.next_frame(lambda e: e.haslayer(ARP) and e[ARP].op == 2 and e[ARP].psrc == nr.GATEWAY)
        r.case("ARP for the gateway is answered with its MAC", arp is not None and arp[ARP].hwsrc == GATEWAY_MAC,
               "no reply" if arp is None else arp[ARP].hwsrc)

        allowed = dns_query(vmm, WEB, 7)
        r.case("DNS for an allowed name is answered with its address",
               allowed is not None and allowed[DNS].rcode == 0 and nr.ADDR["web"] in a_records(allowed[DNS]),
               "no reply" if allowed is None else f"rcode {allowed[DNS].rcode} {a_records(allowed[DNS])}")
        denied = dns_query(vmm, SECRET, 8)
        r.case("DNS for a denied name is refused",
               denied is not None and denied[DNS].rcode in (3, 5) and not a_records(denied[DNS]),
               "no reply" if denied is None else f"rcode {denied[DNS].rcode} {a_records(denied[DNS])}")
    finally:
        vmm.close()

    try:
        code = p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        code = None
    r.case("the VMM leaving ends abox-net with status 0", code == 0, f"status {code}")
    r.case("the socket file is gone", not os.path.exists(sock))
    evs = []
    try:
        with open(events) as f:
            evs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        pass
    links = [e.get("reason", "") for e in evs if e.get("kind") == "link"]
    r.case("events: the VMM connected, then its side closed",
           any("connected" in x for x in links) and any("closed" in x for x in links), str(links))
    c = counters_from(rig.log_tail("abox-net", 50))
    want = {"dhcp_offers": 1, "dhcp_acks": 1, "dhcp_naks": 1, "dhcp_malformed": 1}
    r.case("counters: 1 offer, 1 ack, 1 nak, 1 malformed",
           c is not None and all(c.get(k) == v for k, v in want.items()),
           str({k: c.get(k) for k in want}) if c else "no counters")


def udhcpc_case(rig, abox_net, r):
    busybox = shutil.which("busybox")
    if busybox is None:
        r.case("busybox udhcpc gets the lease over a tap", False, "busybox is not installed")
        return
    rig.add_netns(rig.guest)
    out = rig.path("abox-net-tap.out")
    with open(out, "w") as stdout:
        p = rig.spawn("abox-net-tap", [abox_net, "run", "--policy", rig.path("policy.toml"),
                                       "--netns", f"/run/netns/{rig.guest}"], ns=rig.outside, stdout=stdout)
    wait_ready(rig, p, out)
    got = rig.run([busybox, "udhcpc", "-i", "eth0", "-n", "-q", "-t", "3", "-T", "2", "-s", "/bin/true"],
                  ns=rig.guest, timeout=20)
    text = got.stdout + got.stderr
    r.case("busybox udhcpc gets the lease over a tap",
           got.returncode == 0 and f"lease of {nr.GUEST_ADDR} obtained from {nr.GATEWAY}" in text and
           "lease time 86400" in text, text.strip())


def slaac_case(rig, abox_net, r):
    """Issue 21: the Linux kernel's own SLAAC against `--ipv6 nd` over a tap.
    The gateway answers router and neighbour solicitations; the guest gets an
    address in the instance's ULA /64 and no IPv6 default route, so a
    connection to a global IPv6 address fails at once (IPv4 fallback), not
    after a timeout."""
    ns = rig.guest[:-1] + "6"
    rig.add_netns(ns)
    out = rig.path("abox-net-v6.out")
    with open(out, "w") as stdout:
        p = rig.spawn("abox-net-v6", [abox_net, "run", "--policy", rig.path("policy.toml"), "--instance", "v6",
                                      "--ipv6", "nd", "--netns", f"/run/netns/{ns}"], ns=rig.outside, stdout=stdout)
    wait_ready(rig, p, out)

    def global_addrs():
        got = rig.run(["ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global"], ns=ns, timeout=5)
        return [line.split()[3] for line in got.stdout.splitlines() if "tentative" not in line]
    deadline = time.monotonic() + 15
    addrs = []
    while time.monotonic() < deadline and not addrs:
        addrs = global_addrs()
        time.sleep(0.2)
    r.case("the kernel configures an address in the instance's ULA /64 by SLAAC",
           len(addrs) >= 1 and all(a.startswith("fd") and a.endswith("/64") for a in addrs), str(addrs))
    route = rig.run(["ip", "-6", "route", "show", "default"], ns=ns, timeout=5).stdout.strip()
    r.case("no IPv6 default route while flows are not carried", route == "", route)
    started = time.monotonic()
    got = rig.run(["curl", "-6", "-sS", "--max-time", "10", "http://[2606:4700::1111]/"], ns=ns, timeout=15)
    took = time.monotonic() - started
    r.case("curl -6 to a global address fails at once (no route), not after a timeout",
           got.returncode == 7 and took < 2, f"exit {got.returncode} in {took:.2f}s: {got.stderr.strip()}")
    # The gateway's addresses resolve to its MAC: fe80::1 from the router
    # advertisement's link-layer option, PREFIX::1 by a neighbour
    # solicitation, which a datagram to it makes the kernel send (the
    # datagram itself is not carried).
    gw_global = str(ipaddress.IPv6Network(addrs[0], strict=False).network_address + 1) if addrs else "fd00::1"
    rig.run([sys.executable, "-c", "import socket, sys; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)"
             ".sendto(b'x', (sys.argv[1], 9))", gw_global], ns=ns, timeout=5)
    neigh = ""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        neigh = rig.run(["ip", "-6", "neigh", "show", "dev", "eth0"], ns=ns, timeout=5).stdout
        lines = {line.split()[0]: line for line in neigh.splitlines() if line.strip()}
        if all(GATEWAY_MAC in lines.get(a, "") for a in ("fe80::1", gw_global)):
            break
        time.sleep(0.1)
    r.case("fe80::1 and PREFIX::1 resolve to the gateway's MAC",
           all(GATEWAY_MAC in lines.get(a, "") for a in ("fe80::1", gw_global)), neigh.strip())
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
    c = counters_from(rig.log_tail("abox-net-v6", 200))
    r.case("counters: router and neighbour advertisements sent, the guest's own solicitations ignored",
           c is not None and c.get("ndp_router_advertisements", 0) >= 1 and
           c.get("ndp_neighbour_advertisements", 0) >= 1 and c.get("ndp_not_for_gateway", 0) >= 1 and
           c.get("ndp_malformed") == 0 and c.get("frames_dropped_spoofed") == 0,
           str({k: v for k, v in (c or {}).items() if k.startswith("ndp_") or "ipv6" in k or "spoofed" in k}))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__)
        return 2
    abox_net = os.path.abspath(args[0])
    r = Results()
    rig = nr.Rig(tag="vm")
    rig.unwind_on_signals()
    try:
        rig.build_internet()
        rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()])
        stream_cases(rig, abox_net, r)
        udhcpc_case(rig, abox_net, r)
        slaac_case(rig, abox_net, r)
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
