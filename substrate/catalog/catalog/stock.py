"""Stock levels: ``GET /products/{id}/stock``, answered from the warehouse snapshot.

Queries run in the connection pool's worker threads (catalog.pool), never on the event
loop. When every connection stays lent out for the acquire timeout the answer is a 503
with Retry-After, so a saturated database sheds load instead of queueing it.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from aiohttp import web

from .app import _MAX_SQLITE_INT, _PRODUCT_ID, _json_error
from .pool import DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_SIZE, ConnectionPool, PoolExhausted

log = logging.getLogger("catalog.stock")

STOCK_POOL = web.AppKey("stock_pool", ConnectionPool)

_PRODUCT_SQL = "SELECT 1 FROM products WHERE id = ?"
_LEVELS_SQL = """
SELECT warehouse, on_hand, updated_at FROM stock WHERE product_id = ? ORDER BY warehouse
"""
_RESTOCK_SQL = """
SELECT warehouse, eta FROM restocks WHERE product_id = ? ORDER BY eta, warehouse LIMIT 1
"""


def stock_levels(conn: sqlite3.Connection, product_id: int) -> list[dict[str, Any]] | None:
    """Per-warehouse levels of a product (warehouse order), or None for an unknown product."""
    if conn.execute(_PRODUCT_SQL, (product_id,)).fetchone() is None:
        return None
    return [dict(row) for row in conn.execute(_LEVELS_SQL, (product_id,))]


def next_restock(conn: sqlite3.Connection, product_id: int) -> dict[str, Any] | None:
    """The earliest scheduled delivery of a product, or None."""
    row = conn.execute(_RESTOCK_SQL, (product_id,)).fetchone()
    return dict(row) if row is not None else None


def stock_body(
    product_id: int, levels: list[dict[str, Any]], restock: dict[str, Any] | None
) -> dict[str, Any]:
    """The JSON answer for one product."""
    on_hand = sum(level["on_hand"] for level in levels)
    return {
        "id": product_id,
        "in_stock": on_hand > 0,
        "on_hand": on_hand,
        "warehouses": [
            {"warehouse": level["warehouse"], "on_hand": level["on_hand"]} for level in levels
        ],
        "restock": restock,
        "as_of": max((level["updated_at"] for level in levels), default=None),
    }


def _busy(exc: PoolExhausted) -> web.Response:
    log.warning("stock lookup shed: %s", exc)
    return web.json_response(
        {"error": "stock service busy, retry later"}, status=503, headers={"Retry-After": "1"}
    )


async def get_stock(request: web.Request) -> web.Response:
    raw = request.match_info["id"]
    if not _PRODUCT_ID.fullmatch(raw):
        return _json_error(400, f"product id must be a positive integer, got {raw!r}")
    product_id = int(raw)
    if product_id > _MAX_SQLITE_INT:
        return _json_error(404, f"product {product_id} not found")
    pool = request.app[STOCK_POOL]
    try:
        async with pool.connection() as conn:
            levels = await pool.call(conn, stock_levels, product_id)
            if levels is None:
                return _json_error(404, f"product {product_id} not found")
            restock = None
            if not any(level["on_hand"] for level in levels):
                # Sold out everywhere: tell shoppers when it is back.
                restock = await pool.call(conn, next_restock, product_id)
    except PoolExhausted as exc:
        return _busy(exc)
    return web.json_response(stock_body(product_id, levels, restock))


async def _close_pool(app: web.Application) -> None:
    app[STOCK_POOL].close()


def add_stock_routes(
    app: web.Application,
    db_path: str,
    *,
    pool_size: int = DEFAULT_SIZE,
    acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT,
) -> None:
    """Serve ``GET /products/{id}/stock`` from ``app`` over its own connection pool."""
    app[STOCK_POOL] = ConnectionPool(db_path, size=pool_size, acquire_timeout=acquire_timeout)
    app.router.add_get("/products/{id}/stock", get_stock)
    app.on_cleanup.append(_close_pool)
