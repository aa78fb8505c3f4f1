from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from .conftest import SMALL_PRODUCTS

EXPECTED_FIELDS = {"id", "name", "category", "price_cents", "rating", "review_count", "top_reviews"}


def expected_product(db_path: Path, product_id: int) -> dict[str, Any]:
    """The product as computed straight from SQL, independent of the service code."""
    conn = sqlite3.connect(db_path)
    try:
        name, category, price = conn.execute(
            "SELECT name, category, price_cents FROM products WHERE id = ?", (product_id,)
        ).fetchone()
        ratings = [
            r
            for (r,) in conn.execute(
                "SELECT rating FROM reviews WHERE product_id = ?", (product_id,)
            )
        ]
        top_ids = [
            i
            for (i,) in conn.execute(
                "SELECT id FROM reviews WHERE product_id = ? "
                "ORDER BY helpful_votes DESC, id LIMIT 3",
                (product_id,),
            )
        ]
    finally:
        conn.close()
    return {
        "id": product_id,
        "name": name,
        "category": category,
        "price_cents": price,
        "review_count": len(ratings),
        "rating": round(sum(ratings) / len(ratings), 2) if ratings else 0.0,
        "top_review_ids": top_ids,
    }


def test_product_matches_database(with_client, db_path):
    async def body(client: TestClient) -> dict[str, Any]:
        resp = await client.get("/products/3")
        assert resp.status == 200
        assert resp.content_type == "application/json"
        return await resp.json()

    product = with_client(body)
    want = expected_product(db_path, 3)
    assert set(product) == EXPECTED_FIELDS
    assert isinstance(product["rating"], float)
    assert product["review_count"] == want["review_count"] > 0
    assert product["rating"] == pytest.approx(want["rating"])
    assert 1.0 <= product["rating"] <= 5.0
    for key in ("id", "name", "category", "price_cents"):
        assert product[key] == want[key]
    assert [r["id"] for r in product["top_reviews"]] == want["top_review_ids"]
    votes = [r["helpful_votes"] for r in product["top_reviews"]]
    assert votes == sorted(votes, reverse=True)


def test_every_product_is_its_own(with_client, db_path):
    """Fetching many products from one process returns each one's own data."""

    async def body(client: TestClient) -> list[dict[str, Any]]:
        out = []
        for pid in [*range(1, SMALL_PRODUCTS + 1), 1, 2]:
            resp = await client.get(f"/products/{pid}")
            assert resp.status == 200, pid
            out.append(await resp.json())
        return out

    products = with_client(body)
    assert [p["id"] for p in products] == [*range(1, SMALL_PRODUCTS + 1), 1, 2]
    for product in products:
        want = expected_product(db_path, product["id"])
        assert product["name"] == want["name"]
        assert product["review_count"] == want["review_count"]
        assert product["rating"] == pytest.approx(want["rating"])


@pytest.mark.parametrize("product_id", ["0", str(SMALL_PRODUCTS + 1), "99999999999999999999999"])
def test_unknown_product_is_404_json(with_client, product_id):
    async def body(client: TestClient) -> tuple[int, Any]:
        resp = await client.get(f"/products/{product_id}")
        return resp.status, await resp.json()

    status, payload = with_client(body)
    assert status == 404
    assert "error" in payload


@pytest.mark.parametrize("product_id", ["abc", "1.5", "-3", "%201"])
def test_non_integer_id_is_400(with_client, product_id):
    async def body(client: TestClient) -> tuple[int, Any]:
        resp = await client.get(f"/products/{product_id}")
        return resp.status, await resp.json()

    status, payload = with_client(body)
    assert status == 400
    assert "error" in payload


def test_healthz(with_client):
    async def body(client: TestClient) -> tuple[int, str]:
        resp = await client.get("/healthz")
        return resp.status, await resp.text()

    assert with_client(body) == (200, "ok")


def test_metrics_count_requests(with_client):
    async def body(client: TestClient) -> tuple[int, str, str]:
        for _ in range(3):
            assert (await client.get("/healthz")).status == 200
        assert (await client.get("/products/1")).status == 200
        assert (await client.get("/products/nope")).status == 400
        resp = await client.get("/metrics")
        return resp.status, resp.headers["Content-Type"], await resp.text()

    status, content_type, text = with_client(body)
    assert status == 200
    assert content_type.startswith("text/plain")
    assert 'catalog_http_requests_total{method="GET",route="/healthz",status="200"} 3.0' in text
    assert (
        'catalog_http_requests_total{method="GET",route="/products/{id}",status="400"} 1.0' in text
    )
    assert "catalog_http_request_duration_seconds_bucket{" in text
    assert (
        'catalog_http_request_duration_seconds_count{method="GET",route="/products/{id}",'
        'status="200"} 1.0' in text
    )


def test_apps_have_separate_registries(with_client):
    """Two apps in one process must not share (or collide on) metric registries."""

    async def body(client: TestClient) -> str:
        await client.get("/healthz")
        return await (await client.get("/metrics")).text()

    first = with_client(body)
    second = with_client(body)
    line = 'catalog_http_requests_total{method="GET",route="/healthz",status="200"} 1.0'
    assert line in first
    assert line in second
