"""HTTP service: supplier quotes with a realistic latency profile and bounded capacity.

A quote is computed by one of a fixed number of workers (``SUPPLIER_WORKERS``, like a
thread pool in front of the supplier's ERP). Most SKUs take tens of milliseconds; every
``SUPPLIER_SLOW_EVERY``-th SKU needs a warehouse availability check and takes
``SUPPLIER_SLOW_SECONDS``. Requests beyond the workers wait in a bounded queue
(``SUPPLIER_QUEUE``); when that is full the supplier answers 503 at once. A request whose
client gave up keeps its worker until the quote is done (aiohttp does not cancel handlers
on disconnect), so abandoned attempts still cost capacity, as they do in a real backend.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import re
import sys
import time
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger("supplier")

_SKU = re.compile(r"[0-9]{1,12}")
WAREHOUSES = 600  # per-warehouse availability in every quote (~35 KB of JSON at 600)
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class Capacity:
    """How fast and how wide the supplier is."""

    workers: int = 6
    queue: int = 200
    fast_seconds: tuple[float, float] = (0.02, 0.04)
    slow_every: int = 50
    slow_seconds: float = 1.0
    warehouses: int = WAREHOUSES

    @classmethod
    def from_env(cls) -> Capacity:
        env = os.environ
        return cls(
            workers=int(env.get("SUPPLIER_WORKERS", cls.workers)),
            queue=int(env.get("SUPPLIER_QUEUE", cls.queue)),
            slow_every=int(env.get("SUPPLIER_SLOW_EVERY", cls.slow_every)),
            slow_seconds=float(env.get("SUPPLIER_SLOW_SECONDS", cls.slow_seconds)),
            warehouses=int(env.get("SUPPLIER_WAREHOUSES", cls.warehouses)),
        )

    def service_seconds(self, sku: int) -> float:
        if self.slow_every > 0 and sku % self.slow_every == 0:
            return self.slow_seconds
        return random.uniform(*self.fast_seconds)


def unit_cost_cents(sku: int) -> int:
    """The supplier's list price of a SKU: deterministic, between 1.00 and 500.00."""
    digest = hashlib.sha256(f"sku-{sku}".encode()).digest()
    return 100 + int.from_bytes(digest[:4], "big") % 49_901


def quote(sku: int, warehouses: int = WAREHOUSES) -> dict[str, object]:
    """The quote document for a SKU (deterministic), with `warehouses` availability rows."""
    digest = hashlib.sha256(f"stock-{sku}".encode()).digest()
    availability = [
        {
            "warehouse": f"WH-{w:04d}",
            "quantity": (digest[w % 32] * (w + 1)) % 97,
            "eta_days": 1 + (digest[(w + 7) % 32] % 14),
        }
        for w in range(warehouses)
    ]
    return {
        "sku": sku,
        "unit_cost_cents": unit_cost_cents(sku),
        "currency": "EUR",
        "availability": availability,
    }


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "supplier_requests_total",
            "Quote requests, by HTTP status.",
            ["status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "supplier_request_duration_seconds",
            "Time from arrival to answer (queueing included).",
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.busy = Gauge(
            "supplier_busy_workers", "Workers computing a quote.", registry=self.registry
        )
        self.queued = Gauge(
            "supplier_queued_requests", "Requests waiting for a worker.", registry=self.registry
        )


CAPACITY = web.AppKey("capacity", Capacity)
WORKERS = web.AppKey("workers", asyncio.Semaphore)
METRICS = web.AppKey("metrics", Metrics)
WAITING = web.AppKey("waiting", list)


async def get_quote(request: web.Request) -> web.Response:
    app = request.app
    started = time.perf_counter()
    m = app[METRICS]
    raw = request.match_info["sku"]
    if not _SKU.fullmatch(raw) or int(raw) < 1:
        m.requests.labels("400").inc()
        return web.json_response(
            {"error": f"sku must be a positive integer, got {raw!r}"}, status=400
        )
    sku = int(raw)
    cap = app[CAPACITY]
    waiting = app[WAITING]
    if waiting[0] >= cap.queue:
        m.requests.labels("503").inc()
        return web.json_response({"error": "supplier busy"}, status=503)
    waiting[0] += 1
    m.queued.inc()
    queued = True
    try:
        async with app[WORKERS]:
            waiting[0] -= 1
            m.queued.dec()
            queued = False
            m.busy.inc()
            try:
                await asyncio.sleep(cap.service_seconds(sku))
                body = quote(sku, cap.warehouses)
            finally:
                m.busy.dec()
    finally:
        if queued:  # cancelled (server shutdown) while waiting for a worker
            waiting[0] -= 1
            m.queued.dec()
    m.requests.labels("200").inc()
    m.latency.observe(time.perf_counter() - started)
    return web.json_response(body)


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=generate_latest(request.app[METRICS].registry),
        headers={"Content-Type": CONTENT_TYPE_LATEST},
    )


def create_app(capacity: Capacity | None = None) -> web.Application:
    cap = capacity or Capacity()
    app = web.Application()
    app[CAPACITY] = cap
    app[WORKERS] = asyncio.Semaphore(cap.workers)
    app[METRICS] = Metrics()
    app[WAITING] = [0]
    app.router.add_get("/quotes/{sku}", get_quote)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def main() -> int:
    """Run from environment: HOST, PORT (DATA_DIR is accepted and unused), SUPPLIER_*."""
    from . import logs  # here, not at the top: the service's logging is main()'s concern

    log_handler = logs.configure(os.environ.get("LOG_LEVEL", "INFO"))
    try:
        port = int(os.environ["PORT"])
        capacity = Capacity.from_env()
    except (KeyError, ValueError) as exc:
        print(f"supplier: PORT and SUPPLIER_* must be numbers: {exc}", file=sys.stderr)
        return 2
    host = os.environ.get("HOST", "127.0.0.1")
    log.info("serving quotes on http://%s:%d with %s", host, port, capacity)
    app = create_app(capacity)
    logs.serve_logs(app, log_handler)  # an access line per request, flushed once a second
    web.run_app(app, host=host, port=port, access_log=None, print=None)
    return 0
