#!/usr/bin/env python3
"""fake_guest: the VMM and the guest in one process, for the supervisor's
tests (tests/engine/supervisor_test.cc): what QEMU and box-guest would do on
the two sockets, honestly or not, written with tests/e2e/guest_protocol.py.

Usage: fake_guest.py CONTROL_SOCKET NET_SOCKET MODE

It connects to abox-net's stream socket (as QEMU's NIC would, and holds it
until it exits) and to the supervisor's control socket, says hello, reads
setup (checking that it parses), then per MODE:
  honest    passes the self-test, waits for go, prints "hello from the fake guest" and exits 3
  forge     a frame with a wrong MAC (an `exited` 0) first, then as honest
  oversize  a frame header claiming 2 GiB, then 64 MiB of garbage as fast as it is read
  garbage   64 MiB of random bytes instead of a hello
  overflow  after go, 1 MiB of stdout in one go, past its 256 KiB of credit
  selffail  reports the direct_address probe as failed
  silent    says hello, then nothing (the supervisor's stop must still end it); prints each resize it gets
  v2        says hello as a box-guest of protocol 2, then waits (the supervisor must say so and end it)
  unknown   after go, frames for sessions the host never opened (stdout, exited, started), then as honest
  exec      after go, the main command runs until poweroff and serves each exec: `echo-stdin`
            echoes its stdin to stdout until stdin_eof and exits 0; `refuse` is start_failed
            refused; anything else prints "exec ARGV" on stdout, "err" on stderr, exits 5
  exec-early as exec, but the main command's `started` comes only after the first exec
Every wait is bounded (30 s); it exits when the supervisor closes the channel.
"""
import os
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import guest_protocol as gp  # noqa: E402


def main():
    ctl_path, net_path, mode = sys.argv[1:4]
    net = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    net.connect(net_path)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(100):
        try:
            ctl.connect(ctl_path)
            break
        except OSError:
            time.sleep(0.05)
    writer = gp.FrameWriter(gp.GUEST_TO_HOST)
    reader = gp.FrameReader(gp.HOST_TO_GUEST)

    def recv(timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            got = reader.next()
            if got is not None:
                return got
            ctl.settimeout(max(0.01, deadline - time.monotonic()))
            data = ctl.recv(65536)
            if not data:
                raise EOFError
            reader.feed(data)

    def flood(chunk_source, total):
        sent = 0
        try:
            while sent < total:
                chunk = chunk_source()
                ctl.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the supervisor closed the channel: what it should do

    if mode == "garbage":
        flood(lambda: os.urandom(1 << 16), 64 << 20)
        return
    version = 2 if mode == "v2" else gp.PROTOCOL_VERSION
    ctl.sendall(writer.frame(gp.HELLO, gp.encode_hello("fake-guest 1", 10, True, "10.0.2.15/24 via 10.0.2.2",
                                                       version=version)))
    if mode == "v2":
        try:
            recv(30)  # a v3 host sends nothing to a v2 guest: it closes
        except (EOFError, OSError):
            pass
        return
    t, p = recv()
    assert t == gp.SETUP, t
    setup = gp.decode_setup(p)
    writer.key = reader.key = setup["key"]
    if mode == "oversize":
        ctl.sendall((0x7FFFFFFF).to_bytes(4, "big"))
        flood(lambda: b"\xab" * (1 << 16), 64 << 20)
        return
    if mode == "silent":
        try:
            while True:
                t, p = recv(30)
                if t == gp.RESIZE:  # said on the console (console.log), for the test to see
                    r = gp.decode_resize(p)
                    print(f"resize {r['session']} {r['rows']}x{r['cols']}", flush=True)
        except (EOFError, OSError, TimeoutError):
            pass
        return
    results = []
    for kind, target in setup["probes"]:
        outcome = gp.FAILED if (mode == "selffail" and kind == gp.DIRECT_ADDRESS) else gp.PASSED
        results.append({"kind": kind, "outcome": outcome, "target": target, "detail": "fake"})
    if mode == "forge":
        ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 0), mac=os.urandom(32), advance=False))
    if results:
        ctl.sendall(writer.frame(gp.SELFTEST_REPORT, gp.encode_selftest_report(results)))
    try:
        t, _ = recv()
    except (EOFError, OSError):
        return  # the self-test failed: the supervisor powers off (closes)
    if t == gp.POWEROFF:
        return
    assert t == gp.GO, t
    if mode == "exec-early":
        # The main command's start is said only after the first exec came (an exec right at go).
        first = recv()
        ctl.sendall(writer.frame(gp.STARTED, gp.encode_started(42)))
        serve_execs(ctl, writer, recv, first)
        return
    ctl.sendall(writer.frame(gp.STARTED, gp.encode_started(42)))
    if mode == "exec":
        serve_execs(ctl, writer, recv)
        return
    if mode == "unknown":
        ctl.sendall(writer.frame(gp.STDOUT, gp.encode_data(7, b"from nowhere\n")))
        ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 0, session=7)))
        ctl.sendall(writer.frame(gp.STARTED, gp.encode_started(1, session=0xFFFFFFFF)))
    if mode == "overflow":
        try:
            for _ in range(16):
                ctl.sendall(writer.frame(gp.STDOUT, gp.encode_data(0, b"x" * gp.MAX_STREAM)))
        except OSError:
            pass
        try:
            recv(30)
        except (EOFError, OSError):
            pass
        return
    ctl.sendall(writer.frame(gp.STDOUT, gp.encode_data(0, b"hello from the fake guest\n")))
    ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 3)))
    try:
        while True:
            t, _ = recv()
            if t == gp.POWEROFF:
                return
    except (EOFError, OSError):
        return


def serve_execs(ctl, writer, recv, first=None):
    """The main command runs until poweroff; each exec is served as the
    module's docstring says, each under its own credit. `first`: a frame
    already read."""
    echoing = {}  # session -> True while it echoes stdin
    credit = {}  # session -> output credit left
    ctl.sendall(writer.frame(gp.STDOUT, gp.encode_data(0, b"main ready\n")))

    def out(session, ftype, data):
        if len(data) > credit[session]:
            raise AssertionError(f"fake guest: session {session} out of credit")
        credit[session] -= len(data)
        ctl.sendall(writer.frame(ftype, gp.encode_data(session, data)))

    while True:
        try:
            t, p = first if first is not None else recv(60)
            first = None
        except (EOFError, OSError):
            return
        if t == gp.POWEROFF:
            return
        if t == gp.EXEC:
            e = gp.decode_exec(p)
            sid = e["session"]
            credit[sid] = e["output_credit"]
            if e["argv"][0] == "refuse":
                ctl.sendall(writer.frame(gp.START_FAILED, gp.encode_start_failed(
                    gp.REFUSED, 11, "box-guest runs at most 16 exec sessions at once, and 16 run", session=sid)))
                continue
            ctl.sendall(writer.frame(gp.STARTED, gp.encode_started(1000 + sid, session=sid)))
            if e["argv"][0] == "echo-stdin":
                echoing[sid] = True
                ctl.sendall(writer.frame(gp.STDIN_CREDIT, gp.encode_session_credit(sid, 65536)))
                continue
            out(sid, gp.STDOUT, ("exec " + " ".join(e["argv"]) + "\n").encode())
            out(sid, gp.STDERR, b"err\n")
            ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 5, session=sid)))
        elif t == gp.STDIN:
            sid, data = gp.decode_data(p)
            if echoing.get(sid):
                out(sid, gp.STDOUT, data)
                ctl.sendall(writer.frame(gp.STDIN_CREDIT, gp.encode_session_credit(sid, len(data))))
        elif t == gp.STDIN_EOF:
            sid = gp.decode_session_ref(p)
            if echoing.pop(sid, None):
                ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 0, session=sid)))
        elif t == gp.OUTPUT_CREDIT:
            sid, n = gp.decode_session_credit(p)
            if sid in credit:
                credit[sid] += n
        elif t == gp.SIGNAL:
            sid, signo = gp.decode_signal(p)
            if echoing.pop(sid, None):
                ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(True, signo, session=sid)))


if __name__ == "__main__":
    try:
        main()
    except (EOFError, ConnectionError):
        pass
