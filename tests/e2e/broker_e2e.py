#!/usr/bin/env python3
"""End-to-end test of the TLS credential broker (`abox broker`), with real
parts: nsd answers for the fake provider's names, fake providers are real
TLS servers (python ssl, certificates from the test's own CA) that record
every request they receive, and the clients are curl, python's http.client,
raw TLS sockets (for the malformed shapes), and Node's built-in fetch reading
an SSE stream incrementally.

Topology (netns_rig): the providers and nsd live in the rig's "inet"
namespace on public-looking addresses; the broker runs in "outside" (where
host sockets reach inet) listening on 127.0.0.1:443 (TCP, SNI decides) and on
a unix socket (abox-net's hand-off line first). The clients run in
"outside" too, where /etc/netns/<outside>/hosts points the provider's name
at the broker, as a guest's resolver would through abox-net.

Each case is one attack shape from THREATS.md's broker list (or one
legitimate use) and asserts both what the client got and what the provider
recorded: the key arrives only when every condition holds, and never comes
back to the client.

With a second path (abox-net), a guest namespace behind `abox-net run
--broker` reaches the provider the whole real way: its DNS through the gate,
its flow handed to the broker's unix socket behind the hand-off line.

Usage: broker_e2e.py PATH/TO/abox [PATH/TO/abox-net] [--keep] [--only WORD,...]
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process started is stopped by pid at the end.
"""
import http.client
import json
import os
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import broker_fake_provider as provider  # noqa: E402
import netns_rig as nr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
API = "api.example.test"          # the binding the tests use; header x-api-key
BEARER = "bearer.example.test"    # a binding whose key goes in authorization: Bearer
WRONG = "wrong.example.test"      # its provider shows a certificate for another name
UNTRUSTED = "untrusted.example.test"  # its provider's certificate is from an unknown CA
REBIND = "rebind.example.test"    # resolves to 127.0.0.1 only
SELF = "self.example.test"        # resolves to the broker's own address (outside's end of the veth), where a
                                  # provider of the broker's host listens: issue 15
WS = "ws.example.test"            # a binding that allows upgrades
LIMITED = "limited.example.test"  # a binding of its own for the provider backoff (on, the default)
NOBACKOFF = "nobackoff.example.test"  # one with backoff = false (and the accounting of 429s and 503s)
ADDRS = {API: "93.184.215.14", BEARER: "93.184.215.14", WS: "93.184.215.14", LIMITED: "93.184.215.14",
         NOBACKOFF: "93.184.215.14", WRONG: "93.184.215.16", UNTRUSTED: "93.184.215.17"}
KEY = "sk-test-REALKEY-0123456789abcdef0123456789"
KEY2 = "sk-test-BEARERKEY-fedcba9876543210"
INSTANCE = "dev"

POLICY = f"""
[dns]
upstreams = ["{nr.ADDR['ns1']}"]

[[broker]]
name = "{API}"
credential = "provider"
header = "x-api-key"
nonce_env = "PROVIDER_API_KEY"
methods = ["GET", "POST", "HEAD"]
paths = ["/v1/"]

[[broker]]
name = "{BEARER}"
credential = "bearer"
header = "authorization"
nonce_env = "BEARER_API_KEY"
methods = ["POST"]
paths = ["/v1/"]

[[broker]]
name = "{WS}"
credential = "provider"
header = "x-api-key"
nonce_env = "WS_API_KEY"
methods = ["GET"]
paths = ["/v1/ws"]
allow_upgrade = true

[[broker]]
name = "{LIMITED}"
credential = "provider"
header = "x-api-key"
nonce_env = "LIMITED_API_KEY"
methods = ["GET", "POST"]
paths = ["/v1/"]

[[broker]]
name = "{NOBACKOFF}"
credential = "provider"
header = "x-api-key"
nonce_env = "NOBACKOFF_API_KEY"
methods = ["GET", "POST"]
paths = ["/v1/"]
backoff = false

[[broker]]
name = "{WRONG}"
credential = "provider"
header = "x-api-key"
nonce_env = "WRONG_API_KEY"

[[broker]]
name = "{UNTRUSTED}"
credential = "provider"
header = "x-api-key"
nonce_env = "UNTRUSTED_API_KEY"

[[broker]]
name = "{REBIND}"
credential = "provider"
header = "x-api-key"
nonce_env = "REBIND_API_KEY"

[[broker]]
name = "{SELF}"
credential = "provider"
header = "x-api-key"
nonce_env = "SELF_API_KEY"

[limits]
http_head_bytes = 4096
http_body_bytes = 65536

[timeouts]
connect_ms = 2000
tls_handshake_ms = 2000
http_head_ms = 3000
http_body_ms = 3000
"""

CREDENTIALS = f"""[credentials]
provider = "{KEY}"
bearer = "{KEY2}"
"""


# ---------------------------------------------------------------------------
# The cases run inside the outside namespace (a child of the harness).
# ---------------------------------------------------------------------------

class Env:
    def __init__(self, cfg):
        self.__dict__.update(cfg)
        self.nonces = {n["name"]: n["nonce"] for n in cfg["nonce_list"]}

    def provider_log(self, which="api"):
        return provider.read_records(self.logs[which])

    def events(self):
        with open(self.events_file) as f:
            return [json.loads(line) for line in f if line.strip()]


def tls_context(env):
    ctx = ssl.create_default_context(cafile=env.ca)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def raw_exchange(env, data, sni=API, limit=1 << 20, timeout=10):
    """Sends raw bytes over TLS to the broker, returns all it answers until
    it closes (bounded in bytes and time)."""
    ctx = tls_context(env)
    with socket.create_connection(("127.0.0.1", 443), timeout=timeout) as s:
        with ctx.wrap_socket(s, server_hostname=sni) as t:
            t.sendall(data)
            out = b""
            deadline = time.monotonic() + timeout
            while len(out) < limit and time.monotonic() < deadline:
                try:
                    chunk = t.recv(65536)
                except (ssl.SSLError, ConnectionResetError):
                    break
                if not chunk:
                    break
                out += chunk
            return out


def status_and_headers(resp):
    head = resp.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


def curl(env, *args, timeout=20):
    cmd = ["curl", "-sS", "--max-time", "15", "--cacert", env.ca, *args]
    return subprocess.run(cmd, capture_output=True, timeout=timeout)


def nothing_reached_provider(env, before, which="api"):
    after = env.provider_log(which)
    assert len(after) == len(before), f"the provider saw {len(after) - len(before)} request(s): {after[len(before):]}"


def assert_refused(env, raw, status, reason):
    st, h = status_and_headers(raw)
    assert st == status, f"status {st}, wanted {status}: {raw[:300]!r}"
    assert h.get("abox-refused") == reason, f"abox-refused {h.get('abox-refused')!r}, wanted {reason!r}"
    assert h.get("connection") == "close", h


def request(env, method="POST", path="/v1/messages", host=API, headers=None, body=b"{}", nonce_header="x-api-key",
            nonce=None):
    """A well-formed request as raw bytes (so a case can break one thing)."""
    hs = [("Host", host)]
    if nonce_header:
        hs.append((nonce_header, nonce if nonce is not None else env.nonces[API]))
    hs += headers or []
    if body is not None and method in ("POST", "PUT", "PATCH"):
        hs.append(("Content-Length", str(len(body))))
    hs.append(("Connection", "close"))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hs) + "\r\n"
    return head.encode() + (body or b"")


CASES = []


class Skip(Exception):
    """A case that cannot run here (counted neither passed nor failed)."""


def case(fn):
    CASES.append(fn)
    return fn


@case
def curl_post_gets_the_key_upstream(env):
    before = env.provider_log()
    r = curl(env, "-X", "POST", "-H", f"x-api-key: {env.nonces[API]}", "-H", "content-type: application/json",
             "--data", '{"model":"m","messages":[]}', "-w", "\n%{http_code}", f"https://{API}/v1/messages")
    out = r.stdout.decode()
    assert r.returncode == 0 and out.endswith("\n200"), (r.returncode, out, r.stderr)
    assert KEY not in out
    got = env.provider_log()[len(before):]
    assert len(got) == 1, got
    h = provider.record_headers(got[0])
    assert h.get("x-api-key") == KEY, h
    assert env.nonces[API] not in json.dumps(got[0]), "the nonce went upstream"
    assert got[0]["body"] == '{"model":"m","messages":[]}'


@case
def expect_100_continue_is_answered_by_the_broker(env):
    before = env.provider_log()
    body = b'{"pad":"' + b"x" * 40000 + b'"}'
    path = env.logs["api"] + ".body"
    with open(path, "wb") as f:
        f.write(body)
    # curl waits for the 100 (up to 60 s here, past its own --max-time of 15):
    # only a broker that answers at once lets it send the body in time.
    r = curl(env, "-X", "POST", "-H", f"x-api-key: {env.nonces[API]}", "-H", "Expect: 100-continue",
             "--expect100-timeout", "60",
             "--data-binary", f"@{path}", "-o", "/dev/null", "-w", "%{http_code}", "-v", f"https://{API}/v1/messages")
    assert r.stdout == b"200", (r.stdout, r.stderr[-800:])
    assert r.stderr.count(b"< HTTP/1.1 100") == 1, r.stderr[-800:]
    got = env.provider_log()[len(before):]
    assert len(got) == 1 and len(got[0]["body"]) == len(body), len(got)


@case
def guest_credentials_are_dropped(env):
    before = env.provider_log()
    r = curl(env, "-H", f"x-api-key: {env.nonces[API]}", "-H", "Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=",
             "-H", "Cookie: session=guest", "-o", "/dev/null", "-w", "%{http_code}", f"https://{API}/v1/models")
    assert r.stdout == b"200", (r.stdout, r.stderr)
    got = env.provider_log()[len(before):]
    names = provider.record_header_names(got[0])
    assert "authorization" not in names and "cookie" not in names, names
    assert names.count("x-api-key") == 1


@case
def bearer_binding_puts_the_key_after_bearer(env):
    before = env.provider_log()
    r = curl(env, "-X", "POST", "-H", f"Authorization: Bearer {env.nonces[BEARER]}", "--data", "{}",
             "-o", "/dev/null", "-w", "%{http_code}", f"https://{BEARER}/v1/chat")
    assert r.stdout == b"200", (r.stdout, r.stderr)
    got = env.provider_log()[len(before):]
    h = provider.record_headers(got[0])
    assert h.get("authorization") == f"Bearer {KEY2}", h


@case
def python_http_client_keep_alive(env):
    before = env.provider_log()
    conn = http.client.HTTPSConnection(API, 443, context=tls_context(env), timeout=10)
    try:
        for i in range(3):
            conn.request("POST", f"/v1/messages?n={i}", body=b'{"n":%d}' % i,
                         headers={"x-api-key": env.nonces[API], "content-type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, (resp.status, body)
            assert KEY.encode() not in body
        sock = conn.sock
        assert sock is not None, "the broker closed a keep-alive connection"
    finally:
        conn.close()
    got = env.provider_log()[len(before):]
    assert [g["path"] for g in got] == ["/v1/messages?n=0", "/v1/messages?n=1", "/v1/messages?n=2"], got
    assert all(provider.record_headers(g).get("x-api-key") == KEY for g in got)


@case
def pipelined_requests_in_separate_records_are_both_answered(env):
    # Two requests, each its own TLS record, corked so that both reach the
    # broker in one segment: it reads them in one go (its read-ahead), answers
    # the first, and must then answer the second from what it already holds,
    # with no readiness left on the socket to wake it (a stall here would
    # last until the broker's idle time-out, past this case's bound).
    before = env.provider_log()
    first = request(env, path="/v1/messages?pipelined=1").replace(b"Connection: close\r\n", b"")
    second = request(env, path="/v1/messages?pipelined=2")
    ctx = tls_context(env)
    with socket.create_connection(("127.0.0.1", 443), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=API) as t:
            t.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            t.sendall(first)
            t.sendall(second)
            t.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            out = b""
            deadline = time.monotonic() + 5
            while out.count(b"HTTP/1.1 200 ") < 2 and time.monotonic() < deadline:
                try:
                    chunk = t.recv(65536)
                except (ssl.SSLError, ConnectionResetError, socket.timeout):
                    break
                if not chunk:
                    break
                out += chunk
    assert out.count(b"HTTP/1.1 200 ") == 2, out[:400]
    got = env.provider_log()[len(before):]
    assert [g["path"] for g in got] == ["/v1/messages?pipelined=1", "/v1/messages?pipelined=2"], got


@case
def provider_dropping_a_kept_connection_breaks_nothing(env):
    # The provider closes its side after each of these answers without saying
    # so; the broker's pooled connection is dead, and the next request must
    # still go through (dropped from the pool, or sent again on a fresh one).
    before = env.provider_log()
    conn = http.client.HTTPSConnection(API, 443, context=tls_context(env), timeout=10)
    try:
        for i in range(4):
            path = "/v1/close-after" if i % 2 == 0 else f"/v1/messages?after-close={i}"
            conn.request("GET", path, headers={"x-api-key": env.nonces[API]})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, (i, resp.status, body)
    finally:
        conn.close()
    got = env.provider_log()[len(before):]
    assert [g["path"].split("?")[0] for g in got] == ["/v1/close-after", "/v1/messages"] * 2, got


@case
def request_the_provider_drops_on_a_kept_connection_is_sent_again(env):
    # The provider answers, keeps the connection, then reads the next request
    # on it and closes without a word: not one byte of an answer. The broker
    # sends that request once more on a fresh connection (the provider sees
    # it twice, the same body both times) and the guest gets the answer.
    before = env.provider_log()
    conn = http.client.HTTPSConnection(API, 443, context=tls_context(env), timeout=10)
    try:
        conn.request("GET", "/v1/drop-next", headers={"x-api-key": env.nonces[API]})
        resp = conn.getresponse()
        assert resp.status == 200, (resp.status, resp.read())
        resp.read()
        conn.request("POST", "/v1/messages?after-drop=1", body=b'{"n":1}',
                     headers={"x-api-key": env.nonces[API], "content-type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, (resp.status, body)
        assert b"msg_1" in body, body
    finally:
        conn.close()
    got = env.provider_log()[len(before):]
    assert [(g["path"].split("?")[0], g.get("dropped", False)) for g in got] == [
        ("/v1/drop-next", False), ("/v1/messages", True), ("/v1/messages", False)], got
    assert got[1]["body"] == got[2]["body"] == '{"n":1}', got


@case
def chunked_request_body_is_forwarded(env):
    before = env.provider_log()
    body = b"7\r\n{\"a\":1}\r\n3\r\n, 2\r\n0\r\n\r\n"
    raw = (f"POST /v1/messages HTTP/1.1\r\nHost: {API}\r\nx-api-key: {env.nonces[API]}\r\n"
           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode() + body
    resp = raw_exchange(env, raw)
    assert status_and_headers(resp)[0] == 200, resp[:200]
    got = env.provider_log()[len(before):]
    assert got[0]["body"] == '{"a":1}, 2', got


@case
def chunked_response_with_trailer_reaches_the_client_without_it(env):
    # A provider ends a chunked answer with trailer fields: the client gets the
    # whole body, the response ends "0\r\n\r\n" with none of the fields (nor
    # the key one of them echoed), and the connection stays usable.
    before = env.provider_log()
    ctx = tls_context(env)
    with socket.create_connection(("127.0.0.1", 443), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=API) as t:
            ask = (f"GET /v1/trailer HTTP/1.1\r\nHost: {API}\r\nx-api-key: {env.nonces[API]}\r\n\r\n").encode()
            t.sendall(ask)
            out = b""
            deadline = time.monotonic() + 10
            while not out.endswith(b"\r\n0\r\n\r\n") and len(out) < 65536 and time.monotonic() < deadline:
                chunk = t.recv(65536)
                if not chunk:
                    break
                out += chunk
            status, headers = status_and_headers(out)
            assert status == 200 and headers.get("transfer-encoding") == "chunked", out[:300]
            assert "trailer" not in headers, headers  # announced by the provider, never sent on
            body = out.split(b"\r\n\r\n", 1)[1]
            assert body.endswith(b"\r\n0\r\n\r\n"), f"the body does not end with the last chunk alone: {body!r}"
            for name in (b"X-Checksum", b"Set-Cookie", b"9999", b"X-Key", KEY.encode()):
                assert name not in body, f"{name!r} reached the client: {body!r}"
            # The same connection answers again: the framing stayed intact.
            t.sendall(request(env, method="GET", body=None))
            again = b""
            while len(again) < 65536 and time.monotonic() < deadline:
                chunk = t.recv(65536)
                if not chunk:
                    break
                again += chunk
            assert status_and_headers(again)[0] == 200, again[:300]
    # And a real client reads it: python's http.client (it reads and discards trailers).
    conn = http.client.HTTPSConnection(API, 443, context=tls_context(env), timeout=10)
    try:
        conn.request("GET", "/v1/trailer", headers={"x-api-key": env.nonces[API]})
        resp = conn.getresponse()
        data = resp.read()
        assert resp.status == 200 and json.loads(data) == {"id": "msg_t", "text": "after the trailer"}, data
        assert resp.getheader("Set-Cookie") is None
    finally:
        conn.close()
    r = curl(env, "-H", f"x-api-key: {env.nonces[API]}", f"https://{API}/v1/trailer")
    assert r.returncode == 0 and json.loads(r.stdout) == {"id": "msg_t", "text": "after the trailer"}, (r.stdout, r.stderr)
    got = env.provider_log()[len(before):]
    assert [g["path"] for g in got] == ["/v1/trailer", "/v1/messages", "/v1/trailer", "/v1/trailer"], got


@case
def node_fetch_reads_sse_as_it_streams(env):
    flag = env.logs["api"] + ".go"
    if os.path.exists(flag):
        os.unlink(flag)
    script = r"""
const fs = require('fs');
(async () => {
  const res = await fetch(process.argv[1], {method: 'POST', body: '{}',
      headers: {'x-api-key': process.argv[2], 'content-type': 'application/json'}});
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = '', events = [];
  for (let i = 0; i < 100; i++) {
    const {value, done} = await reader.read();
    if (done) break;
    text += dec.decode(value, {stream: true});
    let k;
    while ((k = text.indexOf('\n\n')) >= 0) {
      const ev = text.slice(0, k); text = text.slice(k + 2);
      const data = ev.split('\n').filter(l => l.startsWith('data: ')).map(l => l.slice(6)).join('');
      events.push(data);
      // Only after the first event arrived does the provider get its go.
      if (events.length === 1) fs.writeFileSync(process.argv[3], 'go');
    }
  }
  console.log(JSON.stringify({status: res.status, type: res.headers.get('content-type'), events}));
})().catch(e => { console.log(JSON.stringify({error: String(e)})); process.exit(1); });
"""
    env_vars = dict(os.environ, NODE_EXTRA_CA_CERTS=env.ca)
    r = subprocess.run(["node", "-e", script, f"https://{API}/v1/sse", env.nonces[API], flag],
                       capture_output=True, timeout=30, env=env_vars)
    out = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert out.get("status") == 200, (out, r.stderr[-500:])
    assert out["type"] == "text/event-stream", out
    # "late" would mean the broker held event one until the stream ended.
    assert out["events"] == ["one", "two"], out


@case
def reflection_never_carries_the_key_back(env):
    before = env.provider_log()
    for path in ("/v1/echo", "/v1/echo-head"):
        resp = raw_exchange(env, request(env, method="GET", path=path, body=None))
        assert status_and_headers(resp)[0] == 200, resp[:200]
        assert KEY.encode() not in resp, f"{path}: the key came back to the guest"
        assert b"*" * len(KEY) in resp, f"{path}: the echo was not scrubbed in place"
    got = env.provider_log()[len(before):]
    assert len(got) == 2 and all(provider.record_headers(g).get("x-api-key") == KEY for g in got)


def decode_chunked(body):
    """A client's reading of a chunked body (extensions skipped, trailer
    fields returned): (payload, trailer lines, ended)."""
    out, at = b"", 0
    while True:
        eol = body.find(b"\r\n", at)
        if eol < 0:
            return out, [], False
        size = int(body[at:eol].split(b";")[0], 16)
        at = eol + 2
        if size == 0:
            rest = body[at:]
            if rest.startswith(b"\r\n"):
                return out, [], True
            end = rest.find(b"\r\n\r\n")
            return out, (rest[:end].split(b"\r\n") if end >= 0 else []), end >= 0
        out += body[at:at + size]
        at += size + 2


def echo_chunked_variants(key):
    """The /v1/echo-chunked queries: a chunk boundary at every offset of the
    key (also with extensions, and with a TLS record split elsewhere in the
    key), and every byte its own chunk."""
    n = len(key)
    return ([f"at={k}" for k in range(1, n)] + [f"at={k}&ext=1" for k in range(1, n)] +
            [f"at={k}&split={(k * 7) % (n - 1) + 1}" for k in range(1, n)] + ["onebyte=1", "onebyte=1&ext=1"])


@case
def chunk_framing_inside_an_echoed_key_never_hides_it_from_the_scrubber(env):
    # Issue 14: a provider echoes the request's headers in a chunked body
    # whose chunk-size line falls inside the key ("...sk-te\r\n1d\r\nst-..."):
    # the framed bytes never hold the key, a client's decoding does. Every
    # offset, on an x-api-key and on an authorization: Bearer binding, read
    # by python's http.client (keep-alive), our own decoding of the raw
    # bytes, curl and Node's fetch: the key is never in what they decode,
    # the masked key is.
    before = env.provider_log()
    masked = b"*" * len(KEY)
    for host, nonce_header, nonce, key, method in (
            (API, "x-api-key", env.nonces[API], KEY, "GET"),
            (BEARER, "authorization", f"Bearer {env.nonces[BEARER]}", KEY2, "POST")):
        variants = echo_chunked_variants(key)
        conn = http.client.HTTPSConnection(host, 443, context=tls_context(env), timeout=10)
        try:
            for v in variants:
                conn.request(method, f"/v1/echo-chunked?{v}", body=b"" if method == "POST" else None,
                             headers={nonce_header: nonce})
                resp = conn.getresponse()
                body = resp.read()
                assert resp.status == 200 and resp.getheader("transfer-encoding") == "chunked", (v, resp.status)
                assert key.encode() not in body, f"{host} {v}: the client decoded the key"
                assert b"*" * len(key) in body, f"{host} {v}: no masked key in {body!r}"
        finally:
            conn.close()
        # The provider got the key each time (so each echo held it).
        echoed = [provider.record_headers(g) for g in env.provider_log()[len(before):]
                  if g["path"].startswith("/v1/echo-chunked")]
        echoed = [h.get(nonce_header) for h in echoed if h.get("host") == host]
        assert len(echoed) == len(variants) and set(echoed) == {key if host == API else f"Bearer {key}"}, \
            (host, len(echoed), set(echoed))
    # The raw bytes, decoded here: no key on the wire, none decoded, no
    # extension and no trailer passed on.
    for v in ("at=1", "at=20&ext=1", "at=41&split=3", "onebyte=1&ext=1"):
        raw = raw_exchange(env, request(env, method="GET", path=f"/v1/echo-chunked?{v}", body=None))
        assert KEY.encode() not in raw, v
        payload, trailer, ended = decode_chunked(raw.split(b"\r\n\r\n", 1)[1])
        assert ended and not trailer and KEY.encode() not in payload and masked in payload, (v, raw[-300:])
        assert b"abox-test" not in raw, f"{v}: a chunk extension reached the client"
    for k in range(1, len(KEY)):
        r = curl(env, "-H", f"x-api-key: {env.nonces[API]}", f"https://{API}/v1/echo-chunked?at={k}")
        assert r.returncode == 0 and KEY.encode() not in r.stdout and masked in r.stdout, (k, r.stdout, r.stderr)
    script = r"""
(async () => {
  const out = [];
  for (const v of JSON.parse(process.argv[3])) {
    const res = await fetch(process.argv[1] + v, {headers: {'x-api-key': process.argv[2]}});
    out.push([v, res.status, await res.text()]);
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.log(JSON.stringify({error: String(e)})); process.exit(1); });
"""
    r = subprocess.run(["node", "-e", script, f"https://{API}/v1/echo-chunked?", env.nonces[API],
                        json.dumps(echo_chunked_variants(KEY))],
                       capture_output=True, timeout=120, env=dict(os.environ, NODE_EXTRA_CA_CERTS=env.ca))
    results = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert isinstance(results, list) and len(results) == len(echo_chunked_variants(KEY)), (results, r.stderr[-500:])
    for v, status, text in results:
        assert status == 200 and KEY not in text and "*" * len(KEY) in text, (v, status, text)


@case
def content_coded_echo_is_refused_not_passed_on(env):
    # Issue 14: the scrubber must see what the client decodes, and a key
    # inside gzip is out of its sight. The broker asks the provider for
    # identity whatever the guest accepts, and refuses a coded body (as a
    # content or a transfer coding) with 502: not a byte of it reaches the
    # client, which would have decompressed the key.
    before = env.provider_log()
    for path, reason in (("/v1/echo-gzip", "upstream_content_encoding"), ("/v1/echo-te-gzip", "upstream_connect_failed")):
        r = curl(env, "--compressed", "-i", "-H", f"x-api-key: {env.nonces[API]}", f"https://{API}{path}")
        out = r.stdout
        assert r.returncode == 0, (path, r.returncode, r.stderr)
        status, headers = status_and_headers(out)
        assert status == 502 and headers.get("abox-refused") == reason, (path, out[:400])
        assert b"gzip" not in out.split(b"\r\n\r\n", 1)[1], out
        raw = raw_exchange(env, request(env, method="GET", path=path, body=None,
                                        headers=[("Accept-Encoding", "gzip")]))
        assert status_and_headers(raw)[0] == 502, raw[:300]
        assert b"\x1f\x8b" not in raw, f"{path}: gzip bytes reached the client"
    # The provider was asked for identity, whatever curl offered.
    got = env.provider_log()[len(before):]
    assert len(got) == 4, got
    assert {provider.record_headers(g).get("accept-encoding") for g in got} == {"identity"}, got
    # An ordinary request with curl --compressed still works.
    r = curl(env, "--compressed", "-H", f"x-api-key: {env.nonces[API]}", f"https://{API}/v1/messages")
    assert r.returncode == 0 and b"msg_1" in r.stdout, (r.stdout, r.stderr)


@case
def host_differs_from_sni(env):
    before = env.provider_log()
    resp = raw_exchange(env, request(env, host="evil.example.test"))
    assert_refused(env, resp, 403, "host_mismatch")
    nothing_reached_provider(env, before)


@case
def absolute_form_and_connect_are_refused(env):
    before = env.provider_log()
    raw = request(env).replace(b"POST /v1/messages", b"POST https://evil.example.test/v1/messages", 1)
    assert_refused(env, raw_exchange(env, raw), 400, "absolute_form")
    raw = f"CONNECT evil.example.test:443 HTTP/1.1\r\nHost: {API}\r\n\r\n".encode()
    st, _ = status_and_headers(raw_exchange(env, raw))
    assert st == 400, st
    nothing_reached_provider(env, before)


@case
def smuggling_shapes_are_refused(env):
    before = env.provider_log()
    n = env.nonces[API]
    shapes = {
        "length_and_chunked": f"POST /v1/m HTTP/1.1\r\nHost: {API}\r\nx-api-key: {n}\r\nContent-Length: 4\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "duplicate_content_length": f"POST /v1/m HTTP/1.1\r\nHost: {API}\r\nx-api-key: {n}\r\nContent-Length: 2\r\n"
                                    "Content-Length: 2\r\n\r\n{}",
        "obs_fold": f"POST /v1/m HTTP/1.1\r\nHost: {API}\r\nx-api-key: {n}\r\nX-A: a\r\n b\r\n"
                    "Content-Length: 2\r\n\r\n{}",
        "line_ending": f"POST /v1/m HTTP/1.1\r\nHost: {API}\nx-api-key: {n}\r\nContent-Length: 2\r\n\r\n{{}}",
        "chunk_size": f"POST /v1/m HTTP/1.1\r\nHost: {API}\r\nx-api-key: {n}\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "zz\r\n{{}}\r\n0\r\n\r\n",
    }
    for reason, raw in shapes.items():
        resp = raw_exchange(env, raw.encode())
        st, h = status_and_headers(resp)
        assert st == 400, f"{reason}: status {st}"
        assert h.get("abox-refused"), f"{reason}: no reason header"
    oversize = request(env, headers=[("X-Pad", "a" * 5000)])
    assert_refused(env, raw_exchange(env, oversize), 400, "head_too_large")
    nothing_reached_provider(env, before)


@case
def nonce_in_the_wrong_places(env):
    before = env.provider_log()
    n = env.nonces[API]
    other_instance = "abox-nonce-" + "0" * 64
    # Another instance's (or a forged) nonce.
    assert_refused(env, raw_exchange(env, request(env, nonce=other_instance)), 403, "nonce_unknown")
    # Another binding's nonce of this instance.
    assert_refused(env, raw_exchange(env, request(env, nonce=env.nonces[BEARER])), 403, "nonce_other_binding")
    # In the wrong header (and none where the binding says, nor in
    # authorization: Bearer, the other place a nonce is taken).
    resp = raw_exchange(env, request(env, nonce_header="proxy-authorization", nonce=f"Bearer {n}"))
    assert_refused(env, resp, 403, "nonce_missing")
    # In both places at once.
    resp = raw_exchange(env, request(env, headers=[("Authorization", f"Bearer {n}")]))
    assert_refused(env, resp, 403, "nonce_duplicate")
    # In another header besides the right one.
    resp = raw_exchange(env, request(env, headers=[("X-Extra", n)]))
    assert_refused(env, resp, 403, "nonce_in_other_header")
    # In the URL.
    assert_refused(env, raw_exchange(env, request(env, path=f"/v1/messages?k={n}")), 403, "nonce_in_target")
    # In the body.
    assert_refused(env, raw_exchange(env, request(env, body=json.dumps({"k": n}).encode())), 403, "nonce_in_body")
    # No nonce at all.
    assert_refused(env, raw_exchange(env, request(env, nonce_header=None)), 403, "nonce_missing")
    # The real key from the guest.
    assert_refused(env, raw_exchange(env, request(env, headers=[("X-Other", KEY)])), 403, "real_key_in_request")
    nothing_reached_provider(env, before)


@case
def method_and_path_outside_the_binding(env):
    before = env.provider_log()
    assert_refused(env, raw_exchange(env, request(env, method="DELETE", body=None)), 403, "method_not_allowed")
    assert_refused(env, raw_exchange(env, request(env, path="/admin/keys")), 403, "path_not_allowed")
    up = request(env, method="GET", body=None, headers=[("Upgrade", "websocket")])
    assert_refused(env, raw_exchange(env, up), 403, "upgrade_not_allowed")
    nothing_reached_provider(env, before)


@case
def upgrade_on_a_binding_that_allows_it_is_tunnelled_and_scrubbed(env):
    before = env.provider_log()
    ctx = tls_context(env)
    with socket.create_connection(("127.0.0.1", 443), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=WS) as t:
            t.sendall((f"GET /v1/ws HTTP/1.1\r\nHost: {WS}\r\nx-api-key: {env.nonces[WS]}\r\n"
                       "Upgrade: echo\r\nConnection: Upgrade\r\n\r\n").encode())
            got = b""
            for _ in range(100):
                if got.count(b"\n") >= 5 and b"\r\n\r\n" in got and b"key=" in got:
                    break
                got += t.recv(65536)
            assert got.startswith(b"HTTP/1.1 101"), got[:200]
            assert KEY.encode() not in got, "the key came back through the tunnel"
            assert b"key=" + b"*" * len(KEY) in got, got
            t.sendall(b"hello tunnel\n")
            echo = b""
            for _ in range(100):
                if b"hello tunnel\n" in echo:
                    break
                chunk = t.recv(65536)
                if not chunk:
                    break
                echo += chunk
            assert b"hello tunnel\n" in echo, echo
    got = env.provider_log()[len(before):]
    assert len(got) == 1 and provider.record_headers(got[0]).get("x-api-key") == KEY, got


def read_websocket_frames(data):
    """A client's reading of a server's WebSocket frames: (messages joined
    from their fragments, [(opcode, payload)] of the control frames)."""
    messages, controls, partial, at = [], [], b"", 0
    while len(data) - at >= 2:
        b0, b1 = data[at], data[at + 1]
        n, h = b1 & 0x7F, 2
        if n == 126:
            n, h = int.from_bytes(data[at + 2:at + 4], "big"), 4
        elif n == 127:
            n, h = int.from_bytes(data[at + 2:at + 10], "big"), 10
        assert not b1 & 0x80, "a masked frame from the server side"
        payload = data[at + h:at + h + n]
        assert len(payload) == n, "a frame cut short"
        at += h + n
        if b0 & 0x0F >= 8:
            controls.append((b0 & 0x0F, payload))
            continue
        partial += payload
        if b0 & 0x80:
            messages.append(partial)
            partial = b""
    return messages, controls


@case
def websocket_tunnels_are_scrubbed_per_message_and_never_compressed(env):
    # After a 101 "Upgrade: websocket" the broker reads frames as a client
    # does, and scrubs each message across its fragments. permessage-deflate
    # would compress the tunnel past the scrubber's sight: the guest's offer
    # is not passed on, and a provider that names the extension anyway gets
    # its 101 refused (502), nothing of it forwarded.
    before = env.provider_log()
    ask = (f"GET /v1/ws{{}} HTTP/1.1\r\nHost: {WS}\r\nx-api-key: {env.nonces[WS]}\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n")
    resp = raw_exchange(env, ask.format("").encode(), sni=WS)
    status, headers = status_and_headers(resp)
    assert status == 101 and "sec-websocket-extensions" not in headers, resp[:400]
    # The provider then echoes the key in a message fragmented inside the
    # key (a ping between the fragments) and in a close reason: the frames
    # never hold it whole, a client joining the fragments would; what the
    # client reads holds it nowhere.
    assert KEY.encode() not in resp, "the key in the tunnel's bytes"
    messages, controls = read_websocket_frames(resp.split(b"\r\n\r\n", 1)[1])
    assert messages == [b'{"echo":"x-api-key: ' + b"*" * len(KEY) + b'"}'], messages
    assert controls == [(0x9, b"ping"), (0x8, b"\x03\xe8" + b"*" * len(KEY))], controls
    resp = raw_exchange(env, ask.format("?deflate=always").encode(), sni=WS)
    assert_refused(env, resp, 502, "upstream_content_encoding")
    assert b"permessage-deflate" not in resp, resp
    got = env.provider_log()[len(before):]
    assert len(got) == 2 and all("sec-websocket-extensions" not in provider.record_header_names(g) for g in got), got


@case
def redirect_is_passed_through_not_followed(env):
    before = env.provider_log()
    resp = raw_exchange(env, request(env, method="GET", path="/v1/redirect", body=None))
    st, h = status_and_headers(resp)
    assert st == 302 and h.get("location") == "https://elsewhere.example.test/v1/messages", (st, h)
    got = env.provider_log()[len(before):]
    assert [g["path"] for g in got] == ["/v1/redirect"], got


@case
def upstream_certificate_for_another_name_is_refused(env):
    before = env.provider_log("wrong")
    resp = raw_exchange(env, request(env, host=WRONG, nonce=env.nonces[WRONG]), sni=WRONG)
    assert_refused(env, resp, 502, "upstream_tls_unverified")
    # The handshake failed: no request reached it.
    nothing_reached_provider(env, before, "wrong")


@case
def upstream_certificate_from_unknown_ca_is_refused(env):
    before = env.provider_log("untrusted")
    resp = raw_exchange(env, request(env, host=UNTRUSTED, nonce=env.nonces[UNTRUSTED]), sni=UNTRUSTED)
    assert_refused(env, resp, 502, "upstream_tls_unverified")
    nothing_reached_provider(env, before, "untrusted")


@case
def upstream_resolving_to_loopback_is_refused(env):
    resp = raw_exchange(env, request(env, host=REBIND, nonce=env.nonces[REBIND]), sni=REBIND)
    assert_refused(env, resp, 502, "upstream_address_reserved")


@case
def upstream_resolving_to_the_brokers_own_address_is_refused(env):
    # Issue 15: an answer naming an address of the broker's own host passed
    # the reserved ranges (it is public) and the key went to whatever
    # listens there: a service of the host (here a provider with a valid
    # certificate for the name, on the outside end of the veth).
    before = env.provider_log("self")
    resp = raw_exchange(env, request(env, host=SELF, nonce=env.nonces[SELF]), sni=SELF)
    assert_refused(env, resp, 502, "upstream_address_reserved")
    nothing_reached_provider(env, before, "self")
    reserved = [e for e in env.events() if e.get("kind") == "broker_upstream_reserved" and e.get("name") == SELF]
    assert any(e.get("address") == nr.OUTSIDE_LINK for e in reserved), f"no broker_upstream_reserved event: {reserved}"


@case
def sni_without_a_binding_gets_no_certificate(env):
    before = env.provider_log()
    ctx = tls_context(env)
    for name in ("evil.example.test", "flood-1.example.test"):
        with socket.create_connection(("127.0.0.1", 443), timeout=10) as s:
            try:
                ctx.wrap_socket(s, server_hostname=name)
                raise AssertionError(f"handshake for {name} succeeded")
            except ssl.SSLError as e:
                assert "UNRECOGNIZED_NAME" in str(e).upper() or "ALERT" in str(e).upper(), e
    nothing_reached_provider(env, before)


@case
def alpn_is_http11_only(env):
    ctx = ssl.create_default_context(cafile=env.ca)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", 443), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=API) as t:
            assert t.selected_alpn_protocol() == "http/1.1", t.selected_alpn_protocol()
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", 443), timeout=10) as s:
        try:
            ctx.wrap_socket(s, server_hostname=API)
            raise AssertionError("an h2-only client got a session")
        except ssl.SSLError:
            pass


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@case
def sni_flood_keeps_memory_bounded_and_service_working(env):
    ctx = tls_context(env)
    rss_before = rss_kib(env.broker_pid)
    for i in range(300):
        with socket.create_connection(("127.0.0.1", 443), timeout=10) as s:
            try:
                ctx.wrap_socket(s, server_hostname=f"flood{i}.example.test")
            except ssl.SSLError:
                pass
    resp = raw_exchange(env, request(env))
    assert status_and_headers(resp)[0] == 200
    stats = read_stats(env)
    # At most one leaf per binding: the flood of made-up names minted none.
    assert stats["leaves"]["cached"] <= len(env.nonce_list), stats["leaves"]
    assert stats["service"]["sni_refused"] >= 300, stats["service"]
    grown = rss_kib(env.broker_pid) - rss_before
    assert grown < 16 * 1024, f"the broker grew {grown} KiB during the flood"


@case
def handshakes_in_progress_are_bounded(env):
    before = read_stats(env)["service"]
    socks = []
    try:
        for _ in range(80):  # the broker allows 64 handshakes in progress
            socks.append(socket.create_connection(("127.0.0.1", 443), timeout=10))
        # A connection past the bound is closed at once: its read ends.
        closed = 0
        for s in socks[64:]:
            try:
                closed += s.recv(1) == b""
            except (ConnectionResetError, socket.timeout):
                pass
        stats = read_stats(env)["service"]
        assert stats["handshakes_refused_limit"] - before["handshakes_refused_limit"] >= 16, stats
        assert stats["handshakes_in_progress"] <= 64, stats
        assert closed >= 16, closed
    finally:
        for s in socks:
            s.close()
    # Once they are gone, a legitimate request is served again.
    for _ in range(50):
        if read_stats(env)["service"]["handshakes_in_progress"] == 0:
            break
        time.sleep(0.1)
    assert status_and_headers(raw_exchange(env, request(env)))[0] == 200


@case
def silent_client_is_closed_after_the_handshake_timeout(env):
    # The broker closes it (tls_handshake_ms = 2 s); the socket's own 15 s
    # timeout fails the case if it never does.
    with socket.create_connection(("127.0.0.1", 443), timeout=15) as s:
        try:
            data = s.recv(1)
        except ConnectionResetError:
            data = b""
        assert data == b"", data
    assert read_stats(env)["service"]["handshakes_in_progress"] == 0


class TricklingClient:
    """A client that sends its bytes one a second, TLS done by hand
    (ssl.MemoryBIO) so that it can trickle the bytes of one TLS record as
    well as one record per byte, and tell an answer from a session ticket."""

    def __init__(self, env, sni=API):
        self.sock = socket.create_connection(("127.0.0.1", 443), timeout=10)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = tls_context(env).wrap_bio(self.inc, self.out, server_hostname=sni)
        self.answer = b""
        self.closed = False
        self.sent = 0

    def client_hello(self):
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        return self.out.read()

    def handshake(self):
        for _ in range(20):
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.out.read())
                data = self.sock.recv(65536)
                assert data, "the broker closed during the handshake"
                self.inc.write(data)
        self.sock.sendall(self.out.read())

    def records(self, plaintext):
        """`plaintext` as the TLS records that carry it."""
        self.tls.write(plaintext)
        return self.out.read()

    def _pump(self, tls_up):
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            data = b""
        if not data:
            self.closed = True
            return
        if not tls_up:
            return
        self.inc.write(data)
        while True:
            try:
                chunk = self.tls.read(65536)
            except ssl.SSLWantReadError:
                return  # a session ticket, or half a record
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self.closed = True
                return
            if not chunk:
                return
            self.answer += chunk

    def trickle(self, wire, tls_up=True, should_stop=lambda: False):
        """Sends `wire` a byte a second until the broker answers or closes;
        then reads to the close (bounded). Returns the bytes sent."""
        for i in range(len(wire)):
            if should_stop():
                break
            try:
                self.sock.sendall(wire[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                self.closed = True
                break
            self.sent = i + 1
            if select.select([self.sock], [], [], 1.0)[0]:
                self._pump(tls_up)
            if self.answer or self.closed:
                break
        deadline = time.monotonic() + 10
        while not self.closed and time.monotonic() < deadline:
            if select.select([self.sock], [], [], 0.5)[0]:
                self._pump(tls_up)
        self.sock.close()
        return self.sent


@case
def trickled_heads_bodies_and_handshakes_meet_their_deadlines(env):
    # Issue 14: every byte resets an idle timer, so only a deadline bounds a
    # client that sends one byte a second. The test policy's deadlines are
    # 2 s (TLS handshake), 3 s (head), 3 s (body); each trickler sends far
    # more than fits in them (a byte a second), and while they trickle,
    # another connection is served. Each gets what its deadline says: 408
    # with abox-refused and Connection: close for a head (one TLS record per
    # byte, and the bytes of one record) and a body, the connection closed
    # for a handshake; the provider sees none of them.
    before_log = env.provider_log()
    before = read_stats(env)["service"]
    head = request(env, path="/v1/messages?trickle=head", body=b'{"a":1}')
    body_head = request(env, path="/v1/messages?trickle=body", body=b"x" * 60)
    body_head, body = body_head[:-60], body_head[-60:]
    results, stop = {}, threading.Event()

    def head_one_record_per_byte():
        c = TricklingClient(env)
        c.handshake()
        wire = b"".join(c.records(head[i:i + 1]) for i in range(len(head)))
        per_byte = len(wire) // len(head)
        sent = c.trickle(wire, should_stop=stop.is_set)
        results["head_records"] = (sent // per_byte, len(head), c.answer, c.closed)

    def head_inside_one_record():
        c = TricklingClient(env)
        c.handshake()
        wire = c.records(head)
        results["head_one_record"] = (c.trickle(wire, should_stop=stop.is_set), len(wire), c.answer, c.closed)

    def body_trickled():
        c = TricklingClient(env)
        c.handshake()
        c.sock.sendall(c.records(body_head))
        wire = b"".join(c.records(body[i:i + 1]) for i in range(len(body)))
        per_byte = len(wire) // len(body)
        sent = c.trickle(wire, should_stop=stop.is_set)
        results["body"] = (sent // per_byte, len(body), c.answer, c.closed)

    def handshake_trickled():
        c = TricklingClient(env)
        hello = c.client_hello()
        results["handshake"] = (c.trickle(hello, tls_up=False, should_stop=stop.is_set), len(hello), c.answer,
                                c.closed)

    threads = [threading.Thread(target=f, daemon=True) for f in
               (head_one_record_per_byte, head_inside_one_record, body_trickled, handshake_trickled)]
    started = time.monotonic()
    for t in threads:
        t.start()
    served_meanwhile = 0
    try:
        for _ in range(40):  # bounded: at most 40 requests, 20 s
            if not all(t.is_alive() for t in threads):
                break
            r = curl(env, "-H", f"x-api-key: {env.nonces[API]}", "-w", "\n%{http_code}",
                     f"https://{API}/v1/messages?served=meanwhile")
            if all(t.is_alive() for t in threads):
                assert r.returncode == 0 and r.stdout.endswith(b"\n200"), (r.stdout, r.stderr)
                served_meanwhile += 1
            time.sleep(0.5)
    finally:
        # 20 s is several times every deadline: a trickler still sending
        # then was not stopped by one.
        for t in threads:
            t.join(timeout=max(0.0, started + 20 - time.monotonic()))
        stop.set()
        for t in threads:
            t.join(timeout=15)
    assert served_meanwhile >= 1, "no request was served while the tricklers were open"
    for name in ("head_records", "head_one_record", "body", "handshake"):
        assert name in results, f"{name}: no answer and no close within 20 s"
    for name in ("head_records", "head_one_record", "body"):
        sent, total, answer, closed = results[name]
        status, headers = status_and_headers(answer)
        reason = "body_timeout" if name == "body" else "head_timeout"
        assert status == 408 and headers.get("abox-refused") == reason, (name, answer[:300])
        assert headers.get("connection") == "close" and closed, (name, headers, closed)
        assert sent < total, f"{name}: all {total} bytes went before the answer: not a deadline"
    sent, total, answer, closed = results["handshake"]
    assert closed and not answer and sent < total, ("handshake", sent, total, closed)
    got = [g["path"] for g in env.provider_log()[len(before_log):]]
    assert not [p for p in got if "trickle" in p], got
    after = read_stats(env)["service"]
    assert after["head_timeouts"] - before["head_timeouts"] == 2, after
    assert after["body_timeouts"] - before["body_timeouts"] == 1, after
    assert after["handshake_timeouts"] - before["handshake_timeouts"] == 1, after
    refused = [e for e in env.events() if e.get("kind") == "broker_refused" and e.get("status") == 408]
    assert {e.get("reason") for e in refused} >= {"head_timeout", "body_timeout"}, refused[-3:]
    assert any(e.get("kind") == "broker_timeout" and e.get("what") == "handshake" for e in env.events())


def stats_lines(env):
    """The complete lines of the stats file (the broker appends one per SIGUSR1)."""
    if not os.path.exists(env.stats_file):
        return []
    with open(env.stats_file) as f:
        text = f.read()
    return text.split("\n")[:-1]


def read_stats(env):
    """SIGUSR1, then the line it appended to the stats file."""
    before = len(stats_lines(env))
    os.kill(env.broker_pid, signal.SIGUSR1)
    for _ in range(200):
        lines = stats_lines(env)
        if len(lines) > before:
            return json.loads(lines[-1])
        time.sleep(0.05)
    raise AssertionError("no stats after SIGUSR1")


def binding_stats(stats, name):
    return next(b for b in stats["bindings"] if b["name"] == name)


@case
def accounting_counts_what_the_broker_saw(env):
    # The 429 and 503 go to the binding with backoff = false, so they start
    # no backoff that would hold the next cases' requests.
    stats = read_stats(env)
    before, api_before = binding_stats(stats, NOBACKOFF), binding_stats(stats, API)
    for path in ("/v1/ratelimit", "/v1/error"):
        resp = raw_exchange(env, request(env, method="GET", path=path, body=None, host=NOBACKOFF,
                                         nonce=env.nonces[NOBACKOFF]), sni=NOBACKOFF)
        assert KEY.encode() not in resp
    stats = read_stats(env)
    after = binding_stats(stats, NOBACKOFF)
    assert after["rate_limited"] == before["rate_limited"] + 1, after
    assert after["server_errors"] == before["server_errors"] + 1, after
    assert after["statuses"].get("429", 0) == before["statuses"].get("429", 0) + 1
    assert after["last_retry_after"] == "5", after
    assert after["requests"] == before["requests"] + 2
    assert after["bytes_up"] > before["bytes_up"] and after["bytes_down"] > before["bytes_down"]
    assert after["backoff"] is False and after["backoffs"] == 0, after
    api = binding_stats(stats, API)
    assert api["refused"] >= 1 and "host_mismatch" in api["refused_by_reason"], api
    assert api["requests"] == api_before["requests"], "nothing was sent on the api binding"
    # Keep-alive to the provider: requests went on pooled connections.
    service = stats["service"]
    assert service["upstream_reused"] > 0 and service["upstream_connections"] < api["requests"], service


def backoff_events(env, binding):
    return [e for e in env.events() if e.get("kind") == "broker_backoff" and e.get("binding") == binding]


@case
def provider_backoff_answers_for_the_provider_until_its_retry_after(env):
    """A provider's 429 with Retry-After on a binding: the guest gets it as it
    was; the next request within the window is the broker's own 429 (and
    never reaches the provider), while other bindings go on; once the window
    has passed (its 'ended' event), a request reaches the provider again."""
    tag = os.urandom(4).hex()
    def limited(path):
        return raw_exchange(env, request(env, method="GET", path=path, body=None, host=LIMITED,
                                         nonce=env.nonces[LIMITED]), sni=LIMITED)
    before = env.provider_log()
    started_before = len(backoff_events(env, LIMITED))
    first = limited(f"/v1/ratelimit-once/{tag}?after=4")
    st, h = status_and_headers(first)
    assert st == 429 and "abox-refused" not in h and h.get("retry-after") == "4", first[:400]
    assert b'"by":"provider"' in first, first[-200:]
    assert len(env.provider_log()) == len(before) + 1

    held = env.provider_log()
    second = limited("/v1/messages")
    st, h = status_and_headers(second)
    assert st == 429 and h.get("abox-refused") == "provider_backoff", second[:400]
    assert 1 <= int(h.get("retry-after", "0")) <= 4, h
    assert h.get("connection") == "close", h
    assert b"the broker's, not the provider's" in second, second[-300:]
    nothing_reached_provider(env, held)
    # Another binding of the same provider is not held.
    other = raw_exchange(env, request(env, method="GET", path="/v1/messages", body=None))
    assert status_and_headers(other)[0] == 200, other[:300]
    held = env.provider_log()

    events = backoff_events(env, LIMITED)[started_before:]
    assert events and events[0]["event"] == "started" and events[0]["status"] == 429 and \
        events[0]["retry_after"] == "4" and events[0]["seconds"] == 4, events
    refused = [e for e in env.events() if e.get("kind") == "broker_refused" and e.get("reason") == "provider_backoff"
               and e.get("binding") == LIMITED]
    assert refused, "the broker's answer is an event"
    stats = binding_stats(read_stats(env), LIMITED)
    assert stats["backoff_active"] is True and stats["backoffs"] >= 1 and stats["backoff_answered"] >= 1, stats

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(e["event"] == "ended" for e in backoff_events(env, LIMITED)[started_before:]):
        time.sleep(0.1)
    ended = [e for e in backoff_events(env, LIMITED)[started_before:] if e["event"] == "ended"]
    assert ended and ended[0]["answered"] == 1, backoff_events(env, LIMITED)
    nothing_reached_provider(env, held)
    third = limited(f"/v1/ratelimit-once/{tag}")
    assert status_and_headers(third)[0] == 200, third[:300]
    got = env.provider_log()[len(held):]
    assert len(got) == 1 and provider.record_headers(got[0]).get("x-api-key") == KEY, got
    assert binding_stats(read_stats(env), LIMITED)["backoff_active"] is False


@case
def a_binding_with_backoff_off_passes_every_request_through(env):
    before = env.provider_log()
    for _ in range(2):
        resp = raw_exchange(env, request(env, method="GET", path="/v1/ratelimit", body=None, host=NOBACKOFF,
                                         nonce=env.nonces[NOBACKOFF]), sni=NOBACKOFF)
        st, h = status_and_headers(resp)
        assert st == 429 and "abox-refused" not in h and h.get("retry-after") == "17", resp[:300]
    got = env.provider_log()[len(before):]
    assert len(got) == 2 and all(r["path"] == "/v1/ratelimit" for r in got), got
    assert not backoff_events(env, NOBACKOFF), backoff_events(env, NOBACKOFF)
    ok = raw_exchange(env, request(env, method="GET", path="/v1/messages", body=None, host=NOBACKOFF,
                                   nonce=env.nonces[NOBACKOFF]), sni=NOBACKOFF)
    assert status_and_headers(ok)[0] == 200, ok[:300]


@case
def unix_handoff_line_then_tls(env):
    def over_unix(line, sni=API):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(env.unix_socket)
            s.sendall(line)
            with tls_context(env).wrap_socket(s, server_hostname=sni) as t:
                t.sendall(request(env))
                out = b""
                for _ in range(100):
                    chunk = t.recv(65536)
                    if not chunk:
                        break
                    out += chunk
                return out

    good = f"ABOX/1 {INSTANCE} {API} 443 {ADDRS[API]}\n".encode()
    assert status_and_headers(over_unix(good))[0] == 200
    before = env.provider_log()
    for bad in (f"ABOX/1 other {API} 443 {ADDRS[API]}\n",        # another instance
                f"ABOX/1 {INSTANCE} evil.example.test 443 1.2.3.4\n",  # no binding
                f"ABOX/1 {INSTANCE} {API} 8443 {ADDRS[API]}\n",   # binding on another port
                "GET / HTTP/1.1\n"):                             # not a hand-off line
        try:
            over_unix(bad.encode())
            raise AssertionError(f"{bad!r} was accepted")
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError, OSError) as e:
            assert not isinstance(e, AssertionError), e
    # The SNI must be the hand-off's name.
    try:
        over_unix(f"ABOX/1 {INSTANCE} {BEARER} 443 {ADDRS[API]}\n".encode(), sni=API)
        raise AssertionError("SNI different from the hand-off was accepted")
    except (ssl.SSLError, ConnectionResetError, OSError) as e:
        assert not isinstance(e, AssertionError), e
    nothing_reached_provider(env, before)


@case
def guest_behind_abox_net_reaches_the_provider_through_the_broker(env):
    if not env.guest_ns:
        raise Skip("no abox-net given")
    before = env.provider_log()
    # The guest resolves through abox-net's DNS gate (the real address) and
    # connects there; abox-net hands the flow to the broker's unix socket.
    r = subprocess.run(["ip", "netns", "exec", env.guest_ns, "curl", "-sS", "--max-time", "15",
                        "--cacert", env.ca, "-H", f"x-api-key: {env.nonces[API]}", "--data", "{}",
                        "-w", "\n%{http_code}", f"https://{API}/v1/messages"], capture_output=True, timeout=30)
    out = r.stdout.decode()
    assert r.returncode == 0 and out.endswith("\n200"), (r.returncode, out, r.stderr[-500:])
    got = env.provider_log()[len(before):]
    assert len(got) == 1 and provider.record_headers(got[0]).get("x-api-key") == KEY, got
    # Without the nonce the guest gets the broker's refusal, not the provider.
    r = subprocess.run(["ip", "netns", "exec", env.guest_ns, "curl", "-sS", "--max-time", "15",
                        "--cacert", env.ca, "-D", "-", "-o", "/dev/null", f"https://{API}/v1/messages"],
                       capture_output=True, timeout=30)
    assert b"abox-refused: nonce_missing" in r.stdout, r.stdout[-300:]
    assert len(env.provider_log()) == len(before) + 1


@case
def the_key_is_in_no_event_and_no_log(env):
    with open(env.events_file, "rb") as f:
        events = f.read()
    assert events, "no events at all"
    assert KEY.encode() not in events and KEY2.encode() not in events
    for name in ("broker", "broker-unix"):
        with open(env.broker_logs[name], "rb") as f:
            assert KEY.encode() not in f.read()
    kinds = {json.loads(line)["kind"] for line in events.splitlines() if line.strip()}
    for k in ("broker_request", "broker_refused", "broker_sni_refused", "broker_upstream_failed",
              "broker_handoff_refused", "broker_key_scrubbed", "broker_stats"):
        assert k in kinds, f"no {k} event: {sorted(kinds)}"


def run_cases(cfg_path, only, cases=None):
    """Runs `cases` (this file's CASES by default) whose names contain a
    word of `only` (all when empty) against the config at `cfg_path`: a
    line each, then the counts as the last line, for run_cases_outside()."""
    with open(cfg_path) as f:
        env = Env(json.load(f))
    passed = failed = 0
    for fn in CASES if cases is None else cases:
        if only and not any(w in fn.__name__ for w in only):
            continue
        try:
            fn(env)
            passed += 1
            print(f"ok   {fn.__name__}", flush=True)
        except Skip as e:
            print(f"skip {fn.__name__}: {e}", flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}", flush=True)
    print(json.dumps({"passed": passed, "failed": failed}), flush=True)
    return 0


# ---------------------------------------------------------------------------
# The harness (root namespace): the rig, the providers, the brokers.
# ---------------------------------------------------------------------------

def split_harness_flags(argv):
    """argv without --keep and --only WORDS: (the rest, keep, only)."""
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    only = ""
    if "--only" in argv[:-1]:
        i = argv.index("--only")
        only = argv[i + 1]
        del argv[i:i + 2]
    return argv, keep, only


def missing_prerequisite(suite, tools):
    """Why `suite` cannot run here (not root, a tool missing), or None."""
    if os.geteuid() != 0:
        return f"{suite}: needs root (namespaces)"
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{suite}: {tool} is missing (scripts/setup.sh installs it)"
    return None


def guest_ca_file(rig, abox, state, instance):
    """`abox broker ca`'s certificate, as the guest image would get it, in a
    file of the rig's."""
    r = abox_run(abox, "broker", "ca", "--state", state, "--instance", instance)
    assert r.returncode == 0 and "BEGIN CERTIFICATE" in r.stdout, r.stderr
    path = rig.path("guest-ca.pem")
    with open(path, "w") as f:
        f.write(r.stdout)
    return path


def nonce_list(abox, policy, state):
    """`abox broker nonces --json`: one {name, nonce, ...} per binding."""
    r = abox_run(abox, "broker", "nonces", "--policy", policy, "--state", state, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["nonces"]


def broker_args(s, instance):
    """The flags every broker of a suite shares (all but --listen)."""
    return ["--policy", s["policy"], "--credentials", s["creds"], "--state", s["state"],
            "--instance", instance, "--upstream-ca", s["ca_upstream"], "--events", s["events"]]


def start_broker(rig, abox, name, args):
    """`abox broker ARGS` in the outside namespace, once it says it listens.
    `ip netns exec` execs its command: the process's pid is the broker's."""
    proc = rig.spawn(name, ["ip", "netns", "exec", rig.outside, abox, "broker", *args])
    rig.wait_for(name, lambda: "listening on" in rig.log_tail(name), proc=proc, log=name)
    return proc


def run_cases_outside(rig, script, cfg, only):
    """Runs `script --cases` in the outside namespace with `cfg` (JSON in a
    file of the rig's), echoes its case lines, and returns its (passed,
    failed); output it cannot read counts as one failure."""
    cfg_path = rig.path("cases.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    child = subprocess.run(["ip", "netns", "exec", rig.outside, sys.executable, os.path.abspath(script),
                            "--cases", cfg_path, only], capture_output=True, text=True, timeout=600)
    lines = child.stdout.splitlines()
    for line in lines[:-1]:
        print(line, flush=True)
    passed = failed = 0
    try:
        summary = json.loads(lines[-1])
        passed, failed = summary["passed"], summary["failed"]
    except (IndexError, ValueError):
        failed = 1
        print(f"FAIL cases: {child.stdout[-2000:]} {child.stderr[-2000:]}")
    if child.stderr.strip():
        print(child.stderr[-2000:])
    return passed, failed


def stop_broker(rig, name, proc):
    """Stops a broker by its pid and reads its log; prints and returns
    whether it exited cleanly (0 on SIGTERM, nothing from the sanitizers in
    an ASan build)."""
    proc.terminate()
    try:
        rc = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait(timeout=5)
    log = rig.log_tail(name, 100000)
    ok = rc == 0 and "Sanitizer" not in log and "runtime error" not in log
    print(f"{'ok  ' if ok else 'FAIL'} {name.replace('-', '_')}_exits_cleanly"
          f"{'' if ok else f' (exit {rc}): ' + log[-1500:]}", flush=True)
    return ok


class Tally:
    """What a suite's harness counted so far: its own checks and the cases'."""

    def __init__(self):
        self.passed = self.failed = 0

    def count(self, ok):
        """Counts one check whose line is printed elsewhere."""
        self.passed, self.failed = self.passed + bool(ok), self.failed + (not ok)

    def check(self, name, ok, detail=""):
        """Counts one check and prints its line (with `detail` if it failed)."""
        self.count(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}", flush=True)

    def add(self, passed, failed):
        self.passed, self.failed = self.passed + passed, self.failed + failed


def run_on_rig(tag, keep, body):
    """Runs body(rig, tally) on a new Rig named `tag`, then closes the rig
    whatever happened (kept with --keep) and checks it left nothing behind;
    an interrupt or an exception in body counts as one more failure. Returns
    the suite's exit status (nr.summarize)."""
    tally = Tally()
    rig = nr.Rig(tag)
    try:
        rig.unwind_on_signals()
        body(rig, tally)
    except KeyboardInterrupt:
        print("interrupted: cleaning up")
        tally.add(0, 1)
    except Exception as e:  # noqa: BLE001
        print(f"FAIL setup: {type(e).__name__}: {e}")
        tally.add(0, 1)
    finally:
        rig.close(keep_dir=keep)
    return nr.summarize(rig, keep, tally.passed, tally.failed)


def abox_run(abox, *args, ns=None, timeout=30):
    cmd = ([] if ns is None else ["ip", "netns", "exec", ns]) + [abox, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def self_signed(rig, name):
    key, crt = rig.path(f"{name}.self.key"), rig.path(f"{name}.self.pem")
    rig.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", crt, "-days", "2", "-subj", f"/CN={name}",
             "-addext", f"subjectAltName=DNS:{name}"], check=True)
    return crt, key


def setup(rig, abox):
    rig.build_internet()
    ca = rig.make_ca([API, BEARER, SELF])
    rig.start_nsd([f"api IN A {ADDRS[API]}", f"bearer IN A {ADDRS[BEARER]}", f"ws IN A {ADDRS[WS]}",
                   f"limited IN A {ADDRS[LIMITED]}", f"nobackoff IN A {ADDRS[NOBACKOFF]}", f"wrong IN A {ADDRS[WRONG]}",
                   f"untrusted IN A {ADDRS[UNTRUSTED]}", "rebind IN A 127.0.0.1", f"self IN A {nr.OUTSIDE_LINK}",
                   f"ns1 IN A {nr.ADDR['ns1']}"])
    logs = {k: rig.path(f"provider-{k}.jsonl") for k in ("api", "wrong", "untrusted", "self")}
    provider_script = os.path.join(HERE, "broker_fake_provider.py")
    # api, bearer, ws, limited and nobackoff share one provider (one
    # address), whose certificate names them all.
    both_crt, both_key = san_cert(rig, [API, BEARER, WS, LIMITED, NOBACKOFF])
    servers = [("api", ADDRS[API], both_crt, both_key),
               ("wrong", ADDRS[WRONG], *rig.ca[API]),          # a certificate for api, served as wrong
               ("untrusted", ADDRS[UNTRUSTED], *self_signed(rig, UNTRUSTED))]
    for which, addr, crt, key in servers:
        p = rig.spawn(f"provider-{which}", [sys.executable, provider_script, addr, "443", crt, key, logs[which]],
                      ns=rig.inet)
        rig.wait_for(f"provider {which}", lambda a=addr: listening_on(rig, rig.inet, a, 443), proc=p,
                     log=f"provider-{which}")
    # A provider of the broker's own host: in outside, on the veth's end.
    p = rig.spawn("provider-self", [sys.executable, provider_script, nr.OUTSIDE_LINK, "443", *rig.ca[SELF],
                                    logs["self"]], ns=rig.outside)
    rig.wait_for("provider self", lambda: listening_on(rig, rig.outside, nr.OUTSIDE_LINK, 443), proc=p,
                 log="provider-self")

    # The outside namespace resolves the provider names to the broker, as
    # the guest's DNS through abox-net would lead its flows to the broker.
    d = f"/etc/netns/{rig.outside}"
    if not os.path.isdir("/etc/netns"):
        os.makedirs("/etc/netns", exist_ok=True)
        rig.made_etc_netns = True
    os.makedirs(d)
    rig.etc_netns.append(d)
    with open(f"{d}/hosts", "w") as f:
        f.write("127.0.0.1 localhost\n" + "".join(f"127.0.0.1 {n}\n" for n in (API, BEARER, WS, LIMITED, NOBACKOFF,
                                                                               WRONG, UNTRUSTED, REBIND, SELF)))

    policy = rig.path("policy.toml")
    with open(policy, "w") as f:
        f.write(POLICY)
    creds = rig.path("credentials.toml")
    with open(creds, "w") as f:
        f.write(CREDENTIALS)
    state = rig.path("state")
    events = rig.path("events.jsonl")
    stats = rig.path("stats.json")
    return dict(ca_upstream=ca, logs=logs, policy=policy, creds=creds, state=state, events=events, stats=stats)


def san_cert(rig, names):
    key, csr, crt = rig.path("multi.key"), rig.path("multi.csr"), rig.path("multi.pem")
    rig.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN={names[0]}",
             "-addext", "subjectAltName=" + ",".join(f"DNS:{n}" for n in names),
             "-addext", "extendedKeyUsage=serverAuth"], check=True)
    rig.run(["openssl", "x509", "-req", "-in", csr, "-CA", rig.ca["ca"], "-CAkey", rig.path("ca.key"),
             "-CAcreateserial", "-days", "2", "-copy_extensions", "copy", "-out", crt], check=True)
    return crt, key


def sandbox_status(pid):
    """The lines of /proc/PID/status that say how a process is confined."""
    keys = ("NoNewPrivs", "Seccomp", "CapEff", "CapPrm", "CapBnd")
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    return {k: fields.get(k) for k in keys}


def listening_on(rig, ns, addr, port):
    out = rig.run(["ss", "-Hlnt", f"src {addr}:{port}"], ns=ns, timeout=5).stdout
    return bool(out.strip())


def credentials_checks(abox, s, rig):
    """The credentials file is refused when others may read it, or it is not
    a regular file the caller owns; the message names the problem."""
    results = []
    os.chmod(s["creds"], 0o644)
    r = abox_run(abox, "broker", "--policy", s["policy"], "--credentials", s["creds"], "--state", s["state"],
                 "--listen", "127.0.0.1:0")
    results.append(("credentials_readable_by_others_is_refused",
                    r.returncode == 3 and "chmod 600" in r.stderr, r.stderr.strip()))
    os.chmod(s["creds"], 0o600)
    link = rig.path("creds-link.toml")
    os.symlink(s["creds"], link)
    r = abox_run(abox, "broker", "--policy", s["policy"], "--credentials", link, "--state", s["state"],
                 "--listen", "127.0.0.1:0")
    results.append(("credentials_symlink_is_refused", r.returncode == 3 and "symlink" in r.stderr,
                    r.stderr.strip()))
    r = abox_run(abox, "broker", "--policy", s["policy"], "--credentials", s["creds"])
    results.append(("broker_usage_error_exits_2", r.returncode == 2 and "--state" in r.stderr, r.stderr.strip()))
    return results


def main(argv):
    if argv[:1] == ["--cases"]:
        return run_cases(argv[1], argv[2].split(",") if len(argv) > 2 and argv[2] else [])
    argv, keep, only = split_harness_flags(argv)
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    abox = os.path.abspath(argv[0])
    abox_net = os.path.abspath(argv[1]) if len(argv) == 2 else None
    why_not = missing_prerequisite("broker_e2e", ("ip", "nsd", "curl", "node", "openssl", "ss", "dig"))
    if why_not:
        print(why_not)
        return 1
    return run_on_rig("bt", keep, lambda rig, tally: run_suite(rig, tally, abox, abox_net, only))


def run_suite(rig, tally, abox, abox_net, only):
    """The harness's own checks, then the cases (in the outside namespace)."""
    s = setup(rig, abox)
    os.chmod(s["creds"], 0o600)
    for name, ok, detail in credentials_checks(abox, s, rig):
        tally.check(name, ok, detail)

    # The CA and the nonces, as the guest image would get them.
    guest_ca = guest_ca_file(rig, abox, s["state"], INSTANCE)
    mode = os.stat(s["state"]).st_mode & 0o777
    key_mode = os.stat(os.path.join(s["state"], "ca.key")).st_mode & 0o777
    ok = mode == 0o700 and key_mode == 0o600
    tally.check(f"state_folder_is_private (dir {mode:o}, key {key_mode:o})", ok)
    nonces = nonce_list(abox, s["policy"], s["state"])
    r2 = abox_run(abox, "broker", "nonces", "--policy", s["policy"], "--state", s["state"])
    ok = r2.stdout.splitlines()[0] == f"PROVIDER_API_KEY={nonces[0]['nonce']}" and KEY not in r2.stdout
    tally.check("nonces_printed_per_binding", ok)

    common = broker_args(s, INSTANCE)
    tcp = start_broker(rig, abox, "broker", [*common, "--listen", "127.0.0.1:443", "--stats-file", s["stats"]])
    unix_socket = rig.path("broker.sock")
    ux = start_broker(rig, abox, "broker-unix", [*common, "--listen", f"unix:{unix_socket}"])
    tally.check("unix_socket_is_private", (os.stat(unix_socket).st_mode & 0o077) == 0)
    # Started as root, yet confined before it said it listens (broker/sandbox.h).
    for name, proc in (("broker", tcp), ("broker_unix", ux)):
        status = sandbox_status(proc.pid)
        tally.check(f"{name}_is_sandboxed (NoNewPrivs 1, Seccomp 2, CapEff 0)",
                    status == {"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000",
                               "CapPrm": "0000000000000000", "CapBnd": "0000000000000000"}, str(status))
    r = abox_run(abox, "broker", *common, "--listen", f"unix:{unix_socket}", ns=rig.outside)
    tally.check("live_unix_socket_is_not_taken_over",
                r.returncode == 3 and "in use" in r.stderr and os.path.exists(unix_socket), r.stderr)
    guest_ns = ""
    if abox_net:
        rig.add_guest()
        # The cases run in outside, whose hosts file points the names at
        # the broker; the guest gets its own (names come from abox-net).
        with open(f"/etc/netns/{rig.guest}/hosts", "w") as f:
            f.write("127.0.0.1 localhost\n")
        rig.start_abox_net(abox_net, POLICY, "--instance", INSTANCE, "--broker", unix_socket)
        guest_ns = rig.guest

    cfg = dict(ca=guest_ca, logs=s["logs"], guest_ns=guest_ns, events_file=s["events"], stats_file=s["stats"],
               broker_pid=tcp.pid, unix_socket=unix_socket, nonce_list=nonces,
               broker_logs={n: rig.path(f"{n}.log") for n in ("broker", "broker-unix")})
    tally.add(*run_cases_outside(rig, __file__, cfg, only))
    # Stop the brokers ourselves (by pid) and read their logs.
    for name, proc in (("broker", tcp), ("broker-unix", ux)):
        tally.count(stop_broker(rig, name, proc))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
