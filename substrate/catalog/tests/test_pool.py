from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from catalog.pool import ConnectionPool, PoolClosed, PoolExhausted


@pytest.fixture
def make_pool(db_path):
    """ConnectionPool(db_path, ...) that is closed after the test."""
    pools: list[ConnectionPool] = []

    def make(**kw) -> ConnectionPool:
        pools.append(ConnectionPool(db_path, **kw))
        return pools[-1]

    yield make
    for pool in pools:
        pool.close()


def product_name(conn, product_id):
    row = conn.execute("SELECT name FROM products WHERE id = ?", (product_id,)).fetchone()
    return row["name"]


def test_run_answers_from_a_worker_thread(make_pool):
    pool = make_pool(size=2)

    def where(conn):
        return threading.current_thread().name, conn.execute("SELECT 1").fetchone()[0]

    async def body():
        return await pool.run(where), await pool.run(product_name, 1)

    (thread, one), name = asyncio.run(body())
    assert thread.startswith("catalog-db")
    assert one == 1
    assert name.endswith("0001")
    assert pool.in_use == 0


def test_connections_are_reused_and_opened_lazily(make_pool):
    pool = make_pool(size=4)

    async def body():
        for _ in range(10):
            await pool.run(product_name, 2)
        return pool.opened

    assert asyncio.run(body()) == 1


def test_exhausted_pool_raises_after_the_timeout_and_recovers(make_pool):
    pool = make_pool(size=2, acquire_timeout=0.05)

    async def body():
        a = await pool.acquire()
        b = await pool.acquire()
        assert pool.in_use == 2
        with pytest.raises(PoolExhausted, match="all 2 database connections"):
            await pool.acquire()
        pool.release(a)
        c = await pool.acquire()
        assert c is a
        pool.release(b)
        pool.release(c)
        return pool.in_use, pool.idle

    assert asyncio.run(body()) == (0, 2)


def test_a_waiter_gets_the_connection_given_back(make_pool):
    pool = make_pool(size=1, acquire_timeout=5)

    async def body():
        held = await pool.acquire()
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        assert not waiter.done()
        pool.release(held)
        got = await waiter
        pool.release(got)
        return got is held

    assert asyncio.run(body())


def test_connection_context_returns_it_on_error(make_pool):
    pool = make_pool(size=1)

    async def body():
        with pytest.raises(ZeroDivisionError):
            async with pool.connection():
                1 / 0  # noqa: B018
        return pool.in_use

    assert asyncio.run(body()) == 0


def test_connections_are_read_only(make_pool):
    pool = make_pool(size=1)

    def write(conn):
        conn.execute("DELETE FROM products")

    with pytest.raises(Exception, match="readonly"):
        asyncio.run(pool.run(write))


def test_foreign_release_and_closed_pool_are_errors(make_pool, db_path, tmp_path: Path):
    pool = make_pool(size=1)
    other = make_pool(size=1)

    async def body():
        conn = await other.acquire()
        with pytest.raises(ValueError, match="not lent"):
            pool.release(conn)
        other.release(conn)
        pool.close()
        with pytest.raises(PoolClosed):
            await pool.acquire()

    asyncio.run(body())
    with pytest.raises(ValueError, match="size"):
        ConnectionPool(db_path, size=0)
    with pytest.raises(FileNotFoundError):
        ConnectionPool(tmp_path / "absent.db")
