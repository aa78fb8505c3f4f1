"""A stand-in supplier for the pricing tests.

The real supplier (substrate/supplier) is a separate service that is not importable from
this tree; these tests run the pricing app against a small aiohttp stand-in on a real
local socket whose answers each test scripts (status per attempt, delay).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from pricing.app import create_app
from pricing.config import SupplierClientConfig

QUICK = SupplierClientConfig(
    timeout_seconds=0.5, max_attempts=3, backoff_base_seconds=0.01, backoff_max_seconds=0.02
)


@dataclass
class StandInSupplier:
    """Answers /quotes/{sku}; `script` gives the status of successive attempts."""

    script: list[int] = field(default_factory=list)
    delay: float = 0.0
    calls: int = 0

    def quote(self, sku: int) -> dict[str, Any]:
        return {
            "sku": sku,
            "unit_cost_cents": 1000 + sku,
            "currency": "EUR",
            "availability": [
                {"warehouse": "WH-0001", "quantity": sku % 3, "eta_days": 2},
                {"warehouse": "WH-0002", "quantity": 5, "eta_days": 4},
            ],
        }

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        status = self.script.pop(0) if self.script else 200
        if self.delay:
            await asyncio.sleep(self.delay)
        if status != 200:
            return web.json_response({"error": "scripted"}, status=status)
        return web.json_response(self.quote(int(request.match_info["sku"])))


Body = Callable[[TestClient, StandInSupplier], Awaitable[Any]]


@pytest.fixture
def with_pricing() -> Callable[..., Any]:
    """Run ``body(client, supplier)`` against the pricing app in front of a stand-in."""

    def run(body: Body, supplier: StandInSupplier | None = None, **kw: Any) -> Any:
        stand_in = supplier or StandInSupplier()

        async def main() -> Any:
            upstream = web.Application()
            upstream.router.add_get("/quotes/{sku}", stand_in.handle)
            async with TestServer(upstream) as up:
                app = create_app(str(up.make_url("")), supplier_config=kw.get("config", QUICK))
                async with TestClient(TestServer(app)) as client:
                    return await body(client, stand_in)

        return asyncio.run(main())

    return run
