#!/usr/bin/env python3
"""guest_protocol: the guest control channel of docs/control-protocol.md in
Python, written from the document (hmac and hashlib, nothing of ours): an
oracle independent of guest/protocol/ for the end-to-end tests, on either
side of the channel.

- Frames: FrameWriter and FrameReader (u32be length, u8 type, u64be seq,
  payload, HMAC-SHA256 over dir || length || type || seq || payload; 32 zero
  bytes before the key; one sequence per direction).
- Messages: encode_* and decode_* for every message of both directions, each
  decoder as strict as the document: every field present, every cap held,
  nothing left over (ProtocolError otherwise).
- Command sessions (version 3): every message of a command's life starts
  with its u32 session id (0 the main command, 1 and up the execs).
- HostChannel: the host's end over a connected stream socket, with bounded
  waits; run_command() drives go -> started -> output/stdin -> exited with
  the credits of the document; copy_in() sends a tar stream and waits for
  copy_in_done; copy_out() takes a tar stream under the copy credit;
  open_exec() and pump() drive exec sessions beside the main command, each
  under its own credit.
"""
import hashlib
import hmac
import os
import select
import struct
import time

PROTOCOL_VERSION = 3
MAX_PAYLOAD = 64 * 1024
SESSION_ID_BYTES = 4
MAX_STREAM = MAX_PAYLOAD - SESSION_ID_BYTES  # the bytes of one stdout, stderr or stdin frame
MAIN_SESSION = 0
MAC_BYTES = 32
KEY_BYTES = 32
MIN_LENGTH = 1 + 8 + MAC_BYTES
MAX_LENGTH = 1 + 8 + MAX_PAYLOAD + MAC_BYTES
GUEST_TO_HOST, HOST_TO_GUEST = b"G", b"H"

# Guest to host.
HELLO, SELFTEST_REPORT, STARTED, STDOUT, STDERR, EXITED, LOG, STDIN_CREDIT, START_FAILED = 1, 2, 3, 4, 5, 6, 7, 8, 9
COPY_IN_DONE, COPY_OUT_DATA, COPY_OUT_DONE = 10, 11, 12
GUEST_NAMES = {HELLO: "hello", SELFTEST_REPORT: "selftest_report", STARTED: "started", STDOUT: "stdout",
               STDERR: "stderr", EXITED: "exited", LOG: "log", STDIN_CREDIT: "stdin_credit",
               START_FAILED: "start_failed", COPY_IN_DONE: "copy_in_done", COPY_OUT_DATA: "copy_out_data",
               COPY_OUT_DONE: "copy_out_done"}
# Host to guest.
SETUP, GO, STDIN, STDIN_EOF, OUTPUT_CREDIT, SIGNAL, POWEROFF = 1, 2, 3, 4, 5, 6, 7
RESIZE, COPY_IN, COPY_DATA, COPY_END, COPY_OUT, COPY_CREDIT, EXEC = 8, 9, 10, 11, 12, 13, 14
HOST_NAMES = {SETUP: "setup", GO: "go", STDIN: "stdin", STDIN_EOF: "stdin_eof", OUTPUT_CREDIT: "output_credit",
              SIGNAL: "signal", POWEROFF: "poweroff", RESIZE: "resize", COPY_IN: "copy_in", COPY_DATA: "copy_data",
              COPY_END: "copy_end", COPY_OUT: "copy_out", COPY_CREDIT: "copy_credit", EXEC: "exec"}
# start_failed reasons.
NOT_FOUND, NOT_EXECUTABLE, WORKDIR, OTHER, REFUSED = 1, 2, 3, 4, 5

# Probes and outcomes.
DENIED_NAME, DIRECT_ADDRESS, FOREIGN_RESOLVER, NONCE_IN_ENV = 1, 2, 3, 4
PROBE_NAMES = {DENIED_NAME: "denied_name", DIRECT_ADDRESS: "direct_address", FOREIGN_RESOLVER: "foreign_resolver",
               NONCE_IN_ENV: "nonce_in_env"}
PASSED, FAILED, SKIPPED = 0, 1, 2
OUTCOME_NAMES = {PASSED: "passed", FAILED: "failed", SKIPPED: "skipped"}

MAX_SHORT_TEXT, MAX_LOG_TEXT, MAX_CA_PEM, MAX_GUEST_PATH = 256, 4096, 16 * 1024, 4096
MAX_ENV, MAX_ARGS, MAX_PROBES = 256, 1024, 16


class ProtocolError(Exception):
    pass


class FrameError(ProtocolError):
    """kind: 'length_too_small', 'length_too_large' (the stream cannot be
    followed), 'bad_mac', 'bad_sequence' (the frame was consumed)."""

    def __init__(self, kind):
        super().__init__(kind)
        self.kind = kind


def frame_mac(key, direction, length, ftype, seq, payload):
    return hmac.new(key, direction + struct.pack(">IBQ", length, ftype, seq) + payload, hashlib.sha256).digest()


class FrameWriter:
    def __init__(self, direction):
        self.direction, self.key, self.seq = direction, None, 0

    def frame(self, ftype, payload=b"", mac=None, advance=True):
        """One frame. `mac` replaces the real MAC (a forgery); advance=False
        leaves the sequence where it was (the forged frame is not counted)."""
        assert len(payload) <= MAX_PAYLOAD
        length = 1 + 8 + len(payload) + MAC_BYTES
        if mac is None:
            mac = frame_mac(self.key, self.direction, length, ftype, self.seq, payload) if self.key else bytes(MAC_BYTES)
        out = struct.pack(">IBQ", length, ftype, self.seq) + payload + mac
        if advance:
            self.seq += 1
        return out


class FrameReader:
    """Reassembles one direction's frames; holds at most one frame and a header."""

    def __init__(self, direction):
        self.direction, self.key, self.expected, self.buf, self.broken = direction, None, 0, b"", None

    def feed(self, data):
        self.buf += data
        if len(self.buf) > 4 + MAX_LENGTH + 65536:
            raise ProtocolError("reader buffer over its bound")

    def next(self):
        """(type, payload) of the next whole frame, None when more bytes are
        needed; FrameError for a bad one."""
        if self.broken:
            raise FrameError(self.broken)
        if len(self.buf) < 4:
            return None
        (length,) = struct.unpack(">I", self.buf[:4])
        if length < MIN_LENGTH or length > MAX_LENGTH:
            self.broken = "length_too_small" if length < MIN_LENGTH else "length_too_large"
            raise FrameError(self.broken)
        if len(self.buf) < 4 + length:
            return None
        body, self.buf = self.buf[4:4 + length], self.buf[4 + length:]
        ftype, seq = struct.unpack(">BQ", body[:9])
        payload, mac = body[9:-MAC_BYTES], body[-MAC_BYTES:]
        want = frame_mac(self.key, self.direction, length, ftype, seq, payload) if self.key else bytes(MAC_BYTES)
        if not hmac.compare_digest(want, mac):
            raise FrameError("bad_mac")
        if seq != self.expected:
            raise FrameError("bad_sequence")
        self.expected += 1
        return ftype, payload


# -- fields -------------------------------------------------------------------------------

class Fields:
    def __init__(self, payload):
        self.p, self.at = bytes(payload), 0

    def take(self, n):
        if n > len(self.p) - self.at:
            raise ProtocolError(f"field of {n} bytes past the end")
        out = self.p[self.at:self.at + n]
        self.at += n
        return out

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack(">H", self.take(2))[0]

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def raw(self, cap):
        n = self.u32()
        if n > cap:
            raise ProtocolError(f"string of {n} bytes over its cap {cap}")
        return self.take(n)

    def text(self, cap):
        return self.raw(cap).decode("utf-8", errors="surrogateescape")

    def count(self, cap):
        n = self.u16()
        if n > cap:
            raise ProtocolError(f"list of {n} over its cap {cap}")
        return n

    def done(self):
        if self.at != len(self.p):
            raise ProtocolError(f"{len(self.p) - self.at} bytes left over")


def _str(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack(">I", len(b)) + b


# -- guest to host ----------------------------------------------------------------------

def encode_hello(agent, uptime_ms, network_up, network, version=PROTOCOL_VERSION):
    return struct.pack(">H", version) + _str(agent) + struct.pack(">QB", uptime_ms, 1 if network_up else 0) + _str(network)


def decode_hello(p):
    f = Fields(p)
    m = {"version": f.u16(), "agent": f.text(MAX_SHORT_TEXT), "uptime_ms": f.u64()}
    up = f.u8()
    m["network"] = f.text(MAX_SHORT_TEXT)
    f.done()
    if up > 1:
        raise ProtocolError("network_up is not 0 or 1")
    m["network_up"] = up == 1
    return m


def encode_selftest_report(results):
    out = struct.pack(">H", len(results))
    for r in results:
        out += struct.pack(">BB", r["kind"], r["outcome"]) + _str(r["target"]) + _str(r["detail"])
    return out


def decode_selftest_report(p):
    f = Fields(p)
    results = []
    for _ in range(f.count(MAX_PROBES)):
        kind, outcome = f.u8(), f.u8()
        r = {"kind": kind, "outcome": outcome, "target": f.text(MAX_SHORT_TEXT), "detail": f.text(MAX_SHORT_TEXT)}
        if kind not in PROBE_NAMES or outcome not in OUTCOME_NAMES:
            raise ProtocolError(f"probe kind {kind} or outcome {outcome} unknown")
        results.append(r)
    f.done()
    return results


def encode_started(pid, session=MAIN_SESSION):
    return struct.pack(">II", session, pid)


def decode_started(p):
    """{"session", "pid"}"""
    f = Fields(p)
    m = {"session": f.u32(), "pid": f.u32()}
    f.done()
    return m


def encode_start_failed(reason, error, detail, session=MAIN_SESSION):
    return struct.pack(">IBI", session, reason, error) + _str(detail)


def decode_start_failed(p):
    f = Fields(p)
    m = {"session": f.u32(), "reason": f.u8(), "errno": f.u32(), "detail": f.text(MAX_SHORT_TEXT)}
    f.done()
    if not 1 <= m["reason"] <= 5:
        raise ProtocolError(f"start_failed reason {m['reason']}")
    return m


def encode_exited(signalled, value, session=MAIN_SESSION):
    return struct.pack(">IBI", session, 1 if signalled else 0, value)


def decode_exited(p):
    f = Fields(p)
    session, signalled, value = f.u32(), f.u8(), f.u32()
    f.done()
    if signalled > 1 or (signalled and not 1 <= value <= 64) or (not signalled and value > 255):
        raise ProtocolError(f"exited {signalled} {value}")
    return {"session": session, "signalled": signalled == 1, "value": value}


def encode_data(session, data):
    """stdout, stderr (guest to host) and stdin (host to guest): the session, then the bytes."""
    assert len(data) <= MAX_STREAM
    return struct.pack(">I", session) + bytes(data)


def decode_data(p):
    """(session, bytes): the bytes are the rest of the payload."""
    f = Fields(p)
    session = f.u32()
    return session, bytes(p[SESSION_ID_BYTES:])


def encode_session_credit(session, n):
    """stdin_credit (guest to host) and output_credit (host to guest)."""
    return struct.pack(">II", session, n)


def decode_session_credit(p):
    f = Fields(p)
    session, n = f.u32(), f.u32()
    f.done()
    return session, n


def encode_session_ref(session):
    """stdin_eof."""
    return struct.pack(">I", session)


def decode_session_ref(p):
    f = Fields(p)
    session = f.u32()
    f.done()
    return session


def encode_log(text):
    return _str(text)


def decode_log(p):
    f = Fields(p)
    t = f.text(MAX_LOG_TEXT)
    f.done()
    return t


def encode_credit(n):
    return struct.pack(">I", n)


def decode_credit(p):
    f = Fields(p)
    n = f.u32()
    f.done()
    return n


# -- host to guest ----------------------------------------------------------------------

def encode_setup(key, argv, env=(), ca_pem="", workdir="", uid=1000, gid=1000, probes=(), output_credit=256 << 10,
                 stdin_open=False, tty=False, rows=0, cols=0, version=PROTOCOL_VERSION):
    assert len(key) == KEY_BYTES and argv
    out = struct.pack(">H", version) + bytes(key) + _str(ca_pem) + struct.pack(">H", len(env))
    for name, value in env:
        out += _str(name) + _str(value)
    out += _str(workdir) + struct.pack(">IIH", uid, gid, len(argv))
    for a in argv:
        out += _str(a)
    out += struct.pack(">H", len(probes))
    for kind, target in probes:
        out += struct.pack(">B", kind) + _str(target)
    return out + struct.pack(">IBBHH", output_credit, 1 if stdin_open else 0, 1 if tty else 0, rows, cols)


def decode_setup(p):
    f = Fields(p)
    m = {"version": f.u16(), "key": f.take(KEY_BYTES), "ca_pem": f.text(MAX_CA_PEM), "env": []}
    for _ in range(f.count(MAX_ENV)):
        name, value = f.text(MAX_SHORT_TEXT), f.text(MAX_PAYLOAD)
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ProtocolError(f"env entry {name!r}")
        m["env"].append((name, value))
    m["workdir"] = f.text(4096)
    m["uid"], m["gid"] = f.u32(), f.u32()
    n = f.count(MAX_ARGS)
    if n == 0:
        raise ProtocolError("no argv")
    m["argv"] = [f.text(MAX_PAYLOAD) for _ in range(n)]
    if any("\0" in a for a in m["argv"]):
        raise ProtocolError("NUL in argv")
    m["probes"] = []
    for _ in range(f.count(MAX_PROBES)):
        kind = f.u8()
        if kind not in PROBE_NAMES:
            raise ProtocolError(f"probe kind {kind}")
        m["probes"].append((kind, f.text(MAX_SHORT_TEXT)))
    m["output_credit"], stdin_open, tty = f.u32(), f.u8(), f.u8()
    m["rows"], m["cols"] = f.u16(), f.u16()
    f.done()
    if stdin_open > 1 or tty > 1:
        raise ProtocolError("stdin_open or tty is not 0 or 1")
    m["stdin_open"], m["tty"] = stdin_open == 1, tty == 1
    return m


def encode_signal(signo, session=MAIN_SESSION):
    return struct.pack(">IB", session, signo)


def decode_signal(p):
    """(session, signo)"""
    f = Fields(p)
    session, s = f.u32(), f.u8()
    f.done()
    if not 1 <= s <= 64:
        raise ProtocolError(f"signal {s}")
    return session, s


def encode_resize(session, rows, cols):
    return struct.pack(">IHH", session, rows, cols)


def decode_resize(p):
    f = Fields(p)
    m = {"session": f.u32(), "rows": f.u16(), "cols": f.u16()}
    f.done()
    return m


def encode_exec(session, argv, env=(), workdir="", uid=1000, gid=1000, output_credit=256 << 10, stdin_open=False,
                tty=False, rows=0, cols=0):
    assert argv
    out = struct.pack(">IH", session, len(env))
    for name, value in env:
        out += _str(name) + _str(value)
    out += _str(workdir) + struct.pack(">IIH", uid, gid, len(argv))
    for a in argv:
        out += _str(a)
    return out + struct.pack(">IBBHH", output_credit, 1 if stdin_open else 0, 1 if tty else 0, rows, cols)


def decode_exec(p):
    f = Fields(p)
    m = {"session": f.u32(), "env": []}
    if m["session"] == MAIN_SESSION:
        raise ProtocolError("exec of session 0")
    for _ in range(f.count(MAX_ENV)):
        name, value = f.text(MAX_SHORT_TEXT), f.text(MAX_PAYLOAD)
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ProtocolError(f"env entry {name!r}")
        m["env"].append((name, value))
    m["workdir"] = f.text(4096)
    if m["workdir"] and (not m["workdir"].startswith("/") or "\0" in m["workdir"]):
        raise ProtocolError(f"exec workdir {m['workdir']!r}")
    m["uid"], m["gid"] = f.u32(), f.u32()
    n = f.count(MAX_ARGS)
    if n == 0:
        raise ProtocolError("no argv")
    m["argv"] = [f.text(MAX_PAYLOAD) for _ in range(n)]
    m["output_credit"], stdin_open, tty = f.u32(), f.u8(), f.u8()
    m["rows"], m["cols"] = f.u16(), f.u16()
    f.done()
    if stdin_open > 1 or tty > 1:
        raise ProtocolError("stdin_open or tty is not 0 or 1")
    m["stdin_open"], m["tty"] = stdin_open == 1, tty == 1
    return m


def encode_window_size(rows, cols):
    return struct.pack(">HH", rows, cols)


def decode_window_size(p):
    f = Fields(p)
    m = {"rows": f.u16(), "cols": f.u16()}
    f.done()
    return m


def encode_copy_path(path):
    return _str(path)


def decode_copy_path(p):
    f = Fields(p)
    path = f.text(MAX_GUEST_PATH)
    f.done()
    if not path.startswith("/") or "\0" in path:
        raise ProtocolError(f"copy path {path!r} is not absolute or holds a NUL")
    return path


def encode_copy_result(ok, detail):
    return struct.pack(">B", 1 if ok else 0) + _str(detail)


def decode_copy_result(p):
    """copy_in_done and copy_out_done."""
    f = Fields(p)
    ok = f.u8()
    detail = f.text(MAX_SHORT_TEXT)
    f.done()
    if ok > 1:
        raise ProtocolError("copy result ok is not 0 or 1")
    return {"ok": ok == 1, "detail": detail}


# -- the host's end ------------------------------------------------------------------------

class HostChannel:
    """The host's end of the control channel over a connected socket. Every
    wait is bounded; frames the guest sends that fail the MAC or sequence
    raise FrameError (a test wants to know)."""

    def __init__(self, sock):
        self.sock = sock
        self.writer = FrameWriter(HOST_TO_GUEST)
        self.reader = FrameReader(GUEST_TO_HOST)
        self.logs = []  # box-guest's log lines, as they come
        self.views = {}  # command sessions pump() follows, by id
        self.beside = []  # other frames pump() and copy_out() saw

    def send(self, ftype, payload=b""):
        self.sock.sendall(self.writer.frame(ftype, payload))

    def send_forged(self, ftype, payload=b""):
        """A frame with a wrong MAC at the current sequence number; the next
        honest frame reuses the number, as a forgery does not count."""
        self.sock.sendall(self.writer.frame(ftype, payload, mac=os.urandom(MAC_BYTES), advance=False))

    def recv(self, timeout):
        """The next frame (type, payload); log frames are collected, not returned."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.reader.next()
            if got is not None:
                if got[0] == LOG and self.reader.key:
                    self.logs.append(decode_log(got[1]))
                    continue
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no frame from the guest within {timeout:.0f} s")
            ready, _, _ = select.select([self.sock], [], [], left)
            if ready:
                data = self.sock.recv(65536)  # every frame is taken before the next read: the reader's bound holds
                if not data:
                    raise EOFError("the guest closed the control channel")
                self.reader.feed(data)

    def expect(self, ftype, timeout):
        t, p = self.recv(timeout)
        if t != ftype:
            raise ProtocolError(f"expected {GUEST_NAMES.get(ftype)}, got {GUEST_NAMES.get(t, t)}: {p[:200]!r}")
        return p

    def hello(self, timeout):
        return decode_hello(self.expect(HELLO, timeout))

    def setup(self, **kwargs):
        key = kwargs.pop("key", None) or os.urandom(KEY_BYTES)
        self.send(SETUP, encode_setup(key, **kwargs))
        self.writer.key = self.reader.key = key
        return key

    def run_command(self, timeout, initial_credit, stdin=None, credit_step=None, on_output=None):
        """go, then everything up to exited. `initial_credit` is setup's
        output_credit: the guest sending more than its credit raises. Grants
        credit back as output arrives (credit_step bytes at a time, default
        all that came), sends `stdin` under the credit the guest grants, then
        stdin_eof. on_output(channel, frame type, bytes) sees each chunk.
        Returns a dict: started (pid) or start_failed, stdout, stderr, exited,
        max_unacked (the most output ever received and not yet granted back),
        stdin_credit (all the guest granted)."""
        self.send(GO)
        out, err = bytearray(), bytearray()
        result = {"stdout": out, "stderr": err, "max_unacked": 0, "stdin_credit": 0}
        deadline = time.monotonic() + timeout
        stdin_left = memoryview(stdin) if stdin is not None else None
        stdin_credit = 0
        unacked = 0  # output bytes received and not yet granted back
        credit = initial_credit  # what the guest may still send
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the command did not end within {timeout} s (got {len(out)}+{len(err)} bytes)")
            t, p = self.recv(left)
            if t == STARTED:
                m = decode_started(p)
                self._main(m["session"], "started")
                result["started"] = m["pid"]
            elif t == START_FAILED:
                m = decode_start_failed(p)
                self._main(m["session"], "start_failed")
                result["start_failed"] = m
                return result
            elif t in (STDOUT, STDERR):
                session, data = decode_data(p)
                self._main(session, GUEST_NAMES[t])
                if len(data) > credit:
                    raise ProtocolError(f"the guest sent {len(data)} bytes with {credit} of credit")
                credit -= len(data)
                (out if t == STDOUT else err).extend(data)
                unacked += len(data)
                result["max_unacked"] = max(result["max_unacked"], unacked)
                if on_output:
                    on_output(self, t, data)
                step = credit_step or unacked
                while unacked >= step and step > 0:
                    self.send(OUTPUT_CREDIT, encode_session_credit(MAIN_SESSION, step))
                    credit += step
                    unacked -= step
            elif t == STDIN_CREDIT:
                session, granted = decode_session_credit(p)
                self._main(session, "stdin_credit")
                stdin_credit += granted
                result["stdin_credit"] += granted
            elif t == EXITED:
                m = decode_exited(p)
                self._main(m["session"], "exited")
                result["exited"] = m
                return result
            else:
                raise ProtocolError(f"unexpected {GUEST_NAMES.get(t, t)} while the command runs")
            if stdin_left is not None and stdin_credit > 0:
                n = min(stdin_credit, len(stdin_left), MAX_STREAM)
                if n:
                    self.send(STDIN, encode_data(MAIN_SESSION, bytes(stdin_left[:n])))
                    stdin_left, stdin_credit = stdin_left[n:], stdin_credit - n
                if len(stdin_left) == 0:
                    self.send(STDIN_EOF, encode_session_ref(MAIN_SESSION))
                    stdin_left = None

    def copy_in(self, path, stream, timeout, chunk=MAX_PAYLOAD):
        """copy_in, the tar stream as copy_data frames, copy_end; returns
        copy_in_done's {ok, detail}. The socket's own flow control is the
        backpressure: sendall() waits while the guest does not read."""
        self.send(COPY_IN, encode_copy_path(path))
        view = memoryview(stream)
        for at in range(0, len(view), chunk):
            self.send(COPY_DATA, bytes(view[at:at + chunk]))
        self.send(COPY_END)
        return decode_copy_result(self.expect(COPY_IN_DONE, timeout))

    def copy_out(self, path, timeout, credit_step=256 << 10, max_bytes=64 << 20):
        """copy_out, then copy_credit credit_step at a time as the stream
        arrives; raises if the guest sends past its credit or more than
        max_bytes. Returns (stream bytes, {ok, detail}, most bytes ever
        outstanding). Other frames (the command's output) are kept in
        self.beside as (type, payload)."""
        self.send(COPY_OUT, encode_copy_path(path))
        self.send(COPY_CREDIT, encode_credit(credit_step))
        credit, most, stream = credit_step, 0, bytearray()
        self.beside = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"copy_out of {path} did not end within {timeout} s ({len(stream)} bytes)")
            t, p = self.recv(left)
            if t == COPY_OUT_DATA:
                if len(p) > credit:
                    raise ProtocolError(f"copy_out_data of {len(p)} bytes with {credit} of copy credit")
                credit -= len(p)
                stream.extend(p)
                most = max(most, credit_step - credit)
                if len(stream) > max_bytes:
                    raise ProtocolError(f"copy_out over its bound of {max_bytes} bytes")
                if credit == 0:
                    self.send(COPY_CREDIT, encode_credit(credit_step))
                    credit = credit_step
            elif t == COPY_OUT_DONE:
                return bytes(stream), decode_copy_result(p), most
            else:
                self.beside.append((t, p))

    @staticmethod
    def _main(session, what):
        if session != MAIN_SESSION:
            raise ProtocolError(f"{what} for session {session} while only the main command runs")

    # -- exec sessions ----------------------------------------------------------------

    def open_exec(self, session, argv, credit=256 << 10, **kwargs):
        """Sends exec for `session`; pump() then follows it under `credit`."""
        self.views.setdefault(session, new_view())["credit"] = credit
        self.send(EXEC, encode_exec(session, argv, output_credit=credit, **kwargs))

    def view(self, session):
        return self.views.setdefault(session, new_view())

    def pump(self, until, timeout, hold=()):
        """Reads frames into per-session views (stdout, stderr, started,
        start_failed, exited, stdin_credit) until until(self) is true,
        granting each session's output back as it comes, except the
        sessions in `hold`; raises when a session sends past its own credit."""
        deadline = time.monotonic() + timeout
        while not until(self):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the sessions did not get there within {timeout} s: "
                                   f"{ {k: summary(v) for k, v in self.views.items()} }")
            t, p = self.recv(left)
            if t == STARTED:
                m = decode_started(p)
                self.view(m["session"])["started"] = m["pid"]
            elif t == START_FAILED:
                m = decode_start_failed(p)
                self.view(m["session"])["start_failed"] = m
            elif t == EXITED:
                m = decode_exited(p)
                self.view(m["session"])["exited"] = m
            elif t in (STDOUT, STDERR):
                session, data = decode_data(p)
                v = self.view(session)
                v["stdout" if t == STDOUT else "stderr"].extend(data)
                v["unacked"] += len(data)
                if v["unacked"] > v["credit"]:
                    raise ProtocolError(f"session {session} sent {v['unacked']} bytes with {v['credit']} of credit")
                if session not in hold:
                    self.send(OUTPUT_CREDIT, encode_session_credit(session, v["unacked"]))
                    v["unacked"] = 0
            elif t == STDIN_CREDIT:
                session, n = decode_session_credit(p)
                self.view(session)["stdin_credit"] += n
            else:
                self.beside.append((t, p))

    def poweroff(self):
        self.send(POWEROFF)


def new_view():
    return {"stdout": bytearray(), "stderr": bytearray(), "started": None, "start_failed": None, "exited": None,
            "stdin_credit": 0, "unacked": 0, "credit": 0}


def summary(v):
    return {"out": bytes(v["stdout"][-80:]), "err": bytes(v["stderr"][-80:]), "started": v["started"],
            "start_failed": v["start_failed"], "exited": v["exited"]}


def ended(v):
    return v["exited"] is not None or v["start_failed"] is not None

