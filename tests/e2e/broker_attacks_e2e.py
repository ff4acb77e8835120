#!/usr/bin/env python3
"""The broker's attack shapes, one case each (THREATS.md, "Broker"), against
the real `abox broker` process and real fake providers that record every
request they receive.

The rig, the providers (tests/e2e/broker_fake_provider.py), nsd, the policy
and the credentials are broker_e2e.py's (imported, not copied); this file
adds one case per attack shape, each asserting three things:
  1. what the guest got: the status and the exact reason in `abox-refused`
     (or, for upstream shapes, what came back);
  2. what the provider recorded: nothing for a refused request, and never
     the key where it does not belong;
  3. that nothing legitimate broke: a well-formed request right after gets
     200 and the provider sees the real key in x-api-key.
broker_e2e.py keeps the legitimate uses (curl, http.client, Node's fetch on
SSE, accounting, the unix hand-off); some of its grouped refusal checks
overlap with the single-shape cases here on purpose.

A nonce "of another instance" is a real one: `abox broker nonces` on a
second state folder (a second instance secret) for the same policy.

Usage: broker_attacks_e2e.py PATH/TO/abox [--keep] [--only WORD,...]
Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded; every process started is stopped by pid at the end.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import broker_e2e as be  # noqa: E402
import broker_fake_provider as provider  # noqa: E402
import netns_rig as nr  # noqa: E402
from broker_e2e import API, BEARER, KEY, KEY2, UNTRUSTED, WRONG  # noqa: E402

INSTANCE = "attacks"


# ---------------------------------------------------------------------------
# Helpers (run inside the outside namespace).
# ---------------------------------------------------------------------------

def legit_still_works(env):
    """A well-formed request right after an attack: 200, and the provider got
    the real key in x-api-key and no nonce anywhere."""
    before = env.provider_log()
    resp = be.raw_exchange(env, be.request(env))
    st, _ = be.status_and_headers(resp)
    assert st == 200, f"the legitimate request after the attack got {st}: {resp[:200]!r}"
    got = env.provider_log()[len(before):]
    assert len(got) == 1, got
    assert provider.record_headers(got[0]).get("x-api-key") == KEY, got[0]
    assert "abox-nonce-" not in json.dumps(got[0]).lower(), got[0]
    assert KEY.encode() not in resp


def refused(env, raw, status, reason, sni=API, which="api"):
    """Sends `raw` over TLS with `sni`: the guest gets `status` with `reason`,
    the provider sees nothing, and a legitimate request still works."""
    before = env.provider_log(which)
    resp = be.raw_exchange(env, raw, sni=sni)
    be.assert_refused(env, resp, status, reason)
    assert KEY.encode() not in resp and KEY2.encode() not in resp
    be.nothing_reached_provider(env, before, which)
    legit_still_works(env)


def head(method, target, fields, body=b""):
    """Raw request bytes: exactly the fields given, in order."""
    text = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields) + "\r\n"
    return text.encode() + body


def base_fields(env, extra=(), nonce_header="x-api-key", nonce=None, host=API):
    fields = [("Host", host)]
    if nonce_header:
        fields.append((nonce_header, nonce if nonce is not None else env.nonces[API]))
    return fields + list(extra)


CASES = []


def case(fn):
    CASES.append(fn)
    return fn


# ---- Host header different from SNI; absolute-form; CONNECT -----------------------

@case
def host_header_names_another_host(env):
    refused(env, be.request(env, host="evil.example.test"), 403, "host_mismatch")


@case
def host_header_names_another_binding(env):
    # Both names have bindings on this broker: the Host must still be the SNI.
    refused(env, be.request(env, host=BEARER), 403, "host_mismatch")


@case
def host_header_with_another_port(env):
    refused(env, be.request(env, host=f"{API}:8443"), 403, "host_mismatch")


@case
def absolute_form_uri_to_another_host(env):
    raw = head("POST", "https://evil.example.test/v1/messages",
               base_fields(env, [("Content-Length", "2")]), b"{}")
    refused(env, raw, 400, "absolute_form")


@case
def absolute_form_uri_to_the_same_host(env):
    raw = head("POST", f"https://{API}/v1/messages", base_fields(env, [("Content-Length", "2")]), b"{}")
    refused(env, raw, 400, "absolute_form")


@case
def authority_form_uri(env):
    refused(env, head("OPTIONS", "evil.example.test:443", base_fields(env)), 400, "authority_form")


@case
def connect_method(env):
    raw = head("CONNECT", "evil.example.test:443", [("Host", "evil.example.test:443")])
    refused(env, raw, 400, "connect_method")


# ---- request smuggling shapes ----------------------------------------------------------

@case
def content_length_and_transfer_encoding(env):
    raw = head("POST", "/v1/messages",
               base_fields(env, [("Content-Length", "5"), ("Transfer-Encoding", "chunked")]), b"0\r\n\r\n")
    refused(env, raw, 400, "length_and_chunked")


@case
def transfer_encoding_and_content_length(env):
    raw = head("POST", "/v1/messages",
               base_fields(env, [("Transfer-Encoding", "chunked"), ("Content-Length", "5")]), b"0\r\n\r\n")
    refused(env, raw, 400, "length_and_chunked")


@case
def duplicate_content_length_equal_values(env):
    raw = head("POST", "/v1/messages", base_fields(env, [("Content-Length", "2"), ("Content-Length", "2")]), b"{}")
    refused(env, raw, 400, "duplicate_content_length")


@case
def duplicate_content_length_as_a_list(env):
    raw = head("POST", "/v1/messages", base_fields(env, [("Content-Length", "2, 2")]), b"{}")
    refused(env, raw, 400, "duplicate_content_length")


@case
def transfer_encoding_other_than_chunked(env):
    raw = head("POST", "/v1/messages", base_fields(env, [("Transfer-Encoding", "gzip, chunked")]), b"0\r\n\r\n")
    refused(env, raw, 400, "transfer_encoding")


@case
def obs_fold(env):
    raw = head("POST", "/v1/messages",
               base_fields(env, [("X-Folded", "a\r\n b"), ("Content-Length", "2")]), b"{}")
    refused(env, raw, 400, "obs_fold")


@case
def bare_lf_in_the_head(env):
    raw = (f"POST /v1/messages HTTP/1.1\r\nHost: {API}\nx-api-key: {env.nonces[API]}\r\n"
           "Content-Length: 2\r\n\r\n{}").encode()
    refused(env, raw, 400, "line_ending")


@case
def bare_lf_after_a_chunk(env):
    raw = head("POST", "/v1/messages", base_fields(env, [("Transfer-Encoding", "chunked")]),
               b"2\r\n{}\n0\r\n\r\n")
    refused(env, raw, 400, "chunk_crlf")


@case
def invalid_chunk_sizes(env):
    # Each is its own request on its own connection; all must be refused the
    # same way, and none may reach the provider.
    for size in (b"zz", b"-2", b"0x2", b" 2", b"2 ", b"+2", b"", b"1" + b"0" * 16):
        raw = head("POST", "/v1/messages", base_fields(env, [("Transfer-Encoding", "chunked")]),
                   size + b"\r\n{}\r\n0\r\n\r\n")
        try:
            refused(env, raw, 400, "chunk_size")
        except AssertionError as e:
            raise AssertionError(f"chunk size {size!r}: {e}") from None


@case
def chunk_size_over_the_body_limit(env):
    raw = head("POST", "/v1/messages", base_fields(env, [("Transfer-Encoding", "chunked")]),
               b"ffffffffffffffff\r\n{}")
    refused(env, raw, 400, "body_too_large")


@case
def trailer_fields_after_the_last_chunk(env):
    raw = head("POST", "/v1/messages", base_fields(env, [("Transfer-Encoding", "chunked")]),
               b"2\r\n{}\r\n0\r\nx-api-key: " + env.nonces[API].encode() + b"\r\n\r\n")
    refused(env, raw, 400, "trailer")


@case
def request_hidden_in_a_content_length_body(env):
    # The body holds a whole second request: the provider must see one
    # request, with those bytes as its body.
    hidden = f"GET /v1/admin HTTP/1.1\r\nHost: {API}\r\n\r\n".encode()
    before = env.provider_log()
    raw = head("POST", "/v1/messages", base_fields(env, [("Content-Length", str(len(hidden))),
                                                         ("Connection", "close")]), hidden)
    resp = be.raw_exchange(env, raw)
    assert be.status_and_headers(resp)[0] == 200, resp[:200]
    assert resp.count(b"HTTP/1.1 ") == 1, resp
    got = env.provider_log()[len(before):]
    assert [g["path"] for g in got] == ["/v1/messages"], got
    assert got[0]["body"].encode("latin-1") == hidden, got[0]
    legit_still_works(env)


@case
def request_pipelined_after_a_chunked_body_meets_the_gate_again(env):
    # A well-formed chunked request, then in the same write a second request
    # without a nonce: the second is the guest's next request, refused on its
    # own; the provider sees only the first.
    before = env.provider_log()
    first = head("POST", "/v1/messages", base_fields(env, [("Transfer-Encoding", "chunked")]),
                 b"2\r\n{}\r\n0\r\n\r\n")
    second = head("POST", "/v1/messages", [("Host", API), ("Content-Length", "2")], b"{}")
    resp = be.raw_exchange(env, first + second)
    parts = resp.split(b"HTTP/1.1 ")
    assert len(parts) == 3, resp
    assert parts[1].startswith(b"200 "), resp[:300]
    st, h = be.status_and_headers(b"HTTP/1.1 " + parts[2])
    assert st == 403 and h.get("abox-refused") == "nonce_missing", (st, h)
    got = env.provider_log()[len(before):]
    assert len(got) == 1 and got[0]["body"] == "{}", got
    legit_still_works(env)


@case
def path_outside_the_prefix_through_dot_segments(env):
    # /v1/ is the binding's prefix; each of these would reach /admin on a
    # server that normalizes it.
    for path, reason in (("/v1/../admin", "path_dot_segment"), ("/v1/..;/admin", "path_dot_segment"),
                         ("/v1/%2e%2e/admin", "path_encoded_separator"),
                         ("/v1%2f..%2fadmin", "path_encoded_separator")):
        try:
            refused(env, be.request(env, path=path), 400, reason)
        except AssertionError as e:
            raise AssertionError(f"{path}: {e}") from None


@case
def oversize_head(env):
    refused(env, be.request(env, headers=[("X-Pad", "a" * 5000)]), 400, "head_too_large")


# ---- nonces in the wrong place ------------------------------------------------------------

@case
def nonce_of_another_instance(env):
    assert env.foreign_nonce != env.nonces[API] and env.foreign_nonce.startswith("abox-nonce-")
    refused(env, be.request(env, nonce=env.foreign_nonce), 403, "nonce_unknown")


@case
def nonce_of_another_binding(env):
    refused(env, be.request(env, nonce=env.nonces[BEARER]), 403, "nonce_other_binding")


@case
def nonce_in_the_wrong_header(env):
    # Neither where the binding says (x-api-key) nor in authorization:
    # Bearer, the two places a nonce is taken: that decides first.
    raw = be.request(env, nonce_header="proxy-authorization", nonce=f"Bearer {env.nonces[API]}")
    refused(env, raw, 403, "nonce_missing")


@case
def nonce_in_both_places(env):
    # x-api-key and authorization: Bearer at once: the nonce is taken from
    # one place only.
    raw = be.request(env, headers=[("Authorization", f"Bearer {env.nonces[API]}")])
    refused(env, raw, 403, "nonce_duplicate")


@case
def nonce_in_authorization_without_bearer(env):
    raw = be.request(env, nonce_header="authorization", nonce=env.nonces[API])
    refused(env, raw, 403, "nonce_malformed")


@case
def nonce_as_authorization_bearer_gets_the_key_in_the_bindings_header(env):
    # Today's SDKs send a key as authorization: Bearer; on an x-api-key
    # binding the provider gets x-api-key: KEY, and no authorization.
    before = env.provider_log()
    resp = be.raw_exchange(env, be.request(env, nonce_header="Authorization", nonce=f"bearer {env.nonces[API]}"))
    assert be.status_and_headers(resp)[0] == 200, resp[:200]
    got = env.provider_log()[len(before):]
    assert len(got) == 1, got
    names = provider.record_header_names(got[0])
    assert names.count("x-api-key") == 1 and provider.record_headers(got[0])["x-api-key"] == KEY, got[0]
    assert "authorization" not in names, names
    assert "abox-nonce-" not in json.dumps(got[0]).lower(), got[0]


@case
def nonce_in_a_second_header(env):
    refused(env, be.request(env, headers=[("X-Extra", env.nonces[API])]), 403, "nonce_in_other_header")


@case
def nonce_in_a_cookie(env):
    raw = be.request(env, headers=[("Cookie", f"session={env.nonces[API]}")])
    refused(env, raw, 403, "nonce_in_other_header")


@case
def nonce_twice_in_the_bindings_header(env):
    raw = be.request(env, headers=[("X-API-KEY", env.nonces[API])])
    refused(env, raw, 403, "nonce_duplicate")


@case
def nonce_in_the_url_query(env):
    refused(env, be.request(env, path=f"/v1/messages?key={env.nonces[API]}"), 403, "nonce_in_target")


@case
def nonce_in_the_url_path(env):
    refused(env, be.request(env, path=f"/v1/{env.nonces[API]}/messages"), 403, "nonce_in_target")


@case
def nonce_percent_encoded_in_the_url(env):
    encoded = "".join(f"%{ord(c):02X}" for c in env.nonces[API][:11]) + env.nonces[API][11:]
    refused(env, be.request(env, path=f"/v1/messages?key={encoded}"), 403, "nonce_in_target")


@case
def nonce_in_the_body(env):
    body = json.dumps({"model": "m", "api_key": env.nonces[API]}).encode()
    refused(env, be.request(env, body=body), 403, "nonce_in_body")


@case
def nonce_in_the_body_split_across_chunks(env):
    n = env.nonces[API].encode()
    first, second = b'{"k":"' + n[:6], n[6:] + b'"}'
    body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(first), first, len(second), second)
    raw = head("POST", "/v1/messages", base_fields(env, [("Transfer-Encoding", "chunked")]), body)
    refused(env, raw, 403, "nonce_in_body")


# ---- what the upstream does -----------------------------------------------------------------

@case
def upstream_redirect_is_returned_not_followed(env):
    before = env.provider_log()
    resp = be.raw_exchange(env, be.request(env, method="GET", path="/v1/redirect", body=None))
    st, h = be.status_and_headers(resp)
    assert st == 302, resp[:300]
    assert h.get("location") == "https://elsewhere.example.test/v1/messages", h
    got = env.provider_log()[len(before):]
    assert [g["path"] for g in got] == ["/v1/redirect"], got
    assert KEY.encode() not in resp
    legit_still_works(env)


@case
def upstream_certificate_for_another_name(env):
    raw = be.request(env, host=WRONG, nonce=env.nonces[WRONG])
    refused(env, raw, 502, "upstream_tls_unverified", sni=WRONG, which="wrong")


@case
def upstream_certificate_from_an_unknown_ca(env):
    raw = be.request(env, host=UNTRUSTED, nonce=env.nonces[UNTRUSTED])
    refused(env, raw, 502, "upstream_tls_unverified", sni=UNTRUSTED, which="untrusted")


# ---- the key never goes back to the guest ------------------------------------------------------

@case
def key_echoed_in_the_response_body_is_scrubbed(env):
    resp = be.raw_exchange(env, be.request(env, method="GET", path="/v1/echo", body=None))
    assert be.status_and_headers(resp)[0] == 200, resp[:200]
    assert KEY.encode() not in resp
    # The provider did get the key (so the echo really carried it).
    assert provider.record_headers(env.provider_log()[-1]).get("x-api-key") == KEY


@case
def key_echoed_in_response_headers_is_scrubbed(env):
    resp = be.raw_exchange(env, be.request(env, method="GET", path="/v1/echo-head", body=None))
    assert be.status_and_headers(resp)[0] == 200, resp[:200]
    assert KEY.encode() not in resp


@case
def key_echoed_through_a_bearer_binding_is_scrubbed(env):
    raw = head("POST", "/v1/echo", [("Host", BEARER), ("Authorization", f"Bearer {env.nonces[BEARER]}"),
                                    ("Content-Length", "2"), ("Connection", "close")], b"{}")
    resp = be.raw_exchange(env, raw, sni=BEARER)
    assert be.status_and_headers(resp)[0] == 200, resp[:200]
    assert KEY2.encode() not in resp
    assert provider.record_headers(env.provider_log()[-1]).get("authorization") == f"Bearer {KEY2}"


@case
def guest_credentials_in_any_spelling_never_reach_the_provider(env):
    before = env.provider_log()
    raw = be.request(env, headers=[("AUTHORIZATION", "Bearer guest-token"), ("proxy-Authorization", "Basic eA=="),
                                   ("COOKIE", "a=b"), ("cookie", "c=d")])
    resp = be.raw_exchange(env, raw)
    assert be.status_and_headers(resp)[0] == 200, resp[:200]
    got = env.provider_log()[len(before):]
    assert len(got) == 1, got
    names = provider.record_header_names(got[0])
    for dropped in ("authorization", "proxy-authorization", "cookie"):
        assert dropped not in names, got[0]["headers"]
    assert names.count("x-api-key") == 1 and provider.record_headers(got[0])["x-api-key"] == KEY


@case
def key_in_no_event_log_or_stats(env):
    # Last: every case above has written its events by now.
    for path in (env.events_file, env.broker_log, env.stats_file):
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        assert KEY.encode() not in data and KEY2.encode() not in data, f"a key in {path}"
    reasons = {e.get("reason") for e in env.events()}
    for r in ("host_mismatch", "nonce_unknown", "nonce_in_body", "length_and_chunked", "upstream_tls_unverified"):
        assert r in reasons, f"no event with reason {r}: {sorted(x for x in reasons if x)}"


# ---------------------------------------------------------------------------
# The harness (root namespace): broker_e2e.py's rig, providers and helpers.
# ---------------------------------------------------------------------------

def main(argv):
    if argv[:1] == ["--cases"]:
        return be.run_cases(argv[1], argv[2].split(",") if len(argv) > 2 and argv[2] else [], CASES)
    argv, keep, only = be.split_harness_flags(argv)
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    abox = os.path.abspath(argv[0])
    why_not = be.missing_prerequisite("broker_attacks_e2e", ("ip", "nsd", "openssl", "ss"))
    if why_not:
        print(why_not)
        return 1
    return be.run_on_rig("ba", keep, lambda rig, tally: run_suite(rig, tally, abox, only))


def run_suite(rig, tally, abox, only):
    """The broker and its nonces, then the cases (in the outside namespace)."""
    s = be.setup(rig, abox)
    os.chmod(s["creds"], 0o600)
    guest_ca = be.guest_ca_file(rig, abox, s["state"], INSTANCE)
    nonce_list = be.nonce_list(abox, s["policy"], s["state"])
    # Another instance: its own state folder, so its own secret.
    other = be.nonce_list(abox, s["policy"], rig.path("other-instance-state"))
    foreign = {n["name"]: n["nonce"] for n in other}[API]

    broker = be.start_broker(rig, abox, "broker", [*be.broker_args(s, INSTANCE), "--listen", "127.0.0.1:443",
                                                   "--stats-file", s["stats"]])
    cfg = dict(ca=guest_ca, logs=s["logs"], events_file=s["events"], stats_file=s["stats"],
               nonce_list=nonce_list, foreign_nonce=foreign, broker_log=rig.path("broker.log"))
    tally.add(*be.run_cases_outside(rig, __file__, cfg, only))
    tally.check("broker_survived_every_case", broker.poll() is None)
    tally.count(be.stop_broker(rig, "broker", broker))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
