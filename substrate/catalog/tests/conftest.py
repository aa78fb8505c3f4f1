from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from catalog import seed
from catalog.app import create_app

SMALL_PRODUCTS = 20
SMALL_REVIEWS = 2_000

Body = Callable[[TestClient], Awaitable[Any]]


@pytest.fixture(scope="session")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("catalog") / "catalog.db"
    seed.build(path, products=SMALL_PRODUCTS, reviews=SMALL_REVIEWS, seed=7)
    return path


@pytest.fixture
def with_client(db_path: Path) -> Callable[[Body], Any]:
    """Run an async ``body(client)`` against a fresh app on a real local socket."""

    def run(body: Body) -> Any:
        async def main() -> Any:
            async with TestClient(TestServer(create_app(str(db_path)))) as client:
                return await body(client)

        return asyncio.run(main())

    return run
