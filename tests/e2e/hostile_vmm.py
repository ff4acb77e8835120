#!/usr/bin/env python3
"""hostile_vmm: a stand-in for QEMU (ABOX_QEMU) that is the VMM and a hostile
box-guest in one process, for daemon_e2e.py's lifecycle cases: the daemon,
its shim, the supervisor and abox-net are the real ones; only the guest lies.

It takes QEMU's argv as the QEMU driver builds it (engine/vmm/qemu_microvm.cc),
finds the control socket (`-chardev socket,id=ctl,path=P`) and abox-net's
stream socket (`-netdev stream,...,addr.path=P`), connects to both, says
hello, reads setup, answers the self-test's probes as passed, and then, by
the instance's name (the state folder the sockets are in):

  hv-honest*  waits for go, says started, prints "hello from hostile_vmm",
              exited 3, and waits for poweroff
  hv-replay*  boot 1 as honest, keeping the boot's key in the state folder
              (fake-vmm-key); every later boot, right after started, an
              `exited 0` MACed under the kept key (the previous boot's) at
              the right sequence number, then as honest
  hv-current* (the control of replay) the same `exited 0` under this boot's
              own key: believed
  hv-early*   a `started` under this boot's key right after setup: before
              the self-test's report and before go (run it with probes: with
              none, go follows setup at once)
Every wait is bounded (60 s); it exits when the supervisor closes the channel.
"""
import os
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guest_protocol as gp  # noqa: E402


def option_path(argv, flag, key):
    """The value of KEY=... in the argument after `flag` that has it."""
    for i, a in enumerate(argv[:-1]):
        if a != flag:
            continue
        for part in argv[i + 1].split(","):
            if part.startswith(key + "="):
                return part[len(key) + 1:]
    raise SystemExit(f"hostile_vmm: no {flag} ...{key}= in {argv}")


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(200):
        try:
            s.connect(path)
            return s
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"hostile_vmm: cannot connect to {path}")


def main(argv):
    ctl_path = option_path(argv, "-chardev", "path")
    net_path = option_path(argv, "-netdev", "addr.path")
    folder = os.path.dirname(ctl_path)
    name = os.path.basename(folder)
    net = connect(net_path)  # held, as QEMU's NIC would, until we exit
    ctl = connect(ctl_path)
    writer, reader = gp.FrameWriter(gp.GUEST_TO_HOST), gp.FrameReader(gp.HOST_TO_GUEST)

    def recv(timeout=60):
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

    def until_closed():
        try:
            while recv()[0] != gp.POWEROFF:
                pass
        except (EOFError, OSError):
            pass

    ctl.sendall(writer.frame(gp.HELLO, gp.encode_hello("hostile_vmm 1", 10, True, "10.0.2.15/24 via 10.0.2.2")))
    t, p = recv()
    assert t == gp.SETUP, t
    setup = gp.decode_setup(p)
    writer.key = reader.key = setup["key"]
    key_file = os.path.join(folder, "fake-vmm-key")
    previous = open(key_file, "rb").read() if os.path.exists(key_file) else None
    with open(key_file, "wb") as f:
        f.write(setup["key"])
    print(f"hostile_vmm: {name}: setup read, boot {'2+' if previous else '1'}", flush=True)
    if name.startswith("hv-early"):
        ctl.sendall(writer.frame(gp.STARTED, gp.encode_started(42)))
        until_closed()
        return
    results = [{"kind": kind, "outcome": gp.PASSED, "target": target, "detail": "hostile_vmm"}
               for kind, target in setup["probes"]]
    if results:
        ctl.sendall(writer.frame(gp.SELFTEST_REPORT, gp.encode_selftest_report(results)))
    t, _ = recv()
    if t != gp.GO:
        until_closed()
        return
    ctl.sendall(writer.frame(gp.STARTED, gp.encode_started(42)))
    if name.startswith("hv-replay") and previous is not None:
        payload = gp.encode_exited(False, 0)
        length = 1 + 8 + len(payload) + 32
        mac = gp.frame_mac(previous, gp.GUEST_TO_HOST, length, gp.EXITED, writer.seq, payload)
        ctl.sendall(writer.frame(gp.EXITED, payload, mac=mac, advance=False))
    if name.startswith("hv-current"):
        ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 0)))
        until_closed()
        return
    ctl.sendall(writer.frame(gp.STDOUT, gp.encode_data(0, b"hello from hostile_vmm\n")))
    ctl.sendall(writer.frame(gp.EXITED, gp.encode_exited(False, 3)))
    until_closed()
    net.close()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (EOFError, ConnectionError):
        pass
