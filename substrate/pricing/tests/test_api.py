"""The pricing API against a stand-in supplier on a real local socket."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from pricing import config
from pricing.config import SupplierClientConfig
from pricing.supplier import SupplierClient

from .conftest import QUICK, StandInSupplier


def test_price_is_cost_plus_markup(with_pricing):
    async def body(client: TestClient, supplier: StandInSupplier) -> dict[str, Any]:
        resp = await client.get("/prices/41")
        assert resp.status == 200
        return await resp.json()

    doc = with_pricing(body)
    assert doc["id"] == 41
    assert doc["sku"] == 41
    assert doc["price_cents"] == round((1000 + 41) * (1 + config.MARKUP))
    assert doc["currency"] == "EUR"
    assert doc["warehouses_in_stock"] == 2


def test_bad_sku_is_400_without_a_supplier_call(with_pricing):
    async def body(client: TestClient, supplier: StandInSupplier) -> tuple[list[int], int]:
        statuses = [(await client.get(f"/prices/{s}")).status for s in ("x1", "0")]
        return statuses, supplier.calls

    assert with_pricing(body) == ([400, 400], 0)


def test_unknown_sku_is_404_and_not_retried(with_pricing):
    async def body(client: TestClient, supplier: StandInSupplier) -> tuple[int, int]:
        return (await client.get("/prices/9")).status, supplier.calls

    assert with_pricing(body, StandInSupplier(script=[404])) == (404, 1)


def test_a_transient_503_is_retried(with_pricing):
    async def body(client: TestClient, supplier: StandInSupplier) -> tuple[int, int]:
        return (await client.get("/prices/9")).status, supplier.calls

    assert with_pricing(body, StandInSupplier(script=[503])) == (200, 2)


def test_persistent_failure_is_502_after_the_allowed_attempts(with_pricing):
    async def body(client: TestClient, supplier: StandInSupplier) -> tuple[int, int, str]:
        resp = await client.get("/prices/9")
        return resp.status, supplier.calls, (await resp.json())["error"]

    status, calls, error = with_pricing(body, StandInSupplier(script=[503] * 10))
    assert status == 502
    assert calls == QUICK.max_attempts
    assert "sku 9" in error


def test_backoff_is_jittered_and_capped():
    cfg = SupplierClientConfig(backoff_base_seconds=0.1, backoff_max_seconds=0.3)
    client = SupplierClient("http://127.0.0.1:1", cfg, session=None)  # type: ignore[arg-type]
    delays = [client.backoff(a) for a in (1, 2, 3, 4) for _ in range(50)]
    assert all(0 <= d <= 0.3 for d in delays)
    assert len({round(d, 6) for d in delays}) > 10  # jittered, not a fixed sleep


def test_metrics_and_health(with_pricing):
    async def body(client: TestClient, supplier: StandInSupplier) -> tuple[int, str]:
        await client.get("/prices/3")
        health = (await client.get("/healthz")).status
        return health, await (await client.get("/metrics")).text()

    health, text = with_pricing(body, StandInSupplier(script=[503]))
    assert health == 200
    assert 'pricing_http_requests_total{route="/prices/{sku}",status="200"} 1.0' in text
    assert "pricing_supplier_attempts_total 2.0" in text
