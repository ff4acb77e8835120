#!/usr/bin/env python3
"""End-to-end test of the Debian agent image (guest/image/debian/build.sh):
one boot under QEMU (microvm, TCG) with the root disk read-only and a
writable disk of the test's (a sparse file, `mkfs.ext4 -L abox-upper`), the
test as the host side of the control channel (guest_protocol.py). No network
device: box-guest says so in its hello and the command runs all the same.

Usage:
  debian_image_e2e.py PATH/TO/box-guest [--keep]

The image is built by the recipe into a cache folder that survives reruns
($ABOX_E2E_IMAGE_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/abox/e2e-images),
named by the sha256 of every input the recipe prints (--print-inputs) and
its options, so a rerun with the same inputs boots the image built before
(a build takes minutes: debootstrap and apt); older Debian images there are
removed when a new one is built.

Checks, in one boot:
- the image boots: the initramfs finds both disks by label and box-guest
  says hello (protocol 2);
- as uid 1000: `curl --version`, `python3 -c 'import requests'`,
  `node -e 'console.log(1)'` and a random read in Node all work; the root is
  the overlay, /home/agent is the agent's (1000:1000, 0700), the agent cannot
  write /usr; the hardware RNG is virtio-rng;
- the file the agent wrote in /home/agent landed on the writable disk (read
  back from the disk image on the host with debugfs after poweroff, owned by
  1000), and the root disk is byte-for-byte what was built;
- poweroff ends QEMU with 0.

Prints one line per check and 'N passed, N failed'; exits 1 on any failure.
Every wait is bounded. Everything the test makes but the cached image is
removed at the end.
"""
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guest_protocol as gp  # noqa: E402
import vm_e2e as vm  # noqa: E402  (the guest kernel and its TSC hint)

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RECIPE = os.path.join(REPO, "guest", "image", "debian", "build.sh")
KERNEL_DIR = vm.KERNEL_DIR
CACHE = os.environ.get("ABOX_E2E_IMAGE_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "abox", "e2e-images")

BUILD_TIMEOUT = 1800  # debootstrap and apt: minutes here; the first build fetches ~100 MiB
BOOT_TIMEOUT = 90  # QEMU start to hello (5 s of it box-guest waiting for an eth0 there is none of)
STEP_TIMEOUT = 120  # node and python under TCG take seconds to start
POWEROFF_TIMEOUT = 30
GUEST_MEM_MIB = 1024
UPPER_MIB = 512
ENV = [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/home/agent"), ("LANG", "C.UTF-8")]


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def report(self, name, ok, note=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}{f' ({note})' if note else ''}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}: {note}", flush=True)

    def run(self, name, fn):
        try:
            self.report(name, True, fn() or "")
            return True
        except Exception as e:  # noqa: BLE001 - report and go on
            self.report(name, False, f"{type(e).__name__}: {e}")
            return False


def image_key(box_guest):
    """sha256 of the recipe's inputs (their paths and contents) and options."""
    args = ["bash", RECIPE, "--box-guest", box_guest, "--kernel-dir", KERNEL_DIR, "--print-inputs"]
    inputs = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60).stdout.split()
    h = hashlib.sha256()
    for path in inputs:
        h.update(path.encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    h.update(b"options: none")
    return h.hexdigest()[:16]


def cached_image(box_guest):
    """(initramfs, rootfs, note): the cached build for these inputs, built now if there is none."""
    key = image_key(box_guest)
    folder = os.path.join(CACHE, f"debian-{key}")
    initramfs, rootfs = os.path.join(folder, "initramfs.cpio"), os.path.join(folder, "rootfs.ext4")
    if os.path.isfile(initramfs) and os.path.isfile(rootfs):
        return initramfs, rootfs, f"cached {folder}"
    os.makedirs(CACHE, exist_ok=True)
    for old in os.listdir(CACHE):  # one Debian image at a time: each is hundreds of MiB
        if old.startswith("debian-"):
            shutil.rmtree(os.path.join(CACHE, old), ignore_errors=True)
    staging = tempfile.mkdtemp(prefix=".debian-build-", dir=CACHE)
    started = time.monotonic()
    try:
        r = subprocess.run(["bash", RECIPE, "--box-guest", box_guest, "--kernel-dir", KERNEL_DIR, staging],
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if r.returncode != 0:
            raise RuntimeError(f"build.sh failed {r.returncode}: {r.stderr[-2000:]}")
        os.rename(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return initramfs, rootfs, f"built in {time.monotonic() - started:.0f} s into {folder}"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


GUEST_CHECK = r"""
echo "id=$(id -u):$(id -g)"
echo "curl=$(curl --version | head -1 | cut -d' ' -f1-2)"
python3 -c 'import requests; print("requests=" + requests.__version__)'
node -e 'console.log("node=" + 1 + " random=" + require("crypto").randomBytes(8).length)'
echo "root=$(grep ' / ' /proc/mounts | cut -d' ' -f1,3)"
echo "home=$(stat -c '%u:%g %a' /home/agent)"
touch /usr/agent-was-here 2>/dev/null && echo "usr=writable" || echo "usr=denied"
echo "rng=$(cat /sys/class/misc/hw_random/rng_current)"
echo "written by the agent" >/home/agent/hello.txt && echo "wrote=/home/agent/hello.txt"
"""


def main(argv):
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    box_guest = os.path.abspath(argv[0])
    if os.geteuid() != 0:
        print("debian_image_e2e: needs root (the recipe's debootstrap)")
        return 1
    for tool in ("qemu-system-x86_64", "debootstrap", "mkfs.ext4", "debugfs", "cpio"):
        if shutil.which(tool) is None:
            print(f"debian_image_e2e: {tool} is missing (scripts/setup.sh installs it)")
            return 1
    if not os.path.isfile(os.path.join(KERNEL_DIR, "vmlinux")):
        print(f"debian_image_e2e: no guest kernel in {KERNEL_DIR} (scripts/setup.sh fetches it)")
        return 1

    c = Checks()
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="debian-e2e-")
    qemu = listener = conn = None
    got = {}
    try:
        def image():
            got["initramfs"], got["rootfs"], note = cached_image(box_guest)
            got["rootfs_sha"] = sha256_file(got["rootfs"])
            return note

        if not c.run("image_is_built_or_cached", image):
            return finish(c, started, work, keep)

        upper = os.path.join(work, "upper.ext4")
        with open(upper, "wb") as f:
            f.truncate(UPPER_MIB << 20)  # sparse
        subprocess.run(["mkfs.ext4", "-q", "-L", "abox-upper", upper], check=True, timeout=60)
        ctl = os.path.join(work, "ctl.sock")
        console = os.path.join(work, "console.log")

        def boots_and_says_hello():
            nonlocal qemu, listener, conn
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(ctl)
            listener.listen(1)
            append = " ".join(["console=ttyS0", "quiet", "panic=-1", f"tsc_early_khz={vm.host_tsc_khz()}",
                               "abox.ctl=ctl"])
            cmd = ["qemu-system-x86_64", "-M", "microvm", "-accel", "tcg", "-m", str(GUEST_MEM_MIB), "-smp", "1",
                   "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", f"file:{console}",
                   "-device", "virtio-serial-device", "-chardev", f"socket,id=c0,path={ctl},server=off",
                   "-device", "virtserialport,chardev=c0,name=ctl",
                   "-device", "virtio-rng-device",
                   "-drive", f"file={got['rootfs']},if=none,format=raw,readonly=on,id=root",
                   "-device", "virtio-blk-device,drive=root",
                   "-drive", f"file={upper},if=none,format=raw,id=upper",
                   "-device", "virtio-blk-device,drive=upper",
                   "-kernel", os.path.join(KERNEL_DIR, "vmlinux"), "-initrd", got["initramfs"], "-append", append]
            t0 = time.monotonic()
            qemu = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=open(os.path.join(work, "qemu.err"), "wb"))
            listener.settimeout(30)
            conn, _ = listener.accept()
            conn.settimeout(30)
            got["ch"] = ch = gp.HostChannel(conn)
            try:
                hello = ch.hello(BOOT_TIMEOUT)
            except Exception:
                raise RuntimeError("no hello; console:\n" + tail(console)) from None
            assert hello["version"] == gp.PROTOCOL_VERSION, hello
            init_lines = [line for line in tail(console, 200).splitlines() if "init:" in line]
            assert any("root /dev/vd" in line for line in init_lines), init_lines
            assert any("writable layer /dev/vd" in line for line in init_lines), init_lines
            return f"{time.monotonic() - t0:.1f} s, uptime {hello['uptime_ms']} ms, network: {hello['network']}"

        if not c.run("boots_from_the_disks_and_says_hello", boots_and_says_hello):
            print("--- console ---\n" + tail(console))
            return finish(c, started, work, keep, qemu)
        ch = got["ch"]

        def agent_tools_run_as_1000():
            ch.setup(argv=["bash", "-c", GUEST_CHECK], env=ENV, output_credit=256 << 10)
            r = ch.run_command(STEP_TIMEOUT, 256 << 10)
            out = r["stdout"].decode(errors="replace")
            got["out"] = field = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            assert r.get("exited") == {"session": 0, "signalled": False, "value": 0}, f"{r.get('exited')}: {out} {bytes(r['stderr'])!r}"
            problems = []
            want = {"id": "1000:1000", "curl": "curl 7.88.1", "node": "1 random=8", "root": "overlay overlay",
                    "home": "1000:1000 700", "usr": "denied", "rng": "virtio_rng.0",
                    "wrote": "/home/agent/hello.txt"}
            for k, v in want.items():
                if field.get(k) != v:
                    problems.append(f"{k}={field.get(k)!r}, want {v!r}")
            if not field.get("requests"):
                problems.append("no requests version")
            assert not problems, "; ".join(problems) + f"\n{out}\n{bytes(r['stderr'])!r}"
            return f"{field['curl']}, requests {field['requests']}, node ok, rng {field['rng']}"

        c.run("curl_python_requests_and_node_run_as_1000", agent_tools_run_as_1000)

        def poweroff_ends_qemu_with_0():
            ch.poweroff()
            rc = qemu.wait(timeout=POWEROFF_TIMEOUT)
            assert rc == 0, f"qemu exit status {rc}"

        if not c.run("poweroff_ends_qemu_with_0", poweroff_ends_qemu_with_0):
            return finish(c, started, work, keep, qemu)

        def writes_landed_on_the_upper_disk():
            r = subprocess.run(["debugfs", "-R", "cat /upper/home/agent/hello.txt", upper], capture_output=True,
                               text=True, timeout=60)
            assert r.stdout == "written by the agent\n", f"{r.stdout!r} {r.stderr[-300:]!r}"
            r = subprocess.run(["debugfs", "-R", "stat /upper/home/agent/hello.txt", upper], capture_output=True,
                               text=True, timeout=60)
            assert "User:  1000" in r.stdout, r.stdout[:300]
            return "/upper/home/agent/hello.txt on the writable disk, owned by 1000"

        c.run("the_agents_writes_landed_on_the_writable_disk", writes_landed_on_the_upper_disk)

        def root_disk_unchanged():
            after = sha256_file(got["rootfs"])
            assert after == got["rootfs_sha"], "the root disk changed"
            return f"sha256 {after[:16]}..."

        c.run("the_root_disk_is_unchanged", root_disk_unchanged)
        return finish(c, started, work, keep, qemu)
    finally:
        for s in (conn, listener):
            if s is not None:
                s.close()


def tail(path, lines=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def finish(c, started, work, keep, qemu=None):
    if qemu is not None and qemu.poll() is None:
        qemu.kill()
        qemu.wait(timeout=10)
    if keep:
        print(f"(kept {work})")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{c.passed} passed, {c.failed} failed ({time.monotonic() - started:.0f}s)")
    return 0 if c.failed == 0 and c.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
