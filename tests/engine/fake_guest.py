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
  silent    says hello, then nothing (the supervisor's stop must still end it)
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
    ctl.sendall(writer.frame(gp.HELLO, gp.encode_hello("fake-guest 1", 10, True, "10.0.2.15/24 via 10.0.2.2")))
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
            recv(30)
        except (EOFError, OSError):
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
    ctl.sendall(writer.frame(gp.STARTED, gp.encode_started(42)))
    if mode == "overflow":
        try:
            for _ in range(16):
                ctl.sendall(writer.frame(gp.STDOUT, b"x" * (64 << 10)))
        except OSError:
            pass
        try:
            recv(30)
        except (EOFError, OSError):
            pass
        return
    ctl.sendall(writer.frame(gp.STDOUT, b"hello from the fake guest\n"))
    ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 3)))
    try:
        while True:
            t, _ = recv()
            if t == gp.POWEROFF:
                return
    except (EOFError, OSError):
        return


if __name__ == "__main__":
    try:
        main()
    except (EOFError, ConnectionError):
        pass
