"""Checks that kiln's --help and its parser agree, flag for flag.

usage: check_flags.py KILN_SOURCES_DIR

For `kiln run`, `kiln generate`, `kiln bench` and `kiln serve`: the flags --help lists equal the flags
--list-flags prints (the parser's table), the parser accepts each of them and
rejects one that is not there, and every flag the sources read
(args.has/get/getInt/getDouble("NAME")) is listed. `kiln --help` lists every
subcommand's flags. Prints each disagreement and exits 1 on any.
"""
import pathlib
import re
import subprocess
import sys

FLAG = re.compile(r"^  (--[a-z0-9][a-z0-9-]*)", re.M)
READ = re.compile(r'args\s*(?:\.|->)\s*(?:has|get|getInt|getDouble)\(\s*"([a-z0-9-]+)"')
problems = []


def kiln(*args):
    return subprocess.run(["kiln", *args], capture_output=True, text=True)


def help_flags(*command):
    out = kiln(*command, "--help")
    if out.returncode != 0 or out.stderr:
        problems.append(f"kiln {' '.join(command)} --help: exit {out.returncode}, stderr {out.stderr!r}")
    return out.stdout, set(FLAG.findall(out.stdout))


all_help = set()
for sub in ("run", "generate", "bench", "serve"):
    text, documented = help_flags(sub)
    if kiln(sub, "-h").stdout != text:
        problems.append(f"kiln {sub} -h differs from kiln {sub} --help")
    listing = kiln(sub, "--list-flags")
    parsed = {}
    for line in listing.stdout.split():
        name, _, placeholder = line.partition("=")
        parsed[name] = placeholder
    if listing.returncode != 0 or not parsed:
        problems.append(f"kiln {sub} --list-flags: exit {listing.returncode}, nothing listed")
    for flag in sorted(parsed.keys() - documented):
        problems.append(f"kiln {sub}: {flag} is parsed but not in --help")
    for flag in sorted(documented - parsed.keys()):
        problems.append(f"kiln {sub}: {flag} is in --help but not parsed")
    # The parser accepts each (no MODEL is given: it fails on that after parsing).
    for flag, placeholder in sorted(parsed.items()):
        out = kiln(sub, flag, *(["1"] if placeholder else []))
        if "unknown option" in out.stderr:
            problems.append(f"kiln {sub} rejects {flag}: {out.stderr.strip()}")
    out = kiln(sub, "--no-such-flag")
    if out.returncode == 0 or f"unknown option --no-such-flag for kiln {sub}" not in out.stderr:
        problems.append(f"kiln {sub} --no-such-flag was not refused: {out.stderr.strip()!r}")
    all_help |= documented

_, top = help_flags()
for flag in sorted(all_help - top):
    problems.append(f"kiln --help: {flag} is missing")

for source in sorted(pathlib.Path(sys.argv[1]).glob("*.cc")):
    for name in READ.findall(source.read_text()):
        if f"--{name}" not in all_help:
            problems.append(f"{source.name} reads --{name}, which no --help lists")

print("\n".join(problems) if problems else f"{len(all_help)} flags: --help and the parser agree")
sys.exit(1 if problems else 0)
