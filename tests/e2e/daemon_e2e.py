#!/usr/bin/env python3
"""End-to-end test of `abox daemon` and the fleet commands, as an operator uses them.

Every command is the real `abox` (inside the rig's outside namespace, so each
abox-net reaches the fake internet of netns_rig.py: nsd for example.test,
nginx) with real QEMU guests (the minimal image). The first command starts the
daemon (and says so); the test also speaks the daemon's API directly
(docs/api.md) for what the CLI does not show (the daemon's pid, memory, fds,
refused peers).

Usage:
  daemon_e2e.py PATH/TO/abox [--keep] [--only WORD[,WORD]]

Cases:
- lifecycle: run -d prints the name and starts the daemon; ls/--json, inspect,
  logs (agent-reported), events, stats; stop keeps the folder; start boots again
  with a fresh nonce (the guest prints its nonce: it changed) and the same disk;
  rm of a running one is refused, rm -f removes it; nothing left;
- attach: to an instance of run -d -i: its stdin is attach's (lines echoed, EOF
  reaches the command); without -i input is refused with the reason, and Ctrl-C
  detaches, leaving it running;
- peers: the API refuses a peer of another uid (nobody, via setpriv) even when
  the socket's mode would let it in, and counts it; the CLI as nobody cannot reach it;
- bad_requests: malformed lines get an error with the id, the connection lives on;
- daemon_killed: SIGKILL to the daemon while two instances run; the next command
  starts a new daemon that finds both running; both stop; a shim killed by
  SIGKILL leaves its instance failed and nothing running;
- four: four instances at once, each with its own policy: each reaches its own
  name and none of the others';
- nonce_of_another: instance A's guest sends instance B's nonce to A's broker:
  refused (nonce_unknown, an event); A's own nonce is served; stats count it;
  B, started with no --credentials, took its key from the operator's store:
  its broker's argv, environment and fds hold no key and no path to the store,
  its memory holds its key and not the store's key that no binding of B uses;
  `abox credentials ls` names both instances as running and binding the key;
- lifecycle_classes: THREATS.md's "Lifecycle and helper" battery classes
  through the daemon, each with its control: a box-guest frame MACed under
  the previous boot's key after `abox start` (hostile_vmm.py as the daemon's
  QEMU) is dropped as forged and its exit not believed (control: under the
  boot's own key it is); a `started` before go fails the instance (control:
  the honest boot's start counts); a real guest's command's first act reaches
  only the policy's name (control: a policy allowing both);
- unprivileged: the daemon as a uid of its own (a bare uid, no account, no
  /dev/kvm: TCG), its own XDG folders: run -d over --stream end to end (the
  command's output in logs), ls right; the daemon, shim, abox-net and QEMU
  all of that uid; its runtime and state folders 0700, every file in them
  0600 or tighter, all owned by it; root is refused by its daemon; abox-helper
  as root configured for another operator refuses this uid (and serves it once
  configured for it: the control); stop, rm, and nothing of that uid left.
  Started with no helper running, the instance has no cgroup and says why
  (inspect's cgroup, a cgroup event); this host's cgroup v2 has no
  controllers, so the instances' cgroups for real are e2e.helper's VM test
  (tests/helper/daemon_cgroup_test.cc); doctor is the helper's client here;
- publish: run -d --publish: inspect --json lists the port, curl on the host's
  loopback reaches busybox httpd in the guest, rm -f leaves nothing;
- churn: N run -d/stop/rm cycles (ABOX_CHURN, default 10): afterwards no process,
  socket or state folder of them, the daemon's fds as before and its memory
  within 2 MiB of where it was.
Every wait is bounded. Everything the test makes is removed at the end.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_rig as nr  # noqa: E402

WEB, SECRET, NS_ADDR, WEB_ADDR = nr.fqdn("web"), nr.fqdn("secret"), nr.ADDR["ns1"], nr.ADDR["web"]
SITES = [nr.fqdn(f"site{i}") for i in range(1, 5)]
CMD_TIMEOUT = 180  # one command, a boot included (5-20 s here)
CHURN = int(os.environ.get("ABOX_CHURN", "10"))


def policy_text(names):
    return f"""# daemon_e2e.py: written by the test
version = 1
[dns]
upstreams = ["{NS_ADDR}:53"]

[[allow]]
names = {json.dumps(names)}
ports = [80]
"""


BROKER = f"""
[[broker]]
name = "api.{nr.ZONE}"
port = 443
credential = "testkey"
header = "x-api-key"
nonce_env = "TEST_API_KEY"
"""

SELFTEST = ["--selftest-name", SECRET, "--selftest-address", f"{nr.ADDR['secret']}:80",
            "--selftest-resolver", f"{NS_ADDR}:53"]
TICK = "echo started; i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done"


class Harness:
    def __init__(self, rig, abox):
        self.rig, self.abox = rig, abox
        self.state = rig.path("state")
        self.runtime = rig.path("run")
        os.makedirs(self.runtime, mode=0o700)
        # The operator's credential store (abox credentials' default), for an
        # instance started without --credentials.
        self.store = os.path.join(rig.path("config"), "abox", "credentials.toml")
        self.env = dict(os.environ, XDG_STATE_HOME=self.state, XDG_CACHE_HOME=rig.path("cache"),
                        XDG_RUNTIME_DIR=self.runtime, XDG_CONFIG_HOME=rig.path("config"), LANG="C.UTF-8")
        self.env.pop("ABOX_CREDENTIALS", None)
        self.env.pop("TERM", None)
        self.policy = rig.path("policy.toml")
        with open(self.policy, "w") as f:
            f.write(policy_text([WEB]))
        self.passed = self.failed = 0
        self.socket = os.path.join(self.runtime, "abox", "daemon.sock")

    def check(self, name, ok, note=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {str(note)[-1500:]}")
        sys.stdout.flush()

    def abox_cmd(self, *args, user=None):
        group = "nogroup" if user == "nobody" else user
        pre = ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups"] if user else []
        return ["ip", "netns", "exec", self.rig.outside, *pre, self.abox, *args]

    def run(self, *args, timeout=CMD_TIMEOUT, user=None, env=None):
        p = subprocess.run(self.abox_cmd(*args, user=user), capture_output=True, timeout=timeout, env=env or self.env,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def json_of(self, *args):
        code, out, err = self.run(*args)
        try:
            return json.loads(out)
        except ValueError:
            raise RuntimeError(f"abox {' '.join(args)}: exit {code}: {out[-400:]} {err[-800:]}")

    def api(self, *requests):
        """Sends each request (dicts) on one connection; returns the replies, one per request."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self.socket)
        for i, r in enumerate(requests):
            s.sendall((json.dumps(dict({"v": 1, "id": i + 1}, **r)) + "\n").encode())
        buf, replies = b"", {}
        while len(replies) < len(requests):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                m = json.loads(line)
                replies.setdefault(m.get("id"), m)
        s.close()
        return [replies.get(i + 1) for i in range(len(requests))]

    def ping(self):
        return self.api({"op": "ping"})[0]

    def folder(self, name):
        return os.path.join(self.state, "abox", "instances", name)

    def processes_of(self, name):
        r = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, timeout=10)
        return [l.strip() for l in r.stdout.splitlines()
                if f"instances/{name}/" in l or l.rstrip().endswith(f"instances {name}")]

    def gone(self, case, name, timeout=10):
        left = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.processes_of(name) + ([self.folder(name)] if os.path.exists(self.folder(name)) else [])
            if not left:
                break
            time.sleep(0.2)
        self.check(f"{case}_leaves_nothing", not left, left)

    def no_process(self, case, name, timeout=10):
        left = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.processes_of(name)
            if not left:
                break
            time.sleep(0.2)
        self.check(f"{case}_no_process_left", not left, left)

    def state_of(self, name):
        listing = self.json_of("ls", "-a", "--json")["instances"]
        return next((i["state"] for i in listing if i["name"] == name), None)

    def wait_output(self, name, word, timeout=60):
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            _, out, _ = self.run("logs", name)
            if word in out:
                return out
            time.sleep(0.5)
        return out


def case_lifecycle(h):
    name = "life"
    creds = h.rig.path("credentials.toml")
    with open(creds, "w") as f:
        f.write('[credentials]\ntestkey = "sk-test-' + os.urandom(16).hex() + '"\n')
    os.chmod(creds, 0o600)
    policy = h.rig.path("policy-life.toml")
    with open(policy, "w") as f:
        f.write(policy_text([WEB]) + BROKER)
    code, out, err = h.run("run", "-d", "--policy", policy, "--credentials", creds, "--name", name,
                           "--upstream-ca", h.rig.ca["ca"], *SELFTEST, "--",
                           "sh", "-c", "echo nonce=$TEST_API_KEY; echo to-stderr >&2; " + TICK)
    h.check("run_d_prints_the_name", code == 0 and out.strip() == name, f"exit {code}: {out} {err}")
    h.check("first_use_starts_the_daemon_and_says_so", "started it" in err, err)
    listing = h.json_of("ls", "--json")["instances"]
    mine = [i for i in listing if i["name"] == name]
    h.check("ls_json_shows_it_running", len(mine) == 1 and mine[0]["state"] == "running" and mine[0]["managed"],
            listing)
    code, table, _ = h.run("ls")
    h.check("ls_table", code == 0 and name in table and "running" in table, table)
    inspect = h.json_of("inspect", "--json", name)
    h.check("inspect_json", inspect.get("shim", {}).get("alive") is True and "--" in inspect.get("args", []) and
            inspect.get("processes", {}).get("vmm", {}).get("pid", 0) > 0, inspect)
    first = h.wait_output(name, "tick 1")
    code, _, lerr = h.run("logs", name)
    h.check("logs_hold_stdout_and_stderr", "started" in first and "to-stderr" in first and "tick 1" in first, first)
    h.check("logs_say_agent_reported", "agent-reported" in lerr, lerr)
    nonce1 = next((l.split("=", 1)[1] for l in first.splitlines() if l.startswith("nonce=")), "")
    h.check("guest_got_a_nonce", nonce1.startswith("abox-nonce-"), first[:300])
    # logs -f follows until the instance ends: stopped from the side while it follows.
    follower = subprocess.Popen(h.abox_cmd("logs", "-f", name), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=h.env)
    events = h.run("events", "--json", name)[1]
    kinds = [json.loads(l).get("kind") for l in events.splitlines() if l.startswith("{")]
    h.check("events_json", "command_started" in kinds and "selftest" in kinds and "instance" in kinds, kinds)
    code, ev_text, _ = h.run("events", name)
    h.check("events_text", code == 0 and "command_started" in ev_text, ev_text[-500:])
    stats = h.json_of("stats", "--json", name)
    h.check("stats_memory_and_network", stats.get("rss_kib", {}).get("vmm", 0) > 0 and
            stats.get("rss_kib", {}).get("shim", 0) > 0 and isinstance(stats.get("network"), dict), stats)
    code, out, err = h.run("stop", name)
    h.check("stop", code == 0 and h.state_of(name) == "stopped", f"exit {code}: {out} {err}")
    try:
        fout, _ = follower.communicate(timeout=30)
        h.check("logs_f_ends_with_the_instance", follower.returncode == 0 and b"tick" in fout, follower.returncode)
    except subprocess.TimeoutExpired:
        follower.kill()
        follower.communicate()
        h.check("logs_f_ends_with_the_instance", False, "still following 30 s after the stop")
    h.no_process("stop", name)
    h.check("stop_keeps_the_folder", os.path.exists(os.path.join(h.folder(name), "events.jsonl")))
    code, out, err = h.run("stop", name)
    h.check("stop_again_is_no_error", code == 0, f"exit {code}: {err}")
    secret1 = open(os.path.join(h.folder(name), "broker", "nonce-secret"), "rb").read()
    code, out, err = h.run("start", name)
    h.check("start_boots_it_again", code == 0 and h.state_of(name) == "running", f"exit {code}: {out} {err}")
    secret2 = open(os.path.join(h.folder(name), "broker", "nonce-secret"), "rb").read()
    h.check("start_makes_a_fresh_nonce_secret", len(secret2) == 32 and secret1 != secret2)
    deadline, nonces = time.monotonic() + 60, []
    while time.monotonic() < deadline:
        nonces = [l.split("=", 1)[1] for l in h.run("logs", name)[1].splitlines() if l.startswith("nonce=")]
        if len(nonces) >= 2:
            break
        time.sleep(0.5)
    h.check("the_guest_gets_a_fresh_nonce", len(nonces) == 2 and nonces[0] == nonce1 and nonces[1] != nonce1, nonces)
    ev = [json.loads(l) for l in h.run("events", "--json", name)[1].splitlines() if l.startswith("{")]
    h.check("events_show_the_second_boot", sum(1 for e in ev if e.get("kind") == "command_started") == 2)
    code, _, err = h.run("rm", name)
    h.check("rm_of_a_running_one_is_refused", code == 1 and "rm -f" in err and os.path.exists(h.folder(name)), err)
    code, _, err = h.run("rm", "-f", name)
    h.check("rm_f_removes_it", code == 0, err)
    h.gone("lifecycle", name)
    code, _, err = h.run("inspect", name)
    h.check("inspect_of_a_removed_one", code == 1 and "no instance" in err, err)
    for cmd in (["ls", "--bogus"], ["stop"], ["inspect", "a", "b"], ["logs"]):
        code, _, err = h.run(*cmd)
        h.check(f"usage_{cmd[0]}_{len(cmd)}", code == 2, f"exit {code}: {err}")
    code, out, _ = h.run("stop", "--help")
    h.check("help", code == 0 and "Exit status" in out, out)
    code, out, err = h.run("run", "-d", "--keep", "--policy", h.policy, "--", "true")
    h.check("run_d_refuses_keep", code == 125 and "--keep" in err, err)
    code, out, err = h.run("run", "-d", "--policy", h.rig.path("missing.toml"), "--no-selftest", "--", "true")
    h.check("run_d_of_a_broken_policy_fails_with_the_reason", code == 125 and "missing.toml" in err,
            f"exit {code}: {err}")
    failed = out.strip()
    if failed:
        h.run("rm", failed)


def case_attach(h):
    code, _, err = start_detached(h, "att")
    h.check("run_d_started", code == 0, err)
    # -i: the command's stdin is attach's.
    code, _, err = h.run("run", "-d", "-i", "--policy", h.policy, "--name", "atti", "--no-selftest", "--",
                         "sh", "-c", "echo ready; while read l; do echo \"got $l\"; done; echo stdin-closed; sleep 1")
    h.check("run_d_i_started", code == 0, err)
    h.wait_output("atti", "ready")
    p = subprocess.run(h.abox_cmd("attach", "atti"), input=b"hello\nworld\n", capture_output=True, timeout=60,
                       env=h.env)
    out = p.stdout.decode(errors="replace")
    h.check("attach_sends_stdin_and_shows_the_output", p.returncode == 0 and "got hello" in out and
            "got world" in out and "stdin-closed" in out, f"exit {p.returncode}: {out} {p.stderr[-300:]}")
    h.check("attach_ends_with_the_instance", h.state_of("atti") == "stopped")
    # Without -i: the output only; input is refused with the reason, the instance runs on.
    proc = subprocess.Popen(h.abox_cmd("attach", "att"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=h.env)
    proc.stdin.write(b"x\n")
    proc.stdin.flush()
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    h.check("attach_without_i_refuses_input", b"takes no input" in err, err[-300:])
    h.check("detaching_leaves_it_running", h.state_of("att") == "running")
    h.run("rm", "-f", "att", "atti")
    h.gone("attach", "att")
    h.gone("attach_i", "atti")


def case_peers(h):
    before = h.ping()["refused_peers"]
    # The CLI as nobody: the folder is root's, 0700; nobody cannot even reach it.
    code, _, err = h.run("ls", user="nobody")
    h.check("cli_as_nobody_cannot_reach_it", code == 3, f"exit {code}: {err}")
    # Open the path and the socket's mode: the daemon's SO_PEERCRED check is what stays.
    opened = [h.rig.dir, h.runtime, os.path.dirname(h.socket)]
    modes = {p: os.stat(p).st_mode & 0o777 for p in opened + [h.socket]}
    try:
        for p in opened:
            os.chmod(p, 0o711)
        os.chmod(h.socket, 0o666)
        client = ("import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1]); "
                  "s.sendall(b'{\"v\":1,\"id\":1,\"op\":\"ls\",\"all\":true}\\n'); d=b''\n"
                  "while True:\n c=s.recv(65536)\n if not c: break\n d+=c\nprint(d.decode())")
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c",
                            client, h.socket], capture_output=True, text=True, timeout=30)
        h.check("a_peer_of_another_uid_is_refused", "refused: uid" in r.stdout and "instances" not in r.stdout,
                r.stdout + r.stderr)
    finally:
        for p, m in modes.items():
            os.chmod(p, m)
    h.check("the_refusal_is_counted", h.ping()["refused_peers"] == before + 1)


def case_bad_requests(h):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(h.socket)
    lines = [b"not json", b'{"v":2,"id":7,"op":"ping"}', b'{"v":1,"id":8,"op":"stop","name":"../x"}',
             b'{"v":1,"id":9,"op":"rm","name":"a","name":"b"}', b'{"v":1,"id":10,"op":"ping"}']
    s.sendall(b"\n".join(lines) + b"\n")
    buf = b""
    while buf.count(b"\n") < len(lines):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    replies = [json.loads(l) for l in buf.splitlines()]
    errors = [(r.get("id"), r.get("ok")) for r in replies]
    h.check("malformed_requests_get_errors_with_their_ids",
            errors == [(0, False), (7, False), (8, False), (9, False), (10, True)], replies)


def start_detached(h, name, policy=None, command=None):
    return h.run("run", "-d", "--policy", policy or h.policy, "--name", name, "--no-selftest", "--",
                 "sh", "-c", command or TICK)


def case_daemon_killed(h):
    names = ["keep1", "keep2"]
    for n in names:
        code, out, err = start_detached(h, n)
        h.check(f"started_{n}", code == 0, err)
    old = h.ping()
    os.kill(old["pid"], signal.SIGKILL)
    time.sleep(0.5)
    shims_alive = all(h.processes_of(n) for n in names)
    h.check("instances_survive_the_daemon", shims_alive, [h.processes_of(n) for n in names])
    code, out, err = h.run("ls", "--json")
    listing = {i["name"]: i["state"] for i in json.loads(out)["instances"]} if code == 0 else {}
    h.check("a_new_daemon_finds_them_running", all(listing.get(n) == "running" for n in names) and
            "started it" in err, f"{listing} {err}")
    h.check("it_is_a_new_daemon", h.ping()["pid"] != old["pid"] and h.ping()["instances"] >= 2)
    code, out, err = h.run("stop", *names)
    h.check("adopted_ones_stop", code == 0 and all(h.state_of(n) == "stopped" for n in names), err)
    for n in names:
        h.no_process(f"adopted_{n}", n)
        h.run("rm", n)
    # A shim killed outright: its instance is failed and nothing of it runs.
    code, out, err = start_detached(h, "killed")
    shim_pid = h.json_of("inspect", "--json", "killed")["shim"]["pid"]
    os.kill(shim_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and h.state_of("killed") != "failed":
        time.sleep(0.2)
    h.check("a_killed_shim_leaves_it_failed", h.state_of("killed") == "failed")
    h.no_process("killed_shim", "killed")
    h.run("rm", "killed")
    h.gone("killed_shim", "killed")


def case_four(h):
    names = [f"four{i}" for i in range(1, 5)]
    script = "; ".join(f"timeout 5 wget -q -O - http://{s}/host 2>/dev/null | grep -q host= && "
                       f"echo reach-{i + 1}-ok || echo reach-{i + 1}-fails" for i, s in enumerate(SITES))
    for i, n in enumerate(names):
        p = h.rig.path(f"policy-{n}.toml")
        with open(p, "w") as f:
            f.write(policy_text([SITES[i]]))
        code, out, err = start_detached(h, n, p, script + "; echo checks-done; sleep 600")
        h.check(f"four_started_{n}", code == 0, err)
    running = [i for i in h.json_of("ls", "--json")["instances"] if i["name"] in names and i["state"] == "running"]
    h.check("four_run_at_once", len(running) == 4, running)
    for i, n in enumerate(names):
        out = h.wait_output(n, "checks-done", timeout=90)
        want = [f"reach-{j + 1}-{'ok' if j == i else 'fails'}" for j in range(4)]
        h.check(f"{n}_reaches_only_its_own_name", all(w in out for w in want), out[-400:])
    code, _, err = h.run("rm", "-f", *names)
    h.check("rm_f_of_four", code == 0, err)
    for n in names:
        h.gone(f"four_{n}", n)


def broker_policy_and_credentials(h, tag):
    creds = h.rig.path(f"credentials-{tag}.toml")
    with open(creds, "w") as f:
        f.write('[credentials]\ntestkey = "sk-test-' + os.urandom(16).hex() + '"\n')
    os.chmod(creds, 0o600)
    policy = h.rig.path(f"policy-{tag}.toml")
    with open(policy, "w") as f:
        f.write(policy_text([WEB]) + BROKER)
    return policy, creds


def memory_holds(pid, needles):
    """Which of `needles` (bytes) occur anywhere in the readable memory of
    process `pid` (root reads /proc/PID/mem), mapping by mapping."""
    found = {n: False for n in needles}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split()
            if "r" not in parts[1] or (len(parts) > 5 and parts[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if end - start > (512 << 20):
                continue
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            for n in needles:
                found[n] = found[n] or n in data
    return found


def check_broker_keys(h, name, key, unrelated):
    """The broker of `name` got its key over an fd: no key and no path to the
    store in its argv, environment or open fds; its memory holds its own key
    (the control) and not `unrelated`, a key of the store no binding uses."""
    procs = h.json_of("inspect", "--json", name).get("processes", {})
    pid = procs.get("broker", {}).get("pid")
    if not pid:
        h.check(f"{name}_broker_pid", False, procs)
        return
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read()
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    store = h.store.encode()
    h.check(f"{name}_broker_argv_has_the_fd_not_the_store",
            b"--credentials-fd" in argv and b"--credentials" not in argv and
            not any(store in a or key.encode() in a or b"credentials.toml" in a for a in argv), argv)
    h.check(f"{name}_broker_environment_has_no_key_nor_store",
            key.encode() not in environ and store not in environ and b"credentials" not in environ, environ)
    h.check(f"{name}_broker_keeps_no_fd_to_the_keys",
            not any("credentials" in l or "abox-broker-keys" in l for l in fds), fds)
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    h.check(f"{name}_broker_is_sandboxed (NoNewPrivs 1, Seccomp 2, CapEff 0)",
            (status.get("NoNewPrivs"), status.get("Seccomp"), status.get("CapEff")) ==
            ("1", "2", "0000000000000000"), {k: status.get(k) for k in ("NoNewPrivs", "Seccomp", "CapEff")})
    held = memory_holds(pid, [key.encode(), unrelated.encode()])
    h.check(f"{name}_broker_memory_holds_its_key_and_not_another", held[key.encode()] and
            not held[unrelated.encode()], held)


def case_nonce_of_another(h):
    """A's broker refuses B's nonce (nonce_unknown) and serves A's own. B
    takes its key from the operator's store (no --credentials), which also
    holds a key no binding of B names: B's broker never gets that one."""
    pb, _ = broker_policy_and_credentials(h, "b")
    key_b = "sk-test-" + os.urandom(16).hex()
    unrelated = "sk-unrelated-" + os.urandom(16).hex()
    os.makedirs(os.path.dirname(h.store), mode=0o700, exist_ok=True)
    with open(h.store, "w") as f:
        f.write(f'[credentials]\ntestkey = "{key_b}"\nunrelated = "{unrelated}"\n')
    os.chmod(h.store, 0o600)
    code, _, err = h.run("run", "-d", "--policy", pb, "--upstream-ca", h.rig.ca["ca"],
                         "--name", "nonceb", "--no-selftest", "--", "sh", "-c", "echo nonce=$TEST_API_KEY; sleep 600")
    h.check("nonce_b_started", code == 0, err)
    out = h.wait_output("nonceb", "nonce=")
    other = next((l.split("=", 1)[1] for l in out.splitlines() if l.startswith("nonce=")), "")
    check_broker_keys(h, "nonceb", key_b, unrelated)
    pa, ca = broker_policy_and_credentials(h, "a")
    api = f"https://api.{nr.ZONE}/host"
    script = (f"wget -q -O - --header \"x-api-key: $OTHER\" {api} >/dev/null 2>&1 && echo other-ok || echo other-refused; "
              f"wget -q -O - --header \"x-api-key: $TEST_API_KEY\" {api} 2>/dev/null | grep -q host= "
              f"&& echo own-ok || echo own-fails; echo checks-done; sleep 600")
    code, _, err = h.run("run", "-d", "--policy", pa, "--credentials", ca, "--upstream-ca", h.rig.ca["ca"],
                         "--name", "noncea", "--no-selftest", "-e", f"OTHER={other}", "--", "sh", "-c", script)
    h.check("nonce_a_started", code == 0 and other.startswith("abox-nonce-"), f"{other!r} {err}")
    out = h.wait_output("noncea", "checks-done", timeout=90)
    h.check("a_nonce_of_another_instance_is_refused", "other-refused" in out, out[-300:])
    h.check("the_own_nonce_is_served", "own-ok" in out, out[-300:])
    ev = [json.loads(l) for l in h.run("events", "--json", "noncea")[1].splitlines() if l.startswith("{")]
    h.check("the_refusal_is_an_event", any(e.get("kind") == "broker_refused" and e.get("reason") == "nonce_unknown"
                                           for e in ev), [e for e in ev if "broker" in e.get("kind", "")])
    stats = h.json_of("stats", "--json", "noncea")
    binding = stats.get("broker", {}).get(f"api.{nr.ZONE}", {})
    h.check("stats_count_the_broker_request", binding.get("requests", 0) >= 1, stats.get("broker"))
    # abox credentials ls: the daemon's instances that bind testkey, as running.
    code, out, err = h.run("credentials", "ls", "--json", "--store", ca)
    try:
        doc = json.loads(out)
    except ValueError:
        doc = {}
    testkey = next((c for c in doc.get("credentials", []) if c.get("name") == "testkey"), {})
    bound = {(b.get("instance"), b.get("state"), b.get("binding")) for b in testkey.get("bindings", [])}
    h.check("credentials_ls_names_the_running_instances_that_bind_a_key",
            doc.get("states") == "daemon" and testkey.get("stored") is True and
            {("noncea", "running", f"api.{nr.ZONE}:443"), ("nonceb", "running", f"api.{nr.ZONE}:443")} <= bound and
            "sk-test-" not in out, out + err)
    h.run("rm", "-f", "noncea", "nonceb")
    h.gone("nonce_a", "noncea")
    h.gone("nonce_b", "nonceb")


def case_churn(h):
    h.run("ls")  # the daemon is up and has served a list: its memory after warm-up
    code, out, err = start_detached(h, "warm")
    h.run("stop", "warm")
    h.run("rm", "warm")
    before = h.ping()
    for i in range(CHURN):
        n = f"churn{i}"
        code, out, err = start_detached(h, n, command="sleep 600")
        ok = code == 0
        code2, _, err2 = h.run("stop", n)
        code3, _, err3 = h.run("rm", n)
        if not (ok and code2 == 0 and code3 == 0):
            h.check(f"churn_cycle_{i}", False, f"{err} {err2} {err3}")
            return
    h.check(f"churn_{CHURN}_cycles", True)
    left = [n for i in range(CHURN) for n in [f"churn{i}"] if h.processes_of(n) or os.path.exists(h.folder(n))]
    h.check("churn_leaves_no_process_or_folder", not left, left)
    socks = subprocess.run(["ss", "-xa"], capture_output=True, text=True, timeout=10).stdout
    h.check("churn_leaves_no_socket", "churn" not in socks, [l for l in socks.splitlines() if "churn" in l])
    after = h.ping()
    h.check("daemon_fds_as_before", after["fds"] == before["fds"], f"{before['fds']} -> {after['fds']}")
    h.check("daemon_memory_back_within_2_mib", after["rss_kib"] <= before["rss_kib"] + 2048,
            f"{before['rss_kib']} KiB -> {after['rss_kib']} KiB")
    print(f"     churn: {CHURN} cycles; daemon {before['rss_kib']} -> {after['rss_kib']} KiB, "
          f"fds {before['fds']} -> {after['fds']}")


OPERATOR = 64128  # a bare uid, no passwd entry: the unprivileged operator of case_unprivileged
OTHER_OPERATOR = 64129


def helper_binary(abox):
    """abox-helper: ABOX_HELPER_BIN (CMake sets it), else the build tree's, beside abox's."""
    path = os.environ.get("ABOX_HELPER_BIN") or os.path.join(os.path.dirname(os.path.dirname(abox)), "helper",
                                                             "abox-helper")
    return path if os.access(path, os.X_OK) else None


def processes_of_uid(uid):
    """{pid: argv (a list of str)} of every process whose real uid is uid."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                real = next(int(l.split()[1]) for l in f if l.startswith("Uid:"))
            if real == uid:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out[int(pid)] = f.read().decode(errors="replace").split("\0")
        except (OSError, StopIteration, ValueError):
            pass
    return out


def loose_entries(top, uid):
    """Every entry under top (top included) not owned by uid, or a folder not
    0700, or a file or socket with any access for group or others."""
    bad = []
    for dirpath, dirs, files in os.walk(top):
        for path in [dirpath] + [os.path.join(dirpath, f) for f in files]:
            st = os.lstat(path)
            mode = st.st_mode & 0o777
            if st.st_uid != uid or (os.path.isdir(path) and mode != 0o700) or (mode & 0o077):
                bad.append(f"{path} uid {st.st_uid} mode {mode:o}")
    return bad


def start_helper(h, binary, operator, sock):
    log = open(h.rig.path(f"helper-{operator}.log"), "a")
    p = subprocess.Popen([binary, "--operator", str(operator), "--group", str(OPERATOR), "--socket", sock,
                          "--cgroup-root", "none"], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not os.path.exists(sock) and p.poll() is None:
        time.sleep(0.05)
    return p, log


def stop_helper(p, log):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=10)
    log.close()


def case_unprivileged(h):
    """The daemon as an unprivileged operator, the helper as root."""
    helper = helper_binary(h.abox)
    h.check("unprivileged_has_abox_helper", helper is not None, "set ABOX_HELPER_BIN")
    home = h.rig.path("operator")
    for sub in ("state", "cache", "config", "run"):
        os.makedirs(os.path.join(home, sub), mode=0o700)
    # The images root built: the operator's own copy (abox image build as
    # them would build the same bytes again, minutes on TCG).
    shutil.copytree(os.path.join(h.rig.path("cache"), "abox", "images"), os.path.join(home, "cache", "abox", "images"),
                    symlinks=True)
    subprocess.run(["chown", "-R", f"{OPERATOR}:{OPERATOR}", home], check=True, timeout=30)
    env = dict(os.environ, HOME=home, XDG_STATE_HOME=os.path.join(home, "state"),
               XDG_CACHE_HOME=os.path.join(home, "cache"), XDG_CONFIG_HOME=os.path.join(home, "config"),
               XDG_RUNTIME_DIR=os.path.join(home, "run"), LANG="C.UTF-8",
               ABOX_HELPER_SOCKET=h.rig.path("helper/helper.sock"))
    for k in ("ABOX_CREDENTIALS", "TERM"):
        env.pop(k, None)
    policy = os.path.join(home, "policy.toml")
    with open(policy, "w") as f:
        f.write(policy_text([WEB]))
    os.chown(policy, OPERATOR, OPERATOR)
    rundir = os.path.join(home, "run", "abox")
    sock = os.path.join(rundir, "daemon.sock")
    folder = os.path.join(home, "state", "abox", "instances", "unpriv")
    old_mode = os.stat(h.rig.dir).st_mode & 0o777
    os.chmod(h.rig.dir, 0o711)  # the operator may pass through the rig's folder to their own
    helper_procs = []
    try:
        script = ("echo unpriv-up; timeout 5 wget -q -O - http://" + WEB + "/ | grep -q web && echo reach-web-ok; "
                  + TICK)
        code, out, err = h.run("run", "-d", "--policy", policy, "--name", "unpriv", "--no-selftest", "--", "sh",
                               "-c", script, user=str(OPERATOR), env=env)
        h.check("unprivileged_run_d", code == 0 and out.strip() == "unpriv" and "started it" in err,
                f"exit {code}: {out} {err}")
        code, out, err = h.run("ls", "--json", user=str(OPERATOR), env=env)
        listing = json.loads(out)["instances"] if code == 0 else []
        h.check("unprivileged_ls_shows_it_running",
                [(i["name"], i["state"]) for i in listing] == [("unpriv", "running")], f"{out} {err}")
        deadline, logs = time.monotonic() + 120, ""
        while time.monotonic() < deadline and "tick 1" not in logs:
            logs = h.run("logs", "unpriv", user=str(OPERATOR), env=env)[1]
            time.sleep(0.5)
        h.check("unprivileged_instance_runs_its_command_over_stream", "unpriv-up" in logs and "reach-web-ok" in logs,
                logs[-400:])
        code, out, _ = h.run("inspect", "--json", "unpriv", user=str(OPERATOR), env=env)
        procs = json.loads(out).get("processes", {}) if code == 0 else {}
        # No helper runs yet: the instance has no cgroup, and says why (docs/helper.md).
        cgroup = json.loads(out).get("cgroup", {}) if code == 0 else {}
        h.check("unprivileged_without_a_helper_no_cgroup_and_why",
                cgroup.get("state") == "none" and "no abox-helper answers" in cgroup.get("reason", "") and
                env["ABOX_HELPER_SOCKET"] in cgroup.get("reason", ""), cgroup)
        code, evout, _ = h.run("events", "--json", "unpriv", user=str(OPERATOR), env=env)
        cg_events = [e for e in (json.loads(l) for l in evout.splitlines() if l.startswith("{"))
                     if e.get("kind") == "cgroup"]
        h.check("unprivileged_the_cgroup_event_says_none",
                [(e.get("source"), e.get("state")) for e in cg_events] == [("shim", "none")], cg_events)
        mine = processes_of_uid(OPERATOR)
        daemons = [pid for pid, argv in mine.items() if argv[0].endswith("abox") and argv[1:2] == ["daemon"]]
        pids = {k: v.get("pid") for k, v in procs.items() if isinstance(v, dict)}
        h.check("unprivileged_daemon_and_instance_processes_are_the_operators",
                len(daemons) == 1 and pids.get("vmm") in mine and pids.get("abox-net") in mine and
                all(p in mine for p in pids.values() if p), f"daemons {daemons}, instance {pids}, uid's {mine}")
        st = os.stat(sock)
        h.check("unprivileged_socket_0600_of_the_operator", st.st_uid == OPERATOR and (st.st_mode & 0o777) == 0o600,
                f"uid {st.st_uid} mode {st.st_mode & 0o777:o}")
        loose = loose_entries(rundir, OPERATOR) + loose_entries(folder, OPERATOR)
        h.check("unprivileged_runtime_and_state_folders_0700_files_0600_all_the_operators", not loose, loose)
        # Root is not this daemon's operator either.
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(sock)
        c.sendall(b'{"v":1,"id":1,"op":"ls","all":true}\n')
        answer = b""
        while len(answer) < 65536:
            chunk = c.recv(65536)
            if not chunk:
                break
            answer += chunk
        c.close()
        h.check("unprivileged_daemon_refuses_root", b"refused: uid 0" in answer and b"instances" not in answer,
                answer[-300:])
        # The helper as root, for another operator, reachable by this one's group: SO_PEERCRED refuses it.
        if helper:
            hdir = h.rig.path("helper")
            os.makedirs(hdir, mode=0o755, exist_ok=True)
            p, log = start_helper(h, helper, OTHER_OPERATOR, env["ABOX_HELPER_SOCKET"])
            helper_procs.append((p, log))
            code, out, err = h.run("doctor", "--json", user=str(OPERATOR), env=env, timeout=120)
            items = {i["id"]: i for i in json.loads(out).get("items", [])} if out.startswith("{") else {}
            h.check("helper_for_another_operator_refuses_this_daemons_uid",
                    items.get("helper", {}).get("status") == "DEGRADED" and
                    f"uid {OPERATOR} is not this helper's operator" in items["helper"].get("detail", ""),
                    items.get("helper", out + err))
            stop_helper(*helper_procs.pop())
            p, log = start_helper(h, helper, OPERATOR, env["ABOX_HELPER_SOCKET"])
            helper_procs.append((p, log))
            code, out, err = h.run("doctor", "--json", user=str(OPERATOR), env=env, timeout=120)
            items = {i["id"]: i for i in json.loads(out).get("items", [])} if out.startswith("{") else {}
            h.check("helper_for_this_operator_serves_it (the control)",
                    items.get("helper", {}).get("status") == "OK" and
                    items.get("daemon", {}).get("status") == "OK", [items.get("helper"), items.get("daemon")])
            stop_helper(*helper_procs.pop())
        code, _, err = h.run("stop", "unpriv", user=str(OPERATOR), env=env)
        h.check("unprivileged_stop", code == 0, err)
        code, _, err = h.run("rm", "unpriv", user=str(OPERATOR), env=env)
        h.check("unprivileged_rm", code == 0 and not os.path.exists(folder), err)
    finally:
        for p, log in helper_procs:
            stop_helper(p, log)
        for pid, argv in processes_of_uid(OPERATOR).items():
            if argv[0].endswith("abox"):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and processes_of_uid(OPERATOR):
            time.sleep(0.2)
        left = processes_of_uid(OPERATOR)
        h.check("unprivileged_leaves_no_process_of_the_operator", not left, left)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        os.chmod(h.rig.dir, old_mode)
        shutil.rmtree(home, ignore_errors=True)


HOSTILE_VMM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_vmm.py")


def events_of(h, name, env=None):
    out = h.run("events", "--json", name, env=env)[1]
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def wait_ended(h, name, env, timeout=90):
    """The instance's `ls -a --json` entry once its state is stopped or failed."""
    deadline, entry = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        code, out, _ = h.run("ls", "-a", "--json", env=env)
        entry = next((i for i in (json.loads(out)["instances"] if code == 0 else []) if i["name"] == name), {})
        if entry.get("state") in ("stopped", "failed"):
            break
        time.sleep(0.3)
    return entry


def case_lifecycle_classes(h):
    """THREATS.md's battery, "Lifecycle and helper", through the daemon.

    A box-guest event with a wrong key: a daemon of its own runs hostile_vmm.py
    as its QEMU (the daemon, shim, supervisor and abox-net are the real ones).
    After `abox start`, the guest sends `exited 0` MACed under the previous
    boot's key: dropped as forged (an event), the honest exit 3 recorded. The
    control: the same frame under the boot's own key is believed (exit 0), so
    the refusal is the key's doing. A `started` before go (the agent before
    the self-test and the policy check): the instance fails, no command ever
    counts as started; the control is the honest boot's command_started.

    The agent cannot start before the policy is active: in a real guest, the
    command's very first act reaches a name the policy does not allow and one
    it does: only the allowed one answers, and the denial is an event. The
    control: the same command under a policy that allows both reaches both."""
    env = dict(h.env, XDG_RUNTIME_DIR=h.rig.path("run-hv"), XDG_STATE_HOME=h.rig.path("state-hv"),
               ABOX_QEMU=HOSTILE_VMM)
    os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700)
    hv = ["run", "-d", "--accel", "tcg", "--policy", h.policy, "--no-selftest", "--name"]
    try:
        h.run(*hv, "hv-replay", "--", "true", env=env)
        first = wait_ended(h, "hv-replay", env)
        kinds = [e.get("kind") for e in events_of(h, "hv-replay", env)]
        h.check("hv_honest_boot_exits_3_and_counts_as_started (the control of early)",
                first.get("exit", {}).get("value") == 3 and "command_started" in kinds and
                "control_forged_frame" not in kinds, f"{first} {kinds}")
        code, _, err = h.run("start", "hv-replay", env=env)
        second = wait_ended(h, "hv-replay", env)
        ev = events_of(h, "hv-replay", env)
        forged = [e for e in ev if e.get("kind") == "control_forged_frame"]
        h.check("a_frame_under_the_previous_boots_key_is_dropped_as_forged",
                len(forged) == 1 and sum(1 for e in ev if e.get("kind") == "command_started") == 2, ev[-8:])
        h.check("the_forged_exit_is_not_believed", second.get("exit", {}).get("value") == 3, second)
        h.run(*hv, "hv-current", "--", "true", env=env)
        current = wait_ended(h, "hv-current", env)
        kinds = [e.get("kind") for e in events_of(h, "hv-current", env)]
        h.check("control: the same frame under the boots own key is believed",
                current.get("exit", {}).get("value") == 0 and "control_forged_frame" not in kinds,
                f"{current} {kinds}")
        # With self-test probes, so that go waits for their report (without
        # them go follows setup at once, and a start right after is in order).
        h.run("run", "-d", "--accel", "tcg", "--policy", h.policy, *SELFTEST, "--name", "hv-early", "--", "true",
              env=env)
        early = wait_ended(h, "hv-early", env)
        ev = events_of(h, "hv-early", env)
        h.check("a_command_started_before_go_is_refused_and_never_counts",
                early.get("state") == "failed" and "exit" not in early and
                not any(e.get("kind") == "command_started" for e in ev) and
                "started out of order" in json.dumps(ev), f"{early} {ev[-6:]}")
    finally:
        code, out, _ = h.run("ls", "-a", "--json", env=env)
        for i in (json.loads(out)["instances"] if code == 0 else []):
            h.run("rm", "-f", i["name"], env=env)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(os.path.join(env["XDG_RUNTIME_DIR"], "abox", "daemon.sock"))
            s.sendall(b'{"v":1,"id":1,"op":"ping"}\n')
            os.kill(json.loads(s.recv(65536).split(b"\n")[0])["pid"], signal.SIGTERM)
            s.close()
        except (OSError, ValueError, KeyError) as e:
            print(f"     cleanup of the hostile_vmm daemon: {e}")

    # The first instant of a real guest's command.
    # The target is site1, not the self-test's denied name (secret): a policy
    # allowing that one fails the self-test, and the control would not start.
    target = SITES[0]
    first_act = (f"timeout 5 wget -q -O - http://{target}/host 2>/dev/null | grep -q host= && echo target-reached "
                 f"|| echo target-refused; timeout 5 wget -q -O - http://{WEB}/host 2>/dev/null | grep -q host= && "
                 f"echo web-reached; echo checks-done")
    both = h.rig.path("policy-both.toml")
    with open(both, "w") as f:
        f.write(policy_text([WEB, target]))
    for name, policy, want in (("first", h.policy, ["target-refused", "web-reached"]),
                               ("firstctl", both, ["target-reached", "web-reached"])):
        code, _, err = h.run("run", "-d", "--policy", policy, "--name", name, *SELFTEST, "--", "sh", "-c",
                             first_act + "; sleep 600")
        out = h.wait_output(name, "checks-done", timeout=90)
        label = "the_agents_first_act_reaches_only_the_policys_names" if name == "first" else \
            "control: under a policy allowing both its first act reaches both"
        h.check(label, code == 0 and all(w in out for w in want), f"exit {code}: {err[-300:]} {out[-300:]}")
        if name == "first":
            ev = events_of(h, name)
            order = [e.get("kind") for e in ev]
            h.check("the_denial_is_an_event_and_the_self_test_came_before_the_command",
                    any(e.get("kind") == "deny" and target.rstrip(".") in e.get("name", "") for e in ev) and
                    "selftest" in order and
                    order.index("selftest") < order.index("command_started"), order)
        h.run("rm", "-f", name)
        h.gone(f"lifecycle_{name}", name)


def case_publish(h):
    name = "pub"
    page = "hello-from-a-detached-guest"
    code, out, err = h.run("run", "-d", "--policy", h.policy, "--name", name, "--publish", "18710:8000", *SELFTEST,
                           "--", "sh", "-c", f"mkdir -p /tmp/www && echo {page} > /tmp/www/index.html && "
                           "exec httpd -f -p 8000 -h /tmp/www")
    h.check("publish_run_d", code == 0 and out.strip() == name, f"exit {code}: {out} {err}")
    inspect = h.json_of("inspect", "--json", name)
    h.check("publish_inspect_shows_the_port", inspect.get("publish") == ["127.0.0.1:18710:8000"], inspect)
    got, deadline = None, time.monotonic() + 30
    while time.monotonic() < deadline:
        r = h.rig.run(["curl", "-sS", "--max-time", "5", "http://127.0.0.1:18710/index.html"], ns=h.rig.outside,
                      timeout=10)
        if r.returncode == 0:
            got = r.stdout
            break
        time.sleep(0.5)
    h.check("publish_curl_reaches_the_detached_guest", got == page + "\n", repr(got))
    code, _, err = h.run("rm", "-f", name)
    h.check("publish_rm_f", code == 0, err)
    h.gone("publish", name)


CASES = [case_lifecycle, case_attach, case_peers, case_bad_requests, case_daemon_killed, case_four, case_nonce_of_another,
         case_lifecycle_classes, case_unprivileged, case_churn, case_publish]


def main(argv):
    def setup(rig, mode):
        rig.build_internet()
        sites = [f"site{i} IN A {WEB_ADDR}" for i in range(1, 5)]
        rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()] + [f"api IN A {WEB_ADDR}"] + sites)
        rig.make_ca([WEB, nr.fqdn("api")] + SITES)
        rig.start_nginx({WEB: {"index.html": b"web\n"}, nr.fqdn("api"): {"index.html": b"api\n"},
                         **{s: {"index.html": b"site\n"} for s in SITES}})

    def run(rig, mode, abox):
        h = Harness(rig, abox)
        try:
            code, _, err = h.run("image", "build", "minimal", timeout=600)
            if code != 0:
                h.check("image_build", False, err)
                return h.passed, h.failed
            for case in CASES:
                try:
                    case(h)
                except Exception as e:  # noqa: BLE001 - one case's failure must not hide the others
                    h.check(case.__name__, False, f"{type(e).__name__}: {e}")
        finally:
            # Whatever a failed case left: removed, then the daemon stopped.
            try:
                for i in h.json_of("ls", "-a", "--json")["instances"]:
                    h.run("rm", "-f", i["name"])
                pid = h.ping()["pid"]
                os.kill(pid, signal.SIGTERM)
            except Exception as e:  # noqa: BLE001
                print(f"     cleanup: {e}")
        return h.passed, h.failed

    return nr.run_suite("daemon_e2e", "dmn", ["qemu-system-x86_64", "nsd", "nginx", "openssl", "setpriv", "ss"],
                        argv, CASES, setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
