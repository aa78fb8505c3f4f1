"""The supplier on a real local socket: quotes, capacity, shedding, metrics."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from supplier.app import WAREHOUSES, Capacity, create_app, unit_cost_cents

FAST = Capacity(workers=2, queue=2, slow_every=5, slow_seconds=0.3)


def run(body: Any, capacity: Capacity = FAST) -> Any:
    async def main() -> Any:
        async with TestClient(TestServer(create_app(capacity))) as client:
            return await body(client)

    return asyncio.run(main())


def test_quote_is_deterministic_and_complete() -> None:
    async def body(client: TestClient) -> list[Any]:
        out = []
        for _ in range(2):
            resp = await client.get("/quotes/42")
            assert resp.status == 200
            out.append(await resp.json())
        return out

    first, second = run(body)
    assert first == second
    assert first["sku"] == 42
    assert first["unit_cost_cents"] == unit_cost_cents(42)
    assert 100 <= first["unit_cost_cents"] <= 50_000
    assert len(first["availability"]) == WAREHOUSES


def test_the_quote_size_is_configurable() -> None:
    async def body(client: TestClient) -> Any:
        return await (await client.get("/quotes/42")).json()

    small = run(body, Capacity(warehouses=3))
    assert [w["warehouse"] for w in small["availability"]] == ["WH-0000", "WH-0001", "WH-0002"]
    assert small["unit_cost_cents"] == unit_cost_cents(42)


def test_bad_sku_is_400() -> None:
    async def body(client: TestClient) -> list[int]:
        return [(await client.get(f"/quotes/{s}")).status for s in ("abc", "0", "-1")]

    assert run(body) == [400, 400, 400]


def test_slow_skus_take_their_time_and_hold_a_worker() -> None:
    async def body(client: TestClient) -> tuple[float, int]:
        t0 = time.perf_counter()
        resp = await client.get("/quotes/5")  # slow_every=5: a warehouse check
        return time.perf_counter() - t0, resp.status

    elapsed, status = run(body)
    assert status == 200
    assert elapsed >= 0.3


def test_a_full_queue_sheds_with_503() -> None:
    # 2 workers and 2 queue places: of 8 concurrent slow quotes, 4 are turned away.
    async def body(client: TestClient) -> list[int]:
        resps = await asyncio.gather(*(client.get("/quotes/5") for _ in range(8)))
        return sorted(r.status for r in resps)

    assert run(body) == [200] * 4 + [503] * 4


def test_metrics_count_answers() -> None:
    async def body(client: TestClient) -> str:
        await client.get("/quotes/7")
        await client.get("/quotes/x")
        return await (await client.get("/metrics")).text()

    text = run(body)
    assert 'supplier_requests_total{status="200"} 1.0' in text
    assert 'supplier_requests_total{status="400"} 1.0' in text
    assert "supplier_busy_workers 0.0" in text
    assert (run(lambda c: c.get("/healthz"))).status == 200
