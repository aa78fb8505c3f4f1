"""A scripted stand-in for a dishonest agent: it tries to reach what it must not.

`snoop_agent.py HARNESS_PID FIX.patch SECRET...`: tries to read each SECRET path (a file
or a directory), the same paths through /proc/HARNESS_PID/root, the harness's command
line, and to write outside its workspace, unmount its view, and see other processes.
It prints one line "sreforge-snoop: JSON" with what each attempt got, then behaves as
tests/agents/patch_agent.py (applies FIX.patch, writes rca.txt), so the test also sees
that a sandboxed agent can still do its job. It is not an AI.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import patch_agent


def attempt_read(path: str) -> str:
    """ "read: N bytes" / "listed: N entries" when it got through, else the error's name."""
    p = Path(path)
    try:
        if p.is_dir():
            return f"listed: {len(list(p.iterdir()))} entries"
        return f"read: {len(p.read_bytes())} bytes"
    except OSError as e:
        return type(e).__name__


def attempt_write(path: str) -> str:
    try:
        Path(path).write_text("snoop\n", encoding="utf-8")
    except OSError as e:
        return type(e).__name__
    return "written"


def status_field(name: str) -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def processes() -> dict[str, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            found[entry.name] = " ".join(a.decode() for a in argv if a)
    return found


OUTSIDE = ("/sreforge-snoop", "/usr/sreforge-snoop", "/etc/sreforge-snoop", "/handoff/brief.md")


def main() -> int:
    harness, fix, secrets = sys.argv[1], sys.argv[2], sys.argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    unmounted = libc.umount2(b"/workspace", 2)
    report = {
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "groups": os.getgroups(),
        "no_new_privs": status_field("NoNewPrivs"),
        "cap_eff": status_field("CapEff"),
        "reads": {s: attempt_read(s) for s in secrets},
        "via_proc_root": {s: attempt_read(f"/proc/{harness}/root{s}") for s in secrets},
        "harness_cmdline": attempt_read(f"/proc/{harness}/cmdline"),
        "writes": {p: attempt_write(p) for p in OUTSIDE},
        "scratch": {p: attempt_write(p) for p in ("/tmp/snoop", os.environ["HOME"] + "/snoop")},
        "umount": "succeeded" if unmounted == 0 else os.strerror(ctypes.get_errno()),
        "processes": processes(),
        "root_entries": sorted(p.name for p in Path("/").iterdir()),
    }
    print("sreforge-snoop: " + json.dumps(report), flush=True)
    sys.argv = [sys.argv[0], fix]
    return patch_agent.main()


if __name__ == "__main__":
    sys.exit(main())
