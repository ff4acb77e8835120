#!/usr/bin/env python3
"""abox-helper end to end: the containment battery's "Lifecycle and helper"
class for the helper (THREATS.md: "the helper refuses a peer that is not the
operator, and every malformed field"), and its two jobs done for real.

The real abox-helper runs as root for an operator uid; clients run as that
uid (or as another one, or as root) in forked children that drop their
privileges. The client here is written from docs/helper.md alone, so the
format the page describes is the format the helper speaks. The uids are bare
numbers with no passwd entry: the test makes no account.

Each case asserts that the attack fails AND that the operator is still
served right after it. "Changes nothing" is checked where it would show: the
devices of every namespace involved, the helper's open fds, the cgroup
folders.

Taps: in network namespaces made by `unshare --user --net` run as the
operator (owned by them), as root and as another uid (not owned by the
operator), inspected by root with `nsenter ... ip -d -j link`.

Cgroups: the helper needs cgroup v2 with the memory, cpu and pids
controllers. Where this host has them, tests/helper/cgroup_test.cc runs here;
where it does not (a host that binds them to cgroup v1), the helper must say
so (`unavailable`, with the reason), and the same program runs inside a QEMU
VM (Debian's kernel from scripts/setup.sh, TCG, an initramfs of busybox, the
helper and the test, cgroup v2 mounted by its /init). The same VM runs
tests/helper/daemon_cgroup_test.cc: the daemon's instances in the helper's
cgroups (with `abox` itself in the initramfs).

Usage:
  helper_e2e.py PATH/TO/abox-helper PATH/TO/helper_cgroup_test PATH/TO/daemon_cgroup_test PATH/TO/abox
                [--only WORD[,WORD]] [--keep]
Prints "ok/FAIL name" per check and "N passed, N failed"; exits 1 on any
failure. Every wait is bounded; every process, namespace, device, cgroup
and file the test makes is removed at the end, also on failure, and the end
checks that nothing is left.
"""
import array
import ctypes
import errno
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KERNEL_DIR = os.environ.get("ABOX_GUEST_KERNEL_DIR", os.path.join(REPO, ".cache", "guest-kernel"))

OPERATOR, OTHER, GROUP = 64123, 64124, 64123
VERSION = b"abox-helper/1"
MAX_MESSAGE = 512
CONTROLLERS = ("memory", "cpu", "pids")

# -- the client, from docs/helper.md ---------------------------------------------


class Reply:
    def __init__(self, raw):
        if not raw.startswith(VERSION + b" ") or not raw.endswith(b"\n") or len(raw) > MAX_MESSAGE:
            raise ValueError(f"not a helper reply: {raw!r}")
        body = raw[len(VERSION) + 1:-1].decode("ascii")
        self.raw = raw
        if body == "ok" or body.startswith("ok "):
            self.ok, self.code, self.text = True, None, body[3:]
        elif body.startswith("error "):
            self.ok = False
            self.code, _, self.text = body[6:].partition(" ")
        else:
            raise ValueError(f"neither ok nor error: {raw!r}")

    def __repr__(self):
        return "ok" if self.ok else f"{self.code}: {self.text}"


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(10)
        self.s.connect(path)

    def send(self, message, fds=()):
        if fds:
            self.s.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            self.s.sendmsg([message])

    def recv(self):
        try:
            raw = self.s.recv(MAX_MESSAGE + 1)
        except ConnectionResetError:
            # The helper closed with our request unread: its reply is queued behind the error.
            raw = self.s.recv(MAX_MESSAGE + 1, socket.MSG_DONTWAIT)
        if not raw:
            raise EOFError("the helper closed the connection")
        return Reply(raw)

    def ask(self, message, fds=()):
        self.send(message, fds)
        return self.recv()

    def close(self):
        self.s.close()


def request(op, *fields):
    return b" ".join([VERSION, op.encode()] + [f.encode() if isinstance(f, str) else f for f in fields]) + b"\n"


HELLO = request("hello")

# -- processes as other users ------------------------------------------------------


def as_user(uid, gid, fn, timeout=60):
    """Runs fn() in a child with uid/gid (no supplementary groups) and returns
    what it returns (JSON-able). fds open here are inherited on purpose: that
    is how the tests hand a client an fd it could not open itself."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            if uid != 0:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            out = {"value": fn()}
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = {"error": f"{type(e).__name__}: {e}"}
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(w)
    data = b""
    deadline = time.monotonic() + timeout
    with os.fdopen(r, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise TimeoutError(f"client as uid {uid} ran past {timeout}s")
            chunk = os.read(f.fileno(), 65536)
            if not chunk:
                break
            data += chunk
    os.waitpid(pid, 0)
    out = json.loads(data or b'{"error": "the child wrote nothing"}')
    if "error" in out:
        raise RuntimeError(out["error"])
    return out["value"]


class Netns:
    """A network namespace held by `sleep` in it. owner: the uid that makes it
    (with its own user namespace) or 0 (a plain `unshare --net` by root)."""

    def __init__(self, owner):
        self.owner = owner
        if owner == 0:
            cmd = ["unshare", "--net", "sleep", "600"]
        else:
            cmd = ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups",
                   "unshare", "--user", "--map-root-user", "--net", "sleep", "600"]
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        self.path = f"/proc/{self.p.pid}/ns/net"
        mine = os.readlink("/proc/self/ns/net")
        for _ in range(250):
            try:
                with open(f"/proc/{self.p.pid}/comm") as f:
                    if f.read().strip() == "sleep" and os.readlink(self.path) != mine:
                        break
            except OSError:
                pass
            time.sleep(0.02)
        else:
            self.close()
            raise RuntimeError(f"no namespace for uid {owner}")

    def ip(self, *args, check=True):
        return subprocess.run(["nsenter", "-t", str(self.p.pid), "-n", "ip", *args], capture_output=True,
                              text=True, timeout=10, check=check)

    def links(self):
        return {x["ifname"]: x for x in json.loads(self.ip("-d", "-j", "link", "show").stdout)}

    def open(self):
        return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=10)


class Helper:
    def __init__(self, program, workdir, cgroup_root, socket_name="helper.sock", extra=()):
        self.socket = os.path.join(workdir, socket_name)
        self.log_path = os.path.join(workdir, socket_name + ".log")
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen([program, "--operator", str(OPERATOR), "--group", str(GROUP), "--socket",
                                   self.socket, "--cgroup-root", cgroup_root, *extra],
                                  stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        # Its log line, not the socket file: a stale file of that name may be
        # there before the helper replaces it (case_start_and_stop).
        for _ in range(500):
            if "listening on " in self.text() or self.p.poll() is not None:
                break
            time.sleep(0.02)
        if "listening on " not in self.text() or not os.path.exists(self.socket):
            raise RuntimeError(f"abox-helper did not start: {self.text()}")

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def fds(self):
        return len(os.listdir(f"/proc/{self.p.pid}/fd"))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait(timeout=10)
        self.log.close()
        return rc


# -- the suite -------------------------------------------------------------------


class Suite:
    def __init__(self, helper_bin, cgroup_test, daemon_cgroup_test, abox_bin, workdir):
        self.helper_bin, self.cgroup_test, self.dir = helper_bin, cgroup_test, workdir
        self.daemon_cgroup_test, self.abox_bin = daemon_cgroup_test, abox_bin
        self.passed = self.failed = 0
        self.namespaces = []
        self.cgroup2 = cgroup2_mount()
        self.cgroup_root = os.path.join(self.cgroup2 or "/nonexistent", f"abox-e2e-{os.getpid()}")
        self.helper = None
        self.mine = None

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")
        sys.stdout.flush()
        return ok

    def netns(self, owner):
        n = Netns(owner)
        self.namespaces.append(n)
        return n

    def start(self):
        self.helper = Helper(self.helper_bin, self.dir, self.cgroup_root)
        self.mine = self.netns(OPERATOR)

    def operator(self, fn, uid=OPERATOR, gid=GROUP):
        sock = self.helper.socket
        return as_user(uid, gid, lambda: fn(sock))

    def still_served(self, name):
        """The legitimate half of every case: the operator gets a hello answered."""
        r = self.operator(lambda s: repr(Conn(s).ask(HELLO)))
        self.check(f"{name}: operator still served", r.startswith("ok"), r)

    def close(self):
        for n in self.namespaces:
            n.close()
        if self.helper is not None and self.helper.p.poll() is None:
            self.helper.stop()


def cgroup2_mount():
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[2] == "cgroup2":
                return parts[1]
    return None


def host_has_controllers(mount):
    try:
        with open(os.path.join(mount, "cgroup.controllers")) as f:
            have = f.read().split()
    except (OSError, TypeError):
        return False
    return all(c in have for c in CONTROLLERS)


# -- cases ------------------------------------------------------------------------


def case_hello(t):
    r = t.operator(lambda s: Conn(s).ask(HELLO).raw.decode())
    want = "available" if host_has_controllers(t.cgroup2) else "unavailable"
    t.check("hello", r == f"abox-helper/1 ok version=1 cgroups={want}\n", r)
    st = os.stat(t.helper.socket)
    t.check("socket 0660 root:operator-group", (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o660, 0, GROUP),
            f"{oct(st.st_mode)} {st.st_uid}:{st.st_gid}")


def case_peers_not_the_operator(t):
    def first_reply(sock):
        c = Conn(sock)
        r = c.recv()  # the helper answers at once, before any request
        try:
            more = c.ask(HELLO)
            return [repr(r), f"served after the refusal: {more}"]
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as e:
            return [repr(r), f"closed ({type(e).__name__})"]

    r = t.operator(first_reply, uid=OTHER, gid=GROUP)
    t.check("another uid in the operator's group is refused",
            r[0] == "not-permitted: uid 64124 is not this helper's operator" and r[1].startswith("closed"), r)
    r = t.operator(first_reply, uid=0, gid=0)
    t.check("root is refused", r[0] == "not-permitted: uid 0 is not this helper's operator" and
            r[1].startswith("closed"), r)

    def outside(sock):
        try:
            Conn(sock)
            return "connected"
        except PermissionError:
            return "EACCES"
    r = t.operator(outside, uid=OTHER, gid=OTHER)
    t.check("a uid outside the group cannot reach the socket", r == "EACCES", r)
    t.check("the refusals are logged", "refused pid" in t.helper.text() and "uid 64124" in t.helper.text(),
            t.helper.text()[-500:])
    t.still_served("peers")


MALFORMED = [
    # (what, message, fds, code)
    ("another version", b"abox-helper/2 hello\n", 0, "version"),
    ("no version", b"hello\n", 0, "version"),
    ("NUL", b"abox-helper/1 hel\x00lo\n", 0, "malformed"),
    ("CR LF", b"abox-helper/1 hello\r\n", 0, "malformed"),
    ("tab", b"abox-helper/1\thello\n", 0, "malformed"),
    ("two spaces", b"abox-helper/1  hello\n", 0, "malformed"),
    ("trailing space", b"abox-helper/1 hello \n", 0, "malformed"),
    ("no LF", b"abox-helper/1 hello", 0, "malformed"),
    ("two LFs", b"abox-helper/1 hello\n\n", 0, "malformed"),
    ("byte >= 0x80", "abox-helper/1 héllo\n".encode(), 0, "malformed"),
    ("513 bytes", b"abox-helper/1 hello " + b"x" * 492 + b"\n", 0, "malformed"),
    ("64 KiB", b"x" * 65536, 0, "malformed"),
    ("unknown op", request("reboot"), 0, "unknown-op"),
    ("op in capitals", request("HELLO"), 0, "unknown-op"),
    ("hello with a field", request("hello", "x=1"), 0, "bad-field"),
    ("missing key", request("cgroup-create", "instance=a", "memory_max=max", "cpu_max=max"), 0, "bad-field"),
    ("unknown key", request("cgroup-delete", "name=a"), 0, "bad-field"),
    ("repeated key", request("cgroup-delete", "instance=a", "instance=a"), 0, "bad-field"),
    ("keys out of order", request("cgroup-create", "memory_max=max", "instance=a", "cpu_max=max", "pids_max=max"),
     0, "bad-field"),
    ("key without =", request("cgroup-delete", "instance"), 0, "bad-field"),
    ("leading zero", request("cgroup-create", "instance=a", "memory_max=01048576", "cpu_max=max", "pids_max=max"),
     0, "bad-field"),
    ("negative", request("cgroup-create", "instance=a", "memory_max=-1", "cpu_max=max", "pids_max=max"),
     0, "bad-field"),
    ("a unit suffix", request("cgroup-create", "instance=a", "memory_max=512M", "cpu_max=max", "pids_max=max"),
     0, "bad-field"),
    ("uint64 overflow", request("cgroup-create", "instance=a", "memory_max=18446744073709551616", "cpu_max=max",
                                "pids_max=max"), 0, "out-of-range"),
    ("memory below 1 MiB", request("cgroup-create", "instance=a", "memory_max=1048575", "cpu_max=max",
                                   "pids_max=max"), 0, "out-of-range"),
    ("memory above 1 TiB", request("cgroup-create", "instance=a", "memory_max=1099511627777", "cpu_max=max",
                                   "pids_max=max"), 0, "out-of-range"),
    ("cpu without a period", request("cgroup-create", "instance=a", "memory_max=max", "cpu_max=100000",
                                     "pids_max=max"), 0, "bad-field"),
    ("cpu period 0", request("cgroup-create", "instance=a", "memory_max=max", "cpu_max=1000/0", "pids_max=max"),
     0, "out-of-range"),
    ("cpu quota past 1024 CPUs", request("cgroup-create", "instance=a", "memory_max=max", "cpu_max=1024001/1000",
                                         "pids_max=max"), 0, "out-of-range"),
    ("pids_max 0", request("cgroup-create", "instance=a", "memory_max=max", "cpu_max=max", "pids_max=0"),
     0, "out-of-range"),
    ("pid 0", request("cgroup-move", "instance=a", "pids=0"), 0, "out-of-range"),
    ("pid past PID_MAX_LIMIT", request("cgroup-move", "instance=a", "pids=4194305"), 0, "out-of-range"),
    ("empty pid", request("cgroup-move", "instance=a", "pids=1,,2"), 0, "bad-field"),
    ("pid twice", request("cgroup-move", "instance=a", "pids=7,7"), 0, "bad-field"),
    ("65 pids", request("cgroup-move", "instance=a", "pids=" + ",".join(str(i) for i in range(1, 66))), 0,
     "out-of-range"),
]

NAMES = [
    # (what, name)
    ("slash", "a/b"), ("absolute path", "/etc"), ("dot dot", ".."), ("dot", "."), ("dot dot slash", "../x"),
    ("hidden", ".x"), ("option-like", "-rf"), ("empty", ""), ("colon", "a:b"), ("percent-encoded slash", "a%2fb"),
]


def case_malformed_fields(t):
    before = t.mine.links()

    def run(sock):
        c = Conn(sock)
        out = []
        for what, message, nfds, _ in MALFORMED:
            fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(nfds)]
            try:
                r = c.ask(message, fds)
            except (EOFError, OSError) as e:
                out.append(f"{type(e).__name__}")
                c = Conn(sock)
                continue
            finally:
                for fd in fds:
                    os.close(fd)
            out.append(r.code if not r.ok else "ok")
            # The same connection keeps working after each refusal.
            if not c.ask(HELLO).ok:
                out[-1] += " (hello failed after it)"
        return out
    got = t.operator(run)
    for (what, message, _, code), r in zip(MALFORMED, got):
        t.check(f"malformed: {what} -> {code}", r == code, r)
    t.check("malformed: nothing made", t.mine.links().keys() == before.keys(), t.mine.links().keys())
    t.still_served("malformed")


def case_names(t):
    fd = t.mine.open()
    before = t.mine.links()

    def run(sock):
        c = Conn(sock)
        out = []
        for _, name in NAMES:
            out.append([c.ask(request("cgroup-create", "instance=" + name, "memory_max=max", "cpu_max=max",
                                      "pids_max=max")).code,
                        c.ask(request("tap-create", "tap=" + name), [fd]).code])
        out.append([c.ask(request("cgroup-delete", "instance=" + "a" * 65)).code,
                    c.ask(request("tap-create", "tap=" + "t" * 16), [fd]).code])
        out.append([c.ask(b"abox-helper/1 cgroup-delete instance=a\x00b\n").code,
                    c.ask(b"abox-helper/1 tap-create tap=t\x00\n", [fd]).code])
        out.append([c.ask(request("cgroup-delete", "instance=" + "a" * 64)).code or "ok",
                    c.ask(request("tap-delete", "tap=" + "t" * 15), [fd]).code or "ok"])
        return out
    got = t.operator(run)
    os.close(fd)
    for (what, name), (cg, tap) in zip(NAMES, got):
        t.check(f"name {what} ({name!r}) refused", cg == "bad-name" and tap == "bad-name", [cg, tap])
    t.check("names over 64 / 15 characters refused", got[-3] == ["bad-name", "bad-name"], got[-3])
    t.check("names with NUL refused", got[-2] == ["malformed", "malformed"], got[-2])
    want64 = "not-found" if host_has_controllers(t.cgroup2) else "unavailable"
    t.check("names of 64 / 15 characters pass the name rules", got[-1] == [want64, "not-found"], got[-1])
    t.check("names: nothing made", t.mine.links().keys() == before.keys(), t.mine.links().keys())
    t.still_served("names")


def case_namespace_fds(t):
    root_ns, other_ns = t.netns(0), t.netns(OTHER)
    host = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    fds = {"root's": root_ns.open(), "another uid's": other_ns.open(), "the host's": host}
    pipe_r, pipe_w = os.pipe()
    userns = os.open(f"/proc/{t.mine.p.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    mine = t.mine.open()
    helper_fds = t.helper.fds()
    make = request("tap-create", "tap=abox-fd0")

    def run(sock):
        c = Conn(sock)
        out = {}
        for what, fd in fds.items():
            out[what] = repr(c.ask(make, [fd]))
        out["a pipe"] = repr(c.ask(make, [pipe_r]))
        out["a user namespace"] = repr(c.ask(make, [userns]))
        out["no fd"] = repr(c.ask(make))
        out["two fds"] = repr(c.ask(make, [mine, mine]))
        out["five fds"] = repr(c.ask(make, [mine] * 5))
        out["an fd with hello"] = repr(c.ask(HELLO, [mine]))
        return out
    got = t.operator(run)
    for fd in list(fds.values()) + [pipe_r, pipe_w, userns, mine]:
        os.close(fd)
    for what, owner in (("root's", 0), ("another uid's", OTHER), ("the host's", 0)):
        t.check(f"tap in {what} namespace refused",
                got[what].startswith(f"not-permitted: the network namespace belongs to uid {owner}, not to the "
                                     "operator"), got[what])
    t.check("a pipe as the namespace refused", got["a pipe"].startswith("bad-field: the fd is not a namespace"),
            got["a pipe"])
    t.check("a user namespace as the network namespace refused",
            got["a user namespace"] == "bad-field: the fd is a namespace, but not a network namespace",
            got["a user namespace"])
    t.check("tap-create without its fd refused", got["no fd"].startswith("malformed: tap-create takes 1 fd"),
            got["no fd"])
    t.check("tap-create with two fds refused", got["two fds"].endswith("2 came with it"), got["two fds"])
    t.check("five fds refused", got["five fds"] == "malformed: more than 4 fds came with it", got["five fds"])
    t.check("an fd with hello refused", got["an fd with hello"].startswith("malformed: hello takes 0 fds"),
            got["an fd with hello"])
    nowhere = [n for n, ns in (("root's", root_ns), ("another uid's", other_ns), ("operator's", t.mine))
               if "abox-fd0" in ns.links()]
    host_has = subprocess.run(["ip", "link", "show", "abox-fd0"], capture_output=True).returncode == 0
    t.check("no tap made in any namespace", not nowhere and not host_has, (nowhere, host_has))
    t.check("the helper closed every fd of the refused requests", t.helper.fds() == helper_fds,
            (helper_fds, t.helper.fds()))
    t.still_served("namespace fds")


def case_tap_lifecycle(t):
    fd = t.mine.open()
    t.mine.ip("link", "add", "abox-veth0", "type", "veth", "peer", "name", "abox-veth1")

    def ask(*reqs):
        def run(sock):
            c = Conn(sock)
            return [repr(c.ask(r, [fd])) for r in reqs]
        return t.operator(run)

    r = ask(request("tap-create", "tap=abox-tap0"))
    t.check("tap created", r == ["ok"], r)
    link = t.mine.links().get("abox-tap0", {})
    info = link.get("linkinfo", {})
    data = info.get("info_data", {})
    t.check("it is a tap", info.get("info_kind") == "tun" and data.get("type") == "tap", info)
    t.check("owned by the operator, persistent", data.get("user") in (OPERATOR, str(OPERATOR)) and
            data.get("persist") is True, data)
    t.check("brought up", "UP" in link.get("flags", []), link.get("flags"))
    r = ask(request("tap-create", "tap=abox-tap0"), request("tap-create", "tap=lo"),
            request("tap-create", "tap=abox-veth0"))
    t.check("an existing name is never taken over", r == [
        "exists: a device 'abox-tap0' already exists in that network namespace",
        "exists: a device 'lo' already exists in that network namespace",
        "exists: a device 'abox-veth0' already exists in that network namespace"], r)
    links = t.mine.links()
    t.check("lo and the veth are unchanged", links["lo"].get("link_type") == "loopback" and
            links["abox-veth0"]["linkinfo"]["info_kind"] == "veth", links.keys())
    r = ask(request("tap-delete", "tap=lo"), request("tap-delete", "tap=abox-veth0"))
    t.check("only taps are deleted", r == ["not-permitted: 'lo' is not a tap (its kind is none)",
                                           "not-permitted: 'abox-veth0' is not a tap (its kind is veth)"], r)
    t.check("lo and the veth are still there", {"lo", "abox-veth0"} <= t.mine.links().keys(), t.mine.links().keys())
    r = ask(request("tap-delete", "tap=abox-tap0"), request("tap-delete", "tap=abox-tap0"))
    t.check("tap deleted, then not found", r == ["ok", "not-found: no device 'abox-tap0' in that network namespace"],
            r)
    t.check("tap really gone", "abox-tap0" not in t.mine.links(), t.mine.links().keys())
    t.mine.ip("link", "del", "abox-veth0")
    os.close(fd)


def case_connection_limit(t):
    # The earlier cases' clients have exited; their connections close on the helper's next turn.
    time.sleep(0.3)

    def run(sock):
        conns = [Conn(sock) for _ in range(16)]
        for c in conns:
            c.ask(HELLO)
        extra = Conn(sock)
        first = repr(extra.recv())
        conns.pop().close()
        time.sleep(0.2)  # the helper notices the close on its next turn
        again = repr(Conn(sock).ask(HELLO))
        return [first, again]
    r = t.operator(run)
    t.check("a 17th connection is refused", r[0] == "limit: 16 connections are open already", r)
    t.check("a connection is served once one closed", r[1].startswith("ok"), r)
    t.still_served("connection limit")


def case_client_that_never_reads(t):
    def run(sock):
        c = Conn(sock)
        c.s.setblocking(False)

        def send_until_blocked():
            # Returns how many went, and whether the helper hung up on us.
            sent = 0
            for _ in range(100000):
                try:
                    c.s.send(HELLO)
                    sent += 1
                except BlockingIOError:
                    return sent, False
                except OSError:
                    return sent, True
            return sent, False

        sent, gone = send_until_blocked()
        # While that client's replies pile up, another one is answered.
        other = Conn(sock)
        t0 = time.monotonic()
        r = other.ask(HELLO)
        answered = [sent, r.ok, time.monotonic() - t0 < 5]
        # The replies only outgrow the helper's send buffer when the client
        # keeps asking: until then the helper may well have room for every
        # reply to what one send buffer held. So go on asking, never reading,
        # until the helper hangs up (bounded in count and time).
        deadline = time.monotonic() + 20
        rounds = 0
        while not gone and time.monotonic() < deadline and rounds < 10000:
            rounds += 1
            select.select([], [c.s], [], 0.2)
            more, gone = send_until_blocked()
            sent += more
        return answered + [sent, gone]
    r = t.operator(run)
    t.check("a client that never reads does not stall the helper", r[1] and r[2], r)
    t.check("the helper hangs up on it", r[4], r)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "does not read its replies: disconnected" not in t.helper.text():
        time.sleep(0.1)
    t.check("and logs why", "does not read its replies: disconnected" in t.helper.text(),
            t.helper.text()[-300:])


def case_cgroups(t):
    if host_has_controllers(t.cgroup2):
        for program in (t.cgroup_test, t.daemon_cgroup_test):
            r = subprocess.run([program, "--gtest_color=no"], capture_output=True, text=True, timeout=600,
                               env=dict(os.environ, ABOX_HELPER=t.helper_bin, ABOX_BIN=t.abox_bin,
                                        ABOX_CGROUP_PARENT=t.cgroup2))
            t.check(f"cgroups for real on this host ({os.path.basename(program)})", r.returncode == 0,
                    r.stdout[-3000:])
        return
    reason = t.operator(lambda s: repr(Conn(s).ask(request("cgroup-create", "instance=a", "memory_max=max",
                                                           "cpu_max=max", "pids_max=max"))))
    t.check("without cgroup v2 controllers the helper says so",
            reason.startswith("unavailable: ") and "controller in cgroup v2" in reason, reason)
    t.check("and makes no cgroup root", not os.path.exists(t.cgroup_root), t.cgroup_root)
    ok, detail = run_cgroup_test_in_vm(t)
    t.check("cgroups for real in a VM with cgroup v2 (helper_cgroup_test, daemon_cgroup_test)", ok, detail)


def case_start_and_stop(t):
    other = Helper(t.helper_bin, t.dir, "none", socket_name="second.sock")
    try:
        third = subprocess.run([t.helper_bin, "--operator", str(OPERATOR), "--group", str(GROUP),
                                "--socket", other.socket, "--cgroup-root", "none"],
                               capture_output=True, text=True, timeout=10)
        t.check("a second helper on a live socket is refused",
                third.returncode == 3 and "already listens" in third.stderr, third.stderr)
    finally:
        rc = other.stop()
    t.check("SIGTERM: exit 0 and the socket removed", rc == 0 and not os.path.exists(other.socket), rc)
    # A stale socket file (no one listening) is replaced.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stale.bind(other.socket)
    stale.close()
    again = Helper(t.helper_bin, t.dir, "none", socket_name="second.sock")
    served = t.operator(lambda s: repr(Conn(again.socket).ask(HELLO)))
    t.check("a stale socket is replaced", served.startswith("ok"), served)
    again.stop()
    r = subprocess.run([t.helper_bin, "--operator", "0", "--group", "0"], capture_output=True, text=True,
                       timeout=10)
    t.check("root as the operator is a usage error", r.returncode == 2 and "must not be root" in r.stderr,
            r.stderr)
    r = subprocess.run(["setpriv", f"--reuid={OPERATOR}", f"--regid={GROUP}", "--clear-groups", t.helper_bin,
                        "--operator", str(OPERATOR), "--group", str(GROUP), "--socket",
                        os.path.join(t.dir, "x.sock")], capture_output=True, text=True, timeout=10)
    t.check("not root: exit 3", r.returncode == 3 and "must run as root" in r.stderr, r.stderr)


CASES = [case_hello, case_peers_not_the_operator, case_malformed_fields, case_names, case_namespace_fds,
         case_tap_lifecycle, case_connection_limit, case_client_that_never_reads, case_cgroups,
         case_start_and_stop]

# -- cgroups in a VM ---------------------------------------------------------------

VM_INIT = """#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mount -t tmpfs tmpfs /tmp
/bin/busybox mount -t cgroup2 cgroup2 /sys/fs/cgroup
export PATH=/bin ABOX_HELPER=/bin/abox-helper ABOX_CGROUP_PARENT=/sys/fs/cgroup TMPDIR=/tmp
echo "controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
/bin/helper_cgroup_test --gtest_color=no
echo "HELPER-CGROUP-TEST rc=$?"
ABOX_BIN=/bin/abox /bin/daemon_cgroup_test --gtest_color=no
echo "DAEMON-CGROUP-TEST rc=$?"
echo "LEFT: $(cd /sys/fs/cgroup && ls -d abox-* 2>/dev/null)"
/bin/busybox poweroff -f
"""


def host_tsc_khz():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    raise RuntimeError("no 'cpu MHz' in /proc/cpuinfo")


def libraries(program):
    out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True, timeout=30).stdout
    paths = []
    for line in out.splitlines():
        for word in line.split():
            if word.startswith("/"):
                paths.append(word)
                break
    return paths


def run_cgroup_test_in_vm(t):
    kernel = os.path.join(KERNEL_DIR, "vmlinux")
    for need in (kernel, "/bin/busybox"):
        if not os.path.exists(need):
            return False, f"{need} is missing (scripts/setup.sh)"
    tree = os.path.join(t.dir, "vm-tree")
    for d in ("bin", "proc", "sys", "dev", "tmp", "run", "etc"):
        os.makedirs(os.path.join(tree, d), exist_ok=True)
    shutil.copy("/bin/busybox", os.path.join(tree, "bin", "busybox"))
    for applet in ("sh", "mount", "cat", "ls", "echo", "poweroff"):
        os.symlink("busybox", os.path.join(tree, "bin", applet))
    for program, name in ((t.helper_bin, "abox-helper"), (t.cgroup_test, "helper_cgroup_test"),
                          (t.daemon_cgroup_test, "daemon_cgroup_test"), (t.abox_bin, "abox")):
        subprocess.run(["objcopy", "--strip-debug", program, os.path.join(tree, "bin", name)], check=True,
                       timeout=60)
        for lib in libraries(program):
            dest = os.path.join(tree, lib.lstrip("/"))
            if not os.path.exists(dest):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copy(lib, dest)
    with open(os.path.join(tree, "init"), "w") as f:
        f.write(VM_INIT)
    os.chmod(os.path.join(tree, "init"), 0o755)
    cpio = os.path.join(t.dir, "vm.cpio")
    files = subprocess.run(["find", ".", "-mindepth", "1"], cwd=tree, capture_output=True, text=True,
                           check=True).stdout
    with open(cpio, "wb") as out:
        subprocess.run(["cpio", "--quiet", "-o", "-H", "newc", "-R", "0:0"], cwd=tree, input=files.encode(),
                       stdout=out, check=True, timeout=60)
    console = os.path.join(t.dir, "vm-console.log")
    append = f"console=ttyS0 panic=-1 quiet tsc_early_khz={host_tsc_khz()} rdinit=/init"
    qemu = subprocess.Popen(["qemu-system-x86_64", "-M", "microvm", "-accel", "tcg", "-m", "1024", "-smp", "1",
                             "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
                             "-serial", f"file:{console}", "-kernel", kernel, "-initrd", cpio, "-append", append],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(t.dir, "vm-qemu.log"), "w"))
    try:
        qemu.wait(timeout=600)
    except subprocess.TimeoutExpired:
        qemu.kill()
        qemu.wait(timeout=10)
    with open(console, errors="replace") as f:
        text = f.read()
    tests = [line for line in text.splitlines() if line.startswith("[       OK ]") or line.startswith("[  FAILED  ]")]
    for line in tests:
        print(f"     vm: {line}")
    ok = "HELPER-CGROUP-TEST rc=0" in text and "DAEMON-CGROUP-TEST rc=0" in text and \
        "LEFT: \n" in text.replace("\r", "") and sum(line.startswith("[       OK ]") for line in tests) >= 15
    return ok, text[-6000:]


def leftovers(t):
    left = []
    if os.path.exists(t.cgroup_root):
        left.append(t.cgroup_root)
    r = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, timeout=10)
    left += [x["ifname"] for x in json.loads(r.stdout) if x["ifname"].startswith("abox-")]
    for n in t.namespaces:
        if n.p.poll() is None:
            left.append(f"namespace holder {n.p.pid}")
    return left


def main(argv):
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    cases = CASES
    if "--only" in argv[:-1]:
        i = argv.index("--only")
        words = argv[i + 1].split(",")
        cases = [c for c in CASES if any(w in c.__name__ for w in words)]
        del argv[i:i + 2]
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("helper_e2e: needs root (starts abox-helper, makes namespaces)")
        return 1
    for tool in ("ip", "nsenter", "unshare", "setpriv", "qemu-system-x86_64", "cpio", "objcopy", "ldd"):
        if shutil.which(tool) is None:
            print(f"helper_e2e: {tool} is missing (scripts/setup.sh installs it)")
            return 1
    workdir = tempfile.mkdtemp(prefix="helper-e2e-")
    os.chmod(workdir, 0o711)  # the operator reaches the socket inside
    t = Suite(*(os.path.abspath(a) for a in argv), workdir)
    started = time.monotonic()
    try:
        t.start()
        for case in cases:
            try:
                case(t)
            except Exception as e:  # noqa: BLE001 - one case's failure is reported, the rest run
                t.check(case.__name__, False, f"{type(e).__name__}: {e}")
        if t.helper.p.poll() is None:
            rc = t.helper.stop()
            t.check("the helper stops on SIGTERM with exit 0", rc == 0, t.helper.text()[-500:])
            t.check("its socket is removed", not os.path.exists(t.helper.socket), t.helper.socket)
    except Exception as e:  # noqa: BLE001
        t.check("setup", False, f"{type(e).__name__}: {e}")
    finally:
        t.close()
        left = leftovers(t)
        t.check("nothing left behind", not left, left)
        if keep:
            print(f"(kept {workdir})")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{t.passed} passed, {t.failed} failed ({time.monotonic() - started:.0f}s)")
    return 0 if t.failed == 0 and t.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
