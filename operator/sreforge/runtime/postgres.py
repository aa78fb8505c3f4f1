"""PostgreSQL as a service's real dependency: Debian's server, one per environment.

The server runs confined like Redis (sreforge.runtime.confine: as nobody, its data
directory its only writable path, in the dependencies' network namespace); the harness
reaches it through the gateway at the same port on its own 127.0.0.1 and runs Debian's
client programs (pg_isready, createdb) against it there.

State per case, as for the SQLite data: the scenario's data preparation writes into the
`prepared` database, which nothing connects to afterwards; every build is given a
database of its own cloned from it (`CREATE DATABASE ... TEMPLATE prepared`), so nothing
a graded case wrote (a fix's migration, an index) reaches the next one.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sreforge.runtime.process import ProcessError

PREPARED = "prepared"
USER = "postgres"
DIRECTORY = "pg"  # inside the dependency's data directory
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def bin_dir() -> Path:
    """The newest Debian PostgreSQL server's programs."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not found:
        raise ProcessError(
            "PostgreSQL's server is not installed (/usr/lib/postgresql/*/bin/postgres): "
            "bash scripts/setup.sh installs Debian's postgresql"
        )
    return found[-1].parent


def initdb_argv(data: str) -> list[str]:
    """Make a cluster in `data` (a path as the confined process sees it)."""
    return [
        str(bin_dir() / "initdb"),
        "-D",
        f"{data}/{DIRECTORY}",
        "-U",
        USER,
        "--auth=trust",  # reachable only from inside its namespace and the harness
        "--no-sync",
        "--encoding=UTF8",
        "--locale=C.UTF-8",
    ]


def server_argv(data: str, port: int) -> list[str]:
    """The server on 127.0.0.1:`port`, tuned for a throwaway cluster (no fsync)."""
    return [
        str(bin_dir() / "postgres"),
        "-D",
        f"{data}/{DIRECTORY}",
        "-p",
        str(port),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=/tmp",
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
        "-c",
        "max_connections=200",
    ]


def url(port: int, database: str) -> str:
    return f"postgresql://{USER}@127.0.0.1:{port}/{database}"


def _client(program: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir() / program), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_ready(port: int, alive: Callable[[], bool], timeout: float = 30) -> None:
    """Until the server accepts connections (pg_isready), or ProcessError."""
    deadline = time.monotonic() + timeout
    while True:
        done = _client("pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", USER)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline or not alive():
            raise ProcessError(f"postgresql on port {port} did not accept connections")
        time.sleep(0.1)


def create_database(port: int, name: str, *, template: str | None = None) -> None:
    """CREATE DATABASE `name` (from `template`), or ProcessError with the server's words."""
    if not _NAME.match(name) or (template is not None and not _NAME.match(template)):
        raise ProcessError(f"not a database name: {name!r} / {template!r}")
    args = ["-h", "127.0.0.1", "-p", str(port), "-U", USER]
    if template is not None:
        args += ["-T", template]
    done = _client("createdb", *args, name)
    if done.returncode != 0:
        raise ProcessError(f"createdb {name} on port {port}: {done.stderr.strip()}")
