#!/usr/bin/env python3
"""End-to-end test of `abox run`: the whole instance, as an operator starts it.

Each case runs the real `abox run` (inside the rig's outside namespace, so
abox-net's host sockets reach the fake internet of netns_rig.py: nsd for
example.test, nginx) with a real QEMU guest (the minimal image: busybox and
box-guest, TCG here) and checks what the operator sees: stdout, stderr, the
exit code, the events file, and that nothing of the instance is left.

Usage:
  run_e2e.py PATH/TO/abox [--keep] [--only WORD[,WORD]]

Cases (one boot each):
- image: `abox image build minimal` builds with progress; `abox image ls --json` lists it current;
- out_err_exit: `sh -c 'echo out; echo err >&2; exit 7'` gives out on stdout, err on
  stderr, exit 7; the self-test ran first and passed (events), and `--json` sums it up;
- one_mib: 1 MiB made in the guest arrives on stdout intact (sha256);
- cpus_and_memory: --cpus 2 --memory 256M are what the guest has (nproc, MemTotal);
- names_and_addresses: in the guest an allowed name resolves, a denied name does not,
  a direct address is refused; abox-net's events show the admission and each refusal;
- broker_secrets: with a [[broker]] binding the guest's environment holds the nonce and
  no key, everything the agent can read (every file, /proc/cmdline, its env) holds no
  key, and QEMU's /proc/PID/cmdline holds neither key nor nonce;
- stdin: `-i` forwards stdin with EOF (`sha256sum` of 300 KiB);
- tty: -t -i in a pty the test owns: /dev/pts/0 of the host's size, a resize,
  Ctrl-C interrupting a guest sleep, Ctrl-Z stopping one, busybox vi, exit 5, the terminal restored;
- copy_in: a tree (files, a symlink, a mode) lands owned by uid 1000;
- cp_running: `abox cp NAME:PATH -` of a running instance is a tar stream
  (read in memory, never unpacked); a missing path exits 1;
- idle_timeout: `--idle-timeout 3s` on `sleep 60` exits 124;
- stdout_closed: `yes` with abox's stdout closed after 100 bytes gets SIGPIPE: exit 141;
- not_found: a command that is not in the guest exits 127;
- ipv6: with `--ipv6 on` the guest's kernel gets an address in the instance's ULA /64 by
  SLAAC and a default route via fe80::1 (abox-net's start event says ipv6 on); a mode
  other than off or on exits 125;
- timeout: `--timeout 2s` on `sleep 60` exits 124 within the grace;
- sigint: SIGINT to abox run while `sleep 60` runs: exit 130, everything gone within 5 s;
- vmm_killed: SIGKILL to QEMU mid-run: exit 122, the crash named, nothing left;
- keep: `--keep` keeps the state folder with events.jsonl, console.log, instance.json;
- publish: `--publish 18700:8000` and busybox httpd in the guest: curl on the host's
  loopback gets its page;
- bad_policy: an invalid policy exits 125 naming file:line:column; no boot.
After every case: no abox-net, broker or QEMU process of the instance is left and its
state folder is gone (unless kept).

Every wait is bounded. Everything the test makes is removed at the end.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # the source tree may be read-only
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

WEB, SECRET = nr.fqdn("web"), nr.fqdn("secret")
WEB_ADDR, SECRET_ADDR, NS_ADDR = nr.ADDR["web"], nr.ADDR["secret"], nr.ADDR["ns1"]
RUN_TIMEOUT = 120  # one abox run, boot included; 5-15 s here

POLICY = f"""# run_e2e.py: written by the test
version = 1
[dns]
upstreams = ["{NS_ADDR}:53"]

[[allow]]
names = ["{WEB}"]
ports = [80]
"""

KEY = "sk-test-" + os.urandom(24).hex()
POLICY_BROKER = POLICY + f"""
[[broker]]
name = "api.{nr.ZONE}"
port = 443
credential = "testkey"
header = "x-api-key"
nonce_env = "TEST_API_KEY"
"""

SELFTEST = ["--selftest-name", SECRET, "--selftest-address", f"{SECRET_ADDR}:80",
            "--selftest-resolver", f"{NS_ADDR}:53"]


class Harness:
    def __init__(self, rig, abox):
        self.rig, self.abox = rig, abox
        self.state = rig.path("state")
        self.cache = rig.path("cache")
        self.env = dict(os.environ, XDG_STATE_HOME=self.state, XDG_CACHE_HOME=self.cache, LANG="C.UTF-8")
        self.env.pop("TERM", None)
        self.policy = rig.path("policy.toml")
        with open(self.policy, "w") as f:
            f.write(POLICY)
        self.passed = self.failed = 0
        self.n = 0

    def check(self, name, ok, note=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {note}")
        sys.stdout.flush()

    def name(self):
        self.n += 1
        return f"e2e{self.n}"

    def cmd(self, *args):
        return ["ip", "netns", "exec", self.rig.outside, self.abox, *args]

    def run(self, args, input=None, timeout=RUN_TIMEOUT):
        """abox run ARGS to completion: (returncode, stdout bytes, stderr text)."""
        p = subprocess.run(self.cmd("run", *args), input=input, capture_output=True, timeout=timeout, env=self.env)
        return p.returncode, p.stdout, p.stderr.decode(errors="replace")

    def start(self, args):
        return subprocess.Popen(self.cmd("run", *args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env)

    def instance_dir(self, name):
        return os.path.join(self.state, "abox", "instances", name)

    def wait_for_event(self, name, kind, timeout=RUN_TIMEOUT):
        path = os.path.join(self.instance_dir(name), "events.jsonl")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in read_events(path):
                if e.get("kind") == kind:
                    return e
            time.sleep(0.1)
        return None

    def leftovers(self, name):
        """Processes of the instance still alive, and its state folder if present."""
        left = []
        r = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, timeout=10)
        for line in r.stdout.splitlines():
            if f"instances/{name}/" in line or f"abox-{name}" in line:
                left.append(line.strip())
        if os.path.exists(self.instance_dir(name)):
            left.append(self.instance_dir(name))
        return left

    def nothing_left(self, case, name):
        left = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            left = self.leftovers(name)
            if not left:
                break
            time.sleep(0.1)
        self.check(f"{case}_leaves_nothing", not left, str(left))


def read_events(path):
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def case_image(h):
    r = subprocess.run(h.cmd("image", "build", "minimal"), capture_output=True, text=True, timeout=300, env=h.env)
    h.check("image_build", r.returncode == 0 and "abox image:" in r.stderr,
            f"exit {r.returncode}: {r.stderr[-800:]}")
    r = subprocess.run(h.cmd("image", "ls", "--json"), capture_output=True, text=True, timeout=30, env=h.env)
    try:
        images = json.loads(r.stdout)["images"]
    except (ValueError, KeyError):
        images = []
    h.check("image_ls_lists_it_current", any(i["name"] == "minimal" and i["current"] for i in images), r.stdout)


def case_out_err_exit(h):
    name = h.name()
    events = h.rig.path(f"{name}.events")
    code, out, err = h.run(["--policy", h.policy, "--name", name, "--events", events, "--json", *SELFTEST, "--",
                            "sh", "-c", "echo out; echo err >&2; exit 7"])
    h.check("out_on_stdout", out == b"out\n", repr(out))
    h.check("err_on_stderr", "err\n" in err, err[-800:])
    h.check("exit_status_7", code == 7, f"exit {code}: {err[-800:]}")
    ev = read_events(events)
    probes = [e for e in ev if e.get("kind") == "selftest"]
    h.check("selftest_passed_before_the_command",
            len(probes) == 3 and all(p.get("outcome") == "passed" for p in probes),
            json.dumps(probes))
    kinds = [e.get("kind") for e in ev]
    h.check("events_in_deny_first_order",
            _in_order(kinds, ["instance", "selftest", "command_started", "command_exited"]), str(kinds))
    summary = None
    for line in err.splitlines():
        if line.startswith("{"):
            try:
                summary = json.loads(line)
            except ValueError:
                pass
    h.check("json_summary", summary is not None and summary.get("exit_code") == 7 and
            summary.get("outcome") == "exited", str(summary))
    h.nothing_left("out_err_exit", name)


def _in_order(kinds, wanted):
    at = 0
    for k in kinds:
        if at < len(wanted) and k == wanted[at]:
            at += 1
    return at == len(wanted)


def case_one_mib(h):
    name = h.name()
    # 1 MiB made in the guest from a fixed pattern; its digest computed here.
    pattern = b"".join(b"%07d\n" % i for i in range(131072))
    want = hashlib.sha256(pattern).hexdigest()
    code, out, err = h.run(["--policy", h.policy, "--name", name, *SELFTEST, "--",
                            "sh", "-c", "seq 0 131071 | awk '{printf \"%07d\\n\", $1}'"])
    h.check("one_mib_intact", code == 0 and len(out) == len(pattern) and hashlib.sha256(out).hexdigest() == want,
            f"exit {code}, {len(out)} bytes: {err[-500:]}")
    h.nothing_left("one_mib", name)


def case_cpus_and_memory(h):
    """--cpus and --memory are the guest's: QEMU gives it that many CPUs and
    that much memory, whatever the host has."""
    name = h.name()
    code, out, err = h.run(["--policy", h.policy, "--name", name, "--cpus", "2", "--memory", "256M", *SELFTEST,
                            "--", "sh", "-c", "nproc; grep MemTotal /proc/meminfo"])
    lines = out.decode(errors="replace").split()
    kib = int(lines[2]) if len(lines) > 2 and lines[2].isdigit() else 0
    # MemTotal is the memory less what the kernel keeps for itself.
    h.check("cpus_and_memory_are_the_guests", code == 0 and lines[:1] == ["2"] and 200 * 1024 < kib <= 256 * 1024,
            f"exit {code}: {out[-200:]!r} {err[-400:]}")
    h.nothing_left("cpus_and_memory", name)


def case_names_and_addresses(h):
    name = h.name()
    events = h.rig.path(f"{name}.events")
    # Not wget -T: busybox 1.35's static wget crashes with it (guest/README.md).
    script = (f"nslookup {WEB} >/dev/null 2>&1 && echo allowed-resolves || echo allowed-fails; "
              f"nslookup {SECRET} >/dev/null 2>&1 && echo denied-resolves || echo denied-fails; "
              f"timeout 5 wget -q -O - http://{WEB}/host 2>/dev/null | grep -q host= && echo web-ok || echo web-fails; "
              f"timeout 5 nc {SECRET_ADDR} 80 </dev/null >/dev/null 2>&1 && echo direct-connects || echo direct-refused")
    code, out, err = h.run(["--policy", h.policy, "--name", name, "--events", events, *SELFTEST, "--",
                            "sh", "-c", script])
    text = out.decode(errors="replace")
    for word in ("allowed-resolves", "denied-fails", "web-ok", "direct-refused"):
        h.check(f"guest_{word.replace('-', '_')}", word in text, f"exit {code}: {text} {err[-500:]}")
    ev = read_events(events)
    h.check("events_show_the_admission", any(e.get("kind") == "admit" for e in ev), "no admit event")
    h.check("events_show_the_denied_name",
            any(e.get("kind") in ("dns_deny", "deny") and SECRET in json.dumps(e) for e in ev), "no deny for the name")
    h.check("events_show_the_direct_address",
            any(e.get("kind") == "deny" and SECRET_ADDR in json.dumps(e) for e in ev), "no deny for the address")
    h.nothing_left("names_and_addresses", name)


def case_broker_secrets(h):
    name = h.name()
    policy = h.rig.path("policy-broker.toml")
    with open(policy, "w") as f:
        f.write(POLICY_BROKER)
    creds = h.rig.path("credentials.toml")
    with open(creds, "w") as f:
        f.write(f'[credentials]\ntestkey = "{KEY}"\n')
    os.chmod(creds, 0o600)
    # Everything the agent can read goes to stdout; the host looks for the key in it.
    script = ("echo ENV; env; echo CMDLINE; cat /proc/cmdline; echo FILES; "
              "find / -xdev -type f 2>/dev/null | while read f; do cat \"$f\" 2>/dev/null; done; echo END")
    p = h.start(["--policy", policy, "--credentials", creds, "--name", name, "--keep", *SELFTEST, "--",
                 "sh", "-c", "sleep 2; " + script])
    started = h.wait_for_event(name, "command_started", timeout=RUN_TIMEOUT)
    qemu_cmdline = b""
    try:
        with open(os.path.join(h.instance_dir(name), "instance.json")) as f:
            pid = json.load(f)["processes"]["vmm"]["pid"]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            qemu_cmdline = f.read()
    except (OSError, ValueError, KeyError) as e:
        qemu_cmdline = str(e).encode()
    try:
        out, err = p.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    text = out.decode(errors="replace")
    env_part = text.split("CMDLINE")[0]
    nonce_line = [l for l in env_part.splitlines() if l.startswith("TEST_API_KEY=")]
    nonce = nonce_line[0].split("=", 1)[1] if nonce_line else ""
    h.check("broker_run_ok", started is not None and p.returncode == 0 and "END" in text,
            f"exit {p.returncode}: {err.decode(errors='replace')[-800:]}")
    h.check("guest_env_holds_the_nonce", nonce.startswith("abox-nonce-") and len(nonce) == 75, str(nonce_line))
    h.check("no_key_anywhere_the_agent_can_read", KEY.encode() not in out and KEY[8:].encode() not in out,
            "the key was in the guest")
    h.check("qemu_argv_holds_no_key_or_nonce",
            b"qemu" in qemu_cmdline and KEY.encode() not in qemu_cmdline and
            (not nonce or nonce.encode() not in qemu_cmdline) and b"abox-nonce" not in qemu_cmdline,
            qemu_cmdline[:300])
    folder = h.instance_dir(name)
    kept = os.path.isdir(folder)
    h.check("kept_folder_has_events_console_and_record",
            kept and all(os.path.exists(os.path.join(folder, f)) for f in ("events.jsonl", "console.log",
                                                                            "instance.json", "policy.toml")),
            str(os.listdir(folder)) if kept else "no folder")
    if kept:
        with open(os.path.join(folder, "instance.json")) as f:
            record = json.load(f)
        h.check("record_says_stopped", record.get("state") == "stopped" and record.get("outcome") == "exited",
                json.dumps(record))
        subprocess.run(["rm", "-rf", folder], timeout=30)


def case_stdin(h):
    name = h.name()
    data = os.urandom(300 << 10)
    code, out, err = h.run(["--policy", h.policy, "--name", name, "-i", *SELFTEST, "--", "sha256sum"], input=data)
    h.check("stdin_forwarded_with_eof", code == 0 and hashlib.sha256(data).hexdigest().encode() in out,
            f"exit {code}: {out[:200]} {err[-500:]}")
    h.nothing_left("stdin", name)


def case_stdout_closed(h):
    """`abox run -- yes | head -1`: when abox's reader goes away, the command
    gets SIGPIPE in the guest, as a pipeline's writer would, and abox exits 141."""
    name = h.name()
    p = h.start(["--policy", h.policy, "--name", name, *SELFTEST, "--", "yes"])
    got = b""
    deadline = time.monotonic() + RUN_TIMEOUT
    while len(got) < 100 and time.monotonic() < deadline:
        chunk = os.read(p.stdout.fileno(), 100)
        if not chunk:
            break
        got += chunk
    p.stdout.close()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    h.check("stdout_closed_gives_the_command_sigpipe", got.startswith(b"y\n") and p.returncode == 141,
            f"exit {p.returncode}, got {got[:20]!r}: {p.stderr.read().decode(errors='replace')[-400:]}")
    h.nothing_left("stdout_closed", name)


def case_tty(h):
    """-t -i in a real terminal (a pty the test owns): the guest's tty, its size
    and a resize, Ctrl-C interrupting a sleep in the guest, busybox vi, the
    command's exit status, and this terminal's settings as they were after."""
    import fcntl
    import pty
    import struct
    import termios
    name = h.name()
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 31, 97, 0, 0))
    before = termios.tcgetattr(slave)
    p = subprocess.Popen(h.cmd("run", "--policy", h.policy, "--name", name, "-t", "-i", *SELFTEST, "--", "sh"),
                         stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=dict(h.env, TERM="xterm"))
    seen = bytearray()

    def expect(pattern, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pattern in seen:
                return True
            import select
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    seen.extend(os.read(master, 65536))
                except OSError:
                    return pattern in seen
        return pattern in seen

    def typed(text):
        os.write(master, text)

    ok = expect(b"$ ", timeout=RUN_TIMEOUT)
    typed(b"tty; stty size\r")
    ok_tty = expect(b"/dev/pts/0") and expect(b"31 97")
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p.send_signal(signal.SIGWINCH)  # what the kernel sends abox when its terminal changes size
    time.sleep(1)
    typed(b"stty size\r")
    ok_resize = expect(b"40 120")
    # The markers are computed by the shell, so the terminal's echo of what
    # was typed never matches them.
    typed(b"sleep 30; echo slept-$((6*7))\r")
    time.sleep(2)
    typed(b"\x03")
    typed(b"echo after-ctrl-$((6*7))\r")
    ok_ctrl_c = expect(b"after-ctrl-42", timeout=15) and b"slept-42" not in seen
    # Ctrl-Z stops the foreground job (the shell's job control says so), and
    # the shell can kill it.
    typed(b"sleep 31\r")
    time.sleep(2)
    typed(b"\x1a")
    ok_ctrl_z = expect(b"Stopped", timeout=15)
    typed(b"kill -9 %1; echo killed-$((6*7))\r")
    ok_ctrl_z = ok_ctrl_z and expect(b"killed-42", timeout=15)
    typed(b"vi /tmp/x\r")
    time.sleep(3)
    # Apart, so that vi does not read ESC and ':' as one escape sequence.
    typed(b"ihello from vi")
    time.sleep(1)
    typed(b"\x1b")
    time.sleep(1)
    typed(b":wq\r")
    time.sleep(2)
    typed(b"cat /tmp/x; exit 5\r")
    ok_vi = expect(b"hello from vi")
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    after = termios.tcgetattr(slave)
    os.close(master)
    os.close(slave)
    err = p.stderr.read().decode(errors="replace")
    h.check("tty_shell_prompt", ok, seen[-300:])
    h.check("tty_is_a_pty_of_the_host_size", ok_tty, seen[-300:])
    h.check("tty_resize_reaches_the_guest", ok_resize, seen[-300:])
    h.check("tty_ctrl_c_interrupts_the_guest_command", ok_ctrl_c, seen[-300:])
    h.check("tty_ctrl_z_stops_the_guest_command", ok_ctrl_z, seen[-300:])
    h.check("tty_vi_edits_a_file", ok_vi, seen[-400:])
    h.check("tty_exit_status", p.returncode == 5, f"exit {p.returncode}: {err[-400:]}")
    h.check("tty_terminal_restored", before == after, f"{before} != {after}")
    h.nothing_left("tty", name)


def case_copy_in(h):
    """--copy-in of a tree: files, a symlink, a mode; owned by the agent in the guest."""
    name = h.name()
    tree = h.rig.path("tree")
    os.makedirs(f"{tree}/sub", exist_ok=True)
    with open(f"{tree}/a.txt", "w") as f:
        f.write("alpha\n")
    with open(f"{tree}/sub/run.sh", "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(f"{tree}/sub/run.sh", 0o750)
    if not os.path.islink(f"{tree}/link"):
        os.symlink("a.txt", f"{tree}/link")
    code, out, err = h.run(["--policy", h.policy, "--name", name, "--copy-in", f"{tree}:/home/agent/in",
                            "--copy-in", f"{tree}/a.txt", *SELFTEST, "--", "sh", "-c",
                            "cat in/tree/a.txt; in/tree/sub/run.sh; readlink in/tree/link; cat a.txt; "
                            "stat -c '%u:%g %a' in/tree/sub/run.sh in/tree a.txt"])
    text = out.decode(errors="replace")
    h.check("copy_in_lands_as_the_agent",
            code == 0 and "alpha\nran\na.txt\nalpha\n" in text and "1000:1000 750" in text and
            text.count("1000:1000") == 3, f"exit {code}: {text} {err[-500:]}")
    h.nothing_left("copy_in", name)


def case_cp_running(h):
    """abox cp NAME:PATH - of a running instance: a tar stream, read here in
    memory (never unpacked); a path that does not exist exits 1."""
    import io
    import tarfile
    name = h.name()
    p = h.start(["--policy", h.policy, "--name", name, *SELFTEST, "--", "sh", "-c",
                 "mkdir -p out && echo copied-out > out/f && sleep 60"])
    started = h.wait_for_event(name, "command_started")
    time.sleep(1)
    r = subprocess.run(h.cmd("cp", f"{name}:/home/agent/out", "-"), capture_output=True, timeout=RUN_TIMEOUT,
                       env=h.env)
    names, content = [], b""
    try:
        with tarfile.open(fileobj=io.BytesIO(r.stdout)) as t:
            names = t.getnames()
            member = t.extractfile("out/f")
            content = member.read() if member else b""
    except (tarfile.TarError, KeyError) as e:
        names = [f"not a tar: {e}"]
    h.check("cp_running_gives_a_tar_stream", started is not None and r.returncode == 0 and
            content == b"copied-out\n", f"exit {r.returncode}, {names}: {r.stderr.decode(errors='replace')[-400:]}")
    r = subprocess.run(h.cmd("cp", f"{name}:/nonexistent", "-"), capture_output=True, timeout=RUN_TIMEOUT, env=h.env)
    h.check("cp_missing_path_exits_1", r.returncode == 1, f"exit {r.returncode}: {r.stderr[-300:]}")
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    h.nothing_left("cp_running", name)


def case_idle_timeout(h):
    name = h.name()
    code, out, err = h.run(["--policy", h.policy, "--name", name, "--idle-timeout", "3s", *SELFTEST, "--",
                            "sleep", "60"])
    h.check("idle_timeout_exits_124", code == 124 and "idle-timeout" in err, f"exit {code}: {err[-400:]}")
    h.nothing_left("idle_timeout", name)


def case_not_found(h):
    name = h.name()
    code, out, err = h.run(["--policy", h.policy, "--name", name, *SELFTEST, "--", "no-such-command-here"])
    h.check("missing_command_exits_127", code == 127, f"exit {code}: {err[-500:]}")
    h.nothing_left("not_found", name)


def case_ipv6(h):
    # The guest's kernel configures itself from abox-net's router
    # advertisement (its default sysctls: accept_ra 1, autoconf 1); SLAAC's
    # duplicate address detection takes about a second, so poll (5 s at most).
    script = ("for i in $(seq 50); do ip -6 route show default | grep -q 'via fe80::1' && "
              "ip -6 addr show dev eth0 scope global | grep -q 'inet6 fd' && "
              "! ip -6 addr show dev eth0 | grep -q tentative && break; sleep 0.1; done; "
              "ip -6 addr show dev eth0 scope global; ip -6 route show default")
    name = h.name()
    events = h.rig.path(f"{name}.events")
    code, out, err = h.run(["--policy", h.policy, "--name", name, "--events", events, "--ipv6", "on", *SELFTEST,
                            "--", "sh", "-c", script])
    text = out.decode(errors="replace")
    h.check("ipv6_on_gives_a_slaac_address_in_a_ula_64", code == 0 and "inet6 fd" in text and "/64" in text,
            f"exit {code}: {text} {err[-300:]}")
    h.check("ipv6_on_gives_a_default_route_via_the_gateway", "default via fe80::1" in text, text)
    h.check("ipv6_on_reaches_abox_net",
            any(e.get("kind") == "start" and e.get("ipv6") == "on" for e in read_events(events)), "no start event")
    h.nothing_left("ipv6", name)
    code, out, err = h.run(["--policy", h.policy, "--name", h.name(), "--ipv6", "tcp", "--", "true"])
    h.check("ipv6_takes_off_or_on", code == 125 and "--ipv6 tcp: off or on" in err, f"exit {code}: {err[-300:]}")


def case_timeout(h):
    name = h.name()
    t0 = time.monotonic()
    code, out, err = h.run(["--policy", h.policy, "--name", name, "--timeout", "2s", *SELFTEST, "--", "sleep", "60"])
    took = time.monotonic() - t0
    h.check("timeout_exits_124", code == 124 and "timeout" in err, f"exit {code} after {took:.0f}s: {err[-500:]}")
    h.nothing_left("timeout", name)


def case_sigint(h):
    name = h.name()
    p = h.start(["--policy", h.policy, "--name", name, *SELFTEST, "--", "sleep", "60"])
    started = h.wait_for_event(name, "command_started")
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    took = time.monotonic() - t0
    h.check("sigint_stops_within_5s", started is not None and p.returncode == 130 and took < 5,
            f"exit {p.returncode} after {took:.1f}s: {p.stderr.read().decode(errors='replace')[-500:]}")
    h.nothing_left("sigint", name)


def case_vmm_killed(h):
    name = h.name()
    p = h.start(["--policy", h.policy, "--name", name, *SELFTEST, "--", "sleep", "60"])
    started = h.wait_for_event(name, "command_started")
    pid = None
    try:
        with open(os.path.join(h.instance_dir(name), "instance.json")) as f:
            pid = json.load(f)["processes"]["vmm"]["pid"]
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, KeyError) as e:
        print(f"     (could not kill QEMU: {e})")
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    err = err.decode(errors="replace")
    h.check("vmm_killed_exits_122_and_says_so",
            started is not None and pid is not None and p.returncode == 122 and "SIGKILL" in err,
            f"exit {p.returncode}: {err[-500:]}")
    h.nothing_left("vmm_killed", name)


def case_publish(h):
    """--publish: busybox httpd in the guest answers curl on the host's
    loopback (the namespace abox run runs in) through the instance's abox-net."""
    name = h.name()
    page = "hello-from-the-guest"
    p = h.start(["--policy", h.policy, "--name", name, "--publish", "18700:8000", "--timeout", "60s", *SELFTEST,
                 "--", "sh", "-c", f"mkdir -p /tmp/www && echo {page} > /tmp/www/index.html && "
                 "exec httpd -f -p 8000 -h /tmp/www"])
    started = h.wait_for_event(name, "command_started")
    got, deadline = None, time.monotonic() + 30
    while started is not None and time.monotonic() < deadline:
        r = h.rig.run(["curl", "-sS", "--max-time", "5", "http://127.0.0.1:18700/index.html"], ns=h.rig.outside,
                      timeout=10)
        if r.returncode == 0:
            got = r.stdout
            break
        time.sleep(0.5)
    h.check("publish_curl_on_the_host_reaches_the_guest", got == page + "\n", f"{got!r}")
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    h.nothing_left("publish", name)


def case_bad_policy(h):
    bad = h.rig.path("bad.toml")
    with open(bad, "w") as f:
        f.write("version = 1\n[[allow]]\nnames = [\"x.test\"]\nports = [0]\n")
    name = h.name()
    code, out, err = h.run(["--policy", bad, "--name", name, "--", "true"], timeout=60)
    h.check("bad_policy_exits_125_with_its_place", code == 125 and f"{bad}:4:" in err, f"exit {code}: {err[-500:]}")
    h.nothing_left("bad_policy", name)


CASES = [case_image, case_out_err_exit, case_one_mib, case_cpus_and_memory, case_names_and_addresses, case_broker_secrets, case_stdin,
         case_stdout_closed, case_tty, case_copy_in, case_cp_running, case_idle_timeout, case_not_found, case_ipv6, case_timeout, case_sigint, case_vmm_killed, case_publish, case_bad_policy]


def main(argv):
    def setup(rig, mode):
        rig.build_internet()
        rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()] + [f"api IN A {WEB_ADDR}"])
        rig.make_ca([WEB, nr.fqdn("other")])
        rig.start_nginx({WEB: {"index.html": b"web\n"}, nr.fqdn("other"): {"index.html": b"other\n"}})

    def run(rig, mode, abox):
        h = Harness(rig, abox)
        for case in CASES:
            try:
                case(h)
            except Exception as e:  # noqa: BLE001 - one case's failure must not hide the others
                h.check(case.__name__, False, f"{type(e).__name__}: {e}")
        return h.passed, h.failed

    return nr.run_suite("run_e2e", "run", ["qemu-system-x86_64", "nsd", "nginx", "openssl"], argv, CASES,
                        setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
