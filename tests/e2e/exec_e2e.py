#!/usr/bin/env python3
"""End-to-end test of `abox exec` and of `abox attach` on a terminal, as an operator uses them.

The real `abox` (in the rig's outside namespace, as daemon_e2e.py runs it),
the daemon, a shim per instance and real QEMU guests (the minimal image,
TCG). Terminals are real ptys made by this test (os.openpty), with abox as
their session's foreground process, so a window change reaches it as
SIGWINCH, as from a terminal emulator.

Usage:
  exec_e2e.py PATH/TO/abox [--keep] [--only WORD[,WORD]]

Cases (one detached instance `ex`, started with -i and an environment of its
own, whose main command prints a tick a second to stdout and waits):
- basics: an exec's stdout, stderr and exit status are its own: none of it in
  the main command's logs, none of the main command's in it; the main
  command runs on;
- codes: 127 not found, 126 not executable, 143 when SIGTERM ended it, 137
  SIGKILL, 0;
- options: -e on top of the instance's environment (its own variable and a
  nonce-free -e), -w, -u 0 (uid 0, no capabilities);
- two_at_once: two execs that each wait for the other's file both end;
- stdin: 300 KiB piped through `abox exec -i` reach sha256sum intact; EOF
  closes it;
- tty_resize: `abox exec -t -i ex -- sh` on a pty of 30x100: `stty size`
  says so, and after the pty is resized to 40x120 (SIGWINCH to abox exec)
  says that; `exit 3` ends abox exec with 3, and the terminal is out of raw
  mode again;
- bound: 16 execs at once wait on their stdin; a 17th is refused (exit 125,
  the bound in the message); then the 16 end as their stdin says, each with
  its own output;
- signals: SIGINT to abox exec reaches the command (its trap runs, exit 5); an
  abox exec killed with SIGKILL takes its command with it;
- stopped: exec of a stopped instance and of no instance: exit 125, the
  reason;
- keys: an instance with a [[broker]] binding: an exec has its nonce; -e
  with the key, the key in argv, and -e replacing the nonce are refused
  (125) and the key is in no message;
- attach_tty: an instance started with -d -t -i; `abox attach` on a pty of
  33x111: raw mode, the command's terminal is 33x111, keys reach the shell,
  Ctrl-P Ctrl-Q detaches (exit 0) with the terminal restored and the
  instance still running; attach again works, and --detach-keys is obeyed.
Every wait is bounded. Everything the test makes is removed at the end.
"""
import fcntl
import hashlib
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_e2e as de  # noqa: E402  (the harness: abox in the outside namespace, the daemon)
import netns_rig as nr  # noqa: E402

EXEC_TIMEOUT = 120
MAIN = "echo main-ready; i=0; while true; do echo tick-$i; i=$((i+1)); sleep 1; done"


def exec_cmd(h, *args):
    return h.abox_cmd("exec", *args)


def run_exec(h, *args, stdin=None, timeout=EXEC_TIMEOUT):
    p = subprocess.run(exec_cmd(h, *args), input=stdin, capture_output=True, timeout=timeout, env=h.env,
                       stdin=None if stdin is not None else subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


class Pty:
    """A terminal of the test's: abox runs on its slave as the session's
    foreground process; the test types on the master and reads the screen."""

    def __init__(self, h, args, rows, cols):
        self.master, slave = os.openpty()
        self.set_size(rows, cols, fd=slave)
        self.slave_name = os.ttyname(slave)

        def controlling_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=dict(h.env, TERM="vt100"),
                                     preexec_fn=controlling_terminal, close_fds=True)
        self.slave = slave  # kept open: the terminal lives while the test reads it
        self.screen = b""

    def set_size(self, rows, cols, fd=None):
        fcntl.ioctl(self.master if fd is None else fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, data):
        os.write(self.master, data.encode() if isinstance(data, str) else data)

    def read_until(self, pattern, timeout=60, start=0):
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.screen[start:])
            if m:
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {pattern!r} on the terminal within {timeout} s: {self.screen[-600:]!r}")
            r, _, _ = select.select([self.master], [], [], min(left, 1))
            if r:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise EOFError(f"abox ended ({self.proc.returncode}) before {pattern!r}: {self.screen[-600:]!r}")
                self.screen += chunk

    def wait(self, timeout=60):
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            r, _, _ = select.select([self.master], [], [], 0.2)
            if r:
                try:
                    self.screen += os.read(self.master, 65536)
                except OSError:
                    pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            raise TimeoutError(f"abox did not end within {timeout} s: {self.screen[-600:]!r}")
        # What abox wrote just before it ended may still wait in the pty: the
        # loop above stops at the exit, not at the last byte (bounded: 50 reads).
        for _ in range(50):
            r, _, _ = select.select([self.master], [], [], 0.1)
            if not r:
                break
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.screen += chunk
        return self.proc.returncode

    def raw(self):
        """Whether the terminal is in raw mode now (no echo, no line editing)."""
        lflag = termios.tcgetattr(self.slave)[3]
        return not (lflag & termios.ECHO) and not (lflag & termios.ICANON)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


def start_main(h):
    code, out, err = h.run("run", "-d", "-i", "--policy", h.policy, "--name", "ex", "--no-selftest", "-e",
                           "MAIN_VAR=from-main", "--", "sh", "-c", MAIN)
    h.check("run_d_ex", code == 0, err)
    h.wait_output("ex", "main-ready")


def case_basics(h):
    code, out, err = run_exec(h, "ex", "--", "sh", "-c", "echo exec-out; echo exec-err >&2; exit 7")
    h.check("exec_exit_code_is_the_commands", code == 7, f"exit {code}: {out!r} {err}")
    h.check("exec_stdout_is_its_own", out == b"exec-out\n", out)
    h.check("exec_stderr_is_its_own", err == "exec-err\n", err)
    logs = h.wait_output("ex", "tick-2")
    h.check("the_main_commands_logs_hold_none_of_it", "exec-out" not in logs and "exec-err" not in logs, logs[-300:])
    h.check("the_main_command_runs_on", h.state_of("ex") == "running")
    ev = [json.loads(l) for l in h.run("events", "--json", "ex")[1].splitlines() if l.startswith("{")]
    kinds = {e.get("kind") for e in ev}
    h.check("events_show_the_exec", {"exec", "exec_started", "exec_exited"} <= kinds, kinds)
    # Said, not checked (tests check behaviour, not timings): what one exec costs here.
    times = []
    for _ in range(10):
        t0 = time.monotonic()
        run_exec(h, "ex", "--", "true")
        times.append(time.monotonic() - t0)
    times.sort()
    accel = h.json_of("inspect", "--json", "ex").get("accel", "?")
    print(f"     abox exec ex -- true: median {times[5] * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms of 10 "
          f"(the CLI, the daemon, the shim, a {accel} guest; load {os.getloadavg()[0]:.1f})")


def case_codes(h):
    for name, args, want in (("not_found", ["no-such-command"], 127), ("not_executable", ["/etc/hostname"], 126),
                             ("sigterm", ["sh", "-c", "kill -TERM $$"], 143),
                             ("sigkill", ["sh", "-c", "kill -KILL $$"], 137), ("ok", ["true"], 0)):
        code, out, err = run_exec(h, "ex", "--", *args)
        h.check(f"exit_{want}_{name}", code == want, f"exit {code}: {out!r} {err}")
    code, _, err = run_exec(h, "ex")
    h.check("usage_without_a_command_is_125", code == 125 and "no command" in err, f"exit {code}: {err}")


def case_options(h):
    code, out, err = run_exec(h, "-e", "FOO=bar", "-w", "/tmp", "ex", "--", "sh", "-c",
                              "echo $FOO $MAIN_VAR $HOME; pwd; id -u")
    h.check("env_on_top_of_the_instances_workdir", code == 0 and out == b"bar from-main /home/agent\n/tmp\n1000\n",
            f"exit {code}: {out!r} {err}")
    # uid 0 has no capabilities: /home/agent (0700, the agent's) is closed to it, so -w.
    code, out, err = run_exec(h, "-u", "0", "-w", "/", "ex", "--", "sh", "-c", "id -u; grep CapEff /proc/self/status")
    h.check("user_0_without_capabilities", code == 0 and out.split() == [b"0", b"CapEff:", b"0000000000000000"],
            f"exit {code}: {out!r} {err}")
    code, out, err = run_exec(h, "-u", "0", "ex", "--", "true")
    h.check("user_0_cannot_enter_the_agents_home", code == 125 and "workdir /home/agent (Permission denied)" in err,
            f"exit {code}: {err}")
    code, out, err = run_exec(h, "-w", "relative", "ex", "--", "true")
    h.check("a_relative_workdir_is_a_usage_error", code == 125 and "absolute" in err, f"exit {code}: {err}")


def case_two_at_once(h):
    def waiter(mine, theirs):
        return (f"touch /tmp/{mine}; i=0; while [ ! -e /tmp/{theirs} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); "
                f"done; test -e /tmp/{theirs} && echo {mine}-saw-{theirs}")
    a = subprocess.Popen(exec_cmd(h, "ex", "--", "sh", "-c", waiter("a", "b")), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=h.env)
    b = subprocess.Popen(exec_cmd(h, "ex", "--", "sh", "-c", waiter("b", "a")), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=h.env)
    oa, ea = a.communicate(timeout=EXEC_TIMEOUT)
    ob, eb = b.communicate(timeout=EXEC_TIMEOUT)
    h.check("two_execs_run_at_once", a.returncode == 0 and b.returncode == 0 and oa == b"a-saw-b\n" and
            ob == b"b-saw-a\n", f"{a.returncode} {oa!r} {ea!r} / {b.returncode} {ob!r} {eb!r}")


def case_stdin(h):
    data = os.urandom(300 << 10)
    code, out, err = run_exec(h, "-i", "ex", "--", "sha256sum", stdin=data)
    want = hashlib.sha256(data).hexdigest().encode()
    h.check("exec_i_stdin_arrives_intact", code == 0 and out.split()[:1] == [want], f"exit {code}: {out!r} {err}")
    code, out, err = run_exec(h, "-i", "ex", "--", "sh", "-c", "cat; echo after-eof", stdin=b"line\n")
    h.check("exec_i_eof_closes_stdin", code == 0 and out == b"line\nafter-eof\n", f"exit {code}: {out!r} {err}")
    code, out, err = run_exec(h, "ex", "--", "sh", "-c", "cat; echo stdin-empty", stdin=b"not sent\n")
    h.check("without_i_stdin_is_empty", code == 0 and out == b"stdin-empty\n", f"exit {code}: {out!r} {err}")


def case_tty_resize(h):
    t = Pty(h, exec_cmd(h, "-t", "-i", "ex", "--", "sh"), 30, 100)
    try:
        t.read_until(rb"[$#] ")
        h.check("exec_t_puts_the_terminal_in_raw_mode", t.raw())
        start = len(t.screen)
        t.type("stty size\r")
        h.check("exec_t_stty_size_is_the_terminals", bool(t.read_until(rb"30 100\r\n", start=start)))
        t.set_size(40, 120)  # the kernel sends SIGWINCH to abox exec, the foreground process
        deadline, seen = time.monotonic() + 60, False
        while time.monotonic() < deadline and not seen:
            start = len(t.screen)
            t.type("stty size\r")
            m = t.read_until(rb"(\d+ \d+)\r\n", start=start)
            seen = m.group(1) == b"40 120"
            if not seen:
                time.sleep(0.5)  # the resize may still be on its way
        h.check("exec_t_follows_a_resize", seen, t.screen[-300:])
        t.type("exit 3\r")
        code = t.wait()
        h.check("exec_t_exit_status", code == 3, f"exit {code}: {t.screen[-300:]!r}")
        h.check("exec_t_restores_the_terminal", not t.raw())
    finally:
        t.close()


def case_bound(h):
    procs = []
    try:
        for i in range(16):
            procs.append(subprocess.Popen(exec_cmd(h, "-i", "ex", "--", "sh", "-c", "echo up; read x; echo fin $x"),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          env=h.env))
        ups = 0
        for p in procs:
            r, _, _ = select.select([p.stdout], [], [], EXEC_TIMEOUT)
            ups += bool(r) and p.stdout.readline() == b"up\n"
        h.check("sixteen_execs_run_at_once", ups == 16, f"{ups} of 16 said up")
        code, out, err = run_exec(h, "ex", "--", "echo", "never")
        h.check("the_17th_is_refused_with_the_bound", code == 125 and "at most 16 exec sessions" in err and
                out == b"", f"exit {code}: {out!r} {err}")
        results = []
        for i, p in enumerate(procs):
            out, err = p.communicate(input=f"{i}\n".encode(), timeout=EXEC_TIMEOUT)
            results.append((p.returncode, out))
        bad = [(i, r) for i, r in enumerate(results) if r != (0, f"fin {i}\n".encode())]
        h.check("the_sixteen_are_unaffected", not bad, bad)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def case_signals(h):
    p = subprocess.Popen(exec_cmd(h, "ex", "--", "sh", "-c",
                                  "trap 'echo got-int; exit 5' INT; echo ready; while :; do sleep 0.2; done"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=h.env)
    r, _, _ = select.select([p.stdout], [], [], EXEC_TIMEOUT)
    ready = bool(r) and p.stdout.readline() == b"ready\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=EXEC_TIMEOUT)
    h.check("sigint_reaches_the_command", ready and p.returncode == 5 and out == b"got-int\n",
            f"{ready} exit {p.returncode}: {out!r} {err!r}")
    p = subprocess.Popen(exec_cmd(h, "ex", "--", "sh", "-c", "echo pid=$$; exec sleep 600"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=h.env)
    r, _, _ = select.select([p.stdout], [], [], EXEC_TIMEOUT)
    line = p.stdout.readline().decode() if r else ""
    p.kill()  # SIGKILL to abox exec: its connection goes, and the shim kills the command
    p.wait()
    pid = line.strip().partition("=")[2]
    gone = False
    deadline = time.monotonic() + 60
    while pid and time.monotonic() < deadline and not gone:
        code, out, _ = run_exec(h, "ex", "--", "sh", "-c", f"kill -0 {pid} 2>/dev/null && echo alive || echo gone")
        gone = out == b"gone\n"
        if not gone:
            time.sleep(0.5)
    h.check("a_killed_abox_exec_takes_its_command", pid != "" and gone, f"{line!r}")


def case_stopped(h):
    code, _, err = h.run("run", "-d", "--policy", h.policy, "--name", "ex-stopped", "--no-selftest", "--",
                         "sleep", "600")
    h.check("run_d_ex_stopped", code == 0, err)
    h.run("stop", "ex-stopped")
    code, out, err = run_exec(h, "ex-stopped", "--", "true")
    h.check("exec_of_a_stopped_instance_is_125_with_the_reason",
            code == 125 and "'ex-stopped' is not running (it is stopped)" in err, f"exit {code}: {err}")
    code, out, err = run_exec(h, "no-such-instance", "--", "true")
    h.check("exec_of_no_instance_is_125", code == 125 and "no instance named 'no-such-instance'" in err,
            f"exit {code}: {err}")
    h.run("rm", "ex-stopped")


def case_attach_tty(h):
    code, _, err = h.run("run", "-d", "-t", "-i", "--policy", h.policy, "--name", "tt", "--no-selftest", "--",
                         "sh")
    h.check("run_d_t_i_starts", code == 0, err)
    inspect = h.json_of("inspect", "--json", "tt")
    h.check("inspect_says_tty_and_interactive", inspect.get("tty") is True and inspect.get("interactive") is True,
            inspect)
    t = Pty(h, h.abox_cmd("attach", "tt"), 33, 111)
    try:
        t.read_until(rb"its terminal")
        deadline, size = time.monotonic() + 60, b""
        while time.monotonic() < deadline and size != b"33 111":
            start = len(t.screen)
            t.type("stty size\r")
            size = t.read_until(rb"(\d+ \d+)\r\n", start=start).group(1)
        h.check("attach_gives_the_command_this_terminals_size", size == b"33 111", t.screen[-300:])
        # Raw mode comes right after the banner: by the command's first answer it is there.
        h.check("attach_puts_the_terminal_in_raw_mode", t.raw())
        start = len(t.screen)
        t.type("echo hi-$((6*7))\r")
        h.check("keys_reach_the_command", bool(t.read_until(rb"hi-42\r\n", start=start)))
        t.type(b"\x10\x11")  # Ctrl-P Ctrl-Q
        code = t.wait()
        h.check("ctrl_p_ctrl_q_detaches", code == 0 and b"detached from tt" in t.screen, f"exit {code}: {t.screen[-300:]!r}")
        h.check("detaching_restores_the_terminal", not t.raw())
    finally:
        t.close()
    h.check("the_instance_runs_on_after_detach", h.state_of("tt") == "running")
    t = Pty(h, h.abox_cmd("attach", "--detach-keys", "ctrl-a,d", "tt"), 20, 70)
    try:
        t.read_until(rb"its terminal")
        deadline, size = time.monotonic() + 60, b""
        while time.monotonic() < deadline and size != b"20 70":
            start = len(t.screen)
            t.type("stty size\r")
            size = t.read_until(rb"(\d+ \d+)\r\n", start=start).group(1)
        h.check("attach_again_with_another_size", size == b"20 70", t.screen[-300:])
        t.type(b"\x10\x11")  # not the sequence now: goes to the shell (harmless there)
        t.type(b"\x01d")  # ctrl-a d
        code = t.wait()
        h.check("detach_keys_are_obeyed", code == 0 and b"detached from tt" in t.screen, f"exit {code}")
    finally:
        t.close()
    h.check("still_running", h.state_of("tt") == "running")
    h.run("rm", "-f", "tt")
    h.gone("attach_tty", "tt")


def case_keys(h):
    """An instance with a [[broker]] binding: the exec has its nonce, and an -e
    that would put the key in the guest, or replace the nonce, is refused."""
    policy, creds = de.broker_policy_and_credentials(h, "keys")
    key = open(creds).read().split('"')[1]
    code, _, err = h.run("run", "-d", "--policy", policy, "--credentials", creds, "--upstream-ca", h.rig.ca["ca"],
                         "--name", "exk", "--no-selftest", "--", "sleep", "600")
    h.check("run_d_with_a_binding", code == 0, err)
    # At once after run -d (it returns at go): an exec is taken before the command reported its start.
    code, out, err = run_exec(h, "exk", "--", "sh", "-c", "echo $TEST_API_KEY")
    h.check("an_exec_has_the_bindings_nonce", code == 0 and out.startswith(b"abox-nonce-"), f"exit {code}: {out!r} {err}")
    code, out, err = run_exec(h, "-e", f"SNEAKY={key}", "exk", "--", "true")
    h.check("an_exec_with_a_key_in_its_env_is_refused", code == 125 and "SNEAKY" in err and key not in err,
            f"exit {code}: {err}")
    code, out, err = run_exec(h, "exk", "--", "echo", key)
    h.check("an_exec_with_a_key_in_its_argv_is_refused", code == 125 and key not in err and out == b"",
            f"exit {code}: {err}")
    code, out, err = run_exec(h, "-e", "TEST_API_KEY=other", "exk", "--", "true")
    h.check("an_exec_replacing_the_nonce_is_refused", code == 125 and "TEST_API_KEY" in err, f"exit {code}: {err}")
    h.run("rm", "-f", "exk")
    h.gone("keys", "exk")


CASES = [case_basics, case_codes, case_options, case_two_at_once, case_stdin, case_tty_resize, case_bound,
         case_signals, case_stopped, case_attach_tty, case_keys]


def main(argv):
    def setup(rig, mode):
        rig.build_internet()
        rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()] + [f"api IN A {de.WEB_ADDR}"])
        rig.make_ca([de.WEB, nr.fqdn("api")])
        rig.start_nginx({de.WEB: {"index.html": b"web\n"}})

    def run(rig, mode, abox):
        h = de.Harness(rig, abox)
        try:
            code, _, err = h.run("image", "build", "minimal", timeout=600)
            if code != 0:
                h.check("image_build", False, err)
                return h.passed, h.failed
            start_main(h)
            for case in CASES:
                try:
                    case(h)
                except Exception as e:  # noqa: BLE001 - one case's failure must not hide the others
                    h.check(case.__name__, False, f"{type(e).__name__}: {e}")
            h.check("ex_still_running_after_every_case", h.state_of("ex") == "running")
        finally:
            try:
                for i in h.json_of("ls", "-a", "--json")["instances"]:
                    h.run("rm", "-f", i["name"])
                os.kill(h.ping()["pid"], signal.SIGTERM)
            except Exception as e:  # noqa: BLE001
                print(f"     cleanup: {e}")
        return h.passed, h.failed

    return nr.run_suite("exec_e2e", "exe", ["qemu-system-x86_64", "nsd", "nginx", "setpriv", "ss"], argv, CASES,
                        setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
