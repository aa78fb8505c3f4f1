"""HTTP service: an audit collector that acknowledges a batch only once it is written.

``POST /v1/events`` takes a JSON list of access events (or one event). Writing a request
takes ``AUDIT_WRITE_SECONDS`` (a range "low,high", drawn per request) whatever its size,
like a collector that makes a batch durable (fsync, a replica) before it acknowledges it;
so a sender that batches pays that once for many events, and one that posts each event
pays it for each. At most ``AUDIT_WORKERS`` requests are written at once; the others
wait. A batch is committed only while its sender still waits for the acknowledgement: if
the sender hung up before the write finished, the batch is discarded (the sender cannot
know it was stored, so it would send it again) and counted as abandoned.

An event counts when it is an object with ``time`` (a number), ``method``, ``path`` (a
string starting with "/") and ``status`` (an HTTP status); the others in a batch are
rejected and counted, and the batch's valid events are still stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger("audit")

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
MAX_BATCH = 5000


@dataclass(frozen=True)
class Capacity:
    """How long a write takes and how many run at once."""

    workers: int = 32
    write_seconds: tuple[float, float] = (0.2, 0.3)

    @classmethod
    def from_env(cls) -> Capacity:
        env = os.environ
        low, _, high = env.get("AUDIT_WRITE_SECONDS", "").partition(",")
        write = cls.write_seconds if not low else (float(low), float(high or low))
        if not 0 <= write[0] <= write[1]:
            raise ValueError(f"AUDIT_WRITE_SECONDS must be low,high with low <= high: {write}")
        return cls(workers=int(env.get("AUDIT_WORKERS", cls.workers)), write_seconds=write)


def valid(event: Any) -> bool:
    """An access event as the collector stores it."""
    if not isinstance(event, dict):
        return False
    stamp, status, path = event.get("time"), event.get("status"), event.get("path")
    return (
        isinstance(stamp, int | float)
        and not isinstance(stamp, bool)
        and isinstance(event.get("method"), str)
        and isinstance(path, str)
        and path.startswith("/")
        and isinstance(status, int)
        and not isinstance(status, bool)
        and 100 <= status <= 599
    )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter(
            "audit_events_received",
            "Events written and acknowledged, by outcome: stored, rejected (malformed), "
            "abandoned (the sender hung up before the write finished).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in ("stored", "rejected", "abandoned"):
            self.events.labels(outcome)  # every series exists from the start, at 0
        self.requests = Counter(
            "audit_requests", "Write requests, by HTTP status.", ["status"], registry=self.registry
        )
        self.latency = Histogram(
            "audit_request_duration_seconds",
            "Time from arrival to acknowledgement (waiting for a worker included).",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.writing = Gauge(
            "audit_writes_in_progress", "Requests being written.", registry=self.registry
        )


CAPACITY = web.AppKey("capacity", Capacity)
WORKERS = web.AppKey("workers", asyncio.Semaphore)
METRICS = web.AppKey("metrics", Metrics)


def _refuse(m: Metrics, status: int, message: str) -> web.Response:
    m.requests.labels(str(status)).inc()
    return web.json_response({"error": message}, status=status)


async def post_events(request: web.Request) -> web.Response:
    app = request.app
    m = app[METRICS]
    started = time.perf_counter()
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _refuse(m, 400, "the body must be JSON: an event or a list of events")
    events = body if isinstance(body, list) else [body]
    if len(events) > MAX_BATCH:
        return _refuse(m, 413, f"at most {MAX_BATCH} events a request, got {len(events)}")
    good = sum(1 for e in events if valid(e))
    cap = app[CAPACITY]
    async with app[WORKERS]:
        m.writing.inc()
        try:
            await asyncio.sleep(random.uniform(*cap.write_seconds))
        finally:
            m.writing.dec()
    transport = request.transport
    if transport is None or transport.is_closing():
        m.events.labels("abandoned").inc(len(events))
        m.requests.labels("499").inc()
        log.warning("discarded %d events: their sender hung up before the write", len(events))
        return web.Response(status=499)
    m.events.labels("stored").inc(good)
    m.events.labels("rejected").inc(len(events) - good)
    m.requests.labels("201").inc()
    m.latency.observe(time.perf_counter() - started)
    return web.json_response({"stored": good, "rejected": len(events) - good}, status=201)


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=generate_latest(request.app[METRICS].registry),
        headers={"Content-Type": CONTENT_TYPE_LATEST},
    )


def create_app(capacity: Capacity | None = None) -> web.Application:
    cap = capacity or Capacity()
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[CAPACITY] = cap
    app[WORKERS] = asyncio.Semaphore(cap.workers)
    app[METRICS] = Metrics()
    app.router.add_post("/v1/events", post_events)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def main() -> int:
    """Run from environment: HOST, PORT (DATA_DIR is accepted and unused), AUDIT_*."""
    logging.basicConfig(
        stream=sys.stdout,
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        port = int(os.environ["PORT"])
        capacity = Capacity.from_env()
    except (KeyError, ValueError) as exc:
        print(f"audit: PORT and AUDIT_* must be numbers: {exc}", file=sys.stderr)
        return 2
    host = os.environ.get("HOST", "127.0.0.1")
    log.info("collecting audit events on http://%s:%d with %s", host, port, capacity)
    web.run_app(create_app(capacity), host=host, port=port, access_log=None, print=None)
    return 0
