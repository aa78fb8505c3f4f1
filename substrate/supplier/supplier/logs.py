"""Logging as the service runs in production: one access line per request, and errors.

Access lines go to stdout through a buffer that is flushed once a second (and at once for a
warning or worse), so a busy service pays no write per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

ACCESS = logging.getLogger("supplier.access")
FLUSH_EVERY_SECONDS = 1.0
QUIET_PATHS = ("/metrics", "/healthz")  # scrapes and health checks: DEBUG, not INFO


class BufferedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that leaves flushing to a timer, except for warnings and worse."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
            if record.levelno >= logging.WARNING:
                self.stream.flush()
        except Exception:  # logging must never take the service down
            self.handleError(record)


def _own_stdout() -> Any:
    """Standard output through a buffer of the log's own: a line another thread prints
    (print writes its text and its newline separately) is never split by a log line, and
    each flush writes whole lines."""
    try:
        return open(os.dup(sys.stdout.fileno()), "w", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115
    except (OSError, ValueError, AttributeError):  # no real stdout (an embedding host)
        return sys.stdout


def configure(level: str) -> BufferedHandler:
    """Log to stdout in UTC: `2026-12-03 17:49:10,123 INFO supplier.access: ...`."""
    handler = BufferedHandler(_own_stdout())
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return handler


@web.middleware
async def access_log(request: web.Request, handler: Any) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response: web.StreamResponse = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        millis = (time.perf_counter() - started) * 1000
        level = logging.WARNING if status >= 500 else logging.INFO
        if request.path in QUIET_PATHS and status < 500:
            level = logging.DEBUG
        if ACCESS.isEnabledFor(level):
            ACCESS.log(
                level,
                '%s "%s %s HTTP/%d.%d" %d %.1fms "%s"',
                request.remote or "-",
                request.method,
                request.path_qs,
                request.version.major,
                request.version.minor,
                status,
                millis,
                request.headers.get("User-Agent", "-"),
            )


def serve_logs(app: web.Application, handler: BufferedHandler) -> None:
    """Log every request of `app` and flush the buffer on a timer while it runs."""
    app.middlewares.append(access_log)

    async def flusher(_app: web.Application) -> AsyncIterator[None]:
        async def tick() -> None:
            while True:
                await asyncio.sleep(FLUSH_EVERY_SECONDS)
                handler.flush()

        task = asyncio.create_task(tick())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        handler.flush()

    app.cleanup_ctx.append(flusher)
