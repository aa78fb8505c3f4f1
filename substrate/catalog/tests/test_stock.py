from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from catalog.app import create_app
from catalog.stock import STOCK_POOL, add_stock_routes

Body = Callable[[TestClient], Awaitable[Any]]


def run_with_stock(db_path: Path, body: Body, **pool: Any) -> Any:
    """Run ``body(client)`` against the service with its stock routes, on a real socket."""

    async def main() -> Any:
        app = create_app(str(db_path))
        add_stock_routes(app, str(db_path), **pool)
        async with TestClient(TestServer(app)) as client:
            return await body(client)

    return asyncio.run(main())


def expected_stock(db_path: Path, product_id: int) -> dict[str, Any]:
    """Stock figures straight from SQL, independent of the service code."""
    conn = sqlite3.connect(db_path)
    try:
        levels = conn.execute(
            "SELECT warehouse, on_hand, updated_at FROM stock WHERE product_id = ? "
            "ORDER BY warehouse",
            (product_id,),
        ).fetchall()
        restock = conn.execute(
            "SELECT warehouse, eta FROM restocks WHERE product_id = ? ORDER BY eta LIMIT 1",
            (product_id,),
        ).fetchone()
    finally:
        conn.close()
    return {"levels": levels, "restock": restock}


def products_by_stock(db_path: Path) -> tuple[int, int]:
    """(a product on hand somewhere, a product sold out everywhere) of the test catalogue."""
    conn = sqlite3.connect(db_path)
    try:
        rows = conn.execute(
            "SELECT product_id, SUM(on_hand) FROM stock GROUP BY product_id ORDER BY product_id"
        ).fetchall()
    finally:
        conn.close()
    in_stock = next(pid for pid, total in rows if total > 0)
    sold_out = next(pid for pid, total in rows if total == 0)
    return in_stock, sold_out


def get_stock(db_path: Path, product_id: int | str) -> tuple[int, dict[str, Any]]:
    async def body(client: TestClient) -> tuple[int, dict[str, Any]]:
        resp = await client.get(f"/products/{product_id}/stock")
        return resp.status, await resp.json()

    return run_with_stock(db_path, body)


def test_stock_matches_the_snapshot(db_path):
    in_stock, _ = products_by_stock(db_path)
    status, stock = get_stock(db_path, in_stock)
    want = expected_stock(db_path, in_stock)
    assert status == 200
    assert stock["id"] == in_stock
    assert stock["in_stock"] is True
    assert stock["warehouses"] == [{"warehouse": w, "on_hand": n} for w, n, _ in want["levels"]]
    assert stock["on_hand"] == sum(n for _, n, _ in want["levels"]) > 0
    assert stock["as_of"] == max(t for _, _, t in want["levels"])
    assert stock["restock"] is None


def test_sold_out_product_names_its_restock(db_path):
    _, sold_out = products_by_stock(db_path)
    status, stock = get_stock(db_path, sold_out)
    want = expected_stock(db_path, sold_out)
    assert status == 200
    assert stock["id"] == sold_out
    assert stock["in_stock"] is False
    assert stock["on_hand"] == 0
    assert len(stock["warehouses"]) == len(want["levels"]) > 0
    warehouse, eta = want["restock"]
    assert stock["restock"] == {"warehouse": warehouse, "eta": eta}


def test_every_stock_answer_is_its_own_product(db_path):
    async def body(client: TestClient) -> list[int]:
        out = []
        for pid in (1, 2, 3, 1):
            resp = await client.get(f"/products/{pid}/stock")
            assert resp.status == 200, pid
            out.append((await resp.json())["id"])
        return out

    assert run_with_stock(db_path, body) == [1, 2, 3, 1]


@pytest.mark.parametrize(
    ("product_id", "status"),
    [("0", 404), ("10000", 404), ("99999999999999999999999", 404), ("abc", 400), ("-1", 400)],
)
def test_bad_and_unknown_ids(db_path, product_id, status):
    got, payload = get_stock(db_path, product_id)
    assert got == status
    assert "error" in payload


def test_busy_pool_answers_503_then_recovers(db_path):
    in_stock, _ = products_by_stock(db_path)

    async def body(client: TestClient) -> tuple[int, str | None, int]:
        pool = client.app[STOCK_POOL]
        held = await pool.acquire()
        busy = await client.get(f"/products/{in_stock}/stock")
        pool.release(held)
        ok = await client.get(f"/products/{in_stock}/stock")
        return busy.status, busy.headers.get("Retry-After"), ok.status

    assert run_with_stock(db_path, body, pool_size=1, acquire_timeout=0.05) == (503, "1", 200)


def test_stock_requests_are_counted_by_route(db_path):
    async def body(client: TestClient) -> str:
        assert (await client.get("/products/1/stock")).status == 200
        return await (await client.get("/metrics")).text()

    text = run_with_stock(db_path, body)
    assert (
        'catalog_http_requests_total{method="GET",route="/products/{id}/stock",status="200"} 1.0'
        in text
    )


def test_stock_tables_are_deterministic_and_sized(tmp_path):
    from catalog import seed, stockdata

    def dump(path: Path) -> tuple[list[Any], ...]:
        conn = sqlite3.connect(path)
        try:
            return tuple(
                conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in ("stock", "restocks", "stock_movements")
            )
        finally:
            conn.close()

    a, b = tmp_path / "a.db", tmp_path / "b.db"
    seed.build(a, products=6, reviews=40, seed=5)
    seed.build(b, products=6, reviews=40, seed=5)
    assert dump(a) == dump(b)
    stock, restocks, movements = dump(a)
    assert len(stock) == 6 * len(stockdata.WAREHOUSES)
    assert len(movements) == stockdata.movement_count(40)
    assert {r[1] for r in movements} <= set(range(1, 7))
    sold_out = {
        pid for pid in range(1, 7) if all(on_hand == 0 for p, _, on_hand, _ in stock if p == pid)
    }
    assert {r[0] for r in restocks} <= sold_out  # restocks are scheduled for sold-out products only
    assert restocks
