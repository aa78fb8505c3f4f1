"""HTTP service: product pages backed by the SQLite catalogue."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from .cache import SimpleCache
from .db import ProductRepository
from .metrics import Metrics

log = logging.getLogger("catalog")

PRODUCT_CACHE_TIMEOUT = 300  # seconds; the catalogue changes at most daily
PRODUCT_CACHE_SIZE = 1000
_MAX_SQLITE_INT = 2**63 - 1
_PRODUCT_ID = re.compile(r"[0-9]+")

REPOSITORY = web.AppKey("repository", ProductRepository)
PRODUCT_CACHE = web.AppKey("product_cache", SimpleCache)
METRICS = web.AppKey("metrics", Metrics)


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _route_label(request: web.Request) -> str:
    # The route template, not the raw path, keeps label cardinality bounded.
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def instrument(request: web.Request, handler: Any) -> web.StreamResponse:
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
        request.app[METRICS].observe_request(
            _route_label(request), request.method, status, time.perf_counter() - started
        )


def _load_product(app: web.Application, product_id: int) -> dict[str, Any] | None:
    cache = app[PRODUCT_CACHE]
    metrics = app[METRICS]
    product = cache.get(product_id)
    if product is not None:
        metrics.cache_hits.inc()
        return product
    metrics.cache_misses.inc()
    product = app[REPOSITORY].get_product(product_id)
    if product is not None:
        cache.set(product_id, product)
    return product


async def get_product(request: web.Request) -> web.Response:
    raw = request.match_info["id"]
    if not _PRODUCT_ID.fullmatch(raw):
        return _json_error(400, f"product id must be a positive integer, got {raw!r}")
    product_id = int(raw)
    product = _load_product(request.app, product_id) if product_id <= _MAX_SQLITE_INT else None
    if product is None:
        return _json_error(404, f"product {product_id} not found")
    return web.json_response(product)


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _close_repository(app: web.Application) -> None:
    app[REPOSITORY].close()


def create_app(db_path: str, *, redis_url: str | None = None) -> web.Application:
    """Build the catalogue app over the SQLite database at ``db_path``.

    ``redis_url`` is accepted so deployments can pass REDIS_URL uniformly;
    this build keeps its product cache in process and does not use it.
    """
    del redis_url
    app = web.Application(middlewares=[instrument])
    app[METRICS] = Metrics()
    app[REPOSITORY] = ProductRepository(db_path)
    app[PRODUCT_CACHE] = SimpleCache(
        threshold=PRODUCT_CACHE_SIZE, default_timeout=PRODUCT_CACHE_TIMEOUT
    )
    app.router.add_get("/products/{id}", get_product)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.on_cleanup.append(_close_repository)
    return app


def main() -> int:
    """Run the service from environment: HOST, PORT, DATA_DIR, REDIS_URL."""
    from . import logs  # here, not at the top: the service's logging is main()'s concern

    log_handler = logs.configure(os.environ.get("LOG_LEVEL", "INFO"))
    try:
        port = int(os.environ["PORT"])
    except (KeyError, ValueError):
        print("catalog: PORT must be set to an integer", file=sys.stderr)
        return 2
    host = os.environ.get("HOST", "127.0.0.1")
    db_path = Path(os.environ.get("DATA_DIR", "data")) / "catalog.db"
    if not db_path.is_file():
        print(
            f"catalog: no database at {db_path}; create it with `python -m catalog.seed {db_path}`",
            file=sys.stderr,
        )
        return 2
    app = create_app(str(db_path), redis_url=os.environ.get("REDIS_URL") or None)
    logs.serve_logs(app, log_handler)  # an access line per request, flushed once a second
    from .stock import add_stock_routes  # here, not at the top: stock imports this module

    add_stock_routes(app, str(db_path))
    log.info("serving %s on http://%s:%d", db_path, host, port)
    # run_app turns SIGTERM/SIGINT into a graceful shutdown (on_cleanup runs).
    web.run_app(app, host=host, port=port, access_log=None, print=None, shutdown_timeout=5.0)
    log.info("stopped")
    return 0
