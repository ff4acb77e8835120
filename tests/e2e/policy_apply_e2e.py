#!/usr/bin/env python3
"""End-to-end test of `abox policy apply NAME FILE` on a real instance:
`abox run -d` (the daemon, its shim, abox-net, the broker, a QEMU guest of
the minimal image) in the rig's outside namespace, reaching the fake
internet of netns_rig.py (nsd for example.test, nginx over HTTP and HTTPS).

The guest's command checks, once a second and numbered, three things: two
allowed names over HTTP (site1, site2) and the broker's binding (api, its
nonce, over the instance's TLS broker to nginx). The cases run in order:
  - apply: a FILE without site2 and without the binding: exit 0, the output
    names what changed and what each part said; from then on the guest's
    rounds show site1 reachable, site2 and api not; the event log has
    abox-net's and the broker's reload events;
  - sighup_after_apply: instance.json's "policy" names the applied FILE, and
    a SIGHUP to abox-net rereads the applied policy of record (the apply
    renamed it over the file abox-net opened at start) instead of refusing;
  - invalid: a FILE with an error: exit 1, FILE:LINE:COLUMN on stderr,
    nothing changed (the policy of record, the guest's rounds);
  - refused_binding: a FILE that allows site2 again and adds a binding the
    broker holds no key for: exit 1 (the broker refuses), and abox-net was
    not given it either (site2 stays unreachable);
  - json: --json of the same file as in force: one object, no change;
  - restart: `abox stop` then `abox start`: the instance boots with the
    applied policy (site2 unreachable from the first round);
  - stopped: apply to a stopped instance records the file (exit 0,
    "recorded", instance.json names it), the next start uses it (site2
    reachable again).

Usage: policy_apply_e2e.py PATH/TO/abox [--keep] [--only WORD[,WORD]]
Every wait is bounded. Everything the test makes is removed at the end.
"""
import json
import os
import re
import signal
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daemon_e2e as de  # noqa: E402
import netns_rig as nr  # noqa: E402

NAME = "apply1"
SITE1, SITE2, API = nr.fqdn("site1"), nr.fqdn("site2"), nr.fqdn("api")
# One numbered round a second: "round N site1=ok|no site2=ok|no api=ok|no".
ROUNDS = ("i=0; while [ $i -lt 600 ]; do i=$((i+1)); "
          f"a=no; timeout 5 wget -q -O - http://{SITE1}/host 2>/dev/null | grep -q host= && a=ok; "
          f"b=no; timeout 5 wget -q -O - http://{SITE2}/host 2>/dev/null | grep -q host= && b=ok; "
          f"c=no; timeout 5 wget -q -O - --header \"x-api-key: $TEST_API_KEY\" https://{API}/host 2>/dev/null "
          "| grep -q host= && c=ok; "
          "echo round $i site1=$a site2=$b api=$c; sleep 1; done")


def policy(names, broker=True, extra=""):
    return de.policy_text(names) + (de.BROKER if broker else "") + extra


NEW_BINDING = f"""
[[broker]]
name = "new.{nr.ZONE}"
credential = "otherkey"
header = "x-api-key"
nonce_env = "OTHER_API_KEY"
"""


def rounds(h):
    """The guest's rounds so far: [(n, {"site1": bool, ...})]."""
    _, out, _ = h.run("logs", NAME)
    got = []
    for m in re.finditer(r"round (\d+) site1=(\w+) site2=(\w+) api=(\w+)", out):
        got.append((int(m.group(1)), {"site1": m.group(2) == "ok", "site2": m.group(3) == "ok",
                                      "api": m.group(4) == "ok"}))
    return got


def wait_round(h, want, after=0, timeout=60):
    """Waits for a round numbered above `after` whose results are `want`;
    returns (found, the last rounds seen)."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        seen = rounds(h)
        if any(n > after and r == want for n, r in seen):
            return True, seen[-3:]
        time.sleep(1)
    return False, seen[-3:]


def last_round(h):
    seen = rounds(h)
    return seen[-1][0] if seen else 0


def write(h, name, text):
    path = h.rig.path(name)
    with open(path, "w") as f:
        f.write(text)
    return path


def record(h):
    with open(os.path.join(h.folder(NAME), "policy.toml")) as f:
        return f.read()


def events(h):
    return [json.loads(line) for line in h.run("events", "--json", NAME)[1].splitlines() if line.startswith("{")]


ALL = {"site1": True, "site2": True, "api": True}
NARROW = {"site1": True, "site2": False, "api": False}


def case_start(h):
    creds = write(h, "credentials.toml", '[credentials]\ntestkey = "sk-test-' + os.urandom(16).hex() + '"\n')
    os.chmod(creds, 0o600)
    h.first = write(h, "first.toml", policy([SITE1, SITE2]))
    h.creds = creds
    code, _, err = h.run("run", "-d", "--policy", h.first, "--credentials", creds, "--upstream-ca", h.rig.ca["ca"],
                         "--name", NAME, "--no-selftest", "--", "sh", "-c", ROUNDS)
    h.check("started", code == 0, err)
    ok, seen = wait_round(h, ALL)
    h.check("before_apply_all_three_are_reached", ok, (seen, events(h)[-12:]) if not ok else seen)


def case_apply(h):
    h.narrow = write(h, "narrow.toml", policy([SITE1], broker=False))
    before = last_round(h)
    code, out, err = h.run("policy", "apply", NAME, h.narrow)
    h.check("apply_exits_0", code == 0, out + err)
    h.check("apply_says_what_changed",
            f"applied {h.narrow} to {NAME} (running)" in out and f"names no longer allowed: {SITE2}" in out and
            f"bindings removed: {API}:443" in out and "abox-net: " in out and f"removed {API}:443" in out, out)
    ok, seen = wait_round(h, NARROW, after=before + 1)
    h.check("after_apply_site2_and_the_binding_are_refused_site1_is_not", ok, seen)
    h.check("the_applied_file_is_the_policy_of_record", record(h) == policy([SITE1], broker=False))
    ev = events(h)
    h.check("abox_net_logged_the_reload",
            any(e.get("kind") == "policy" and e.get("reason") == "reloaded" for e in ev),
            [e for e in ev if e.get("kind") == "policy"])
    h.check("the_broker_logged_the_reload",
            any(e.get("kind") == "broker_policy" and e.get("removed") == f"{API}:443" for e in ev),
            [e for e in ev if e.get("kind") == "broker_policy"])


def instance_record(h):
    with open(os.path.join(h.folder(NAME), "instance.json")) as f:
        return json.load(f)


def case_sighup_after_apply(h):
    """The apply renamed a new policy.toml over the one abox-net opened at
    start: SIGHUP to abox-net must reread the applied file (handed to it with
    the reload), not refuse it as replaced; instance.json names it."""
    rec = instance_record(h)
    h.check("instance_json_names_the_applied_policy", rec.get("policy") == os.path.abspath(h.narrow),
            rec.get("policy"))
    of_record = os.path.join(h.folder(NAME), "policy.toml")
    seen = len([e for e in events(h) if e.get("kind") == "policy"])
    os.kill(rec["processes"]["abox-net"]["pid"], signal.SIGHUP)
    got = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not got:
        got = [e for e in events(h) if e.get("kind") == "policy"][seen:]
        time.sleep(0.5)
    h.check("sighup_after_apply_rereads_the_applied_policy",
            len(got) == 1 and got[0].get("reason") == "reloaded" and got[0].get("policy") == of_record, got)
    before = last_round(h)
    ok, rounds_seen = wait_round(h, NARROW, after=before + 1)
    h.check("after_sighup_the_applied_policy_is_in_force", ok, rounds_seen)


def case_invalid(h):
    bad = write(h, "invalid.toml", policy([SITE1, SITE2]) + "\n[[allow]]\nnames = [\"x.example.test\"]\nports = [0]\n")
    line = policy([SITE1, SITE2]).count("\n") + 4
    code, out, err = h.run("policy", "apply", NAME, bad)
    h.check("invalid_exits_1_naming_line_and_column", code == 1 and f"{bad}:{line}:" in err, (code, err))
    h.check("invalid_changes_no_record", record(h) == policy([SITE1], broker=False))
    before = last_round(h)
    ok, seen = wait_round(h, NARROW, after=before + 1)
    h.check("invalid_changes_nothing_running", ok, seen)


def case_refused_binding(h):
    more = write(h, "new-binding.toml", policy([SITE1, SITE2], broker=False, extra=NEW_BINDING))
    code, out, err = h.run("policy", "apply", NAME, more)
    h.check("a_binding_without_a_key_exits_1",
            code == 1 and "is not a binding this broker started with" in err and "nothing changed" in err,
            (code, out, err))
    h.check("refused_changes_no_record", record(h) == policy([SITE1], broker=False))
    before = last_round(h)
    ok, seen = wait_round(h, NARROW, after=before + 2)
    h.check("refused_leaves_abox_net_as_it_was (site2 still refused)", ok, seen)


def case_json(h):
    code, out, err = h.run("policy", "apply", "--json", NAME, h.narrow)
    try:
        doc = json.loads(out)
    except ValueError:
        doc = {}
    h.check("json_of_the_same_file",
            code == 0 and doc.get("instance") == NAME and doc.get("running") is True and
            doc.get("applied") is True and doc.get("names_added") == [] and doc.get("names_removed") == [] and
            "applied" in (doc.get("network") or "") and "bindings in force" in (doc.get("broker") or ""),
            out + err)


def case_restart(h):
    code, _, err = h.run("stop", NAME)
    h.check("stopped", code == 0, err)
    code, _, err = h.run("start", NAME)
    h.check("started_again", code == 0, err)
    ok, seen = wait_round(h, {"site1": True, "site2": False, "api": False})
    h.check("a_restart_uses_the_applied_policy", ok, seen)


def case_stopped(h):
    code, _, err = h.run("stop", NAME)
    code, out, err = h.run("policy", "apply", NAME, h.first)
    h.check("apply_to_a_stopped_instance_records_it",
            code == 0 and f"recorded {h.first} to {NAME} (not running" in out and record(h) == policy([SITE1, SITE2]),
            out + err)
    h.check("a_stopped_instance_json_names_the_applied_policy",
            instance_record(h).get("policy") == os.path.abspath(h.first), instance_record(h).get("policy"))
    code, _, err = h.run("start", NAME)
    ok, seen = wait_round(h, ALL)
    h.check("the_next_start_uses_it", code == 0 and ok, (seen, err))
    code, _, err = h.run("policy", "apply", "nosuchbox", h.first)
    h.check("no_such_instance_exits_3", code == 3 and "no instance 'nosuchbox'" in err, err)
    h.run("rm", "-f", NAME)
    h.gone("apply", NAME)


CASES = [case_start, case_apply, case_sighup_after_apply, case_invalid, case_refused_binding, case_json, case_restart, case_stopped]


def main(argv):
    def setup(rig, mode):
        rig.build_internet()
        rig.start_nsd([f"{short} IN A {addr}" for short, addr in nr.ADDR.items()] +
                      [f"api IN A {de.WEB_ADDR}", f"site1 IN A {de.WEB_ADDR}", f"site2 IN A {de.WEB_ADDR}"])
        rig.make_ca([API, SITE1, SITE2])
        rig.start_nginx({API: {"index.html": b"api\n"}, SITE1: {"index.html": b"site\n"},
                         SITE2: {"index.html": b"site\n"}})

    def run(rig, mode, abox):
        h = de.Harness(rig, abox)
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
            try:
                for i in h.json_of("ls", "-a", "--json")["instances"]:
                    h.run("rm", "-f", i["name"])
                os.kill(h.ping()["pid"], signal.SIGTERM)
            except Exception as e:  # noqa: BLE001
                print(f"     cleanup: {e}")
        return h.passed, h.failed

    return nr.run_suite("policy_apply_e2e", "pap", ["qemu-system-x86_64", "nsd", "nginx", "openssl", "ss"],
                        argv, CASES, setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
