#!/usr/bin/env python3
"""The broker reloads its bindings while it runs (issue 22, "Live reload"):
the real `abox broker` with --control-socket, real TLS fake providers that
record what they receive, curl and raw TLS clients, and `abox broker reload`
as the operator (and `abox policy apply`) would call it.

The rig, the providers, nsd, the policy and the credentials are
broker_e2e.py's (imported, not copied). The cases run in order, each on the
state the one before left:
  1. a request under a binding works (curl: 200, the key upstream);
  2. a request whose head was judged before the reload finishes after it;
  3. a reload removing the binding: its next request is refused (403,
     abox-refused: binding_removed, nothing at the provider), a request on a
     kept-alive connection opened before is refused too, and another binding
     is untouched; the event log says what was removed;
  4. an invalid file (a TOML error), and one adding a binding the broker has
     no key for, are refused with file:line:column and change nothing;
  5. the first policy again: the binding is restored.

Usage: broker_reload_e2e.py PATH/TO/abox [--keep] [--only WORD,...]
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process started is stopped by pid at the end.
"""
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import broker_e2e as be  # noqa: E402
import broker_fake_provider as provider  # noqa: E402
from broker_e2e import API, BEARER, KEY, KEY2  # noqa: E402

INSTANCE = "reload"


def without_binding(policy, name):
    """policy's text with the [[broker]] table whose name is `name` left out."""
    parts = policy.split("[[broker]]")
    kept = [p for p in parts[1:] if f'name = "{name}"' not in p]
    assert len(kept) == len(parts) - 2, f"no single binding {name}"
    return parts[0] + "".join("[[broker]]" + p for p in kept)


def reload(env, text, name):
    """`abox broker reload SOCKET FILE` with `text` in a file of its own."""
    path = os.path.join(env.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return subprocess.run([env.abox, "broker", "reload", env.control, path], capture_output=True, text=True,
                          timeout=30), path


def bearer_still_works(env):
    before = env.provider_log()
    raw = be.request(env, host=BEARER, nonce_header="authorization", nonce=f"Bearer {env.nonces[BEARER]}")
    resp = be.raw_exchange(env, raw, sni=BEARER)
    st, _ = be.status_and_headers(resp)
    assert st == 200, f"the other binding got {st}: {resp[:200]!r}"
    got = env.provider_log()[len(before):]
    assert len(got) == 1 and provider.record_headers(got[0]).get("authorization") == f"Bearer {KEY2}", got


def api_status(env):
    """One request under the API binding: (status, abox-refused, provider records it made)."""
    before = env.provider_log()
    resp = be.raw_exchange(env, be.request(env))
    st, h = be.status_and_headers(resp)
    assert KEY.encode() not in resp
    return st, h.get("abox-refused"), env.provider_log()[len(before):]


def keep_alive_request(env):
    """The API request without Connection: close, for a kept-alive connection."""
    return be.request(env).replace(b"Connection: close\r\n", b"")


def read_response(t, deadline=10):
    """One response (head and content-length body) from a TLS socket."""
    data = b""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if b"\r\n\r\n" in data:
            head, body = data.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v.strip())
            if len(body) >= length:
                return data
        chunk = t.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


CASES = []


def case(fn):
    CASES.append(fn)
    return fn


@case
def a_request_under_a_binding_works(env):
    before = env.provider_log()
    r = be.curl(env, "-X", "POST", "-H", f"x-api-key: {env.nonces[API]}", "--data", "{}", "-w", "\n%{http_code}",
                f"https://{API}/v1/messages")
    out = r.stdout.decode()
    assert r.returncode == 0 and out.endswith("\n200"), (r.returncode, out, r.stderr)
    got = env.provider_log()[len(before):]
    assert len(got) == 1 and provider.record_headers(got[0]).get("x-api-key") == KEY, got
    bearer_still_works(env)


@case
def reload_removing_a_binding_refuses_its_next_requests_and_lets_in_flight_ones_finish(env):
    ctx = be.tls_context(env)
    # In flight: a request whose head the gate already judged, its body not sent yet.
    body = b'{"in":"flight"}'
    head = be.request(env, body=body)[:-len(body)]
    with socket.create_connection(("127.0.0.1", 443), timeout=10) as s1, \
            socket.create_connection(("127.0.0.1", 443), timeout=10) as s2:
        with ctx.wrap_socket(s1, server_hostname=API) as inflight, ctx.wrap_socket(s2, server_hostname=API) as kept:
            inflight.sendall(head)
            # A kept-alive connection that got its first answer before the reload.
            kept.sendall(keep_alive_request(env))
            first = read_response(kept)
            assert be.status_and_headers(first)[0] == 200, first[:200]
            time.sleep(0.3)  # the in-flight head reaches the broker and is judged
            before = env.provider_log()

            r, path = reload(env, without_binding(env.policy_text, API), "without-api.toml")
            assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
            assert f"removed {API}:443" in r.stdout, r.stdout

            inflight.sendall(body)
            resp = read_response(inflight)
            assert be.status_and_headers(resp)[0] == 200, f"the request in flight: {resp[:300]!r}"
            got = env.provider_log()[len(before):]
            assert len(got) == 1 and got[0]["body"] == body.decode(), got

            # The kept-alive connection's next request is judged by the new bindings.
            kept.sendall(keep_alive_request(env))
            second = read_response(kept)
            be.assert_refused(env, second, 403, "binding_removed")

    st, reason, got = api_status(env)
    assert (st, reason, got) == (403, "binding_removed", []), (st, reason, got)
    bearer_still_works(env)
    events = [e for e in env.events() if e.get("kind") == "broker_policy"]
    assert events and events[-1].get("reason") == "reloaded" and events[-1].get("removed") == f"{API}:443", events
    refused = [e for e in env.events() if e.get("kind") == "broker_refused" and e.get("reason") == "binding_removed"]
    assert refused and refused[-1].get("status") == 403, refused


@case
def an_invalid_file_changes_nothing_and_names_line_and_column(env):
    text = env.policy_text + '\n[[broker]]\nname = "x.example.test"\nmethods = [oops]\n'
    r, path = reload(env, text, "invalid.toml")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = text.count("\n")
    assert f"{path}:{lines}:" in r.stderr and "nothing changed" in r.stderr, r.stderr
    st, reason, _ = api_status(env)
    assert (st, reason) == (403, "binding_removed"), "an invalid file must not restore the binding"
    bearer_still_works(env)


@case
def a_binding_the_broker_has_no_key_for_is_refused_and_changes_nothing(env):
    text = env.policy_text + ('\n[[broker]]\nname = "new.example.test"\ncredential = "new"\n'
                              'header = "x-api-key"\nnonce_env = "NEW_KEY"\n')
    r, path = reload(env, text, "new-binding.toml")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    line = text.split("\n").index('name = "new.example.test"')  # the [[broker]] line, 1-based
    assert f"{path}:{line}:1: [[broker]] new.example.test:443 is not a binding this broker started with" \
        in r.stderr, r.stderr
    st, reason, _ = api_status(env)
    assert (st, reason) == (403, "binding_removed"), (st, reason)
    bearer_still_works(env)


@case
def the_first_policy_again_restores_the_binding(env):
    r, _ = reload(env, env.policy_text, "again.toml")
    assert r.returncode == 0 and f"restored {API}:443" in r.stdout, (r.returncode, r.stdout, r.stderr)
    st, reason, got = api_status(env)
    assert st == 200 and len(got) == 1 and provider.record_headers(got[0]).get("x-api-key") == KEY, (st, reason)
    bearer_still_works(env)


@case
def the_control_socket_is_private_and_usage_errors_exit_2(env):
    assert os.stat(env.control).st_mode & 0o077 == 0, oct(os.stat(env.control).st_mode)
    r = subprocess.run([env.abox, "broker", "reload", env.control], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "SOCKET and FILE" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run([env.abox, "broker", "reload", env.dir + "/nothing.sock", env.dir + "/again.toml"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 3, (r.returncode, r.stderr)


def main(argv):
    if argv[:1] == ["--cases"]:
        return be.run_cases(argv[1], argv[2].split(",") if len(argv) > 2 and argv[2] else [], CASES)
    argv, keep, only = be.split_harness_flags(argv)
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    abox = os.path.abspath(argv[0])
    why_not = be.missing_prerequisite("broker_reload_e2e", ("ip", "nsd", "openssl", "ss", "curl"))
    if why_not:
        print(why_not)
        return 1
    return be.run_on_rig("br", keep, lambda rig, tally: run_suite(rig, tally, abox, only))


def run_suite(rig, tally, abox, only):
    """The broker with a control socket, then the cases (in the outside namespace)."""
    s = be.setup(rig, abox)
    os.chmod(s["creds"], 0o600)
    guest_ca = be.guest_ca_file(rig, abox, s["state"], INSTANCE)
    nonce_list = be.nonce_list(abox, s["policy"], s["state"])
    control = rig.path("broker.ctl")
    broker = be.start_broker(rig, abox, "broker", [*be.broker_args(s, INSTANCE), "--listen", "127.0.0.1:443",
                                                   "--control-socket", control])
    cfg = dict(ca=guest_ca, logs=s["logs"], events_file=s["events"], stats_file=s["stats"], nonce_list=nonce_list,
               abox=abox, control=control, dir=rig.path("reloads"), policy_text=be.POLICY)
    os.makedirs(cfg["dir"], exist_ok=True)
    tally.add(*be.run_cases_outside(rig, __file__, cfg, only))
    tally.check("broker_survived_every_case", broker.poll() is None)
    tally.count(be.stop_broker(rig, "broker", broker))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
