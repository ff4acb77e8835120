#!/usr/bin/env python3
"""End to end: an agent in the Debian image talks to its model provider
through the broker, as an operator would run it (issue 17).

The image is built by abox itself (`abox image build debian --name
agent-e2e --add-npm openai@6.49.0 --add-npm @anthropic-ai/sdk@1.15.0`, the
SDK versions tests/e2e/broker_sdks pins), into a cache that survives reruns
($ABOX_E2E_AGENT_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/abox/e2e-agent);
the Debian tree and .debs come from the recipe's own cache
(~/.cache/abox), which e2e.debian_image fills too. The npm registry and
Debian's mirror are needed when nothing is cached; when they cannot be
reached the suite fails and says so (no skip).

The fake internet is netns_rig.py's: nsd for example.test, and two fake
providers (tests/e2e/broker_fake_provider.py, TLS with the rig's CA):
api.example.test (binding header x-api-key, the guest's ANTHROPIC_API_KEY)
and bearer.example.test (authorization: Bearer, OPENAI_API_KEY). `abox run`
runs in the rig's outside namespace with --upstream-ca (the rig's CA, for
the providers); the guest trusts the broker's CA because the instance
installs it: no client below is given a CA flag.

Cases:
- image: built (or found current) and listed by `abox image ls --json`;
- sdks: in one boot, as the agent user, the official Anthropic SDK and the
  OpenAI SDK (the image's, from NODE_PATH) each make a request and a
  streamed one (drive_sdk.js, copied in with --copy-in): the text, every
  streamed delta, the key the provider echoes masked; the provider saw the
  real key in the binding's header and never a nonce;
- clients: curl, python3 requests and node's fetch reach the provider with
  the nonce and no CA flag;
- no_key_in_the_guest: after all that, no file the agent can read under
  /home /tmp /run /var /etc /usr/local /dev/shm, and no /proc/*/environ or
  cmdline, holds the key (the guest gets the key reversed, never the key);
- no_key_on_the_disks: the host finds the key's bytes in neither the
  image's rootfs.ext4 nor the instance's kept writable disk;
- streaming: curl -N in the guest prints the provider's first SSE event
  before the provider has sent its second (it waits for a file the test
  makes only once the first reached abox run's stdout);
- cp_from_a_stopped_instance: `abox cp NAME:/home/agent/result.txt -` of the
  kept, stopped instance gives a tar holding what the agent wrote.
- disk_full: with --disk 128M, filling the writable layer is ENOSPC for the
  agent's dd, the command goes on and exits 0, and the layer on the host is
  a file of at most 128 MiB.

Usage: agent_e2e.py PATH/TO/abox [--keep] [--only WORD[,WORD]]
Every wait is bounded. Everything the test makes but the cached image is
removed at the end.
"""
import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import broker_fake_provider as provider  # noqa: E402
import netns_rig as nr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVE_SDK = os.path.join(HERE, "broker_sdks", "drive_sdk.js")
IMAGE = "agent-e2e"
NPM = ["openai@6.49.0", "@anthropic-ai/sdk@1.15.0"]
API, BEARER = nr.fqdn("api"), nr.fqdn("bearer")
API_ADDR, BEARER_ADDR = "93.184.215.30", "93.184.215.31"
NS_ADDR, SECRET, SECRET_ADDR = nr.ADDR["ns1"], nr.fqdn("secret"), nr.ADDR["secret"]
KEY_API = "sk-ant-e2e-" + os.urandom(24).hex()
KEY_BEARER = "sk-oai-e2e-" + os.urandom(24).hex()
RUN_TIMEOUT = 600  # one abox run of the Debian image on TCG, node included
BUILD_TIMEOUT = 1800  # the image from nothing: debootstrap, apt, npm

POLICY = f"""# agent_e2e.py: written by the test
version = 1
[dns]
upstreams = ["{NS_ADDR}:53"]

[[broker]]
name = "{API}"
port = 443
credential = "anthropic"
header = "x-api-key"
nonce_env = "ANTHROPIC_API_KEY"

[[broker]]
name = "{BEARER}"
port = 443
credential = "openai"
header = "authorization"
nonce_env = "OPENAI_API_KEY"
"""

SELFTEST = ["--selftest-name", SECRET, "--selftest-address", f"{SECRET_ADDR}:80",
            "--selftest-resolver", f"{NS_ADDR}:53"]

# Run in the guest as the agent (sh): each step's exit status and output,
# base64 on one line, so nothing a client prints can look like a marker.
AGENT_SCRIPT = r"""
step() { name=$1; shift; out=$("$@" 2>&1); rc=$?; echo "@@$name $rc $(printf %s "$out" | base64 -w0)"; }
cd /home/agent
step anthropic env ANTHROPIC_BASE_URL=https://API node drive_sdk.js /usr/local/lib @anthropic-ai/sdk
step openai env OPENAI_BASE_URL=https://BEARER/v1 node drive_sdk.js /usr/local/lib openai
step curl curl -sS --fail -H "x-api-key: $ANTHROPIC_API_KEY" https://API/v1/echo
step requests python3 -c 'import os, requests
r = requests.get("https://API/v1/echo", headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]}, timeout=60)
print(r.status_code, r.text)'
step fetch node -e 'fetch("https://API/v1/echo", {headers: {"x-api-key": process.env.ANTHROPIC_API_KEY}})
  .then(async (r) => console.log(r.status, await r.text()), (e) => { console.log(String(e)); process.exit(1); })'
echo "the agent was here" > /home/agent/result.txt
step scan python3 /home/agent/scan.py
"""

# The key scan, in the guest: KEY_REVERSED holds each key reversed, so that
# neither the script nor the environment of any process holds a key.
SCAN_SCRIPT = r"""
import os, sys
keys = [k[::-1].encode() for k in os.environ["KEY_REVERSED"].split(",")]
found = []
for top in ("/home", "/tmp", "/run", "/var", "/etc", "/usr/local", "/dev/shm"):
    for root, dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > (64 << 20):
                    continue
                data = open(p, "rb").read()
            except OSError:
                continue
            if any(k in data for k in keys):
                found.append(p)
me = str(os.getpid())
for pid in os.listdir("/proc"):
    if not pid.isdigit() or pid == me:
        continue
    for what in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{what}", "rb").read()
        except OSError:
            continue
        if any(k in data for k in keys):
            found.append(f"/proc/{pid}/{what}")
print("files and processes holding a key:", found)
sys.exit(1 if found else 0)
"""


class Harness:
    def __init__(self, rig, abox):
        self.rig, self.abox = rig, abox
        self.state = rig.path("state")
        cache = os.environ.get("ABOX_E2E_AGENT_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "abox", "e2e-agent")
        recipe_cache = os.environ.get("ABOX_IMAGE_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "abox")
        self.env = dict(os.environ, XDG_STATE_HOME=self.state, XDG_CACHE_HOME=cache, ABOX_IMAGE_CACHE=recipe_cache,
                        LANG="C.UTF-8")
        self.env.pop("TERM", None)
        self.image_dir = os.path.join(cache, "abox", "images", IMAGE)
        self.passed = self.failed = 0
        self.policy = rig.path("policy.toml")
        with open(self.policy, "w") as f:
            f.write(POLICY)
        self.creds = rig.path("credentials.toml")
        with open(self.creds, "w") as f:
            f.write(f'[credentials]\nanthropic = "{KEY_API}"\nopenai = "{KEY_BEARER}"\n')
        os.chmod(self.creds, 0o600)
        self.logs = {API: rig.path("provider-api.jsonl"), BEARER: rig.path("provider-bearer.jsonl")}
        self.results = {}
        self.image_ok = False

    def check(self, name, ok, note=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {note}")
        sys.stdout.flush()

    def abox_cmd(self, *args, outside=True):
        return (["ip", "netns", "exec", self.rig.outside] if outside else []) + [self.abox, *args]

    def run_args(self, name, *extra):
        return ["run", "--image", IMAGE, "--policy", self.policy, "--credentials", self.creds,
                "--upstream-ca", self.rig.ca["ca"], "--name", name, *SELFTEST, *extra]

    def instance_dir(self, name):
        return os.path.join(self.state, "abox", "instances", name)


def case_image(h):
    """abox image build, in the root namespace (the registry and the mirror
    are reached from there)."""
    args = ["image", "build", "debian", "--name", IMAGE]
    for p in NPM:
        args += ["--add-npm", p]
    started = time.monotonic()
    try:
        r = subprocess.run(h.abox_cmd(*args, outside=False), capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                           env=h.env)
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        code, err = -1, f"over {BUILD_TIMEOUT} s"
    took = time.monotonic() - started
    print(f"     image build: exit {code} in {took:.0f} s: {err.strip().splitlines()[-1:] if err else ''}")
    h.check("image_built", code == 0, f"exit {code}: {err[-1500:]}")
    r = subprocess.run(h.abox_cmd("image", "ls", "--json", outside=False), capture_output=True, text=True,
                       timeout=60, env=h.env)
    try:
        listed = json.loads(r.stdout)["images"]
    except (ValueError, KeyError):
        listed = []
    mine = [i for i in listed if i.get("name") == IMAGE]
    h.check("image_listed_current", bool(mine) and mine[0].get("current") is True, r.stdout[-800:])
    h.image_ok = code == 0


def parse_steps(text):
    steps = {}
    for line in text.splitlines():
        if line.startswith("@@"):
            parts = line[2:].split(" ", 2)
            if len(parts) == 3:
                steps[parts[0]] = (int(parts[1]), base64.b64decode(parts[2]).decode(errors="replace"))
            elif len(parts) == 2:
                steps[parts[0]] = (int(parts[1]), "")
    return steps


def provider_saw(h, host):
    return provider.read_records(h.logs[host])


def case_agent(h):
    if not h.image_ok:
        h.check("agent_boot", False, "no image")
        return
    name = "agent1"
    folder = h.rig.path("agent-files")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "drive_sdk.js"), "w") as f:
        f.write(open(DRIVE_SDK).read())
    with open(os.path.join(folder, "scan.py"), "w") as f:
        f.write(SCAN_SCRIPT)
    script = AGENT_SCRIPT.replace("https://API", f"https://{API}").replace("https://BEARER", f"https://{BEARER}")
    reversed_keys = ",".join(k[::-1] for k in (KEY_API, KEY_BEARER))
    before = {host: len(provider_saw(h, host)) for host in (API, BEARER)}
    cmd = h.abox_cmd(*h.run_args(name, "--keep", "--copy-in", f"{folder}/drive_sdk.js", "--copy-in",
                                 f"{folder}/scan.py", "-e",
                                 f"KEY_REVERSED={reversed_keys}", "--", "sh", "-c", script))
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT, env=h.env)
        code, out, err = p.returncode, p.stdout, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as e:
        code, out, err = -1, e.stdout or b"", f"over {RUN_TIMEOUT} s"
    text = out.decode(errors="replace")
    steps = parse_steps(text)
    h.check("agent_run_exits_0", code == 0, f"exit {code}: {err[-1500:]}\n{text[-1500:]}")
    h.check("the_key_never_reaches_stdout", all(k.encode() not in out for k in (KEY_API, KEY_BEARER)), "key seen")

    def sdk_ok(step, key, host, header):
        rc, got = steps.get(step, (None, ""))
        try:
            j = json.loads(got.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, f"{step}: exit {rc}: {got[-800:]}"
        masked = " key=" + "*" * len(key)
        if rc != 0 or j.get("text") != "hi" or j.get("deltas") != ["Hello", " world", masked]:
            return False, f"{step}: exit {rc}: {j}"
        saw = provider_saw(h, host)[before[host]:]
        values = [provider.record_headers(r).get(header, "") for r in saw]
        want = key if header == "x-api-key" else f"Bearer {key}"
        if len(saw) < 2 or any(v != want for v in values):
            return False, f"{step}: the provider saw {len(saw)} requests with {header} {values}"
        if any("abox-nonce" in json.dumps(r) for r in saw):
            return False, f"{step}: a nonce reached the provider"
        return True, ""

    ok, note = sdk_ok("anthropic", KEY_API, API, "x-api-key")
    h.check("anthropic_sdk_request_and_stream_with_the_key_masked", ok, note)
    ok, note = sdk_ok("openai", KEY_BEARER, BEARER, "authorization")
    h.check("openai_sdk_request_and_stream_with_the_key_masked", ok, note)
    for client in ("curl", "requests", "fetch"):
        rc, got = steps.get(client, (None, ""))
        # /v1/echo repeats the headers the provider got: the key, masked.
        h.check(f"{client}_reaches_the_provider_without_a_ca_flag",
                rc == 0 and "*" * len(KEY_API) in got and KEY_API not in got, f"exit {rc}: {got[-600:]}")
    rc, got = steps.get("scan", (None, ""))
    h.check("no_key_in_the_guest", rc == 0, f"exit {rc}: {got[-800:]}")

    # The host: the image's root disk and the instance's writable disk, as bytes.
    disks = [os.path.join(h.image_dir, "rootfs.ext4"), os.path.join(h.instance_dir(name), "disk.ext4")]
    holding = []
    for disk in disks:
        if not os.path.exists(disk):
            holding.append(f"{disk} is missing")
            continue
        for key in (KEY_API, KEY_BEARER):
            if subprocess.run(["grep", "-qaF", key, disk], timeout=300).returncode == 0:
                holding.append(disk)
    h.check("no_key_on_the_disks", not holding, str(holding))

    # The stopped, kept instance: what the agent wrote, copied out.
    try:
        r = subprocess.run(h.abox_cmd("cp", f"{name}:/home/agent/result.txt", "-"), capture_output=True,
                           timeout=RUN_TIMEOUT, env=h.env)
        members = {}
        with tarfile.open(fileobj=io.BytesIO(r.stdout), mode="r|") as t:
            for m in t:
                f = t.extractfile(m)
                members[m.name] = f.read() if f else b""
        got = members.get("result.txt")
        h.check("cp_from_a_stopped_instance", r.returncode == 0 and got == b"the agent was here\n",
                f"exit {r.returncode}: {sorted(members)} {r.stderr.decode(errors='replace')[-600:]}")
    except (tarfile.TarError, subprocess.TimeoutExpired) as e:
        h.check("cp_from_a_stopped_instance", False, f"{type(e).__name__}: {e}")


def case_streaming(h):
    """The provider's first event reaches abox run's stdout before the
    provider sends the second: nothing on the way (broker, abox-net, the
    control channel) buffers a stream."""
    if not h.image_ok:
        h.check("streaming", False, "no image")
        return
    go = h.logs[API] + ".go"
    if os.path.exists(go):
        os.unlink(go)
    # curl gets its header from a shell, so the nonce variable expands.
    cmd = h.abox_cmd(*h.run_args("agent2", "--", "sh", "-c",
                                 f'curl -sSN -H "x-api-key: $ANTHROPIC_API_KEY" https://{API}/v1/sse'))
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=h.env)
    seen = b""
    first_before_go = False
    deadline = time.monotonic() + RUN_TIMEOUT
    os.set_blocking(p.stdout.fileno(), False)
    while time.monotonic() < deadline and p.poll() is None:
        try:
            chunk = p.stdout.read(65536)
        except BlockingIOError:
            chunk = None
        if chunk:
            seen += chunk
            if b"one" in seen and not os.path.exists(go):
                first_before_go = True
                open(go, "w").close()
        else:
            time.sleep(0.05)
    try:
        rest, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rest, err = p.communicate()
    seen += rest or b""
    h.check("streaming_first_event_before_the_second_is_sent",
            first_before_go and b"two" in seen and b"late" not in seen and p.returncode == 0,
            f"exit {p.returncode}: {seen[-400:]!r} {err.decode(errors='replace')[-600:]}")


def case_disk_full(h):
    """--disk 128M: the agent fills its writable layer; the write fails with
    ENOSPC in the guest, the command goes on, and abox and the host are fine
    (the layer is a file of at most 128 MiB in the state folder)."""
    if not h.image_ok:
        h.check("disk_full", False, "no image")
        return
    name = "agent3"
    script = ("dd if=/dev/zero of=/home/agent/fill bs=1M count=256 2>/home/agent/dd.err; echo dd=$?; "
              "grep -c 'No space left' /home/agent/dd.err; rm -f /home/agent/fill; echo after > /home/agent/a; "
              "cat /home/agent/a")
    try:
        p = subprocess.run(h.abox_cmd(*h.run_args(name, "--disk", "128M", "--keep", "--", "sh", "-c", script)),
                           capture_output=True, timeout=RUN_TIMEOUT, env=h.env)
        code, out, err = p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        code, out, err = -1, "", f"over {RUN_TIMEOUT} s"
    disk = os.path.join(h.instance_dir(name), "disk.ext4")
    size = os.stat(disk).st_size if os.path.exists(disk) else -1
    h.check("disk_full_is_enospc_for_the_agent",
            code == 0 and "dd=1" in out and out.split("dd=1")[1].split()[0] == "1" and out.rstrip().endswith("after"),
            f"exit {code}: {out[-400:]} {err[-600:]}")
    h.check("disk_full_layer_bounded_on_the_host", 0 < size <= 128 << 20, f"{disk}: {size} bytes")


CASES = [case_image, case_agent, case_streaming, case_disk_full]


def main(argv):
    def setup(rig, mode):
        rig.build_internet()
        for addr in (API_ADDR, BEARER_ADDR):
            rig.add_server_address(addr)
        rig.start_nsd([f"api IN A {API_ADDR}", f"bearer IN A {BEARER_ADDR}", f"secret IN A {SECRET_ADDR}",
                       f"ns1 IN A {NS_ADDR}"])
        rig.make_ca([API, BEARER])
        script = os.path.join(HERE, "broker_fake_provider.py")
        h_logs = {API: rig.path("provider-api.jsonl"), BEARER: rig.path("provider-bearer.jsonl")}
        for host, addr in ((API, API_ADDR), (BEARER, BEARER_ADDR)):
            p = rig.spawn(f"provider-{host}", [sys.executable, script, addr, "443", *rig.ca[host], h_logs[host]],
                          ns=rig.inet)
            rig.wait_for(f"provider {host}", lambda a=addr: bool(rig.run(
                ["ss", "-Hlnt", f"src {a}:443"], ns=rig.inet, timeout=5).stdout.strip()), proc=p,
                log=f"provider-{host}")

    def run(rig, mode, abox):
        h = Harness(rig, abox)
        for case in CASES:
            try:
                case(h)
            except Exception as e:  # noqa: BLE001 - one case's failure must not hide the others
                h.check(case.__name__, False, f"{type(e).__name__}: {e}")
        return h.passed, h.failed

    return nr.run_suite("agent_e2e", "agent", ["qemu-system-x86_64", "nsd", "openssl", "npm", "mkfs.ext4"], argv,
                        CASES, setup, run, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
