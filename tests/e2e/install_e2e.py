#!/usr/bin/env python3
"""End-to-end test of the install step (issue 20): `cmake --install BUILD
--prefix P` into a temporary prefix, then the installed programs, run from
there, find their parts there.

Usage:
  install_e2e.py BUILD_DIR [--keep]

What the install is held to:
- P/bin/abox and P/bin/abox-net, P/lib/abox/box-guest (each answers
  --version), P/share/abox/images/
  minimal/ (build.sh executable), P/share/abox/guest-kernel/ (vmlinux,
  VERSION, modules/), P/share/abox/modules.list, P/share/abox/examples/,
  P/share/man/man1/abox.1 and abox-net.1: exactly where engine/layout.h
  looks, and nothing installed outside P;
- the man pages render without a groff warning and hold every command's
  --help as the installed program prints it;
- the installed `abox image build minimal` (HOME and XDG_CACHE_HOME in the
  temp dir) builds the image from the installed recipe, box-guest, kernel
  and module list: image.meta names no input outside P but busybox;
- the installed `abox policy check` passes the installed examples, and
  `abox policy explain` answers from one.

Prints one line per case and 'N passed, N failed'; exits 1 on any failure.
The temp dir (prefix, cache) is removed at the end.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ABOX_COMMANDS = ["run", "image", "policy check", "policy explain", "policy suggest", "broker", "broker ca",
                 "broker nonces"]
NET_COMMANDS = ["run", "dns", "stats", "explain", "reload"]


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def run(argv, env=None, timeout=120):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


class Env:
    def __init__(self, build, tmp):
        self.build, self.tmp = build, tmp
        self.prefix = os.path.join(tmp, "prefix")
        self.abox = os.path.join(self.prefix, "bin", "abox")
        self.abox_net = os.path.join(self.prefix, "bin", "abox-net")
        self.env = dict(os.environ, HOME=os.path.join(tmp, "home"), XDG_CACHE_HOME=os.path.join(tmp, "cache"))
        for k in ("ABOX_NET", "ABOX_BOX_GUEST", "ABOX_RECIPES_DIR", "ABOX_GUEST_KERNEL_DIR"):
            self.env.pop(k, None)  # the layout must come from where abox is, nothing else
        os.makedirs(self.env["HOME"])


def case_install_puts_every_part_where_layout_looks(e):
    r = run(["cmake", "--install", e.build, "--prefix", e.prefix], timeout=600)
    expect(r.returncode == 0, f"cmake --install exited {r.returncode}: {r.stderr[-1000:]}")
    for rel, executable in (("bin/abox", True), ("bin/abox-net", True), ("lib/abox/box-guest", True),
                            ("share/abox/images/minimal/build.sh", True), ("share/abox/images/minimal/init", False),
                            ("share/abox/guest-kernel/vmlinux", False), ("share/abox/guest-kernel/VERSION", False),
                            ("share/abox/modules.list", False), ("share/abox/examples/minimal.toml", False),
                            ("share/man/man1/abox.1", False), ("share/man/man1/abox-net.1", False)):
        path = os.path.join(e.prefix, rel)
        expect(os.path.isfile(path), f"{rel} was not installed")
        if executable:
            expect(os.access(path, os.X_OK), f"{rel} is not executable")
    expect(os.path.isdir(os.path.join(e.prefix, "share/abox/guest-kernel/modules")), "the kernel's modules/")
    manifest = os.path.join(e.build, "install_manifest.txt")
    with open(manifest) as f:
        outside = [line.strip() for line in f if line.strip() and not line.startswith(e.prefix + "/")]
    expect(not outside, f"installed outside the prefix: {outside[:5]}")


def case_installed_programs_run_from_the_prefix(e):
    box_guest = os.path.join(e.prefix, "lib/abox/box-guest")
    for prog, name in ((e.abox, "abox"), (e.abox_net, "abox-net"), (box_guest, "box-guest")):
        r = run([prog, "--version"])
        expect(r.returncode == 0 and r.stdout.startswith(name + " "), f"{prog} --version: {r.stdout!r}")


def case_man_pages_hold_every_commands_help(e):
    for page, prog, commands in (("abox.1", e.abox, ABOX_COMMANDS), ("abox-net.1", e.abox_net, NET_COMMANDS)):
        path = os.path.join(e.prefix, "share/man/man1", page)
        r = run(["groff", "-man", "-Tutf8", "-ww", "-z", path])
        expect(r.returncode == 0 and not r.stderr.strip(), f"{page}: groff warns: {r.stderr[-500:]}")
        r = run(["man", "-l", path], env=dict(e.env, MANWIDTH="200", MAN_KEEP_FORMATTING="0", PAGER="cat"))
        expect(r.returncode == 0, f"man -l {page}: {r.stderr}")
        shown = " ".join(r.stdout.split())
        for command in commands:
            text = run([prog, "help", *command.split()]).stdout
            for line in text.splitlines():
                if line.strip():
                    expect(" ".join(line.split()) in shown, f"{page}: '{command}' help line missing: {line!r}")


def case_installed_abox_builds_the_image_from_installed_parts(e):
    r = run([e.abox, "image", "build", "minimal"], env=e.env, timeout=600)
    expect(r.returncode == 0, f"abox image build exited {r.returncode}: {r.stderr[-1500:]}")
    meta_path = os.path.join(e.env["XDG_CACHE_HOME"], "abox/images/minimal/image.meta")
    with open(meta_path) as f:
        meta = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    inputs = [item.split(":", 1)[0] for item in meta["inputs"].split(";") if item]
    expect(any(p.endswith("/lib/abox/box-guest") for p in inputs), f"box-guest not among the inputs: {inputs}")
    strays = [p for p in inputs if not p.startswith(e.prefix + "/") and os.path.basename(p) != "busybox"]
    expect(not strays, f"inputs from outside the prefix: {strays}")
    r = run([e.abox, "image", "ls", "--json"], env=e.env)
    expect(r.returncode == 0 and '"name":"minimal"' in r.stdout and '"current":true' in r.stdout, r.stdout)


def case_installed_abox_checks_and_explains_the_installed_examples(e):
    examples = os.path.join(e.prefix, "share/abox/examples")
    files = sorted(os.path.join(examples, f) for f in os.listdir(examples) if f.endswith(".toml"))
    expect(files, "no examples installed")
    r = run([e.abox, "policy", "check", *files])
    expect(r.returncode == 0, f"policy check: {r.returncode} {r.stderr}")
    r = run([e.abox, "policy", "explain", os.path.join(examples, "minimal.toml"), "example.com:443"])
    expect(r.returncode == 0 and "allowed" in r.stdout, f"policy explain: {r.returncode} {r.stdout}")


def main(argv):
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    build = os.path.abspath(argv[0])
    for tool in ("cmake", "groff", "man", "busybox"):
        if shutil.which(tool) is None:
            print(f"install_e2e: {tool} is missing (scripts/setup.sh installs it)")
            return 1
    tmp = tempfile.mkdtemp(prefix="abox-install-e2e-")
    e = Env(build, tmp)
    passed = failed = 0
    try:
        for fn in (case_install_puts_every_part_where_layout_looks, case_installed_programs_run_from_the_prefix,
                   case_man_pages_hold_every_commands_help,
                   case_installed_abox_builds_the_image_from_installed_parts,
                   case_installed_abox_checks_and_explains_the_installed_examples):
            try:
                fn(e)
                passed += 1
                print(f"ok   {fn.__name__[5:]}", flush=True)
            except Exception as ex:  # noqa: BLE001 - report and go on
                failed += 1
                print(f"FAIL {fn.__name__[5:]}: {type(ex).__name__}: {ex}", flush=True)
    finally:
        if keep:
            print(f"(kept {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
