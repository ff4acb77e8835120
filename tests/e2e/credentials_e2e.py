#!/usr/bin/env python3
"""`abox credentials` end to end, as the operator would use it: the real
`abox` run as an unprivileged uid (setpriv; a bare uid, no account is made)
with its own HOME, the key typed on a real terminal (a pty) or piped in, and
the real `abox broker` reading the store the command wrote.

Checks: the store is made 0600 in a 0700 folder, owned by the operator; a
key typed on the terminal is never shown on it and the echo comes back; the
key is in no output of any command; a store owned by someone else (root) or
open to the group is refused by every command and by the broker, and left
as it was; ls names the bindings of the instances' policies (with their
states: as recorded, or the real daemon's answer when it runs) and of
--policy files, and the ones missing, and makes no daemon folder when none
runs; rm is all or none; the broker starts with what
`set` wrote.

Usage: credentials_e2e.py PATH/TO/abox
Prints "ok/FAIL name" per check and "N passed, N failed"; exits 1 on any
failure. Every wait is bounded; the temp folder is removed at the end.
"""
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import tempfile
import termios
import time

OPERATOR = 64125
KEY = "sk-e2e-" + os.urandom(12).hex()
TYPED = "sk-typed-" + os.urandom(12).hex()

POLICY = """[[broker]]
name = "api.example.test"
credential = "{cred}"
header = "x-api-key"
nonce_env = "PROVIDER_API_KEY"
"""


class Suite:
    def __init__(self, abox, root):
        self.abox, self.root = abox, root
        self.home = os.path.join(root, "home")
        self.store = os.path.join(self.home, ".config", "abox", "credentials.toml")
        self.passed = self.failed = 0
        self.outputs = []  # every stdout/stderr any command printed

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}")

    def env(self):
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home,
                "XDG_STATE_HOME": os.path.join(self.home, ".local", "state"),
                "XDG_RUNTIME_DIR": os.path.join(self.home, "run")}

    def argv(self, *args, uid=OPERATOR):
        prefix = [] if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        return prefix + [self.abox, *args]

    def run(self, *args, stdin=b"", uid=OPERATOR):
        r = subprocess.run(self.argv(*args, uid=uid), input=stdin, capture_output=True, timeout=30,
                           env=self.env())
        out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
        self.outputs += [out, err]
        return r.returncode, out, err

    def store_text(self):
        with open(self.store) as f:
            return f.read()


def case_set_from_a_pipe(t):
    rc, out, err = t.run("credentials", "set", "provider", stdin=(KEY + "\n").encode())
    t.check("set from a pipe", rc == 0 and out == f"stored provider in {t.store}\n", (rc, out, err))
    st, folder = os.stat(t.store), os.stat(os.path.dirname(t.store))
    t.check("the store is 0600 and the operator's", st.st_mode & 0o777 == 0o600 and st.st_uid == OPERATOR,
            (oct(st.st_mode), st.st_uid))
    t.check("its folder is 0700", folder.st_mode & 0o777 == 0o700 and folder.st_uid == OPERATOR, oct(folder.st_mode))
    t.check("the file is the broker's format", t.store_text() == f'[credentials]\nprovider = "{KEY}"\n',
            "unexpected text")
    rc, out, err = t.run("credentials", "set", "other", KEY)
    t.check("a key in argv is a usage error that says why",
            rc == 2 and "never from the command line" in err and "other" not in t.store_text(), (rc, err))


def case_set_on_a_terminal(t):
    master, slave = pty.openpty()
    p = subprocess.Popen(t.argv("credentials", "set", "typed"), stdin=slave, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=t.env())
    echo_off = False
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and p.poll() is None:
        if not termios.tcgetattr(slave)[3] & termios.ECHO:
            echo_off = True
            break
        time.sleep(0.02)
    t.check("on a terminal, echo goes off", echo_off)
    os.write(master, (TYPED + "\n").encode())
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    shown = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    t.outputs += [out.decode(errors="replace"), err.decode(errors="replace")]
    t.check("the typed key is stored", p.returncode == 0 and f'typed = "{TYPED}"' in t.store_text(),
            (p.returncode, err))
    t.check("the terminal never showed it", TYPED.encode() not in shown, shown)
    t.check("the prompt is on stderr", b"Key for typed (not shown): " in err, err)
    t.check("the echo is back", termios.tcgetattr(slave)[3] & termios.ECHO != 0)
    os.close(master)
    os.close(slave)


def case_ls(t):
    inst = os.path.join(t.home, ".local", "state", "abox", "instances", "dev")
    os.makedirs(inst)
    with open(os.path.join(inst, "policy.toml"), "w") as f:
        f.write(POLICY.format(cred="provider"))
    # As the daemon leaves a detached instance whose shim is gone: its record
    # still says running; config.json makes it the daemon's.
    with open(os.path.join(inst, "instance.json"), "w") as f:
        json.dump({"name": "dev", "state": "running"}, f)
    with open(os.path.join(inst, "config.json"), "w") as f:
        json.dump({"args": ["--name", "dev", "--policy", "p.toml", "--", "true"], "cwd": "/", "term": "",
                   "lang": "", "boots": 1}, f)
    extra = os.path.join(t.home, "agent.toml")
    with open(extra, "w") as f:
        f.write(POLICY.format(cred="github"))
    os.makedirs(os.path.join(t.home, "run"), mode=0o700)
    subprocess.run(["chown", "-R", f"{OPERATOR}:{OPERATOR}", t.home], check=True, timeout=10)
    rc, out, err = t.run("credentials", "ls", "--json", "--policy", extra)
    try:
        doc = json.loads(out)
    except ValueError:
        doc = {}
    by_name = {c["name"]: c for c in doc.get("credentials", [])}
    t.check("ls --json: names, stored or not", rc == 0 and sorted(by_name) == ["github", "provider", "typed"] and
            by_name["github"]["stored"] is False and by_name["provider"]["stored"] is True, out)
    t.check("ls without a daemon: the instance's binding, its state as recorded", by_name.get("provider", {}).get(
        "bindings") == [{"source": "instance", "policy": os.path.join(inst, "policy.toml"), "instance": "dev",
                         "state": "running", "binding": "api.example.test:443"}] and doc.get("states") == "records",
            out)
    t.check("ls: the --policy file's binding", by_name.get("github", {}).get("bindings") == [
        {"source": "policy", "policy": extra, "binding": "api.example.test:443"}], out)
    t.check("ls never started a daemon", not os.path.exists(os.path.join(t.home, "run", "abox", "daemon.sock")))
    # Asking whether a daemon runs is a read: no daemon folder is made for it.
    t.check("ls made no daemon folder", not os.path.exists(os.path.join(t.home, "run", "abox")),
            os.listdir(os.path.join(t.home, "run")))
    rc, out, err = t.run("credentials", "ls", "--policy", extra)
    t.check("ls: github MISSING in the table", rc == 0 and "github    MISSING  policy " + extra in out, out)

    # The real daemon, as the operator: it knows no shim hosts dev, so its
    # answer (and ls's) is failed, not the record's running.
    log = open(os.path.join(t.root, "daemon.log"), "w")
    daemon = subprocess.Popen(t.argv("daemon"), stdout=log, stderr=log, env=t.env())
    sock = os.path.join(t.home, "run", "abox", "daemon.sock")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not os.path.exists(sock) and daemon.poll() is None:
            time.sleep(0.05)
        rc, out, err = t.run("credentials", "ls", "--json")
        try:
            doc = json.loads(out)
        except ValueError:
            doc = {}
        by_name = {c["name"]: c for c in doc.get("credentials", [])}
        t.check("ls with the daemon running: the state is the daemon's answer",
                doc.get("states") == "daemon" and by_name.get("provider", {}).get("bindings", [{}])[0].get(
                    "state") == "failed", out + err)
        rc, out, err = t.run("credentials", "ls")
        t.check("ls: the table says which instance binds it, and its state",
                "provider  stored   instance dev [failed] (api.example.test:443)" in out, out)
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)
        log.close()
    shutil.rmtree(inst)


def case_the_broker_reads_the_store(t):
    policy = os.path.join(t.home, "agent.toml")
    with open(policy, "w") as f:
        f.write(POLICY.format(cred="provider"))
    os.chown(policy, OPERATOR, OPERATOR)
    sock = os.path.join(t.home, "b.sock")
    p = subprocess.Popen(t.argv("broker", "--policy", policy, "--credentials", t.store, "--state",
                                os.path.join(t.home, "bstate"), "--listen", f"unix:{sock}", "--events", "-"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=t.env())
    line = b""
    deadline = time.monotonic() + 20
    # Raw reads of the pipe: a buffered readline could take both lines at
    # once and leave select() waiting on an empty pipe.
    fd = p.stdout.fileno()
    while time.monotonic() < deadline and p.poll() is None and b"broker_started" not in line:
        if select.select([fd], [], [], 0.5)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            line += chunk
    started = b"broker_started" in line
    p.terminate()
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    t.outputs += [(line + out).decode(errors="replace"), err.decode(errors="replace")]
    t.check("the broker starts with the store set wrote", started, err[-500:])


def case_refused_stores(t):
    before = t.store_text()
    os.chmod(t.store, 0o640)
    results = [t.run("credentials", *a, stdin=b"k2\n")[0] for a in (["ls"], ["set", "x"], ["rm", "provider"])]
    t.check("group-readable store refused by ls, set and rm (exit 3)", results == [3, 3, 3], results)
    st = os.stat(t.store)
    t.check("and left as it was", t.store_text() == before and st.st_mode & 0o777 == 0o640, oct(st.st_mode))
    policy = os.path.join(t.home, "agent.toml")
    r = subprocess.run(t.argv("broker", "--policy", policy, "--credentials", t.store, "--state",
                              os.path.join(t.home, "bstate"), "--listen", f"unix:{t.home}/c.sock"),
                       capture_output=True, timeout=30, env=t.env())
    t.check("the broker refuses it too", r.returncode == 3 and b"chmod 600" in r.stderr, r.stderr[-300:])
    # Owned by root and readable by others (so the owner is what is refused, not the open).
    os.chown(t.store, 0, 0)
    os.chmod(t.store, 0o604)
    rc, out, err = t.run("credentials", "set", "x", stdin=b"k3\n")
    t.check("a store owned by root is refused to the operator",
            rc == 3 and f"owned by uid 0, not by you (uid {OPERATOR})" in err, (rc, err))
    t.check("and not rewritten", t.store_text() == before and os.stat(t.store).st_uid == 0)
    os.chown(t.store, OPERATOR, OPERATOR)
    os.chmod(t.store, 0o600)


def case_rm(t):
    rc, out, err = t.run("credentials", "rm", "typed", "nope")
    t.check("rm with an unknown name removes nothing", rc == 1 and "typed" in t.store_text(), (rc, err))
    rc, out, err = t.run("credentials", "rm", "typed")
    t.check("rm removes", rc == 0 and "typed" not in t.store_text() and "provider" in t.store_text(), (rc, err))


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("credentials_e2e: needs root (runs abox as another uid)")
        return 1
    root = tempfile.mkdtemp(prefix="creds-e2e-")
    os.chmod(root, 0o711)
    t = Suite(os.path.abspath(argv[0]), root)
    os.makedirs(t.home, mode=0o700)
    os.chown(t.home, OPERATOR, OPERATOR)
    try:
        for case in (case_set_from_a_pipe, case_set_on_a_terminal, case_ls, case_the_broker_reads_the_store,
                     case_refused_stores, case_rm):
            try:
                case(t)
            except Exception as e:  # noqa: BLE001 - one case's failure is reported, the rest run
                t.check(case.__name__, False, f"{type(e).__name__}: {e}")
        leaked = [o for o in t.outputs if KEY in o or TYPED in o]
        t.check("no key in any output of any command", not leaked, len(leaked))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{t.passed} passed, {t.failed} failed")
    return 0 if t.failed == 0 and t.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
