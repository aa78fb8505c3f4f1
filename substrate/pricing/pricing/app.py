"""HTTP service: shop prices for SKUs, from the supplier's quotes plus the markup."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from . import config, logs
from .metrics import Metrics
from .supplier import NotFound, SupplierClient, SupplierError

log = logging.getLogger("pricing")

_SKU = re.compile(r"[0-9]{1,12}")

METRICS = web.AppKey("metrics", Metrics)
SUPPLIER = web.AppKey("supplier", SupplierClient)


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _route_label(request: web.Request) -> str:
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
        seconds = time.perf_counter() - started
        route = _route_label(request)
        m = request.app[METRICS]
        m.requests.labels(route, str(status)).inc()
        m.latency.labels(route).observe(seconds)
        if route.startswith("/prices"):
            logs.ACCESS.info(
                logs.access_line(
                    request.method,
                    request.path_qs,
                    status,
                    seconds * 1000,
                    user_agent=request.headers.get("User-Agent", ""),
                    remote=request.remote or "",
                )
            )


def price_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The shop's answer for one supplier quote."""
    cost = int(doc["unit_cost_cents"])
    in_stock = sum(1 for w in doc.get("availability", ()) if int(w["quantity"]) > 0)
    sku = int(doc["sku"])
    return {
        "id": sku,
        "sku": sku,
        "price_cents": round(cost * (1 + config.MARKUP)),
        "currency": doc.get("currency", "EUR"),
        "warehouses_in_stock": in_stock,
    }


async def get_price(request: web.Request) -> web.Response:
    raw = request.match_info["sku"]
    if not _SKU.fullmatch(raw) or int(raw) < 1:
        return _json_error(400, f"sku must be a positive integer, got {raw!r}")
    client = request.app[SUPPLIER]
    before = client.attempts
    try:
        doc = await client.quote(int(raw))
    except NotFound as exc:
        return _json_error(404, str(exc))
    except SupplierError as exc:
        return _json_error(502, str(exc))
    finally:
        request.app[METRICS].supplier_attempts.inc(client.attempts - before)
    return web.json_response(price_of(doc))


async def healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def create_app(
    supplier_url: str,
    *,
    supplier_config: config.SupplierClientConfig | None = None,
    app_metrics: Metrics | None = None,
) -> web.Application:
    """Build the pricing app in front of the supplier at ``supplier_url``."""
    app = web.Application(middlewares=[instrument])
    app[METRICS] = app_metrics or Metrics()

    async def session_ctx(app: web.Application) -> Any:
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(connector=connector) as session:
            app[SUPPLIER] = SupplierClient(
                supplier_url, supplier_config or config.SUPPLIER, session
            )
            yield

    app.cleanup_ctx.append(session_ctx)
    app.router.add_get("/prices/{sku}", get_price)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def main() -> int:
    """Run from environment: HOST, PORT, SUPPLIER_URL (DATA_DIR is accepted and unused)."""
    app_metrics = Metrics()
    logs.configure(os.environ.get("LOG_LEVEL", "INFO"), app_metrics.log_bytes)
    try:
        port = int(os.environ["PORT"])
    except (KeyError, ValueError):
        print("pricing: PORT must be set to an integer", file=sys.stderr)
        return 2
    supplier_url = os.environ.get("SUPPLIER_URL", "")
    if not supplier_url.startswith(("http://", "https://")):
        print("pricing: SUPPLIER_URL must be the supplier's http(s) URL", file=sys.stderr)
        return 2
    host = os.environ.get("HOST", "127.0.0.1")
    app = create_app(supplier_url, app_metrics=app_metrics)
    log.info("serving prices on http://%s:%d from %s", host, port, supplier_url)
    web.run_app(app, host=host, port=port, access_log=None, print=None, shutdown_timeout=5.0)
    return 0
