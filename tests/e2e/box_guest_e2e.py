#!/usr/bin/env python3
"""End-to-end test of box-guest in the real minimal image (guest/image/minimal/)
under QEMU (microvm, TCG) behind a real `abox-net run --stream`, with this
test as the host side of the control channel (guest_protocol.py, written from
docs/control-protocol.md: an oracle independent of guest/protocol/). The fake
internet is netns_rig.py's (nsd for example.test, nginx).

Usage:
  box_guest_e2e.py PATH/TO/abox-net PATH/TO/box-guest [--keep] [--only WORD[,WORD]]

Each scenario is one boot (abox-net takes exactly one VMM, and box-guest runs
one command per boot), and each boot ends with `poweroff`, which must end
QEMU with status 0:
- hello: box-guest leased the network by its own DHCP client (10.0.2.15/24
  via 10.0.2.2, DNS 10.0.2.2, MTU 65520) and says so, unkeyed, first;
- selftest: the four probes (a denied name, a direct address, a foreign
  resolver, a nonce in the env) all pass behind abox-net, and abox-net's
  events show the three refusals; a forged `poweroff` (wrong MAC) is dropped
  and logged (log frame and console) and the honest `go` at the same
  sequence number runs `sh -c 'echo out; echo err >&2; exit 7'`: out on
  stdout frames, err on stderr frames, exited 7;
- output: 1 MiB made in the guest arrives intact (its sha256, computed in the
  guest) under an output credit of 8 KiB granted back 4 KiB at a time: the
  guest never sends past its credit;
- stdin: 300 KiB sent under the guest's stdin credit (re-granted past the
  first 64 KiB window), then stdin_eof: `sha256sum` prints its digest;
- identity: the command runs as uid/gid 1000 with no supplementary groups,
  every capability set 0, NoNewPrivs 1, its own session and process group,
  in /home/agent (owned by 1000), with setup's env exactly, and cannot read
  box-guest's /proc/1/environ or /proc/1/mem;
- signal: `signal` 15 reaches the command, which exits signalled 15;
- tty: an interactive busybox sh on a pty of 24x80: `tty` says /dev/pts/0,
  `stty size` says 24 80, and 40 100 after a resize; 0x03 typed ends a
  `sleep 30` (status 130) and the shell goes on; busybox `vi` draws its
  screen and quits on `:q!`; `exit 7` ends the command with 7;
- copy_in: a tree made by Python's tarfile (files of modes 0755 and 0600, a
  folder, a symlink; a member `../escape` and an absolute one) lands under
  /home/agent/in owned by 1000:1000 with its modes and symlink, and nothing
  lands outside it; a folder uid 1000 cannot make (/etc/abox-in) is
  copy_in_done ok 0 with the reason; the command then sees the files;
- copy_out: a folder the command made comes back as a tar stream (read by
  tarfile in memory, never extracted) with its files, contents and symlink,
  under 4 KiB of copy credit, while the command's own output flows beside it;
  a path that is not there is copy_out_done ok 0;
- sessions (protocol 3): beside a main command that waits on its stdin, an
  exec has its own stdout, stderr, exit status and the main command's
  environment with its own on top; 16 execs run at once and a 17th is
  refused by box-guest with the bound in the reason, the 16 then end as
  their stdin says; an exec on a pty of 30x90 sees its resize to 31x91;
  frames for sessions never opened are logged and dropped (and those for
  one that ended dropped quietly) while the main command goes on; an exec
  after the main command ended is refused;
- passt: the same guest behind passt (which filters nothing) reports every
  probe FAILED, and a nonce_in_env whose variable holds a key, not a nonce,
  fails too: the self-test can fail. The command is never started.

Prints one line per check and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; a boot that hangs before /init is retried once (the
line says so). Everything the test makes is removed at the end.
"""
import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guest_protocol as gp  # noqa: E402
import netns_rig as nr  # noqa: E402
import vm_e2e as vm  # noqa: E402  (the QEMU and passt pieces)

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD_IMAGE = os.path.join(REPO, "guest", "image", "minimal", "build.sh")

WEB, SECRET = nr.fqdn("web"), nr.fqdn("secret")
SECRET_ADDR, NS_ADDR = nr.ADDR["secret"], nr.ADDR["ns1"]
NONCE = "abox-nonce-" + os.urandom(32).hex()
PROBES = [(gp.DENIED_NAME, SECRET), (gp.DIRECT_ADDRESS, f"{SECRET_ADDR}:80"), (gp.FOREIGN_RESOLVER, f"{NS_ADDR}:53"),
          (gp.NONCE_IN_ENV, "ABOX_TEST_NONCE")]
BASE_ENV = [("PATH", "/bin:/sbin:/usr/bin:/usr/sbin"), ("HOME", "/home/agent"), ("LANG", "C")]
CREDIT = 256 << 10

BOOT_TIMEOUT = 40  # QEMU start to hello; 2-7 s here, more under load
STEP_TIMEOUT = 30  # one command, one self-test
POWEROFF_TIMEOUT = 20

POLICY = f"""# box_guest_e2e.py: written by the test
[dns]
upstreams = ["{NS_ADDR}:53"]
timeout_ms = 2000

[[allow]]
names = ["{WEB}"]
ports = [80]
"""


class Boot:
    """One QEMU boot of the minimal image; the test holds the control port."""
    count = 0

    def __init__(self, rig, initramfs, start_net):
        self.rig, self.initramfs, self.start_net = rig, initramfs, start_net
        self.qemu = self.net = self.listener = self.conn = self.ch = None
        self.hello = None
        self.note = ""

    def console(self, lines=25):
        try:
            with open(self.rig.path(f"console{self.n}.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def _start(self):
        Boot.count += 1
        self.n = Boot.count
        ctl_path, net_path = self.rig.path(f"ctl{self.n}.sock"), self.rig.path(f"net{self.n}.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(ctl_path)
        self.listener.listen(1)
        self.net = self.start_net(net_path)
        append = " ".join(["console=ttyS0", "quiet", "panic=-1", f"tsc_early_khz={vm.host_tsc_khz()}", "abox.ctl=ctl"])
        cmd = ["qemu-system-x86_64", "-M", "microvm", "-accel", "tcg", "-m", str(vm.GUEST_MEM_MIB), "-smp", "1",
               "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
               "-serial", f"file:{self.rig.path(f'console{self.n}.log')}",
               "-netdev", f"stream,id=n0,server=off,addr.type=unix,addr.path={net_path}",
               "-device", "virtio-net-device,netdev=n0,mac=52:54:00:12:34:56",
               "-device", "virtio-serial-device",
               "-chardev", f"socket,id=c0,path={ctl_path},server=off",
               "-device", "virtserialport,chardev=c0,name=ctl",
               "-kernel", os.path.join(vm.KERNEL_DIR, "vmlinux"), "-initrd", self.initramfs, "-append", append]
        started = time.monotonic()
        self.qemu = self.rig.spawn(f"qemu{self.n}", cmd, ns=self.rig.guest)
        self.listener.settimeout(15)
        self.conn, _ = self.listener.accept()
        self.conn.settimeout(20)  # sends; reads wait in select()
        self.ch = gp.HostChannel(self.conn)
        self.hello = self.ch.hello(max(1, BOOT_TIMEOUT - (time.monotonic() - started)))
        return time.monotonic() - started

    def _stop(self):
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()
        self.conn = self.listener = None
        for p in (self.qemu, self.net):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=10)

    def boot(self):
        """Boots; once more (QEMU and the network anew) if the kernel hung
        before /init, TCG's rare early hang. Returns seconds to hello."""
        try:
            return self._start()
        except (TimeoutError, EOFError, OSError, gp.ProtocolError) as e:
            first = f"{type(e).__name__}: {e}"
            if self.qemu is None or "box-guest:" in self.console(1000):
                raise RuntimeError(f"{first}; console:\n{self.console()}") from None
            self._stop()
        secs = self._start()
        self.note = f"; retried: the first boot hung before /init ({first})"
        return secs

    def poweroff(self):
        """poweroff on the channel; QEMU's exit status (None: still running)."""
        self.ch.poweroff()
        try:
            return self.qemu.wait(timeout=POWEROFF_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None

    def close(self):
        self._stop()


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def report(self, name, ok, note=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}{f' ({note})' if note else ''}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}: {note}", flush=True)

    def steps(self, boot, steps):
        """Runs (name, fn) in order on one boot; after a failure the rest
        cannot trust the channel and are reported as not run."""
        broken = None
        for name, fn in steps:
            if broken:
                self.report(name, False, f"not run: {broken} failed first")
                continue
            try:
                self.report(name, True, fn() or "")
            except Exception as e:  # noqa: BLE001 - report and go on
                self.report(name, False, f"{type(e).__name__}: {e}")
                broken = name
        return broken is None


# -- the scenarios ----------------------------------------------------------------------

def selftest_report(boot):
    report = gp.decode_selftest_report(boot.ch.expect(gp.SELFTEST_REPORT, STEP_TIMEOUT))
    kinds = [(r["kind"], r["target"]) for r in report]
    assert kinds == PROBES, f"the report's probes {kinds} are not setup's {PROBES}"
    return report


def describe(report):
    return "; ".join(f"{gp.PROBE_NAMES[r['kind']]} {gp.OUTCOME_NAMES[r['outcome']]}: {r['detail']}" for r in report)


def scenario_selftest_and_exit_7(c, rig, boot):
    got = {}

    def selftest_passes_behind_abox_net():
        boot.ch.setup(argv=["sh", "-c", "echo out; echo err >&2; exit 7"], env=BASE_ENV + [("ABOX_TEST_NONCE", NONCE)],
                      probes=PROBES, output_credit=CREDIT)
        report = selftest_report(boot)
        failed = [r for r in report if r["outcome"] != gp.PASSED]
        assert not failed, describe(report)
        return describe(report)

    def events_show_the_three_refusals():
        events = [json.loads(line) for line in open(rig.path("events.jsonl")) if line.strip()]

        def has(**fields):
            return any(e.get("kind") == "deny" and all(str(e.get(k, "")) == v for k, v in fields.items())
                       for e in events)

        missing = [w for w, f in (("name", {"name": SECRET}), ("address", {"dst": f"{SECRET_ADDR}:80"}),
                                  ("resolver", {"dst": f"{NS_ADDR}:53", "proto": "udp"})) if not has(**f)]
        assert not missing, f"no deny event for the {missing} probe(s) in {len(events)} events"

    def forged_poweroff_is_dropped_and_logged_then_go_runs():
        boot.ch.send_forged(gp.POWEROFF)  # would end the VM, were it believed
        got["r"] = boot.ch.run_command(STEP_TIMEOUT, CREDIT)
        logs = boot.ch.logs
        assert any("frame_bad_mac" in line for line in logs), f"no log of the forged frame: {logs}"
        assert not any("bad_sequence" in line for line in logs), f"the forgery took a sequence number: {logs}"
        assert "frame_bad_mac" in boot.console(1000), "the console does not show the forged frame"
        assert "started" in got["r"], f"the command did not start: {got['r']}"
        return [line for line in logs if "frame_bad_mac" in line][0]

    def out_err_and_exit_7():
        r = got["r"]
        assert r["stdout"] == b"out\n" and r["stderr"] == b"err\n", f"stdout {bytes(r['stdout'])!r}, stderr {bytes(r['stderr'])!r}"
        assert r["exited"] == {"session": 0, "signalled": False, "value": 7}, f"exited {r['exited']}"
        return f"pid {r['started']}"

    return c.steps(boot, [("selftest_passes_behind_abox_net", selftest_passes_behind_abox_net),
                   ("abox_net_events_show_the_three_refusals", events_show_the_three_refusals),
                   ("forged_poweroff_is_dropped_and_logged_then_go_runs", forged_poweroff_is_dropped_and_logged_then_go_runs),
                   ("out_on_stdout_err_on_stderr_exit_7", out_err_and_exit_7)])


def scenario_output_under_credit(c, rig, boot):
    def one_mib_arrives_intact_under_8_kib_of_credit():
        boot.ch.setup(argv=["sh", "-c", "head -c 1048576 /dev/urandom >/tmp/blob && sha256sum </tmp/blob >&2 && cat /tmp/blob"],
                      env=BASE_ENV, output_credit=8192)
        r = boot.ch.run_command(STEP_TIMEOUT * 2, 8192, credit_step=4096)
        digest = hashlib.sha256(r["stdout"]).hexdigest()
        assert r.get("exited") == {"session": 0, "signalled": False, "value": 0}, f"{r.get('exited')} {bytes(r['stderr'])[:200]!r}"
        assert len(r["stdout"]) == 1 << 20, f"{len(r['stdout'])} bytes"
        assert r["stderr"].decode().split()[0] == digest, f"guest {r['stderr']!r}, host {digest}"
        return f"sha256 {digest[:16]}..., at most {r['max_unacked']} bytes unacknowledged"

    return c.steps(boot, [("one_mib_arrives_intact_under_8_kib_of_credit", one_mib_arrives_intact_under_8_kib_of_credit)])


def scenario_stdin(c, rig, boot):
    def stdin_under_credit_then_eof_reaches_sha256sum():
        data = os.urandom(300 << 10)
        boot.ch.setup(argv=["sha256sum"], env=BASE_ENV, output_credit=CREDIT, stdin_open=True)
        r = boot.ch.run_command(STEP_TIMEOUT, CREDIT, stdin=data)
        want = hashlib.sha256(data).hexdigest()
        assert r.get("exited") == {"session": 0, "signalled": False, "value": 0}, f"{r.get('exited')} {bytes(r['stderr'])!r}"
        assert r["stdout"].decode().split()[0] == want, f"guest {r['stdout']!r}, host {want}"
        assert r["stdin_credit"] >= len(data), f"the guest granted {r['stdin_credit']} bytes of stdin credit"
        return f"{len(data)} bytes, {r['stdin_credit']} bytes of credit granted in all"

    return c.steps(boot, [("stdin_under_credit_then_eof_reaches_sha256sum", stdin_under_credit_then_eof_reaches_sha256sum)])


IDENTITY_SCRIPT = r"""
echo "ids=$(id -u) $(id -g) [$(id -G)]"
grep -E '^(Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
echo "stat=$$ $(cut -d' ' -f5,6 /proc/$$/stat)"
echo "pwd=$(pwd)"
echo "home=$(stat -c '%u:%g %a' /home/agent)"
tr '\0' '\n' </proc/$$/environ | sed 's/^/env=/'
echo "environ=$(cat /proc/1/environ 2>&1 >/dev/null)"
echo "mem=$(head -c 1 /proc/1/mem 2>&1 >/dev/null)"
"""


def scenario_identity(c, rig, boot):
    def runs_as_1000_without_privileges_in_its_own_session():
        env = BASE_ENV + [("ABOX_TEST_VALUE", "a b=c")]
        boot.ch.setup(argv=["sh", "-c", IDENTITY_SCRIPT], env=env, output_credit=CREDIT)
        r = boot.ch.run_command(STEP_TIMEOUT, CREDIT)
        out = r["stdout"].decode(errors="replace")
        assert r.get("exited") == {"session": 0, "signalled": False, "value": 0}, f"{r.get('exited')}: {out} {bytes(r['stderr'])!r}"
        lines = out.splitlines()
        field = {}
        for line in lines:
            k, _, v = line.partition("=") if "=" in line.split(":")[0] else line.partition(":")
            field.setdefault(k.strip(), v.strip())
        problems = []
        if field.get("ids") != "1000 1000 [1000]":
            problems.append(f"ids {field.get('ids')}")
        if field.get("Groups") != "":
            problems.append(f"supplementary groups {field.get('Groups')!r}")
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            if field.get(cap) != "0000000000000000":
                problems.append(f"{cap} {field.get(cap)}")
        if field.get("NoNewPrivs") != "1":
            problems.append(f"NoNewPrivs {field.get('NoNewPrivs')}")
        pid, pgrp, sid = (field.get("stat", "") + " x x x").split()[:3]
        if not (pid == pgrp == sid == str(r["started"])):
            problems.append(f"pid/pgrp/session {pid}/{pgrp}/{sid}, started said {r['started']}")
        if field.get("pwd") != "/home/agent":
            problems.append(f"pwd {field.get('pwd')}")
        if field.get("home") != "1000:1000 700":
            problems.append(f"/home/agent is {field.get('home')}")
        got_env = sorted(line[len("env="):] for line in lines if line.startswith("env="))
        if got_env != sorted(f"{k}={v}" for k, v in env):
            problems.append(f"env {got_env}")
        for what in ("environ", "mem"):
            if "Permission denied" not in field.get(what, ""):
                problems.append(f"/proc/1/{what}: {field.get(what)!r}")
        assert not problems, "; ".join(problems) + f"\n{out}"
        return f"{field.get('ids')}, caps 0, NoNewPrivs 1, /proc/1/environ: {field.get('environ')}"

    return c.steps(boot, [("runs_as_1000_without_privileges_in_its_own_session",
                    runs_as_1000_without_privileges_in_its_own_session)])


def scenario_signal(c, rig, boot):
    def signal_reaches_the_command():
        sent = []

        def on_output(ch, ftype, data):
            if ftype == gp.STDOUT and b"ready" in data and not sent:
                ch.send(gp.SIGNAL, gp.encode_signal(15, gp.MAIN_SESSION))
                sent.append(True)

        boot.ch.setup(argv=["sh", "-c", "echo ready; exec sleep 60"], env=BASE_ENV, output_credit=CREDIT)
        r = boot.ch.run_command(STEP_TIMEOUT, CREDIT, on_output=on_output)
        assert sent, f"no 'ready' from the command: {r}"
        assert r.get("exited") == {"session": 0, "signalled": True, "value": 15}, f"exited {r.get('exited')}"

    return c.steps(boot, [("signal_15_reaches_the_command", signal_reaches_the_command)])


def scenario_passt(c, rig, boot):
    def every_probe_fails_behind_passt():
        boot.ch.setup(argv=["sh", "-c", "echo must not run"], env=BASE_ENV + [("ABOX_TEST_NONCE", "sk-live-a-real-key")],
                      probes=PROBES, output_credit=CREDIT)
        report = selftest_report(boot)
        passed = [r for r in report if r["outcome"] != gp.FAILED]
        assert not passed, "a probe did not fail where nothing is filtered, so it proves nothing: " + describe(report)
        assert "sk-live" not in describe(report), "the report echoes the variable's value"
        return describe(report)

    return c.steps(boot, [("every_probe_fails_behind_passt", every_probe_fails_behind_passt)])


class Tty:
    """The host's end of a command on a pty: what it typed and what came
    back, with credit granted back as output arrives."""

    def __init__(self, ch):
        self.ch, self.out, self.exited, self.stdin_credit = ch, bytearray(), None, 0

    def type(self, data):
        data = data.encode() if isinstance(data, str) else data
        assert len(data) <= self.stdin_credit, f"{len(data)} bytes to type with {self.stdin_credit} of credit"
        self.ch.send(gp.STDIN, gp.encode_data(gp.MAIN_SESSION, data))
        self.stdin_credit -= len(data)

    def wait_for(self, pattern, timeout=STEP_TIMEOUT, start=0):
        """Reads until the output after `start` matches the regex `pattern`
        (bytes); returns the match. Raises on exited or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, bytes(self.out[start:]))
            if m:
                return m
            if self.exited is not None:
                raise AssertionError(f"exited {self.exited} before {pattern!r}; output: {bytes(self.out[-400:])!r}")
            self.pump(deadline - time.monotonic(), pattern)

    def pump(self, left, what="exited"):
        if left <= 0:
            raise TimeoutError(f"no {what!r} within the time; output: {bytes(self.out[-400:])!r}")
        t, p = self.ch.recv(left)
        if t == gp.STDOUT:
            _, data = gp.decode_data(p)
            self.out.extend(data)
            self.ch.send(gp.OUTPUT_CREDIT, gp.encode_session_credit(gp.MAIN_SESSION, len(data)))
        elif t == gp.STDIN_CREDIT:
            self.stdin_credit += gp.decode_session_credit(p)[1]
        elif t == gp.EXITED:
            self.exited = gp.decode_exited(p)
        else:
            raise gp.ProtocolError(f"unexpected {gp.GUEST_NAMES.get(t, t)} on a tty: {p[:100]!r}")

    def wait_exited(self, timeout=STEP_TIMEOUT):
        deadline = time.monotonic() + timeout
        while self.exited is None:
            self.pump(deadline - time.monotonic())
        return self.exited


def scenario_tty(c, rig, boot):
    env = BASE_ENV + [("TERM", "vt100"), ("PS1", "abox$ ")]
    tty = Tty(boot.ch)
    marks = {}

    def shell_starts_on_a_pty():
        boot.ch.setup(argv=["sh", "-i"], env=env, output_credit=CREDIT, stdin_open=True, tty=True, rows=24, cols=80)
        boot.ch.send(gp.GO)
        started = gp.decode_started(boot.ch.expect(gp.STARTED, STEP_TIMEOUT))
        tty.wait_for(rb"abox\$ ")
        return f"pid {started['pid']}"

    def command(line, answer, timeout=STEP_TIMEOUT):
        start = len(tty.out)
        tty.type(line + "\r")
        m = tty.wait_for(answer, timeout, start)
        tty.wait_for(rb"abox\$ ", timeout, start + m.end())
        return m

    def tty_is_dev_pts_0():
        m = command("tty", rb"\r\n(/dev/pts/\d+)\r\n")
        assert m.group(1) == b"/dev/pts/0", m.group(1)
        return m.group(1).decode()

    def stty_size_shows_the_window_and_a_resize():
        command("stty size", rb"\r\n24 80\r\n")
        boot.ch.send(gp.RESIZE, gp.encode_resize(gp.MAIN_SESSION, 40, 100))
        command("stty size", rb"\r\n40 100\r\n")
        return "24 80, then 40 100"

    def ctrl_c_typed_interrupts_sleep():
        start = len(tty.out)
        tty.type("sleep 30; echo after-sleep-$?\r")
        time.sleep(1)  # sleep is running (the shell has echoed the line by now)
        tty.wait_for(rb"sleep 30", STEP_TIMEOUT, start)
        tty.type(b"\x03")
        m = tty.wait_for(rb"after-sleep-(\d+)|abox\$ ", 10, start)
        # ^C ends the whole line in an interactive sh; either way sleep is gone well before 30 s.
        tty.wait_for(rb"abox\$ ", 10, start + m.start())
        command("echo alive", rb"\r\nalive\r\n")
        return f"{bytes(tty.out[start:]).decode(errors='replace')!r}"[:120]

    def vi_starts_and_quits_on_q():
        start = len(tty.out)
        tty.type("vi /tmp/notes\r")
        tty.wait_for(rb"\x1b\[", STEP_TIMEOUT, start)  # vi draws with escape sequences
        tty.wait_for(rb"~", STEP_TIMEOUT, start)  # the empty buffer's lines
        time.sleep(0.5)
        tty.type(":q!\r")
        tty.wait_for(rb"abox\$ ", STEP_TIMEOUT, start + 1)
        command("echo vi-done", rb"\r\nvi-done\r\n")
        return f"{len(tty.out) - start} bytes of screen"

    def exit_7_ends_the_command():
        tty.type("exit 7\r")
        e = tty.wait_exited()
        assert e == {"session": 0, "signalled": False, "value": 7}, e

    return c.steps(boot, [("shell_starts_on_a_pty", shell_starts_on_a_pty), ("tty_is_dev_pts_0", tty_is_dev_pts_0),
                          ("stty_size_shows_the_window_and_a_resize", stty_size_shows_the_window_and_a_resize),
                          ("ctrl_c_typed_interrupts_sleep", ctrl_c_typed_interrupts_sleep),
                          ("vi_starts_and_quits_on_q", vi_starts_and_quits_on_q),
                          ("exit_7_ends_the_command", exit_7_ends_the_command)])


def make_tree_tar():
    """A tree as the host would send it, and two members that try to leave."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        def add(name, kind=tarfile.REGTYPE, mode=0o644, data=b"", link=""):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.size, info.linkname, info.mtime = kind, mode, len(data), link, 1700000000
            t.addfile(info, io.BytesIO(data) if data else None)
        add("bin", tarfile.DIRTYPE, 0o755)
        add("bin/run.sh", mode=0o755, data=b"#!/bin/sh\necho ran from the copy\n")
        add("secret.txt", mode=0o600, data=b"only the agent\n")
        add("docs", tarfile.DIRTYPE, 0o750)
        add("docs/readme", data=b"hello from the host\n")
        add("docs/link", tarfile.SYMTYPE, 0o777, link="readme")
        add("../escape", data=b"escaped by ..\n")
        add("/tmp/abs-escape", data=b"escaped by an absolute name\n")
    return buf.getvalue()


COPY_IN_CHECK = r"""
cd /home/agent/in || exit 9
for f in . bin bin/run.sh secret.txt docs docs/readme docs/link; do echo "stat=$(stat -c '%u:%g %a' "$f") $f"; done
echo "link=$(readlink docs/link)"
echo "via-link=$(cat docs/link)"
echo "run=$(./bin/run.sh)"
for f in /home/agent/escape /tmp/abs-escape /home/escape; do test -e "$f" && echo "escaped=$f"; done
echo "home=$(ls -A /home/agent | tr '\n' ' ')"
"""


def scenario_copy_in(c, rig, boot):
    got = {}

    def setup_then_copy_in_lands_the_tree():
        boot.ch.setup(argv=["sh", "-c", COPY_IN_CHECK], env=BASE_ENV, output_credit=CREDIT)
        r = boot.ch.copy_in("/home/agent/in", make_tree_tar(), STEP_TIMEOUT)
        assert r["ok"], r
        return f"copy_in_done ok: {r['detail']!r}"

    def a_folder_the_agent_cannot_make_is_refused():
        r = boot.ch.copy_in("/etc/abox-in", make_tree_tar(), STEP_TIMEOUT)
        assert not r["ok"] and "Permission denied" in r["detail"], r
        return r["detail"]

    def the_command_sees_the_tree_owned_by_1000_and_nothing_escaped():
        r = boot.ch.run_command(STEP_TIMEOUT, CREDIT)
        out = r["stdout"].decode(errors="replace")
        got["out"] = out
        assert r.get("exited") == {"session": 0, "signalled": False, "value": 0}, f"{r.get('exited')} {out} {bytes(r['stderr'])!r}"
        want = ["stat=1000:1000 755 .", "stat=1000:1000 755 bin", "stat=1000:1000 755 bin/run.sh",
                "stat=1000:1000 600 secret.txt", "stat=1000:1000 750 docs", "stat=1000:1000 644 docs/readme",
                "stat=1000:1000 777 docs/link", "link=readme", "via-link=hello from the host",
                "run=ran from the copy"]
        missing = [w for w in want if w not in out.splitlines()]
        assert not missing, f"missing {missing} in:\n{out}"
        assert "escaped=" not in out, out
        # The stripped members landed inside the folder, if anywhere: home holds only what it had and `in`.
        assert out.splitlines()[-1].strip() == "home=in", out
        return "modes 755/600/750/644, symlink kept, run.sh runs, nothing outside /home/agent/in"

    return c.steps(boot, [("setup_then_copy_in_lands_the_tree", setup_then_copy_in_lands_the_tree),
                          ("a_folder_the_agent_cannot_make_is_refused", a_folder_the_agent_cannot_make_is_refused),
                          ("the_command_sees_the_tree_owned_by_1000_and_nothing_escaped",
                           the_command_sees_the_tree_owned_by_1000_and_nothing_escaped)])


COPY_OUT_MAKE = r"""
mkdir -p out/sub && cd out || exit 9
head -c 300000 /dev/urandom >sub/blob && sha256sum sub/blob | cut -d' ' -f1 >digest
printf 'notes\n' >notes.txt && chmod 600 notes.txt
ln -s ../../etc/passwd sub/passwd-link
echo ready
i=0; while [ $i -lt 40 ]; do echo "tick $i"; i=$((i + 1)); sleep 0.1; done
"""


def scenario_copy_out(c, rig, boot):
    got = {}

    def grant(p):
        """The credit of a stdout frame of the main command, back."""
        session, data = gp.decode_data(p)
        boot.ch.send(gp.OUTPUT_CREDIT, gp.encode_session_credit(session, len(data)))

    def command_makes_a_folder():
        boot.ch.setup(argv=["sh", "-c", COPY_OUT_MAKE], env=BASE_ENV, output_credit=CREDIT)
        boot.ch.send(gp.GO)
        boot.ch.expect(gp.STARTED, STEP_TIMEOUT)
        out = bytearray()
        while b"ready" not in out:
            t, p = boot.ch.recv(STEP_TIMEOUT)
            assert t == gp.STDOUT, (t, p)
            out.extend(gp.decode_data(p)[1])
            grant(p)
        got["out"] = out

    def copy_out_under_4_kib_of_credit_beside_the_output():
        stream, r, most = boot.ch.copy_out("/home/agent/out", STEP_TIMEOUT * 2, credit_step=4096)
        assert r["ok"], r
        assert most <= 4096, most
        ticks = sum(gp.decode_data(p)[1].count(b"tick") for t, p in boot.ch.beside if t == gp.STDOUT)
        for t, p in boot.ch.beside:
            if t == gp.STDOUT:
                grant(p)
        got["stream"], got["ticks"] = stream, ticks
        return f"{len(stream)} bytes, at most {most} outstanding, {ticks} lines of the command's output beside it"

    def the_stream_reads_back_in_memory():
        with tarfile.open(fileobj=io.BytesIO(got["stream"]), mode="r:") as t:
            members = {m.name: m for m in t.getmembers()}
            want = {"out", "out/sub", "out/sub/blob", "out/sub/passwd-link", "out/digest", "out/notes.txt"}
            assert set(members) == want, sorted(members)
            blob = t.extractfile(members["out/sub/blob"]).read()
            digest = t.extractfile(members["out/digest"]).read().decode().strip()
            assert hashlib.sha256(blob).hexdigest() == digest, "the blob's digest differs"
            link = members["out/sub/passwd-link"]
            assert link.issym() and link.linkname == "../../etc/passwd", (link.type, link.linkname)
            assert members["out/notes.txt"].mode & 0o777 == 0o600
            assert members["out/sub/blob"].uid == 1000
        return f"{len(members)} members, blob of {len(blob)} bytes with the guest's digest, symlink as a symlink"

    def missing_path_is_not_ok_and_the_command_ends():
        stream, r, _ = boot.ch.copy_out("/home/agent/nothing-here", STEP_TIMEOUT)
        assert not r["ok"], r
        # The command ran on meanwhile: its output and end may have come beside the copy.
        exited = None
        deadline = time.monotonic() + STEP_TIMEOUT
        for t, p in boot.ch.beside:
            if t == gp.STDOUT:
                grant(p)
            elif t == gp.EXITED:
                exited = gp.decode_exited(p)
        while exited is None:
            t, p = boot.ch.recv(deadline - time.monotonic())
            if t == gp.STDOUT:
                grant(p)
            elif t == gp.EXITED:
                exited = gp.decode_exited(p)
        assert exited == {"session": 0, "signalled": False, "value": 0}, exited
        return r["detail"]

    return c.steps(boot, [("command_makes_a_folder", command_makes_a_folder),
                          ("copy_out_under_4_kib_of_credit_beside_the_output",
                           copy_out_under_4_kib_of_credit_beside_the_output),
                          ("the_stream_reads_back_in_memory", the_stream_reads_back_in_memory),
                          ("missing_path_is_not_ok_and_the_command_ends", missing_path_is_not_ok_and_the_command_ends)])


def scenario_sessions(c, rig, boot):
    ch = boot.ch
    main = gp.MAIN_SESSION

    def main_runs():
        ch.setup(argv=["sh", "-c", "echo main-ready; read x; echo \"main-done $x\""], env=BASE_ENV + [("FROM", "main")],
                 output_credit=CREDIT, stdin_open=True)
        ch.view(main)["credit"] = CREDIT
        ch.send(gp.GO)
        ch.pump(lambda h: b"main-ready" in h.view(main)["stdout"] and h.view(main)["stdin_credit"] > 0, STEP_TIMEOUT)

    def an_exec_has_its_own_output_env_and_exit():
        ch.open_exec(1, ["sh", "-c", "echo one $FROM $OWN; echo one-err >&2; exit 3"], env=[("OWN", "own")])
        ch.pump(lambda h: gp.ended(h.view(1)), STEP_TIMEOUT)
        v = ch.view(1)
        assert v["stdout"] == b"one main own\n" and v["stderr"] == b"one-err\n", gp.summary(v)
        assert v["exited"] == {"session": 1, "signalled": False, "value": 3}, v["exited"]
        assert b"one" not in ch.view(main)["stdout"], "the exec's output reached the main command's"
        return f"pid {v['started']}"

    def sixteen_at_once_and_the_17th_refused():
        ids = range(2, 18)
        for i in ids:
            ch.open_exec(i, ["sh", "-c", "echo up; read y; echo \"fin $y\""], stdin_open=True)
        ch.pump(lambda h: all(h.view(i)["stdout"] == b"up\n" and h.view(i)["stdin_credit"] > 0 for i in ids),
                STEP_TIMEOUT * 2)
        ch.open_exec(18, ["echo", "never"])
        ch.pump(lambda h: gp.ended(h.view(18)), STEP_TIMEOUT)
        refused = ch.view(18)["start_failed"]
        assert refused and refused["reason"] == gp.REFUSED, gp.summary(ch.view(18))
        assert refused["detail"] == "box-guest runs at most 16 exec sessions at once, and 16 run", refused
        for i in ids:
            ch.send(gp.STDIN, gp.encode_data(i, f"{i}\n".encode()))
        ch.pump(lambda h: all(gp.ended(h.view(i)) for i in ids), STEP_TIMEOUT * 2)
        bad = [i for i in ids if ch.view(i)["stdout"] != f"up\nfin {i}\n".encode() or ch.view(i)["exited"]["value"] != 0]
        assert not bad, {i: gp.summary(ch.view(i)) for i in bad}
        return refused["detail"]

    def an_exec_on_a_pty_follows_its_resize():
        ch.open_exec(19, ["sh", "-c", "stty size; read z; stty size"], stdin_open=True, tty=True, rows=30, cols=90)
        ch.pump(lambda h: b"30 90" in h.view(19)["stdout"] and h.view(19)["stdin_credit"] > 0, STEP_TIMEOUT)
        ch.send(gp.RESIZE, gp.encode_resize(19, 31, 91))
        ch.send(gp.STDIN, gp.encode_data(19, b"\r"))
        ch.pump(lambda h: gp.ended(h.view(19)), STEP_TIMEOUT)
        out = bytes(ch.view(19)["stdout"])
        assert b"30 90\r\n" in out and b"31 91\r\n" in out, out
        return repr(out)

    def frames_for_a_session_not_open_are_logged_and_dropped():
        for ftype, payload in ((gp.STDIN, gp.encode_data(999, b"x")), (gp.SIGNAL, gp.encode_signal(9, 999)),
                               (gp.OUTPUT_CREDIT, gp.encode_session_credit(999, 1)),
                               (gp.STDIN_EOF, gp.encode_session_ref(1))):  # 1 has ended
            ch.send(ftype, payload)
        ch.send(gp.STDIN, gp.encode_data(main, b"still\n"))
        ch.pump(lambda h: gp.ended(h.view(main)), STEP_TIMEOUT)
        dropped = [line for line in ch.logs if "which is not open: dropped" in line]
        # Session 999 was never opened: logged. Session 1 ended: its late frame is dropped quietly,
        # as the credits the host granted the 16 execs while they ended were.
        assert len(dropped) == 3 and all("session 999," in line for line in dropped), ch.logs
        assert ch.view(main)["stdout"].endswith(b"main-done still\n"), gp.summary(ch.view(main))
        return dropped[0]

    def an_exec_after_the_main_command_is_refused():
        ch.open_exec(20, ["echo", "late"])
        ch.pump(lambda h: gp.ended(h.view(20)), STEP_TIMEOUT)
        f = ch.view(20)["start_failed"]
        assert f and f["detail"] == "the main command has ended: the instance is stopping", gp.summary(ch.view(20))
        return f["detail"]

    return c.steps(boot, [("main_command_runs", main_runs),
                          ("an_exec_has_its_own_output_env_and_exit", an_exec_has_its_own_output_env_and_exit),
                          ("sixteen_at_once_and_the_17th_refused", sixteen_at_once_and_the_17th_refused),
                          ("an_exec_on_a_pty_follows_its_resize", an_exec_on_a_pty_follows_its_resize),
                          ("frames_for_a_session_not_open_are_logged_and_dropped",
                           frames_for_a_session_not_open_are_logged_and_dropped),
                          ("an_exec_after_the_main_command_is_refused", an_exec_after_the_main_command_is_refused)])


ABOX_SCENARIOS = [scenario_selftest_and_exit_7, scenario_output_under_credit, scenario_stdin, scenario_identity,
                  scenario_signal, scenario_tty, scenario_copy_in, scenario_copy_out, scenario_sessions]
ALL_SCENARIOS = ABOX_SCENARIOS + [scenario_passt]


def hello_line(boot):
    h = boot.hello
    want = f"{nr.GUEST_ADDR}/{nr.GUEST_PREFIX} via {nr.GATEWAY} dns {nr.GATEWAY} mtu {nr.GUEST_MTU}"
    assert h["version"] == gp.PROTOCOL_VERSION, h
    assert h["network_up"] and h["network"] == want, f"hello says {h}, want network {want!r}"
    return h


def run_boot(c, rig, initramfs, start_net, scenario):
    boot = Boot(rig, initramfs, start_net)
    label = scenario.__name__[len("scenario_"):]
    try:
        try:
            secs = boot.boot()
            h = hello_line(boot)
            c.report(f"{label}: boots_and_says_hello", True,
                     f"{secs:.1f} s after QEMU started, uptime {h['uptime_ms']} ms, {h['agent']}: {h['network']}{boot.note}")
        except Exception as e:  # noqa: BLE001 - nothing else can run on this boot
            c.report(f"{label}: boots_and_says_hello", False, f"{type(e).__name__}: {e}\n{boot.console()}")
            return
        ok = scenario(c, rig, boot)
        if ok is False:
            print("--- guest console (tail) ---\n" + boot.console(), end="")

        def poweroff():
            rc = boot.poweroff()
            assert rc == 0, f"qemu exit status {rc}" if rc is not None else f"qemu still running {POWEROFF_TIMEOUT} s on"

        c.steps(boot, [(f"{label}: poweroff_ends_qemu_with_0", poweroff)])
    finally:
        boot.close()


def build_image(rig, box_guest):
    r = rig.run(["bash", BUILD_IMAGE, "--box-guest", box_guest, "--kernel-dir", vm.KERNEL_DIR, rig.dir], timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"build.sh failed {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip().splitlines()[-1]


def main(argv):
    if len(argv) >= 2 and not argv[1].startswith("--"):
        box_guest = os.path.abspath(argv.pop(1))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(vm.KERNEL_DIR, "vmlinux")):
        print(f"box_guest_e2e: no guest kernel in {vm.KERNEL_DIR} (scripts/setup.sh fetches it)")
        return 1
    scenarios = list(ALL_SCENARIOS)

    def setup(rig, mode):
        rig.build_internet()
        rig.make_ca([WEB])
        rig.start_nsd(vm.ZONE_RECORDS)
        rig.start_nginx({WEB: {"index.html": b"box-guest e2e\n"}}, extra_ports=())
        rig.add_netns(rig.guest)  # QEMU's: nothing in it but lo

    def run(rig, mode, abox):
        c = Checks()
        initramfs = build_image(rig, box_guest)
        for scenario in scenarios:
            if scenario is scenario_passt:
                vm.prepare_passt(rig)  # a default route in outside: only after every abox-net boot
                start_net = lambda path: vm.start_passt(rig, path)  # noqa: E731
            else:
                start_net = lambda path: rig.start_abox_net(abox, POLICY, link=["--stream", path])  # noqa: E731
            run_boot(c, rig, initramfs, start_net, scenario)
        return c.passed, c.failed

    tools = ["ip", "nsd", "nginx", "dig", "openssl", "ss", "qemu-system-x86_64", "cpio", "strip", "readelf", "passt"]
    return nr.run_suite("box_guest_e2e", "bge", tools, argv, scenarios, setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
