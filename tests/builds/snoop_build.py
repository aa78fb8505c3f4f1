"""A scripted stand-in for a dishonest service build: it tries to reach the harness.

`snoop_build.py JSON` runs as a substrate process (PORT and DATA_DIR in its environment).
JSON names what to try: `secrets` (paths to read), `harness` (the harness's pid),
`harness_port` (a TCP port the harness listens on), `harness_socket` (a Unix socket of
the harness), `reach` (name -> port it should or should not reach). It prints one line
"sreforge-snoop-build: JSON" with what each attempt got, then answers GET /healthz on
127.0.0.1:PORT until it is stopped. It is not a real service.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path


def attempt_read(path: str) -> str:
    p = Path(path)
    try:
        if p.is_dir():
            return "listed: " + ",".join(sorted(x.name for x in p.iterdir()))
        return f"read: {len(p.read_bytes())} bytes"
    except OSError as e:
        return type(e).__name__


def attempt_write(path: str) -> str:
    try:
        Path(path).write_text("snoop\n", encoding="utf-8")
    except OSError as e:
        return type(e).__name__
    return "written"


def attempt_connect(port: int) -> str:
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except OSError as e:
            return type(e).__name__
    return "connected"


def attempt_unix(path: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
        except OSError as e:
            return type(e).__name__
    return "connected"


def attempt_signal(pid: int) -> str:
    try:
        os.kill(pid, 0)
    except OSError as e:
        return type(e).__name__
    return "signalled"


def status_field(name: str) -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def listening_ports() -> list[int]:
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(set(ports))


def main() -> int:
    plan = json.loads(sys.argv[1])
    harness = int(plan["harness"])
    libc = ctypes.CDLL(None, use_errno=True)
    data = os.environ["DATA_DIR"]
    report = {
        "uid": os.getuid(),
        "groups": os.getgroups(),
        "no_new_privs": status_field("NoNewPrivs"),
        "cap_eff": status_field("CapEff"),
        "cap_bnd": status_field("CapBnd"),
        "reads": {s: attempt_read(s) for s in plan["secrets"]},
        "via_proc": {
            f"/proc/{harness}/{what}": attempt_read(f"/proc/{harness}/{what}")
            for what in ("cwd", "root", "cmdline", "environ")
        },
        "signal_harness": attempt_signal(harness),
        "processes": sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()),
        "listening": listening_ports(),
        "harness_port": attempt_connect(int(plan["harness_port"])),
        "harness_socket": attempt_unix(plan["harness_socket"]),
        "reach": {name: attempt_connect(int(port)) for name, port in plan["reach"].items()},
        "writes": {
            p: attempt_write(p)
            for p in ("/snoop", "/usr/snoop", "/etc/snoop", str(Path.cwd() / "snoop"))
        },
        "data": attempt_write(f"{data}/snoop"),
        "scratch": attempt_write("/tmp/snoop"),
        "umount": "succeeded" if libc.umount2(b"/", 2) == 0 else "refused",
        "unshare_net": "succeeded" if libc.unshare(0x40000000) == 0 else "refused",
        "environment": sorted(os.environ),
        "root_entries": sorted(p.name for p in Path("/").iterdir()),
    }
    print("sreforge-snoop-build: " + json.dumps(report), flush=True)

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Health).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
