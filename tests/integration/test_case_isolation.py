"""Cases of a warm session do not share state: each restored baseline starts on the data as
the scenario prepared it, with an empty Redis.

Seen in the first full validation on warm sessions: a fix that creates SQLite indexes at
start-up (compound-cache-and-index, fixes/index-the-lookups.patch) left them in the shared
data directory, and a later decoy that restores only the cache then passed (0.916) on the
indexes it inherited. Here a real Redis server and the real catalog seed are used.
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sreforge.runtime.environment import LocalEnvironment
from sreforge.runtime.process import free_port
from sreforge.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "latency-cache-stampede"


def resp(port: int, *words: str) -> bytes:
    """One command in Redis's wire protocol; the raw answer."""
    cmd = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(cmd.encode())
        return conn.recv(256)


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    server = shutil.which("redis-server") or "redis-server"
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if resp(port, "PING").startswith(b"+PONG"):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_each_restored_baseline_starts_on_the_prepared_data_and_an_empty_redis(
    tmp_path: Path, redis_port: int
) -> None:
    env = LocalEnvironment(load_scenario(SCENARIO), ROOT, tmp_path / "env")
    env.dir.mkdir()
    env.prepare_trees()
    seed = [a.replace("{data_dir}", str(env.data_dir)) for a in env.scenario.service.prepare]
    subprocess.run(seed, cwd=env.healthy, check=True, capture_output=True, timeout=120)
    shutil.copytree(env.data_dir, env.dir / "data-prepared")  # as setup() keeps it
    env.redis_port = redis_port
    (db,) = env.data_dir.glob("*.db")
    # a graded case writes: an index in the database, a cached page in Redis
    with sqlite3.connect(db) as conn:
        table = conn.execute("select name from sqlite_master where type='table'").fetchone()[0]
        column = conn.execute(f"pragma table_info({table})").fetchone()[1]
        conn.execute(f"create index case_index on {table}({column})")
    assert resp(redis_port, "SET", "page:1", "cached").startswith(b"+OK")

    env.fresh_state("baseline-2")

    assert env.data_dir == env.dir / "data-baseline-2"
    with sqlite3.connect(env.data_dir / db.name) as conn:
        names = {r[0] for r in conn.execute("select name from sqlite_master")}
    assert "case_index" not in names  # the next case's build does not inherit it
    assert resp(redis_port, "EXISTS", "page:1") == b":0\r\n"
    with sqlite3.connect(db) as conn:  # the build that wrote it keeps its own data
        assert "case_index" in {r[0] for r in conn.execute("select name from sqlite_master")}
