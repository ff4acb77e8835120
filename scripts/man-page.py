#!/usr/bin/env python3
"""man-page.py: a program's man page, made from the same text as its --help.

  scripts/man-page.py PROGRAM OUT.1 "SUMMARY" COMMAND...

Runs `PROGRAM --version`, `PROGRAM --help` and `PROGRAM help COMMAND` for
each COMMAND ("run", "policy check", ...), and writes OUT.1 (roff, man(7)):
NAME (PROGRAM - SUMMARY), SYNOPSIS (the usage lines), DESCRIPTION (the rest
of the top-level help), COMMANDS (each command's help, as --help prints
it), SEE ALSO. The help texts are set as they are (no fill), so the page
says exactly what --help says, column for column.

Fails (exit 1, nothing written) when the top-level help lists a command
under "Commands:" or "Modes:" that is not among COMMAND..., so a new
command cannot go missing from the page. Deterministic: no date; the
version is the program's.
"""
import os
import re
import subprocess
import sys


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise SystemExit(f"man-page.py: {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def roff_text(text):
    """Lines set verbatim: backslashes and hyphens escaped (so options copy
    and paste as typed), a leading dot or quote made harmless."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e").replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def listed_commands(help_text):
    """The first word of each line under Commands: or Modes: (two words for
    'policy check'), up to the next blank line."""
    found, inside = [], False
    for line in help_text.split("\n"):
        if line.strip() in ("Commands:", "Modes:"):
            inside = True
            continue
        if inside:
            if not line.strip():
                inside = False
                continue
            if not line.startswith("  ") or line.startswith("    "):
                continue  # a continuation line
            words = line.split()
            found.append(words)
    return found


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    program, out, summary, commands = argv[0], argv[1], argv[2], argv[3:]
    name = os.path.basename(program)
    version = run([program, "--version"]).strip()
    top = run([program, "--help"])
    for words in listed_commands(top):
        if words[0] == "help":
            continue
        if not any(c.split() == words[:len(c.split())] for c in commands):
            print(f"man-page.py: {name} --help lists '{' '.join(words[:2])}', which has no section: add it "
                  f"to the COMMAND list", file=sys.stderr)
            return 1
    usage_lines, rest = [], []
    lines = top.split("\n")
    i = 0
    while i < len(lines) and (lines[i].startswith("usage:") or (usage_lines and lines[i].startswith(" "))):
        usage_lines.append(re.sub(r"^usage: ", "", lines[i]))
        i += 1
    rest = "\n".join(lines[i:]).strip("\n")

    page = [f'.TH {name.upper()} 1 "" "{version}" "User Commands"',
            ".SH NAME", f"{name} \\- {summary}",
            ".SH SYNOPSIS", ".nf", roff_text("\n".join(usage_lines)), ".fi",
            ".SH DESCRIPTION", ".nf", roff_text(rest), ".fi",
            ".SH COMMANDS"]
    for command in commands:
        text = run([program, "help", *command.split()])
        page += [f'.SS "{name} {command}"', ".nf", roff_text(text), ".fi"]
    others = {"abox": "abox\\-net (1)", "abox-net": "abox (1)"}
    page += [".SH SEE ALSO", others.get(name, "abox (1)") + ", and the documentation in docs/ of the source tree"]
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(page) + "\n")
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
