#!/usr/bin/env python3
"""`abox doctor` against what this machine really has.

Each item of `abox doctor --json` is compared with an independent look at
the host made here (opening /dev/net/tun, io_uring_setup through ctypes,
/proc/self/status's Seccomp line, `unshare --user --net`, the cgroup2 mount
and its controllers, QEMU's `-machine help`, the guest kernel's file), as
root and as an unprivileged uid (setpriv; a bare uid, no account). The KVM
item must come from a real probe: with an empty cache folder, doctor leaves
the probe's verdict in it, and the item agrees with that verdict.

Items that must flip: the helper item is DEGRADED for the unprivileged uid
until the test starts abox-helper (as root) for that uid, OK while it runs,
DEGRADED again once it stopped; QEMU and the images are MISSING (exit 1)
when ABOX_QEMU / ABOX_GUEST_KERNEL_DIR point at nothing. The daemon item:
"not running" with no daemon; OK once the test starts `abox daemon` as the
operator, naming its pid and this abox's version (it answered the API's
ping); "not running" again after SIGTERM; DEGRADED with the fix for a
listener on daemon.sock that never answers, one that answers something that
is not the API, and a socket folder others may enter. Text and JSON say the
same.

Usage: doctor_e2e.py PATH/TO/abox PATH/TO/abox-helper
Prints "ok/FAIL name" per check and "N passed, N failed"; exits 1 on any
failure. Every wait is bounded; the helper is stopped and the temp folder
removed at the end.
"""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

OPERATOR = 64126
IDS = ["kvm", "tun", "io_uring", "seccomp", "userns", "ping", "cgroup", "qemu", "images", "helper", "daemon"]


class Suite:
    def __init__(self, abox, helper, root):
        self.abox, self.helper, self.root = abox, helper, root
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")

    def env(self, who, **extra):
        home = os.path.join(self.root, f"home-{who}")
        os.makedirs(home, exist_ok=True)
        if who != 0:
            os.chown(home, who, who)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
               "XDG_CACHE_HOME": os.path.join(home, "cache"), "XDG_RUNTIME_DIR": os.path.join(home, "run"),
               "ABOX_HELPER_SOCKET": os.path.join(self.root, "helper.sock")}
        for k in ("ABOX_GUEST_KERNEL_DIR", "ABOX_QEMU"):
            if k in os.environ:
                env[k] = os.environ[k]
        env.update(extra)
        return env

    def doctor(self, who=0, json_out=True, **extra):
        prefix = [] if who == 0 else ["setpriv", f"--reuid={who}", f"--regid={who}", "--clear-groups"]
        argv = prefix + [self.abox, "doctor"] + (["--json"] if json_out else [])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=self.env(who, **extra))
        if not json_out:
            return r.returncode, r.stdout, r.stderr
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            doc = {"items": []}
        return r.returncode, {i["id"]: i for i in doc.get("items", [])}, doc


# -- the host, seen independently ----------------------------------------------------


def can_open(path):
    try:
        os.close(os.open(path, os.O_RDWR))
        return True
    except OSError:
        return False


def io_uring_works():
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)  # io_uring_setup
    if fd >= 0:
        os.close(fd)
    return fd >= 0


def seccomp_in_kernel():
    with open("/proc/self/status") as f:
        return any(line.startswith("Seccomp:") for line in f)


def userns_works(who):
    prefix = [] if who == 0 else ["setpriv", f"--reuid={who}", f"--regid={who}", "--clear-groups"]
    return subprocess.run(prefix + ["unshare", "--user", "--net", "true"], capture_output=True,
                          timeout=20).returncode == 0


def cgroup2_controllers():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            head, _, tail = line.partition(" - ")
            if tail.split()[0] == "cgroup2":
                mount = head.split()[4]
                with open(os.path.join(mount, "cgroup.controllers")) as c:
                    return mount, c.read().split()
    return None, []


def qemu_has_microvm():
    q = shutil.which("qemu-system-x86_64")
    if not q:
        return False
    out = subprocess.run([q, "-machine", "help"], capture_output=True, text=True, timeout=30).stdout
    return "microvm" in out


def kernel_dir():
    repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    return os.environ.get("ABOX_GUEST_KERNEL_DIR", os.path.join(repo, ".cache", "guest-kernel"))


# -- cases ---------------------------------------------------------------------------


def case_as_root(t):
    rc, items, doc = t.doctor(0)
    t.check("every item, in order", list(items) == IDS, list(items))
    status = {k: v["status"] for k, v in items.items()}
    t.check("exit 0 exactly when nothing is MISSING", (rc == 0) == ("MISSING" not in status.values()), (rc, status))
    t.check("TUN as the host has it", (status.get("tun") == "OK") == can_open("/dev/net/tun"), items.get("tun"))
    t.check("io_uring as the host has it", (status.get("io_uring") == "OK") == io_uring_works(), items.get("io_uring"))
    t.check("seccomp as the host has it", (status.get("seccomp") == "OK") == seccomp_in_kernel(), items.get("seccomp"))
    t.check("user namespaces as the host has them", (status.get("userns") == "OK") == userns_works(0),
            items.get("userns"))
    mount, controllers = cgroup2_controllers()
    full = mount is not None and all(c in controllers for c in ("memory", "cpu", "pids"))
    if full:
        # The helper serves only an operator who is not root: root's instances get no cgroup.
        t.check("cgroup v2 with its controllers: DEGRADED for root, saying why",
                status.get("cgroup") == "DEGRADED" and "not root" in items["cgroup"]["detail"], items.get("cgroup"))
    else:
        t.check("cgroup v2 without memory/cpu/pids: DEGRADED, saying so",
                status.get("cgroup") == "DEGRADED" and ("lacks" in items["cgroup"]["detail"] or
                                                        "no cgroup v2" in items["cgroup"]["detail"]),
                items.get("cgroup"))
    t.check("QEMU as the host has it", (status.get("qemu") == "OK") == qemu_has_microvm(), items.get("qemu"))
    has_kernel = os.path.exists(os.path.join(kernel_dir(), "vmlinux"))
    t.check("images: an empty cache has no image built",
            status.get("images") == "DEGRADED" and "not built" in items["images"]["detail"] if has_kernel
            else status.get("images") == "MISSING", items.get("images"))
    # KVM: a real probe ran (its verdict is in the empty cache doctor was given) and the item agrees.
    probe = os.path.join(t.env(0)["XDG_CACHE_HOME"], "abox", "kvm-probe")
    if not os.path.exists("/dev/kvm"):
        t.check("no /dev/kvm: KVM DEGRADED", status.get("kvm") == "DEGRADED", items.get("kvm"))
    elif status.get("qemu") == "OK" and has_kernel:
        verdict = open(probe).read().splitlines()[1] if os.path.exists(probe) else ""
        t.check("KVM from a real probe, as its verdict says",
                verdict in ("kvm", "tcg") and (status.get("kvm") == "OK") == (verdict == "kvm"),
                (verdict, items.get("kvm")))
    t.check("daemon: not running, said honestly",
            status.get("daemon") == "DEGRADED" and items["daemon"]["detail"].startswith("not running"),
            items.get("daemon"))
    rc2, text, _ = t.doctor(0, json_out=False)
    lines = [l for l in text.splitlines() if not l.startswith(" ")][:-1]
    t.check("text and JSON agree", rc2 == rc and [l.split()[0] for l in lines] == [status[i] for i in IDS],
            text)


def case_ping(t):
    """The ping item follows net.ipv4.ping_group_range of the namespace
    doctor runs in: a new namespace's "1 0" (nobody) is DEGRADED (ping not
    relayed, the sysctl as the fix); "0 2147483647" is OK."""
    ns = f"doctor-ping-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
    try:
        for value, want in (("1 0", "DEGRADED"), ("0 2147483647", "OK")):
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.ping_group_range={value}"],
                           check=True, timeout=10)
            r = subprocess.run(["ip", "netns", "exec", ns, t.abox, "doctor", "--json"], capture_output=True,
                               text=True, timeout=120, env=t.env(0))
            try:
                items = {i["id"]: i for i in json.loads(r.stdout).get("items", [])}
            except ValueError:
                items = {}
            item = items.get("ping", {})
            good = item.get("status") == want
            if want == "DEGRADED":
                good = good and "ping_group_range" in item.get("fix", "") and "not relayed" in item.get("cost", "")
            t.check(f"ping with ping_group_range \"{value}\": {want}", good, item)
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=10)


def case_missing_parts(t):
    rc, items, _ = t.doctor(0, ABOX_QEMU=os.path.join(t.root, "no-qemu"),
                            ABOX_GUEST_KERNEL_DIR=os.path.join(t.root, "no-kernel"))
    t.check("no QEMU: MISSING with the fix", items.get("qemu", {}).get("status") == "MISSING" and
            "apt-get install qemu-system-x86" in items["qemu"]["fix"], items.get("qemu"))
    t.check("no guest kernel: images MISSING with the fix", items.get("images", {}).get("status") == "MISSING" and
            "scripts/setup.sh" in items["images"]["fix"], items.get("images"))
    t.check("KVM not probed then, and says so", "not probed" in items.get("kvm", {}).get("detail", ""),
            items.get("kvm"))
    t.check("and the exit status is 1", rc == 1, rc)


def case_helper_flips(t):
    rc, items, _ = t.doctor(OPERATOR)
    if os.path.exists("/dev/kvm") and os.stat("/dev/kvm").st_mode & 0o006 != 0o006:
        t.check("KVM for the operator: why /dev/kvm does not open", items.get("kvm", {}).get("detail") ==
                "/dev/kvm: Permission denied" and items["kvm"]["status"] == "DEGRADED", items.get("kvm"))
    t.check("as the operator, no helper: DEGRADED with the fix",
            items.get("helper", {}).get("status") == "DEGRADED" and
            "abox-helper --operator" in items["helper"]["fix"], items.get("helper"))
    t.check("TUN for the operator as the device's mode allows",
            (items.get("tun", {}).get("status") == "OK") == (os.stat("/dev/net/tun").st_mode & 0o006 == 0o006),
            items.get("tun"))
    t.check("user namespaces for the operator as they are",
            (items.get("userns", {}).get("status") == "OK") == userns_works(OPERATOR), items.get("userns"))
    sock = os.path.join(t.root, "helper.sock")
    log = open(os.path.join(t.root, "helper.log"), "w")
    helper = subprocess.Popen([t.helper, "--operator", str(OPERATOR), "--group", str(OPERATOR), "--socket", sock,
                               "--cgroup-root", "none"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not os.path.exists(sock) and helper.poll() is None:
            time.sleep(0.05)
        rc, items, _ = t.doctor(OPERATOR)
        t.check("with abox-helper running for the operator: OK",
                items.get("helper", {}).get("status") == "OK" and "(cgroups: unavailable)" in items["helper"]["detail"],
                items.get("helper"))
        # A helper without cgroups gives instances none: never OK, and the cause said.
        mount, controllers = cgroup2_controllers()
        full = mount is not None and all(c in controllers for c in ("memory", "cpu", "pids"))
        t.check("with a helper answering cgroups=unavailable: cgroup DEGRADED, saying why",
                items.get("cgroup", {}).get("status") == "DEGRADED" and
                ("cgroups=unavailable" if full else "lacks") in items["cgroup"].get("detail", ""), items.get("cgroup"))
        rc, items, _ = t.doctor(64127)
        t.check("for another uid the same helper is not reachable",
                items.get("helper", {}).get("status") == "DEGRADED", items.get("helper"))
    finally:
        helper.send_signal(signal.SIGTERM)
        try:
            helper.wait(timeout=20)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait(timeout=10)
        log.close()
    rc, items, _ = t.doctor(OPERATOR)
    t.check("once it stopped: DEGRADED again", items.get("helper", {}).get("status") == "DEGRADED",
            items.get("helper"))


class FakeDaemon:
    """A listener on the operator's daemon.sock that answers each connection
    with `answer` (bytes; None: never a byte), for the items a real daemon
    cannot show. Runs in a thread; closed by close()."""

    def __init__(self, path, answer, uid):
        import socket
        import threading
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chown(path, uid, uid)
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.answer, self.held, self.stop = answer, [], False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(c)
            if self.answer is not None:
                try:
                    c.recv(4096)
                    c.sendall(self.answer)
                except OSError:
                    pass

    def close(self, path):
        self.stop = True
        self.thread.join(timeout=5)
        for c in self.held:
            c.close()
        self.sock.close()
        os.unlink(path)


def case_daemon(t):
    env = t.env(OPERATOR)
    run_dir = env["XDG_RUNTIME_DIR"]
    os.makedirs(run_dir, exist_ok=True)
    os.chown(run_dir, OPERATOR, OPERATOR)
    os.chmod(run_dir, 0o700)
    version = subprocess.run([t.abox, "--version"], capture_output=True, text=True, timeout=30).stdout.split()[-1]
    rc, items, _ = t.doctor(OPERATOR)
    d = items.get("daemon", {})
    t.check("daemon: none yet is 'not running', DEGRADED with the fix",
            d.get("status") == "DEGRADED" and d.get("detail", "").startswith("not running") and
            "abox daemon" in d.get("fix", ""), d)

    log = open(os.path.join(t.root, "daemon.log"), "w")
    daemon = subprocess.Popen(["setpriv", f"--reuid={OPERATOR}", f"--regid={OPERATOR}", "--clear-groups",
                               t.abox, "daemon"], stdout=log, stderr=log, env=env)
    sock = os.path.join(run_dir, "abox", "daemon.sock")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not os.path.exists(sock) and daemon.poll() is None:
            time.sleep(0.05)
        rc, items, _ = t.doctor(OPERATOR)
        d = items.get("daemon", {})
        t.check("daemon running: OK from its answer to the API's ping (its pid and this abox's version)",
                d.get("status") == "OK" and f"pid {daemon.pid}" in d.get("detail", "") and
                f"version {version}" in d.get("detail", "") and "API 1" in d.get("detail", ""), d)
        rc2, text, _ = t.doctor(OPERATOR, json_out=False)
        t.check("the text says the same", f"OK        daemon: running (pid {daemon.pid})" in text, text)
        rc, items, _ = t.doctor(64127, XDG_RUNTIME_DIR=run_dir)
        d = items.get("daemon", {})
        t.check("another uid pointed at the operator's daemon folder: not OK",
                d.get("status") == "DEGRADED", d)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)
        log.close()
    rc, items, _ = t.doctor(OPERATOR)
    d = items.get("daemon", {})
    t.check("once the daemon stopped: 'not running' again", d.get("status") == "DEGRADED" and
            d.get("detail", "").startswith("not running"), d)

    if os.path.exists(sock):
        os.unlink(sock)
    for name, answer, words in (
            ("a listener that never answers", None, "did not answer a ping"),
            ("a listener that answers HTTP", b"HTTP/1.1 400 Bad Request\r\n\r\n", "not of the API"),
            ("a daemon of another version",
             b'{"id":1,"ok":true,"version":"0.0.1-old","api":1,"pid":4242}\n', "version 0.0.1-old")):
        fake = FakeDaemon(sock, answer, OPERATOR)
        try:
            rc, items, _ = t.doctor(OPERATOR)
        finally:
            fake.close(sock)
        d = items.get("daemon", {})
        t.check(f"daemon: {name} is DEGRADED with a fix", d.get("status") == "DEGRADED" and
                words in d.get("detail", "") and d.get("fix"), d)
    os.chmod(os.path.join(run_dir, "abox"), 0o755)
    rc, items, _ = t.doctor(OPERATOR)
    d = items.get("daemon", {})
    t.check("daemon: a socket folder others may enter is DEGRADED, fix chmod 700",
            d.get("status") == "DEGRADED" and d.get("fix", "").startswith("chmod 700"), d)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("doctor_e2e: needs root (starts abox-helper, runs abox as another uid)")
        return 1
    root = tempfile.mkdtemp(prefix="doctor-e2e-")
    os.chmod(root, 0o711)
    t = Suite(os.path.abspath(argv[0]), os.path.abspath(argv[1]), root)
    try:
        for case in (case_as_root, case_ping, case_missing_parts, case_helper_flips, case_daemon):
            try:
                case(t)
            except Exception as e:  # noqa: BLE001 - one case's failure is reported, the rest run
                t.check(case.__name__, False, f"{type(e).__name__}: {e}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{t.passed} passed, {t.failed} failed")
    return 0 if t.failed == 0 and t.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
