#!/usr/bin/env python3
"""End-to-end test of IPv6 flows through `abox-net run --ipv6 on --netns`
(issue 21). The rig's fake internet (netns_rig.py) gains IPv6: a /64 on the
outside<->inet veth and server addresses on inet's lo, every one inside the
rig's own namespaces. nsd answers A and AAAA for web.example.test (allowed,
port 80) and secret.example.test (not allowed); nginx listens on web's IPv4
and IPv6 addresses. The guest namespace configures itself by the kernel's
own SLAAC from abox-net's router advertisement, and its resolver is the DNS
gate on 10.0.2.2. Cases:
  - SLAAC gives the guest an address in the instance's ULA /64 and, with
    --ipv6 on, an IPv6 default route via fe80::1;
  - `curl -6` to the allowed name reaches nginx over IPv6 (nginx logs the
    request from abox-net's IPv6 address), and abox-net logs an "admit"
    event for the IPv6 destination;
  - `curl -4` to the same name still works, and plain curl (happy eyeballs;
    the guest's gai.conf sorts its ULA as global, see GAI_CONF) takes IPv6;
  - bulk over IPv6 at the tap's MTU of 1500: 8 MiB down (GET) and up (PUT,
    nginx's WebDAV) arrive whole, and as 64 KiB GSO packets each way (TSO6
    from the guest, GSO TCPv6 to it): the guest's eth0 counts fewer than
    1,500 packets for each, where MTU-sized segments would be 5,826 or more;
  - 8 MiB down over IPv6 and over IPv4 at MTU 1500: lwIP retransmits fewer
    than 5 times to the guest, by abox-net's counts
    (tcp_retransmit_timeouts, tcp_fast_retransmits) and by the guest
    kernel's (out-of-order and duplicate segments), and no frame to the
    guest is dropped; the retransmits of the server's own kernel TCP over
    the rig's veth are printed, not checked (not ours: docs/benchmarks.md);
  - the DNS gate answers on PREFIX::1 (RDNSS): `dig -6` AAAA of the allowed
    name over UDP and TCP, REFUSED for the not-allowed one;
  - UDP over IPv6 to the allowed name's AAAA on its UDP port reaches a UDP
    echo server in inet and back (an admit event); UDP to a direct address
    and to the allowed name on another port gets an ICMPv6 destination
    unreachable, administratively prohibited, at once (the guest's socket
    reports EACCES; scapy sees type 1 code 1), each a deny event;
  - a 3000-byte datagram from a host UDP server (web's address, both
    families) reaches the guest whole at --mtu 1500: in IP fragments, none
    of them dropped by the link as oversize;
  - echo over IPv6 (net.ipv4.ping_group_range set in abox-net's namespace,
    which ICMPv6 ping sockets obey too): `ping -6 -c 2` to the allowed
    name gets both replies from its AAAA (an admit event, proto "icmp");
    ping to a direct IPv6 address gets "Administratively prohibited" at
    once (a deny event);
  - the not-allowed name gets no address, and a direct connection to its
    IPv6 address (never answered) is refused at once (curl exit 7 < 2 s);
  - with the outside namespace's route to web's IPv6 address removed (the
    host has no IPv6 route there), `curl -6` is refused at its SYN (exit 7,
    a "no route" deny event), not reset after connecting or timed out, `curl -4` still works, and plain curl falls back to IPv4 at
    once;
  - stateless DHCPv6 (no DHCPv6 client is installed here, so the guest's
    kernel UDP socket on port 546 sends scapy-built messages to ff02::1:2
    port 547): an Information-Request gets a Reply from fe80::1 with the
    transaction id, the client id echoed and DNS servers = PREFIX::1; a
    Solicit gets nothing; the router advertisement sets O, not M;
  - abox-net's counters at exit: 2 TCP flows refused, 2 failed connects;
    3 UDP flows admitted, 3 refused; 1 echo flow admitted (2 replies), 1
    refused; 4 unreachables sent; no frame dropped as oversize; 1 DHCPv6
    answer, 1 ignored;
  - packet too big (a second abox-net, --mtu 1500): the guest ignores the
    router advertisement's MTU (accept_ra_mtu=0) and sets eth0's MTU to
    9000; 2000 bytes of UDP that may not be fragmented (PMTUDISC_DO, as
    `ping -M do` and QUIC's probes send; ping is not installed here) to
    PREFIX::1 port 53 are answered with ICMPv6 Packet Too Big: the next send
    fails with EMSGSIZE, the socket's path MTU and `ip -6 route get` say
    1500; the same to 10.0.2.2 with ICMP fragmentation needed; the counters
    at exit: 2 oversize frames dropped, 2 answers sent.
Usage: ipv6_flows_e2e.py PATH/TO/abox-net [--keep]
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process and namespace the test makes is
removed at the end (netns_rig.Rig), also on failure and on SIGINT/SIGTERM.
"""
import hashlib
import ipaddress
import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

WEB, SECRET = nr.fqdn("web"), nr.fqdn("secret")
BIG_BYTES = 8 << 20  # the bulk cases' file, each way
MTU = 1500  # the tap's: GSO and TSO matter only below about 32 KiB
# Public-looking IPv6 addresses (outside every reserved range, so the gate
# keeps them), which exist only inside the rig's namespaces.
OUTSIDE_LINK6 = "2a00:1450:4001:81a::1"
INET_LINK6 = "2a00:1450:4001:81a::2"
WEB6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
SECRET6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2d"
UNANSWERED6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2e"
# RFC 6724's default label table with the ULA prefix in the global label (1,
# not 13): the guest sorts IPv6 before IPv4 as a host with a global address
# would.
GAI_CONF = """label ::1/128 0
label ::/0 1
label 2002::/16 2
label ::/96 3
label ::ffff:0:0/96 4
label fec0::/10 5
label fc00::/7 1
label 2001:0::/32 7
"""
# Run in the guest: a UDP socket that forbids fragmentation (ping -M do's
# setting, and QUIC's for its path MTU probes) sends 2000 bytes three times,
# 0.3 s apart, to argv[2]:argv[3] over IPv4 or IPv6 (argv[1]); prints what
# each send did and the path MTU the kernel holds for the destination then.
PMTU_PROBE = r"""
import errno, socket, sys, time
v6 = sys.argv[1] == "6"
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
level = socket.IPPROTO_IPV6 if v6 else socket.IPPROTO_IP
s.setsockopt(level, 23 if v6 else 10, 2)  # IPV6_MTU_DISCOVER / IP_MTU_DISCOVER = PMTUDISC_DO
s.connect((sys.argv[2], int(sys.argv[3])))
said = []
for _ in range(3):
    try:
        s.send(b"x" * 2000)
        said.append("sent")
    except OSError as e:
        said.append(errno.errorcode.get(e.errno, str(e.errno)))
    time.sleep(0.3)
print(" ".join(said), "mtu", s.getsockopt(level, 24 if v6 else 14))  # IPV6_MTU / IP_MTU
"""
ECHO_PORT = 7007  # the UDP echo server's, allowed for web over UDP
NOT_ALLOWED_UDP_PORT = 7008
BIG_PORT = 7009  # the big-datagram server's, allowed for web over UDP
BIG_DATAGRAM = 3000  # bytes: longer than the link's MTU (1500), so it reaches the guest in fragments
POLICY = f"""# ipv6_flows_e2e.py: written by the test
[dns]
upstreams = ["{nr.ADDR['ns1']}:53"]
timeout_ms = 2000
[[allow]]
names = ["{WEB}"]
ports = [80]
[[allow]]
names = ["{WEB}"]
ports = [{ECHO_PORT}, {BIG_PORT}]
protocols = ["udp"]
[[allow]]
names = ["{WEB}"]
protocols = ["icmp"]
"""


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


def add_ipv6_internet(rig):
    """A /64 on the outside<->inet veth (no DAD: usable at once), the server
    addresses on inet's lo, a /128 route to each in outside."""
    for ns in (rig.outside, rig.inet):
        rig.run(["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0"], ns=ns, check=True)
    rig.ip("-6", "addr", "add", f"{OUTSIDE_LINK6}/64", "dev", rig.outside_veth, "nodad", ns=rig.outside)
    rig.ip("-6", "addr", "add", f"{INET_LINK6}/64", "dev", rig.inet_veth, "nodad", ns=rig.inet)
    for a in (WEB6, SECRET6, UNANSWERED6):
        rig.ip("-6", "addr", "add", f"{a}/128", "dev", "lo", ns=rig.inet)
        rig.ip("-6", "route", "add", f"{a}/128", "via", INET_LINK6, ns=rig.outside)


def start_nginx(rig):
    """nginx in inet: HTTP on port 80 of every address, both families."""
    d = rig.path("nginx")
    os.makedirs(f"{d}/logs")
    os.makedirs(f"{d}/www")
    with open(f"{d}/www/index.html", "w") as f:
        f.write("hello over ipv6 or ipv4\n")
    with open(f"{d}/www/big.bin", "wb") as f:
        f.write(os.urandom(BIG_BYTES))
    os.makedirs(f"{d}/www/up")
    conf = f"""daemon off;
master_process on;
user root;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {d}/logs/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 80;
    listen [::]:80 ipv6only=on;
    root {d}/www;
    location /up/ {{
      dav_methods PUT;
      client_max_body_size 16m;
    }}
  }}
}}
"""
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(conf)
    p = rig.spawn("nginx", ["nginx", "-p", d, "-c", f"{d}/nginx.conf", "-e", f"{d}/logs/error.log"], ns=rig.inet)
    rig.wait_for("nginx", lambda: rig.listening(rig.inet, 80), proc=p, log="nginx")
    return f"{d}/logs/access.log"


# The guest's UDP client: one datagram to (host, port) on a connected
# AF_INET6 socket, then what came back: the echo, or the error the kernel
# made of an ICMPv6 error (EACCES: destination unreachable, administratively
# prohibited, RFC 4443 code 1; see icmpv6_err_convert()), or a timeout.
UDP_CLIENT = r"""
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
addr = socket.getaddrinfo(host, port, socket.AF_INET6, socket.SOCK_DGRAM)[0][4]
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(3)
s.connect(addr)
s.send(b"ping over ipv6")
try:
    print("reply:" + s.recv(2048).decode())
except PermissionError:
    print("EACCES")
except ConnectionRefusedError:
    print("ECONNREFUSED")
except socket.timeout:
    print("timeout")
"""
# The same datagram sent by scapy, and the ICMPv6 message it drew (its type
# and code), as the guest's link saw it.
SCAPY_PROBE = r"""
import sys
from scapy.all import IPv6, UDP, ICMPv6DestUnreach, conf, sr1
conf.verb = 0
r = sr1(IPv6(dst=sys.argv[1]) / UDP(sport=40999, dport=int(sys.argv[2])) / b"probe", timeout=3, iface="eth0")
if r is None:
    print("none")
elif ICMPv6DestUnreach in r:
    print(f"unreachable type {r[ICMPv6DestUnreach].type} code {r[ICMPv6DestUnreach].code} from {r[IPv6].src}")
else:
    print("other " + r.summary())
"""
# A DHCPv6 exchange from the guest's own UDP socket on port 546 (the kernel
# picks eth0's link-local source), the message built and the answer read by
# scapy: "reply from ADDR xid XID dns A,B client_id_echoed BOOL", or "none".
DHCPV6_PROBE = r"""
import socket, sys
from scapy.layers.dhcp6 import (DHCP6_InfoRequest, DHCP6_Solicit, DHCP6_Reply, DHCP6OptClientId,
                                DHCP6OptOptReq, DHCP6OptElapsedTime, DHCP6OptDNSServers, DUID_LL)
duid = DUID_LL(lladdr="02:02:02:02:02:02")
kind = DHCP6_InfoRequest if sys.argv[1] == "info" else DHCP6_Solicit
msg = kind(trid=0x5A5A5A) / DHCP6OptClientId(duid=duid) / DHCP6OptOptReq(reqopts=[23, 24]) / DHCP6OptElapsedTime()
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", 546))
s.settimeout(2)
s.sendto(bytes(msg), ("ff02::1:2", 547, 0, socket.if_nametoindex("eth0")))
try:
    data, peer = s.recvfrom(2048)
except socket.timeout:
    print("none")
    sys.exit(0)
r = DHCP6_Reply(data)
dns = r[DHCP6OptDNSServers].dnsservers if DHCP6OptDNSServers in r else []
echoed = DHCP6OptClientId in r and bytes(r[DHCP6OptClientId].duid) == bytes(duid)
print(f"reply from {peer[0].split('%')[0]} type {data[0]} xid {r.trid:x} dns {','.join(dns)} client_id_echoed {echoed}")
"""
# A router solicitation from the guest's raw ICMPv6 socket (hop limit 255,
# the kernel sums it), and the M and O flags of the advertisement it drew:
# "flags M0 O1", or "none".
RA_FLAGS_PROBE = r"""
import socket, time
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
s.settimeout(1)
s.sendto(bytes([133, 0, 0, 0, 0, 0, 0, 0]), ("ff02::2", 0, 0, socket.if_nametoindex("eth0")))
deadline = time.monotonic() + 3
while time.monotonic() < deadline:
    try:
        data, peer = s.recvfrom(2048)
    except socket.timeout:
        continue
    if data[0] == 134 and len(data) >= 16:
        print(f"flags M{data[5] >> 7} O{(data[5] >> 6) & 1}")
        break
else:
    print("none")
"""
ECHO_SERVER = r"""
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("%s", %d))  # not "::": the answer must leave from the address asked
for _ in range(1000):
    data, peer = s.recvfrom(2048)
    s.sendto(b"echo:" + data, peer)
""" % (WEB6, ECHO_PORT)
# In inet: answers every datagram to web's IPv6 or IPv4 address on BIG_PORT
# with BIG_DATAGRAM bytes of a known pattern, from the address asked.
BIG_SERVER = r"""
import select, socket
socks = []
for family, addr in ((socket.AF_INET6, "%s"), (socket.AF_INET, "%s")):
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind((addr, %d))
    socks.append(s)
big = bytes(i * 7 %% 251 for i in range(%d))
for _ in range(1000):
    for s in select.select(socks, [], [])[0]:
        data, peer = s.recvfrom(2048)
        s.sendto(big, peer)
""" % (WEB6, nr.ADDR["web"], BIG_PORT, BIG_DATAGRAM)
# In the guest: one small datagram to (host, port) over IPv4 or IPv6
# (argv[3]), then what came back: "whole N" when it is the server's pattern,
# else its length, or "timeout".
BIG_CLIENT = r"""
import socket, sys
host, port, family = sys.argv[1], int(sys.argv[2]), socket.AF_INET6 if sys.argv[3] == "6" else socket.AF_INET
addr = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)[0][4]
s = socket.socket(family, socket.SOCK_DGRAM)
s.settimeout(3)
s.connect(addr)
s.send(b"big?")
try:
    data = s.recv(65536)
except socket.timeout:
    print("timeout")
    sys.exit(0)
print(("whole %d" if data == bytes(i * 7 % 251 for i in range(len(data))) else "wrong %d") % len(data))
"""


def udp_exchange(rig, host, port):
    started = time.monotonic()
    got = rig.run([sys.executable, "-c", UDP_CLIENT, host, str(port)], ns=rig.guest, timeout=15)
    return got.stdout.strip() or got.stderr.strip()[-200:], time.monotonic() - started


def dig6(rig, server, name, *extra):
    got = rig.run(["dig", "-6", f"@{server}", "AAAA", name, "+time=3", "+tries=1", *extra], ns=rig.guest, timeout=15)
    status = ""
    for line in got.stdout.splitlines():
        if "status:" in line:
            status = line.split("status:")[1].split(",")[0].strip()
    answers = [line.split()[-1] for line in got.stdout.splitlines()
               if line and not line.startswith(";") and "\tAAAA\t" in line.replace(" ", "\t")]
    return status, answers, got.stdout


def curl(rig, *args, timeout=10):
    started = time.monotonic()
    got = rig.run(["curl", "-sS", "--max-time", str(timeout), *args], ns=rig.guest, timeout=timeout + 5)
    return got, time.monotonic() - started


def events(rig):
    out = []
    try:
        with open(rig.path("events.jsonl")) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def eth0_packets(rig):
    """The guest's eth0 packet counts (rx, tx): a GSO packet counts once.
    (-1, -1) when eth0 cannot be read (abox-net gone with its tap): the
    case that asked then fails on its own, instead of the run stopping on a
    JSON error."""
    got = rig.run(["ip", "-j", "-s", "link", "show", "eth0"], ns=rig.guest, timeout=5)
    try:
        stats = json.loads(got.stdout)[0]["stats64"]
        return stats["rx"]["packets"], stats["tx"]["packets"]
    except (ValueError, IndexError, KeyError):
        return -1, -1


def tcp_counters(rig, ns):
    """The kernel's TCP counters in ns (/proc/net/snmp's Tcp and
    /proc/net/netstat's TcpExt lines), by name."""
    got = rig.run(["cat", "/proc/net/snmp", "/proc/net/netstat"], ns=ns, timeout=5)
    out, lines = {}, got.stdout.splitlines()
    for names, values in zip(lines[0::2], lines[1::2]):
        if names.startswith(("Tcp:", "TcpExt:")):
            out.update(zip(names.split()[1:], (int(v) for v in values.split()[1:])))
    return out


def abox_net_stats(rig, abox_net):
    """abox-net's counters from its stats socket (--stats-socket)."""
    got = rig.run([abox_net, "stats", rig.path("stats.sock"), "--json"], timeout=10)
    try:
        return json.loads(got.stdout)
    except ValueError:
        return {}


# lwIP's retransmissions to the guest, as abox-net counts them (by its timer;
# on three duplicate ACKs).
LWIP_RETRANSMITS = ("tcp_retransmit_timeouts", "tcp_fast_retransmits")
# The same seen from the guest, by its kernel: a frame to it lost on the
# tap arrives after later ones (TCPOFOQueue, the gap a retransmission
# fills); a retransmission of data it already had is a duplicate it answers
# with a D-SACK (TCPDSACKOldSent, TCPDSACKOfoSent; DelayedACKLost).
GUEST_RETRANSMIT_SIGNS = ("TCPOFOQueue", "TCPDSACKOldSent", "TCPDSACKOfoSent", "DelayedACKLost")
# The bound for each: a clean link shows none; one lost 64 KiB frame makes a
# retransmission and 15 out-of-order segments in the guest.
RETRANSMIT_BOUND = 5


def download_retransmit_case(rig, abox_net, r, family, want):
    """8 MiB down over IPv4 or IPv6 at MTU 1500: lwIP's side of the download
    (abox-net's tap to the guest) retransmits at most a few times, and no
    frame to the guest is dropped. The retransmits the server's own TCP
    makes (counted in inet, the rig's veth to abox-net's namespace) are
    the kernel's and only reported: the same veth at MTU 1500 reorders and
    spuriously retransmits without abox-net (docs/benchmarks.md)."""
    guest0, inet0, stats0 = tcp_counters(rig, rig.guest), tcp_counters(rig, rig.inet), abox_net_stats(rig, abox_net)
    got = rig.run(["sh", "-c", f"curl -sS -{family} --max-time 30 http://{WEB}/big.bin | sha256sum"],
                  ns=rig.guest, timeout=40)
    guest1, inet1, stats1 = tcp_counters(rig, rig.guest), tcp_counters(rig, rig.inet), abox_net_stats(rig, abox_net)
    signs = {k: guest1.get(k, 0) - guest0.get(k, 0) for k in GUEST_RETRANSMIT_SIGNS}
    lwip = {k: stats1.get(k, -1) - stats0.get(k, 0) for k in LWIP_RETRANSMITS}
    dropped = stats1.get("frames_dropped_send", -1) - stats0.get("frames_dropped_send", 0)
    server_retrans = inet1.get("RetransSegs", 0) - inet0.get("RetransSegs", 0)
    # Counted as the flow ends: by now it has, or is about to (curl is gone).
    host_ooo = stats1.get("host_tcp_out_of_order", 0) - stats0.get("host_tcp_out_of_order", 0)
    ok = got.returncode == 0 and got.stdout.split()[:1] == [want]
    r.case(f"8 MiB down over IPv{family} at MTU 1500: lwIP retransmits fewer than {RETRANSMIT_BOUND} times "
           "to the guest (abox-net's count, and the guest's out-of-order and duplicate segments), "
           "no frame to it dropped",
           ok and all(0 <= n < RETRANSMIT_BOUND for n in lwip.values()) and
           sum(signs.values()) < RETRANSMIT_BOUND and dropped == 0,
           f"exit {got.returncode}, abox-net {lwip}, guest {signs}, frames_dropped_send {dropped}")
    print(f"      (abox-net {lwip}, guest {signs}; the server's kernel retransmitted {server_retrans} segments "
          f"over the rig's veth, abox-net's host socket got {host_ooo} out of order: not ours)")


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def wait_for_slaac(rig, timeout=15):
    """The guest's global IPv6 addresses once SLAAC gave one and its IPv6
    default route once there is one (either may stay empty at the timeout)."""
    deadline = time.monotonic() + timeout
    addrs, route = [], ""
    while time.monotonic() < deadline and not (addrs and route):
        got = rig.run(["ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global"], ns=rig.guest, timeout=5)
        addrs = [line.split()[3] for line in got.stdout.splitlines() if "tentative" not in line]
        route = rig.run(["ip", "-6", "route", "show", "default"], ns=rig.guest, timeout=5).stdout.strip()
        time.sleep(0.2)
    return addrs, route


def gateway6_of(addrs):
    """PREFIX::1, the gateway's address in the guest's /64 (what the router
    advertisement's RDNSS names)."""
    return str(ipaddress.ip_network(addrs[0], strict=False).network_address + 1) if addrs else "::1"


def stop_and_read_counters(rig, p, marker):
    """Stops abox-net (SIGTERM, then SIGKILL after 10 s) and returns the
    counters it printed at exit: the last JSON line of its log holding
    `marker`, or None."""
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
    for line in reversed(rig.log_tail("abox-net", 200).splitlines()):
        if line.strip().startswith("{") and marker in line:
            return json.loads(line)
    return None


def counters_detail(c, keys):
    """What a failed counters case prints: those counters' values."""
    return str({k: (c or {}).get(k) for k in keys})


def curl_cases(rig, r, name4, name_plain, plain_ip, plain_within=None):
    """curl -4 to the allowed name works (case name4), and plain curl (happy
    eyeballs) reaches plain_ip, within plain_within seconds when given
    (case name_plain)."""
    got, took = curl(rig, "-4", f"http://{WEB}/")
    r.case(name4, got.returncode == 0 and "hello" in got.stdout, f"exit {got.returncode}: {got.stderr.strip()}")
    got, took = curl(rig, "-w", "%{remote_ip}", f"http://{WEB}/")
    r.case(name_plain, got.returncode == 0 and got.stdout.endswith(plain_ip) and
           (plain_within is None or took < plain_within),
           f"exit {got.returncode} in {took:.2f}s: {got.stdout[-60:]!r}")


def bulk_cases(rig, abox_net, r, www):
    """8 MiB each way over IPv6 at MTU 1500: whole, and in 64 KiB frames."""
    want = sha256_of(f"{www}/big.bin")
    segments = BIG_BYTES // (MTU - 60)  # what MTU-sized segments would take
    rx0, _ = eth0_packets(rig)
    got = rig.run(["sh", "-c", f"curl -sS -6 --max-time 30 http://{WEB}/big.bin | sha256sum"], ns=rig.guest,
                  timeout=40)
    rx1, _ = eth0_packets(rig)
    r.case("8 MiB down over IPv6 at MTU 1500 arrive whole",
           got.returncode == 0 and got.stdout.split()[:1] == [want], (got.stdout + got.stderr).strip()[-200:])
    r.case(f"... as GSO packets: fewer than 1,500 on the guest's eth0, not {segments:,} or more",
           0 <= rx0 <= rx1 and rx1 - rx0 < 1500, f"{rx1 - rx0} packets received ({rx0} -> {rx1})")
    for family in (6, 4):
        download_retransmit_case(rig, abox_net, r, family, want)
    _, tx0 = eth0_packets(rig)
    got = rig.run(["curl", "-sS", "-6", "--max-time", "30", "-T", f"{www}/big.bin", f"http://{WEB}/up/big.bin"],
                  ns=rig.guest, timeout=40)
    _, tx1 = eth0_packets(rig)
    put = f"{www}/up/big.bin"
    r.case("8 MiB up over IPv6 at MTU 1500 arrive whole",
           got.returncode == 0 and os.path.exists(put) and sha256_of(put) == want,
           f"exit {got.returncode}: {got.stderr.strip()[-200:]}")
    r.case(f"... as TSO segments: fewer than 1,500 from the guest's eth0, not {segments:,} or more",
           0 <= tx0 <= tx1 and tx1 - tx0 < 1500, f"{tx1 - tx0} packets sent ({tx0} -> {tx1})")


def cases(rig, abox_net, r):
    add_ipv6_internet(rig)
    rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()] +
                  [f"web IN AAAA {WEB6}", f"secret IN AAAA {SECRET6}"])
    access_log = start_nginx(rig)
    rig.add_guest()
    with open(f"/etc/netns/{rig.guest}/gai.conf", "w") as f:  # removed with the dir by Rig.close()
        f.write(GAI_CONF)
    p = rig.start_abox_net(abox_net, POLICY, "--instance", "v6flows", "--ipv6", "on", "--mtu", str(MTU),
                           "--stats-socket", rig.path("stats.sock"))

    addrs, route = wait_for_slaac(rig)
    r.case("SLAAC: an address in the instance's ULA /64",
           len(addrs) >= 1 and all(a.startswith("fd") and a.endswith("/64") for a in addrs), str(addrs))
    r.case("--ipv6 on: an IPv6 default route via fe80::1", "via fe80::1" in route, route)

    got, took = curl(rig, "-6", f"http://{WEB}/")
    r.case("curl -6 to the allowed name reaches nginx over IPv6",
           got.returncode == 0 and "hello over ipv6" in got.stdout,
           f"exit {got.returncode} in {took:.2f}s: {got.stderr.strip()}")
    with open(access_log) as f:
        log = f.read()
    r.case("nginx saw the request from abox-net's IPv6 address", OUTSIDE_LINK6 in log, log.strip()[-300:])
    admits = [e for e in events(rig) if e.get("kind") == "admit"]
    r.case("an admit event for the IPv6 destination",
           any(e.get("dst") == f"[{WEB6}]:80" and e.get("name") == WEB for e in admits),
           json.dumps(admits)[-400:])

    # From a ULA source, glibc's default RFC 6724 table sorts a global IPv6
    # destination after IPv4 (the ULA's label differs from the
    # destination's): a dual-stack client tries IPv4 first. The guest here
    # is told to treat its ULA as global (gai.conf), so that happy eyeballs
    # meets IPv6 first and its fallback below is tested.
    curl_cases(rig, r, "curl -4 to the same name still works",
               "plain curl (happy eyeballs, IPv6 sorted first) takes IPv6", WEB6)

    bulk_cases(rig, abox_net, r, os.path.join(os.path.dirname(os.path.dirname(access_log)), "www"))

    # The DNS gate over IPv6, on PREFIX::1 (what the router advertisement's
    # RDNSS names), UDP and TCP.
    gateway6 = gateway6_of(addrs)
    status, answers, out = dig6(rig, gateway6, WEB)
    r.case(f"dig -6 @{gateway6} AAAA of the allowed name answers", status == "NOERROR" and WEB6 in answers,
           out[-300:])
    status, answers, out = dig6(rig, gateway6, WEB, "+tcp")
    r.case("... and over TCP", status == "NOERROR" and WEB6 in answers, out[-300:])
    status, answers, out = dig6(rig, gateway6, SECRET)
    r.case("dig -6 of the not-allowed name is refused", status == "REFUSED" and not answers, out[-300:])

    # Stateless DHCPv6: the DNS server for a client that asks (the router
    # advertisement's O flag says to).
    probe = rig.run(["/usr/bin/python3", "-c", RA_FLAGS_PROBE], ns=rig.guest, timeout=30)
    r.case("the router advertisement sets O (other configuration by DHCPv6), not M",
           probe.stdout.strip() == "flags M0 O1", (probe.stdout.strip() or probe.stderr.strip())[-300:])
    probe = rig.run(["/usr/bin/python3", "-c", DHCPV6_PROBE, "info"], ns=rig.guest, timeout=30)
    r.case("DHCPv6 Information-Request: a Reply from fe80::1 naming PREFIX::1, the ids echoed",
           probe.stdout.strip() == f"reply from fe80::1 type 7 xid 5a5a5a dns {gateway6} client_id_echoed True",
           (probe.stdout.strip() or probe.stderr.strip())[-300:])
    probe = rig.run(["/usr/bin/python3", "-c", DHCPV6_PROBE, "solicit"], ns=rig.guest, timeout=30)
    r.case("DHCPv6 Solicit: no answer (no addresses to lease)", probe.stdout.strip() == "none",
           (probe.stdout.strip() or probe.stderr.strip())[-300:])

    # UDP over IPv6: the allowed name's AAAA on its UDP port reaches the echo
    # server; a direct address, and the allowed name on another port, get an
    # ICMPv6 unreachable (administratively prohibited) at once.
    rig.spawn("udp-echo", [sys.executable, "-c", ECHO_SERVER], ns=rig.inet)
    rig.wait_for("udp echo", lambda: rig.listening(rig.inet, ECHO_PORT, proto="u"), log="udp-echo")
    got, took = udp_exchange(rig, WEB, ECHO_PORT)
    r.case("UDP over IPv6 to the allowed name's AAAA reaches the echo server and back",
           got == "reply:echo:ping over ipv6", f"{got!r} in {took:.2f}s")
    r.case("... with an admit event for the IPv6 UDP destination",
           any(e.get("kind") == "admit" and e.get("proto") == "udp" and e.get("dst") == f"[{WEB6}]:{ECHO_PORT}"
               for e in events(rig)), "")
    got, took = udp_exchange(rig, SECRET6, ECHO_PORT)
    r.case("UDP to a direct IPv6 address: the guest's socket gets EACCES (ICMPv6 admin prohibited) at once",
           got == "EACCES" and took < 2, f"{got!r} in {took:.2f}s")
    got, took = udp_exchange(rig, WEB, NOT_ALLOWED_UDP_PORT)
    r.case("UDP to the allowed name on a port it does not allow: EACCES too", got == "EACCES",
           f"{got!r} in {took:.2f}s")
    probe = rig.run(["/usr/bin/python3", "-c", SCAPY_PROBE, SECRET6, str(ECHO_PORT)], ns=rig.guest, timeout=30)
    r.case("scapy sees the ICMPv6 destination unreachable, type 1 code 1, from the gateway",
           probe.stdout.strip().startswith("unreachable type 1 code 1 from "),
           (probe.stdout.strip() or probe.stderr.strip())[-300:])
    denies = [e for e in events(rig) if e.get("kind") == "deny" and e.get("proto") == "udp"]
    r.case("... each refusal a deny event", len(denies) >= 3 and
           any(e.get("dst") == f"[{SECRET6}]:{ECHO_PORT}" for e in denies), json.dumps(denies)[-300:])

    # A host datagram longer than the link's MTU reaches the guest in IP
    # fragments, which its kernel reassembles: one flow per family.
    rig.spawn("udp-big", [sys.executable, "-c", BIG_SERVER], ns=rig.inet)
    rig.wait_for("udp big", lambda: rig.listening(rig.inet, BIG_PORT, proto="u"), log="udp-big")
    for family in ("6", "4"):
        got = rig.run([sys.executable, "-c", BIG_CLIENT, WEB, str(BIG_PORT), family], ns=rig.guest, timeout=15)
        r.case(f"a {BIG_DATAGRAM}-byte UDP datagram from the host over IPv{family} reaches the guest whole "
               f"(--mtu {MTU}: in fragments)", got.stdout.strip() == f"whole {BIG_DATAGRAM}",
               (got.stdout.strip() or got.stderr.strip())[-300:])

    # Echo over IPv6: relayed through an ICMPv6 ping socket in abox-net's
    # namespace (the same sysctl governs them); a direct address refused.
    rig.run(["sysctl", "-qw", "net.ipv4.ping_group_range=0 2147483647"], ns=rig.outside, timeout=10, check=True)
    start = time.monotonic()
    got = rig.run(["ping", "-6", "-n", "-c", "2", "-i", "0.2", "-W", "2", WEB], ns=rig.guest, timeout=20)
    r.case("ping -6 to the allowed name gets both replies from its AAAA",
           got.returncode == 0 and "2 received" in got.stdout and f"from {WEB6}" in got.stdout,
           f"exit {got.returncode} in {time.monotonic() - start:.2f}s: {got.stdout[-300:]!r}")
    r.case("... with an admit event (proto icmp, dst the address alone)",
           any(e.get("kind") == "admit" and e.get("proto") == "icmp" and e.get("dst") == WEB6 and
               e.get("name") == WEB for e in events(rig)), "")
    start = time.monotonic()
    got = rig.run(["ping", "-6", "-n", "-c", "1", "-W", "2", SECRET6], ns=rig.guest, timeout=20)
    took = time.monotonic() - start
    r.case("ping -6 to a direct address: administratively prohibited at once",
           got.returncode != 0 and "Administratively prohibited" in got.stdout and took < 2,
           f"exit {got.returncode} in {took:.2f}s: {got.stdout[-300:]!r}")
    r.case("... with a deny event", any(e.get("kind") == "deny" and e.get("proto") == "icmp" and
                                        e.get("dst") == SECRET6 for e in events(rig)), "")

    got, took = curl(rig, "-6", f"http://{SECRET}/")
    r.case("the not-allowed name gets no address (curl exit 6)", got.returncode == 6,
           f"exit {got.returncode}: {got.stderr.strip()}")
    for what, addr in (("the not-allowed name's", SECRET6), ("a never-answered", UNANSWERED6)):
        got, took = curl(rig, f"http://[{addr}]/")
        r.case(f"a direct connection to {what} IPv6 address is refused at once",
               got.returncode == 7 and took < 2, f"exit {got.returncode} in {took:.2f}s: {got.stderr.strip()}")
    with open(access_log) as f:
        log = f.read()
    r.case("nginx saw nothing for the refused addresses", SECRET6 not in log and UNANSWERED6 not in log,
           log.strip()[-300:])

    # The host loses its IPv6 route to web: the guest's connection must fail
    # at once (a quick IPv4 fallback for happy eyeballs), not time out.
    rig.ip("-6", "route", "del", f"{WEB6}/128", ns=rig.outside)
    got, took = curl(rig, "-6", f"http://{WEB}/")
    r.case("no IPv6 route on the host: curl -6 is refused at its SYN (exit 7, not a reset after connecting)",
           got.returncode == 7 and took < 2, f"exit {got.returncode} in {took:.2f}s: {got.stderr.strip()}")
    denies = [e for e in events(rig) if e.get("kind") == "deny" and e.get("dst") == f"[{WEB6}]:80"]
    r.case("... with a deny event: no route", any("no route" in e.get("reason", "") for e in denies),
           json.dumps(denies)[-300:])
    curl_cases(rig, r, "... and curl -4 still works", "... and plain curl falls back to IPv4 at once",
               nr.ADDR["web"], plain_within=2)

    # abox-net's counters at exit: the two refusals, the two failed connects
    # (curl -6 and plain curl's IPv6 attempt without a route).
    c = stop_and_read_counters(rig, p, "tcp_refused")
    r.case("counters: 2 IPv6 TCP flows refused, 2 failed connects, nothing spoofed or malformed",
           c is not None and c.get("tcp_refused") == 2 and c.get("connect_failed") == 2 and
           c.get("frames_dropped_spoofed") == 0 and c.get("frames_dropped_malformed") == 0,
           counters_detail(c, ("tcp_admitted", "tcp_refused", "connect_failed",
                                               "frames_dropped_ipv6", "frames_dropped_spoofed")))
    r.case("counters: 3 UDP flows admitted (echo, big over IPv6 and IPv4), 3 refused; 1 echo flow, 1 refused; "
           "each refusal an unreachable",
           c is not None and c.get("udp_admitted") == 3 and c.get("udp_refused") == 3 and
           c.get("echo_admitted") == 1 and c.get("echo_replies") == 2 and c.get("echo_refused") == 1 and
           c.get("icmp_unreachable_sent") == 4 and c.get("icmp_unreachable_limited") == 0,
           counters_detail(c, ("udp_admitted", "udp_refused", "echo_admitted", "echo_replies",
                                               "echo_refused", "icmp_unreachable_sent", "icmp_unreachable_limited")))
    r.case("counters: no frame dropped as oversize (the big datagrams went in fragments)",
           c is not None and c.get("frames_dropped_oversize") == 0, str((c or {}).get("frames_dropped_oversize")))
    r.case("counters: 1 DHCPv6 answer, 1 ignored (the Solicit), none malformed or rate-limited",
           c is not None and c.get("dhcpv6_answered") == 1 and c.get("dhcpv6_ignored") == 1 and
           c.get("dhcpv6_malformed") == 0 and c.get("dhcpv6_rate_limited") == 0,
           counters_detail(c, ("dhcpv6_answered", "dhcpv6_ignored", "dhcpv6_malformed",
                                               "dhcpv6_rate_limited")))


def too_big_cases(rig, abox_net, r):
    """A guest whose interface MTU (9000) is larger than the link's (1500):
    the answers to its oversize frames lower its path MTU (issue 21)."""
    # The tap abox-net makes takes the namespace's defaults: the router
    # advertisement's MTU option (1500) is ignored, as a guest that ignores
    # it would.
    rig.run(["sysctl", "-qw", "net.ipv6.conf.default.accept_ra_mtu=0"], ns=rig.guest, check=True)
    p = rig.start_abox_net(abox_net, POLICY, "--instance", "v6ptb", "--ipv6", "on", "--mtu", "1500")
    addrs, _ = wait_for_slaac(rig)
    gateway6 = gateway6_of(addrs)
    rig.ip("link", "set", "eth0", "mtu", "9000", ns=rig.guest)
    mtu = rig.run(["ip", "-o", "link", "show", "dev", "eth0"], ns=rig.guest, timeout=5).stdout
    r.case("packet too big: the guest's eth0 has MTU 9000 (the link's is 1500)", " mtu 9000 " in mtu, mtu.strip())

    for family, gateway, probe_case, route_case in (
            ("6", gateway6, f"UDP with DF (IPV6_PMTUDISC_DO), 2000 bytes to [{gateway6}]:53: the path MTU drops "
             "to 1500 (ICMPv6 Packet Too Big), the next send fails with EMSGSIZE",
             "... and ip -6 route get shows mtu 1500 afterwards"),
            ("4", nr.GATEWAY, f"UDP with DF, 2000 bytes to {nr.GATEWAY}:53: the path MTU drops to 1500 (ICMP "
             "fragmentation needed), the next send fails with EMSGSIZE",
             "... and ip route get shows mtu 1500 afterwards")):
        got = rig.run(["/usr/bin/python3", "-c", PMTU_PROBE, family, gateway, "53"], ns=rig.guest, timeout=30)
        r.case(probe_case, got.stdout.strip() == "sent EMSGSIZE EMSGSIZE mtu 1500",
               (got.stdout + got.stderr).strip()[-300:])
        route = rig.run(["ip", f"-{family}", "route", "get", gateway], ns=rig.guest, timeout=5).stdout
        r.case(route_case, "mtu 1500" in route, route.strip())

    c = stop_and_read_counters(rig, p, "icmp_packet_too_big_sent")
    r.case("counters: one packet too big per oversize frame (one per family), none held back",
           c is not None and c.get("icmp_packet_too_big_sent") == 2 and c.get("frames_dropped_oversize") == 2
           and c.get("icmp_packet_too_big_limited") == 0,
           counters_detail(c, ("icmp_packet_too_big_sent", "icmp_packet_too_big_limited",
                                               "frames_dropped_oversize")))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__)
        return 2
    abox_net = os.path.abspath(args[0])
    r = Results()
    rig = nr.Rig(tag="v6f")
    rig.unwind_on_signals()
    try:
        rig.build_internet()
        cases(rig, abox_net, r)
        too_big_cases(rig, abox_net, r)
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
