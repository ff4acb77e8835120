#!/usr/bin/env python3
"""A fake model provider for the broker's end-to-end test: a real TLS server
(python's ssl, with a certificate from the test's own CA) that records every
request it receives, one JSON line each (method, path, headers, body), so the
test can assert what reached the provider and what did not.

Routes (any method):
  /v1/messages   200 with a small JSON body; with "stream": true in a JSON
                 body, an Anthropic-style SSE stream (message_start ...
                 message_stop) whose last text delta echoes the key received,
                 a chunk boundary in the middle of it (the official SDKs'
                 streaming path, and the scrubber on a split key)
  /v1/chat/completions  an OpenAI-style chat completion; streamed (SSE,
                 "data: [DONE]" last, the key echoed the same way) with
                 "stream": true
  /v1/echo       200, the request's headers echoed back in the body (the
                 reflection case: a provider that repeats what it was sent)
  /v1/echo-head  200, the request's headers echoed back as response headers
  /v1/echo-gzip  200, the /v1/echo body gzip-compressed (Content-Encoding:
                 gzip) whatever the request's Accept-Encoding said: a key
                 inside gzip is out of a scrubber's sight, not a client's
  /v1/echo-te-gzip  the same as a transfer coding: "Transfer-Encoding:
                 gzip, chunked"
  /v1/echo-chunked?at=K[&ext=1][&onebyte=1][&split=S]
                 200, the /v1/echo body sent chunked, with a chunk boundary K
                 bytes into the key it received (x-api-key, or authorization
                 after "Bearer "): the framed bytes never hold the key, a
                 client's decoding does. ext=1: every chunk-size line carries
                 an extension; onebyte=1: every byte its own chunk; split=S:
                 the bytes are written in two TLS records, 20 ms apart, the
                 first ending S bytes into the key
  /v1/sse        an SSE stream: event "one", then it waits (at most 10 s) for
                 the file <log>.go before event "two" (or "late" when the file
                 never came): a client that sees "one" before it creates the
                 file proves the broker streams
  /v1/trailer    200, a chunked body followed by trailer fields (RFC 9112
                 7.1.2): a checksum, and fields a head may not carry to the
                 guest (Set-Cookie, Content-Length, Connection), one holding
                 the x-api-key it received
  /v1/redirect   302 to another host (the broker must not follow it)
  /v1/ratelimit  429 with Retry-After: 17
  /v1/error      503 with Retry-After: 5
  /v1/ratelimit-once/TAG?after=N  429 with Retry-After: N (3 without ?after)
                 the first time this path is asked for, 200 every time after
  /v1/close-after  200, then the connection is closed without a word (no
                 "Connection: close"): a provider dropping a kept connection
  /v1/drop-next  200, the connection kept; the next request on it is read,
                 recorded with "dropped": true, and the connection closed
                 without an answer: a provider's idle close crossing the
                 client's next request, made certain
  /v1/ws         with "Upgrade: echo": 101, then the x-api-key it received
                 as a first line (a provider that leaks it), then an echo of
                 every line until EOF; with "Upgrade: websocket": 101,
                 accepting the Sec-WebSocket-Extensions offered (or naming
                 permessage-deflate whatever was offered, with
                 ?deflate=always), then a text message echoing the key it
                 received in two fragments split inside the key with a ping
                 between them, a close frame whose reason holds the key, and
                 the close
Usage: broker_fake_provider.py ADDR PORT CERT KEY LOG

The e2e suites import this module to read the log back (read_records,
record_headers, record_header_names), so the record's format is written and
read in one place.
"""
import base64
import gzip
import hashlib
import http.server
import json
import os
import socketserver
import ssl
import sys
import threading
import time

LOCK = threading.Lock()
ONCE_SEEN = set()  # the /v1/ratelimit-once/ paths answered 429 already


# ---- the log, read back by the suites ------------------------------------------

def read_records(log_path):
    """Every request the provider logging to `log_path` recorded, oldest
    first ([] before its first request: the file does not exist yet)."""
    if not os.path.exists(log_path):
        return []
    with open(log_path) as f:
        return [json.loads(line) for line in f if line.strip()]


def record_headers(record):
    """A recorded request's headers by lower-case name (a repeated one: its
    last value)."""
    return {k.lower(): v for k, v in record["headers"]}


def record_header_names(record):
    """A recorded request's header names, lower-case, in order, repeats kept."""
    return [k.lower() for k, _ in record["headers"]]


# ---- the server ------------------------------------------------------------------


def ws_frame(opcode, payload, fin=True):
    """One unmasked WebSocket frame, as a server sends it."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + n.to_bytes(2, "big")
    else:
        head += bytes([127]) + n.to_bytes(8, "big")
    return head + payload


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _record(self, body, dropped=False):
        entry = {"method": self.command, "path": self.path,
                 "headers": [[k, v] for k, v in self.headers.items()],
                 "body": body.decode("latin-1")}
        if dropped:
            entry["dropped"] = True
        with LOCK, open(self.server.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def _send(self, status, body, ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        body = self._read_body()
        if getattr(self, "drop_next", False):
            self._record(body, dropped=True)
            self.close_connection = True
            return
        self._record(body)
        path = self.path.split("?")[0]
        if path == "/v1/echo":
            text = "".join(f"{k}: {v}\n" for k, v in self.headers.items()).encode()
            self._send(200, text, "text/plain")
        elif path in ("/v1/messages", "/v1/chat/completions") and self._wants_stream(body):
            self._sdk_stream(path)
        elif path == "/v1/chat/completions":
            self._send(200, json.dumps({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "abox-test",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode())
        elif path == "/v1/echo-gzip":
            text = "".join(f"{k}: {v}\n" for k, v in self.headers.items()).encode()
            self._send(200, gzip.compress(text), "text/plain", [("Content-Encoding", "gzip")])
        elif path == "/v1/echo-te-gzip":
            text = "".join(f"{k}: {v}\n" for k, v in self.headers.items()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "gzip, chunked")
            self.end_headers()
            self._chunk(gzip.compress(text))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        elif path == "/v1/echo-chunked":
            self._echo_chunked()
        elif path == "/v1/echo-head":
            extra = [(f"x-echo-{k}", v) for k, v in self.headers.items()]
            self._send(200, b"echoed in headers\n", "text/plain", extra)
        elif path == "/v1/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._chunk(b"event: message\ndata: one\n\n")
            flag = self.server.log_path + ".go"
            second = b"data: late\n\n"
            for _ in range(200):  # at most 10 s
                if os.path.exists(flag):
                    second = b"data: two\n\n"
                    break
                time.sleep(0.05)
            self._chunk(second)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        elif path == "/v1/trailer":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "X-Checksum")
            self.end_headers()
            self._chunk(b'{"id":"msg_t",')
            self._chunk(b'"text":"after the trailer"}')
            key = self.headers.get("x-api-key", "")
            self.wfile.write(b"0\r\nX-Checksum: 5d41402a\r\nSet-Cookie: stolen=1\r\nContent-Length: 9999\r\n"
                             b"Connection: close\r\nX-Key: %s\r\n\r\n" % key.encode())
            self.wfile.flush()
        elif path == "/v1/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            accept = base64.b64encode(hashlib.sha1(
                self.headers.get("Sec-WebSocket-Key", "").encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            offered = self.headers.get("Sec-WebSocket-Extensions")
            extensions = "permessage-deflate" if "deflate=always" in self.path else offered
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept.decode())
            if extensions:
                self.send_header("Sec-WebSocket-Extensions", extensions)
            self.end_headers()
            key = self._received_key().encode()
            message = b'{"echo":"x-api-key: ' + key + b'"}'
            cut = message.find(key) + len(key) // 2
            self.wfile.write(ws_frame(0x01, message[:cut], fin=False) + ws_frame(0x09, b"ping") +
                             ws_frame(0x00, message[cut:]) + ws_frame(0x08, b"\x03\xe8" + key))
            self.wfile.flush()
            self.close_connection = True
        elif path == "/v1/ws" and self.headers.get("Upgrade", "").lower() == "echo":
            self.send_response(101)
            self.send_header("Upgrade", "echo")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.write(b"key=%s\n" % self.headers.get("x-api-key", "").encode())
            self.wfile.flush()
            for _ in range(1000):
                line = self.rfile.readline(65536)
                if not line:
                    break
                self.wfile.write(line)
                self.wfile.flush()
            self.close_connection = True
        elif path == "/v1/close-after":
            self._send(200, b'{"closing":true}')
            self.close_connection = True
        elif path == "/v1/drop-next":
            self._send(200, b'{"next":"dropped"}')
            self.drop_next = True
        elif path == "/v1/redirect":
            self._send(302, b"", "text/plain", [("Location", "https://elsewhere.example.test/v1/messages")])
        elif path == "/v1/ratelimit":
            self._send(429, b'{"error":"rate_limited"}', extra=[("Retry-After", "17")])
        elif path == "/v1/error":
            self._send(503, b'{"error":"overloaded"}', extra=[("Retry-After", "5")])
        elif path.startswith("/v1/ratelimit-once/"):
            with LOCK:
                first = path not in ONCE_SEEN
                ONCE_SEEN.add(path)
            if first:
                after = self.path.split("after=", 1)[1] if "after=" in self.path else "3"
                self._send(429, b'{"error":"rate_limited","by":"provider"}', extra=[("Retry-After", after)])
            else:
                self._send(200, b'{"id":"msg_2","type":"message","content":[{"type":"text","text":"again"}]}')
        else:
            self._send(200, b'{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}]}')

    @staticmethod
    def _wants_stream(body):
        try:
            return json.loads(body or b"{}").get("stream") is True
        except (ValueError, AttributeError):
            return False

    def _received_key(self):
        return self.headers.get("x-api-key") or self.headers.get("authorization", "").removeprefix("Bearer ")

    def _sdk_stream(self, path):
        """The SSE stream an SDK's streaming call reads, one event per chunk;
        the last text delta echoes the key, its chunk split inside it."""
        key = self._received_key()
        if path == "/v1/messages":
            def ev(kind, data):
                return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

            def delta(text):
                return ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": text}})
            events = [
                ev("message_start", {"type": "message_start", "message": {
                    "id": "msg_s", "type": "message", "role": "assistant", "content": [], "model": "abox-test",
                    "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
                ev("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
                delta("Hello"), delta(" world"), delta(f" key={key}"),
                ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                                        "stop_sequence": None},
                                     "usage": {"output_tokens": 3}}),
                ev("message_stop", {"type": "message_stop"}),
            ]
        else:
            def chunk(delta, finish=None):
                data = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "abox-test",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                return f"data: {json.dumps(data)}\n\n".encode()
            events = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hello"}),
                      chunk({"content": " world"}), chunk({"content": f" key={key}"}), chunk({}, "stop"),
                      b"data: [DONE]\n\n"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            at = event.find(key.encode()) if key else -1
            if at >= 0:  # split inside the key: the broker must scrub the decoded stream
                self._chunk(event[:at + len(key) // 2])
                self._chunk(event[at + len(key) // 2:])
            else:
                self._chunk(event)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _echo_chunked(self):
        query = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if "=" in p)
        text = "".join(f"{k}: {v}\n" for k, v in self.headers.items()).encode()
        key = self._received_key()
        key_at = text.find(key.encode()) if key else -1
        at = key_at + int(query.get("at", "1")) if key_at >= 0 else len(text) // 2
        cuts = list(range(1, len(text))) if query.get("onebyte") == "1" else [at]
        ext = b";abox-test=\"a;b\";x" if query.get("ext") == "1" else b""
        split = key_at + int(query["split"]) if "split" in query and key_at >= 0 else None
        wire, frm, split_at = b"", 0, None
        for cut in cuts + [len(text)]:
            wire += b"%x%s\r\n" % (cut - frm, ext)
            if split is not None and frm <= split < cut:
                split_at = len(wire) + split - frm
            wire += text[frm:cut] + b"\r\n"
            frm = cut
        wire += b"0%s\r\n\r\n" % ext
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if split_at is not None:
            self.wfile.write(wire[:split_at])
            self.wfile.flush()
            time.sleep(0.02)  # the broker reads the first record on its own
            wire = wire[split_at:]
        self.wfile.write(wire)
        self.wfile.flush()

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _handle


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    addr, port, cert, key, log = sys.argv[1:6]
    srv = Server((addr, int(port)), Handler)
    srv.log_path = log
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
