"""bare_qemu: the peer row of the boot benchmarks: QEMU alone booting an
image's kernel and initramfs (and root disk) to a marker on its serial console,
with the machine options abox run's QEMU uses (microvm, the accelerator, 512 MiB,
one CPU), no devices and no abox. bootbench.py and fleetbench.py share it so
that both compare against the same thing.
"""
import os
import select
import subprocess
import time

MARKER = b"abox-first-byte"


def image_files(image_dir):
    """The kernel, initramfs and root disk (None when absent) of an image folder."""
    files = {"kernel": f"{image_dir}/vmlinux", "initramfs": None, "rootfs": None}
    for f in ("initramfs.cpio", "initramfs.cpio.gz"):
        if os.path.exists(f"{image_dir}/{f}"):
            files["initramfs"] = f"{image_dir}/{f}"
    if os.path.exists(f"{image_dir}/rootfs.ext4"):
        files["rootfs"] = f"{image_dir}/rootfs.ext4"
    return files


def host_khz():
    """The host's TSC in kHz, for tsc_early_khz= (a third of TCG boots hang without it)."""
    with open("/proc/cpuinfo") as f:
        return next(int(float(l.split(":")[1]) * 1000) for l in f if l.startswith("cpu MHz"))


def command(files, accel, qemu="qemu-system-x86_64"):
    """QEMU's command line: busybox (or, with a root disk, abox-bench in its /init) echoes MARKER."""
    tsc = f"tsc_early_khz={host_khz()} " if accel == "tcg" else ""
    cmd = [qemu, "-M", "microvm", "-accel", accel, "-m", "512", "-smp", "1", "-nodefaults", "-no-user-config",
           "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", files["kernel"], "-initrd",
           files["initramfs"]]
    if files["rootfs"]:
        cmd += ["-drive", f"file={files['rootfs']},if=none,format=raw,id=disk0,readonly=on", "-device",
                "virtio-blk-device,drive=disk0", "-device", "virtio-rng-device",
                "-append", f"console=ttyS0 quiet panic=-1 reboot=t {tsc}-- abox-bench /usr/bin/echo "
                           f"{MARKER.decode()}"]
    else:
        cmd += ["-append", f"console=ttyS0 quiet panic=-1 reboot=t {tsc}rdinit=/bin/busybox -- echo "
                           f"{MARKER.decode()}"]
    return cmd


def read_until(p, needle, timeout):
    """Reads p.stdout until needle appears; the time it appeared (monotonic) or None."""
    buf = b""
    deadline = time.monotonic() + timeout
    fd = p.stdout.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], max(0.01, deadline - time.monotonic()))
        if not r:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        buf += chunk
        if needle in buf:
            return time.monotonic()
        buf = buf[-len(needle):]
    return None


def drain(p, timeout=60):
    try:
        p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()


def first_byte_s(files, accel, timeout):
    """One bare boot: seconds from QEMU's exec to MARKER, or None (timed out)."""
    t0 = time.monotonic()
    p = subprocess.Popen(command(files, accel), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    t = read_until(p, MARKER, timeout)
    p.kill()
    drain(p)
    return None if t is None else t - t0
