#!/usr/bin/env python3
"""The official provider SDKs through the real broker (issue 14): an agent
upgrading its SDK must not break. @anthropic-ai/sdk 0.x sends its key as
x-api-key, 1.x as "Authorization: Bearer", openai as "Authorization:
Bearer"; the broker takes the nonce in either place and puts the key in the
binding's header, the form the provider expects.

The SDKs are the real npm packages, pinned with their digests in
tests/e2e/broker_sdks/package-lock.json and installed by `npm ci
--ignore-scripts` into a cache folder ($ABOX_SDK_CACHE, else
$XDG_CACHE_HOME/abox/broker-sdks, else ~/.cache/abox/broker-sdks), one
sub-folder per lock file, reused when present: the npm registry is needed
once. When it cannot be reached the suite fails and says so (no skip).

The rig, nsd, the fake providers (which speak enough of each API for the
SDKs: a message or a chat completion, and their SSE streams, whose last
text delta echoes the key with a chunk boundary inside it) and the broker
are broker_e2e.py's. Each SDK, in the outside namespace as a guest's agent
would run it (its nonce and base URL in its own environment variables),
makes one plain and one streamed request; each case asserts what the SDK
got (the text, every streamed delta, the echoed key masked), where the SDK
put its key (a recording fetch), and what the provider saw (the real key
in the binding's header, no authorization on an x-api-key binding, no
nonce anywhere).

Usage: broker_sdk_e2e.py PATH/TO/abox [--keep] [--only WORD,...]
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process started is stopped by pid at the end.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import broker_e2e as be  # noqa: E402
import broker_fake_provider as provider  # noqa: E402
from broker_e2e import API, BEARER, KEY, KEY2  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SDK_SOURCE = os.path.join(HERE, "broker_sdks")
INSTANCE = "sdks"


# ---------------------------------------------------------------------------
# The SDKs (root namespace, where the npm registry is reachable).
# ---------------------------------------------------------------------------

class SdkInstallError(Exception):
    pass


def sdk_cache_dir():
    """The cache folder for this lock file's SDKs."""
    base = os.environ.get("ABOX_SDK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "abox", "broker-sdks")
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        with open(os.path.join(SDK_SOURCE, name), "rb") as f:
            digest.update(f.read())
    return os.path.join(base, digest.hexdigest()[:16])


def install_sdks():
    """(folder, how): the pinned SDKs, reused or installed now. npm checks
    each package against the lock file's digest; no install script runs."""
    final = sdk_cache_dir()
    marker = os.path.join(final, ".abox-installed")
    if os.path.exists(marker):
        return final, "reused"
    tmp = f"{final}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(SDK_SOURCE, name), tmp)
    try:
        r = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=tmp,
                           capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SdkInstallError("npm ci took over 600 s: is the npm registry reachable?") from None
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SdkInstallError(f"npm ci could not install the pinned SDKs from the npm registry (exit "
                              f"{r.returncode}); the suite needs it once, later runs reuse {final}:\n"
                              f"{(r.stderr or r.stdout)[-1500:]}")
    with open(os.path.join(tmp, ".abox-installed"), "w") as f:
        f.write("npm ci of tests/e2e/broker_sdks/package-lock.json\n")
    shutil.rmtree(final, ignore_errors=True)  # a half-made one from an interrupted run
    os.rename(tmp, final)
    return final, "installed"


# ---------------------------------------------------------------------------
# The cases (outside namespace).
# ---------------------------------------------------------------------------

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def run_sdk(env, sdk, host, nonce):
    """Runs one SDK (drive_sdk.js) against `host` with `nonce`: (exit code,
    its JSON line)."""
    base_url = f"https://{host}" if sdk.startswith("anthropic") else f"https://{host}/v1"
    variables = {"ANTHROPIC_API_KEY": nonce, "ANTHROPIC_BASE_URL": base_url} if sdk.startswith("anthropic") \
        else {"OPENAI_API_KEY": nonce, "OPENAI_BASE_URL": base_url}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    r = subprocess.run(["node", os.path.join(SDK_SOURCE, "drive_sdk.js"), env.sdk_dir, sdk],
                       capture_output=True, text=True, timeout=60,
                       env=dict(clean, NODE_EXTRA_CA_CERTS=env.ca, **variables))
    lines = r.stdout.strip().splitlines()
    assert lines, f"{sdk}: no output (exit {r.returncode}): {r.stderr[-800:]}"
    return r.returncode, json.loads(lines[-1])


def drive(env, sdk, host, nonce):
    """run_sdk, which must succeed: its JSON."""
    rc, out = run_sdk(env, sdk, host, nonce)
    assert rc == 0 and "error" not in out, f"{sdk} via {host}: {out}"
    return out


def check_sdk(env, sdk, host, nonce, key, key_header, sent_as, expected_path):
    """One SDK's plain and streamed request: what it got, where it put its
    key, what the provider saw."""
    before = env.provider_log()
    out = drive(env, sdk, host, nonce)
    assert out["key_headers"] == [sent_as], f"{sdk} {out['version']} sent its key in {out['key_headers']}"
    assert out["text"] == "hi", out
    masked = " key=" + "*" * len(key)
    assert out["deltas"] == ["Hello", " world", masked], out["deltas"]
    assert key not in json.dumps(out), f"{sdk}: the key reached the SDK"
    got = env.provider_log()[len(before):]
    assert [g["path"] for g in got] == [expected_path] * 2, got
    for g in got:
        headers = provider.record_headers(g)
        names = provider.record_header_names(g)
        assert headers.get(key_header) == (f"Bearer {key}" if key_header == "authorization" else key), headers
        assert names.count(key_header) == 1, names
        if key_header != "authorization":
            assert "authorization" not in names, f"{sdk}: the guest's authorization went upstream: {names}"
        assert "abox-nonce-" not in json.dumps(g).lower(), g
    assert json.loads(got[1]["body"]).get("stream") is True, got[1]["body"]
    return out


@case
def anthropic_sdk_0_sends_x_api_key_and_works(env):
    out = check_sdk(env, "anthropic-sdk-0", API, env.nonces[API], KEY, "x-api-key", "x-api-key", "/v1/messages")
    assert out["version"].startswith("0."), out


@case
def anthropic_sdk_1_sends_authorization_bearer_and_works_on_an_x_api_key_binding(env):
    # The case: 1.x sends "Authorization: Bearer NONCE" to a binding
    # whose header is x-api-key; the provider gets x-api-key: KEY.
    out = check_sdk(env, "anthropic-sdk-1", API, env.nonces[API], KEY, "x-api-key", "authorization",
                    "/v1/messages")
    assert out["version"].startswith("1."), out


@case
def openai_sdk_on_an_authorization_binding(env):
    check_sdk(env, "openai", BEARER, env.nonces[BEARER], KEY2, "authorization", "authorization",
              "/v1/chat/completions")


@case
def openai_sdk_on_an_x_api_key_binding_gets_the_key_in_x_api_key(env):
    check_sdk(env, "openai", API, env.nonces[API], KEY, "x-api-key", "authorization", "/v1/chat/completions")


@case
def an_sdk_with_a_nonce_of_another_binding_is_refused(env):
    # The gate's other conditions hold whichever place the nonce came in.
    before = env.provider_log()
    rc, out = run_sdk(env, "anthropic-sdk-1", API, env.nonces[BEARER])
    assert rc == 1 and out.get("status") == 403 and out.get("refused") == "nonce_other_binding", out
    be.nothing_reached_provider(env, before)


# ---------------------------------------------------------------------------
# The harness (root namespace).
# ---------------------------------------------------------------------------

def main(argv):
    if argv[:1] == ["--cases"]:
        return be.run_cases(argv[1], argv[2].split(",") if len(argv) > 2 and argv[2] else [], CASES)
    argv, keep, only = be.split_harness_flags(argv)
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    abox = os.path.abspath(argv[0])
    why_not = be.missing_prerequisite("broker_sdk_e2e", ("ip", "nsd", "openssl", "ss", "node", "npm"))
    if why_not:
        print(why_not)
        return 1
    return be.run_on_rig("bs", keep, lambda rig, tally: run_suite(rig, tally, abox, only))


def run_suite(rig, tally, abox, only):
    """The SDKs, the broker and its nonces, then the cases (outside)."""
    try:
        sdk_dir, how = install_sdks()
    except SdkInstallError as e:
        tally.check("sdks_installed", False, str(e))
        return
    tally.check(f"sdks_installed ({how}: {sdk_dir})", True)
    s = be.setup(rig, abox)
    os.chmod(s["creds"], 0o600)
    guest_ca = be.guest_ca_file(rig, abox, s["state"], INSTANCE)
    nonce_list = be.nonce_list(abox, s["policy"], s["state"])
    broker = be.start_broker(rig, abox, "broker", [*be.broker_args(s, INSTANCE), "--listen", "127.0.0.1:443"])
    cfg = dict(ca=guest_ca, logs=s["logs"], events_file=s["events"], nonce_list=nonce_list, sdk_dir=sdk_dir)
    tally.add(*be.run_cases_outside(rig, __file__, cfg, only))
    tally.check("broker_survived_every_case", broker.poll() is None)
    tally.count(be.stop_broker(rig, "broker", broker))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
