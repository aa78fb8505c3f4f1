"""A small bounded pool of read-only SQLite connections for queries run off the event loop.

Queries run in worker threads (one per connection), so a slow query never stalls the
event loop; the pool bounds how many run at once. A request that finds every connection
lent out waits up to ``acquire_timeout`` seconds, then gets :class:`PoolExhausted`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_SIZE = 8
DEFAULT_ACQUIRE_TIMEOUT = 0.5  # seconds


class PoolExhausted(RuntimeError):
    """Every connection stayed lent out for the whole acquire timeout."""


class PoolClosed(RuntimeError):
    """The pool was closed."""


class ConnectionPool:
    """At most ``size`` connections to the SQLite file at ``db_path``, opened lazily.

    Use ``async with pool.connection() as conn`` and run queries with
    ``await pool.call(conn, fn, *args)`` (``fn(conn, *args)`` runs in a worker thread),
    or ``await pool.run(fn, *args)`` for a single call. Every acquired connection must go
    back with :meth:`release`; ``connection()`` does that for you.
    Use from one event loop.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        size: int = DEFAULT_SIZE,
        acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT,
    ) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        if acquire_timeout <= 0:
            raise ValueError("acquire_timeout must be positive")
        path = Path(db_path)
        if not path.is_file():
            raise FileNotFoundError(f"catalogue database not found: {path}")
        self.db_path = path
        self.size = size
        self.acquire_timeout = acquire_timeout
        self._idle: list[sqlite3.Connection] = []
        self._lent: set[int] = set()
        self._opened = 0
        self._slots = asyncio.Semaphore(size)
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="catalog-db")
        self._closed = False

    # ---- figures -----------------------------------------------------------------

    @property
    def in_use(self) -> int:
        """Connections lent out right now."""
        return len(self._lent)

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def opened(self) -> int:
        return self._opened

    # ---- lending -----------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # Read-only like the rest of the service; used by one worker thread at a time.
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        return conn

    async def acquire(self) -> sqlite3.Connection:
        """Borrow a connection; raises PoolExhausted after ``acquire_timeout`` seconds."""
        if self._closed:
            raise PoolClosed("connection pool is closed")
        try:
            async with asyncio.timeout(self.acquire_timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise PoolExhausted(
                f"all {self.size} database connections in use for {self.acquire_timeout}s"
            ) from None
        if self._idle:
            conn = self._idle.pop()
        else:
            try:
                conn = self._connect()
            except BaseException:
                self._slots.release()
                raise
            self._opened += 1
        self._lent.add(id(conn))
        return conn

    def release(self, conn: sqlite3.Connection) -> None:
        """Give a borrowed connection back."""
        if id(conn) not in self._lent:
            raise ValueError("connection was not lent by this pool")
        self._lent.discard(id(conn))
        if self._closed:
            conn.close()
        else:
            self._idle.append(conn)
        self._slots.release()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[sqlite3.Connection]:
        """Borrow a connection for the ``async with`` block; it always goes back."""
        conn = await self.acquire()
        try:
            yield conn
        finally:
            self.release(conn)

    # ---- running queries ----------------------------------------------------------

    async def call(self, conn: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in a worker thread and return its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, conn, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Borrow a connection, run ``fn(conn, *args)`` in a worker thread, give it back."""
        async with self.connection() as conn:
            return await self.call(conn, fn, *args)

    def close(self) -> None:
        """Close idle connections now and lent ones when they come back."""
        self._closed = True
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        self._executor.shutdown(wait=True)
