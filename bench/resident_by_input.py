#!/usr/bin/env python3
"""resident_by_input.py PID MAPFILE: which inputs of a static abox-net are resident.

Reads the running program's mappings (/proc/PID/maps), which of their pages are
present (/proc/PID/pagemap, root only), and the linker map abox-net was linked
with (ABOX_STATIC_NET writes build/netstack/abox-net.map). Every resident page
of the executable (and of its .bss, the anonymous mapping right after it) is
split among the input sections that overlap it, by bytes of overlap; the part of
a page no input covers (ELF headers, padding, linker-made tables) is
"(linker)". Prints KiB per input (an archive such as libcrypto.a, or one of our
libraries) and per output section, biggest first.

Read-only: it looks at the process, never changes it.
"""
import collections
import os
import re
import struct
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")


def read_map(path):
    """[(start, end, output_section, input)] from a GNU ld map file's memory map."""
    out = []
    in_memory_map = False
    section = None
    pending = None  # an input section name whose address is on the next line
    entry = re.compile(r"^ (\S+)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$")
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("Linker script and memory map"):
                in_memory_map = True
                continue
            if not in_memory_map:
                continue
            top = re.match(r"^(\.\S+|__\S+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)", line)
            if top:
                section = top.group(1)
                pending = None
                continue
            if re.match(r"^(\.\S+|__\S+)\s*$", line):
                section = line.strip()
                continue
            if re.match(r"^ \S+\s*$", line):
                pending = line.strip()
                continue
            m = entry.match(line)
            if not m or section is None:
                continue
            name = m.group(1) or pending
            pending = None
            start, size, source = int(m.group(2), 16), int(m.group(3), 16), m.group(4).strip()
            if size == 0 or name is None or not source or source.startswith("0x"):
                continue
            if not loaded(section):
                continue
            if re.match(r"^[A-Za-z_]", source) and "(" not in source and not source.endswith((".o", ".a")):
                continue  # a symbol line, not an input section
            out.append((start, start + size, section, owner_of(source)))
    out.sort()
    return out


def loaded(section):
    """Debug info, comments and probes are in the file but never mapped (their addresses start at 0)."""
    return not section.startswith((".debug", ".comment", ".note.stapsdt", ".gnu_debug", ".stab"))


def owner_of(source):
    """libcrypto.a(x.o) -> libcrypto.a; CMakeFiles/abox-net.dir/main.cc.o -> main.cc.o."""
    archive = re.match(r"^(.*?\.a)\(", source)
    if archive:
        return os.path.basename(archive.group(1))
    return os.path.basename(source)


def program_mappings(pid):
    exe = os.path.realpath(f"/proc/{pid}/exe")
    maps = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            path = parts[5] if len(parts) >= 6 else ""
            maps.append((lo, hi, int(parts[2], 16), path))
    mine = [m for m in maps if m[3] == exe]
    if not mine:
        sys.exit(f"no mapping of {exe} in /proc/{pid}/maps")
    base = next(lo - off for lo, hi, off, path in mine if off == 0)
    last_end = max(hi for lo, hi, off, path in mine)
    bss = [(lo, hi, 0, "") for lo, hi, off, path in maps if path == "" and lo == last_end]
    return base, [(lo, hi) for lo, hi, off, path in mine] + [(lo, hi) for lo, hi, off, path in bss]


def present_pages(pid, ranges):
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        for lo, hi in ranges:
            f.seek(lo // PAGE * 8)
            data = f.read((hi - lo) // PAGE * 8)
            for i in range(len(data) // 8):
                (entry,) = struct.unpack_from("<Q", data, i * 8)
                if entry >> 63:
                    yield lo + i * PAGE


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    pid, map_path = sys.argv[1], sys.argv[2]
    inputs = read_map(map_path)
    starts = [s for s, _, _, _ in inputs]
    base, ranges = program_mappings(pid)
    by_owner = collections.Counter()
    by_section = collections.Counter()
    import bisect

    total = 0
    for page in present_pages(pid, ranges):
        lo = page - base
        hi = lo + PAGE
        total += PAGE
        covered = 0
        i = max(0, bisect.bisect_right(starts, lo) - 1)
        # Input sections are sorted and do not overlap; walk back a little for
        # a long one that starts before the page.
        while i > 0 and inputs[i - 1][1] > lo:
            i -= 1
        while i < len(inputs) and inputs[i][0] < hi:
            s, e, section, owner = inputs[i]
            overlap = min(e, hi) - max(s, lo)
            if overlap > 0:
                by_owner[owner] += overlap
                by_section[section] += overlap
                covered += overlap
            i += 1
        if covered < PAGE:
            by_owner["(linker)"] += PAGE - covered
            by_section["(none)"] += PAGE - covered
    print(f"resident in the executable's mappings and its .bss: {total // 1024} KiB")
    print(f"{'KiB':>7}  input")
    for owner, n in by_owner.most_common():
        if n >= 512:
            print(f"{n / 1024:7.0f}  {owner}")
    print(f"{'KiB':>7}  output section")
    for section, n in by_section.most_common():
        if n >= 512:
            print(f"{n / 1024:7.0f}  {section}")


if __name__ == "__main__":
    main()
